"""Which engines a serving file runs: one instance (sim.apps.serve.simulator), data-parallel
replicas behind a router (sim.apps.serve.router), or prefill and decode pools
(sim.apps.serve.disagg). The one place the CLI and run.serve ask."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from sim.apps.serve.closed import ClosedLoopSim, benchmark_figures, instance_devices, pool_figures
from sim.apps.serve.disagg import Disagg
from sim.apps.serve.energy import instance_board
from sim.apps.serve.simulator import DONE, ServeResult, ServeSim
from sim.apps.serve.router import merge, policy_of, replica_count, replica_figures, run_replicas
from sim.apps.serve.instance import Setup
from sim.apps.serve.spec import Closed, ServeFile
from sim.apps.serve.traces import Requests
from sim.core.errors import ConfigError, SimError


def serve_stream(file: ServeFile, setup: Setup, reqs: Requests,
                 progress: Callable[[int, int], None] | None = None,
                 cache: dict | None = None, watch: Callable[[ServeSim], None] | None = None
                 ) -> tuple[ServeResult, dict[str, Any]]:
    """The run's result and the summary entries beyond sim.apps.serve.metrics.summarize's (`placed`: how a kind
    that places its own KV placed the batch). Disaggregated pools take their own presets (`setup`'s machine is not
    used). `watch` looks at a single instance's run as it goes (ServeSim), open- or closed-loop; routers and
    pools run without it."""
    res, extra = _stream(file, setup, reqs, progress, cache, watch)
    return res, {**extra, "placed": setup.placed} if setup.placed else extra


def _stream(file: ServeFile, setup: Setup, reqs: Requests, progress: Callable[[int, int], None] | None,
            cache: dict | None, watch: Callable[[ServeSim], None] | None) -> tuple[ServeResult, dict[str, Any]]:
    loop = file.serving.arrivals
    if isinstance(loop, Closed):
        if file.serving.disaggregated is not None or file.serving.router is not None:
            raise ConfigError(f"{file.source}: serving.arrivals.process: closed drives one instance; a router or "
                              "disaggregated pools under a closed loop are not modelled")
        sim = ClosedLoopSim(setup, reqs, progress, watch=watch)
        res = sim.run()
        res.board = instance_board(setup)   # idle power and the devices the per-device figures divide by
        res = check_finite(res, file, setup.machine.source or setup.machine.name)
        bench = benchmark_figures(res, instance_devices(setup), loop.warmup_requests)
        pool = pool_figures(sim)   # the client's connection pool, where the loop has one
        # what tokens/s per device divides by: the benchmarks' "per GPU", a chip or a socket on other kinds (a trial)
        return res, dict(benchmark=bench | dict(device="GPU" if setup.machine.kind in ("gpu", "pim") else "device",
                                                warmup_requests=loop.warmup_requests) | ({"client_pool": pool} if pool else {}))
    if file.serving.disaggregated is not None:
        exact = setup.target_cost.op_level
        res, extra = Disagg(file, reqs, exact, cache).run()
        return check_finite(res, file, "serving.disaggregated: its presets or transfer link"), extra
    hw = setup.machine.source or setup.machine.name
    n = replica_count(file)
    if n == 1 and file.serving.router is None:
        res, extra = ServeSim(setup, reqs, progress, watch).run(), {}
    else:
        policy = policy_of(file)
        results, where = run_replicas(setup, reqs, n, policy, progress)
        reps = replica_figures(results, where)
        res, extra = merge(results, where), dict(router=policy, replicas=reps, engine_busy=sum(r["busy"] for r in reps) / n)
    res.board = instance_board(setup)
    return check_finite(res, file, hw), extra


def check_finite(res: ServeResult, file: ServeFile, hw: str) -> ServeResult:
    """Iteration times or finishes of NaN or infinity came from hardware figures out of any
    physical range (a bandwidth of 1e-300 B/s): say so instead of summarizing them, as
    sim run does (sim.core.results.check_finite)."""
    done = res.requests["status"] == DONE
    for what, v in (("iteration time", res.iterations["duration_s"]), ("finish time", res.requests["finish_s"][done]),
                    ("makespan", np.array([res.makespan_s]))):
        finite = np.isfinite(v)
        with np.errstate(over="ignore"):
            # Finite times whose sum overflows (1e307 s) would make every mean and throughput NaN too.
            value = v[~finite][0] if not finite.all() else v.max() if not np.isfinite(v.sum()) else None
        if value is not None:
            raise SimError(f"{file.source}: the simulated {what} is {value:.3g} s: a rate or size in the hardware "
                           f"({hw}) is out of any physical range")
    return res

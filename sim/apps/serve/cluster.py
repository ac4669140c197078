"""Which engines a serving file runs: one instance (sim.apps.serve.engine), data-parallel
replicas behind a router (sim.apps.serve.router), or prefill and decode pools
(sim.apps.serve.disagg). The one place the CLI and run.serve ask."""

from __future__ import annotations

from typing import Any, Callable

from sim.apps.serve.disagg import Disagg
from sim.apps.serve.engine import ServeResult, ServeSim
from sim.apps.serve.router import merge, policy_of, replica_count, replica_figures, run_replicas
from sim.apps.serve.setup import Setup
from sim.apps.serve.stepcost import ExactCost
from sim.apps.serve.spec import ServeFile
from sim.apps.serve.traces import Requests


def serve_stream(file: ServeFile, setup: Setup, reqs: Requests,
                 progress: Callable[[int, int], None] | None = None,
                 cache: dict | None = None) -> tuple[ServeResult, dict[str, Any]]:
    """The run's result and the summary entries beyond sim.apps.serve.metrics.summarize's.
    Disaggregated pools take their own presets (`setup`'s machine is not used)."""
    if file.serving.disaggregated is not None:
        # A cost split over attention groups (attention_dp.GroupedCost) wraps the dense one.
        exact = isinstance(getattr(setup.target_cost, "dense", setup.target_cost), ExactCost)
        return Disagg(file, reqs, exact, cache).run()
    n = replica_count(file)
    if n == 1 and file.serving.router is None:
        return ServeSim(setup, reqs, progress).run(), {}
    policy = policy_of(file)
    results, where = run_replicas(setup, reqs, n, policy, progress)
    reps = replica_figures(results, where)
    extra = dict(router=policy, replicas=reps, engine_busy=sum(r["busy"] for r in reps) / n)
    return merge(results, where), extra

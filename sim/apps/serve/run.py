"""The public entry point of a serving run."""

from __future__ import annotations

from typing import Callable

from hw_models.machine import Machine
from hw_models.power import busy_time_note
from sim.apps.serve.arrivals import make_requests
from sim.apps.serve.cluster import serve_stream
from sim.apps.serve.engine_defaults import with_engine_defaults
from sim.apps.serve.invariants import check_run
from sim.apps.serve.simulator import ServeResult, ServeSim
from sim.apps.serve.metrics import summarize
from sim.apps.serve.disagg import instance_setup
from sim.apps.serve.lazytable import flush_all
from sim.apps.serve.spec import ServeFile
from sim.apps.serve.serving_mapper import engine_terms
from sim.apps.serve.traces import Requests
from sim.core.errors import CapacityError


def serve(file: ServeFile, machine: Machine, exact: bool = False, cache: dict | None = None,
          progress: Callable[[int, int], None] | None = None, requests: Requests | None = None,
          watch: Callable[[ServeSim], None] | None = None) -> tuple[ServeResult, dict]:
    """Simulate the file's request stream on `machine`: the per-request and per-iteration
    result, and its summary (sim.apps.serve.metrics.summarize). `watch`: cluster.serve_stream."""
    file = with_engine_defaults(file, machine)
    setup = instance_setup(file, machine, exact, cache)
    reqs = requests if requests is not None else make_requests(file)
    result, extra = serve_stream(file, setup, reqs, progress, cache, watch)
    flush_all()   # the step-cost points this run computed, to the persistent cache
    summary = summary_of(file, setup.machine, result, extra)
    check_run(result, summary, file.source or file.name)
    return result, summary


def refuse_unserved(file: ServeFile, summary: dict) -> None:
    """A stream whose every request was rejected: its figures are of nothing (rates 0, idle energy), so `sim serve`
    and the API's serve fail, one line with the reasons, as a model that does not fit does (it had exited 0)."""
    if summary["requests"] and summary["rejected"] == summary["requests"]:
        raise CapacityError(f"{file.source}: all {summary['requests']} requests were rejected ("
                            + "; ".join(f"{n}: {why}" for why, n in summary["rejected_reasons"].items()) + ")")


def summary_of(file: ServeFile, machine: Machine, result: ServeResult, extra: dict) -> dict:
    """The run's summary (sim.apps.serve.metrics.summarize under the file's SLO) with the stream's `extra` figures
    and the stack's per-request delay, which the latencies hold: they count from the send (docs/serving.md)."""
    summary = summarize(result, file.serving.slo)
    summary.update(extra)
    eo = engine_terms(file, machine)
    summary["request_delay_s"] = eo.request_delay_s(file.serving.deployment) if eo else 0.0
    e = summary["energy"]   # a busy-time preset's J/token says what it counts (hw_models.power.busy_time_note)
    if note := busy_time_note(machine, e["total_j"], result.makespan_s * result.instances, e["devices"] / max(result.instances, 1),
                              whole_run=machine.kind == "spatial"):
        e["note"] = note
    return summary

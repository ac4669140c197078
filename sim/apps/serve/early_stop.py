"""Stop a capacity-search step once its SLO verdict is settled (issue 30): a run whose violations of a
percentile SLO already exceed what its whole stream may hold fails whatever its remaining requests
do, so the rest of it is not simulated. The verdict is certain, not estimated: the search finds the
same capacity as with every step run to its end (tests/test_serve_early_stop.py).

A percentile p_q of n completed requests is met when at least idx(n) + 1 of them are within the limit,
idx(n) the inverted-CDF index of sim.apps.serve.metrics.stats. n is at most the stream's N and
n - idx(n) - 1 (the violations allowed) grows with n, so more than N - idx(N) - 1 known violations
fail the step for certain. A `max` SLO fails at its first violation. Known: TTFT and queueing delay
of every request past its first token or its scheduling (it completes: nothing is dropped once
admitted), TPOT and E2E of completed requests. Mean and TBT SLOs (the gap distribution, weighted) are
never settled early. A closed loop (sim.apps.serve.closed) settles the same way: a request not yet sent
has no value known, and one sent has final values once known, whenever its client sent it.

A settled step's summary is over the requests done when it stopped (marked `settled`); its `slo_met`
entry for the settling SLO is a lower bound of the full run's value, the (allowed + 1)-th largest
known value (the full run's p_q is at least that); its other entries are over the requests done.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.apps.serve.metrics import summarize
from sim.apps.serve.simulator import DONE, REJECTED, ServeSim


class Settled(Exception):
    """A step's SLO verdict is a certain failure before its stream ran out; the partial summary."""

    def __init__(self, summary: dict[str, Any]):
        super().__init__(summary)   # the one argument: simpy rebuilds a process's exception from its args
        self.summary = summary


def allowed_violations(n: int, stat: str) -> int | None:
    """Violations a `stat` SLO (p50, p90, p99, max) allows among n requests; None for others (mean)."""
    if stat == "max":
        return 0
    if not (stat.startswith("p") and stat[1:].isdigit()):
        return None
    idx = int(np.searchsorted(np.arange(1, n + 1, dtype=float), int(stat[1:]) / 100 * n))   # as metrics.stats
    return n - min(idx, n - 1) - 1


def known(rec: dict[str, np.ndarray], metric: str) -> np.ndarray | None:
    """The metric's values of the requests whose value is final already (module doc)."""
    arr, first, fin = rec["arrival_s"], rec["first_token_s"], rec["finish_s"]
    live = rec["status"] != REJECTED
    if metric == "ttft":
        return (first - arr)[live & ~np.isnan(first)]
    if metric == "queue":
        return (rec["scheduled_s"] - arr)[live & ~np.isnan(rec["scheduled_s"])]
    done = rec["status"] == DONE
    if metric == "e2e":
        return (fin - arr)[done]
    if metric == "tpot":
        out = rec["output_tokens"][done]
        return ((fin - first)[done] / np.maximum(out - 1, 1))[out > 1]
    return None


def settled_failure(rec: dict[str, np.ndarray], slo: dict[str, float]) -> tuple[str, int, int, float] | None:
    """(SLO, known violations, violations allowed, lower bound of its value) of the first SLO the run
    fails for certain, or None while every verdict is open."""
    n = len(rec["status"])
    for key, limit in slo.items():
        metric, _, stat = key.partition("_")
        allowed = allowed_violations(n, stat)
        values = known(rec, metric) if allowed is not None else None
        if values is None:
            continue
        bad = np.sort(values[values > limit])[::-1]
        if len(bad) > allowed:
            return key, len(bad), allowed, float(bad[allowed])
    return None


class Watch:
    """ServeSim's `watch`: raises Settled, with the partial run's summary, once a verdict is certain."""

    def __init__(self, slo: dict[str, float]):
        self.slo = slo

    def __call__(self, sim: ServeSim) -> None:
        found = settled_failure(sim.rec, self.slo)
        if found is None:
            return
        key, bad, allowed, bound = found
        summary = summarize(sim.result(sim.env.now), self.slo)
        summary["slo_met"][key] = bound / self.slo[key]
        # the requests whose figure is known (a first token for TTFT): a closed loop's first wave can fail its TTFT
        # before any request completes (it read "stopped after 0 requests (33 over it)")
        seen = len(known(sim.rec, key.partition("_")[0]))
        summary["settled"] = dict(slo=key, violations=bad, allowed=allowed, requests_done=seen,
                                  confidence="certain: the remaining requests cannot meet it")
        raise Settled(summary)

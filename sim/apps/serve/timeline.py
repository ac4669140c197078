"""Per-iteration step functions of a serving run binned over time (numpy only): the KV-usage timeline a
sweep point stores and the spans the kv_and_batch plot draws. Apart from sim.apps.serve.output, which
loads pandas and matplotlib, so that a sweep's worker process does not import them for every point's
200 numbers."""

from __future__ import annotations

import numpy as np

from sim.apps.serve.simulator import ServeResult


def kv_timeline(res: ServeResult, bins: int = 200) -> dict[str, list[float]]:
    """The share of the KV pool in use over the run, as the time-weighted mean over `bins` equal spans of
    [0, makespan]: each iteration's count holds from its start to the next one's (as kv_and_batch.png
    draws it). `t_s`: the spans' midpoints. Exact: the integral of a step function is piecewise linear."""
    t, share = binned_mean(res, summed_over_instances(res.iterations, res.iterations["kv_blocks_used"]) / max(res.total_blocks, 1),
                           bins) \
        if len(res.iterations["start_s"]) else ([], [])
    return dict(t_s=list(t), kv_share=list(share))


def summed_over_instances(it: dict[str, np.ndarray], values: np.ndarray) -> np.ndarray:
    """A per-iteration count (KV blocks, sequences) as the whole run holds it from each iteration's start: one
    instance's own; merged instances (replicas, pools: iterations["instance"]) the sum of every instance's
    latest, for an instance's count holds until its own next iteration, not the next one of another. `it`: the
    run's iterations (ServeResult.iterations)."""
    values = np.asarray(values, dtype=float)
    if "instance" not in it:
        return values
    idx = np.arange(len(values))
    total = np.zeros(len(values))
    for k in np.unique(it["instance"]):
        last = np.maximum.accumulate(np.where(it["instance"] == k, idx, -1))   # its latest iteration so far
        total += np.where(last >= 0, values[np.maximum(last, 0)], 0.0)
    return total


def running_steps(res: ServeResult, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(knots, levels) of a per-iteration count that holds only while its iteration runs (the sequences in a
    batch), summed over the instances: an idle instance counts 0, not its last batch carried forward (the
    plot of three replicas read 3 where the per-request table had 1 request in service)."""
    it = res.iterations
    start = np.asarray(it["start_s"], dtype=float)
    values = np.asarray(values, dtype=float)
    t = np.concatenate([start, start + it["duration_s"]])
    order = np.argsort(t, kind="stable")
    t, level = t[order], np.cumsum(np.concatenate([values, -values])[order])
    last = np.append(t[1:] != t[:-1], True)   # the level once every event at one instant is in
    return t[last], level[last]


def binned_mean(res: ServeResult, values: np.ndarray, bins: int = 200,
                knots: np.ndarray | None = None) -> tuple[list[float], list[float]]:
    """(midpoints, time-weighted means) of a step function over `bins` equal spans of [0, makespan]: `values`
    from each of `knots` (the iterations' starts unless given) to the next. Empty when nothing ran."""
    it, end = res.iterations, res.makespan_s
    if not len(it["start_s"]) or end <= 0:
        return [], []
    knots = np.append(it["start_s"] if knots is None else knots, end)
    area = np.concatenate([[0.0], np.cumsum(np.asarray(values, dtype=float) * np.diff(knots))])
    edges = np.linspace(0.0, end, bins + 1)
    # Before the first iteration nothing is held: the integral is 0 up to its start.
    acc = np.interp(edges, np.concatenate([[0.0], knots]), np.concatenate([[0.0], area]))
    return ((edges[:-1] + edges[1:]) / 2).tolist(), (np.diff(acc) / np.diff(edges)).tolist()


def binned_range(res: ServeResult, values: np.ndarray, bins: int = 200,
                 knots: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per span of binned_mean, the least and largest value taken at a knot in it (NaN if none)."""
    start, end = res.iterations["start_s"] if knots is None else knots, res.makespan_s
    idx = np.minimum((np.asarray(start) / end * bins).astype(int), bins - 1) if end > 0 else np.zeros(0, int)
    lo, hi = np.full(bins, np.nan), np.full(bins, np.nan)
    for i, v in zip(idx, values):
        lo[i] = v if np.isnan(lo[i]) else min(lo[i], v)
        hi[i] = v if np.isnan(hi[i]) else max(hi[i], v)
    return lo, hi

"""The period of a closed pipeline: the kinds that pipeline a model's layers over devices (the spatial kind's
chips, the gpu kind's pipeline-parallel stages) serve an iteration as micro-batches in flight together.

Each micro-batch visits its stations (a stage's compute, a hop between stages) in order; a sequence's next
token cannot enter before its previous one has left the last station. The iteration then occupies the
pipeline for the larger of the slowest micro-batch's fill latency (it cannot come back sooner) and the
busiest station's total work (every micro-batch passes it once): for m identical micro-batches over
stations of times t_s, max(sum t_s, m x max t_s), the max-plus form of a closed tandem queue
(hw_models.spatial.pipeline's module doc)."""

from __future__ import annotations


def iteration_period_s(micro_batches: list[list[tuple[str, float]]], copies: list[int] | None = None) -> float:
    """The time one serving iteration occupies the pipeline when its micro-batches (each a list of
    (station, seconds), in the same order) are all in flight and each must finish before its sequences enter
    again (module doc); for unlike micro-batches that bound, the prefill chunks and decode groups interleaving.

    `copies[i]` alike micro-batches of entry i that one sequence needs together (a prompt's compiled
    chunks: its first token waits for the last) enter back to back, so their fill is the tandem's
    makespan, sum of the stations + (copies - 1) x the slowest (the module doc's max-plus form with
    every arrival at 0), and each station carries them all."""
    copies = copies or [1] * len(micro_batches)
    fill = max(sum(t for _, t in st) + (k - 1) * max((t for _, t in st), default=0.0)
               for st, k in zip(micro_batches, copies))
    load: dict[str, float] = {}
    for st, k in zip(micro_batches, copies):
        for res, t in st:
            load[res] = load.get(res, 0.0) + k * t
    return max(fill, max(load.values()))

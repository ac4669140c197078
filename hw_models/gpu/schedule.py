"""What a parallel plan's step schedule looks like from outside: which engine resource
stands for which devices and links (the Chrome trace's lanes), and what the schedule
measures (time in collectives per device, the pipeline bubble).

Engine resources of a plan (hw_models.gpu.parallel): stage j of the pipeline runs on
`stage_resource(unit, j)` (the unit itself for stage 0, `<unit>.s<j>` after), TP/EP
collectives of a single-stage plan on `link`, and the activation send from stage j to
j + 1 on `link.s<j>`. One rank per stage is simulated (the ranks of a TP/EP group do
the same work), so a resource stands for every device of its stage: rank
d = j * width + i (width = max(tp, ep), i the rank in the group) runs stage j, and
its link is its port to the node's switch (NVLink to NVSwitch, or PCIe).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hw_models.gpu.stage_ops import StageOps, StageTemplate
from hw_models.pipeline_period import iteration_period_s
from sim.core.engine import Timeline
from sim.core.results import InnerOp

LINK = "link"

# A micro-batch's seconds on one rank by part ("embed", "layer", "head", an unlike layer's index), of that in
# collectives, its dynamic joules, and the timeline's template for the op records (ParallelGpuMapper._stage_parts).
StageParts = tuple[dict, dict, dict, StageTemplate, dict]   # ... and each part's ops by what the SM clock paces


def split_micro_batches(seqs, m: int) -> list[tuple[tuple[int, int], ...]]:
    """A serving iteration's (q_len, kv_len) sequences cut into at most `m` micro-batches of near-equal work:
    largest first, each to the group with the fewest tokens so far (then the least KV to read, then the fewest
    sequences), so decode counts differ by at most one and a prompt chunk stays whole; empty groups dropped."""
    groups: list[list[tuple[int, int]]] = [[] for _ in range(max(1, m))]
    load = [(0, 0, 0)] * len(groups)
    for q, kv in sorted(seqs, key=lambda s: (-s[0], -s[1])):
        g = min(range(len(groups)), key=lambda i: (load[i], i))
        groups[g].append((q, kv))
        load[g] = (load[g][0] + q, load[g][1] + kv, load[g][2] + 1)
    return [tuple(g) for g in groups if g]


def stage_resource(unit: str, stage: int) -> str:
    """The engine resource of pipeline stage `stage` (stage 0 runs on the unit itself)."""
    return unit if stage == 0 else f"{unit}.s{stage}"


@dataclass(frozen=True)
class StageCost:
    """A whole pipeline stage of one micro-batch: the tag of its engine task; `collective_s` of it in
    TP/EP collectives. op_records reads its ops (`ops`, hw_models.gpu.stage_ops), or, without them,
    the stage as one record (kind, bytes, bound, path, energy_j)."""

    name: str
    duration_s: float
    collective_s: float = 0.0
    kind: str = "stage"
    bytes: float = 0.0
    bound: str = "compute"
    path: str = "pipeline stage"
    energy_j: float = 0.0
    ops: StageOps | None = field(default=None, compare=False, repr=False)
    clock: dict[str, float] | None = field(default=None, compare=False, repr=False)   # hw_models.clock's counters

    def inner_ops(self) -> list[InnerOp]:
        """The stage's ops one after another from its start (sim.core.results.op_records); [] when unknown."""
        return self.ops.ops() if self.ops is not None else []


def rank_lane(rank: int) -> str:
    return f"rank {rank}"


def link_lane(rank: int) -> str:
    return f"rank {rank} link"


def lane_layout(unit: str, width: int, pp: int) -> dict[str, list[str]]:
    """Engine resource -> the trace lanes it stands for: every device of its stage (compute)
    or the links of those devices (collectives; a send on the sending stage's links).
    Device lanes first, then link lanes, in rank order."""
    ranks = [list(range(j * width, (j + 1) * width)) for j in range(pp)]
    lanes = {stage_resource(unit, j): [rank_lane(d) for d in ranks[j]] for j in range(pp)}
    if pp == 1:
        lanes[LINK] = [link_lane(d) for d in ranks[0]]
    for j in range(pp - 1):
        lanes[f"{LINK}.s{j}"] = [link_lane(d) for d in ranks[j]]
    return lanes


def _stage_of_link(resource: str) -> int | None:
    """Stage whose devices send on `resource` (`link` is stage 0's, `link.s<j>` stage j's)."""
    if resource == LINK:
        return 0
    head, _, tail = resource.partition(".s")
    return int(tail) if head == LINK and tail.isdigit() else None


def collective_seconds(tl: Timeline, unit: str, pp: int) -> list[float]:
    """Per stage, the seconds one of its devices spends in collectives over the step: the
    TP/EP collectives it runs (link tasks, or inside whole-stage tasks) and the activation
    sends it makes or receives (a send/recv engages both ends)."""
    stage = {stage_resource(unit, j): j for j in range(pp)}
    out = [0.0] * pp
    for iv in tl.intervals:
        j = _stage_of_link(iv.resource)
        if j is not None:
            out[j] += iv.duration_s
            if iv.resource != LINK and j + 1 < pp:
                out[j + 1] += iv.duration_s   # the receiving stage
        elif iv.resource in stage:
            out[stage[iv.resource]] += getattr(iv.tag, "collective_s", 0.0)
    return out


def steady_period_s(tl: Timeline) -> float:
    """A decode step of a pipelined plan in steady state: its micro-batches (tasks `mb<i>.*`) stay in flight from
    one step to the next, each entering again once its token has left the last stage, so a step takes the closed
    pipeline's period (hw_models.pipeline_period), not the fill and drain of `tl` run from an empty pipeline."""
    mbs: dict[str, list[tuple[str, float]]] = {}
    for iv in sorted(tl.intervals, key=lambda iv: iv.start_s):
        mbs.setdefault(iv.task.split(".")[0], []).append((iv.resource, iv.duration_s))
    return iteration_period_s(list(mbs.values())) if mbs else 0.0


def stage_idle(tl: Timeline, unit: str, pp: int, span_s: float | None = None) -> list[float]:
    """Per stage, the fraction of the step (`span_s`, default the timeline's makespan) its devices' compute
    stream is idle (the pipeline bubble as the schedule leaves it; waiting for collectives included)."""
    span, busy = (tl.makespan_s if span_s is None else span_s), tl.busy_s()
    return [1.0 - busy.get(stage_resource(unit, j), 0.0) / span if span else 0.0 for j in range(pp)]

"""The ops inside a pipeline stage's task (hw_models.gpu.parallel.ParallelGpuMapper.pipeline_tasks).

A pipelined step is scheduled as whole stages: one task per stage and micro-batch, whose time is its
layers' TP tasks (kernels, TP/EP collectives, host launches) one after another, summed from one
micro-batch's TP timeline of a few lowered layers (one repeating layer stands for the rest). The
schedule needs no more, but the per-op table, the JSON's ops and the roofline read op records, and a
stage task has no FLOPs or bytes of its own. So the stage's tag carries StageOps: that same timeline by
part (embedding, each lowered layer, head), which sim.core.results.op_records lays out one after
another from the stage's start, each layer of the stage named as itself (L40.q_proj, ...). The
records' times add up to the stage's task (for a layer period of 1; under a longer period, as
Gemma-2's alternating attention, the stage charges each layer the period's mean and the records each
layer its own); the schedule, and so every step time and energy, is untouched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate

from sim.core.engine import Timeline
from sim.core.results import InnerOp, layer_of

PartKey = str | int   # "embed", "head", or a lowered layer's index

# The prefix of a stage's op records: pipeline_tasks names a stage's task mb<i>.stage<j>, op_records its ops
# `<task>.<op>` (mb0.stage1.L40.q_proj)
_STAGE = re.compile(r"^mb(\d+)\.stage\d+\.")


def split_stage(name: str) -> tuple[int | None, str]:
    """(micro-batch, the op's own name) of a pipelined step's op record; (None, name) for any other record."""
    m = _STAGE.match(name)
    return (int(m.group(1)), name[m.end():]) if m else (None, name)


def part_of(task: str) -> PartKey:
    """The part of a stage a task of the TP timeline belongs to: its layer, else the embedding or the head."""
    layer = layer_of(task)
    if layer is not None:
        return layer
    return "embed" if task.startswith("embed") else "head"


@dataclass(frozen=True, eq=False)
class StageTemplate:
    """One micro-batch's TP timeline on one rank, by part: each part's tasks one after another, offsets
    from the part's start, a layer's names without their `L<i>.` (the layer they stand for adds it)."""

    parts: dict[PartKey, tuple[InnerOp, ...]]
    spans: dict[PartKey, float]   # each part's seconds, its tasks one after another
    start: int                    # the first lowered layer of the repeating ones
    period: int                   # the model's layer period
    unlike: int                   # layers before this one are each unlike the rest (lowered each)

    @classmethod
    def of(cls, tl: Timeline, start: int, period: int, unlike: int) -> StageTemplate:
        by_part: dict[PartKey, list] = {}
        for iv in sorted(tl.intervals, key=lambda i: (i.start_s, i.task)):
            by_part.setdefault(part_of(iv.task), []).append(iv)
        parts, spans = {}, {}
        for key, ivs in by_part.items():
            cut = len(f"L{key}.") if isinstance(key, int) else 0
            offsets = list(accumulate((iv.duration_s for iv in ivs), initial=0.0))
            parts[key] = tuple(InnerOp(iv.task[cut:], off, iv.duration_s, iv.tag) for iv, off in zip(ivs, offsets))
            spans[key] = offsets[-1]
        return cls(parts, spans, start, period, unlike)

    def lowered(self, layer: int) -> int:
        """The lowered layer whose tasks `layer` runs: itself where it is unlike the rest, else the
        repeating layer of its place in the period (as the stage's time counts it, pipeline_tasks)."""
        return layer if layer < self.unlike else self.start + (layer - self.start) % self.period

    def ops(self, first: int, layers: int, embed: bool, head: bool) -> list[InnerOp]:
        """A stage's ops, one after another from its start: the embedding (first stage), layers
        first..first + layers - 1, the final norm and LM head (last stage)."""
        keys: list[tuple[str, PartKey]] = [("", "embed")] if embed else []
        keys += [(f"L{k}.", self.lowered(k)) for k in range(first, first + layers)]
        keys += [("", "head")] if head else []
        out, t = [], 0.0
        for prefix, key in keys:
            out.extend(InnerOp(prefix + p.name, t + p.offset_s, p.duration_s, p.tag) for p in self.parts.get(key, ()))
            t += self.spans.get(key, 0.0)
        return out


@dataclass(frozen=True, eq=False)
class StageOps:
    """Which of a template's parts one stage runs (StageCost.inner_ops)."""

    template: StageTemplate
    first: int
    layers: int
    embed: bool
    head: bool

    def ops(self) -> list[InnerOp]:
        return self.template.ops(self.first, self.layers, self.embed, self.head)

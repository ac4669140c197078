"""What a measured run becomes, whatever the input format: a `Trace` holds the
`MeasuredOp`s and the `StepShape` of each step, enough to rebuild the simulated
op graph (sim.apps.trace.shapes) and compare op by op (sim.apps.trace.validate)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from sim.core.engine import Interval, Timeline
from sim.core.model import ModelConfig


@dataclass(frozen=True)
class MeasuredOp:
    """One measured instance of one logical op."""

    name: str               # simulator name ("L3.q_proj") or vidur op ("attn_pre_proj")
    kind: str               # sim.core.graph kind
    layer: int | None
    step: int               # index into Trace.steps
    duration_s: float       # GPU: summed kernel time; CPU: annotation wall time
    device: str             # "cuda" or "cpu"
    start_s: float = 0.0    # relative to the trace's first event
    cpu_duration_s: float = 0.0
    kernels: int = 0
    repeat: int = 0         # n-th instance of the same (step, name): vidur runs each op ~20 times
    device_span_s: tuple[float, float] | None = None   # first kernel start, last kernel end (Chrome GPU traces)


@dataclass(frozen=True)
class StepShape:
    """What the step computed, enough to lower it again."""

    label: str              # "step0.prefill", "tokens=128 tp=1"
    phase: str              # "prefill" or "decode"
    batch: int
    q_len: int
    kv_len: int
    tp: int = 1
    wall_s: float | None = None   # measured end-to-end time of the step, when the trace has it

    @property
    def tokens(self) -> int:
        return self.batch * self.q_len


@dataclass
class Trace:
    source: str
    vocabulary: str                 # "sim" (project labels) or "vidur"
    device: str                     # "cuda" or "cpu"
    device_name: str = ""
    model: ModelConfig | None = None
    dtype: str = "fp16"
    num_layers: int | None = None   # layers in the traced run (sim vocabulary)
    flash: bool = False
    steps: list[StepShape] = field(default_factory=list)
    ops: list[MeasuredOp] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    weights: str | None = None      # the layers' projection weights' format where not dtype (embed, lm_head: dtype)
    unknown_ops: set[str] = field(default_factory=set)   # op labels read but not modelled, left out (said on load)

    def medians(self) -> list[MeasuredOp]:
        """One op per (step, name): the median over repeats (vidur's statistic), in first-seen order."""
        groups: dict[tuple[int, str], list[MeasuredOp]] = {}
        for op in self.ops:
            groups.setdefault((op.step, op.name), []).append(op)
        out = []
        for ops in groups.values():
            first = ops[0]
            out.append(MeasuredOp(first.name, first.kind, first.layer, first.step,
                                  statistics.median(o.duration_s for o in ops), first.device, first.start_s,
                                  statistics.median(o.cpu_duration_s for o in ops), first.kernels, len(ops)))
        return out

    def timeline(self) -> Timeline:
        """The measured ops as an engine Timeline (resource = device), tags are MeasuredOps."""
        return Timeline([Interval(f"{self.steps[o.step].label}/{o.name}#{o.repeat}" if self.steps else o.name,
                                  o.device, o.start_s, o.start_s + o.duration_s, o) for o in self.ops])

"""An inference engine's host work per iteration (a software stack's `step_overhead`).

A serving engine spends CPU time every iteration outside the model's kernels:
scheduling, preparing the input tensors (block tables, positions, slot mappings),
sampling and turning sampled ids into outputs. vidur measured it for a vLLM-style
engine (sarathi, vLLM V0 scheduler) against batch size
(shared/validation/vidur/cpu_overhead, PROVENANCE §1.3); it grows about linearly in
the sequences of the iteration.

The stack gives it as a curve: host seconds at a few sequence counts, interpolated
piecewise linearly and extended linearly past either end (the first and last
segment's slope), never below zero; `tp_extra_s` is added when the model runs on more
than one device (the driver hands inputs to the other workers), and `per_seq_s` per
sequence on top of the curve: host work an engine does per sequence that the curve's
engine did not (vLLM V1's over vidur's V0 measurement; presets/vllm.yaml says where its
figure comes from). How it meets the
device's step is the engine's design, not a constant:

* `overlap: false` (a serial loop, vLLM V0 / sarathi): the GPU waits while the host
  works, so an iteration takes host + device;
* `overlap: true` (vLLM V1 with async scheduling, default since vLLM 0.14): the host
  schedules and prepares iteration i+1 and processes i-1's outputs while the GPU runs
  i, so an iteration takes max(host, device).

Plain torch (scripts/capture_trace.py: torch-eager, torch-cudagraph) runs no engine
and its stacks carry no `step_overhead`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from pydantic import Field, StrictBool, field_validator, model_validator

from sim.core.schema import Quantity, Strict


HOST = "host"   # the engine resource of the host CPU (kernel launches, the engine's own work)


@dataclass(frozen=True)
class EngineHost:
    """The tag of the engine's host task in a step's timeline (what op_records reads)."""

    duration_s: float
    kind: str = "engine"
    bytes: float = 0.0
    bound: str = "overhead"
    path: str = "engine host"
    energy_j: float = 0.0
    NAME: ClassVar[str] = "engine.host"


class StepOverhead(Strict):
    cite: str                                   # where the curve comes from
    overlap: StrictBool                         # see the module doc
    seqs: list[int] = Field(min_length=2)       # sequences in the iteration, strictly increasing
    seconds: list[Quantity] = Field(min_length=2)   # host seconds per iteration at those counts
    tp_extra_s: Quantity = Field(default=0.0, ge=0)   # added when the instance spans > 1 device
    per_seq_s: Quantity = Field(default=0.0, ge=0)    # host seconds per sequence beyond the curve's engine
    note: str = ""

    @field_validator("seqs")
    @classmethod
    def _seqs(cls, v: list[int]) -> list[int]:
        if v[0] < 1 or any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"must be positive and strictly increasing, got {v}")
        return v

    @field_validator("seconds")
    @classmethod
    def _seconds(cls, v: list[float]) -> list[float]:
        if min(v) < 0:
            raise ValueError(f"must not be negative, got {v}")
        if any(b < a for a, b in zip(v, v[1:])):
            raise ValueError("must not fall as seqs grows (host work per iteration grows with the sequences "
                             f"it schedules, samples and outputs), got {v}")
        return v

    @model_validator(mode="after")
    def _points(self) -> "StepOverhead":
        if len(self.seqs) != len(self.seconds):
            raise ValueError(f"seqs has {len(self.seqs)} points, seconds {len(self.seconds)}: one each")
        return self

    def host_s(self, n_seqs: int, devices: int = 1) -> float:
        """Host seconds of one iteration over `n_seqs` sequences on `devices` devices."""
        x, y = self.seqs, self.seconds
        if n_seqs <= x[0]:
            v = y[0] + (n_seqs - x[0]) * (y[1] - y[0]) / (x[1] - x[0])
        elif n_seqs >= x[-1]:
            v = y[-1] + (n_seqs - x[-1]) * (y[-1] - y[-2]) / (x[-1] - x[-2])
        else:
            v = float(np.interp(n_seqs, x, y))
        return max(v, 0.0) + self.per_seq_s * n_seqs + (self.tp_extra_s if devices > 1 else 0.0)

    def step_s(self, device_s: float, host_s: float) -> float:
        """The iteration's wall time given its device time and its host time."""
        return max(device_s, host_s) if self.overlap else device_s + host_s

    @property
    def mode(self) -> str:
        return "overlapped: max(host, device)" if self.overlap else "serial: host + device"

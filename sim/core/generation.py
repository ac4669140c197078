"""The generation loop: one prefill step, then decode steps over a growing KV cache.

It lives here once, for every hardware kind. A hardware model (a `StepModel`)
supplies the hooks: the time, busy time and energy of one step at (phase,
q_len, kv_len); what the run occupies (footprint); one step in full for the
report; and its own figures of the whole run (batch, utilisation, energy,
report data). A kind whose schedule crosses steps (offload's block schedule,
a spatial pipeline) expresses that inside its step hook.

Two shortcuts keep a 70B, 2048+2048-token run to a few thousand engine events
instead of millions, and each is checked against the exhaustive simulation
(`--exhaustive` on the CLI):

* Identical layers (`fold_layers`). A step is simulated with F and F+1 layers;
  the marginal layer costs T(F+1) - T(F), so T(L) = T(F) + (L - F) * (T(F+1) - T(F)).
  This is exact once the schedule reaches a periodic steady state within F
  layers; F is the hardware model's `fold_layers` (how far back its overlap reaches).
* Similar steps. Decode step time is a smooth, piecewise-linear function of
  kv_len (bytes and FLOPs grow linearly; efficiencies saturate). Up to
  `DECODE_SAMPLES` steps, spread evenly and including the first and last, are
  simulated and the rest are interpolated linearly.
"""

from __future__ import annotations

import math

from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Protocol

import numpy as np

from sim.core.engine import Timeline
from sim.core.footprint import Footprint
from sim.core.model import ModelConfig
from sim.core.results import RunResult, StepResult, op_records
from sim.core.workload import Workload, check_context

DECODE_SAMPLES = 9


def layer_fold(num_layers: int, fold: int, period: int = 1) -> tuple[int, int, int] | None:
    """How fold_layers extrapolates: (a, b, k) for runs of a and b = a + period layers, the whole step being
    a's + k x (b's - a's) of anything extensive in the layers; None where the step is run whole (too few layers)."""
    fold += (num_layers - fold) % period
    if num_layers <= fold + period:
        return None
    return fold, fold + period, (num_layers - fold) // period


def fold_layers(run: Callable[[int], StepResult], num_layers: int, fold: int, exhaustive: bool = False,
                period: int = 1) -> StepResult:
    """One step of `num_layers` layers, repeating every `period` layers (1: all identical;
    Gemma-2's local/global pair: 2), from runs of `fold` and `fold + period` layers
    (`run(n)` simulates the step with its first n layers; `fold` is raised so whole
    periods remain). Time, busy time, energy and counters are all extensive in the
    layer count."""
    plan = None if exhaustive else layer_fold(num_layers, fold, period)
    if plan is None:
        return run(num_layers)
    a, b = run(plan[0]), run(plan[1])
    k = plan[2]

    def ext(x: dict[str, float], y: dict[str, float]) -> dict[str, float]:
        return {r: x.get(r, 0.0) + k * (y.get(r, 0.0) - x.get(r, 0.0)) for r in {**x, **y}}

    return StepResult(b.phase, b.kv_len, a.time_s + k * (b.time_s - a.time_s), ext(a.busy_s, b.busy_s),
                      a.energy_j + k * (b.energy_j - a.energy_j), ext(a.counters, b.counters))


def decode_kv_lens(prompt_len: int, gen_len: int) -> np.ndarray:
    """The first token comes from prefill; decode step j (1..gen_len-1) attends
    to prompt_len + j keys, its own included."""
    return prompt_len + np.arange(1, gen_len)


def sample_indices(n: int, samples: int) -> np.ndarray:
    if n <= samples:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, samples)).astype(int))


StepFn = Callable[[str, int, int], StepResult]   # (phase, q_len, kv_len) -> one step


@dataclass(frozen=True)
class Generation:
    """What the loop measured: one prefill, the sampled decode steps, every
    decode step's time by interpolation. Totals over the run are derived here."""

    prefill: StepResult
    kv_lens: np.ndarray           # kv_len of every decode step
    sampled_idx: np.ndarray       # which decode steps were simulated
    sampled: list[StepResult]
    decode_times_s: np.ndarray    # every decode step's time
    exhaustive: bool = False      # every step and layer simulated (no shortcuts)

    @property
    def rep_kv(self) -> int:
        """kv_len of the representative (middle) decode step; the prompt when there is none."""
        kv = self.kv_lens
        return int(kv[len(kv) // 2]) if len(kv) else self.prefill.kv_len

    @property
    def share(self) -> float:
        """How many decode steps each sampled one stands for."""
        return len(self.kv_lens) / len(self.sampled_idx) if len(self.sampled_idx) else 0.0

    @property
    def e2e_s(self) -> float:
        return self.prefill.time_s + float(self.decode_times_s.sum())

    @cached_property
    def busy_s(self) -> dict[str, float]:
        decode = {r: float(sum(s.busy_s.get(r, 0.0) for s in self.sampled) * self.share)
                  for r in (self.sampled[-1].busy_s if self.sampled else {})}
        pre = self.prefill.busy_s
        return {r: pre.get(r, 0.0) + decode.get(r, 0.0) for r in {**pre, **decode}}

    @property
    def energy_j(self) -> float:
        """Energy the steps reported (dynamic energy; static power is the kind's to add)."""
        return self.prefill.energy_j + float(sum(s.energy_j for s in self.sampled) * self.share)

    def tpot(self, which: str = "mean") -> float:
        t = self.decode_times_s
        if not len(t):
            return 0.0
        return float({"mean": t.mean, "first": lambda: t[0], "last": lambda: t[-1]}[which]())


# Told (steps done, steps in all) after each simulated step: the CLI's progress bar. A context
# variable, so that the hardware models between the CLI and this loop need not pass it on.
STEP_PROGRESS: ContextVar[Callable[[int, int], None] | None] = ContextVar("STEP_PROGRESS", default=None)


def run_generation(step: StepFn, prompt_len: int, gen_len: int, samples: int = DECODE_SAMPLES,
                   exhaustive: bool = False) -> Generation:
    """Prefill, then the sampled decode steps, interpolated over the rest."""
    kv = decode_kv_lens(prompt_len, gen_len)
    idx = np.arange(len(kv)) if exhaustive else sample_indices(len(kv), samples)
    told = STEP_PROGRESS.get() or (lambda done, total: None)
    prefill = step("prefill", prompt_len, prompt_len)
    told(1, len(idx) + 1)
    sampled = []
    for i in idx:
        sampled.append(step("decode", 1, int(kv[i])))
        told(len(sampled) + 1, len(idx) + 1)
    times = np.interp(np.arange(len(kv)), idx, [s.time_s for s in sampled]) if len(kv) else np.zeros(0)
    return Generation(prefill, kv, idx, sampled, times, exhaustive)


@dataclass
class RunFigures:
    """A hardware model's own figures of a whole run."""

    batch: int                              # sequences generated (a policy search may choose fewer)
    utilization: dict[str, float]
    energy_j: float                         # whole run, static and dynamic
    # {"prefill": J, "decode": J} where the kind splits energy by phase (board power as idle + dynamic)
    energy_by_phase_j: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)   # kind data: "metrics", "sections", ...


class StepModel(Protocol):
    """What the generation loop needs of a hardware model (hw_models.base.Mapper is one)."""

    workload: Workload
    model: ModelConfig

    @property
    def hardware_name(self) -> str: ...
    @property
    def hardware_kind(self) -> str: ...
    def footprint(self) -> Footprint: ...
    def step(self, phase: str, q_len: int, kv_len: int, exhaustive: bool = False) -> StepResult: ...
    def step_timeline(self, phase: str, q_len: int, kv_len: int) -> Timeline: ...
    def figures(self, gen: Generation, decode_tl: Timeline | None) -> RunFigures: ...
    @property
    def devices(self) -> int: ...                # devices drawing the run's energy
    @property
    def power_includes(self) -> str: ...         # what their power holds beyond their boards ("": nothing)


def generate(hw: StepModel, exhaustive: bool = False) -> Generation:
    """The workload's generation on `hw`, step by step (no footprint check, no report)."""
    w = hw.workload
    return run_generation(lambda ph, q, kv: hw.step(ph, q, kv, exhaustive), w.prompt_len, w.gen_len,
                          exhaustive=exhaustive)


def simulate_generation(hw: StepModel, exhaustive: bool = False, detail: bool = True) -> RunResult:
    """The whole run. `detail=False` (sweeps) skips the full step timelines of the
    report (per-op table, Gantt, trace) and whatever else only a report reads."""
    w, m = hw.workload, hw.model
    notes = check_context(w, m)
    fp = hw.footprint()
    gen = generate(hw, exhaustive)
    # One representative decode step (the middle one) and the prefill, in full.
    decode_tl = hw.step_timeline("decode", 1, gen.rep_kv) if detail else Timeline()
    prefill_tl = hw.step_timeline("prefill", w.prompt_len, w.prompt_len) if detail else Timeline()
    k = hw.figures(gen, decode_tl if detail else None)
    tokens = k.batch * w.gen_len
    e2e = gen.e2e_s
    phase = k.energy_by_phase_j
    per_token = {"prefill": k.batch * w.prompt_len, "decode": k.batch * (w.gen_len - 1)}
    j_per_token = {p: phase[p] / n if p in phase and n else None for p, n in per_token.items()}
    # no decode step (gen_len 1): no TPOT, NaN (None in the JSON), so a sweep never ranks 0 s the fastest
    tpot = {which: gen.tpot(which) if w.gen_len > 1 else math.nan for which in ("mean", "first", "last")}
    return RunResult(
        workload=w.name, hardware=hw.hardware_name, kind=hw.hardware_kind, model=m.to_dict(), params=m.params(),
        batch=k.batch, prompt_len=w.prompt_len, gen_len=w.gen_len,
        formats=w.formats.model_dump(), ttft_s=gen.prefill.time_s,
        tpot_s=tpot["mean"], tpot_first_s=tpot["first"], tpot_last_s=tpot["last"],
        e2e_s=e2e, throughput_tok_s=tokens / e2e if e2e else 0.0,
        peak_memory_bytes={t: fp.total(t) for t in fp.tiers}, memory_by_role=fp.tiers, memory_scope=fp.scope,
        utilization=k.utilization, energy_per_token_j=k.energy_j / tokens if tokens else 0.0,
        prefill_ops=op_records(prefill_tl), decode_ops=op_records(decode_tl), decode_kv_len=gen.rep_kv,
        prefill_timeline=prefill_tl, decode_timeline=decode_tl, notes=notes + k.notes,
        extra=k.extra, simulated_steps=1 + len(gen.sampled_idx), exhaustive=exhaustive,
        stack=w.stack if w.stack and getattr(hw, "stack", None) is not None else "",   # "": none, or one the kind ignores
        stack_ignored=w.stack if w.stack and getattr(hw, "stack", None) is None else "",
        prefill_energy_per_token_j=j_per_token["prefill"], decode_energy_per_token_j=j_per_token["decode"],
        devices=hw.devices, power_includes=hw.power_includes)

"""The generation loop: one prefill step, then decode steps over a growing KV cache.

Two shortcuts keep a 70B, 2048+2048-token run to a few thousand engine events
instead of millions, and each is checked against the exhaustive simulation
(tests/test_shortcuts.py, `--exhaustive` on the CLI):

* Identical layers. A step is simulated with F and F+1 layers; the marginal
  layer costs T(F+1) - T(F), so T(L) = T(F) + (L - F) * (T(F+1) - T(F)).
  This is exact once the schedule reaches a periodic steady state within F
  layers (F = 2 here), which holds for any mapper whose cross-layer overlap
  reaches back at most one layer.
* Similar steps. Decode step time is a smooth, piecewise-linear function of
  kv_len (bytes and FLOPs grow linearly; efficiencies saturate). Up to
  `DECODE_SAMPLES` steps, spread evenly and including the first and last, are
  simulated and the rest are interpolated linearly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.core import engine
from sim.core.lowering import lower
from sim.core.results import RunResult, StepResult, op_records
from sim.core.workload import check_context

if TYPE_CHECKING:
    from hw_models.base import Mapper

FOLD_LAYERS = 2
DECODE_SAMPLES = 9


def simulate_step(mapper: "Mapper", phase: str, q_len: int, kv_len: int, num_layers: int | None = None):
    """Run one step (optionally with only the first `num_layers` layers) and return its timeline."""
    w = mapper.workload
    graph = lower(mapper.model, phase, w.batch, q_len, kv_len, mapper.formats, w.flash_attention, num_layers)
    return engine.run(mapper.plan_step(graph), mapper.resources(), mapper.containers(), mapper.in_order)


def _energy(tl: engine.Timeline) -> float:
    return sum(getattr(i.tag, "energy_j", 0.0) for i in tl.intervals)


def step_time(mapper: "Mapper", phase: str, q_len: int, kv_len: int, exhaustive: bool = False) -> StepResult:
    L = mapper.model.num_layers
    if exhaustive or L <= FOLD_LAYERS + 1:
        tl = simulate_step(mapper, phase, q_len, kv_len)
        return StepResult(phase, kv_len, tl.makespan_s, tl.busy_s(), _energy(tl))
    a = simulate_step(mapper, phase, q_len, kv_len, FOLD_LAYERS)
    b = simulate_step(mapper, phase, q_len, kv_len, FOLD_LAYERS + 1)
    k = L - FOLD_LAYERS
    busy_a, busy_b = a.busy_s(), b.busy_s()
    busy = {r: busy_a.get(r, 0.0) + k * (busy_b.get(r, 0.0) - busy_a.get(r, 0.0)) for r in busy_b}
    energy = _energy(a) + k * (_energy(b) - _energy(a))
    return StepResult(phase, kv_len, a.makespan_s + k * (b.makespan_s - a.makespan_s), busy, energy)


def decode_kv_lens(prompt_len: int, gen_len: int) -> np.ndarray:
    """The first token comes from prefill; decode step j (1..gen_len-1) attends
    to prompt_len + j keys, its own included."""
    return prompt_len + np.arange(1, gen_len)


def sample_indices(n: int, samples: int) -> np.ndarray:
    if n <= samples:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, samples)).astype(int))


def simulate_generation(mapper: "Mapper", exhaustive: bool = False, detail: bool = True) -> RunResult:
    w, m, machine = mapper.workload, mapper.model, mapper.machine
    notes = check_context(w, m)
    footprint = mapper.footprint()

    prefill = step_time(mapper, "prefill", w.prompt_len, w.prompt_len, exhaustive)
    kv = decode_kv_lens(w.prompt_len, w.gen_len)
    idx = np.arange(len(kv)) if exhaustive else sample_indices(len(kv), DECODE_SAMPLES)
    sampled = [step_time(mapper, "decode", 1, int(kv[i]), exhaustive) for i in idx]
    if len(kv):
        times = np.interp(np.arange(len(kv)), idx, [s.time_s for s in sampled])
        share = len(kv) / len(idx)  # each sampled step stands for this many steps
        busy_decode = {r: float(sum(s.busy_s.get(r, 0.0) for s in sampled) * share) for r in sampled[-1].busy_s}
        energy_decode = float(sum(s.energy_j for s in sampled) * share)
    else:
        times, busy_decode, energy_decode = np.zeros(0), {}, 0.0
    decode_total = float(times.sum())
    e2e = prefill.time_s + decode_total

    # One representative decode step (the middle one) and the prefill, simulated in
    # full for the per-op table, the Gantt chart and the Chrome trace.
    # Sweeps pass detail=False: metrics only, no per-op timelines.
    rep_kv = int(kv[len(kv) // 2]) if len(kv) else w.prompt_len
    decode_tl = simulate_step(mapper, "decode", 1, rep_kv) if detail else engine.Timeline()
    prefill_tl = simulate_step(mapper, "prefill", w.prompt_len, w.prompt_len) if detail else engine.Timeline()

    busy = {r: prefill.busy_s.get(r, 0.0) + busy_decode.get(r, 0.0) for r in {*prefill.busy_s, *busy_decode}}
    tokens = w.batch * w.gen_len
    power = sum((u.power_w or 0.0) * busy.get(name, 0.0) for name, u in machine.units.items())
    return RunResult(
        workload=w.name, hardware=machine.name, model=m.to_dict(), params=m.params(),
        batch=w.batch, prompt_len=w.prompt_len, gen_len=w.gen_len,
        formats=w.formats.model_dump(), ttft_s=prefill.time_s,
        tpot_s=float(times.mean()) if len(times) else 0.0,
        tpot_first_s=float(times[0]) if len(times) else 0.0,
        tpot_last_s=float(times[-1]) if len(times) else 0.0,
        e2e_s=e2e, throughput_tok_s=tokens / e2e if e2e else 0.0,
        peak_memory_bytes={t: footprint.total(t) for t in footprint.tiers},
        memory_by_role=footprint.tiers,
        utilization={r: b / e2e for r, b in busy.items()} if e2e else {},
        energy_per_token_j=(prefill.energy_j + energy_decode + power) / tokens,
        prefill_ops=op_records(prefill_tl), decode_ops=op_records(decode_tl), decode_kv_len=rep_kv,
        prefill_timeline=prefill_tl, decode_timeline=decode_tl, notes=notes,
        simulated_steps=1 + len(idx), exhaustive=exhaustive)


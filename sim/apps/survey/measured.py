"""Measured points beside the pure roofline and the simulator, with the error of
each: the shared RTX A6000 and H200 traces (../shared/validation, PROVENANCE.md),
this repository's CPU traces (traces/cpu), and the TensorRT-LLM measurements
quoted in LLM-Viewer's issue #4. The comparison goes through sim.apps.trace
(the same parser and per-op validation as `sim validate`)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Iterable

import pandas as pd

from sim.apps.survey import figures
from sim.apps.survey.doc import MEASURED, Section, Table, error, ms, us
from sim.apps.survey.runs import machine, run
from sim.apps.trace.parser import load_trace
from sim.apps.trace.records import Trace
from sim.core.errors import ConfigError
from sim.apps.trace.validate import validate

# scripts/validation_report.py calibrates a6000_calibrated on these token counts: in sample for it.
A6000_FIT_TOKENS = {1, 16, 128, 1024}
A6000_TRACES = "maveriq-a6000/vidur_profiler_traces/Llama-2-7b-hf"
A6000_TABLE = "vidur/a6000/Llama-2-7b-hf/mlp.csv"
H200_TRACES = ("llama2-7b_L4_fp16_b1_p1024_d8_cuda.ops.csv", "llama2-7b_L4_fp16_b16_p512_d8_cuda.ops.csv")
CPU_TRACES = ("llama2-7b_L2_fp32_b1_p512_d16_cpu.ops.csv", "llama2-7b_L2_fp32_b8_p512_d16_cpu.ops.csv")


def step_sums(traces: list[Trace], hw: str, flat: bool = False) -> dict[tuple[str, str], tuple[float, float]]:
    """(trace, step label) -> (measured, predicted) sums over the measured ops: device
    (kernel) time on a GPU, op time on the CPU. Sums of ops, not wall times: a GPU
    step's wall time in these traces is host-bound (eager launches under a profiler)."""
    out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in validate(traces, machine(hw, flat=flat)).ops:
        acc = out[(r.source, r.step)]
        acc[0] += r.measured_s
        acc[1] += r.simulated_s
    return {k: (v[0], v[1]) for k, v in out.items()}


def _by_phase(sums: dict, trace: Trace) -> Iterable[tuple[str, float, float]]:
    """Prefill step, and the median over decode steps (measured and predicted medians)."""
    labels = {s.label: s.phase for s in trace.steps}
    for phase in ("prefill", "decode"):
        vals = [v for (src, step), v in sums.items() if src == trace.source and labels.get(step) == phase]
        if vals:
            yield phase, statistics.median(v[0] for v in vals), statistics.median(v[1] for v in vals)


def _tokens(label: str) -> int:
    """vidur step labels: "tokens=128" (a trace) or "tokens=128 tp=1" (a table row)."""
    return int(label.split("=")[1].split()[0])


def a6000_layer_table(shared: Path) -> tuple[Table, Table, list[Trace], float]:
    traces = [t for p in sorted((shared / A6000_TRACES).glob("*.json")) for t in load_trace(p)]
    if not traces:   # a folder without the measurements: say which, not "no measured ops"
        raise ConfigError(f"--shared {shared}: no RTX A6000 traces in {shared / A6000_TRACES} (expected the shared "
                          "validation data, see its PROVENANCE.md)")
    roof, sim, cal = (step_sums(traces, "a6000", flat=True), step_sums(traces, "a6000"),
                      step_sums(traces, "a6000_calibrated"))
    rows = []
    for key in sim:
        tokens = _tokens(key[1])
        meas = sim[key][0]
        rows.append({"tokens": tokens, "measured (us)": us(meas), "roofline (us)": us(roof[key][1]),
                     "error roofline": error(roof[key][1], meas), "sim a6000 (us)": us(sim[key][1]),
                     "error sim": error(sim[key][1], meas), "sim a6000_calibrated (us)": us(cal[key][1]),
                     "error calibrated": error(cal[key][1], meas) + (" (in sample)" if tokens in A6000_FIT_TOKENS else "")})
    rows.sort(key=lambda r: r["tokens"])
    one_token_s = next(v[0] for k, v in sim.items() if _tokens(k[1]) == 1)
    setup = ("One Llama-2-7B decoder layer without attention (vidur's profiler on an RTX A6000, fp16, "
             "UT-SysML/MaverIQ @ 067d7a1; PROVENANCE.md §2.2): measured = the sum over its ten ops of the median "
             "(over 20 runs) summed kernel time. Predictions cost the same fused ops (QKV in one GEMM, gate+up in "
             "one). tokens = batch x q_len: 1 and 16 are decode at batch 1 and 16, the rest prefill. "
             "a6000_calibrated was fitted on 1, 16, 128 and 1024 tokens (in sample there).")
    return Table("RTX A6000: one Llama-2-7B layer (attention excluded)", setup, pd.DataFrame(rows), MEASURED), \
        a6000_op_table(traces), traces, one_token_s


def a6000_op_table(traces: list[Trace]) -> Table:
    one = [t for t in traces if t.steps and t.steps[0].tokens == 1]
    rows = []
    roof, sim = validate(one, machine("a6000", flat=True)).ops, validate(one, machine("a6000")).ops
    for r, s in zip(roof, sim):
        rows.append({"op": r.op, "kind": r.kind, "measured (us)": us(r.measured_s), "roofline (us)": us(r.simulated_s),
                     "error roofline": error(r.simulated_s, r.measured_s), "sim (us)": us(s.simulated_s),
                     "error sim": error(s.simulated_s, s.measured_s)})
    return Table("RTX A6000: the decode layer op by op (1 token)", (
        "As above at 1 token (batch-1 decode). Trace durations are whole microseconds: a 1-3 us kernel carries up "
        "to 50% rounding. Per-op kernel times exclude launch gaps; the sim column charges each op the preset's "
        "4 us launch overhead, which the measurement does not count."), pd.DataFrame(rows), MEASURED)


def phase_table(title: str, setup: str, traces: list[Trace], hw: str, calibrated: str | None = None) -> Table:
    roof, sim = step_sums(traces, hw, flat=True), step_sums(traces, hw)
    cal = step_sums(traces, calibrated) if calibrated else {}
    rows = []
    for t in traces:
        name = Path(t.source).name.removesuffix(".ops.csv")
        r_ph, s_ph = dict((p, (m, x)) for p, m, x in _by_phase(roof, t)), list(_by_phase(sim, t))
        c_ph = dict((p, (m, x)) for p, m, x in _by_phase(cal, t))
        for phase, meas, pred in s_ph:
            row = {"trace": name, "phase": phase, "measured (ms)": ms(meas, 3),
                   "roofline (ms)": ms(r_ph[phase][1], 3), "error roofline": error(r_ph[phase][1], meas),
                   f"sim {hw} (ms)": ms(pred, 3), "error sim": error(pred, meas)}
            if calibrated:
                row[f"sim {calibrated} (ms)"] = ms(c_ph[phase][1], 3)
                row["error calibrated"] = error(c_ph[phase][1], meas)
            rows.append(row)
    return Table(title, setup, pd.DataFrame(rows), MEASURED)


def h200_table(shared: Path) -> Table:
    traces = [load_trace(shared / "h200" / "traces" / n)[0] for n in H200_TRACES
              if (shared / "h200" / "traces" / n).is_file()]
    return phase_table("H200: Llama-2-7B, 4 layers + embedding + LM head", (
        "The project's own captures on one H200 SXM (scripts/capture_trace.py --device cuda, torch 2.11; "
        "PROVENANCE.md §7), fp16, unfused attention. Measured = the summed kernel (device) time of the step's "
        "ops; decode = the median over the run's decode steps. The predictions cost the same 4-layer graph."),
        traces, "h200")


def cpu_table(repo: Path) -> Table:
    traces = [load_trace(repo / "traces" / "cpu" / n)[0] for n in CPU_TRACES]
    return phase_table("This repository's CPU traces: Llama-2-7B, 2 layers, fp32", (
        "traces/cpu (traces/README.md): this project's 2-vCPU AMD EPYC VM, torch CPU, prompt 512. Measured = the "
        "sum of the ops' times (record_function ranges); decode = median over 16 steps. `cpu_host` is a Xeon "
        "8380 datasheet socket, not this VM; `cpu_host_calibrated` was fitted on the prompt-128 traces, so "
        "these prompt-512 rows are out of sample for it."), traces, "cpu_host", calibrated="cpu_host_calibrated")


def _layer_curve(shared: Path, traces: list[Trace], quick: bool) -> dict:
    """Measured vs predicted layer time over token count: vidur's A6000 table (TP 1)
    when present and not --quick, else the seven kernel traces."""
    table = shared / A6000_TABLE
    src = traces if quick or not table.is_file() else [t for t in load_trace(table) if t.steps[0].tp == 1]
    series: dict = {}
    for label, hw, flat in (("measured", "a6000", False), ("pure roofline", "a6000", True), ("sim a6000", "a6000", False),
                            ("sim a6000_calibrated", "a6000_calibrated", False)):
        sums = step_sums(src, hw, flat=flat)
        pts = sorted((next(s.tokens for t in src for s in t.steps if s.label == k[1] and t.source == k[0]),
                      v[0] if label == "measured" else v[1]) for k, v in sums.items())
        series[label] = ([p[0] for p in pts], [p[1] * 1e6 for p in pts])
    return series


def measured_section(repo: Path, shared: Path | None, out: Path, quick: bool) -> Section:
    s = Section("7. Measured points beside the roofline and the simulator", intro=(
        "Every row: a measured time, the pure roofline's prediction and the simulator's, and the error of each, "
        "(predicted - measured) / measured. A pure roofline has no launch gaps, no DRAM latency and no GEMM "
        "below peak, so where it sits under a measurement the gap is what those cost on that machine."))
    if shared is None or not shared.is_dir():
        s.notes.append("**Skipped:** the shared validation data (../shared/validation, or `--shared DIR`) is absent "
                       "on this machine, so the RTX A6000 and H200 rows are left out; the CPU rows come from this "
                       "repository's traces/.")
    else:
        layer, ops, traces, one_s = a6000_layer_table(shared)
        s.tables += [layer, ops]
        s.figures.append(("A6000 layer over tokens", figures.lines(
            {"RTX A6000, one Llama-2-7B layer (no attention)": _layer_curve(shared, traces, quick)},
            "tokens", "us", out / "measured_a6000_layer.png", logy=True)))
        flat, real = run("a6000", flat=True), run("a6000")
        s.notes.append(f"**Decode, batch 1, A6000.** The measured layer at 1 token takes {us(one_s)} us of kernel time "
                       f"without attention; 32 of them are {ms(32 * one_s, 2)} ms (derived from the measurement: a "
                       f"floor for a measured decode step, which adds attention, the LM head and launch gaps). The "
                       f"whole-model predictions: pure roofline {ms(flat.tpot_s, 2)} ms, sim {ms(real.tpot_s, 2)} ms.")
        if (shared / "h200" / "traces").is_dir():
            s.tables.append(h200_table(shared))
    s.tables.append(cpu_table(repo))
    return s

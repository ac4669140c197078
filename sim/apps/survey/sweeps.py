"""The survey's sweeps of decode: batch size, context length, and memory bandwidth."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.apps.survey import figures
from sim.apps.survey.doc import Section, Table, ms, ratio
from sim.apps.survey.runs import MODEL, PROMPT, Setup, machine, pair
from sim.core.results import RunResult


def _tok_s(r: RunResult | None) -> float | None:
    """Decode throughput of one step: sequences per step time."""
    return r.batch / r.tpot_s if r and r.tpot_s else None


def _fmt(x: float | None, digits: int = 0) -> str:
    return "does not fit" if x is None else f"{x:,.{digits}f}"


def batch_table(setup: Setup, hw: str, panels: dict) -> Table:
    rows = []
    for b in setup.batches:
        flat, real = pair(hw, batch=b)
        rows.append({"batch": b, "decode roofline (ms)": ms(flat.tpot_s, 3) if flat else "does not fit",
                     "decode sim (ms)": ms(real.tpot_s, 3) if real else "does not fit",
                     "tok/s roofline": _fmt(_tok_s(flat)), "tok/s sim": _fmt(_tok_s(real)),
                     "sim / roofline": ratio(real.tpot_s, flat.tpot_s) if real and flat else "-"})
        for kind, r in (("pure roofline", flat), ("sim", real)):
            xs, ys = panels.setdefault(f"{hw} {kind}", ([], []))
            xs.append(b)
            ys.append(_tok_s(r))
    return Table(f"Decode over batch size on {hw}", (
        f"{MODEL} fp16, prompt {PROMPT}, one decode step at kv_len 1025; tok/s = batch / step time. "
        "\"does not fit\": weights + KV cache + activations exceed the device memory."), pd.DataFrame(rows))


def context_table(setup: Setup, hw: str, panels: dict) -> Table:
    rows = []
    for ctx in setup.contexts:
        row: dict = {"context": ctx}
        for b in (1, 16):
            flat, real = pair(hw, batch=b, prompt_len=ctx)
            row[f"batch {b} roofline (ms)"] = ms(flat.tpot_s, 3) if flat else "does not fit"
            row[f"batch {b} sim (ms)"] = ms(real.tpot_s, 3) if real else "does not fit"
            for kind, r in (("pure roofline", flat), ("sim", real)):
                xs, ys = panels.setdefault(f"{hw} batch {b} {kind}", ([], []))
                xs.append(ctx)
                ys.append(r.tpot_s * 1e3 if r else None)
        rows.append(row)
    return Table(f"Decode over context length on {hw}", (
        f"{MODEL} fp16, unfused attention; one decode step attending over the context (the prompt) plus "
        "itself."), pd.DataFrame(rows))


def bandwidth_table(setup: Setup, hw: str, panels: dict) -> Table:
    """The survey's "what if the memory were faster": the device tier's bandwidth scaled,
    compute, ramps and overheads unchanged."""
    base = {b: pair(hw, batch=b) for b in (1, 16)}
    base_prefill = base[1]
    rows = []
    for f in setup.bandwidth_factors:
        bw = machine(hw, f).memory[machine(hw, f).device_tier].bandwidth_bytes_per_s
        row: dict = {"bandwidth": f"x{f:g} ({bw / 1e9:,.0f} GB/s)"}
        for b in (1, 16):
            flat, real = pair(hw, bandwidth_factor=f, batch=b)
            row[f"decode b{b} roofline"] = f"{ms(flat.tpot_s, 3)} ({ratio(base[b][0].tpot_s, flat.tpot_s)})"
            row[f"decode b{b} sim"] = f"{ms(real.tpot_s, 3)} ({ratio(base[b][1].tpot_s, real.tpot_s)})"
            for kind, r, r0 in (("pure roofline", flat, base[b][0]), ("sim", real, base[b][1])):
                xs, ys = panels.setdefault(f"decode b{b} {kind}", ([], []))
                xs.append(f)
                ys.append(r0.tpot_s / r.tpot_s)
        flat, real = pair(hw, bandwidth_factor=f)
        row["prefill b1 roofline"] = f"{ms(flat.ttft_s)} ({ratio(base_prefill[0].ttft_s, flat.ttft_s)})"
        row["prefill b1 sim"] = f"{ms(real.ttft_s)} ({ratio(base_prefill[1].ttft_s, real.ttft_s)})"
        rows.append(row)
    return Table(f"Memory bandwidth on {hw}", (
        f"{MODEL} fp16, prompt {PROMPT}; the device memory's bandwidth scaled by the factor, everything else as "
        "the preset. Times in ms, speed-up over x1 in parentheses."), pd.DataFrame(rows))


def sweeps_section(setup: Setup, out: Path) -> Section:
    s = Section("4. Sweeps of decode: batch size, context length, memory bandwidth", intro=(
        "Decode reads every weight once per step whatever the batch, so a larger batch raises throughput almost "
        "for free until the GEMMs reach the ridge point or the KV cache fills the memory; a longer context adds "
        "KV-cache traffic per step; a faster memory speeds up what is memory bound."))
    batch_panels: dict = {}
    for hw in setup.machines:
        s.tables.append(batch_table(setup, hw, batch_panels))
    s.figures.append(("decode throughput over batch", figures.lines(
        {"decode throughput (tok/s)": batch_panels}, "batch", "tokens/s", out / "batch_sweep.png", logy=True)))
    ctx_panels: dict = {}
    for hw in setup.machines:
        s.tables.append(context_table(setup, hw, ctx_panels))
    s.figures.append(("decode step over context", figures.lines(
        {"decode step time": ctx_panels}, "context (tokens)", "ms", out / "context_sweep.png", logy=True)))
    bw_panels: dict = {}
    for hw in setup.machines:
        panels: dict = {}
        s.tables.append(bandwidth_table(setup, hw, panels))
        bw_panels[f"{hw}: decode speed-up over x1"] = panels
    s.figures.append(("bandwidth sweep", figures.lines(bw_panels, "bandwidth factor", "speed-up",
                                                       out / "bandwidth_sweep.png")))
    return s

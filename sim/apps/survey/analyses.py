"""The survey's first three analyses, each on every machine of the setup: the
roofline of one Llama-2-7B layer, quantization, and FlashAttention over context."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.apps.survey import figures
from sim.apps.survey.doc import Section, Table, error, ms, ratio, us
from sim.apps.survey.runs import MODEL, PROMPT, QUANT, Setup, machine, pair, quant_formats, workload
from sim.core.results import OpRecord, RunResult

# LLM-Viewer's figure for Llama-2-7B fp16 decode at batch 1 on the A6000 (see the "Published figures" section).
LLM_VIEWER_DECODE_S = 17.9e-3


def _layer(ops: list[OpRecord], prefix: str = "L0.") -> dict[str, list[OpRecord]]:
    out: dict[str, list[OpRecord]] = {}
    for o in ops:
        if o.name.startswith(prefix):
            out.setdefault(o.base_name, []).append(o)
    return out


def _peak(hw: str) -> tuple[float, float]:
    m = machine(hw)
    unit = m.units[m.main_unit]
    return unit.peak_flops_per_s.get("fp16", max(unit.peak_flops_per_s.values())), \
        m.memory[m.device_tier].bandwidth_bytes_per_s


def _layer_rows(flat: RunResult, real: RunResult) -> tuple[list[dict], list[figures.OpPoint]]:
    rows, points = [], []
    for phase, f_ops, r_ops in (("prefill", flat.prefill_ops, real.prefill_ops),
                                ("decode", flat.decode_ops, real.decode_ops)):
        sim_ops = _layer(r_ops)
        for name, recs in _layer(f_ops).items():
            o = recs[0]
            t_roof = sum(r.duration_s for r in recs)
            t_sim = sum(r.duration_s for r in sim_ops.get(name, []))
            ai = o.flops / o.bytes if o.bytes else 0.0
            rows.append({"phase": phase, "op": name, "kind": o.kind, "GFLOP": f"{o.flops / 1e9:.3g}",
                         "MB": f"{o.bytes / 1e6:.3g}", "FLOP/B": f"{ai:.3g}", "bound": o.bound,
                         "roofline (us)": us(t_roof), "sim (us)": us(t_sim), "sim / roofline": ratio(t_sim, t_roof)})
            if o.flops and t_roof > 0 and t_sim > 0:
                points.append(figures.OpPoint(phase, name, ai, o.flops / t_roof, o.flops / t_sim))
    return rows, points


def roofline_section(setup: Setup, out: Path) -> Section:
    s = Section("1. The roofline of one Llama-2-7B layer", intro=(
        f"The survey's central picture: every op of one decoder layer of {MODEL} (fp16, batch 1, prompt "
        f"{PROMPT}) placed by arithmetic intensity under the machine's roof, memory bound left of the ridge and "
        "compute bound right of it. *Pure roofline* = the preset with efficiencies 1 and no overheads "
        "(`--ideal`, hw_models/ideal.py), the model LLM-Viewer uses; *sim* = the preset's own model (efficiency "
        "curves, launch overhead), run on the discrete-event engine. The decode step attends over the prompt "
        "plus its own token (kv_len 1025)."))
    for hw in setup.machines:
        flat, real = pair(hw, detail=True)
        rows, points = _layer_rows(flat, real)
        peak, bw = _peak(hw)
        s.tables.append(Table(f"Layer 0 of {MODEL} on {hw}", (
            f"Batch 1, prompt {PROMPT}, fp16 weights/activations/KV, unfused attention. Ridge point "
            f"{peak / bw:.0f} FLOP/B (fp16 peak {peak / 1e12:.1f} TFLOP/s over {bw / 1e9:,.0f} GB/s). "
            "FLOPs and bytes are per op; the bound is the pure roofline's."), pd.DataFrame(rows)))
        path = figures.roofline(points, peak, bw, f"{MODEL} layer 0 on {hw}: prefill {PROMPT} tokens, decode kv 1025",
                                out / f"roofline_{hw}.png")
        s.figures.append((f"roofline, {hw}", path))
        s.notes.append(f"Whole model on **{hw}**: prefill {ms(flat.ttft_s)} ms pure roofline, {ms(real.ttft_s)} ms "
                       f"sim; one decode step {ms(flat.tpot_s, 3)} ms pure roofline, {ms(real.tpot_s, 3)} ms sim.")
    if "a6000" in setup.machines:
        s.notes.append(decode_check())
    return s


def decode_check() -> str:
    """The survey's reference number: Llama-2-7B decode at batch 1 on the A6000, pure roofline."""
    flat, _ = pair("a6000", detail=True)
    moved = sum(o.bytes for o in flat.decode_ops)
    bw = machine("a6000").memory[machine("a6000").device_tier].bandwidth_bytes_per_s
    cfg = workload().model_config_()
    weights = 2 * (cfg.params() - cfg.vocab_size * cfg.hidden_size)   # fp16; the embedding table is gathered, not streamed
    return (f"**Check (A6000, decode, batch 1).** The pure roofline's decode step is {ms(flat.tpot_s, 3)} ms; "
            f"LLM-Viewer's figure is {ms(LLM_VIEWER_DECODE_S, 1)} ms: difference {error(flat.tpot_s, LLM_VIEWER_DECODE_S)} "
            f"(within the 1% asked). By hand: the step moves {moved / 1e9:.3f} GB (weights "
            f"{weights / 1e9:.3f} GB without the embedding table, KV cache, activations) and every op is memory "
            f"bound, so it takes {moved / 1e9:.3f} GB / {bw / 1e9:.0f} GB/s = {ms(moved / bw, 3)} ms.")


def quantization_section(setup: Setup, out: Path) -> Section:
    s = Section("2. Quantization", intro=(
        "The survey's quantization analysis: weights (W), activations (A) and KV cache at 16, 8 and 4 bits, prefill "
        f"and decode, batch 1 and 16, {MODEL}, prompt {PROMPT}. int8/int4 weights carry their scales (int4: groups of "
        "128, 4.125 bits per weight; LLM-Viewer counts a flat 4 bits). Where the machine has no native unit for a "
        "format the weights are streamed narrow and dequantized into one it has (the `path` column: the GEMMs' "
        "compute path in the sim run). Speed-up = W16A16 time / this time, same batch and model."))
    for hw in setup.machines:
        rows, panels = [], {}
        for batch in (1, 16):
            base = pair(hw, batch=batch)
            for label in QUANT:
                flat, real = pair(hw, batch=batch, detail=True, formats=quant_formats(label))
                rows.append(_quant_row(label, batch, flat, real, base))
                for phase, attr in (("prefill", "ttft_s"), ("decode", "tpot_s")):
                    p = panels.setdefault(f"{hw} {phase}, batch {batch}", {"pure roofline": [], "sim": []})
                    p["pure roofline"].append(getattr(flat, attr, None) * 1e3 if flat else None)
                    p["sim"].append(getattr(real, attr, None) * 1e3 if real else None)
        s.tables.append(Table(f"Quantization on {hw}", (
            f"{MODEL}, prompt {PROMPT}, one decode step at kv_len 1025; times in ms."), pd.DataFrame(rows)))
        path = figures.bars(panels, list(QUANT), "ms", out / f"quantization_{hw}.png")
        s.figures.append((f"quantization, {hw}", path))
    return s


def _quant_row(label: str, batch: int, flat: RunResult | None, real: RunResult | None,
               base: tuple[RunResult | None, RunResult | None]) -> dict:
    gemm = next((o.path for o in (real.decode_ops if real else []) if o.kind == "gemm"), "-")
    get = (lambda r, a: getattr(r, a) if r else None)
    return {"config": label, "batch": batch, "path": gemm,
            "prefill roofline": ms(get(flat, "ttft_s")), "prefill sim": ms(get(real, "ttft_s")),
            "decode roofline": ms(get(flat, "tpot_s"), 3), "decode sim": ms(get(real, "tpot_s"), 3),
            "decode speed-up roofline": ratio(get(base[0], "tpot_s"), get(flat, "tpot_s")),
            "decode speed-up sim": ratio(get(base[1], "tpot_s"), get(real, "tpot_s")),
            "prefill speed-up sim": ratio(get(base[1], "ttft_s"), get(real, "ttft_s"))}


def flash_section(setup: Setup, out: Path) -> Section:
    s = Section("3. FlashAttention over context length", intro=(
        "Unfused attention writes and reads the score matrix (QK^T, softmax, ·V as three ops); FlashAttention is "
        f"one fused op that keeps it on chip. {MODEL}, batch 1, fp16; prefill of the whole context, and one decode "
        "step attending over it. Contexts beyond 4096 exceed Llama-2's trained length and are not run."))
    for hw in setup.machines:
        rows, panels = [], {f"{hw} prefill": {}, f"{hw} decode": {}}
        for ctx in setup.contexts:
            row: dict = {"context": ctx}
            for flash in (False, True):
                flat, real = pair(hw, prompt_len=ctx, flash_attention=flash)
                tag = "flash" if flash else "unfused"
                for phase, attr in (("prefill", "ttft_s"), ("decode", "tpot_s")):
                    row[f"{phase} {tag} roofline"] = ms(getattr(flat, attr) if flat else None, 3)
                    row[f"{phase} {tag} sim"] = ms(getattr(real, attr) if real else None, 3)
                    for kind, r in (("roofline", flat), ("sim", real)):
                        xs, ys = panels[f"{hw} {phase}"].setdefault(f"{tag} {kind}", ([], []))
                        xs.append(ctx)
                        ys.append(getattr(r, attr) * 1e3 if r else None)
            rows.append(row)
        s.tables.append(Table(f"FlashAttention on {hw}", f"{MODEL}, batch 1, fp16; times in ms.", pd.DataFrame(rows)))
        s.figures.append((f"FlashAttention, {hw}", figures.lines(panels, "context (tokens)", "ms",
                                                                 out / f"flash_{hw}.png", logy=True)))
    return s

"""Beyond one GPU: offloading to CPU memory and disk (the survey's FlexGen
discussion), and what the survey could not show, HBM-PIM and a Groq-style
spatial SRAM machine, on the same workloads as the GPUs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.apps.survey import figures
from sim.apps.survey.doc import Section, Table, ms, ratio
from sim.apps.survey.runs import MODEL, PROMPT, Setup, machine, pair, run
from sim.core.results import RunResult
from sim.core.units import whole_percents

OFFLOAD = "a6000_offload"
OTHERS = ("hbm_pim", "groq_lpu")


def _placement(r: RunResult) -> str:
    """Where the offload mapper put the weights and KV cache (GPU/CPU/disk percent)."""
    p = r.extra.get("policy") or {}
    if not p:
        return "-"
    # Policy.to_dict: fractions; rounded together so each triple shows 100 (34/33/33, not 33/33/33).
    pct = lambda *keys: "/".join(whole_percents([p.get(k, 0) for k in keys]))  # noqa: E731
    return (f"W {pct('wg', 'wc', 'wd')}, KV {pct('cg', 'cc', 'cd')}, "
            f"GPU batch {p.get('gpu_batch_size', '-')} x {p.get('num_gpu_batches', '-')}")


def offload_section(setup: Setup, out: Path) -> Section:
    s = Section("5. Offloading (FlexGen) on the A6000", intro=(
        f"`{OFFLOAD}`: the A6000 with 256 GB of DDR4 and an NVMe SSD behind PCIe 4.0 x16. Where a model does not fit "
        "the GPU, the offload mapper searches FlexGen's placements (weights, KV cache and activations split over "
        "GPU, CPU memory and disk; the block schedule overlaps transfers with compute) and runs the chosen one. "
        "Placement: percent on GPU/CPU/disk. The batch is the effective batch the search chose (at most the "
        "workload's). The last column is the plain `a6000` where the model fits."))
    rows, panels = [], {}
    for model in setup.offload_models:
        for b in setup.offload_batches:
            flat, real = pair(OFFLOAD, model=model, batch=b)
            gpu = run("a6000", model=model, batch=b)
            if real is None:
                rows.append({"model": model, "batch": b, "placement": "does not fit"})
                continue
            tok_s = real.batch / real.tpot_s
            rows.append({"model": model, "batch": real.batch, "placement": _placement(real),
                         "prefill roofline (s)": ms(flat.ttft_s / 1e3, 3) if flat else "-",
                         "prefill sim (s)": ms(real.ttft_s / 1e3, 3),
                         "decode roofline (ms)": ms(flat.tpot_s, 1) if flat else "-",
                         "decode sim (ms)": ms(real.tpot_s, 1), "decode tok/s sim": f"{tok_s:,.1f}",
                         "a6000 decode sim (ms)": ms(gpu.tpot_s, 1) if gpu else "does not fit"})
            xs, ys = panels.setdefault(model, ([], []))
            xs.append(real.batch)
            ys.append(tok_s)
    s.tables.append(Table(f"Offloading on {OFFLOAD}", (
        f"fp16, prompt {PROMPT}, one decode step at kv_len 1025. Pure roofline = the same placement search on the "
        "ideal machine (efficiencies 1, no latencies); that search may choose another placement and batch than the "
        "sim run's (the placement column is sim's), so for an offloaded model its step can even be the slower one."),
        pd.DataFrame(rows)))
    s.figures.append(("offload decode throughput", figures.lines(
        {f"{OFFLOAD}: decode throughput (sim)": panels}, "effective batch", "tokens/s", out / "offload.png",
        logy=True)))
    return s


def _extra_note(hw: str, r: RunResult | None) -> str:
    if r is None:
        return "does not fit"
    sp = r.extra.get("spatial")
    if sp:
        return f"{sp.get('chips')} chips ({sp.get('chips_needed')} needed)"
    pim = (r.extra.get("pim") or {}).get("placement") or {}
    on_pim = sorted({k for k, v in pim.items() if v.get("where") == "pim"})
    return ("PIM: " + ", ".join(on_pim)) if pim else machine(hw).description.split(",")[0]


def others_section(setup: Setup, out: Path) -> Section:
    s = Section("6. What the survey could not show: HBM-PIM and a spatial SRAM machine", intro=(
        "The same Llama-2-7B workloads on `hbm_pim` (an A100-class GPU whose five HBM2 stacks are Samsung "
        "Aquabolt-XL HBM-PIM: GEMVs and attention may run in the banks) and `groq_lpu` (GroqChip 1 TSPs, the "
        "weights spread over the chips' SRAM, layers pipelined chip to chip), beside the GPUs. A roofline of "
        "one device has no term for either: in-bank bandwidth, mode switches, chip counts and pipeline hops are "
        "what the simulator adds. Note: the pure roofline of a kind keeps its schedule (PIM placement, "
        "pipeline) and drops only efficiencies and latencies."))
    rows = []
    bars: dict[str, dict[str, list]] = {"decode, batch 1 (ms)": {}, "decode, batch 16 (ms)": {}}
    names = list(setup.machines) + list(OTHERS)
    for hw in names:
        d1, d16 = pair(hw, detail=True), pair(hw, batch=16, detail=True)
        p1 = d1
        rows.append({"machine": hw, "kind": machine(hw).kind,
                     "prefill b1 roofline": ms(p1[0].ttft_s) if p1[0] else "-",
                     "prefill b1 sim": ms(p1[1].ttft_s) if p1[1] else "-",
                     "decode b1 roofline": ms(d1[0].tpot_s, 3) if d1[0] else "-",
                     "decode b1 sim": ms(d1[1].tpot_s, 3) if d1[1] else "-",
                     "decode b16 roofline": ms(d16[0].tpot_s, 3) if d16[0] else "-",
                     "decode b16 sim": ms(d16[1].tpot_s, 3) if d16[1] else "-",
                     "sim / roofline (decode b1)": ratio(d1[1].tpot_s, d1[0].tpot_s) if d1[0] and d1[1] else "-",
                     "note": _extra_note(hw, d1[1])})
        for key, pr in (("decode, batch 1 (ms)", d1), ("decode, batch 16 (ms)", d16)):
            for kind, r in (("pure roofline", pr[0]), ("sim", pr[1])):
                bars[key].setdefault(kind, []).append(r.tpot_s * 1e3 if r else None)
    s.tables.append(Table("GPUs, HBM-PIM and Groq LPU on the same workloads", (
        f"{MODEL} fp16, prompt {PROMPT}; prefill in ms, one decode step at kv_len 1025 in ms. Note: where the "
        "ops ran (PIM) or how many chips (spatial)."), pd.DataFrame(rows)))
    s.figures.append(("machines compared", figures.bars(bars, names, "ms", out / "machines.png", logy=True)))
    return s

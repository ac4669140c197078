#!/usr/bin/env python3
"""Fit the attention family PyTorch's SDPA runs on the H200 (`torch_cudnn_sdpa`: torch 2.11 dispatches a bf16 call
to cuDNN's fused flash kernels: at decode `cudnn_generated_fort_native_sdpa_sm80_flash_fprop_*`, adding
`cudnn::fusion::lean_reduction_kernel` where it splits the KV; a causal prefill
`cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_*`) and write hw_models/stack/attention_kernels_torch.yaml
(issue 28), or `--check` that the file carries the fit.

Data (calibration): traces/h200/graph_steps/kernels.json `sdpa`, scripts/measure_graph_kernels.py's sweep of one
SDPA call (query length 1, bf16) over batch 1-64, 32 heads on 32 or 8 KV heads and 256-16384 cached tokens,
each call replayed in a CUDA graph (`per_call_s`: graph-replayed, the convention of the torch stacks' fitted
families, scripts/fit_torch_quant.py) and profiled (its kernels' device times). A replay re-reads one KV cache: a
cache within a few times the H200's 50 MB L2 (GH100) partly hits it, so the stream is fitted on the rows of at least
4 x L2 (16 rows, 268 MB-17 GB), which no L2 holds. Model (hw_models.stack.attention_kernels, one CTA per (sequence,
KV head), no per-CTA term, no ramp: the 268 MB rows take 63.5-68.1 us from 32 to 2048 CTAs):

    decode = fixed_s + KV bytes / (bandwidth x memory_max x kv_stream_efficiency) [+ combine_s where it splits]

fixed_s and 1 / kv_stream_efficiency by least squares on the relative error of the unsplit rows; combine_s the
median replayed time of the reduction kernel (its device time + the node gap its replay measured) over the split
rows. Three significant figures.

Prefill (calibration): traces/h200/graph_steps/prefill_sdpa.json, the same script's sweep of one causal call
(q_len = kv_len = S = 128-16384, batch 1-32 with batch x S <= 64K, MHA 8-40 heads and GQA 32/8, 64/8, bf16,
head_dim 128; 252 rows), fitted by scripts/fit_kernels.py's NNLS (nnls_prefill: fixed + kv_len x walk + FLOPs /
(bf16 peak x fraction(S)), the fraction never falling with S) on the relative error of `per_call_s`, the FLOPs
those of sim's own lowered attention op.

Held out: the flash captures' attention (traces/h200/*_flash, torch eager, `sim validate`) and the whole
graph-replayed steps (scripts/validation_h200_graph.py).

    python scripts/fit_torch_attention.py [--check] [--held-out]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from functools import cache
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fit_kernels import nnls_prefill  # noqa: E402  (scripts/)
from hw_models.compute_path import native_rates  # noqa: E402
from hw_models.machine import load_machine  # noqa: E402
from hw_models.stack.attention_kernels import MEASURED_FILE, cudnn_splits  # noqa: E402
from sim.core import graph as g  # noqa: E402

SWEEP = ROOT / "traces" / "h200" / "graph_steps" / "kernels.json"
PREFILL_SWEEP = ROOT / "traces" / "h200" / "graph_steps" / "prefill_sdpa.json"
L2_BYTES = 50 * 2**20        # GH100's L2 (NVIDIA H100 whitepaper: 50 MB); the H200 is the same die
REDUCTION = "lean_reduction_kernel"
FAMILY = "torch_cudnn_sdpa"


def sig(x: float) -> float:
    return float(f"{x:.3g}")


def rows() -> list[dict]:
    return json.loads(SWEEP.read_text())["sdpa"]


def splits(r: dict, sms: int) -> bool:
    return cudnn_splits(r["batch"], r["kv_heads"], sms, r["kv_len"])


def fit() -> dict:
    m = load_machine("h200")
    u = m.units[m.main_unit]
    bw = m.memory[u.memory].bandwidth_bytes_per_s * u.efficiency.for_kind(g.ATTENTION).memory_max
    sms = u.efficiency.parallel_units
    big = [r for r in rows() if r["kv_bytes"] >= 4 * L2_BYTES]
    plain = [r for r in big if not splits(r, sms)]
    # t = fixed + kv / (bw x eff): linear in (fixed, 1 / eff); rows weighted by 1 / t (relative error)
    t = np.array([r["per_call_s"] for r in plain])
    a = np.column_stack([np.ones(len(plain)), [r["kv_bytes"] / bw for r in plain]]) / t[:, None]
    (fixed, inv_eff), *_ = np.linalg.lstsq(a, np.ones(len(plain)), rcond=None)
    combine = statistics.median(
        next(v for k, v in r["kernels"].items() if REDUCTION in k) + r["gap_per_kernel_s"]
        for r in rows() if splits(r, sms))
    fig = dict(fixed_s=sig(fixed), fixed_cycles=0, cta_s=0, mha_cta_s=0, kv_stream_efficiency=sig(1 / inv_eff),
               kv_ramp_ctas=0, split="cudnn", combine_s=sig(combine), rows=len(big))
    model = [fig["fixed_s"] + r["kv_bytes"] / (bw * fig["kv_stream_efficiency"]) + (fig["combine_s"] if splits(r, sms) else 0)
             for r in big]
    fig["fit_mape"] = round(float(np.mean([abs(p / r["per_call_s"] - 1) for p, r in zip(model, big)])), 4)
    prefill = fit_prefill()
    return {"families": {FAMILY: {
        "description": "PyTorch SDPA on SM 9.0 (torch 2.11): cuDNN's fused flash kernels (decode: a lean reduction "
                       "kernel where it splits the KV; prefill: the causal wgmma kernel); graph-replayed times",
        "cite": f"this project's H200 sweeps ({SWEEP.relative_to(ROOT)}: {len(big)} decode rows of >= 4 x L2 fitted; "
                f"{PREFILL_SWEEP.relative_to(ROOT)}: {prefill['rows']} causal prefill rows); kernel names from their "
                "profiler records; scripts/fit_torch_attention.py",
        "decode": {"bf16": fig},
        "prefill": prefill}}}


def prefill_rows() -> list[dict]:
    return json.loads(PREFILL_SWEEP.read_text())["prefill"]


def fit_prefill() -> dict:
    """The causal prefill curve (module doc): fixed_s, walk_s_per_token and the fraction of the H200's bf16 peak at
    each swept S, with its fit MAPE over the rows."""
    from sim.apps.trace.aic import attention_ops
    m = load_machine("h200")
    peak = native_rates(m.units[m.main_unit], m.main_unit)["bf16"]
    rs = prefill_rows()
    lens = sorted({r["q_len"] for r in rs})
    idx = np.searchsorted(lens, [r["q_len"] for r in rs])
    ideal = np.array([attention_ops("h200", None, "torch", "prefill", r["batch"], r["q_len"], r["kv_len"], r["heads"],
                                    r["kv_heads"], 128, "bf16")[0][0].flops / peak for r in rs])
    t = np.array([r["per_call_s"] for r in rs])
    kv_len = np.array([float(r["kv_len"]) for r in rs])
    c = nnls_prefill(idx, ideal, t, np.zeros_like(t), kv_len, lens)
    points = [[q_len, sig(f)] for q_len, f in zip(lens, c[2:])]
    fixed, walk = sig(c[0]), sig(c[1])
    pred = fixed + walk * kv_len + ideal / np.array([points[i][1] for i in idx])
    return {"fixed_s": fixed, "walk_s_per_token": walk, "rate_points": points, "rows": len(rs),
            "fit_mape": round(float(np.mean(np.abs(pred / t - 1))), 4)}


CAPTURES = sorted((ROOT / "traces" / "h200").glob("*_flash.trace.json.gz")) + sorted(
    (ROOT / "traces" / "h200" / "quant").glob("*_flash.trace.json.gz"))


def held_out(phase: str = "decode", stack: str = "torch-eager") -> list[tuple[str, list[float]]]:
    """(capture, the signed errors of its `phase` attention calls) under `stack` on the h200 preset, as `sim validate`
    costs them (measured: the ops' kernel device times)."""
    return [(name, [r.error for r in ops if phase in r.step]) for name, ops in _attention_rows(stack)]


@cache
def _attention_rows(stack: str) -> tuple[tuple[str, tuple], ...]:
    """Each capture's validated attention ops under `stack`: validated once, read per phase by held_out."""
    from sim.apps.trace.parser import load_trace
    from sim.apps.trace.validate import validate
    machine = load_machine("h200")
    return tuple((path.name.split(".")[0], tuple(r for r in validate(load_trace(path), machine, stack=stack).ops
                                                 if r.kind == g.ATTENTION)) for path in CAPTURES)


def render(families: dict) -> str:
    """The family file's text for fit()'s output (what --check compares with the shipped file)."""
    return HEADER + yaml.safe_dump(families, sort_keys=False, width=120)


HEADER = ("# Generated by scripts/fit_torch_attention.py from this project's own H200 measurements\n"
          "# (traces/h200/graph_steps/kernels.json). Do not edit: rerun the script. hw_models/stack/attention_kernels.py\n"
          "# says how each figure is used.\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail if the shipped file differs from the fit")
    ap.add_argument("--held-out", action="store_true", help="also print the flash captures' decode attention errors")
    args = ap.parse_args()
    for phase in ("decode", "prefill") if args.held_out else ():
        errs = [(name, e) for name, e in held_out(phase) if e]
        for name, e in errs:
            print(f"  {name}: {len(e)} {phase} attention calls, median error {np.median(e):+.1%}, "
                  f"MAPE {np.mean(np.abs(e)):.1%}")
        every = np.concatenate([e for _, e in errs])
        print(f"held out: {phase} attention MAPE {np.mean(np.abs(every)):.1%} over {len(every)} calls of "
              f"{len(errs)} captures")
    fitted = fit()
    text = render(fitted)
    fig = fitted["families"][FAMILY]["decode"]["bf16"]
    print(f"{FAMILY}: fixed {fig['fixed_s'] * 1e6:.2f} us, KV stream x {fig['kv_stream_efficiency']} of the preset's "
          f"bandwidth, merge {fig['combine_s'] * 1e6:.2f} us; {fig['rows']} rows, MAPE {fig['fit_mape']:.1%}")
    pf = fitted["families"][FAMILY]["prefill"]
    print(f"{FAMILY} prefill: fixed {pf['fixed_s'] * 1e6:.2f} us, walk {pf['walk_s_per_token'] * 1e9:.2f} ns/key, "
          f"fraction {', '.join(f'{q}: {f}' for q, f in pf['rate_points'])}; {pf['rows']} rows, MAPE {pf['fit_mape']:.1%}")
    if args.check:
        if not MEASURED_FILE.is_file() or MEASURED_FILE.read_text() != text:
            print(f"{MEASURED_FILE} differs from the fit: rerun scripts/fit_torch_attention.py")
            return 1
        return 0
    MEASURED_FILE.write_text(text)
    print(f"wrote {MEASURED_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

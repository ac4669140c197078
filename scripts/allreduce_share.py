#!/usr/bin/env python3
"""A TP decode step's all-reduce share: what aiconfigurator's measured H100 tables imply, and sim's (issue 28).

Table side: one decoder layer composed from the measured rows of `shared/validation/aic` (H100 SXM, the
in-sample GPU whose comm table has 4- and 8-GPU groups), per engine:
* the four projection GEMMs (fused QKV, O, fused gate-up, down) at their TP-sharded (N, K) and M = batch,
  bf16, through the engine's Linear (TRT-LLM `torch_flow`, vLLM `torch_linear`, SGLang `sglang_torch_linear`).
  M, N and K each interpolate linearly between the neighbouring measured rows where off the grid (the
  batches shown are on it; Llama-70B's TP8 QKV N = 1280 and gate-up N = 14336 at TP4 are not);
* decode attention at the batch, kv_len = context and the per-GPU heads / KV heads (bf16 KV);
* two all-reduces of batch x hidden x 2 bytes: the engine's custom all-reduce rows (CUDA-graph rows where
  the table has both), or NCCL's where hw_models/network/engine_collectives.py says the engine hands the
  message to NCCL; linear in bytes between measured sizes.
Norms, RoPE (inside TRT-LLM's attention row), activation and residual adds are left out of both sides: the
shares compare like with like, over GEMM + attention + all-reduce. sim's share of its whole step (embedding,
norms, LM head and its all-gather in) is printed beside it; the difference between the two bounds what
leaving them out moves.

sim side: `simulate` of the same decode step (batch, context, model) under the engine's stack on h100_sxm in
dgx_h100 with tp = TP; the shares from the decode step's op timeline (rank 0).

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/allreduce_share.py [--write]
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.machine import load_machine  # noqa: E402
from hw_models.network.engine_collectives import custom_kernel, sglang_algorithm  # noqa: E402
from hw_models.registry import simulate  # noqa: E402
from sim.apps.serve.validate import MODELS  # noqa: E402
from sim.core.workload import workload_from_dict  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402

SHARED = shared_validation_dir()
DOC = ROOT / "docs" / "parallelism.md"
BEGIN, END = "<!-- allreduce_share: begin -->", "<!-- allreduce_share: end -->"
GEMMS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


@dataclass(frozen=True)
class Engine:
    """Where an engine's rows are in the H100 tables (the versions aic measured together)."""

    gemm_file: str
    gemm_kernel: str
    attn_kernel: str
    comm_source: str
    comm_kernel: str
    comm_version: str
    collective: str          # engine_collectives' name for its custom all-reduce
    algorithm: str | None = None   # sim's parallel.algorithm where the stack's default is another release's kernel


ENGINES = {
    "trtllm": Engine("gemm_h100", "torch_flow", "torch_flow", "trtllm_custom_ar", "TRTLLM", "1.3.0rc20", "trtllm"),
    "vllm": Engine("gemm_h100", "torch_linear", "vllm_flash_attn_fa3", "vllm_custom_ar", "vLLM_custom_graph",
                   "0.24.0", "vllm"),
    # SGLang 0.5.14 runs its CustomAllReduceV2 (engine_collectives: from 0.5.12), not the v1 kernel (vLLM's) that
    # the sglang stack keeps for the 0.5.1-0.5.8 runs it was checked on (docs/serving.md): the plan names it
    "sglang": Engine("gemm_sglang_h100", "sglang_torch_linear", "fa3", "sglang_custom_ar",
                     "SGLang_CustomAllReduce_graph", "0.5.14", "sglang", "sglang_custom"),
}


@dataclass(frozen=True)
class Case:
    model: str      # a key of sim.apps.serve.validate.MODELS
    tp: int
    engine: str
    batch: int
    context: int    # kv_len of the decode step, the new token's included


@cache
def table(name: str) -> pd.DataFrame:
    return pd.read_csv(SHARED / "aic" / f"{name}.csv.gz")


def _interp(x: float, xs: np.ndarray, ys: np.ndarray, what: str) -> float:
    """Linear between the neighbouring measured points; never outside them."""
    order = np.argsort(xs)
    xs, ys = xs[order], ys[order]
    if len(xs) == 0 or not xs[0] <= x <= xs[-1]:
        raise ValueError(f"{what}: {x} outside the measured {xs.min() if len(xs) else '-'}..{xs.max() if len(xs) else '-'}")
    return float(np.interp(x, xs, ys))


def _bracket(x: int, grid: np.ndarray) -> tuple[int, int]:
    lo, hi = grid[grid <= x].max(), grid[grid >= x].min()
    return int(lo), int(hi)


def gemm_us(eng: Engine, m: int, n: int, k: int) -> float:
    """The measured bf16 GEMM (M, N, K): linear in M, then in N and K, between neighbouring rows."""
    t = table(eng.gemm_file)
    t = t[(t.kernel == eng.gemm_kernel) & (t.dtype == "bfloat16")]
    grid = np.array(sorted(t.n.unique()))

    def at(nn: int, kk: int) -> float:
        r = t[(t.n == nn) & (t.k == kk)]
        return _interp(m, r.m.to_numpy(float), r.latency_us.to_numpy(float), f"gemm M (N={nn}, K={kk})")

    (n0, n1), (k0, k1) = _bracket(n, grid), _bracket(k, grid)
    wn = 0.0 if n1 == n0 else (n - n0) / (n1 - n0)
    wk = 0.0 if k1 == k0 else (k - k0) / (k1 - k0)
    return ((1 - wn) * (1 - wk) * at(n0, k0) + wn * (1 - wk) * at(n1, k0)
            + (1 - wn) * wk * at(n0, k1) + wn * wk * at(n1, k1))


def attention_us(eng: Engine, batch: int, kv_len: int, heads: int, kv_heads: int) -> float:
    t = table("gen_attn_h100")
    r = t[(t.kernel_source == eng.attn_kernel) & (t.heads == heads) & (t.kv_heads == kv_heads)
          & (t.kv_dtype == "bfloat16") & (t.batch == batch)]
    return _interp(kv_len - 1, r.step.to_numpy(float), r.latency_us.to_numpy(float),
                   f"attention step (batch {batch}, heads {heads}/{kv_heads})")


def all_reduce_us(eng: Engine, nbytes: int, ranks: int) -> tuple[float, str]:
    """The all-reduce the engine runs on `nbytes` at `ranks`: its custom kernel's rows, or NCCL's."""
    t = table("comm_h100")
    t = t[(t.op == "all_reduce") & (t.num_gpus == ranks)]
    if custom_kernel(eng.collective, nbytes, ranks) is None:
        r, name = t[(t.source == "nccl") & (t.version == "2.29.2") & (t.dtype == "half")], "nccl"
    else:
        r, name = t[(t.source == eng.comm_source) & (t.kernel_source == eng.comm_kernel)
                    & (t.version == eng.comm_version)], eng.comm_source
    return _interp(nbytes, r.bytes.to_numpy(float), r.latency_us.to_numpy(float), f"all-reduce {name}"), name


def table_layer(case: Case) -> dict[str, float]:
    """One layer from the tables, µs: gemm, attention, all_reduce."""
    cfg, eng, tp, m = MODELS[case.model], ENGINES[case.engine], case.tp, case.batch
    h, heads, kvh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", h // heads)
    shapes = [((heads + 2 * kvh) * hd // tp, h), (h, heads * hd // tp),
              (2 * cfg["intermediate_size"] // tp, h), (h, cfg["intermediate_size"] // tp)]
    gemm = sum(gemm_us(eng, m, n, k) for n, k in shapes)
    attn = attention_us(eng, m, case.context, heads // tp, kvh // tp)
    ar, _ = all_reduce_us(eng, m * h * 2, tp)
    return {"gemm": gemm, "attention": attn, "all_reduce": 2 * ar}


def sim_step(case: Case, machine) -> dict[str, float]:
    """sim's decode step, s: the same op groups summed over layers, and the whole step."""
    raw = {"name": "allreduce_share", "model": MODELS[case.model], "batch": case.batch,
           "prompt_len": case.context - 1, "gen_len": 2, "stack": case.engine, "flash_attention": True,
           "formats": {"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"},
           "parallel": {"tp": case.tp, "topology": "dgx_h100",
                        **({"algorithm": eng.algorithm} if (eng := ENGINES[case.engine]).algorithm else {})}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = simulate(workload_from_dict(raw, "allreduce_share"), machine)
    assert res.decode_kv_len == case.context, (res.decode_kv_len, case.context)
    out = {"gemm": 0.0, "attention": 0.0, "all_reduce": 0.0, "step": res.tpot_s}
    for op in res.decode_ops:
        base = re.sub(r"^L\d+\.", "", op.name)
        key = ("gemm" if base in GEMMS else "attention" if base == "attention"
               else "all_reduce" if re.fullmatch(r"(o|down)_proj\.all_reduce", base) else None)
        if key:
            out[key] += op.end_s - op.start_s
    return out


def share(parts: dict[str, float]) -> float:
    return parts["all_reduce"] / (parts["gemm"] + parts["attention"] + parts["all_reduce"])


def row(case: Case, machine) -> dict[str, float]:
    tab, sim = table_layer(case), sim_step(case, machine)
    layers = MODELS[case.model]["num_hidden_layers"]
    t_share, s_share = share(tab), share(sim)
    return {"table_ar_us": tab["all_reduce"] / 2, "sim_ar_us": sim["all_reduce"] / layers / 2 * 1e6,
            "table_layer_us": sum(tab.values()), "sim_layer_us": (sim["gemm"] + sim["attention"] + sim["all_reduce"])
            / layers * 1e6, "table_share": t_share, "sim_share": s_share, "rel": s_share / t_share - 1,
            "sim_step_share": sim["all_reduce"] / sim["step"]}


def cases(models: list[str], tps: list[int], engines: list[str], batches: list[int], context: int) -> list[Case]:
    return [Case(m, tp, e, b, context) for m in models for tp in tps for e in engines for b in batches]


def markdown(rows: list[tuple[Case, dict[str, float]]], context: int) -> str:
    head = (f"H100 SXM (dgx_h100), bf16, decode step at kv_len {context}; per layer: table = aiconfigurator's "
            "measured rows composed, sim = the stack's decode step. Share = all-reduce / (GEMM + attention + "
            "all-reduce); last column: sim's all-reduce share of its whole step.\n\n"
            "| model | TP | engine | batch | AR table us | AR sim us | layer table us | layer sim us | "
            "share table | share sim | rel. diff | sim share of step |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for c, r in rows:
        lines.append(f"| {MODELS[c.model]['name']} | {c.tp} | {c.engine} | {c.batch} | {r['table_ar_us']:.2f} | "
                     f"{r['sim_ar_us']:.2f} | {r['table_layer_us']:.1f} | {r['sim_layer_us']:.1f} | "
                     f"{r['table_share']:.1%} | {r['sim_share']:.1%} | {r['rel']:+.0%} | {r['sim_step_share']:.1%} |")
    worst = max(abs(r["rel"]) for _, r in rows)
    lines.append(f"\nLargest relative difference of the shares: {worst:.0%} (target 20%, issue 28).")
    return "\n".join(lines)


def write_doc(text: str, doc: Path = DOC) -> None:
    """Replace the text between the markers (its section's prose is written by hand around them)."""
    body = doc.read_text()
    if BEGIN not in body or END not in body:
        raise ValueError(f"{doc}: no {BEGIN} ... {END} markers")
    doc.write_text(body[:body.index(BEGIN)] + f"{BEGIN}\n{text}\n{END}" + body[body.index(END) + len(END):])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="meta-llama/Llama-3.1-70B,Qwen/Qwen3-32B", help="comma-separated (%(default)s)")
    ap.add_argument("--tp", default="4,8", help="TP sizes (%(default)s)")
    ap.add_argument("--engines", default="trtllm,vllm,sglang", help="(%(default)s)")
    ap.add_argument("--batches", default="1,8,32,128", help="decode batch sizes (%(default)s)")
    ap.add_argument("--context", type=int, default=1024, help="kv_len of the step (%(default)s)")
    ap.add_argument("--sglang-ar-version", default=ENGINES["sglang"].comm_version,
                    help="SGLang version whose custom all-reduce rows the table side reads (%(default)s: the version of "
                         "its GEMM and attention rows; the table also has 0.5.9 and 0.5.10); sim runs that "
                         "release's kernel (V2 from 0.5.12, else vLLM's)")
    ap.add_argument("--write", action="store_true", help=f"put the table into {DOC.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    try:
        models = args.models.split(",")
        bad = [m for m in models if m not in MODELS] + [e for e in args.engines.split(",") if e not in ENGINES]
        if bad:
            raise ValueError(f"unknown model or engine {bad[0]!r}; models: {', '.join(MODELS)}; engines: {', '.join(ENGINES)}")
        todo = cases(models, [int(x) for x in args.tp.split(",")], args.engines.split(","),
                     [int(x) for x in args.batches.split(",")], args.context)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not (SHARED / "aic" / "comm_h100.csv.gz").is_file():
        print(f"{SHARED / 'aic'}: not found (set SIM_SHARED_VALIDATION)", file=sys.stderr)
        return 2
    v2 = sglang_algorithm(args.sglang_ar_version, nvlink=True) == "sglang_custom"   # that release's kernel
    ENGINES["sglang"] = replace(ENGINES["sglang"], comm_version=args.sglang_ar_version,
                                collective="sglang" if v2 else "vllm", algorithm="sglang_custom" if v2 else None)
    machine = load_machine("h100_sxm")
    try:
        rows = [(c, row(c, machine)) for c in todo]
    except ValueError as exc:   # a shape or size outside the measured rows
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = markdown(rows, args.context)
    print(text)
    if args.write:
        try:
            write_doc(text)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

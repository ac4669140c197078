#!/usr/bin/env python3
"""Fit the engines' kernel figures on aiconfigurator's measured op tables of the in-sample GPUs.

Reads shared/validation/aic (H100, A100, RTX PRO 6000, L40S; never the held-out H200 or
Blackwell datacenter tables, aic/README.md) and writes the fitted files. The L40S rows feed only
its own node's collectives, its dense bf16 family and the SM 8.9 families of fit_kernels_ada.py
(the pooled families and graph_gap_s keep the other three GPUs' figures):

* hw_models/network/engine_collectives.yaml: per node topology (H100 -> dgx_h100, A100 ->
  dgx_a100, RTX PRO 6000 -> rtx_pro_6000_x8_pcie, L40S -> l40s_x8_pcie) and group size, NCCL's two protocol lines per collective and each engine's
  one-shot / two-shot custom all-reduce line (hw_models.network.engine_collectives).
* graph_gap_s of the CUDA-graph stacks (hw_models/stack/presets vllm, trtllm, torch-cudagraph): the
  median over the in-sample bf16 GEMMs with M <= 16 and weights <= 8 MB (both engines, H100, A100,
  RTX PRO 6000) of measured time less the roofline's time without its launch overhead. --check
  compares it with the stacks' figure (hand-copied into their YAML, whose comments cite it).
* hw_models/stack/attention_kernels.yaml: per attention kernel family, the decode figures per KV
  format (fixed, per-CTA, KV stream efficiency) and the prefill curves (fixed, critical-path walk per key,
  fraction of the bf16 peak per sequence length: hw_models.stack.attention_kernels), on the H100, A100 and
  RTX PRO 6000 tables pooled, and the prefill curves again per architecture on each GPU's rows alone, the L40S's
  (SM 8.9) included (`prefill_sm`; its decode rows are not fitted on). The target is the measured call less what
  sim charges for the other ops the call covers (RoPE, KV-cache write: sim.apps.trace.aic.ATTENTION_OPS).
* hw_models/stack/kernel_families_fitted.yaml: the quantized GEMM families the engines run
  (hw_models.stack.kernel_families), on each family's rows of the gemm tables (QUANT_GEMM). A
  W8A8 family's activation-quantization kernel is fitted first on the engine's quant table
  (floor + bytes / streaming rate), then the GEMM on the measured call less that kernel:
  stage 1 the floor and weight-stream efficiency on the memory-bound rows (M <= 16), stage 2
  the achieved fraction of the rate at each measured M (the fraction minimizing the MAPE of
  that M's rows, held non-decreasing in M as the family model requires).
  The same file holds one dense bf16 GEMM family per in-sample GPU (dense_bf16_<gpu>, named by the
  GPU preset's efficiency.dense_gemm), fitted the same way on that GPU's bf16 rows of all three
  engines, with the K-walk and the replay's L2 read rate (REPLAY_L2_GRID; each row's weights in the L2 where its
  engine's collector copies fit, hw_models.stack.cost.replay_weight_copies), stage 2 apart on the rows whose
  weights stream from DRAM (rate_points, what a model runs on) and those read from the L2 (l2_rate_points:
  hw_models.stack.kernel_families says why); --hold-out GPU also fits it pooled on the other two GPUs and reports
  the third.

Every line is fitted by least squares on the relative error (each point weighted by
1 / measured), so small and large messages count alike. NCCL's two lines: for each split
of the sorted message sizes, one line through the sizes below and one through those above;
the split whose min(line_1, line_2) has the lowest MAPE over all sizes wins.

    python scripts/fit_kernels.py            # print the fits and their MAPE
    python scripts/fit_kernels.py --write    # rewrite the shipped YAML
    python scripts/fit_kernels.py --check    # exit 1 if the shipped YAML differs from the fit
    python scripts/fit_kernels.py --hold-out a100   # refit attention (decode, prefill), the quantized and dense GEMMs
                                                    # without one GPU; print the MAPE per GPU (nothing written)
"""

from __future__ import annotations

import argparse
from functools import cache
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.network.collectives import alpha_beta  # noqa: E402
from hw_models.network.engine_collectives import (  # noqa: E402
    FITS_FILE, ONE_SHOT, custom_allowed, custom_kernel, sglang_algorithm)
from hw_models.network.topology import load_topology  # noqa: E402
from fit_kernels_ada import ADA_FP8, ADA_GPUS, ADA_K_WALK, ADA_L2_BYTES, ADA_ROW_SCALE  # noqa: E402  (scripts/)
from sim.core.shared_data import shared_validation_dir  # noqa: E402

SHARED = shared_validation_dir() / "aic"
IN_SAMPLE = {"h100": "dgx_h100", "a100": "dgx_a100", "rtx_pro_6000": "rtx_pro_6000_x8_pcie",   # comm table + node
             "l40s": "l40s_x8_pcie"}
COMM_KIND = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
             "alltoall": "all_to_all"}
ENGINES = {"trtllm_custom_ar": "trtllm", "vllm_custom_ar": "vllm", "sglang_custom_ar": "sglang"}
MIN_BYTES = 1024          # the NCCL tables start at 1 KB; smaller custom rows are kept


def _sig(x: float) -> float:
    return float(f"{x:.3g}")


def line_fit(x: np.ndarray, y: np.ndarray, c: np.ndarray | None = None) -> tuple[float, float]:
    """(a, b) of y ~ a c + b x, least squares on the relative error, both >= 0; c defaults to 1."""
    c = np.ones_like(x) if c is None else c
    w = 1.0 / y
    A = np.vstack([c * w, x * w]).T
    (a, b), *_ = np.linalg.lstsq(A, np.ones_like(y), rcond=None)
    if a < 0:
        a, b = 0.0, float(np.sum(x * w * w * y) / np.sum((x * w) ** 2)) if np.any(x) else 0.0
    if b <= 0:
        b = float(np.median(y / np.maximum(x, 1.0))) * 1e-3 or 1e-18
        a = float(np.sum(c * w * (1 - b * x * w)) / np.sum((c * w) ** 2))
    return float(max(a, 0.0)), float(b)


def nccl_lines(size: np.ndarray, t: np.ndarray, steps: float, factor: float) -> list[dict]:
    """Two protocol lines (module doc); t seconds for whole-buffer bytes `size`."""
    order = np.argsort(size)
    size, t = size[order], t[order]
    c, x = np.full_like(size, steps), factor * size
    best = None
    for cut in range(2, len(size) - 1):
        lines = [line_fit(x[:cut], t[:cut], c[:cut]), line_fit(x[cut:], t[cut:], c[cut:])]
        pred = np.min([a * c + b * x for a, b in lines], axis=0)
        mape = float(np.mean(np.abs(pred - t) / t))
        if best is None or mape < best[0]:
            best = (mape, lines)
    return [{"latency_s": _sig(a), "bandwidth_bytes_per_s": _sig(1.0 / b)} for a, b in best[1]]


def _comm(gpu: str) -> pd.DataFrame:
    df = pd.read_csv(SHARED / f"comm_{gpu}.csv.gz")
    return df[~df["kernel_source"].str.endswith("_eager")]   # the engines replay CUDA graphs


def fit_node(gpu: str) -> dict:
    df = _comm(gpu)
    out: dict = {"fitted_on": f"shared/validation/aic/comm_{gpu}.csv.gz", "nccl": {}, "custom": {}}
    nccl = df[(df["source"] == "nccl") & (df["bytes"] >= MIN_BYTES)]
    for op, kind in COMM_KIND.items():
        for n, part in sorted(nccl[nccl["op"] == op].groupby("num_gpus")):
            med = part.groupby("bytes")["latency_us"].median()
            steps, factor = alpha_beta(kind, "ring", int(n))
            out["nccl"].setdefault(kind, {})[int(n)] = nccl_lines(med.index.to_numpy(float),
                                                                 med.to_numpy() * 1e-6, steps, factor)
    topo = load_topology(IN_SAMPLE[gpu])
    for src, engine in ENGINES.items():
        rows = df[(df["source"] == src) & (df["op"] == "all_reduce")]
        if engine == "sglang":   # only the releases that run CustomAllReduceV2 on this node
            nvlink = topo.interconnect.kind == "nvswitch"
            rows = rows[[sglang_algorithm(v, nvlink) == "sglang_custom" for v in rows["version"]]]
        if rows.empty:
            continue
        latest = rows[rows["version"] == _latest(rows["version"])]
        for n, part in sorted(latest.groupby("num_gpus")):
            n = int(n)
            if not custom_allowed(engine, topo, n):   # the engine hands every message to NCCL here
                continue
            med = part.groupby("bytes")["latency_us"].median()
            kernels = {}
            for kernel in sorted({custom_kernel(engine, b, n) for b in med.index} - {None}):
                sel = [b for b in med.index if custom_kernel(engine, b, n) == kernel]
                if len(sel) < 2:
                    continue
                s = np.array(sel, dtype=float)
                moved = (n - 1) * s if kernel == ONE_SHOT else 2 * (n - 1) / n * s
                a, b = line_fit(moved, med.loc[sel].to_numpy() * 1e-6)
                kernels[kernel] = {"latency_s": _sig(a), "bandwidth_bytes_per_s": _sig(1.0 / b)}
            if kernels:
                out["custom"].setdefault(engine, {})[n] = kernels
    return out


def _latest(versions: pd.Series) -> str:
    def key(v: str) -> tuple:
        return tuple(int(p) if p.isdigit() else 0 for p in str(v).replace("rc", ".").replace("post", ".").split("."))
    return max(versions.astype(str).unique(), key=key)


def render(fits: dict[str, dict]) -> str:
    lines = ["# Generated by scripts/fit_kernels.py from aiconfigurator's measured comm tables of the in-sample GPUs",
             "# (shared/validation/aic; H200 / Blackwell tables are held out). Do not edit: rerun the script.",
             "# hw_models/network/engine_collectives.py says how each line is used.", "nodes:"]
    for node, f in fits.items():
        lines += [f"  {node}:", f"    fitted_on: {f['fitted_on']}", "    nccl:"]
        for kind, by_n in f["nccl"].items():
            lines.append(f"      {kind}:")
            for n, ls in by_n.items():
                lines.append(f"        {n}: [" + ", ".join(
                    f"{{latency_s: {x['latency_s']:.3g}, bandwidth_bytes_per_s: {x['bandwidth_bytes_per_s']:.3g}}}"
                    for x in ls) + "]")
        lines.append("    custom:")
        for engine, by_n in f["custom"].items():
            lines.append(f"      {engine}:")
            for n, ks in by_n.items():
                lines.append(f"        {n}:")
                for k, x in ks.items():
                    lines.append(f"          {k}: {{latency_s: {x['latency_s']:.3g}, "
                                 f"bandwidth_bytes_per_s: {x['bandwidth_bytes_per_s']:.3g}}}")
    return "\n".join(lines) + "\n"


def fit_all() -> str:
    return render({node: fit_node(gpu) for gpu, node in IN_SAMPLE.items()})


# Attention families: which rows of the tables each is fitted on (`gpus`: only those GPUs' rows), the engines'
# source naming the kernel; `mha_kernel`: MHA calls run another kernel (own stream figures); `walk`: fit a
# serial walk per KV token for grouped-query calls (hw_models.stack.attention_kernels); `skip_decode`: a GPU's
# decode rows of that KV format run another kernel and are not fitted on; `split`: how the decode kernel splits a
# sequence (Decode.split), one for every KV format or a dict by the tables' kv_dtype ("none" where not named);
# `context_kernel`: a prefill call runs the context kernel even for one token (AttentionFamily.context_kernel).
# TensorRT-LLM's multi-block mode (hw_models/stack/xqa_splits.py): its merge priced where a sequence is cut; the
# walk families' FP8-KV grouped calls do not split (their `walk`), so they take it for the 16-bit cache only.
TRTLLM_ATTENTION = dict(framework="trtllm", kernel=None, stack="trtllm", mha_kernel=True, split="xqa",
                        context_kernel=True)
TRTLLM_ATTENTION_CITE = (
    "TensorRT-LLM tensorrt_llm/_torch/attention_backend/trtllm.py (TrtllmAttention -> thop attention op: XQA decode "
    "kernels cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/, FMHA context "
    "cpp/tensorrt_llm/kernels/contextFusedMultiHeadAttention/)")
VLLM_FLASHINFER_CITE = (
    "vllm/v1/attention/backends/flashinfer.py (FlashInferImpl.forward: BatchPrefillWithPagedKVCacheWrapper for the "
    "prefill tokens, BatchDecodeWithPagedKVCacheWrapper for the decode ones); vllm/platforms/cuda.py "
    "_get_backend_priorities (FP8 KV off Hopper: FLASHINFER, FLASH_ATTN reads FP8 KV only as FA3). Prefill fitted on "
    "vLLM's FP8-KV ctx_attn rows (kernel_source vllm_flashinfer_fiprefill / _fidecode: RTX PRO 6000 and L40S), which "
    "take 1.33-1.38x (RTX PRO 6000) and 1.25-1.30x (L40S) SGLang's FlashInfer FP8-KV rows of the same shapes at the "
    "median from 1K to 16K tokens")


def _trtllm_walk_family(gpu: str, arch: str, gpu_name: str, sm: str, why: str) -> dict:
    """TensorRT-LLM's attention op on an architecture whose FP8-KV grouped-query decode walks the cache unsplit,
    fitted on that architecture's one in-sample GPU (`walk`: kv_walk_s_per_token)."""
    return dict(TRTLLM_ATTENTION, gpus=(gpu,), walk="grouped", split={"bfloat16": "xqa"},
                description=f"TensorRT-LLM attention op on {arch}, as trtllm_attention; its FP8-KV grouped-query "
                            "decode does not split the sequence across CTAs (kv_walk_s_per_token)",
                cite=f"{TRTLLM_ATTENTION_CITE}; fitted on the {gpu_name} rows (the only in-sample {sm} GPU: none "
                     f"held out). {why}")


ATTENTION = {
    "trtllm_attention": dict(
        TRTLLM_ATTENTION, skip_decode={"rtx_pro_6000": "fp8"},
        description="TensorRT-LLM attention op (XQA / masked MHA decode, FMHA context), RoPE and KV write fused "
                    "(SM 8.0 / 9.x; SM 12.x runs trtllm_attention_sm120, SM 8.9 trtllm_attention_sm89)",
        cite=TRTLLM_ATTENTION_CITE + "; fitted on every in-sample GPU's rows but the RTX PRO 6000's FP8-KV decode "
             "(another kernel: it walks the cache unsplit, trtllm_attention_sm120), so that a GPU can be held out"),
    "trtllm_attention_sm120": _trtllm_walk_family(
        "rtx_pro_6000", "SM 12.x (RTX Blackwell)", "RTX PRO 6000", "SM 12.x",
        "XQA's multi_block_mode (decoderXQARunner, xqaDispatcher.cpp getWorkspaceSize: nbSubSeq sub-sequences per "
        "sequence) is what splits it elsewhere; why the SM 12.x FP8-KV path runs without it is not established from "
        "the source, only measured"),
    "trtllm_attention_sm89": _trtllm_walk_family(
        "l40s", "SM 8.9 (Ada)", "L40S", "SM 8.9",
        "Its FP8-KV grouped-query rows at batch 1 take the same time for 1-8 KV heads at every KV length, as the RTX "
        "PRO 6000's do (trtllm_attention_sm120); XQA kernels are compiled for the running GPU's SM version "
        "(cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/decoderXQAImplJIT, NVRTC; precompiled: "
        "cubin/xqa_kernel_cubin.h per SM), so SM 8.9's are not SM 8.0's"),
    "flash_attn": dict(
        framework="vllm", kernel="flash_attn", stack="vllm", decode_gpus=("h100",),
        description="FlashAttention through vLLM's FLASH_ATTN backend, FA3 on Hopper (decode fitted on the H100's rows; "
                    "the prefill curves on every GPU's, per architecture in prefill_sm); FA2's decode is flash_attn2",
        cite="vllm/v1/attention/backends/flash_attn.py (FlashAttentionImpl.forward -> vllm_flash_attn "
             "flash_attn_varlen_func; fa_utils.get_flash_attn_version: FA3 on SM 9.0, else FA2)"),
    "flash_attn2": dict(
        framework="vllm", kernel="flash_attn", stack="vllm", gpus=("a100", "rtx_pro_6000"), walk="mha", split="fa2",
        prefill_from="flash_attn",
        description="FlashAttention-2 through vLLM's FLASH_ATTN backend (Ampere, Ada, RTX Blackwell); grouped-query "
                    "decode split across CTAs by FA2's heuristic, MHA decode unsplit (one CTA walks the whole cache)",
        cite="vllm/v1/attention/backends/flash_attn.py (fa_utils.get_flash_attn_version: FA2 off SM 9.0); "
             "vllm-project/flash-attention csrc/flash_attn/flash_api.cpp mha_varlen_fwd (split-KV only where "
             "seqlenq_ngroups_swapped: one query token and more query than KV heads) and set_params_splitkv / "
             "num_splits_heuristic. Fitted on the A100 and RTX PRO 6000 rows (kernel_source vllm_flash_attn, "
             "vllm_flash_attn_fa2); the L40S's (SM 8.9, FA2) are held out. Prefill: flash_attn's curves (prefill_from), "
             "which are per architecture already"),
    "sglang_fa3": dict(
        framework="sglang", kernel="fa3", stack="sglang", prefill_kernel="fa3|flash_attention",
        description="FlashAttention-3 as SGLang runs it on Hopper (sgl-kernel's own FA3 build, paged KV through "
                    "flash_attn_with_kvcache), fitted apart from vLLM's FA3 (vllm_flash_attn flash_attn_varlen_func)",
        cite="sglang python/sglang/srt/layers/attention/flashattention_backend.py (FlashAttentionBackend.forward_decode "
             "-> sgl_kernel.flash_attn.flash_attn_with_kvcache); server_args.py _get_default_attn_backend (fa3 on Hopper). "
             "Fitted on SGLang's H100 rows (kernel_source fa3; the only in-sample Hopper GPU: none held out): its "
             "decode call is cheaper than vLLM's at every size (bf16 rows 14-33% below the flash_attn family), and "
             "its FP8-KV rows of >= 1 GB stream at 0.63 of the DRAM peak where vLLM's take 0.84. Its SM 8.0 prefill "
             "curve is fitted on SGLang's A100 rows (kernel_source flash_attention, SGLang's FlashAttention backend; "
             "which build ran is not established from the source, only the tables' kernel column)"),
    "sglang_fa3_sm80": dict(
        framework="sglang", kernel="flash_attention", stack="sglang", gpus=("a100",), split="fa3",
        prefill_from="sglang_fa3",
        description="FlashAttention-3's SM 8.x build as SGLang's fa3 backend runs it off Hopper (sgl-kernel "
                    "flash_attn_with_kvcache, paged KV of one-token pages); decode split as FA3's varlen heuristic "
                    "splits it, MHA and grouped-query calls alike",
        cite="sglang python/sglang/srt/layers/attention/attention_registry.py create_flashattention_v3_backend (SM "
             "8.x for non-MLA models, SM 9.x) -> layers/attention/flashattention_backend.py; Dao-AILab/flash-attention "
             "hopper/flash_api.cpp get_num_splits, hopper/heuristics.h num_splits_heuristic, hopper/"
             "flash_prepare_scheduler.cu prepare_varlen_num_blocks_kernel, hopper/tile_size.h tile_size_fwd_sm8x. "
             "Fitted on SGLang's A100 rows (kernel_source flash_attention; the only in-sample SM 8.0 GPU: none held "
             "out). Prefill: sglang_fa3's curves (prefill_from), whose SM 8.0 curve is fitted on the same A100 rows"),
    "flashinfer": dict(
        framework="sglang", kernel="flashinfer", stack="sglang", check=("vllm", "flashinfer", "vllm"), split="flashinfer",
        description="FlashInfer paged decode / prefill through SGLang's flashinfer backend (its default off Hopper and "
                    "datacenter Blackwell) and vLLM's FLASHINFER backend (FP8 KV where FlashAttention has none)",
        cite="sglang python/sglang/srt/server_args.py ServerArgs._get_default_attn_backend (MHA: fa3 on Hopper with "
             "CUDA >= 12.3, trtllm_mha on SM 10.x, else flashinfer) -> layers/attention/flashinfer_backend.py "
             "(BatchDecodeWithPagedKVCacheWrapper, BatchPrefillWithPagedKVCacheWrapper); vllm/platforms/cuda.py "
             "_get_backend_priorities (FlashInfer first on SM 10.x, after FLASH_ATTN elsewhere; FLASH_ATTN takes FP8 "
             "KV only with FA3 on Hopper: vllm/attention/utils/fa_utils.py flash_attn_supports_fp8). Fitted on "
             "SGLang's rows (RTX PRO 6000: the only in-sample GPU with a preset whose SGLang rows run FlashInfer); "
             "vLLM's FlashInfer rows of the same GPU are the check. Decode split (partition-kv): "
             "include/flashinfer/attention/scheduler.cuh BatchDecodeWithPagedKVCacheWorkEstimationDispatched, "
             "PartitionPagedKVCacheBinarySearchMinNumPagePerBatch"),
    "vllm_flashinfer": {
        "description": "FlashInfer through vLLM's FLASHINFER backend (FP8 KV off Hopper), FlashInfer's partition-kv "
                       "decode and vLLM's own prefill path, both fitted on vLLM's rows",
        "cite": VLLM_FLASHINFER_CITE + ". Decode fitted on vLLM's RTX PRO 6000 FP8-KV gen_attn rows (the L40S's held "
                "out): they take ~2.5 us more at small caches than SGLang's FlashInfer rows (the flashinfer family's "
                "figures read them at 13.0% MAPE), through a wrapper vLLM plans itself; which part costs it is not "
                "established from the source",
        "framework": "vllm", "kernel": "flashinfer", "stack": "vllm", "split": "flashinfer"},
}
ATTN_GPUS = {"h100": "h100_sxm", "a100": "a100_80g", "rtx_pro_6000": "rtx_pro_6000"}
# Prefill curves per architecture (attention_kernels.PrefillCurves): each GPU's ctx_attn rows also fit curves of its
# own compute capability, the L40S's (SM 8.9) included; the family's own curves stay pooled on ATTN_GPUS.
PREFILL_GPUS = {**ATTN_GPUS, **ADA_GPUS}
KV_FMT = {"bfloat16": "bf16", "fp8": "fp8_e4m3"}
BIG_KV_BYTES = 256e6      # KV caches / weights / activations larger than the in-sample GPUs' L2 (A100 40 MB, H100 50 MB, RTX PRO 6000 128 MB)


@cache
def _machine(preset: str):
    """A preset loaded once: the fits read it per measured row (tens of thousands), never change it,
    and a YAML load and validation per row took ~30 % of `--check`'s time."""
    from hw_models.machine import load_machine
    return load_machine(preset)


@cache
def _gpu_figures(preset: str) -> tuple[int, float, float, float, float]:
    """(SMs, streaming bandwidth = bandwidth x memory_max, bf16 peak, SM clock, DRAM peak) of a preset."""
    from hw_models.compute_path import native_rates
    m = _machine(preset)
    u = m.units[m.main_unit]
    peak = m.memory[u.memory].bandwidth_bytes_per_s
    return (u.efficiency.parallel_units, peak * u.efficiency.memory_max, native_rates(u)["bf16"],
            u.efficiency.clock_hz, peak)


@cache
def _l2(preset: str) -> tuple[float, float]:
    """(L2 bytes, L2 read bandwidth) of a preset, (0, 0) where it cites none: what a single-layer replay
    re-reads a small KV cache at (hw_models.stack.attention_kernels)."""
    u = _machine(preset).units[_machine(preset).main_unit]
    return (u.l2_bytes or 0.0, u.l2_bandwidth_bytes_per_s or 0.0) if u.l2_bandwidth_bytes_per_s else (0.0, 0.0)


@cache
def _attention_table(name: str, table: str, check: bool = False) -> list[tuple]:
    """(preset, row, [(op, sim seconds)]) for the family's rows of every in-sample GPU's table (`check`:
    the rows of the family's kernel run by another engine, which are never fitted on)."""
    from sim.apps.trace.aic import attention_ops
    spec = ATTENTION[name]
    framework, kernel, stack = spec["check"] if check else (spec["framework"], spec["kernel"], spec["stack"])
    if table == "ctx_attn" and not check:
        kernel = spec.get("prefill_kernel", kernel)
    # decode rows: the pooled GPUs, or the GPUs a family names (the L40S's only for its own SM 8.9 family)
    gpus = PREFILL_GPUS if table == "ctx_attn" or "gpus" in spec else ATTN_GPUS
    out = []
    for gpu, preset in gpus.items():
        if gpu not in spec.get("gpus", gpus):
            continue
        df = pd.read_csv(SHARED / f"{table}_{gpu}.csv.gz")
        df = df[df["framework"] == framework]
        if kernel:
            df = df[df["kernel_source"].str.contains(kernel)]
        decode = table == "gen_attn"
        for r in df.itertuples(index=False):
            q_len, kv_len = (1, int(r.step) + 1) if decode else (int(r.isl), int(r.isl))
            ops = attention_ops(preset, stack, framework, "decode" if decode else "prefill",
                                int(r.batch), q_len, kv_len, int(r.heads), int(r.kv_heads), int(r.head_dim),
                                KV_FMT[r.kv_dtype], q_fmt="bf16" if decode else KV_FMT[r.attn_dtype])
            out.append((preset, r, ops))
    return out


def _weighted_nnls(X: np.ndarray, t: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Coefficients c >= 0 minimizing sum(((others + X c) - t) / t)^2."""
    from scipy.optimize import nnls
    c, _ = nnls(X / t[:, None], (t - others) / t)
    return c


def _reads_less_than_named(rows: list[tuple]) -> set[tuple[str, bool]]:
    """(preset, grouped-query) groups whose caches over BIG_KV_BYTES take, at the median, less time than
    their bytes at the DRAM peak: those calls cannot read the KV cache the row names (TensorRT-LLM 1.0's
    grouped-query rows on A100 stream 1.45x the A100's 2039 GB/s at >1 GB), so they are left out."""
    by: dict[tuple[str, bool], list[float]] = {}
    for preset, r, ops in rows:
        kv_bytes = sum(u.bytes for u in ops[0][0].reads if u.role == "kv")
        if kv_bytes >= BIG_KV_BYTES:
            by.setdefault((preset, r.heads != r.kv_heads), []).append(kv_bytes / _gpu_figures(preset)[4] / (r.latency_us * 1e-6))
    return {k for k, v in by.items() if np.median(v) > 1.0}


def _decode_columns(sel: list[tuple], split: str = "none",
                    blocks_per_sm: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row: [1, 1 / clock, grouped CTAs / SMs, MHA CTAs / SMs (the CTAs the per-CTA cost counts:
    Decode.cta_units), KV / bw, KV / (bw x CTAs),
    KV / L2 bw, KV / (L2 bw x CTAs), grouped-query kv_len, MHA kv_len, split] (the terms of
    hw_models.stack.attention_kernels.Decode; the DRAM pair is zero where the replayed cache fits the L2, the L2 pair
    zero elsewhere; "MHA": the call runs the family's MHA kernel; CTAs as the family's `split` launches them and
    `split` 1 where a sequence is split), the measured seconds, sim's seconds for the other ops of the call, and the
    KV bytes."""
    from hw_models.stack.attention_kernels import Decode
    shape = Decode(fixed_s=0, cta_s=0, mha_cta_s=0, kv_stream_efficiency=1, split=split, blocks_per_sm=blocks_per_sm)
    X, t, others, kvb = [], [], [], []
    for preset, r, ops in sel:
        sms, bw, _, clock, _ = _gpu_figures(preset)
        l2_bytes, l2_bw = _l2(preset)
        kv_bytes = sum(u.bytes for u in ops[0][0].reads if u.role == "kv")
        ctas, pieces, mha = launch = shape.launch(r.batch, r.heads, r.kv_heads, sms, r.step + 1, r.head_dim)
        units = shape.cta_units(launch) / sms     # what the per-CTA cost counts
        stream = [kv_bytes / bw, kv_bytes / bw / ctas, 0.0, 0.0] if kv_bytes > l2_bytes else \
            [0.0, 0.0, kv_bytes / l2_bw, kv_bytes / l2_bw / ctas]
        X.append([1.0, 1.0 / clock, 0.0 if mha else units, units if mha else 0.0, *stream,
                  0.0 if mha else r.step + 1.0, r.step + 1.0 if mha else 0.0, float(pieces > 1)])
        t.append(r.latency_us * 1e-6)
        others.append(sum(sec for _, sec in ops[1:]))
        kvb.append(kv_bytes)
    return np.array(X), np.array(t), np.array(others), np.array(kvb)


def _predict(X: np.ndarray, f: dict) -> np.ndarray:
    """Attention seconds per row of the Decode figures `f` (fit_decode's keys) on _decode_columns' X:
    an MHA row (X[:, 3] > 0) streams at the MHA kernel's efficiency and ramp and pays its fixed cost."""
    mha = X[:, 3] > 0
    inv_eff = np.where(mha, 1.0 / f["mha_kv_stream_efficiency"], 1.0 / f["kv_stream_efficiency"])
    ramp = np.where(mha, f["mha_kv_ramp_ctas"], f["kv_ramp_ctas"])
    stream = inv_eff * (X[:, 4] + ramp * X[:, 5]) + (X[:, 6] + ramp * X[:, 7]) / f["l2_stream_efficiency"]
    walk = np.maximum(f["kv_walk_s_per_token"] * X[:, 8], f["mha_kv_walk_s_per_token"] * X[:, 9])
    return (f["fixed_s"] + f["fixed_cycles"] * X[:, 1] + f["cta_s"] * X[:, 2] + f["mha_cta_s"] * X[:, 3]
            + f["mha_fixed_s"] * mha + f["combine_s"] * X[:, 10] + np.maximum(stream, walk))


def _decode_errors(X: np.ndarray, t: np.ndarray, others: np.ndarray, f: dict) -> np.ndarray:
    """|relative error| per row of the Decode model with figures `f`."""
    return np.abs(others + _predict(X, f) - t) / t


MIN_STREAM_ROWS = 20     # large-cache rows below which a head layout takes the pooled stream fit


def _peak_over_stream() -> float:
    """The DRAM peak over the streaming rate (peak x memory_max) of the in-sample GPUs: the most a fitted KV stream
    efficiency may reach (no stream passes the peak). One figure, so their memory_max must agree."""
    ratios = {_gpu_figures(p)[4] / _gpu_figures(p)[1] for p in PREFILL_GPUS.values()}
    if len(ratios) != 1:
        raise ValueError(f"in-sample presets' memory_max differ ({sorted(ratios)}): one stream cap cannot hold")
    return ratios.pop()


def _stream_fit(X: np.ndarray, t: np.ndarray, others: np.ndarray) -> tuple[float, float]:
    """(stream efficiency, ramp CTAs) on large-cache rows, fitted with the fixed and per-CTA columns (a large
    cache at batch 1024 still pays its CTAs), the efficiency at most the DRAM peak over memory_max (the KV cannot
    stream faster than DRAM; FlashAttention-3 on the H100 reaches 0.90-0.95 of it, past memory_max's 0.85)."""
    c = _weighted_nnls(X[:, :6], t, others)
    return 1.0 / max(c[4], 1.0 / _peak_over_stream()), (c[5] / c[4] if c[4] > 0 else 0.0)


def _fit_figures(X: np.ndarray, t: np.ndarray, others: np.ndarray, kvb: np.ndarray, fit: np.ndarray,
                 mha_kernel: bool, mha_fixed: bool = False) -> dict:
    """Stage 1: the stream efficiency and its ramp on caches too large for any in-sample GPU's L2 (>= 256
    MB), per head layout where the family runs MHA through another kernel (`mha_kernel`); stage 2: the fixed
    and per-CTA costs (that MHA kernel's own fixed cost too, `mha_fixed`) and the L2 stream's efficiency on every
    row, with the DRAM stream of stage 1.
    Stage 2 on the DRAM-streamed rows alone was worse on every GPU but the RTX PRO 6000 (vLLM FlashAttention
    bf16 A100 21.5 -> 22.7%, H100 10.8 -> 13.5%): small caches are where the fixed and per-CTA costs are
    not buried under the stream."""
    big = fit & (kvb >= BIG_KV_BYTES)
    mha = X[:, 3] > 0
    pooled = _stream_fit(X[big], t[big], others[big])
    own = {m: _stream_fit(X[big & (mha == m)], t[big & (mha == m)], others[big & (mha == m)])
           if mha_kernel and (big & (mha == m)).sum() >= MIN_STREAM_ROWS else pooled for m in (False, True)}
    f = {"kv_stream_efficiency": own[False][0], "kv_ramp_ctas": own[False][1],
         "mha_kv_stream_efficiency": own[True][0], "mha_kv_ramp_ctas": own[True][1]}
    ramp = np.where(mha, f["mha_kv_ramp_ctas"], f["kv_ramp_ctas"])
    dram = np.where(mha, 1.0 / f["mha_kv_stream_efficiency"], 1.0 / f["kv_stream_efficiency"]) * (X[:, 4] + ramp * X[:, 5])
    l2 = X[:, 6] + ramp * X[:, 7]
    cols = [X[fit, :4], l2[fit], X[fit, 10]] + ([mha[fit].astype(float)] if mha_fixed else [])
    c = _weighted_nnls(np.column_stack(cols), t[fit], others[fit] + dram[fit])
    # The cited L2 rate is a ceiling (efficiency <= 1); no rows in L2 (no GPU cites a rate): 1, unused.
    f.update(fixed_s=c[0], fixed_cycles=c[1], cta_s=c[2], mha_cta_s=c[3],
             l2_stream_efficiency=1.0 / max(c[4], 1.0) if (l2[fit] > 0).any() else 1.0, combine_s=c[5],
             mha_fixed_s=c[6] if mha_fixed else 0.0, kv_walk_s_per_token=0.0, mha_kv_walk_s_per_token=0.0)
    return f


WALK_GRID_S = np.arange(0.0, 30.05e-9, 0.1e-9)   # seconds per KV token of one CTA's walk
WALK_KEY = {"grouped": ("kv_walk_s_per_token", 8), "mha": ("mha_kv_walk_s_per_token", 9)}
OVERHEAD_COLUMNS = (0, 1, 2, 3, 10)   # _decode_columns' fixed, cycles, per-CTA and split columns: all but the KV term


def _fit_walk(X: np.ndarray, t: np.ndarray, others: np.ndarray, kvb: np.ndarray, fit: np.ndarray,
              mha_kernel: bool, calls: str = "grouped", mha_fixed: bool = False) -> dict:
    """The figures with a serial walk per KV token of `calls` (grouped-query or MHA; hw_models.stack.
    attention_kernels): per walk on a grid, the other figures fitted (_fit_figures) on the rows the walk does not
    bind (its kv_len x walk below the stream fitted without one), and the walk whose whole model has the least
    in-sample MAPE kept (0: no walk)."""
    key, col = WALK_KEY[calls]
    base = _fit_figures(X, t, others, kvb, fit, mha_kernel, mha_fixed)
    stream = _predict(X, base) - _predict(X * np.isin(np.arange(X.shape[1]), OVERHEAD_COLUMNS), base)
    best, best_mape = base, float(_decode_errors(X, t, others, base)[fit].mean())
    for w in WALK_GRID_S[1:]:
        free = fit & (w * X[:, col] < stream)
        f = {**_fit_figures(X, t, others, kvb, free, mha_kernel, mha_fixed), key: w}
        mape = float(_decode_errors(X, t, others, f)[fit].mean())
        if mape < best_mape:
            best, best_mape = f, mape
    return best


BLOCKS_PER_SM_GRID = (1, 2, 3, 4, 6, 8)   # FlashInfer's decode occupancy, the figure its tables do not give


def _fit_split(spec: dict, sel: list[tuple], fit: np.ndarray,
               split: str) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
    """The Decode figures of `sel` as the family's kernel splits its calls (`split`: this KV format's), with the X, t
    and others they were fitted on; FlashInfer's occupancy (blocks_per_sm), and whether a family's MHA kernel has a fixed cost
    of its own (`mha_fixed_s`, 0 or fitted), are what gives the least in-sample MAPE."""
    walk, mha_kernel = spec.get("walk"), spec.get("mha_kernel", False)
    best = None
    for blocks in BLOCKS_PER_SM_GRID if split == "flashinfer" else (1,):
        X, t, others, kvb = _decode_columns(sel, split, blocks)
        for mha_fixed in (False, True) if mha_kernel else (False,):
            f = {k: _sig(v) for k, v in (_fit_walk(X, t, others, kvb, fit, mha_kernel, walk, mha_fixed) if walk else
                                         _fit_figures(X, t, others, kvb, fit, mha_kernel, mha_fixed)).items()}
            f.update(split=split, blocks_per_sm=blocks)
            mape = float(_decode_errors(X, t, others, f)[fit].mean())
            if best is None or mape < best[0]:
                best = (mape, f, X, t, others)
    return best[1:]


def fit_decode(name: str, hold_out: str | None = None) -> dict:
    """Per KV format: the Decode figures fitted on the in-sample rows (less `hold_out`'s preset), and
    the MAPE on every GPU's rows (`mape_by_gpu`; the held-out GPU's is out of sample)."""
    rows = _attention_table(name, "gen_attn")
    dropped = _reads_less_than_named(rows)
    out = {}
    for kv in ("bfloat16", "fp8"):
        skip = {ATTN_GPUS[g] for g, k in ATTENTION[name].get("skip_decode", {}).items() if k == kv}
        spec = ATTENTION[name]
        decode_presets = {ATTN_GPUS[g] for g in spec["decode_gpus"]} if "decode_gpus" in spec else None
        sel = [(p, r, ops) for p, r, ops in rows
               if r.kv_dtype == kv and (p, r.heads != r.kv_heads) not in dropped and p not in skip
               and (decode_presets is None or p in decode_presets)]
        if len(sel) < 10:
            continue
        fit = np.array([p != hold_out for p, _, _ in sel])
        if fit.sum() < 10:    # only the held-out GPU has this format's rows
            continue
        split = spec.get("split", "none")
        f, X, t, others = _fit_split(spec, sel, fit, split.get(kv, "none") if isinstance(split, dict) else split)
        err = _decode_errors(X, t, others, f)
        presets = np.array([p for p, _, _ in sel])
        check = [(p, r, ops) for p, r, ops in (_attention_table(name, "gen_attn", True) if "check" in ATTENTION[name]
                                               else []) if r.kv_dtype == kv]
        out[KV_FMT[kv]] = {**f, "rows": int(fit.sum()), "fit_mape": round(float(err[fit].mean()), 4),
                           "mape_by_gpu": {p: round(float(err[presets == p].mean()), 4) for p in sorted(set(presets))},
                           "check_mape": round(float(_decode_errors(*_decode_columns(check, f["split"], f["blocks_per_sm"])[:3], f)
                                                   .mean()), 4)
                           if check else None, "check_rows": len(check),
                           "dropped": sorted(f"{p} {'grouped' if g else 'mha'}" for p, g in dropped
                                             if any(p == q and r.kv_dtype == kv for q, r, _ in rows))}
    return out


def _prefill_rows(name: str, kv: str, q: str, gpus: tuple[str, ...]) -> list[tuple]:
    """The family's ctx_attn rows of that (KV, query) dtype pair on the presets `gpus`."""
    return [(p, r, ops) for p, r, ops in _attention_table(name, "ctx_attn")
            if r.kv_dtype == kv and r.attn_dtype == q and p in gpus]


def _prefill_columns(rows: list[tuple], lens: list[int]) -> tuple[np.ndarray, ...]:
    """(idx, ideal, t, others, kv_len) per row: its length's index in `lens`, its FLOPs' seconds at the bf16
    peak, the measured call, what sim charges for the call's other ops, and the keys its last query tile walks."""
    idx = np.searchsorted(lens, [int(r.isl) for _, r, _ in rows])
    ideal = np.array([ops[0][0].flops / _gpu_figures(p)[2] for p, _, ops in rows])
    t = np.array([r.latency_us * 1e-6 for _, r, _ in rows])
    others = np.array([sum(sec for _, sec in ops[1:]) for _, _, ops in rows])
    kv_len = np.array([float(ops[0][0].dims["kv_len"]) for _, _, ops in rows])
    return idx, ideal, t, others, kv_len


def _growth_caps(lens: list[int]) -> np.ndarray:
    """The most the fraction may grow from each fitted length to the next, so that the call never gets faster with
    a longer sequence inside the segment: with the fraction a power law q^a there and the causal FLOPs growing as
    q (q + 1), the compute time falls nowhere while a <= (2 q + 1) / (q + 1) at the segment's start q
    (0.99: room for the 3-figure rounding of the shipped fractions)."""
    q = np.array(lens[:-1], dtype=float)
    return 0.99 * (np.array(lens[1:]) / q) ** ((2 * q + 1) / (q + 1))


def _growth_capped(A: np.ndarray, b: np.ndarray, c: np.ndarray, scale: np.ndarray, lens: list[int]) -> np.ndarray:
    """The NNLS solution `c` (columns scaled by `scale`: fixed, walk, then the steps d_j of c = 1 / fraction), or,
    where a step breaks _growth_caps (d_i <= (cap_i - 1) c_(i+1), c_(i+1) = 1 + the later steps), the least squares
    under those caps (SLSQP, started from it)."""
    from scipy.optimize import minimize
    caps = _growth_caps(lens)

    def slack(x: np.ndarray) -> np.ndarray:
        d = x[2:] / scale[2:]
        later = 1.0 + np.cumsum(d[::-1])[::-1][1:]          # c_(i+1) for i = 0 .. n-2
        return (caps - 1.0) * later - d[:-1]

    if np.all(slack(c) >= 0):
        return c
    res = minimize(lambda x: np.sum((A @ x - b) ** 2), c, jac=lambda x: 2 * A.T @ (A @ x - b), method="SLSQP",
                   bounds=[(0, None)] * len(c), constraints=[{"type": "ineq", "fun": slack}],
                   options={"maxiter": 500, "ftol": 1e-12})
    return np.maximum(res.x, 0.0)


def nnls_prefill(idx: np.ndarray, ideal: np.ndarray, t: np.ndarray, others: np.ndarray, kv_len: np.ndarray,
                 lens: list[int]) -> np.ndarray:
    """[fixed_s, walk_s_per_token, fraction at each of `lens`] minimizing the relative error of
    others + fixed + walk x kv_len + ideal / fraction[idx] against t (fit_prefill's model), by NNLS with
    1 / fraction = 1 + the non-negative steps from its length on, then under _growth_caps where NNLS breaks them."""
    from scipy.optimize import nnls
    steps = [ideal * (idx <= j) for j in range(len(lens))]
    A = np.column_stack([np.ones_like(t), kv_len, *steps]) / t[:, None]
    b = (t - others - ideal) / t
    scale = np.linalg.norm(A, axis=0)
    scale[scale == 0] = 1.0
    c = nnls(A / scale, b, maxiter=50 * A.shape[1])[0]
    c = _growth_capped(A / scale, b, c, scale, lens) / scale
    return np.r_[c[:2], 1.0 / (1.0 + np.cumsum(c[2:][::-1])[::-1])]


def fit_prefill(name: str, hold_out: str | None = None, kv: str = "bfloat16", q: str = "bfloat16",
                gpus: tuple[str, ...] | None = None) -> dict | None:
    """The fixed cost, the critical-path walk per key and the fraction of the bf16 peak per measured sequence
    length (hw_models.stack.attention_kernels), fitted together by NNLS on the relative error (scipy.optimize.nnls)
    on the rows of the presets `gpus` (default: the pooled attention GPUs, ATTN_GPUS) less `hold_out`'s. Linear in
    its unknowns: the call is fixed + walk x kv_len + ideal x c(q_len), with c = 1 / fraction written as
    1 + a cumulative sum of non-negative steps from the longest length down, so that the fraction never falls with
    a longer sequence and never passes the bf16 peak. `kv`, `q`: the KV cache's and the query's dtype (a row's
    kv_dtype, attn_dtype); each pair is fitted on its own (attention_kernels.PrefillCurves)."""
    rows = _prefill_rows(name, kv, q, gpus or tuple(ATTN_GPUS.values()))
    presets = np.array([p for p, _, _ in rows])
    fit = presets != hold_out     # `hold_out`: a preset whose rows are only checked (mape_by_gpu)
    if fit.sum() < 10:            # too few rows (or only the held-out GPU's)
        return None
    lens = sorted({int(r.isl) for _, r, _ in rows})
    idx, ideal, t, others, kv_len = _prefill_columns(rows, lens)
    c = nnls_prefill(idx[fit], ideal[fit], t[fit], others[fit], kv_len[fit], lens)
    points = [[q_len, _sig(f)] for q_len, f in zip(lens, c[2:])]
    fixed, walk = _sig(c[0]), _sig(c[1])
    pred = others + fixed + walk * kv_len + ideal / np.array([points[i][1] for i in idx])
    err = np.abs(pred - t) / t
    return {"fixed_s": fixed, "walk_s_per_token": walk, "rate_points": points, "rows": int(fit.sum()),
            "fit_mape": round(float(err[fit].mean()), 4),
            "mape_by_gpu": {p: round(float(err[presets == p].mean()), 4) for p in sorted(set(presets))}}


# Quantized GEMM families: the gemm-table rows each is fitted on (framework, dtype, kernel column) and the
# engine's quant-table rows of its activation-quantization kernel (None: weight-only, no such kernel).
# SGLang's per-tensor FP8 families (one per architecture) share everything but their GPUs and kernel notes; they
# borrow the quantize kernel of vLLM's (aic measures no SGLang quantize table).
SGLANG_FP8 = dict(framework="sglang", dtype="fp8", kernel=None, quant="vllm", rate_format="fp8_e4m3", table="gemm_sglang",
                  assumed="the activation-quantize kernel takes the floor and streaming rate fitted on vLLM's "
                          "per-tensor quantize kernel (no SGLang quantize table is measured)")

# vLLM's block-scaled FP8 on Hopper switches kernel by M: FlashInfer's swapAB kernel below 32 rows, DeepGEMM from
# 32 (fp8_utils.py _flashinfer_fp8_blockscale_gemm_impl, torch.cond on M < 32): two families, the first naming
# the second (hw_models.stack.kernel_families switch_m / switch_family).
VLLM_BLOCK_SWITCH_M = 32
# Its H100 rows were timed without a CUDA graph (aiconfigurator collector/vllm/collect_gemm.py: use_cuda_graph=
# gemm_type != "fp8_block"), so their ~60 / ~90 us floors (min_s) are the eager call's host dispatch, and no row
# shows the kernels' own time beneath them. Replayed from a graph, the call costs as SGLang's block-FP8 family:
# DeepGEMM's gemm_nt, the kernel vLLM runs from M = 32, measured graph-timed (~11-13 us at M <= 256, 4096 x 4096);
# below 32 vLLM runs FlashInfer's DeepGEMM swapAB variant (vllm-project/vllm#29213), within 5% of DeepGEMM at M = 16
# on an H200 (sgl-project/sglang#32843's microbenchmark).
VLLM_BLOCK_GRAPH_FAMILY = "sglang_fp8_block"
# TensorRT-LLM's SmoothQuant plugin runs a CUDA-core int8 kernel at M <= 4 and CUTLASS above
# (smoothQuantGemmPlugin.cpp enqueue): the A100 rows' smallest calls step from ~9 us at M 1-4 to ~20 us at M 8.
SQ_SWITCH_M = 5

# vLLM's per-tensor FP8 families: one per architecture (CUTLASS builds other configurations on SM 12.x).
VLLM_FP8 = dict(framework="vllm", dtype="fp8", kernel="cutlass_fp8_scaled_mm", quant="vllm", rate_format="fp8_e4m3")

QUANT_GEMM = {
    "trtllm_fp8_per_tensor": dict(
        framework="trtllm", dtype="fp8", kernel=None, quant="trtllm", rate_format="fp8_e4m3",
        description="TensorRT-LLM per-tensor FP8 W8A8 Linear: a static per-tensor quantize kernel, then cuBLASLt FP8 GEMM",
        cite="TensorRT-LLM tensorrt_llm/_torch/modules/linear.py FP8QDQLinearMethod.apply "
             "(torch.ops.tensorrt_llm.static_quantize_e4m3_per_tensor, then torch.ops.trtllm.cublas_scaled_mm)"),
    "vllm_fp8_per_tensor": dict(
        **VLLM_FP8, gpus=("h100",),
        description="vLLM per-tensor FP8 W8A8 Linear: scaled_fp8_quant kernel, then CUTLASS cutlass_scaled_mm "
                    "(the SM 9.0 kernels; SM 12.x: vllm_fp8_per_tensor_sm120)",
        cite="vllm/model_executor/layers/quantization/utils/w8a8_utils.py Fp8LinearOp.apply (ops.scaled_fp8_quant, "
             "then cutlass_scaled_mm: csrc/quantization/cutlass_w8a8/scaled_mm_entry.cu; "
             "c3x/scaled_mm_sm90_fp8_dispatch.cuh: tile 64x64x128 at M <= 64, 64x128x128 to 128, 128x128x128 above); "
             "fitted on H100 only"),
    "vllm_fp8_per_tensor_sm120": dict(
        **VLLM_FP8, gpus=("rtx_pro_6000",),
        description="vLLM per-tensor FP8 W8A8 Linear on SM 12.x (RTX Blackwell): scaled_fp8_quant, then CUTLASS "
                    "cutlass_scaled_mm's single SM 12.0 configuration",
        cite="vllm csrc/quantization/cutlass_w8a8/c3x/scaled_mm_sm120_fp8_dispatch.cuh (sm120_fp8_config_default: "
             "one tile 256x128x64, cluster 1x1x1, for every shape); fitted on RTX PRO 6000 only"),
    "sglang_fp8_per_tensor": dict(
        **SGLANG_FP8, gpus=("h100",),
        description="SGLang per-tensor FP8 W8A8 Linear on Hopper: quantize, then sgl-kernel fp8_scaled_mm "
                    "(cutlass_scaled_mm_sm90_fp8)",
        cite="sglang python/sglang/srt/layers/quantization/fp8_utils.py apply_fp8_linear (cutlass path: "
             "sgl_kernel.fp8_scaled_mm); sgl-kernel csrc/gemm/fp8_gemm_kernel.cu fp8_scaled_mm (SM 9.x: "
             "cutlass_scaled_mm_sm90_fp8); aic kernel sglang_sgl_kernel_fp8_scaled_mm, H100 rows only"),
    "sglang_fp8_per_tensor_sm120": dict(
        **SGLANG_FP8, gpus=("rtx_pro_6000",),
        description="SGLang per-tensor FP8 W8A8 Linear on SM 12.x: quantize, then sgl-kernel fp8_scaled_mm's "
                    "single SM 12.0 CUTLASS configuration (no tile scheduler: one CTA walks all of K per tile)",
        cite="sgl-kernel csrc/gemm/fp8_gemm_kernel.cu fp8_scaled_mm (SM >= 12.0: sm120_fp8_dispatch_shape -> "
             "sm120_fp8_dispatch_bias, CTA 128x128x128, cluster 1x1x1, TileSchedulerType void, for every shape); "
             "aic kernel sglang_sgl_kernel_fp8_scaled_mm, RTX PRO 6000 rows only"),
    "trtllm_w4a16": dict(
        framework="trtllm", dtype="int4_wo", kernel=None, quant=None, rate_format="bf16",
        description="TensorRT-LLM weight-only INT4 (W4A16) GEMM / GEMV, dequantizing in registers",
        cite="TensorRT-LLM WeightOnlyQuantMatmul plugin (cpp/tensorrt_llm/plugins/weightOnlyQuantMatmulPlugin: "
             "CUTLASS fpA_intB GEMM, batched GEMV kernels at small M); aic kernel trt_weight_only_plugin"),
    "trtllm_w8a16": dict(
        framework="trtllm", dtype="int8_wo", kernel=None, quant=None, rate_format="bf16",
        description="TensorRT-LLM weight-only INT8 (W8A16) GEMM / GEMV, dequantizing in registers",
        cite="TensorRT-LLM WeightOnlyQuantMatmul plugin (cpp/tensorrt_llm/plugins/weightOnlyQuantMatmulPlugin: "
             "CUTLASS fpA_intB GEMM, batched GEMV kernels at small M); aic kernel trt_weight_only_plugin"),
    "trtllm_nvfp4": dict(
        framework="trtllm", dtype="nvfp4", kernel=None, quant=None, rate_format="nvfp4",
        description="TensorRT-LLM NVFP4 W4A4 Linear on Blackwell (block-scaled FP4 MMA), activation quantize included",
        cite="TensorRT-LLM tensorrt_llm/_torch/modules/linear.py NVFP4LinearMethod.apply (torch.ops.trtllm.fp4_quantize, "
             "then torch.ops.trtllm.nvfp4_gemm); fitted on RTX PRO 6000 (SM 12.0) only: the datacenter Blackwell "
             "tables (B200 / GB200) are held out, so B200 uses these fractions unfitted"),
    "vllm_nvfp4": dict(
        framework="vllm", dtype="nvfp4", kernel="FlashInferCutlassNvFp4LinearKernel", quant=None, rate_format="nvfp4",
        description="vLLM NVFP4 W4A4 Linear on Blackwell: scaled_fp4_quant, then FlashInfer's CUTLASS FP4 GEMM (native)",
        cite="vllm/model_executor/layers/quantization/modelopt.py ModelOptNvFp4LinearMethod (native FP4 GEMM on SM 10.x / "
             "12.x, Marlin weight-only emulation below); aic kernel FlashInferCutlassNvFp4LinearKernel. Fitted on RTX PRO "
             "6000 only (B200 / GB200 tables held out)"),
    "sglang_nvfp4": dict(
        framework="sglang", dtype="nvfp4", kernel=None, quant=None, rate_format="nvfp4", table="gemm_sglang",
        description="SGLang NVFP4 W4A4 Linear on Blackwell: scaled_fp4_quant, then FlashInfer's CUTLASS FP4 GEMM",
        cite="sglang python/sglang/srt/layers/quantization/modelopt_quant.py ModelOptFp4LinearMethod.apply "
             "(scaled_fp4_quant, then fp4_gemm: FlashInfer mm_fp4, CUTLASS backend); aic kernel "
             "sglang_flashinfer_cutlass_nvfp4 (gemm_sglang tables). Fitted on RTX PRO 6000 only (B200 / GB200 held out)"),
    "trtllm_fp8_block": dict(
        framework="trtllm", dtype="fp8_block", kernel=None, quant="trtllm", rate_format="fp8_e4m3",
        assumed="the 1x128 activation-quantize kernel's floor and streaming rate are those fitted on the engine's "
                "per-tensor quantize kernel (no block-quantize table is measured)",
        gpus=("h100",),
        description="TensorRT-LLM block-scaled FP8 Linear (DeepSeek-V3 128x128 weight tiles, 1x128 activation groups), "
                    "the SM 9.0 kernel (SM 12.x: trtllm_fp8_block_sm120)",
        cite="TensorRT-LLM tensorrt_llm/_torch/modules/linear.py FP8BlockScalesLinearMethod.apply "
             "(torch.ops.trtllm.fp8_quantize_1x128, then torch.ops.trtllm.fp8_block_scaling_gemm; "
             "cpp/tensorrt_llm/thop/fp8BlockScalingGemm.cpp picks the kernel by SM version: "
             "fp8_block_scaling_gemm_hopper on SM 9.0); aic kernel torch_flow, H100 rows"),
    "trtllm_fp8_block_sm120": dict(
        framework="trtllm", dtype="fp8_block", kernel=None, quant="trtllm", rate_format="fp8_e4m3",
        gpus=("rtx_pro_6000",),
        assumed="the 1x128 activation-quantize kernel's floor and streaming rate are those fitted on the engine's "
                "per-tensor quantize kernel (no block-quantize table is measured)",
        description="TensorRT-LLM block-scaled FP8 Linear on SM 12.x (RTX Blackwell)",
        cite="TensorRT-LLM linear.py FP8BlockScalesLinearMethod.apply (fp8_quantize_1x128, then fp8_block_scaling_gemm; "
             "cpp/tensorrt_llm/thop/fp8BlockScalingGemm.cpp: the kernel by SM version, Hopper's only on SM 9.0); "
             "aic kernel torch_flow, RTX PRO 6000 rows"),
    "vllm_fp8_block": dict(
        framework="vllm", dtype="fp8_block", kernel="flashinfer_fp8_block", quant="vllm", rate_format="fp8_e4m3",
        switch_m=VLLM_BLOCK_SWITCH_M, switch_family="vllm_fp8_block_deepgemm", graph_family=VLLM_BLOCK_GRAPH_FAMILY,
        assumed="the 1x128 activation-quantize kernel's floor and streaming rate are those fitted on the engine's "
                "per-tensor quantize kernel (no block-quantize table is measured)",
        description="vLLM block-scaled FP8 Linear on Hopper below M = 32: FlashInfer's swapAB block-scale GEMM "
                    "(~60 us a call at M <= 16, aic README); from M = 32 vllm_fp8_block_deepgemm. No row at M 17-31: "
                    "the compute time is held at M = 16's to the switch (the rate point at 32)",
        cite="vllm/model_executor/layers/quantization/utils/fp8_utils.py (W8A8BlockFp8LinearOp: "
             "should_use_flashinfer_for_blockscale_fp8_gemm -> flashinfer_fp8_blockscale_gemm, whose "
             "_flashinfer_fp8_blockscale_gemm_impl picks by torch.cond: M < 32 FlashInfer's swapAB kernel, M >= 32 "
             "DeepGEMM fp8_gemm_nt); aic kernel flashinfer_fp8_block (H100 rows, M 1-16)"),
    "vllm_fp8_block_deepgemm": dict(
        framework="vllm", dtype="fp8_block", kernel="deepgemm_fp8_block", quant="vllm", rate_format="fp8_e4m3",
        graph_family=VLLM_BLOCK_GRAPH_FAMILY,
        assumed="the 1x128 activation-quantize kernel's floor and streaming rate are those fitted on the engine's "
                "per-tensor quantize kernel (no block-quantize table is measured)",
        description="vLLM block-scaled FP8 Linear on Hopper from M = 32: per-token-group quantize, then DeepGEMM "
                    "fp8_gemm_nt (no call under ~80 us in the tables: min_s)",
        cite="vllm/model_executor/layers/quantization/utils/fp8_utils.py (_flashinfer_fp8_blockscale_gemm_impl: "
             "M >= 32 -> per_token_group_quant_fp8, then DeepGEMM fp8_gemm_nt); aic kernel deepgemm_fp8_block "
             "(H100 rows, M 32-8192)"),
    "trtllm_w8a8_sq": dict(
        framework="trtllm", dtype="sq", kernel="trt_smooth_quant_plugin", quant=None, rate_format="int8", act="int8",
        gpus=("a100",), m_range=(1, SQ_SWITCH_M - 1), switch_m=SQ_SWITCH_M, switch_family="trtllm_w8a8_sq_cutlass",
        description="TensorRT-LLM SmoothQuant W8A8 int8 Linear at M <= 4: the plugin's CUDA-core int8 kernel "
                    "(int8_sq_launcher; rate as a fraction of the int8 tensor peak), its activations quantized by an "
                    "earlier layer; from M = 5 trtllm_w8a8_sq_cutlass",
        cite="TensorRT-LLM cpp/tensorrt_llm/plugins/smoothQuantGemmPlugin/smoothQuantGemmPlugin.cpp enqueue (m <= 4: "
             "kernels/int8SQ int8_sq_launcher, else CutlassInt8GemmRunner::gemm with the profiled tactic); "
             "aiconfigurator collector/trtllm/collect_gemm.py times the layer PLUGIN_V2_SmoothQuantGemm alone "
             "(TensorRT's per-layer profiler: the quantize layer is not in the row); aic kernel "
             "trt_smooth_quant_plugin, A100 rows M 1-4"),
    "trtllm_w8a8_sq_cutlass": dict(
        framework="trtllm", dtype="sq", kernel="trt_smooth_quant_plugin", quant=None, rate_format="int8", act="int8",
        gpus=("a100",), m_range=(SQ_SWITCH_M, 1 << 30),
        description="TensorRT-LLM SmoothQuant W8A8 int8 Linear from M = 5: the plugin's CUTLASS int8 GEMM "
                    "(CutlassInt8GemmRunner), its activations quantized by an earlier layer",
        cite="TensorRT-LLM smoothQuantGemmPlugin.cpp enqueue (m > 4: CutlassInt8GemmRunner::gemm, "
             "cpp/tensorrt_llm/kernels/cutlass_kernels/int8_gemm); aiconfigurator collect_gemm.py (the plugin layer "
             "alone); aic kernel trt_smooth_quant_plugin, A100 rows M 8-8192"),
    "sglang_fp8_block": dict(
        framework="sglang", dtype="fp8_block", kernel=None, quant="vllm", rate_format="fp8_e4m3", table="gemm_sglang",
        assumed="the 1x128 activation-quantize kernel (sgl-kernel per_token_group_quant_fp8) takes the floor and "
                "streaming rate fitted on vLLM's per-tensor quantize kernel (no block-quantize table is measured)",
        description="SGLang block-scaled FP8 Linear on Hopper: per-token-group quantize, then DeepGEMM gemm_nt_f8f8bf16",
        cite="sglang python/sglang/srt/layers/quantization/fp8_utils.py (apply_fp8_linear block path: "
             "sglang_per_token_group_quant_fp8, then w8a8_block_fp8_matmul_deepgemm); aic kernel "
             "sglang_deepgemm_gemm_nt_f8f8bf16 (gemm_sglang tables, H100 only)"),
}
QUANT_GPUS = {"h100": "h100_sxm", "a100": "a100_80g", "rtx_pro_6000": "rtx_pro_6000"}   # the pooled families' GPUs
GEMM_PRESETS = {**QUANT_GPUS, **ADA_GPUS}   # every in-sample GPU with gemm tables (the Ada ones: fit_kernels_ada.py)
QUANT_GEMM.update(ADA_FP8)
# The families whose memory term includes a serial K-walk (hw_models.stack.kernel_families k_walk_s_per_k): at
# small M their time grows with K at a fixed N far above the weight stream (RTX PRO 6000 NVFP4, all three engines:
# M = 1, N = 512, K 512 -> 16384 takes 6 -> 62 us for 4 MB of weights). Kept where it lowers the fit's MAPE and,
# for the families fitted on two GPUs, the MAPE of each GPU held out (fit_kernels.py --hold-out); not for
# vllm_fp8_block (no change). Fitted on both GPUs pooled, TensorRT-LLM's block-scaled FP8 lost with it (held-out
# H100 15.9% -> 31%: the RTX PRO 6000's walk is 3x H100's); its kernel differs per architecture, so it is now a
# family per architecture, each with its walk.
# The families whose activation scale is computed per call by a pass with one thread block per token (vLLM's
# dynamic per-tensor FP8: ops.scaled_fp8_quant(x, None) -> dynamic_scaled_fp8_quant, csrc/quantization/fp8/
# common.cu: segmented_max_reduction, grid = num_tokens, each block an atomicMax into one float, then the quantize
# kernel): a fixed time per row (token), fitted on a grid (ns; 0 included). At M = 8192, N = K = 512 vLLM's call
# takes 68 us against TensorRT-LLM's (static scale) 23 us. SGLang's dynamic activations take a per-token scale
# (python/sglang/srt/layers/quantization/fp8_utils.py apply_fp8_linear: input_scale None -> sglang_per_token_quant_fp8,
# one block per row computing its max): the same pass structure, fitted the same way.
# TensorRT-LLM's block-scaled FP8 on SM 12.x: its measured calls grow with M at a fixed time per row far above the
# activations' stream (the same max(re-read, M x row_s) pass, fitted; which kernel pays it is not in the rows).
ROW_SCALE = {"vllm_fp8_per_tensor", "vllm_fp8_per_tensor_sm120", "sglang_fp8_per_tensor", "sglang_fp8_per_tensor_sm120",
             "trtllm_fp8_block_sm120", *ADA_ROW_SCALE}
ROW_SCALE_GRID = [x * 1e-9 for x in (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)]
# The families whose calls never take less than a fixed time whatever the shape (hw_models.stack.kernel_families
# min_s): vLLM's block-scaled FP8 on H100 (FlashInfer ~56 us, DeepGEMM ~78 us at the smallest shapes) and on L40S
# (Triton, ~285 us). min_s is chosen on a grid of the rows' measured-time quantiles (0 included), each with the
# rest of the family refitted on the rows above it.
MIN_S = {"vllm_fp8_block", "vllm_fp8_block_deepgemm", "vllm_fp8_block_sm89"}
MIN_S_QUANTILES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)
K_WALK = {"trtllm_fp8_per_tensor", "vllm_fp8_per_tensor", "vllm_fp8_per_tensor_sm120", "sglang_fp8_per_tensor",
          "sglang_fp8_per_tensor_sm120", "trtllm_fp8_block", "trtllm_fp8_block_sm120", "trtllm_w4a16", "trtllm_w8a16", "trtllm_nvfp4",
          "vllm_nvfp4", "sglang_nvfp4", "sglang_fp8_block", "trtllm_w8a8_sq_cutlass", *ADA_K_WALK}
QUANT_KERNEL = {"trtllm": "torch_ops", "vllm": "static_scaled_fp8_quant"}   # aic quant table kernel_source
MEMORY_BOUND_M = 16
L2_BYTES = {"h100": 50e6, "a100": 40e6, "rtx_pro_6000": 128e6, **ADA_L2_BYTES}   # datasheets (as BIG_KV_BYTES's comment)


def _gemm_parts(preset: str, m: int, n: int, k: int, fmt: str, rate_format: str, act: str = "bf16"
                ) -> tuple[float, ...]:
    """(weight bytes / bw, other bytes / bw, activation-quant bytes / bw, flops / rate) as
    hw_models.stack.cost.family_cost splits one GEMM (bw: bandwidth x the unit's memory_max at M)."""
    from hw_models.compute_path import native_rates
    from sim.apps.trace.aic import gemm_op
    from sim.core import graph as g
    mach = _machine(preset)
    u = mach.units[mach.main_unit]
    bw = mach.memory[u.memory].bandwidth_bytes_per_s * u.efficiency.for_kind(g.GEMM, m).memory_max
    op = gemm_op(m, n, k, fmt, act)
    w = next(t.bytes for t in op.reads if t.role == "weight")
    rate = u.vector_flops_per_s if rate_format == "vector" else native_rates(u)[rate_format]
    return w / bw, (op.bytes - w) / bw, m * k * 3 / bw, op.flops / rate


def _floor_and_stream(x: np.ndarray, y: np.ndarray, big: np.ndarray) -> tuple[float, float]:
    """(floor, stream efficiency) of y ~ floor + x / efficiency: the efficiency on the `big` rows
    (streams at least twice the GPU's L2: a replayed graph re-reads a smaller one from cache),
    at most 1 (nothing streams faster than DRAM at memory_max), taken as 1 where no row is that
    big (rendered as `assumed:`); then the floor on every row with it."""
    inv_eff = max(line_fit(x[big], y[big])[1], 1.0) if np.count_nonzero(big) >= 2 else 1.0
    w = 1.0 / y ** 2
    floor = max(float(np.sum((y - x * inv_eff) * w) / np.sum(w)), 0.0)
    return floor, 1.0 / inv_eff


def fit_quant_kernel(engine: str, gpus: tuple[str, ...] | None = None) -> dict:
    """The engine's activation-quantize kernel on the quant tables of `gpus` (default: the pooled GPUs)."""
    x, t, nbytes = [], [], []
    for gpu, preset in ((g, GEMM_PRESETS[g]) for g in gpus or QUANT_GPUS):
        path = SHARED / f"quant_{gpu}.csv.gz"
        if not path.is_file():
            continue
        df = pd.read_csv(path)
        for r in df[df["kernel_source"] == QUANT_KERNEL[engine]].itertuples(index=False):
            x.append(_gemm_parts(preset, int(r.m), 1, int(r.k), "bf16", "bf16")[2])
            t.append(r.latency_us * 1e-6)
            nbytes.append(3.0 * r.m * r.k / L2_BYTES[gpu])
    floor, eff = _floor_and_stream(np.array(x), np.array(t), np.array(nbytes) >= 2.0)
    return {"floor_s": _sig(floor), "stream_efficiency": _sig(eff), "rows": len(t)}


def _rows_of(df: pd.DataFrame, gpu: str, fmt: str, rate_format: str, q: dict | None, act: str = "bf16",
             l2_bytes_per_s: float | None = None, replay_l2: bool = True) -> list[tuple]:
    """Per measured row of `df` (one GPU's gemm-table rows): (M, weight s, other s, compute s, measured less
    the quantize kernel, measured, weight bytes / L2, K, activation-quant bytes / bw), as _gemm_parts splits it;
    where the replayed weights stay in the L2 (hw_models.stack.cost.replay_weight_l2_s: the row's collector's
    copies, at `l2_bytes_per_s` or else the preset's L2 rate), their L2 time is in `other` and the DRAM weight
    time is 0 (`replay_l2` False: every row from DRAM, for _dense_base to place the L2 per rate)."""
    from sim.core.formats import get_format
    from hw_models.stack.cost import replay_weight_l2_s
    mach = _machine(GEMM_PRESETS[gpu])
    unit = mach.units[mach.main_unit]
    rows = []
    for r in df.itertuples(index=False):
        w, o, qx, c = _gemm_parts(GEMM_PRESETS[gpu], int(r.m), int(r.n), int(r.k), fmt, rate_format, act)
        l2_s = replay_weight_l2_s(unit, get_format(fmt).storage_bytes((int(r.n), int(r.k))), fmt, r.framework,
                                  l2_bytes_per_s) if replay_l2 else None
        if l2_s is not None:   # the collector's copies stay in the L2: no DRAM stream (family_cost does the same)
            w, o = 0.0, o + l2_s
        quant_s = q["floor_s"] + qx / q["stream_efficiency"] if q else 0.0
        rows.append((int(r.m), w, o, c, r.latency_us * 1e-6 - quant_s, r.latency_us * 1e-6,
                     get_format(fmt).storage_bytes((int(r.n), int(r.k))) / L2_BYTES[gpu], int(r.k), qx))
    return rows


def _quant_rows(spec: dict, fmt: str, q: dict | None, gpus: list[str]) -> tuple[list[tuple], list[str]]:
    """_rows_of the family's rows on `gpus`; and the GPUs that have rows."""
    rows, found = [], []
    for gpu in gpus:
        df = pd.read_csv(SHARED / f"{spec.get('table', 'gemm')}_{gpu}.csv.gz")
        df = df[(df["framework"] == spec["framework"]) & (df["dtype"] == spec["dtype"])]
        if spec["kernel"]:
            df = df[df["kernel"] == spec["kernel"]]
        if "m_range" in spec:   # one of two kernels the engine picks by M
            df = df[df["m"].between(*spec["m_range"])]
        if df.empty:
            continue
        found.append(gpu)
        rows += _rows_of(df, gpu, fmt, spec["rate_format"], q, spec.get("act", "bf16"))
    return rows, found


def _fractions(m_: np.ndarray, frac_of: dict[int, float]) -> np.ndarray:
    ms, fs = np.log(list(frac_of)), np.log(list(frac_of.values()))   # as Family.rate_fraction: log-log, flat at the ends
    return np.exp(np.interp(np.log(m_), ms, fs))


def _quant_mape(rows: list[tuple], floor: float, eff: float, frac_of: dict[int, float], walk: float = 0.0,
                min_s: float = 0.0, l2_frac_of: dict[int, float] | None = None) -> float:
    """The MAPE of the family's figures on `rows`; `l2_frac_of`: the curve of the rows whose weights the replay reads
    from the L2 (weight time 0 in _rows_of's tuple; Family.l2_rate_points)."""
    m_, w_, o_, c_, y_, t_, _, k_, _ = (np.array(v) for v in zip(*rows))
    mem = np.maximum(w_ / eff + o_, k_ * walk)
    frac = _fractions(m_, frac_of)
    if l2_frac_of:
        frac = np.where(w_ == 0, _fractions(m_, l2_frac_of), frac)
    pred = np.maximum(min_s, floor + np.maximum(c_ / frac, mem) + (t_ - y_))
    return round(float(np.mean(np.abs(pred - t_) / t_)), 4)


def fit_quant_gemm(name: str, hold_out: str | None = None) -> dict | None:
    """The family's figures fitted on the in-sample GPUs less `hold_out` (whose rows, if any, give
    `held_out_mape`)."""
    from sim.apps.trace.aic import GEMM_FORMAT
    spec = QUANT_GEMM[name]
    fmt = GEMM_FORMAT[spec["dtype"]]
    q = fit_quant_kernel(spec["quant"], spec.get("quant_gpus")) if spec["quant"] else None
    gpus = spec.get("gpus", tuple(QUANT_GPUS))   # a per-architecture family: its architecture's GPU only
    rows, fitted_on = _quant_rows(spec, fmt, q, [gpu for gpu in gpus if gpu != hold_out])
    if not rows:    # only the held-out GPU has this family's rows
        return None
    # a pooled family is never fitted on an Ada GPU: with --hold-out l40s its rows there are out of sample
    held = _quant_rows(spec, fmt, q, [hold_out])[0] if hold_out in gpus or (hold_out in ADA_GPUS and
                                                                          "gpus" not in spec) else []
    best = None
    t = np.array([r[5] for r in rows])
    for row_s in ROW_SCALE_GRID if name in ROW_SCALE else [0.0]:   # the per-row scale pass: the best on the grid
        for min_s in np.quantile(t, MIN_S_QUANTILES) if name in MIN_S else [0.0]:   # the least call time: likewise
            f = _fit_curve(_less_row_pass(rows, row_s), _less_row_pass(held, row_s), k_walk=name in K_WALK,
                           min_s=float(min_s))
            if best is None or f["fit_mape"] < best["fit_mape"]:
                best = {**f, "quant_row_s": row_s}
    return {"spec": spec, "quant": q, "fitted_on": fitted_on, **_to_switch(best, spec.get("switch_m"))}


def _to_switch(f: dict, switch_m: int | None) -> dict:
    """A family the engine leaves at `switch_m` rows, with no row measured between its last M and that: its
    compute time held flat up to switch_m (the fraction grows as M: the most kernel_families allows), so that
    the unmeasured M cost no more than its largest measured one (vLLM's FlashInfer swapAB kernel: M 1-16
    measured, run to 31)."""
    (m_last, f_last) = f["rate_points"][-1]
    if not switch_m or m_last >= switch_m:
        return f
    return {**f, "rate_points": [*f["rate_points"], [switch_m, _sig(min(1.0, f_last * switch_m / m_last))]]}


def _less_row_pass(rows: list[tuple], row_s: float) -> list[tuple]:
    """`rows` with the dynamic-scale pass taken off the measured GEMM: max(reading the 16-bit activations
    once more, M x row_s) (hw_models.stack.cost.family_cost; 2 of the quantize kernel's 3 bytes per element)."""
    if not row_s:
        return rows
    return [(*r[:4], r[4] - max(r[8] * 2 / 3, r[0] * row_s), *r[5:]) for r in rows]   # r: _rows_of's tuple


def _floor_stream_walk(x: np.ndarray, o: np.ndarray, y: np.ndarray, k: np.ndarray, big: np.ndarray,
                       k_walk: bool) -> tuple[float, float, float]:
    """(floor, stream efficiency, K-walk seconds per K) of y ~ floor + max(x / efficiency + o, K walk)
    on the memory-bound rows: the efficiency as _floor_and_stream finds it; then, with `k_walk`, the walk
    on a log grid (0 included: no walk where none helps) with the floor re-fitted by least squares on the
    relative error at each (hw_models.stack.kernel_families: a CTA walks K in order)."""
    floor, eff = _floor_and_stream(x, y - o, big)
    if not k_walk:
        return floor, eff, 0.0
    w, best = 1.0 / y ** 2, None
    for walk in [0.0, *np.geomspace(1e-10, 2e-8, 60)]:
        mem = np.maximum(x / eff + o, k * walk)
        f = max(float(np.sum((y - mem) * w) / np.sum(w)), 0.0)
        err = float(np.mean(np.abs(f + mem - y) / y))
        if best is None or err < best[0]:
            best = (err, f, float(walk))
    return best[1], eff, best[2]


def _fit_curve(rows: list[tuple], held: list[tuple], flat_below: bool = False, k_walk: bool = False,
               min_s: float = 0.0, split_l2: bool = False) -> dict:
    """Floor, weight-stream efficiency, K-walk (`k_walk`; _floor_stream_walk) and the fraction of the
    rate per measured M fitted on `rows` (_rows_of; module doc: stage 1 on the memory-bound rows, stage 2
    per M), with the MAPE on `rows` and on `held` (None when empty). `flat_below`: at the smallest M, where every row is memory-bound
    for any fraction (the MAPE is the same at 1.0: the data do not see the compute term), the fraction
    is that of the first M whose rows do see it (the most the curve allows: never higher with fewer
    rows) instead of the grid's lowest 0.01, which would report a memory-bound GEMM's compute as busy.
    `min_s`: the family's least call time (kernel_families min_s): every error is taken on max(min_s, the
    rest), and the floor is 0 (its memory-bound rows sit at min_s: no row shows a floor beneath it; stage 1
    sees only rows measured above 1.25 x min_s, where there are three). A family with no row at
    M <= MEMORY_BOUND_M (one the engine runs from a larger M) takes its smallest M as memory-bound.
    `split_l2`: stage 2 apart on the rows whose weights stream from DRAM (`rate_points`) and on those the replay
    reads from the L2 (`l2_rate_points`; Family.l2_rate_points says why), stage 1 on all."""
    m_, w_, o_, c_, y_, t_, wb_, k_, _ = (np.array(v) for v in zip(*rows))
    small = m_ <= max(MEMORY_BOUND_M, int(m_.min()))
    if min_s and np.count_nonzero(small & (t_ > 1.25 * min_s)) >= 3:
        small &= t_ > 1.25 * min_s
    big = wb_[small] >= 2.0
    floor, eff, walk = _floor_stream_walk(w_[small], o_[small], y_[small], k_[small], big, k_walk)
    floor = 0.0 if min_s else floor
    mem = np.maximum(w_ / eff + o_, k_ * walk)
    dram = w_ > 0
    l2 = split_l2 and np.any(~dram) and np.any(dram)
    points = _rate_points(m_, c_, mem, y_, t_, floor, min_s, flat_below, dram if l2 else np.ones_like(dram))
    # never below the DRAM curve: a replayed GEMM whose weights outgrow the L2 must not get faster per FLOP
    l2_points = _rate_points(m_, c_, mem, y_, t_, floor, min_s, flat_below, ~dram, dict(points)) if l2 else None
    l2_of = dict(l2_points) if l2_points else None
    return {"floor_s": _sig(floor), "weight_stream_efficiency": _sig(eff), "rate_points": points,
            "l2_rate_points": l2_points,
            "k_walk_s_per_k": _sig(walk), "rows": len(t_), "stream_measured": bool(np.count_nonzero(big) >= 2),
            "min_s": _sig(min_s), "fit_mape": _quant_mape(rows, floor, eff, dict(points), walk, min_s, l2_of),
            "dram_mape": _quant_mape([r for r, d in zip(rows, dram) if d], floor, eff, dict(points), walk, min_s)
            if l2 else None,
            "held_out_mape": _quant_mape(held, floor, eff, dict(points), walk, min_s, l2_of) if held else None}


def _rate_points(m_: np.ndarray, c_: np.ndarray, mem: np.ndarray, y_: np.ndarray, t_: np.ndarray, floor: float,
                 min_s: float, flat_below: bool, rows: np.ndarray, at_least: dict[int, float] | None = None
                 ) -> list[list]:
    """Stage 2 of _fit_curve on the `rows` (a mask): per measured M the grid fraction with the least MAPE, held
    non-decreasing in M and never growing faster than M (kernel_families); `flat_below` as _fit_curve says;
    `at_least`: a curve the fraction never falls below (chosen on the grid above it, and the result's maximum
    with it, which keeps both properties)."""
    grid = np.linspace(0.01, 1.0, 100)
    points, seen = [], []
    for m in sorted(set(m_[rows].tolist())):
        sel = rows & (m_ == m)
        q, t = t_[sel] - y_[sel], t_[sel]
        low = float(_fractions(np.array([m], float), at_least)[0]) if at_least else 0.0
        # every grid fraction at once (rows of the grid): the same arithmetic per fraction as one row at a time
        err = np.mean(np.abs(np.maximum(min_s, floor + np.maximum(c_[sel] / grid[:, None], mem[sel]) + q) - t) / t,
                      axis=1)
        err = list(np.where(grid >= low - 1e-12, err, np.inf))
        points.append([int(m), float(grid[int(np.argmin(err))])])
        seen.append(bool(min(err) < err[-1] - 1e-12))
    fracs = np.maximum.accumulate([f for _, f in points])   # never lower with more rows (kernel_families)
    points = [[m, _sig(f)] for (m, _), f in zip(points, fracs)]
    for i in range(1, len(points)):    # nor growing faster than M: more rows never take less time
        points[i][1] = min(points[i][1], points[i - 1][1] * points[i][0] / points[i - 1][0])
    first = seen.index(True) if flat_below and any(seen) else 0
    for i in range(first):
        points[i][1] = points[first][1]
    if at_least:
        points = [[m, _sig(max(f, float(_fractions(np.array([m], float), at_least)[0])))] for m, f in points]
    return points


# Dense bf16 GEMM per in-sample GPU: the engines' cuBLAS GEMM (TensorRT-LLM, vLLM and SGLang rows pooled: all
# call cuBLAS for an unquantized Linear), CUDA-graph replayed, as a family per GPU that the GPU's preset names
# (efficiency.dense_gemm). Per GPU because the tables disagree: A100's small GEMMs cost ~8 us over the stream,
# H100's ~4 us; a family pooled over the other two GPUs is the held-out figure (--hold-out).
DENSE_TABLES = ("gemm", "gemm_sglang")
M_BUCKETS = ((1, 8), (16, 128), (256, 1024), (2048, 1 << 30))


def dense_family(gpu: str) -> str:
    return f"dense_bf16_{gpu}"


# The replay's L2 read rate of a dense family (Family.replay_l2_bytes_per_s): the rate on this grid whose fit has
# the lowest MAPE. The presets' L2 rates are assumed or absent (rtx_pro_6000.yaml, l40s.yaml, h100_sxm.yaml).
REPLAY_L2_GRID = np.geomspace(1e12, 32e12, 46)


@cache
def _dense_base(gpu: str) -> tuple[list[tuple], list[float | None]]:
    """The GPU's bf16 rows (_rows_of) with every weight streamed from DRAM, and per row the weight bytes where
    the row's collector's copies fit the L2 (hw_models.stack.cost.replay_weights_fit), else None: what no replay rate changes,
    built once for the REPLAY_L2_GRID search."""
    from hw_models.stack.cost import replay_weights_fit
    from sim.core.formats import get_format
    unit = _machine(GEMM_PRESETS[gpu]).units[_machine(GEMM_PRESETS[gpu]).main_unit]
    rows, l2_weights = [], []
    for table in DENSE_TABLES:
        path = SHARED / f"{table}_{gpu}.csv.gz"
        if path.is_file():
            df = pd.read_csv(path)
            df = df[df["dtype"] == "bfloat16"]
            rows += _rows_of(df, gpu, "bf16", "bf16", None, replay_l2=False)
            for r in df.itertuples(index=False):
                wb = get_format("bf16").storage_bytes((int(r.n), int(r.k)))
                l2_weights.append(wb if replay_weights_fit(unit, wb, "bf16", r.framework) else None)
    return rows, l2_weights


@cache
def _dense_rows(gpu: str, l2_bytes_per_s: float | None = None) -> list[tuple]:
    """_dense_base's rows with the weights that stay in the L2 read at `l2_bytes_per_s` (else the preset's L2
    rate; neither: DRAM), as _rows_of places them."""
    rows, l2_weights = _dense_base(gpu)
    unit = _machine(GEMM_PRESETS[gpu]).units[_machine(GEMM_PRESETS[gpu]).main_unit]
    rate = l2_bytes_per_s or unit.l2_bandwidth_bytes_per_s
    if not rate:
        return rows
    return [row if wb is None else (row[0], 0.0, row[2] + wb / rate, *row[3:])
            for row, wb in zip(rows, l2_weights)]


def fit_dense_gemm(gpus: tuple[str, ...], hold_out: str | None = None) -> dict:
    """The dense bf16 figures fitted on `gpus`' rows pooled, with one replay L2 rate (REPLAY_L2_GRID) and the
    K-walk; `hold_out`'s rows (at the same L2 rate) give held_out_mape and, per M bucket, held_out_by_m."""
    best = None
    for rate in REPLAY_L2_GRID:
        rate = _sig(float(rate))
        rows = [r for gpu in gpus for r in _dense_rows(gpu, rate)]
        held = _dense_rows(hold_out, rate) if hold_out else []
        f = _fit_curve(rows, held, flat_below=True, k_walk=True, split_l2=True)
        if best is None or f["fit_mape"] < best[0]["fit_mape"]:
            best = ({**f, "replay_l2_bytes_per_s": rate}, held)
    f, held = best
    pts = dict(f["rate_points"])
    f["held_out_by_m"] = {f"{lo}-{hi}" if hi < M_BUCKETS[-1][1] else f">={lo}":
                          _quant_mape(sel, f["floor_s"], f["weight_stream_efficiency"], pts, f["k_walk_s_per_k"],
                                      l2_frac_of=dict(f["l2_rate_points"]) if f["l2_rate_points"] else None)
                          for lo, hi in M_BUCKETS if (sel := [r for r in held if lo <= r[0] <= hi])}
    return {"fitted_on": list(gpus), **f}


def _curve_lines(f: dict, assumed: str | None) -> list[str]:
    """A fitted family's rate curve, stream efficiency and floor as kernel_families_fitted.yaml lines."""
    def curve(points: list) -> str:
        return ", ".join(f"[{m}, {v:.3g}]" for m, v in points)
    pts = curve(f["rate_points"])
    notes = [x for x in (None if f["stream_measured"] else
                         "weight_stream_efficiency 1.0 (no memory-bound row streams over twice the L2)", assumed) if x]
    l2 = [f"    l2_rate_points: [{curve(f['l2_rate_points'])}]  # the rows the replay reads from the L2"] \
        if f.get("l2_rate_points") else []
    return [f"    rate_points: [{pts}]", *l2, *([f"    assumed: \"{'; '.join(notes)}\""] if notes else []),
            f"    weight_stream_efficiency: {f['weight_stream_efficiency']:.3g}", f"    floor_s: {f['floor_s']:.3g}",
            *([f"    k_walk_s_per_k: {f['k_walk_s_per_k']:.3g}"] if f["k_walk_s_per_k"] else []),
            *([f"    min_s: {f['min_s']:.3g}"] if f.get("min_s") else [])]


def render_dense_gemm() -> list[str]:
    lines = []
    for gpu in GEMM_PRESETS:
        f = fit_dense_gemm((gpu,))
        tables = " and ".join(f"{t}_{gpu}" for t in DENSE_TABLES)
        lines += [f"  {dense_family(gpu)}:  # {f['rows']} rows ({gpu}), fit MAPE {f['fit_mape']}, on the rows streamed "
                  f"from DRAM {f['dram_mape']}",
                  f"    description: \"Dense bf16 GEMM on {GEMM_PRESETS[gpu]} as the engines run it (cuBLAS, CUDA-graph "
                  "replayed)\"", "    cite: >-",
                  f"      aiconfigurator {tables}.csv.gz bfloat16 rows (TensorRT-LLM, vLLM, SGLang; each engine's "
                  "unquantized Linear calls cuBLAS through torch), named by the preset's efficiency.dense_gemm",
                  "    rate_format: bf16", *_curve_lines(f, None),
                  f"    replay_l2_bytes_per_s: {f['replay_l2_bytes_per_s']:.3g}  # fitted: REPLAY_L2_GRID"]
    return lines


def render_quant_gemm() -> str:
    lines = ["# Generated by scripts/fit_kernels.py from aiconfigurator's measured gemm and quant tables of the in-sample",
             "# GPUs (shared/validation/aic; H200 / Blackwell held out). Do not edit: rerun the script.",
             "# hw_models/stack/kernel_families.py says how each figure is used.", "families:"]
    for name in QUANT_GEMM:
        f = fit_quant_gemm(name)
        spec, q = f["spec"], f["quant"]
        lines += [f"  {name}:  # {f['rows']} rows ({', '.join(f['fitted_on'])}), fit MAPE {f['fit_mape']}",
                  f"    description: \"{spec['description']}\"", "    cite: >-", f"      {spec['cite']}",
                  f"    rate_format: {spec['rate_format']}", *_curve_lines(f, spec.get("assumed"))]
        if spec.get("switch_m"):
            lines += [f"    switch_m: {spec['switch_m']}", f"    switch_family: {spec['switch_family']}"]
        if spec.get("graph_family"):
            lines += [f"    graph_family: {spec['graph_family']}"]
        if q:
            lines += [f"    activation_quant: true  # quant kernel fitted on {q['rows']} quant-table rows",
                      f"    quant_floor_s: {q['floor_s']:.3g}",
                      f"    quant_stream_efficiency: {q['stream_efficiency']:.3g}",
                      *([f"    quant_row_s: {f['quant_row_s']:.3g}"] if f["quant_row_s"] else [])]
    return "\n".join(lines + render_dense_gemm()) + "\n"


GAP_STACKS = ("vllm", "trtllm", "torch-cudagraph")


def fit_graph_gap() -> tuple[float, dict[str, float]]:
    """(pooled median gap, per-GPU median) over the small bf16 GEMMs (module doc)."""
    from hw_models.cost import roofline_cost
    from hw_models.machine import load_machine
    from sim.apps.trace.aic import gemm_op
    gaps, by_gpu = [], {}
    for gpu, preset in ATTN_GPUS.items():
        m = load_machine(preset)
        u = m.units[m.main_unit]
        df = pd.read_csv(SHARED / f"gemm_{gpu}.csv.gz")
        df = df[(df["dtype"] == "bfloat16") & (df["m"] <= 16) & (df["n"] * df["k"] * 2 <= 8e6)]
        mine = []
        for r in df.itertuples(index=False):
            c = roofline_cost(gemm_op(int(r.m), int(r.n), int(r.k), "bf16"), u, m.main_unit, m.memory[u.memory])
            mine.append(r.latency_us * 1e-6 - (c.duration_s - c.overhead_s))
        by_gpu[gpu] = float(np.median(mine))
        gaps += mine
    return _sig(float(np.median(gaps))), by_gpu


def _optional_stream(d: dict) -> str:
    """The Decode fields that differ from their defaults (hw_models.stack.attention_kernels), as YAML."""
    out = ""
    if (d["mha_kv_stream_efficiency"], d["mha_kv_ramp_ctas"]) != (d["kv_stream_efficiency"], d["kv_ramp_ctas"]):
        out += f"mha_kv_stream_efficiency: {d['mha_kv_stream_efficiency']:.3g}, mha_kv_ramp_ctas: {d['mha_kv_ramp_ctas']:.3g}, "
    if d["l2_stream_efficiency"] != 1.0:
        out += f"l2_stream_efficiency: {d['l2_stream_efficiency']:.3g}, "
    if d["kv_walk_s_per_token"]:
        out += f"kv_walk_s_per_token: {d['kv_walk_s_per_token']:.3g}, "
    if d["mha_kv_walk_s_per_token"]:
        out += f"mha_kv_walk_s_per_token: {d['mha_kv_walk_s_per_token']:.3g}, "
    if d["mha_fixed_s"]:
        out += f"mha_fixed_s: {d['mha_fixed_s']:.3g}, "
    if d["split"] != "none":
        out += f"split: {d['split']}, combine_s: {d['combine_s']:.3g}, "
    if d["split"] == "flashinfer":
        out += f"blocks_per_sm: {d['blocks_per_sm']}, "
    return out


def _prefill_lines(pf: dict, indent: str) -> list[str]:
    pts = ", ".join(f"[{q}, {f:.3g}]" for q, f in pf["rate_points"])
    return [f"{indent}fixed_s: {pf['fixed_s']:.3g}", f"{indent}walk_s_per_token: {pf['walk_s_per_token']:.3g}",
            f"{indent}rate_points: [{pts}]", f"{indent}rows: {pf['rows']}", f"{indent}fit_mape: {pf['fit_mape']}"]


def _pooled_presets(name: str, kv: str, q: str) -> set[str]:
    return {p for p, _, _ in _prefill_rows(name, kv, q, tuple(ATTN_GPUS.values()))}


def _curves_lines(name: str, indent: str, gpus: tuple[str, ...] | None = None) -> list[str]:
    """A family's prefill curves per (query, KV) dtype pair (attention_kernels.PrefillCurves) fitted on `gpus`;
    for one GPU, none of a pair whose pooled curve was fitted on that GPU alone (the same curve)."""
    lines = []
    for key, kv, q in (("prefill", "bfloat16", "bfloat16"), ("prefill_kv", "fp8", "bfloat16"),
                       ("prefill_fp8_query", "fp8", "fp8")):
        pf = None if gpus and _pooled_presets(name, kv, q) == set(gpus) else fit_prefill(name, kv=kv, q=q, gpus=gpus)
        if pf and key == "prefill_kv":
            lines += [f"{indent}prefill_kv:", f"{indent}  fp8_e4m3:", *_prefill_lines(pf, indent + "    ")]
        elif pf:
            lines += [f"{indent}{key}:", *_prefill_lines(pf, indent + "  ")]
    return lines


def _capability(preset: str) -> float:
    m = _machine(preset)
    return m.units[m.main_unit].efficiency.compute_capability


def _prefill_sm_lines(name: str) -> list[str]:
    """The family's curves per architecture (`prefill_sm`): one per GPU with rows of this family, each fitted on
    that GPU alone, but for the one GPU the pooled curves were already fitted on alone."""
    lines = []
    for preset in sorted({p for p, _, _ in _attention_table(name, "ctx_attn")}, key=_capability):
        own = _curves_lines(name, "        ", (preset,))
        lines += [f"      {_capability(preset)}:", *own] if own else []
    return ["    prefill_sm:", *lines] if lines else []


def render_attention() -> str:
    lines = ["# Generated by scripts/fit_kernels.py from aiconfigurator's measured attention tables of the in-sample",
             "# GPUs (shared/validation/aic gen_attn / ctx_attn: H100, A100, RTX PRO 6000; the L40S's ctx_attn rows fit only its",
             "# SM 8.9 prefill curves (prefill_sm); H200 / Blackwell held out).",
             "# Do not edit: rerun the script. hw_models/stack/attention_kernels.py says how each figure is used.",
             "families:"]
    for name, spec in ATTENTION.items():
        lines += [f"  {name}:", f"    description: {spec['description']}", "    cite: >-",
                  f"      {spec['cite']}"]
        if spec.get("context_kernel"):
            lines.append("    context_kernel: true")
        lines.append("    decode:")
        for fmt, d in fit_decode(name).items():
            lines.append(f"      {fmt}: {{fixed_s: {d['fixed_s']:.3g}, fixed_cycles: {d['fixed_cycles']:.3g}, "
                         f"cta_s: {d['cta_s']:.3g}, mha_cta_s: {d['mha_cta_s']:.3g}, "
                         f"kv_stream_efficiency: {d['kv_stream_efficiency']:.3g}, "
                         f"kv_ramp_ctas: {d['kv_ramp_ctas']:.3g}, {_optional_stream(d)}"
                         f"rows: {d['rows']}, fit_mape: {d['fit_mape']}}}")
            if d["check_mape"] is not None:
                lines.append(f"      # {' '.join(ATTENTION[name]['check'][:2])} rows of this KV format (not fitted on): "
                             f"{d['check_rows']}, MAPE {d['check_mape']}")
            if d["dropped"]:
                lines.append(f"      # left out (they read less than they name): {', '.join(d['dropped'])}")
        lines += ([f"    prefill_from: {spec['prefill_from']}"] if spec.get("prefill_from") else
                  _curves_lines(name, "    ") + _prefill_sm_lines(name))
    return "\n".join(lines) + "\n"


def report_hold_out(gpu: str) -> None:
    """Decode attention and the quantized GEMM families fitted without `gpu`'s rows: MAPE per GPU (the
    held-out one out of sample); dense bf16 GEMM fitted on the other GPUs pooled, and on `gpu` itself."""
    own = fit_dense_gemm((gpu,))
    pooled = fit_dense_gemm(tuple(g for g in QUANT_GPUS if g != gpu), gpu)
    by_m = ", ".join(f"M {b} {v:.1%}" for b, v in pooled["held_out_by_m"].items())
    print(f"gemm dense bf16: {gpu} fitted on itself {own['fit_mape']:.1%}; fitted on {', '.join(pooled['fitted_on'])} "
          f"(pooled): in sample {pooled['fit_mape']:.1%}, {gpu} (held out) {pooled['held_out_mape']:.1%} ({by_m})")
    for name in QUANT_GEMM:
        f = fit_quant_gemm(name, gpu)
        if f is not None and f["held_out_mape"] is not None:
            print(f"gemm {name}, fitted on {', '.join(f['fitted_on'])}: in sample {f['fit_mape']:.1%}, "
                  f"{gpu} (held out) {f['held_out_mape']:.1%}")
    if gpu not in ATTN_GPUS:   # Ada: the pooled attention families never see its rows (sim validate costs them)
        print(f"attention: {gpu} is not fitted on; `sim validate --input-format aic` on its tables is the held-out figure")
        return
    preset = ATTN_GPUS[gpu]
    for name in ATTENTION:
        for fmt, d in fit_decode(name, preset).items():
            by = ", ".join(f"{p}{' (held out)' if p == preset else ''} {v:.1%}" for p, v in d["mape_by_gpu"].items())
            print(f"decode {name} kv {fmt}, fitted without {gpu}: {by}")
        if ATTENTION[name].get("prefill_from"):   # its prefill curves are another family's
            continue
        for q, kv in (("bfloat16", "bfloat16"), ("bfloat16", "fp8"), ("fp8", "fp8")):
            pf = fit_prefill(name, preset, kv, q)
            if pf is not None and preset in pf["mape_by_gpu"] and len(pf["mape_by_gpu"]) > 1:
                by = ", ".join(f"{p}{' (held out)' if p == preset else ''} {v:.1%}" for p, v in pf["mape_by_gpu"].items())
                print(f"prefill {name} q {q} kv {kv}, fitted without {gpu}: {by}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true", help="rewrite the shipped YAML")
    p.add_argument("--check", action="store_true", help="exit 1 if the shipped YAML differs from the fit")
    p.add_argument("--hold-out", choices=sorted(GEMM_PRESETS), help="fit decode and prefill attention, the "
                   "quantized and the dense bf16 GEMMs without this GPU and print the MAPE per GPU (nothing written)")
    args = p.parse_args()
    if not (SHARED / "comm_h100.csv.gz").is_file():
        print(f"{SHARED} not found: nothing to fit")
        return 0
    if args.hold_out:
        report_hold_out(args.hold_out)
        return 0
    from hw_models.stack.attention_kernels import KERNELS_FILE
    from hw_models.stack.kernel_families import FITTED_FILE
    from hw_models.stack.spec import load_stack
    outputs = {FITS_FILE: fit_all(), KERNELS_FILE: render_attention(), FITTED_FILE: render_quant_gemm()}
    gap, by_gpu = fit_graph_gap()
    print(f"graph_gap_s: {gap:.3g} (median by GPU: "
          + ", ".join(f"{g} {v * 1e6:.2f} us" for g, v in by_gpu.items()) + ")")
    if args.check:
        stale = [str(p) for p, text in outputs.items() if not p.is_file() or p.read_text() != text]
        stale += [f"stack {s}: graph_gap_s {load_stack(s).graph_gap_s} (fit {gap:.3g})" for s in GAP_STACKS
                  if load_stack(s).graph_gap_s is None or abs(load_stack(s).graph_gap_s - gap) > 1e-12]
        for p in stale:
            print(f"{p} differs from scripts/fit_kernels.py's fit: rerun with --write (stacks: copy the figure)")
        if not stale:
            print("shipped fits are the script's output")
        return 1 if stale else 0
    for path, text in outputs.items():
        if args.write:
            path.write_text(text)
            print(f"wrote {path}")
        else:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

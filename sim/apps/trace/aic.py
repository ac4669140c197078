"""`sim validate --input-format aic`: NVIDIA aiconfigurator's measured per-op tables, costed by sim.

The tables (shared/validation/aic, README there) hold per-op latencies taken through each
engine's own module in a CUDA-graph replay: GEMM by dtype and M/N/K, decode and prefill
attention, NCCL and the engines' custom all-reduce. Each row is rebuilt as the op (or ops)
sim's lowering writes for it and costed by the machine's mapper under the stack of the row's
engine (TensorRT-LLM rows under `trtllm`, vLLM under `vllm`, SGLang under `sglang`: vllm's
kernels, which sgl-kernel shares, with SGLang's own block-scaled FP8 GEMM), or under one
`--stack` for every row. Collectives are costed on the GPU's node preset.

The file name says the GPU (`gemm_h100.csv.gz`): its preset is the one sim ships for it.
H200 and Blackwell datacenter tables are this project's out-of-sample check (README of the
tables): they are read and reported as held out, never fitted on (scripts/fit_kernels.py
reads only the in-sample GPUs).

What each row's measured call contains, and what it is compared with:
* gemm: the engine's Linear (FP8 rows include the activation quantization kernel), against
  one GEMM op y[M,N] = x[M,K] W[N,K]^T with W stored in the row's format;
* gen_attn / ctx_attn: TensorRT-LLM's call is the whole attention op (RoPE, KV-cache write and
  the kernel): against sim's attention + rope + kv_append; vLLM's and SGLang's forward write the
  cache but apply no RoPE: attention + kv_append;
* comm: nccl-tests' out-of-place time, against the collective on the GPU's node topology with the
  algorithm the source runs (NCCL's fitted protocols, or the engine's custom all-reduce; the
  stack column of the table shows it). The vLLM / SGLang `_eager` rows are left out: the
  engines replay graphs.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pandas as pd

from hw_models.machine import load_machine
from hw_models.network.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER, collective_s
from hw_models.network.engine_collectives import sglang_algorithm
from hw_models.network.topology import load_topology
from hw_models.registry import mapper_for
from sim.core import graph as g
from sim.core.errors import ConfigError
from sim.core.formats import get_format
from sim.core.graph import Op, TensorUse
from sim.core.lowering import FormatPolicy, lower_attention
from sim.core.model import load_model
from sim.core.workload import Workload

TABLES = ("gemm_sglang", "gemm", "gen_attn", "ctx_attn", "comm")   # longest prefix first
HELD_OUT = ("h200", "b200", "b300", "gb200")    # aic README: out-of-sample, report only
PRESET = {"h100": "h100_sxm", "a100": "a100_80g", "rtx_pro_6000": "rtx_pro_6000", "l40s": "l40s", "h200": "h200",
          "b200": "b200"}
NODE = {"h100": "dgx_h100", "a100": "dgx_a100", "h200": "hgx_h200", "b200": "hgx_b200",
        "rtx_pro_6000": "rtx_pro_6000_x8_pcie", "l40s": "l40s_x8_pcie"}
STACK = {"trtllm": "trtllm", "vllm": "vllm", "sglang": "sglang"}
# The row's dtype -> the stored weight format sim lowers it with.
GEMM_FORMAT = {"bfloat16": "bf16", "fp8": "fp8_e4m3", "fp8_block": "fp8_block128", "nvfp4": "nvfp4",
               "int4_wo": "int4", "int8_wo": "int8", "sq": "int8"}
# The row's dtype -> its activations' format where the measured call takes them quantized: TensorRT-LLM's
# SmoothQuant plugin is timed alone (W8A8 int8 in, the quantize kernel not in the call: aiconfigurator
# collector/trtllm/collect_gemm.py), costed as the stack's quant_gemm_w8a8 family. Every other dtype: bf16 in.
GEMM_ACT_FORMAT = {"sq": "int8"}
KV_FORMAT = {"bfloat16": "bf16", "fp8": "fp8_e4m3"}
# The collective algorithm each measured source runs (hw_models.network.collectives); SGLang's depends on the
# release (engine_collectives.sglang_algorithm: vLLM's kernel before 0.5.12, its own CustomAllReduceV2 after).
COMM_ALGORITHM = {"nccl": "nccl", "trtllm_custom_ar": "trtllm_custom", "vllm_custom_ar": "vllm_custom"}
# A row whose kernel_source names the kernel it ran takes that kernel's algorithm (SGLang 0.5.6.post2's H100 rows
# ran TensorRT-LLM's custom all-reduce: kernel_source TRTLLM).
COMM_KERNEL = {"TRTLLM": "trtllm_custom"}
COMM_KIND = {"all_reduce": ALL_REDUCE, "all_gather": ALL_GATHER, "reduce_scatter": REDUCE_SCATTER,
             "alltoall": ALL_TO_ALL}
US = 1e-6


@dataclass(frozen=True)
class Row:
    gpu: str
    family: str        # what the MAPE is grouped by: "gemm fp8", "decode attention kv bf16", ...
    engine: str        # trtllm, vllm, sglang, nccl, trtllm_custom_ar, ...
    stack: str | None
    measured_s: float
    simulated_s: float
    shape: str

    @property
    def error(self) -> float:
        return (self.simulated_s - self.measured_s) / self.measured_s


@dataclass
class AicValidation:
    rows: list[Row] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)   # one line per table (or part) not costed, and why
    notes: list[str] = field(default_factory=list)     # what a row was costed on, where not its own GPU's preset

    def mape_by_family(self) -> dict[tuple[str, str], tuple[int, float]]:
        """(gpu, family) -> (rows, MAPE)."""
        groups: dict[tuple[str, str], list[float]] = {}
        for r in self.rows:
            groups.setdefault((r.gpu, r.family), []).append(abs(r.error))
        return {k: (len(v), statistics.fmean(v)) for k, v in sorted(groups.items())}

    def to_json(self) -> dict:
        """The MAPE per (GPU, family) and every row costed (a kernel trial needed the rows to find which shapes
        miss), with what was not costed and why."""
        return {"mape_by_family": [{"gpu": gpu, "family": fam, "rows": n, "mape": m, "held_out": gpu in HELD_OUT}
                                   for (gpu, fam), (n, m) in self.mape_by_family().items()],
                # `stack`: the stack a row was costed under; a collective's row, the algorithm (a review)
                "rows": [{"gpu": r.gpu, "held_out": r.gpu in HELD_OUT, "family": r.family, "engine": r.engine,
                          "stack_or_algorithm": r.stack, "shape": r.shape, "measured_s": r.measured_s,
                          "simulated_s": r.simulated_s, "error": r.error} for r in self.rows],
                "skipped": self.skipped, "notes": self.notes}


def table_of(path: Path) -> tuple[str, str]:
    """(table, gpu) from a file name such as gemm_rtx_pro_6000.csv.gz."""
    stem = path.name.split(".", 1)[0]
    for t in TABLES:
        if stem.startswith(t + "_"):
            return t, stem[len(t) + 1:]
    if stem.startswith("quant_"):   # aiconfigurator's, but the kernel alone, not an op sim lowers
        raise ConfigError(f"{path}: an aiconfigurator activation-quantization table: no op of sim's graph is that "
                          "kernel alone (the W8A8 families price it inside each GEMM), so sim validate does not read "
                          "it; scripts/fit_kernels.py fits the families' quantize pass on it")
    raise ConfigError(f"{path}: not an aiconfigurator table (expected <table>_<gpu>.csv.gz, table one of "
                      f"{', '.join(TABLES)})")


# The columns each table's rows are costed from, and those of them that are numbers (a trial's table without `k`, or
# with `abc` for a latency, had died in pandas with a traceback)
_ATTN = ("framework", "kernel_source", "kv_dtype", "batch", "isl", "step", "heads", "kv_heads", "head_dim", "latency_us")
COLUMNS = {"gemm": ("framework", "dtype", "m", "n", "k", "latency_us"), "gen_attn": _ATTN, "ctx_attn": _ATTN,
           "comm": ("source", "op", "kernel_source", "version", "num_gpus", "bytes", "latency_us")}
COLUMNS["gemm_sglang"] = COLUMNS["gemm"]
NUMERIC = {"m", "n", "k", "latency_us", "batch", "isl", "step", "heads", "kv_heads", "head_dim", "num_gpus", "bytes"}


def read_table(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise ConfigError(f"{path}: not found (an aiconfigurator table, shared/validation/aic)")
    try:
        df = pd.read_csv(path)
    except (OSError, EOFError, ValueError, pd.errors.ParserError) as exc:   # EOFError: a gzip cut short
        raise ConfigError(f"{path}: cannot read as CSV: {exc}") from None
    need = COLUMNS[table_of(path)[0]]
    if lacking := [c for c in need if c not in df]:
        raise ConfigError(f"{path}: missing column {', '.join(lacking)} (a {table_of(path)[0]} table has "
                          f"{', '.join(need)})")
    # Every op table ends its rows with the measured latency: a row without one was cut short (a truncated copy).
    missing = df.index[df["latency_us"].isna()]
    if len(missing):
        raise ConfigError(f"{path}: line {missing[0] + 2} has no latency_us (a truncated table?)")
    for col in (c for c in need if c in NUMERIC):
        bad = df.index[pd.to_numeric(df[col], errors="coerce").isna()]
        if len(bad):
            raise ConfigError(f"{path}: line {bad[0] + 2}: {col}: {df[col][bad[0]]!r} is not a number")
    return df


# What issue 28 added to the stacks; `baseline` costs without them (docs/validation.md's "before").
ISSUE28_FIELDS = {"attention": None, "attention_rules": [], "graph_gap_s": None, "quant_gemm_by_capability": {},
                  "quant_gemm_w8a8": {}}
# The fitted quantized GEMM families (hw_models/stack/kernel_families_fitted.yaml) -> the hand family the
# stacks named before (TensorRT-LLM's weight-only family then carried the marlin family's figures).
ISSUE28_FAMILIES = {"trtllm_fp8_per_tensor": "fp8_scaled_mm", "vllm_fp8_per_tensor": "fp8_scaled_mm",
                    "trtllm_w4a16": "marlin", "trtllm_w8a16": "marlin",
                    "trtllm_nvfp4": "blackwell_block_scaled", "vllm_nvfp4": "fp4_marlin_emulated",
                    # block-scaled FP8 had no format: its rows ran as per-tensor FP8 under the hand family
                    "trtllm_fp8_block": "fp8_scaled_mm", "vllm_fp8_block": "fp8_scaled_mm",
                    "sglang_fp8_block": "fp8_scaled_mm",
                    # per-architecture and SGLang's own families: SGLang then ran vLLM's (base) families
                    "vllm_fp8_per_tensor_sm120": "fp8_scaled_mm", "sglang_fp8_per_tensor": "fp8_scaled_mm",
                    "sglang_fp8_per_tensor_sm120": "fp8_scaled_mm", "sglang_nvfp4": "fp4_marlin_emulated",
                    "trtllm_fp8_block_sm120": "fp8_scaled_mm",
                    # Ada (SM 8.9) families (scripts/fit_kernels_ada.py)
                    "vllm_fp8_per_tensor_sm89": "fp8_scaled_mm", "sglang_fp8_per_tensor_sm89": "fp8_scaled_mm",
                    "trtllm_fp8_block_sm89": "fp8_scaled_mm", "vllm_fp8_block_sm89": "fp8_scaled_mm"}


# The attention family each measured kernel (kernel_source) is; a row is costed with the family it measured
# where that is not the one its engine's stack picks on the GPU (SGLang 0.5.10's A100 rows ran
# flash_attention, where SGLang's default there is FlashInfer).
# TensorRT-LLM's op (torch_flow) takes the trtllm stack's own pick, which is per architecture (attention_rules).
# SGLang's fa3 (sgl-kernel's build) is its own family; vLLM's rows name FA2 or FA3 (vllm_flash_attn_fa2 / _fa3:
# flash_attn2 / flash_attn), or neither (A100: vllm_flash_attn), where the stack picks by the GPU as vLLM does.
# vLLM's FlashInfer rows are the vllm_flashinfer family (fitted on them, decode and prefill). SGLang's
# flash_attention rows (A100: its fa3 backend, FlashAttention-3's SM 8.x build) are sglang_fa3_sm80 (decode fitted
# on them; prefill sglang_fa3's SM 8.0 curve, fitted on them too).
KERNEL_FAMILY = (("torch_flow", None), ("vllm_flashinfer", "vllm_flashinfer"), ("flashinfer", "flashinfer"),
                 ("flash_attn_fa2", "flash_attn2"), ("flash_attn_fa3", "flash_attn"), ("vllm_flash_attn", None),
                 ("flash_attention", "sglang_fa3_sm80"), ("fa3", "sglang_fa3"))


def measured_family(kernel_source: str) -> str | None:
    return next((fam for key, fam in KERNEL_FAMILY if key in kernel_source), None)


# The GEMM rows a collector timed without a CUDA graph, each call launched by the host (aiconfigurator
# collector/vllm/collect_gemm.py: benchmark_with_power(..., use_cuda_graph=gemm_type != "fp8_block")): their calls
# pay the engine's eager dispatch (a family's min_s), which a graph-replayed serving step does not.
EAGER_TIMED = {("vllm", "fp8_block")}


@cache
def _mapper(preset: str, stack: str | None, baseline: bool = False, attention: str | None = None,
            collector: str | None = None, eager: bool = False):
    """The preset's mapper under `stack` (running the `attention` family, if given; its GEMMs replayed as
    `collector`'s loop replays them, hw_models.stack.cost.replay_weight_copies; `eager`: timed without a CUDA
    graph, EAGER_TIMED); only its per-op cost is used, so the model is a placeholder."""
    machine = load_machine(preset)
    if machine.kind != "gpu":
        raise ConfigError(f"--hw {preset}: kind {machine.kind!r}; --input-format aic costs GPU ops (a gpu preset)")
    mapper = mapper_for(machine, Workload(name="aic", model="llama3-8b", stack=stack), load_model("llama3-8b"))
    if baseline and mapper.stack is not None:
        quant = {f: ISSUE28_FAMILIES.get(fam, fam) for f, fam in mapper.stack.quant_gemm.items()}
        mapper.stack = mapper.stack.model_copy(update={**ISSUE28_FIELDS, "quant_gemm": quant,
                                                            "quant_gemm_emulated": {}})
    elif attention is not None and mapper.stack is not None:
        mapper.stack = mapper.stack.model_copy(update={"attention": attention, "attention_rules": []})
    if not baseline and mapper.stack is not None:   # the tables replay one layer: small caches stay in L2
        mapper.stack = mapper.stack.model_copy(update={"single_layer_replay": True, "replay_collector": collector,
                                                       "eager_replay": eager})
    return mapper


def gemm_op(m: int, n: int, k: int, weight_fmt: str, act_fmt: str = "bf16") -> Op:
    """One GEMM y[M,N] = x[M,K] W[N,K]^T as sim.core.lowering._linear writes it."""
    def t(name: str, role: str, shape: tuple[int, ...], fmt: str) -> TensorUse:
        return TensorUse(name, role, shape, fmt, get_format(fmt).storage_bytes(shape))
    reads = (t("x", "activation", (m, k), act_fmt), t("w", "weight", (n, k), weight_fmt))
    return Op("L0.gemm", g.GEMM, 2.0 * m * n * k, reads, (t("y", "activation", (m, n), act_fmt),),
              (("m", m), ("n", n), ("k", k)), act_fmt, 0)


def _gemm_rows(df: pd.DataFrame, gpu: str, preset: str, stack: str | None, out: AicValidation,
               baseline: bool = False) -> None:
    for (fw, dtype), part in df.groupby(["framework", "dtype"], sort=True):
        fmt = GEMM_FORMAT.get(dtype)
        if fmt is None:
            out.skipped.append(f"{gpu} gemm {fw} {dtype}: no sim format for it")
            continue
        st = stack or STACK.get(fw)
        act = "bf16" if baseline else GEMM_ACT_FORMAT.get(dtype, "bf16")   # before: SmoothQuant ran as weight-only
        try:
            mapper = _mapper(preset, st, baseline, collector=fw, eager=(fw, dtype) in EAGER_TIMED)
            for m, n, k, lat in part[["m", "n", "k", "latency_us"]].itertuples(index=False):
                sim_s = mapper.cost(gemm_op(int(m), int(n), int(k), fmt, act)).duration_s
                out.rows.append(Row(gpu, f"gemm {dtype} [{fw}]", fw, st, lat * US, sim_s, f"{m}x{n}x{k}"))
        except ConfigError as exc:   # e.g. a native-only family on a GPU without the format's rate
            out.skipped.append(f"{gpu} gemm {fw} {dtype} under {st}: {exc}")


def _attention_model(heads: int, kv_heads: int, head_dim: int) -> dict:
    h = heads * head_dim
    return {"name": f"attn{heads}x{kv_heads}x{head_dim}", "hidden_size": h, "intermediate_size": 4 * h,
            "num_layers": 1, "num_heads": heads, "num_kv_heads": kv_heads, "head_dim": head_dim,
            "vocab_size": 32000, "max_position_embeddings": 1 << 20}


# The ops of a lowered layer an engine's attention call covers (module doc).
ATTENTION_OPS = {"trtllm": ("L0.attention", "L0.rope", "L0.kv_append")}
ATTENTION_OPS_DEFAULT = ("L0.attention", "L0.kv_append")


@cache
def _model(heads: int, kv_heads: int, head_dim: int):
    return load_model(_attention_model(heads, kv_heads, head_dim))


def attention_ops(preset: str, stack: str | None, engine: str, phase: str, batch: int, q_len: int, kv_len: int,
                  heads: int, kv_heads: int, head_dim: int, kv_fmt: str, baseline: bool = False,
                  attention: str | None = None, q_fmt: str = "bf16") -> list[tuple[Op, float]]:
    """The ops of one lowered layer an engine's attention call covers, each with its simulated
    seconds under `stack` (the attention op first; run as `attention`'s family, if given).
    `q_fmt`: the activations' format (a row's attn_dtype: FP8 where the engine ran FP8 attention math)."""
    mapper = _mapper(preset, stack, baseline, attention)
    return [(op, mapper.cost(op).duration_s)
            for op in _layer_ops(ATTENTION_OPS.get(engine, ATTENTION_OPS_DEFAULT), phase, batch, q_len, kv_len,
                                 heads, kv_heads, head_dim, kv_fmt, q_fmt)]


@cache
def _layer_ops(names: tuple[str, ...], phase: str, batch: int, q_len: int, kv_len: int, heads: int,
               kv_heads: int, head_dim: int, kv_fmt: str, q_fmt: str = "bf16") -> tuple[Op, ...]:
    """The ops `names` of one lowered layer of that shape. Lowered once per shape (the tables
    repeat each shape on every GPU and engine), and only the layer's attention half: lowering the
    whole step for three of its ops was most of the fit's time (scripts/fit_kernels.py)."""
    model = _model(heads, kv_heads, head_dim)
    graph = lower_attention(model, phase, batch, q_len, kv_len, FormatPolicy("bf16", q_fmt, kv_fmt), True)
    return tuple(graph.op(n) for n in names)


def attention_s(preset: str, stack: str | None, engine: str, phase: str, batch: int, q_len: int,
                kv_len: int, heads: int, kv_heads: int, head_dim: int, kv_fmt: str, baseline: bool = False,
                attention: str | None = None, q_fmt: str = "bf16") -> float:
    """Simulated seconds of one engine attention call: its ops of one lowered layer."""
    return sum(s for _, s in attention_ops(preset, stack, engine, phase, batch, q_len, kv_len, heads, kv_heads,
                                           head_dim, kv_fmt, baseline, attention, q_fmt))


def _attention_rows(df: pd.DataFrame, table: str, gpu: str, preset: str, stack: str | None,
                    out: AicValidation, baseline: bool = False) -> None:
    decode = table == "gen_attn"
    if "attn_dtype" not in df:
        df = df.assign(attn_dtype="bfloat16")
    for (fw, kv, src), part in df.groupby(["framework", "kv_dtype", "kernel_source"], sort=True):
        st = stack or STACK.get(fw)
        attention = None if stack or baseline else measured_family(str(src))
        family = f"{'decode' if decode else 'prefill'} attention kv {kv} [{fw}]"
        for b, isl, step, h, kvh, d, lat, q in part[["batch", "isl", "step", "heads", "kv_heads", "head_dim",
                                                     "latency_us", "attn_dtype"]].itertuples(index=False):
            q_len, kv_len = (1, int(step) + 1) if decode else (int(isl), int(isl))
            # The query's dtype picks the prefill curve (FP8 FMHA math); decode is keyed on the KV cache alone.
            q_fmt = "bf16" if decode or baseline else KV_FORMAT.get(q, "bf16")
            sim_s = attention_s(preset, st, fw, "decode" if decode else "prefill", int(b), q_len, kv_len,
                                int(h), int(kvh), int(d), KV_FORMAT.get(kv, "bf16"), baseline, attention, q_fmt)
            out.rows.append(Row(gpu, family, fw, st, lat * US, sim_s, f"b{b} q{q_len} kv{kv_len} h{h}/{kvh}"))


def _comm_rows(df: pd.DataFrame, gpu: str, out: AicValidation, baseline: bool = False) -> None:
    node = NODE.get(gpu)
    if node is None:
        out.skipped.append(f"{gpu} comm: no node preset for this GPU")
        return
    topo = load_topology(node)
    nvlink = topo.interconnect.kind == "nvswitch"
    for (src, op), part in df.groupby(["source", "op"], sort=True):
        kind = COMM_KIND.get(op)
        if kind is None:
            out.skipped.append(f"{gpu} comm {src} {op}: no sim collective")
            continue
        # vLLM / SGLang custom all-reduce come as graph and eager pairs: the engines replay graphs.
        part = part[~part["kernel_source"].str.endswith("_eager")]
        for n, nbytes, lat, ver, kernel in part[["num_gpus", "bytes", "latency_us", "version",
                                                 "kernel_source"]].itertuples(index=False):
            algorithm = "ring" if baseline else COMM_KERNEL.get(kernel) or (
                sglang_algorithm(ver, nvlink) if src == "sglang_custom_ar" else COMM_ALGORITHM.get(src, "ring"))
            sim_s = collective_s(topo, kind, float(nbytes), int(n), algorithm)
            # An engine's custom all-reduce per release: releases change the kernel and its NCCL fallback (RTX PRO
            # 6000, 2 GPUs: vLLM 0.19.0 2.5x 0.24.0's time at every size; SGLang 0.5.12+ runs its CustomAllReduceV2).
            family = f"{op} {src}" if src == "nccl" else f"{op} {src} {ver}"
            out.rows.append(Row(gpu, family, src, algorithm, lat * US, sim_s, f"{n} GPUs {nbytes} B"))


def validate_tables(paths: list[Path], hw: str | None = None, stack: str | None = None,
                    limit: int | None = None, baseline: bool = False) -> AicValidation:
    """Cost every row of the aiconfigurator tables `paths` (module doc). `hw`: one preset for
    every table (default: the preset of the GPU the file name says); `stack`: one stack for
    every row (default: the row engine's); `limit`: at most this many rows per table, spread
    evenly (a quick look; the figures of docs/validation.md use all rows). `baseline`: as sim
    costed these ops before issue 28 (ring all-reduce on the topology's datasheet or vidur fit, no
    attention kernel family, the host launch on graph-replayed kernels, the hand-written quantized
    GEMM families), the "before" column of
    docs/validation.md."""
    out = AicValidation()
    for path in paths:
        table, gpu = table_of(path)
        df = read_table(path)
        if limit is not None and len(df) > limit:
            df = df.iloc[:: math.ceil(len(df) / limit)]
        if table == "comm":
            if hw or stack:   # a collective is costed on the table GPU's node and its engine's algorithm
                out.notes.append(f"{path.name}: --hw / --stack do not apply to collectives (costed on {gpu}'s node)")
            _comm_rows(df, gpu, out, baseline)
            continue
        preset = hw or PRESET.get(gpu)
        if hw and PRESET.get(gpu) not in (None, hw):   # an a100 table on the h100 preset: rows still say a100
            out.notes.append(f"{path.name}: {gpu}'s measured rows costed on --hw {hw}, another GPU's preset: the "
                             "errors include the two GPUs' difference")
        if preset is None:
            out.skipped.append(f"{path.name}: no sim preset for {gpu} (give --hw)")
            continue
        if table.startswith("gemm"):
            _gemm_rows(df, gpu, preset, stack, out, baseline)
        else:
            _attention_rows(df, table, gpu, preset, stack, out, baseline)
    if not out.rows:
        raise ConfigError("no aiconfigurator rows costed: " + "; ".join(out.skipped or ["the tables are empty"]))
    return out


def gpu_sort_key(gpu: str) -> tuple[bool, str]:
    return gpu in HELD_OUT, gpu

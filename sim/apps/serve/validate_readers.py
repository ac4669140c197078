"""Measured serving runs for sim.apps.serve.validate, from the layouts benchmark tools write.

* silicon sample (aiconfigurator-core `systems/silicon_sample.csv`, NVIDIA ai-dynamo/aiconfigurator;
  shared/validation/aic/README.md): one closed-loop run per row: `batch_size` concurrent clients,
  fixed `isl`/`osl` (InferenceX's rows: the bounds its client drew lengths under, `client_ratio`),
  `backend`, `tp_size`, `gemm_quant_mode`; `silicon_ttft_ms`, `silicon_tpot_ms`
  (means). Mean E2E is derived exactly from them for fixed lengths: TTFT + TPOT x (osl - 1), since
  TPOT is (e2e - ttft) / (osl - 1) per request. Only aggregated (`mode: agg`) runs of a model
  this project has (validate.MODELS: dense, and MoE at `moe_ep_size` expert-parallel ways) are replayed; the
  others are listed as skipped, with why.
* benchmark logs (vLLM benchmark_serving, genai-perf, aiperf JSON): sim.apps.serve.bench_logs.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pandas as pd

from sim.apps.serve.validate import ENGINES, GPUS, MODELS, Run
from sim.apps.serve.validate_models import EXPERT_ONLY_CHECKPOINTS, checkpoint_quant, is_moe
from sim.core.errors import ConfigError

FP4 = {"nvfp4", "mxfp4", "w4a16_mxfp4"}
REPLAYED_QUANT = {"fp8", "fp8_block"}   # gemm_quant_mode / moe_quant_mode values a replay prices (FORMATS)
NO_NATIVE_FP4 = {"h100_sxm", "h200_sxm", "a100_sxm"}   # FP4 tensor cores from Blackwell on
# Two collections share the table. Rows with a dated id (`2026_04_06_llama_3_1_70b_h100_sxm_vllm_fp8_agg_1024x1024_c16_
# tp4_ep1_260`: vLLM Llama-3.1-70B FP8, gpt-oss, MiniMax) have InferenceX's fixed-seq-len grid exactly (isl x osl in
# 1k x 1k, 1k x 8k, 8k x 1k; 4-64 clients; SemiAnalysisAI/InferenceX benchmarks/70b_fp8_h100_slurm.sh serves this
# model on H100 with vLLM). InferenceX's benchmark template sets RANDOM_RANGE_RATIO: 0.8 for them
# (.github/workflows/benchmark-tmpl.yml, env), its launchers pass it on (run_benchmark_serving --random-range-ratio),
# and its client (utils/bench_serving/benchmark_serving.py sample_random_requests) draws each request's prompt and
# output length uniformly in [int(0.8 L), L]: isl/osl are the upper bounds, the mean lengths 0.9 x them. The other rows
# (ids `<hf name>_<hf name>_h100_sxm_<backend>_agg_...`, isl 1k-4k x osl 128-512) are aiconfigurator's own
# collection, whose client this project has not found: replayed at the nominal lengths, as before.
SILICON_RANGE_RATIO = 0.8
INFERENCEX_ID = re.compile(r"^\d{4}_\d{2}_\d{2}_")


def client_ratio(run_id: str) -> float | None:
    """The client's random_range_ratio of a silicon-sample row (None: lengths as recorded)."""
    return SILICON_RANGE_RATIO if INFERENCEX_ID.match(run_id) else None


# How the silicon sample's requests were sampled. InferenceX's client sends `temperature: 0.0` with every request
# (utils/bench_serving/backend_request_func.py, async_request_openai_completions and _chat_completions): greedy.
# aiconfigurator's own collection is benchmarked by `aiconfigurator eval` (src/aiconfigurator/eval/benchmarks/
# genai_perf_runner.py: genai-perf chat, streaming, `--extra-inputs` max_tokens, min_tokens and ignore_eos only,
# no sampling parameter) against a Dynamo deployment (tools/automation/launch_eval.sh), so the worker's defaults
# decide. Dynamo's vLLM worker takes them from the model's generation_config.json (ai-dynamo/dynamo
# components/backends/vllm/src/dynamo/vllm/main.py setup_vllm_engine: `get_diff_sampling_param()`), which for
# Qwen3-32B is temperature 0.6, top_k 20, top_p 0.95 (the Qwen/Qwen3-32B model card), and vLLM 0.12 masks
# top-k with top-p by sorting each row's whole vocabulary (apply_top_k_top_p: the `vllm` stack's top_p_sampler).
# Dynamo's TensorRT-LLM worker starts from TensorRT-LLM's own SamplingParams() with only the tokenizer's ids set
# (components/backends/trtllm main.py: `default_sampling_params._setup(tokenizer)`, no generation config), so its
# rows decode greedily; what Dynamo's SGLang worker defaults to is not established here (the sglang stack prices
# no sampler either), so those rows stay greedy too.
GENERATION_CONFIG_TOP_P = {"Qwen/Qwen3-32B"}   # served models whose generation_config.json sets top_p < 1
DYNAMO_GENERATION_DEFAULTS = {"vllm"}          # engines whose Dynamo worker applies generation_config.json


def silicon_deployment(run_id: str) -> str:
    """What served a silicon-sample row (Serving.deployment). InferenceX launches the engine's own server (`vllm
    serve` in benchmarks/70b_fp8_h100_slurm.sh) and drives it with its benchmark_serving.py; aiconfigurator's own
    collection deploys each engine behind Dynamo's frontend (tools/automation/launch_eval.sh) and drives it with
    genai-perf (eval/benchmarks/genai_perf_runner.py). The fitted per-request delay is the client's and the path's
    together: these rows cannot tell them apart."""
    return "direct" if INFERENCEX_ID.match(run_id) else "dynamo"


def silicon_sampling(run_id: str, backend: str, model: str) -> str:
    """How a silicon-sample row's requests were sampled (Workload.sampling; the note above)."""
    if client_ratio(run_id) is None and backend in DYNAMO_GENERATION_DEFAULTS and model in GENERATION_CONFIG_TOP_P:
        return "top_p"
    return "greedy"


SILICON_COLUMNS = {"id", "backend", "model_path", "system", "mode", "isl", "osl", "batch_size", "tp_size",
                   "silicon_ttft_ms", "silicon_tpot_ms"}
OPTIONAL_COLUMNS = {"gemm_quant_mode", "moe_quant_mode", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size",
                    "backend_version"}
SILICON_NUMERIC = {"isl", "osl", "batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size",
                   "silicon_ttft_ms", "silicon_tpot_ms"}


def is_silicon(path: Path) -> bool:
    try:
        head = pd.read_csv(path, nrows=0)
    except EOFError as exc:   # a gzip cut short: what it is cannot be read, say so rather than "not a table"
        raise ConfigError(f"{path}: cannot read as CSV: {exc} (a truncated file?)") from None
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return SILICON_COLUMNS <= set(head.columns)


def in_training(run_id: str) -> bool:
    """The half of the H100 runs the engine-overhead fit reads (sim.apps.serve.overhead_fit; a stable hash of the
    id, not the row order)."""
    return hashlib.sha1(run_id.encode()).digest()[0] % 2 == 0


REPUBLISHED = "a second publication of a kept row's measurement (the same setup, TTFT and TPOT to the last digit)"


def _republished(runs: list[Run]) -> tuple[list[Run], list[tuple[str, str]]]:
    """One run per measurement: the table publishes some twice under two dates' ids (13 vLLM gpt-oss-120b pairs
    of the H100 sample, the same setup to the last digit of TTFT and TPOT), and a copy counted each time, on both
    sides of the training split when the hashes part them (a serving engineer's trial). The training-half copy
    is kept where there is one, so that a fitted measurement is never also held out."""
    def key(r: Run) -> tuple:
        return (r.gpu, r.engine, r.model, r.isl, r.osl, r.concurrency, r.tp, r.ep, r.quant, r.range_ratio,
                r.token_budget, r.sampling, r.deployment, r.measured["ttft_s"], r.measured["tpot_s"])

    kept: dict[tuple, Run] = {}
    for r in runs:
        k = key(r)
        if k not in kept or in_training(r.name) and not in_training(kept[k].name):
            kept[k] = r
    return ([r for r in runs if kept[key(r)] is r],
            [(r.name, REPUBLISHED) for r in runs if kept[key(r)] is not r])


def read_silicon(path: Path, systems: set[str] | None = None) -> tuple[list[Run], list[tuple[str, str]]]:
    """The replayable runs of a silicon-sample table (of `systems` only, when given), and the
    skipped rows as (id, reason)."""
    try:
        df = pd.read_csv(path, dtype={"backend_version": str})   # a release is text: 1.10 is not 1.1
    except (OSError, EOFError, ValueError, pd.errors.ParserError) as exc:   # EOFError: a gzip cut short
        raise ConfigError(f"{path}: cannot read as CSV: {str(exc).splitlines()[0]}") from None
    for col in OPTIONAL_COLUMNS - set(df.columns):   # a table without them: what an empty cell says
        df[col] = np.nan
    for col in SILICON_NUMERIC & set(df.columns):   # text where a number belongs: -inf, which _unreplayable names
        number = pd.to_numeric(df[col], errors="coerce")
        df[col] = number.mask(number.isna() & df[col].notna(), -np.inf)
    runs, skipped = [], []
    for row in df.itertuples(index=False):
        rid = str(row.id)
        if systems is not None and row.system not in systems:
            continue
        why = _unreplayable(row)
        if why:
            skipped.append((rid, why))
            continue
        ttft, tpot = row.silicon_ttft_ms / 1e3, row.silicon_tpot_ms / 1e3
        quant = checkpoint_quant(row.model_path, row.gemm_quant_mode if isinstance(row.gemm_quant_mode, str) else None)
        runs.append(Run(rid, row.system, row.backend, row.model_path, int(row.isl), int(row.osl), int(row.batch_size),
                        int(row.tp_size), quant,
                        {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": ttft + tpot * (int(row.osl) - 1)},
                        ep=_expert_ways(row), range_ratio=client_ratio(rid), token_budget=aic_token_budget(row),
                        sampling=silicon_sampling(rid, row.backend, row.model_path),
                        deployment=silicon_deployment(rid), e2e_derived=True,
                        version=str(row.backend_version) if isinstance(row.backend_version, str) else None))
    runs, copies = _republished(runs)
    return runs, skipped + copies


def aic_token_budget(row) -> int | None:
    """max_num_tokens of a TensorRT-LLM run of aiconfigurator's own collection (ids without a date; every
    TRT-LLM row of the H100 sample, TensorRT-LLM 1.0.0rc3 mostly): aiconfigurator launches its aggregated
    TRT-LLM workers with max_num_tokens = batch size + isl + 1500 and chunked prefill off
    (aiconfigurator generator/backends/trtllm.py, `agg_cfg["max_num_tokens"] = agg_cfg["bs"] + isl + 1500`).
    None for other engines and for InferenceX's rows (their engine's default)."""
    if row.backend != "trtllm" or client_ratio(str(row.id)) is not None:
        return None
    return int(row.batch_size) + int(row.isl) + 1500


def _expert_ways(row) -> int:
    """The expert-parallel ways of a MoE row (moe_ep_size, which _moe_layout has checked; 1 for a dense model)."""
    return int(row.moe_ep_size) if is_moe(row.model_path) else 1


def _positive(value: float) -> bool:
    """Finite and above zero: read_silicon has made the numeric columns numbers (an empty cell NaN, text -inf)."""
    return bool(np.isfinite(value) and value > 0)


def _whole(value: float) -> bool:
    return _positive(value) and float(value).is_integer()


def _unreplayable(row) -> str:
    if row.mode != "agg":
        return "disaggregated serving (prefill and decode workers) is not replayed"
    quant = {q for q in (row.gemm_quant_mode, row.moe_quant_mode) if isinstance(q, str)}
    if row.model_path in EXPERT_ONLY_CHECKPOINTS:   # its weights are the checkpoint's, not the label's
        if row.backend != "vllm":
            return (f"{row.backend}'s {EXPERT_ONLY_CHECKPOINTS[row.model_path]} experts: no kernel family here (vLLM's "
                    "take its fused Marlin MoE)")
        quant = set()
    if quant & FP4 and row.system in NO_NATIVE_FP4:
        return (f"{'/'.join(sorted(quant & FP4))} weights on {row.system}: no native FP4 there (the engine's emulated "
                "weight-only kernels are not what sim prices)")
    if row.model_path not in MODELS:
        return f"model {row.model_path} has no config here"
    if row.backend not in ENGINES:
        return f"engine {row.backend} unknown"
    if row.system not in GPUS:
        return f"GPU {row.system} has no preset"
    if not (_positive(row.tp_size) and _positive(row.batch_size)):
        return "no TP size or concurrency"
    if not (_whole(row.tp_size) and _whole(row.batch_size)):
        return f"tp_size {row.tp_size} / batch_size {row.batch_size}: not whole numbers"
    missing = [c for c in ("isl", "osl", "silicon_ttft_ms", "silicon_tpot_ms") if not _positive(getattr(row, c))]
    if missing:   # a row cut short (a truncated file) or written without its measurement
        return f"no positive {', '.join(missing)} (a truncated or incomplete row)"
    unknown = sorted(q for q in quant if q not in REPLAYED_QUANT)
    if unknown:
        return f"quantization {'/'.join(unknown)} not replayed (GEMM or MoE)"
    if (pd.notna(row.pp_size) and row.pp_size > 1) or (pd.notna(row.attention_dp_size) and row.attention_dp_size > 1):
        return "pipeline stages or attention data parallelism"
    return _moe_layout(row) if is_moe(row.model_path) else ""


def _moe_layout(row) -> str:
    """Why a MoE row's layout cannot be replayed, or "". The engines split the experts moe_tp x moe_ep = tp ways
    (aiconfigurator's generator enforces it for TensorRT-LLM; vLLM's --enable-expert-parallel spreads them over the
    TP group). `parallel.ep` expresses two of those layouts: ep 1, each expert split over the whole TP group (moe_tp =
    tp), and each expert whole on its device (moe_tp 1, moe_ep the TP size); a split between the two is refused."""
    ep, mtp = row.moe_ep_size, row.moe_tp_size if pd.notna(row.moe_tp_size) else 1
    if not (_whole(ep) and _whole(mtp)):
        return f"moe_ep_size {ep!r} / moe_tp_size {row.moe_tp_size!r}: a MoE row needs whole, positive ways"
    if ep == 1 and mtp == row.tp_size:   # every expert split over the TP group as a dense MLP is: parallel.ep 1
        return ""
    if mtp > 1:
        return (f"experts split by tensor parallelism (moe_tp_size {int(mtp)}): a MoE layout parallel.ep cannot "
                "express (each expert split over the whole TP group, or whole on each device with ep a multiple of tp)")
    if ep != row.tp_size:
        return f"moe_ep_size {int(ep)} x moe_tp_size 1 is not tp_size {int(row.tp_size)}: the row's layout disagrees"
    return ""

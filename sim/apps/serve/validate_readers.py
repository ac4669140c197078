"""Measured serving runs for sim.apps.serve.validate, from the layouts benchmark tools write.

* silicon sample (aiconfigurator-core `systems/silicon_sample.csv`, NVIDIA ai-dynamo/aiconfigurator;
  shared/validation/aic/README.md): one closed-loop run per row: `batch_size` concurrent clients,
  fixed `isl`/`osl` (InferenceX's rows: the bounds its client drew lengths under, `client_ratio`),
  `backend`, `tp_size`, `gemm_quant_mode`; `silicon_ttft_ms`, `silicon_tpot_ms`
  (means). Mean E2E is derived exactly from them for fixed lengths: TTFT + TPOT x (osl - 1), since
  TPOT is (e2e - ttft) / (osl - 1) per request. Only aggregated (`mode: agg`) runs of a dense model
  this project has (validate.MODELS) are replayed; the others are listed as skipped, with why.
* vLLM `benchmark_serving.py --save-result` JSON (vllm-project/vllm benchmarks/benchmark_serving.py,
  `result_json`): `max_concurrency`, `input_lens`, `output_lens`, `ttfts`, `itls`, means
  `mean_ttft_ms`, `mean_tpot_ms`, `mean_e2el_ms`, `request_throughput`; the run's engine, GPU and model
  come from the command line (--hw, --engine, --model) since the JSON does not record them.
* genai-perf `profile_export_genai_perf.json` (triton-inference-server/perf_analyzer
  genai-perf/genai_perf/export_data/json_exporter.py: the statistics of each metric, then the run's
  arguments under `input_config`): per metric a mapping with `unit` and `avg` (`time_to_first_token`,
  `inter_token_latency` (per request (latency - TTFT) / (output tokens - 1), i.e. TPOT),
  `request_latency`, `request_throughput`, `input_sequence_length`, `output_sequence_length`), and
  `input_config.concurrency`; engine, GPU and model again from the command line.
* aiperf `profile_export_aiperf.json` (ai-dynamo/aiperf, genai-perf's successor, which aiconfigurator's
  collection ran): the same metrics at the top level (aiperf/common/models/export_models.py, "designed to
  mimic the structure of the GenAI-Perf JSON output") or under `records` with TTFT as `ttft` (its export-level
  docs), the load arguments under `input_config.loadgen`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from sim.apps.serve.validate import ENGINES, GPUS, MODELS, Run
from sim.core.errors import ConfigError
from sim.core.model import load_model, preset_names
from sim.core.schema import validate_mapping

FP4 = {"nvfp4", "mxfp4", "w4a16_mxfp4"}
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


SILICON_COLUMNS = {"backend", "model_path", "system", "mode", "isl", "osl", "batch_size", "tp_size",
                   "silicon_ttft_ms", "silicon_tpot_ms"}
SILICON_NUMERIC = {"isl", "osl", "batch_size", "tp_size", "pp_size", "attention_dp_size", "silicon_ttft_ms",
                   "silicon_tpot_ms"}


def is_silicon(path: Path) -> bool:
    try:
        head = pd.read_csv(path, nrows=0)
    except EOFError as exc:   # a gzip cut short: what it is cannot be read, say so rather than "not a table"
        raise ConfigError(f"{path}: cannot read as CSV: {exc} (a truncated file?)") from None
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return SILICON_COLUMNS <= set(head.columns)


def read_silicon(path: Path, systems: set[str] | None = None) -> tuple[list[Run], list[tuple[str, str]]]:
    """The replayable runs of a silicon-sample table (of `systems` only, when given), and the
    skipped rows as (id, reason)."""
    try:
        df = pd.read_csv(path)
    except (OSError, EOFError, ValueError, pd.errors.ParserError) as exc:   # EOFError: a gzip cut short
        raise ConfigError(f"{path}: cannot read as CSV: {str(exc).splitlines()[0]}") from None
    for col in SILICON_NUMERIC & set(df.columns):   # text where a number belongs: NaN, which _unreplayable names
        df[col] = pd.to_numeric(df[col], errors="coerce")
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
        quant = row.gemm_quant_mode if isinstance(row.gemm_quant_mode, str) else None
        runs.append(Run(rid, row.system, row.backend, row.model_path, int(row.isl), int(row.osl), int(row.batch_size),
                        int(row.tp_size), quant,
                        {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": ttft + tpot * (int(row.osl) - 1)},
                        range_ratio=client_ratio(rid), token_budget=aic_token_budget(row),
                        sampling=silicon_sampling(rid, row.backend, row.model_path),
                        deployment=silicon_deployment(rid)))
    return runs, skipped


def aic_token_budget(row) -> int | None:
    """max_num_tokens of a TensorRT-LLM run of aiconfigurator's own collection (ids without a date; every
    TRT-LLM row of the H100 sample, TensorRT-LLM 1.0.0rc3 mostly): aiconfigurator launches its aggregated
    TRT-LLM workers with max_num_tokens = batch size + isl + 1500 and chunked prefill off
    (aiconfigurator generator/backends/trtllm.py, `agg_cfg["max_num_tokens"] = agg_cfg["bs"] + isl + 1500`).
    None for other engines and for InferenceX's rows (their engine's default)."""
    if row.backend != "trtllm" or client_ratio(str(row.id)) is not None:
        return None
    return int(row.batch_size) + int(row.isl) + 1500


def _positive(value: float) -> bool:
    """Finite and above zero: read_silicon has made the numeric columns numbers, text where one belongs NaN."""
    return bool(np.isfinite(value) and value > 0)


def _unreplayable(row) -> str:
    if row.mode != "agg":
        return "disaggregated serving (prefill and decode workers) is not replayed"
    quant = {q for q in (row.gemm_quant_mode, getattr(row, "moe_quant_mode", None)) if isinstance(q, str)}
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
    missing = [c for c in ("isl", "osl", "silicon_ttft_ms", "silicon_tpot_ms") if not _positive(getattr(row, c))]
    if missing:   # a row cut short (a truncated file) or written without its measurement
        return f"no positive {', '.join(missing)} (a truncated or incomplete row)"
    if isinstance(row.gemm_quant_mode, str) and row.gemm_quant_mode != "fp8":
        return f"GEMM quantization {row.gemm_quant_mode} not replayed"
    if (pd.notna(row.pp_size) and row.pp_size > 1) or (pd.notna(row.attention_dp_size) and row.attention_dp_size > 1):
        return "pipeline stages or attention data parallelism"
    return ""


def read_json(path: Path) -> object:
    """The parsed file, or one line naming it when it is missing, unreadable or not JSON."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        return json.loads(data)
    except ValueError as exc:   # JSONDecodeError, or UnicodeDecodeError for a binary file
        raise ConfigError(f"{path}: not JSON ({str(exc).splitlines()[0]})") from None


def _known(model: str) -> str:
    """The model a benchmark log was served with, as run_file takes it: a name of the replayed tables (MODELS),
    a model preset, or a config.json / model YAML (made absolute); else the one-line error."""
    if model in MODELS or model in preset_names():
        return model
    if Path(model).is_file():
        load_model(str(Path(model).resolve()))   # a file that is no model says so here, once
        return str(Path(model).resolve())
    raise ConfigError(f"--model {model}: not a model of the replayed tables ({', '.join(MODELS)}), a model preset "
                      "(`sim model list`) or a config.json path")


def logged_model(d: object) -> str | None:
    """The model a benchmark JSON names: vLLM's `model_id`, genai-perf's `input_config.model`, aiperf's
    `input_config.endpoint.model_names` (the first); None where it names none."""
    if not isinstance(d, dict):
        return None
    cfg = d.get("input_config") if isinstance(d.get("input_config"), dict) else {}
    endpoint = cfg.get("endpoint") if isinstance(cfg.get("endpoint"), dict) else {}
    for name in (d.get("model_id"), cfg.get("model"), endpoint.get("model_names")):
        name = name[0] if isinstance(name, list) and name else name
        if isinstance(name, str) and name:
            return name
    return None


# vLLM benchmark_serving's --backend names the server it drove (benchmarks/backend_request_func.py
# ASYNC_REQUEST_FUNCS); the engine-specific ones say which engine served the run, the OpenAI ones do not.
LOGGED_ENGINES = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm"}


def logged_engine(d: object) -> str | None:
    """The engine a vLLM benchmark result names by its `backend`, where it names one."""
    return LOGGED_ENGINES.get(d.get("backend")) if isinstance(d, dict) and isinstance(d.get("backend"), str) else None


def read_bench_json(path: Path, gpu: str, engine: str, model: str) -> Run:
    """A benchmark result JSON, genai-perf's or aiperf's, or vLLM benchmark_serving's, told apart by their keys."""
    d = read_json(path)
    if isinstance(d, dict) and ({"input_config", "records", "time_to_first_token"} & d.keys()):
        return read_genai_perf(path, gpu, engine, model, d)
    return read_vllm_bench(path, gpu, engine, model, d)


_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


# A metric's key in each layout: genai-perf's export and aiperf's (which mirrors it at the top level,
# aiperf/common/models/export_models.py JsonExportData) name it by its long tag; aiperf's documented "records"
# layout (docs/tutorials/export-levels: `records.ttft`) by its tag there.
_METRIC_KEYS = {"time_to_first_token": ("time_to_first_token", "ttft"), "inter_token_latency": ("inter_token_latency",),
                "input_sequence_length": ("input_sequence_length",), "output_sequence_length": ("output_sequence_length",),
                "request_latency": ("request_latency",), "request_throughput": ("request_throughput",),
                "request_count": ("request_count",)}


def _metrics(d: dict) -> dict[str, dict]:
    """Each metric of a genai-perf or aiperf summary by its genai-perf name, where present with an avg."""
    table = d["records"] if isinstance(d.get("records"), dict) else d
    out = {}
    for name, keys in _METRIC_KEYS.items():
        for k in keys:
            if isinstance(table.get(k), dict) and table[k].get("avg") is not None:
                out[name] = table[k]
                break
    return out


def _load_settings(d: dict) -> dict:
    """The run's load arguments: genai-perf's `input_config` holds them flat, aiperf's under `loadgen`
    (its UserConfig dump: aiperf/common/config/user_config.py)."""
    cfg = d.get("input_config") if isinstance(d.get("input_config"), dict) else {}
    return cfg["loadgen"] if isinstance(cfg.get("loadgen"), dict) else cfg


def read_genai_perf(path: Path, gpu: str, engine: str, model: str, d: dict | None = None) -> Run:
    """A genai-perf profile_export_genai_perf.json or an aiperf profile_export_aiperf.json as one closed-loop
    run: its concurrency, the mean input and output lengths, request_count requests when recorded.
    Warm-up: aiperf runs `--warmup-request-count` as a phase of its own and waits for every warm-up
    response before the profiling phase starts its N clients at once (aiperf/timing/credit_issuing_strategy.py
    `_execute_phases`, "Wait for the credits to be returned before continuing to the next phase"), so the
    measured requests are request_count sends from an idle engine, ramp included: replayed so."""
    d = read_json(path) if d is None else d
    if not isinstance(d, dict):
        raise ConfigError(f"{path}: not a genai-perf or aiperf profile export (a JSON object is expected)")
    m = _metrics(d)
    need = ("time_to_first_token", "inter_token_latency", "input_sequence_length", "output_sequence_length")
    missing = [k for k in need if k not in m]
    if missing:
        raise ConfigError(f"{path}: not a genai-perf or aiperf profile export ({', '.join(missing)} missing, "
                          "each with an avg; a non-streaming run has no TTFT)")
    load = _load_settings(d)
    if load.get("request_rate") is not None:
        raise ConfigError(f"{path}: input_config request_rate {load['request_rate']}: a rate-driven run is not a "
                          "closed loop; only concurrency-mode runs are replayed")
    if not load.get("concurrency"):
        raise ConfigError(f"{path}: input_config.concurrency missing (aiperf: input_config.loadgen.concurrency): "
                          "only concurrency-mode runs are replayed")

    def avg(key: str) -> float:   # a finite number >= 0, else one line naming it
        value = m[key]["avg"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
            raise ConfigError(f"{path}: {key}.avg {value!r}: expected a finite number >= 0")
        return float(value)

    def seconds(key: str) -> float:
        unit = m[key].get("unit", "ms")
        if unit not in _SECONDS:
            raise ConfigError(f"{path}: {key}.unit {unit!r}: expected one of {', '.join(_SECONDS)}")
        return avg(key) * _SECONDS[unit]

    def count(key: str, value: Any) -> int:
        whole = isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value) and value == int(value)
        if not whole or value < 1:
            raise ConfigError(f"{path}: input_config {key} {value!r}: expected a whole number >= 1")
        return int(value)

    def length(key: str) -> int:   # a mean length of tokens: at least one
        if avg(key) < 0.5:
            raise ConfigError(f"{path}: {key}.avg {m[key]['avg']!r}: no tokens")
        return round(avg(key))
    measured = {"ttft_s": seconds("time_to_first_token"), "tpot_s": seconds("inter_token_latency")}
    if "request_latency" in m:
        measured["e2e_s"] = seconds("request_latency")
    if "request_throughput" in m:
        measured["req_s"] = avg("request_throughput")
    model = _known(model)
    n = load.get("request_count") or (m["request_count"]["avg"] if "request_count" in m else None)
    return Run(path.stem, gpu, engine, model, length("input_sequence_length"), length("output_sequence_length"),
               count("concurrency", load["concurrency"]), measured=measured,
               num_requests=count("request_count", n) if n else None)


Count = Annotated[StrictInt, Field(ge=0)]


class VllmResult(BaseModel):
    """The keys of a benchmark_serving result this reader takes, checked (its other keys are ignored)."""
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    source: str = ""
    mean_ttft_ms: Annotated[float, Field(ge=0)]
    mean_tpot_ms: Annotated[float, Field(ge=0)]
    mean_e2el_ms: Annotated[float, Field(ge=0)] | None = None
    request_throughput: Annotated[float, Field(ge=0)] | None = None
    request_rate: Annotated[float, Field(gt=0)] | None = None   # None: "inf", every request at once
    burstiness: Annotated[float, Field(gt=0)] | None = None
    max_concurrency: Annotated[StrictInt, Field(gt=0)] | None = None
    completed: Count | None = None
    total_input_tokens: Count | None = None
    total_output_tokens: Count | None = None
    input_lens: list[Count] | None = None
    output_lens: list[Count] | None = None
    errors: list[str | None] | None = None

    @field_validator("request_rate", mode="before")
    @classmethod
    def _infinite(cls, v: Any) -> Any:   # vLLM writes "inf" (json reads Infinity as a float)
        return None if v == "inf" or (isinstance(v, float) and v == float("inf")) else v

    @model_validator(mode="after")
    def _one_per_request(self) -> "VllmResult":
        counts = {k: len(v) for k in ("input_lens", "output_lens", "errors") if (v := getattr(self, k)) is not None}
        if len(set(counts.values())) > 1:
            raise ValueError(f"one entry per request expected: {', '.join(f'{k} {n}' for k, n in counts.items())}")
        return self


def read_vllm_bench(path: Path, gpu: str, engine: str, model: str, d: object = None) -> Run:
    """A vLLM benchmark_serving / `vllm bench serve` result JSON as one run (vllm-project/vllm
    benchmarks/serve.py `result_json`): a closed loop of its max_concurrency clients, or open-loop arrivals at
    its request_rate (Poisson, gamma gaps at a burstiness other than 1); with --save-detailed, each completed
    request's lengths in the order sent (`errors` names the failed ones, left out), without it the means
    total_input_tokens / completed and total_output_tokens / completed."""
    d = read_json(path) if d is None else d
    need = ("mean_ttft_ms", "mean_tpot_ms")
    if not isinstance(d, dict) or any(k not in d for k in need):
        raise ConfigError(f"{path}: not a vLLM benchmark_serving result (expected keys {', '.join(need)})")
    v = validate_mapping(VllmResult, d, str(path), "a vLLM benchmark_serving result")
    detailed = v.input_lens is not None and v.output_lens is not None
    if not detailed and not (v.completed and v.total_input_tokens is not None and v.total_output_tokens is not None):
        raise ConfigError(f"{path}: neither input_lens/output_lens (--save-detailed) nor completed, "
                          "total_input_tokens and total_output_tokens: the lengths served are unknown")
    rate = v.request_rate
    if rate is not None and v.max_concurrency:
        raise ConfigError(f"{path}: request_rate {rate:g} with max_concurrency {v.max_concurrency}: arrivals "
                          "capped by a client count are neither open- nor closed-loop; not replayed")
    measured = {"ttft_s": v.mean_ttft_ms / 1e3, "tpot_s": v.mean_tpot_ms / 1e3}
    if v.mean_e2el_ms is not None:
        measured["e2e_s"] = v.mean_e2el_ms / 1e3
    if v.request_throughput is not None:
        measured["req_s"] = v.request_throughput
    model = _known(model)
    lengths = None
    if detailed:
        errors = v.errors or [""] * len(v.input_lens)
        ok = [i for i, (e, o) in enumerate(zip(errors, v.output_lens)) if not e and o > 0]
        if not ok:
            raise ConfigError(f"{path}: no request completed (errors, or no output tokens)")
        if any(v.input_lens[i] == 0 for i in ok):
            raise ConfigError(f"{path}: input_lens: a completed request of 0 prompt tokens")
        lengths = (tuple(v.input_lens[i] for i in ok), tuple(v.output_lens[i] for i in ok))
        n, isl, osl = len(ok), float(np.mean(lengths[0])), float(np.mean(lengths[1]))
        if len(set(lengths[0])) == 1 and len(set(lengths[1])) == 1:
            lengths = None   # one length for all: the engine's output spread stands in for its drift (ENGINES)
    else:
        n = v.completed
        isl, osl = v.total_input_tokens / n, v.total_output_tokens / n
    return Run(path.stem, gpu, engine, model, max(1, int(round(isl))), max(1, int(round(osl))), v.max_concurrency or n,
               measured=measured, num_requests=n, rate=rate, burstiness=v.burstiness or 1.0, lengths=lengths)

"""Measured serving runs from benchmark clients' result files, for sim.apps.serve.validate (`sim validate-serving
FILE.json`): one run per file, its GPU from --hw, its engine and model from the command line or the file.

* vLLM `benchmark_serving.py --save-result` / `vllm bench serve` JSON (vllm-project/vllm benchmarks/serve.py,
  `result_json`): `request_rate`, `burstiness`, `max_concurrency`, means `mean_ttft_ms`, `mean_tpot_ms`,
  `mean_e2el_ms`, `request_throughput`, `completed`, `total_input_tokens`, `total_output_tokens`, and with
  --save-detailed `input_lens`, `output_lens`, `errors` per request; `model_id` and `backend` name the model and
  (for vllm, sglang, tensorrt-llm) the engine, the GPU comes from --hw.
* genai-perf `profile_export_genai_perf.json` (triton-inference-server/perf_analyzer
  genai-perf/genai_perf/export_data/json_exporter.py: the statistics of each metric, then the run's
  arguments under `input_config`): per metric a mapping with `unit` and `avg` (`time_to_first_token`,
  `inter_token_latency` (per request (latency - TTFT) / (output tokens - 1), i.e. TPOT),
  `request_latency`, `request_throughput`, `input_sequence_length`, `output_sequence_length`), and
  `input_config.concurrency`; the model from `input_config.model`, the engine and GPU from the command line.
* aiperf `profile_export_aiperf.json` (ai-dynamo/aiperf, genai-perf's successor, which aiconfigurator's
  eval runs since October 2025): the same metrics at the top level (aiperf/common/models/export_models.py, "designed to
  mimic the structure of the GenAI-Perf JSON output") or under `records` with TTFT as `ttft` (its export-level
  docs), the load arguments under `input_config.loadgen`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from sim.apps.serve.validate import MODELS, Run
from sim.core.errors import ConfigError
from sim.core.model import load_model, preset_names
from sim.core.schema import validate_mapping


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
    except RecursionError:   # json recurses per nesting level
        raise ConfigError(f"{path}: JSON nested too deeply") from None


def _known(model: str, named_by: str = "--model") -> str:
    """The model a benchmark log was served with, as run_file takes it: a name of the replayed tables (MODELS),
    a model preset, or a config.json / model YAML (made absolute); else the one-line error, naming where the name
    came from (`named_by`: the --model flag, or the file that names it)."""
    if model in MODELS or model in preset_names():
        return model
    if Path(model).is_file():
        load_model(str(Path(model).resolve()))   # a file that is no model says so here, once
        return str(Path(model).resolve())
    # vLLM logs the path it served from (model_id "/models/Llama-3.1-8B-Instruct"): a folder named as one of the
    # tables' models is that model (a serving trial had to give --model for it)
    named = [m for m in MODELS if m.split("/")[-1] == Path(model).name]
    if len(named) == 1 and "/" in model:
        return named[0]
    hint = "" if named_by == "--model" else "; give --model"
    raise ConfigError(f"{named_by} {model}: not a model of the replayed tables ({', '.join(MODELS)}), a model preset "
                      f"(`sim model list`) or a config.json path{hint}")


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


VLLM_KEYS = ("mean_ttft_ms", "mean_tpot_ms")


def bench_kind(path: Path, d: object) -> str:
    """Which benchmark wrote the JSON `d`, told apart by its keys: "genai-perf" (genai-perf's or aiperf's export)
    or "vllm" (benchmark_serving); anything else is refused here, before any flag is asked for (a serving trial:
    `[]` was first told to give --engine)."""
    if isinstance(d, dict) and ({"input_config", "records", "time_to_first_token"} & d.keys()):
        return "genai-perf"
    if isinstance(d, dict) and all(k in d for k in VLLM_KEYS):
        return "vllm"
    if isinstance(d, dict) and any(k in d for k in VLLM_KEYS):   # a vLLM result short of a mean: say which
        missing = [k for k in VLLM_KEYS if k not in d]
        raise ConfigError(f"{path}: a vLLM benchmark_serving result without {', '.join(missing)} (a run with no "
                          "streamed token, or the key cut out)")
    raise ConfigError(f"{path}: not a benchmark result: neither a vLLM benchmark_serving JSON (keys "
                      f"{', '.join(VLLM_KEYS)}) nor a genai-perf / aiperf export (input_config, records or "
                      "time_to_first_token)")


def read_bench_json(path: Path, gpu: str, engine: str, model: str, named_by: str = "--model",
                    d: object = None) -> Run:
    """A benchmark result JSON, genai-perf's or aiperf's, or vLLM benchmark_serving's, told apart by their keys
    (`d`: the file's data where the caller read it already)."""
    d = read_json(path) if d is None else d
    if bench_kind(path, d) == "genai-perf":
        return read_genai_perf(path, gpu, engine, model, d, named_by)
    return read_vllm_bench(path, gpu, engine, model, d, named_by)


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


def _closed_loop(path: Path, d: dict) -> dict:
    """The load settings of a concurrency-mode run; a rate-driven run, or one without a client count, refused."""
    load = _load_settings(d)
    if load.get("request_rate") is not None:
        raise ConfigError(f"{path}: input_config request_rate {load['request_rate']}: a rate-driven run is not a "
                          "closed loop; only concurrency-mode runs are replayed")
    if load.get("concurrency") is None:   # 0 is a bad count (_count says so), not a missing one
        raise ConfigError(f"{path}: input_config.concurrency missing (aiperf: input_config.loadgen.concurrency): "
                          "only concurrency-mode runs are replayed")
    return load


def _count(path: Path, where: str, value: Any) -> int:
    """A count of clients or requests: a whole number >= 1, else one line naming `where` it was read."""
    whole = isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value) and value == int(value)
    if not whole or value < 1:
        raise ConfigError(f"{path}: {where} {value!r}: expected a whole number >= 1")
    return int(value)


def read_genai_perf(path: Path, gpu: str, engine: str, model: str, d: dict | None = None,
                    named_by: str = "--model") -> Run:
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
    load = _closed_loop(path, d)

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

    def length(key: str) -> int:   # a mean length of tokens: at least one
        if avg(key) < 0.5:
            raise ConfigError(f"{path}: {key}.avg {m[key]['avg']!r}: no tokens")
        return round(avg(key))
    measured = {"ttft_s": seconds("time_to_first_token"), "tpot_s": seconds("inter_token_latency")}
    if not measured["ttft_s"]:   # a streamed first token takes time: 0 is no measurement (the error would vanish)
        raise ConfigError(f"{path}: time_to_first_token.avg 0: expected a positive time")
    if "request_latency" in m:
        measured["e2e_s"] = seconds("request_latency")
    if "request_throughput" in m:
        measured["req_s"] = avg("request_throughput")
    model = _known(model, named_by)
    # The requests measured, where the export counts them, before the count the load generator was given: aiperf's
    # loadgen.request_count is the setting (its docs' example export: 1,000,000,000 set, 200 measured), and a run
    # cancelled early measured fewer (a serving trial replayed 1,600 for 160 measured)
    n, where = ((m["request_count"]["avg"], "request_count.avg") if "request_count" in m else
                (load.get("request_count"), "input_config request_count"))
    return Run(path.stem, gpu, engine, model, length("input_sequence_length"), length("output_sequence_length"),
               _count(path, "input_config concurrency", load["concurrency"]), measured=measured,
               num_requests=_count(path, where, n) if n is not None else None)


Count = Annotated[StrictInt, Field(ge=0)]


class VllmResult(BaseModel):
    """The keys of a benchmark_serving result this reader takes, checked (its other keys are ignored)."""
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    source: str = ""
    mean_ttft_ms: Annotated[float, Field(gt=0)]   # a streamed first token takes time: 0 is no measurement
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


def read_vllm_bench(path: Path, gpu: str, engine: str, model: str, d: object = None,
                    named_by: str = "--model") -> Run:
    """A vLLM benchmark_serving / `vllm bench serve` result JSON as one run (vllm-project/vllm
    benchmarks/serve.py `result_json`): a closed loop of its max_concurrency clients, or open-loop arrivals at
    its request_rate (Poisson, gamma gaps at a burstiness other than 1); with --save-detailed, each completed
    request's lengths in the order sent (`errors` names the failed ones, left out), without it the means
    total_input_tokens / completed and total_output_tokens / completed."""
    d = read_json(path) if d is None else d
    if not isinstance(d, dict) or any(k not in d for k in VLLM_KEYS):
        raise ConfigError(f"{path}: not a vLLM benchmark_serving result (expected keys {', '.join(VLLM_KEYS)})")
    v = validate_mapping(VllmResult, d, str(path), "a vLLM benchmark_serving result")
    detailed = v.input_lens is not None and v.output_lens is not None
    if not detailed and v.completed == 0:
        raise ConfigError(f"{path}: completed 0: no request completed")
    if not detailed and v.completed and 0 in (v.total_input_tokens, v.total_output_tokens):   # a mean of 0 tokens
        which = "total_input_tokens" if v.total_input_tokens == 0 else "total_output_tokens"
        raise ConfigError(f"{path}: {which} 0 over {v.completed} completed requests: no tokens to replay")
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
    model = _known(model, named_by)
    lengths = None
    if detailed:
        errors = v.errors or [""] * len(v.input_lens)
        ok = [i for i, (e, o) in enumerate(zip(errors, v.output_lens)) if not e and o > 0]
        if not ok:
            raise ConfigError(f"{path}: no request completed (errors, or no output tokens)")
        # vLLM's calculate_metrics counts every request without an error, an empty output among them (a review)
        succeeded = sum(1 for e in errors if not e)
        if v.completed is not None and v.completed != succeeded:
            raise ConfigError(f"{path}: completed {v.completed}, but {succeeded} of its {len(v.input_lens)} requests "
                              "have no error: the per-request lists and the count disagree")
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

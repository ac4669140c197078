"""The serving file: a workload YAML (model, formats, flash_attention) with a
`serving:` section. Every field is checked here; an error names the file and the
key (`serving.arrivals.poisson.rate: Input should be greater than 0`).

Engine settings keep vLLM's meaning (vllm.config / EngineArgs): `block_size`
tokens per KV block, `max_num_seqs` sequences per iteration,
`max_num_batched_tokens` tokens per iteration, `gpu_memory_utilization` the share
of device memory the engine may use for weights, activations and KV blocks,
`watermark` the share of blocks kept free when admitting a prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Field, StrictInt, model_validator

from sim.apps.serve.disagg_spec import Disaggregated
from sim.core.errors import ConfigError
from sim.core.schema import Strict, read_yaml, validate_mapping
from sim.core.workload import Workload

Pos = Annotated[float, Field(gt=0)]
PosInt = Annotated[StrictInt, Field(gt=0)]   # `true` or "4" are refused, not read as 1 or 4
# A coefficient of variation: beyond these a stream is constant or one burst, and cv**2 overflows floats.
CV = Annotated[float, Field(ge=1e-3, le=1e3)]


class _Count(Strict):
    """How long the stream runs: a number of requests or a duration (seconds)."""
    num_requests: PosInt | None = None
    duration_s: Pos | None = None
    seed: int = 0
    # A longer stream takes hours to simulate and gigabytes to hold: refused with its count unless raised here.
    max_requests: PosInt = 1_000_000

    @model_validator(mode="after")
    def _one(self):
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s")
        return self


class Poisson(_Count):
    process: Literal["poisson"]
    rate: Pos                    # requests per second


class Gamma(_Count):
    process: Literal["gamma"]
    rate: Pos
    cv: CV                       # coefficient of variation of the gaps (1 = Poisson)


class Constant(_Count):
    process: Literal["constant"]
    rate: Pos


class Burst(_Count):
    process: Literal["burst"]
    size: PosInt                 # requests arriving together
    interval_s: Annotated[float, Field(ge=0)] = 0.0   # between bursts (0: one burst)


class TraceArrivals(Strict):
    process: Literal["trace"]
    num_requests: PosInt | None = None   # the first requests of the trace only


class Closed(Strict):
    """N clients, each sending its next request when the previous returns (sim.apps.serve.closed)."""
    process: Literal["closed"]
    concurrency: PosInt          # clients, each with one request in flight
    num_requests: PosInt         # sent in all (the first `concurrency` at t = 0)
    think_time_s: Annotated[float, Field(ge=0)] = 0.0       # a client's pause between a reply and its next send
    warmup_requests: Annotated[StrictInt, Field(ge=0)] = 0  # the first sends, left out of benchmark_figures
    seed: int = 0
    max_requests: PosInt = 1_000_000


Arrivals = Annotated[Union[Poisson, Gamma, Constant, Burst, TraceArrivals, Closed], Field(discriminator="process")]


class _Clip(Strict):
    min: PosInt = 1
    max: PosInt = 1_000_000


class Fixed(_Clip):
    dist: Literal["fixed"]
    value: PosInt


class Uniform(_Clip):
    dist: Literal["uniform"]
    low: PosInt
    high: PosInt


class Normal(_Clip):
    dist: Literal["normal"]
    mean: Pos
    std: Annotated[float, Field(ge=0)]


class LogNormal(_Clip):
    dist: Literal["lognormal"]
    mean: Pos                    # of the lengths themselves, not of their logarithm
    cv: CV


class Zipf(_Clip):
    dist: Literal["zipf"]
    a: Annotated[float, Field(gt=1)]


class Histogram(_Clip):
    dist: Literal["histogram"]
    path: str                    # CSV with columns length,count (relative to the serving file)


Length = Annotated[Union[Fixed, Uniform, Normal, LogNormal, Zipf, Histogram], Field(discriminator="dist")]


class Lengths(Strict):
    prompt: Length
    output: Length


class Trace(Strict):
    path: str                    # relative to the serving file
    format: Literal["auto", "azure", "mooncake", "plain", "llmservingsim"] = "auto"
    time_scale: Pos = 1.0        # arrival times are multiplied by this (0.5: replay twice as fast)
    hash_block_tokens: PosInt = 512   # tokens per hash id (Mooncake: 512; token-id traces: the block size)


class _Blocks(Strict):
    max_num_seqs: PosInt = 256
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    block_size: PosInt = 16
    num_gpu_blocks_override: PosInt | None = None   # KV blocks as given, not sized from memory (as vLLM's)


class _Paged(_Blocks):
    watermark: Annotated[float, Field(ge=0, lt=1)] = 0.01
    preemption: Literal["recompute", "swap"] = "recompute"
    swap_bandwidth_bytes_per_s: Pos | None = None   # default: the preset's host link


class Static(Strict):
    kind: Literal["static"]
    batch_size: PosInt = 8       # FasterTransformer-style: a batch runs to its longest output
    max_wait_s: Annotated[float, Field(ge=0)] = 0.0   # wait this long for a full batch
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9


class Orca(Strict):
    kind: Literal["orca"]
    max_num_seqs: PosInt = 256
    max_num_batched_tokens: PosInt = 8192
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    max_model_len: PosInt | None = None   # KV reserved per request (default: the model's context)


class Vllm(_Blocks):
    """vLLM V1 (sim.apps.serve.schedulers_v1): chunked prefill always, no watermark, recompute only."""
    kind: Literal["vllm"]
    max_num_batched_tokens: PosInt = 2048          # vllm/config/scheduler.py DEFAULT_MAX_NUM_BATCHED_TOKENS
    preemption: Literal["recompute"] = "recompute"   # V1 has no swap preemption


class VllmV0(_Paged):
    kind: Literal["vllm-v0"]
    max_num_batched_tokens: PosInt | None = None   # default max(max_model_len, 2048), as vLLM V0


class Sarathi(_Paged):
    kind: Literal["sarathi"]
    max_num_batched_tokens: PosInt = 512           # the token budget per iteration (chunk size)


Scheduler = Annotated[Union[Static, Orca, Vllm, VllmV0, Sarathi], Field(discriminator="kind")]
SCHEDULER_OPTIONS = {name: set(cls.model_fields) for name, cls in
                     (("static", Static), ("orca", Orca), ("vllm", Vllm), ("vllm-v0", VllmV0), ("sarathi", Sarathi))}
PAGED = ("vllm", "vllm-v0", "sarathi")   # the schedulers with a paged KV pool of block_size blocks


class SharedPrefix(Strict):
    tokens: PosInt               # prompt tokens shared within a group
    groups: PosInt = 1           # distinct prefixes, requests spread uniformly over them


class PrefixCaching(Strict):
    enabled: bool = True
    shared_prefix: SharedPrefix | None = None   # generated streams; traces bring hash ids


class Speculative(Strict):
    draft: str | dict[str, Any]  # a model preset, config.json, or inline mapping
    k: PosInt = 4                # tokens proposed per step
    alpha: Annotated[float, Field(ge=0, lt=1)] = 0.7   # per-token acceptance rate


METRICS = ("ttft", "tpot", "tbt", "e2e", "queue")
STATS = ("mean", "p50", "p90", "p99", "max")


class Router(Strict):
    """Data parallelism: `replicas` copies of the instance (default: parallel.dp) behind a router."""
    replicas: PosInt | None = None
    policy: Literal["round_robin", "least_outstanding"] = "round_robin"


class Serving(Strict):
    arrivals: Arrivals
    lengths: Lengths | None = None
    trace: Trace | None = None
    scheduler: Scheduler = Field(default_factory=lambda: Vllm(kind="vllm"))
    prefix_caching: PrefixCaching | None = None
    speculative: Speculative | None = None
    slo: dict[str, Pos] = {}     # e.g. ttft_p90: 0.2, tpot_p90: 0.05 (seconds)
    router: Router | None = None  # sim.apps.serve.router
    disaggregated: Disaggregated | None = None   # sim.apps.serve.disagg

    @model_validator(mode="after")
    def _consistent(self):
        if isinstance(self.arrivals, TraceArrivals) != (self.trace is not None):
            raise ValueError("arrivals.process trace needs a trace section, and a trace section needs it")
        if self.trace is None and self.lengths is None:
            raise ValueError("lengths: required unless the requests come from a trace")
        return self


class ServeFile(Workload):
    serving: Serving


def check_slo(slo: dict[str, float], where: str) -> None:
    for key in slo:
        metric, _, stat = key.partition("_")
        if metric not in METRICS or stat not in STATS:
            raise ConfigError(f"{where}: {key}: unknown SLO metric; use <metric>_<stat> with metric in "
                              f"{', '.join(METRICS)} and stat in {', '.join(STATS)} (e.g. ttft_p90)")


def load_serve_file(path: str | Path, overrides: dict[str, Any] | None = None) -> ServeFile:
    """Read and check a serving file; `overrides` replaces values by dotted path (serving.arrivals.rate)."""
    path = Path(path)
    raw = read_yaml(path)
    if isinstance(raw, dict) and "serving" not in raw:
        raise ConfigError(f"{path}: serving: required key is missing (a serving file is a workload with a serving section)")
    if isinstance(raw, dict):
        _scheduler_option_check(raw, path)
        for key, value in (overrides or {}).items():
            _set(raw, key, value, path)
    return serve_file_from_dict(raw, str(path))


def serve_file_from_dict(raw: Any, source: str) -> ServeFile:
    """A serving file's mapping, checked as load_serve_file checks the file (`source` names it in errors)."""
    if isinstance(raw, dict):
        _scheduler_option_check(raw, source)
    spec = validate_mapping(ServeFile, raw, source, "a mapping of workload fields and a serving section")
    check_slo(spec.serving.slo, f"{source}: serving.slo")
    return spec


def _scheduler_option_check(raw: dict[str, Any], path: Path | str) -> None:
    """A key that belongs to another scheduler gets a message saying so."""
    sched = (raw.get("serving") or {}).get("scheduler") if isinstance(raw.get("serving"), dict) else None
    if not isinstance(sched, dict) or sched.get("kind") not in SCHEDULER_OPTIONS:
        return
    if sched["kind"] == "vllm" and sched.get("preemption") == "swap":
        raise ConfigError(f"{path}: serving.scheduler.preemption: swap: vLLM V1 (kind: vllm) has no swap preemption, "
                          "only recompute; kind: vllm-v0 (or sarathi) supports swap")
    own = SCHEDULER_OPTIONS[sched["kind"]]
    for key in sched:
        if key not in own:
            others = [k for k, opts in SCHEDULER_OPTIONS.items() if key in opts]
            if others:
                raise ConfigError(f"{path}: serving.scheduler.{key}: an option of the {'/'.join(others)} scheduler, "
                                  f"not of {sched['kind']}")


def _set(raw: dict[str, Any], key: str, value: Any, path: Path) -> None:
    """A section the file lacks is added (serving.prefix_caching.enabled=true, serving.slo.ttft_p90=0.2);
    the schema then refuses a key that is no field, naming it."""
    node = raw
    parts = key.split(".")
    for p in parts[:-1]:
        if node.get(p) is None:
            node[p] = {}
        if not isinstance(node[p], dict):
            raise ConfigError(f"{path}: --set {key}: {p} is not a section")
        node = node[p]
    node[parts[-1]] = value


def resolve(spec: ServeFile, rel: str) -> Path:
    """A path in the serving file, relative to the file."""
    p = Path(rel)
    return p if p.is_absolute() else Path(spec.source).parent / p

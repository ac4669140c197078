"""The serving file: a workload YAML (model, formats, flash_attention) with a
`serving:` section. Every field is checked here; an error names the file and the
key (`serving.arrivals.rate: Input should be greater than 0`).

Engine settings keep vLLM's meaning (vllm.config / EngineArgs): `block_size`
tokens per KV block, `max_num_seqs` sequences per iteration,
`max_num_batched_tokens` tokens per iteration, `gpu_memory_utilization` the share
of device memory the engine may use for weights, activations and KV blocks,
`watermark` the share of blocks kept free when admitting a prompt.
"""

from __future__ import annotations

import difflib

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import Field, model_validator

from sim.apps.serve.disagg_spec import Disaggregated
# Re-exported: spec.Poisson, spec.Fixed, ... stay where callers look for them.
from sim.apps.serve.stream_spec import (  # noqa: F401
    CV, Arrivals, Burst, Closed, Constant, Fixed, Gamma, Histogram, Length, Lengths, LogNormal, Normal, Pos, PosInt,
    Poisson, TraceArrivals, Uniform, Zipf)
from sim.core.errors import ConfigError, naming_sets
from sim.core.model import model_path
from sim.core.schema import Strict, read_yaml, validate_mapping
from sim.core.workload import Workload, set_workload_key

# The request stream's schema (arrival processes, length distributions) is sim.apps.serve.stream_spec.


class Trace(Strict):
    path: str                    # relative to the serving file
    format: Literal["auto", "azure", "mooncake", "plain", "distserve", "llmservingsim"] = "auto"
    time_scale: Pos = 1.0        # arrival times are multiplied by this (0.5: replay twice as fast)
    hash_block_tokens: PosInt = 512   # tokens per hash id (Mooncake: 512; token-id traces: the block size)


class SchedulerConfig(Strict):
    """What every scheduler's settings say about it (the traits the engine sizes and builds it by);
    each kind's class overrides what its fields set. Its scheduler is found by class
    (sim.apps.serve.schedulers.SCHEDULERS)."""
    paged: ClassVar[bool] = False            # a paged KV pool of block_size blocks (else one token a block)
    splits_over_groups: ClassVar[bool] = True   # its batches split over attention groups (attention_dp)
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9

    @property
    def max_seqs(self) -> int:
        """Sequences of one iteration at most (sizes the step-cost grid and the profiling pass)."""
        return self.max_num_seqs

    @property
    def token_budget(self) -> int | None:
        """Tokens of one iteration at most; None: no budget of its own."""
        return None

    @property
    def block_tokens(self) -> int:
        return self.block_size if self.paged else 1

    @property
    def context_len(self) -> int | None:
        """KV reserved per request; None: the model's context."""
        return None

    @property
    def blocks_override(self) -> int | None:
        """KV blocks as given rather than sized from memory."""
        return None

    @property
    def reserve_share(self) -> float:
        """Share of the pool kept free when admitting a prompt (vLLM's watermark)."""
        return 0.0

    @property
    def swaps(self) -> bool:
        """Preempted requests' blocks move to host memory (else they are recomputed)."""
        return False


class _Blocks(SchedulerConfig):
    max_num_seqs: PosInt = 256
    block_size: PosInt = 16
    num_gpu_blocks_override: PosInt | None = None   # KV blocks as given, not sized from memory (as vLLM's)
    paged: ClassVar[bool] = True

    @property
    def blocks_override(self) -> int | None:
        return self.num_gpu_blocks_override

    @property
    def token_budget(self) -> int | None:
        return self.max_num_batched_tokens   # each paged kind below sets its own default


class _Paged(_Blocks):
    watermark: Annotated[float, Field(ge=0, lt=1)] = 0.01
    preemption: Literal["recompute", "swap"] = "recompute"
    swap_bandwidth_bytes_per_s: Pos | None = None   # default: the preset's host link

    @property
    def reserve_share(self) -> float:
        return self.watermark

    @property
    def swaps(self) -> bool:
        return self.preemption == "swap"


class Static(SchedulerConfig):
    kind: Literal["static"]
    batch_size: PosInt = 8       # FasterTransformer-style: a batch runs to its longest output
    max_wait_s: Annotated[float, Field(ge=0)] = 0.0   # wait this long for a full batch
    splits_over_groups: ClassVar[bool] = False   # a padded batch runs whole

    @property
    def max_seqs(self) -> int:
        return self.batch_size


class Orca(SchedulerConfig):
    kind: Literal["orca"]
    max_num_seqs: PosInt = 256
    max_num_batched_tokens: PosInt = 8192
    max_model_len: PosInt | None = None   # KV reserved per request (default: the model's context)

    @property
    def context_len(self) -> int | None:
        return self.max_model_len

    @property
    def token_budget(self) -> int | None:
        return self.max_num_batched_tokens


class Vllm(_Blocks):
    """vLLM V1 (sim.apps.serve.schedulers.vllm): chunked prefill always, no watermark, recompute only."""
    kind: Literal["vllm"]
    max_num_batched_tokens: PosInt = 2048          # vllm/config/scheduler.py DEFAULT_MAX_NUM_BATCHED_TOKENS
    preemption: Literal["recompute"] = "recompute"   # V1 has no swap preemption


class VllmV0(_Paged):
    kind: Literal["vllm-v0"]
    max_num_batched_tokens: PosInt | None = None   # default max(max_model_len, 2048), as vLLM V0


class Sarathi(_Paged):
    kind: Literal["sarathi"]
    max_num_batched_tokens: PosInt = 512           # the token budget per iteration (chunk size)


class Sglang(_Blocks):
    """SGLang (sim.apps.serve.schedulers.sglang): prefill batches first, apart from decodes."""
    kind: Literal["sglang"]
    max_num_batched_tokens: PosInt = 8192   # chunked_prefill_size (server_args.py: 8192 on a 60-90 GB GPU)
    preemption: Literal["recompute"] = "recompute"   # retract_decode: back to the waiting queue, recomputed


class Trtllm(_Blocks):
    """TensorRT-LLM (sim.apps.serve.schedulers.trtllm): GUARANTEED_NO_EVICT admission, mixed batches."""
    kind: Literal["trtllm"]
    max_num_batched_tokens: PosInt = 8192   # max_num_tokens (tensorrt_llm/llmapi/llm_args.py)
    enable_chunked_prefill: bool = False    # tensorrt_llm/llmapi/llm_args.py: off by default (prompts run whole)
    preemption: Literal["recompute"] = "recompute"   # never happens: admission reserves every request's KV


SCHEDULER_CONFIGS = (Static, Orca, Vllm, VllmV0, Sarathi, Sglang, Trtllm)
Scheduler = Annotated[Union[SCHEDULER_CONFIGS], Field(discriminator="kind")]
SCHEDULER_OPTIONS = {get_args(cls.model_fields["kind"].annotation)[0]: set(cls.model_fields)
                     for cls in SCHEDULER_CONFIGS}


class SharedPrefix(Strict):
    tokens: PosInt               # prompt tokens shared within a group
    groups: PosInt = 1           # distinct prefixes, requests spread uniformly over them


class PrefixCaching(Strict):
    enabled: bool = True
    shared_prefix: SharedPrefix | None = None   # generated streams; traces bring hash ids


class Speculative(Strict):
    draft: str | dict[str, Any]  # a model preset, config.json, or inline mapping
    k: PosInt = 4                # tokens proposed per step
    alpha: Annotated[float, Field(ge=0, le=1)] = 0.7   # per-token acceptance rate (1: every draft accepted, k + 1 a step)


METRICS = ("ttft", "tpot", "tbt", "e2e", "queue")
STATS = ("mean", "p50", "p90", "p99", "max")


class Router(Strict):
    """Data parallelism: `replicas` copies of the instance (default: parallel.dp) behind a router."""
    replicas: PosInt | None = None
    policy: Literal["round_robin", "least_outstanding", "cache_aware"] = "round_robin"


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
    # What stands between the clients and the engine: its own API server ("direct": vllm serve, trtllm-serve,
    # sglang.launch_server) or NVIDIA Dynamo's frontend and worker ("dynamo"); the stack's
    # engine_overheads.request_delay_s prices each (hw_models.stack.engine_overheads).
    deployment: Literal["direct", "dynamo"] = "direct"

    @model_validator(mode="after")
    def _consistent(self):
        if isinstance(self.arrivals, TraceArrivals) != (self.trace is not None):
            raise ValueError("arrivals.process trace needs a trace section, and a trace section needs it")
        if self.trace is None and self.lengths is None:
            raise ValueError("lengths: required unless the requests come from a trace")
        if self.speculative is not None and isinstance(self.scheduler, Static):
            raise ValueError("speculative: a static batch runs whole padded steps; speculative decoding is modelled "
                             "under the iteration-level schedulers, not kind static")
        if self.prefix_caching is not None and self.prefix_caching.enabled and isinstance(self.scheduler, (Static, Orca)):
            raise ValueError(f"prefix_caching: kind {self.scheduler.kind} keeps no cached blocks (Orca reserves "
                             "max_model_len tokens per request, a static batch runs padded prompts); prefix caching "
                             "is modelled under vllm, vllm-v0, sarathi, sglang and trtllm")
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
        near = difflib.get_close_matches("serving", [k for k in raw if isinstance(k, str)], n=1, cutoff=0.6)
        if near:   # `servng:` had read only "serving: required key is missing" (a serving trial)
            raise ConfigError(f"{path}: {near[0]}: unknown key (did you mean serving?)")
        raise ConfigError(f"{path}: serving: required key is missing (a serving file is a workload with a serving section)")
    if isinstance(raw, dict):
        _scheduler_option_check(raw, path)
        for key, value in (overrides or {}).items():
            set_key(raw, key, value, path)
    with naming_sets(str(path), overrides):
        return serve_file_from_dict(raw, str(path))


def serve_file_from_dict(raw: Any, source: str) -> ServeFile:
    """A serving file's mapping, checked as load_serve_file checks the file (`source` names it in errors)."""
    if isinstance(raw, dict):
        sched = _scheduler_section(raw)
        if isinstance(sched, dict) and "kind" not in sched:
            sched["kind"] = "vllm"   # the default scheduler's (Serving.scheduler), as without the section
        _scheduler_option_check(raw, source)
        disagg = raw["serving"].get("disaggregated") if isinstance(raw.get("serving"), dict) else None
        pools = {f"serving.disaggregated.{k}.": disagg[k] for k in ("prefill", "decode")
                 if isinstance(disagg, dict) and isinstance(disagg.get(k), dict)}
        for key, par in (("", raw.get("parallel")), *((k, pool.get("parallel")) for k, pool in pools.items())):
            if isinstance(par, dict) and par.get("micro_batches", 1) != 1:
                # `sim run` cuts its batch into micro-batches; a serving engine keeps pp batches in flight instead
                raise ConfigError(f"{source}: {key}parallel.micro_batches: {par['micro_batches']}: sim serve cuts each "
                                  "iteration into pp micro-batches, the batches vLLM keeps in flight "
                                  "(docs/parallelism.md); leave micro_batches out")
    spec = validate_mapping(ServeFile, raw, source, "a mapping of workload fields and a serving section")
    check_slo(spec.serving.slo, f"{source}: serving.slo")
    return spec


def _scheduler_section(raw: dict[str, Any]) -> Any:
    """The file's serving.scheduler as written (None where the file has no serving mapping)."""
    return raw["serving"].get("scheduler") if isinstance(raw.get("serving"), dict) else None


def _scheduler_option_check(raw: dict[str, Any], path: Path | str) -> None:
    """A key that belongs to another scheduler gets a message saying so."""
    sched = _scheduler_section(raw)
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


def set_key(raw: dict[str, Any], key: str, value: Any, path: Path | str) -> None:
    """A section the file lacks is added (serving.prefix_caching.enabled=true, serving.slo.ttft_p90=0.2);
    the schema then refuses a key that is no field, naming it."""
    if key.startswith("formats.overrides."):   # an op's glob holds dots (L0.q_proj): one key, set as sim run sets it
        set_workload_key(raw, key, value, str(path))
        return
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


def input_files(spec: ServeFile) -> list[Path]:
    """Every file a serving file makes a run read besides itself: the model's and the
    draft's config, the request trace, length histograms, pools' hardware files. For the
    outputs' guard (no output may replace one) and a sweep's content keys."""
    srv = spec.serving
    paths = [model_path(spec.model, spec.source or None)]
    if srv.speculative is not None:
        paths.append(model_path(srv.speculative.draft, spec.source or None))
    if srv.trace is not None:
        paths.append(resolve(spec, srv.trace.path))
    for length in (srv.lengths.prompt, srv.lengths.output) if srv.lengths else ():
        if isinstance(length, Histogram):
            paths.append(resolve(spec, length.path))
    if srv.disaggregated is not None:
        paths += [Path(p.hw) for p in (srv.disaggregated.prefill, srv.disaggregated.decode) if Path(p.hw).is_file()]
    return [p for p in paths if p is not None]

"""Software stacks: how an inference engine runs the lowered op graph as kernels.

The lowering (sim.core.lowering) says what an LLM step computes; a stack says how a
given engine launches it (hw_models/stack/presets/<name>.yaml, one cited file per stack):

* per op kind (optionally per op name, e.g. `act` vs `attn_residual`, both
  `elementwise`), how many kernels it launches (eager torch runs an RMSNorm as 8),
  how many bytes they move relative to the op's one-pass bytes (`traffic`: the
  intermediates those kernels write and read back), their bandwidth efficiency
  relative to the unit's streaming efficiency (`memory_efficiency`), and the
  device-side floor each kernel pays (`floor_s`). `kernels: 0` means fused into a
  neighbour: the op's traffic is paid, no floor, no launch.
* optionally `serial`: one of its kernels walks values one after another (a warp
  per softmax row, a thread over every index of a small embedding lookup): time
  max(compute, memory, per_s x values per thread) (hw_models.stack.row_kernels); the warp
  softmax's `block:` costs the rows past its limit as PyTorch's block-per-row kernel
  (per_s x values + two block reductions from cited cycle latencies, BlockReduce);
* the host launch cost per kernel and whether CUDA graphs hide it;
* which quantized GEMM kernel family it runs per weight format
  (hw_models.stack.kernel_families);
* which GEMMs it runs as one (`fuse`: QKV, gate+up; hw_models.stack.fuse);
* for a serving engine, its host work per iteration and whether the GPU waits for
  it (`step_overhead`, hw_models.stack.step_overhead); plain torch has none.

A stack file may name a `base` stack: its figures, with the file's laid on (a
figure the base lacks cannot be replaced, as for a preset's `stacks:`).

No stack (the workload's `stack:` unset) costs every op as one kernel with the
preset's launch overhead, as before: existing results are unchanged.
"""

from __future__ import annotations

from functools import cache
from typing import Literal
from pathlib import Path

from pydantic import Field, StrictBool, StrictInt, field_validator, model_validator

from hw_models.network.collectives import ALGORITHMS
from hw_models.stack.attention_kernels import AttentionRule, family_names, select_family   # fitted file: loaded on first use
from hw_models.stack.kernel_families import FAMILIES
from hw_models.stack.row_kernels import (BLOCK_REDUCTIONS, WARP, block_reduce_cycles, block_row, rows_of,
                                   serial_values, softmax_block_threads)
from hw_models.machine import Machine, known_op_kinds
from hw_models.stack.engine_overheads import EngineOverheads
from hw_models.stack.sampler import PenaltyPass, TopPSampler
from hw_models.stack.step_overhead import StepOverhead
from sim.core.errors import ConfigError
from sim.core.formats import get_format
from sim.core.graph import Op
from sim.core.lowering import EXPERT_GEMMS
from sim.core.schema import Quantity, Strict, read_yaml, validate_mapping

STACK_DIR = Path(__file__).parent / "presets"


def is_expert_gemm(op: Op) -> bool:
    """Whether `op` is a MoE layer's routed experts (Stack.quant_gemm_experts prices them)."""
    return op.base_name in EXPERT_GEMMS


class BlockReduce(Strict):
    """The block softmax of rows past the warp kernel's limit (hw_models.stack.row_kernels.block_row):
    latencies of the steps its two block-wide reductions add, in SM clock cycles."""

    clock_hz: Quantity = Field(gt=0)              # SM clock the cycles run at
    shfl_cycles: float = Field(gt=0)              # warp shuffle, issue to dependent use
    alu_cycles: float = Field(ge=0)               # the max / add that consumes it
    smem_load_cycles: float = Field(gt=0)
    smem_store_cycles: float = Field(gt=0)
    barrier_cycles: float = Field(gt=0)           # __syncthreads: fixed part ...
    barrier_cycles_per_warp: float = Field(ge=0)  # ... plus this per warp of the block

    def time_s(self, row: int) -> float:
        warps = softmax_block_threads(row) // WARP
        one = block_reduce_cycles(warps, self.shfl_cycles, self.alu_cycles, self.smem_load_cycles,
                                  self.smem_store_cycles, self.barrier_cycles, self.barrier_cycles_per_warp)
        return BLOCK_REDUCTIONS * one / self.clock_hz


class Serial(Strict):
    """A kernel bound by the values one thread walks in sequence (hw_models.stack.row_kernels)."""

    work: Literal["index_rows", "warp_row", "row_reduce", "token_block", "rope_block"]   # hw_models.stack.row_kernels
    per_s: Quantity = Field(gt=0)                 # one step of the walk
    block: BlockReduce | None = None              # warp_row only: rows past it run a block per row

    @model_validator(mode="after")
    def _block(self) -> "Serial":
        if self.block is not None and self.work != "warp_row":
            raise ValueError(f"block: only the warp_row softmax has a block regime, not {self.work}")
        return self

    def time_s(self, op: Op) -> float:
        walk = self.per_s * serial_values(self.work, op)
        if self.block is None:
            return walk
        _, row = rows_of(op)
        values = block_row(1, row)   # the block kernel's walk: same step, then its reductions
        return walk + (self.per_s * values + self.block.time_s(row) if values else 0.0)


class KernelSpec(Strict):
    """How a stack runs one op kind (or one named op): see the module doc."""

    kernels: StrictInt = Field(default=1, ge=0)
    traffic: float = Field(default=1.0, gt=0)
    memory_efficiency: float = Field(default=1.0, gt=0, le=1.5)   # x the unit's memory_max (>1: cache reuse)
    floor_s: Quantity | None = Field(default=None, ge=0)          # None: the stack's floor_s
    fused_into: str | None = None                                 # documentation of kernels: 0
    serial: Serial | None = None                                  # a latency-bound walk, charged max'd with memory
    note: str = ""
    prefill: "KernelSpec | None" = None                           # override for ops with q_len > 1

    @model_validator(mode="after")
    def _fused(self) -> "KernelSpec":
        if self.kernels == 0 and not self.fused_into:
            raise ValueError("kernels: 0 needs fused_into (the op it is fused into)")
        return self



def _known_attention_family(v: str | None) -> str | None:
    if v is not None and v not in family_names():
        raise ValueError(f"unknown attention kernel family {v!r}; families: {', '.join(family_names())}")
    return v

def _known_families(v: dict[str, str]) -> dict[str, str]:
    """{weight format: kernel family} with the formats by their canonical names."""
    out = {}
    for fmt, family in v.items():
        try:
            name = get_format(fmt).name
        except ConfigError as exc:
            raise ValueError(f"{fmt}: {exc}") from None
        if family not in FAMILIES:
            raise ValueError(f"{fmt}: unknown kernel family {family!r}; families: {', '.join(sorted(FAMILIES))}")
        out[name] = family
    return out


class Stack(Strict):
    name: str
    description: str = ""
    cite: str                                     # where the kernel structure comes from
    host_launch_s: Quantity = Field(ge=0)         # host cost per kernel launch
    graphs: StrictBool = False                    # CUDA graphs replay the step: launches hidden
    # The most tokens a step carries and still replays from a CUDA graph; a larger step runs its ops eagerly (vLLM
    # V1 captures min(max_num_seqs x 2, 512) tokens at most). None: every step replays. Read only by the kernel
    # families' eager call time (hw_models.stack.cost.eager_call); other ops' host launches hide under device time.
    graph_max_tokens: int | None = Field(default=None, gt=0)
    floor_s: Quantity = Field(ge=0)               # device floor per kernel, unless an op gives its own
    ops: dict[str, KernelSpec] = {}               # by op kind
    names: dict[str, KernelSpec] = {}             # by op base name (q_proj, act, ...): overrides the kind
    quant_gemm: dict[str, str] = {}               # weight format -> kernel family
    # weight format -> the family run instead where the unit lacks the native rate quant_gemm's family needs
    # (vLLM: native FP4 GEMMs on Blackwell, Marlin weight-only emulation before it)
    quant_gemm_emulated: dict[str, str] = {}
    # compute capability -> {weight format: family}: where an engine's kernel library builds a different
    # kernel per architecture (sgl-kernel's fp8_scaled_mm: one CUTLASS config on SM 12.x), taken before quant_gemm.
    # A key with a minor version (8.9: Ada) names that SM only; a whole number (12) every minor version of it.
    quant_gemm_by_capability: dict[float, dict[str, str]] = {}
    # weight format -> the family of a GEMM whose activations come in that format too (W8A8 int8: SmoothQuant)
    quant_gemm_w8a8: dict[str, str] = {}
    # weight format -> the family a MoE layer's routed experts (grouped GEMMs) run, taken first (before the
    # capability table and quant_gemm): the engine runs its experts in a fused-MoE kernel of its own, not through
    # the dense Linear quant_gemm's family measured
    quant_gemm_experts: dict[str, str] = {}
    # compute capability -> {weight format: family} of the routed experts where the engine's MoE kernel differs by
    # architecture (vLLM's fused Marlin MoE for MXFP4 on Hopper; Blackwell has native paths), taken first
    quant_gemm_experts_by_capability: dict[float, dict[str, str]] = {}
    fuse: dict[str, list[str]] = {}               # fused GEMM name -> the GEMMs it runs as one (stack_fuse)
    step_overhead: StepOverhead | None = None     # the engine's host work per iteration (None: no engine)
    engine_overheads: EngineOverheads | None = None   # fitted engine terms, async scheduling (hw_models.stack.engine_overheads)
    top_p_sampler: TopPSampler | None = None   # GPU work of a top-p step (hw_models.stack.sampler); None: not modelled
    penalties: PenaltyPass | None = None       # GPU work of a step's repetition/frequency/presence penalties; None: not modelled
    # Under CUDA graphs a kernel the stack says nothing else about (a dense GEMM, an attention kernel
    # without a family) pays this device gap to its predecessor in the replayed graph instead of the
    # preset's host launch overhead (None: the launch overhead, as before; scripts/fit_kernels.py).
    graph_gap_s: Quantity | None = Field(default=None, ge=0)
    # Under CUDA graphs, the gap each kernel of an op the stack prices by its kernels (ops, names) leaves to the
    # next graph node: those floors are fitted on kernel device times, which exclude it (None: no gap).
    node_gap_s: Quantity | None = Field(default=None, ge=0)
    attention: str | None = None                  # attention kernel family (stack/attention_kernels.yaml)
    # the engine's backend choice by GPU and KV format, first match wins over `attention` (vLLM: FlashInfer
    # where FlashAttention has no FP8 KV; SGLang: FA3 on Hopper, FlashInfer elsewhere)
    attention_rules: list[AttentionRule] = []
    all_reduce: str | None = None                 # the collective algorithm it runs (network.collectives)
    # The measurement condition of per-op tables that replay ONE layer in a CUDA graph: a KV cache that fits
    # the L2 is re-read from it (hw_models.stack.attention_kernels). Set only by sim.apps.trace.aic; a stack
    # file leaves it off, since in serving every other layer evicts the cache.
    single_layer_replay: StrictBool = False
    # Under it, the aiconfigurator collector whose GEMM loop set the weight copies replayed (trtllm, vllm,
    # sglang: hw_models.stack.cost.replay_weight_copies); None: TensorRT-LLM's rule. Set only by sim.apps.trace.aic.
    replay_collector: str | None = None
    # The per-op table timed its calls without a CUDA graph (aiconfigurator's vLLM block-FP8 GEMM rows): a family's
    # eager call time binds (hw_models.stack.cost.eager_call). Set only by sim.apps.trace.aic.
    eager_replay: StrictBool = False
    base: str = ""                                # the stack this file's figures were laid on
    source: str = Field(default="", exclude=True)   # the file it was read from

    @field_validator("ops")
    @classmethod
    def _kinds(cls, v: dict[str, KernelSpec]) -> dict[str, KernelSpec]:
        return known_op_kinds(v)

    @field_validator("attention")
    @classmethod
    def _attention(cls, v: str | None) -> str | None:
        return _known_attention_family(v)

    @field_validator("attention_rules")
    @classmethod
    def _attention_rules(cls, v: list[AttentionRule]) -> list[AttentionRule]:
        for r in v:
            _known_attention_family(r.family)
        return v

    @property
    def runs_fused_attention(self) -> bool:
        """Whether the engine's attention is always one fused kernel: a default family (a serving engine). Torch's
        stacks have rules only (cuDNN SDPA where a model asks for it): eager attention is theirs to run too."""
        return self.attention is not None

    def attention_family(self, capability: float | None, kv_fmt: str | None) -> str | None:
        """The attention kernel family this engine runs on a GPU of that compute capability."""
        return select_family(self.attention, self.attention_rules, capability, kv_fmt)

    @field_validator("all_reduce")
    @classmethod
    def _all_reduce(cls, v: str | None) -> str | None:
        if v is not None and v not in ALGORITHMS:
            raise ValueError(f"unknown collective algorithm {v!r}; algorithms: {', '.join(ALGORITHMS)}")
        return v

    @field_validator("fuse")
    @classmethod
    def _fuse(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        seen: set[str] = set()
        for group, members in v.items():
            if len(members) < 2 or len(set(members)) != len(members):
                raise ValueError(f"{group}: needs two or more distinct GEMMs, got {members}")
            if seen & set(members):
                raise ValueError(f"{group}: {', '.join(sorted(seen & set(members)))} already fused in another group")
            seen |= set(members)
        return v

    @field_validator("quant_gemm", "quant_gemm_emulated", "quant_gemm_w8a8", "quant_gemm_experts")
    @classmethod
    def _families(cls, v: dict[str, str]) -> dict[str, str]:
        return _known_families(v)

    @field_validator("quant_gemm_by_capability", "quant_gemm_experts_by_capability")
    @classmethod
    def _families_by_capability(cls, v: dict[float, dict[str, str]]) -> dict[float, dict[str, str]]:
        return {major: _known_families(fams) for major, fams in v.items()}

    def spec(self, op: Op) -> KernelSpec | None:
        """The kernel spec of `op` under this stack (its name's, else its kind's), the
        prefill override applied for attention-shaped ops with q_len > 1."""
        s = self.names.get(op.base_name) or self.ops.get(op.kind)
        if s is not None and s.prefill is not None and op.dims.get("q_len", 1) > 1:
            return s.prefill
        return s

    def floor_of(self, spec: KernelSpec) -> float:
        """The device time `spec`'s kernels pay beyond their work: each one's floor, and under CUDA graphs
        each one's gap to the next node."""
        gap = self.node_gap_s if self.graphs and self.node_gap_s is not None else 0.0
        return spec.kernels * ((self.floor_s if spec.floor_s is None else spec.floor_s) + gap)

    def host_s(self, op: Op) -> float:
        """Host time to launch `op`'s kernels (0 under CUDA graphs)."""
        if self.graphs:
            return 0.0
        s = self.spec(op)
        return (1 if s is None else s.kernels) * self.host_launch_s

    def family(self, weight_fmt: str | None, capability: float | None = None, experts: bool = False) -> str | None:
        """The kernel family of a GEMM with weights in `weight_fmt` on a GPU of that compute capability;
        `experts`: a MoE layer's routed experts, which quant_gemm_experts names first."""
        if not weight_fmt:
            return None
        name = get_format(weight_fmt).name
        if experts and (hit := _by_capability(self.quant_gemm_experts_by_capability, capability).get(name)):
            return hit
        if experts and name in self.quant_gemm_experts:
            return self.quant_gemm_experts[name]
        return _by_capability(self.quant_gemm_by_capability, capability).get(name) or self.quant_gemm.get(name)

    def emulated_family(self, weight_fmt: str) -> str | None:
        return self.quant_gemm_emulated.get(get_format(weight_fmt).name)

    def w8a8_family(self, fmt: str) -> str | None:
        """The family of a GEMM with weights and activations both in `fmt`, else None."""
        return self.quant_gemm_w8a8.get(get_format(fmt).name)


def _by_capability(table: dict[float, dict[str, str]], capability: float | None) -> dict[str, str]:
    """A capability table's entry: the exact SM (8.9) first, else its whole major version (12)."""
    return (table.get(capability) or table.get(int(capability), {})) if capability is not None else {}


def stack_names() -> list[str]:
    return sorted(p.stem for p in STACK_DIR.glob("*.yaml"))


def _path(spec: str) -> Path:
    named = STACK_DIR / f"{spec}.yaml"
    if named.is_file():
        return named
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    raise ConfigError(f"stack: unknown software stack {spec!r}; stacks: {', '.join(stack_names())} "
                      "(or a path to a stack YAML file)")


@cache
def _load(path: Path, mtime_ns: int) -> Stack:
    raw = read_yaml(path)
    if isinstance(raw, dict) and raw.get("base"):
        try:
            base = load_stack(str(raw["base"]))
        except ConfigError as exc:
            raise ConfigError(f"{path}: base: {exc}") from None
        if base.base:
            raise ConfigError(f"{path}: base: {raw['base']} has a base of its own; one level only")
        raw = _merge(base.model_dump(exclude_none=True, exclude={"base"}), raw, str(path))
    return validate_mapping(Stack, raw, str(path), "a mapping of stack fields")


def _merge(base: dict, over: dict, where: str) -> dict:
    """`over` laid onto `base` key by key; a spec `over` names that `base` lacks is an error."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict):
            if not isinstance(base.get(key), dict):
                raise ConfigError(f"{where}.{key}: the stack has no {key!r} to replace figures of")
            out[key] = _merge(base[key], value, f"{where}.{key}")
        else:
            out[key] = value
    return out


def stack_for(spec: str | None, machine: Machine) -> Stack | None:
    """The stack `spec` as it runs on `machine`: the stack file's figures with those the
    machine's preset fitted for it (`stacks: {name: ...}`, sim calibrate --stack) laid on."""
    stack = load_stack(spec)
    if stack is None or stack.name not in machine.stacks:
        return stack
    where = f"{machine.source or machine.name}: stacks.{stack.name}"
    over = machine.stacks[stack.name]
    if not isinstance(over, dict):
        raise ConfigError(f"{where}: a mapping of stack fields")
    data = _merge(stack.model_dump(exclude_none=True), over, where)
    return validate_mapping(Stack, data, where, "a mapping of stack fields").model_copy(
        update={"source": stack.source})


def load_stack(spec: str | None) -> Stack | None:
    """A stack by name (hw_models/stack/presets) or path; None for None (the preset's one-kernel costing)."""
    if spec is None:
        return None
    path = _path(spec)
    return _load(path, path.stat().st_mtime_ns)

"""The `pim:` section of a PIM preset: the geometry of processing-in-memory
stacks, validated here (the core Machine schema keeps the section free-form).

Hierarchy (shared/reference/hardware.md §4): stacks -> pseudo-channels ->
banks (in bank groups), with one PIM unit per bank, per bank pair, per bank
group or per pseudo-channel on the buffer die (the AttAcc placements). Each
unit is a SIMD MAC array fed by one column access (`column_bytes`) per PIM
clock from the row buffer of one of its banks. Internal bandwidth follows from
row-buffer streaming: a row of `row_bytes` streams in row_bytes/column_bytes
PIM cycles, then the bank pays `row_open_s` (tRP + tRCD) to open the next row;
a unit that serves several banks ping-pongs between them, so the row opening
of one bank hides behind the streaming of the others (PIMSimulator's GEMV
alternates even and odd banks, `src/tests/PIMKernel.cpp: executeGemv`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from pydantic import Field, StrictBool, StrictInt, ValidationError, field_validator, model_validator

from hw_models.power import JPerByte, JPerFlop
from sim.core.errors import ConfigError
from sim.core.formats import get_format
from sim.core.schema import Quantity, Strict, validation_error
from sim.core.workload import Workload

Placement = Literal["bank", "bank_pair", "bank_group", "buffer_die"]


class PimConfig(Strict):
    tier: str = "hbm"                               # memory tier whose stacks carry PIM units
    stacks: StrictInt = Field(gt=0)
    pseudo_channels_per_stack: StrictInt = Field(gt=0)  # PIM-enabled pseudo-channels per stack
    banks_per_pseudo_channel: StrictInt = Field(gt=0)
    bank_groups_per_pseudo_channel: StrictInt = Field(default=4, gt=0)
    placement: Placement = "bank_pair"
    units_per_pseudo_channel: StrictInt = Field(gt=0)
    simd_lanes: StrictInt = Field(gt=0)             # MAC lanes per unit
    clock_hz: Quantity = Field(gt=0)                # PIM unit clock: one column access per cycle
    column_bytes: StrictInt = Field(gt=0)           # bytes one column access delivers to a unit
    row_bytes: Quantity = Field(gt=0)               # DRAM row (page) per bank
    row_open_s: Quantity = Field(ge=0)              # tRP + tRCD: close one row, open the next
    formats: tuple[str, ...] = ("fp16",)            # formats the MAC lanes compute in (canonical names: _formats)
    mode_switch_s: Quantity = Field(ge=0)           # one transition host mode <-> PIM mode
    dual_row_buffer: StrictBool = False             # NeuPIMs: host and PIM accesses run concurrently
    partial_sums_per_output: StrictInt = Field(default=1, gt=0)  # values read back per output (lanes not reduced in-unit)
    softmax: Literal["host", "buffer_die"] = "host"  # where exp/max/sum run
    activation_functions: StrictBool = False        # LUT activations in memory (GDDR6-AiM)
    kv_placement: Literal["head", "request"] = "head"  # KV granule mapped to one stack
    energy_internal_j_per_byte: JPerByte  # bank -> PIM unit, no I/O (external: the tier's)
    # The MAC lanes' arithmetic (issue 33): an fp16 multiply 1.1 pJ + add 0.4 pJ at 45 nm (Horowitz, "Computing's
    # energy problem", ISSCC 2014) = 0.75 pJ per FLOP. No PIM MAC energy is published; DRAM-process logic is
    # slower and leakier than a logic process, so this is a lower bound (the report also prints 3x as an upper).
    energy_j_per_flop: JPerFlop = 0.75e-12
    max_rows: StrictInt = Field(default=16, gt=0)   # skinny-GEMM limit: more input rows stay on the host
    # Decode sub-batch interleaving (NeuPIMs): the batch runs as this many independent op chains
    # so one chain's attention on PIM overlaps another's FC on the host. 1: one chain (serial).
    sub_batches: StrictInt = Field(default=1, gt=0)
    # Decode head-group pipelining (AttAcc --pipeopt): each layer's attention block runs as this
    # many slices of heads, so PIM attends one slice while the host projects another. 1: off.
    head_groups: StrictInt = Field(default=1, gt=0)
    # Split every decode GEMM between host and PIM by output columns, in proportion to their
    # predicted speeds, where that beats placing it whole (AttAcc --ffopt). Needs dual_row_buffer:
    # host and PIM read the banks at once.
    gemm_sharing: StrictBool = False
    # Bytes of a stack that its PIM units reach: the dies that carry them, where a stack mixes dies with and
    # without (Aquabolt-XL: four 4 Gb PIM dies beside four 8 Gb plain ones). None: every die. What the PIM-placed
    # ops read beyond it lies in the plain dies and runs on the host (hw_models/pim/reach.py).
    pim_capacity_bytes_per_stack: Quantity | None = Field(default=None, gt=0)
    # What the PIM stacks can run: "any" op the policy places there, or "attention" alone where they hold only the
    # KV cache and the weights sit in memory without PIM units (AttAcc: the GPUs hold the weights and run the FC
    # layers). A workload's `auto` then means attention_only; a policy that asks for FC on PIM is refused.
    computes: Literal["any", "attention"] = "any"

    @field_validator("formats", mode="after")
    @classmethod
    def _formats(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        """Each name as the ops carry it (an alias, `half` or `FP16`, resolves; an unknown one is refused): a
        typo had switched PIM off without a word (a hardware designer's trial)."""
        try:
            return tuple(get_format(name).name for name in v)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _geometry(self) -> "PimConfig":
        banks, units, groups = self.banks_per_pseudo_channel, self.units_per_pseudo_channel, self.bank_groups_per_pseudo_channel
        if banks % groups:
            raise ValueError(f"bank_groups_per_pseudo_channel: {groups} bank groups do not divide {banks} banks")
        if banks % units:
            raise ValueError(f"units_per_pseudo_channel: {units} PIM units do not divide "
                             f"{banks} banks per pseudo-channel")
        expected = {"bank": banks, "bank_pair": banks // 2, "bank_group": groups, "buffer_die": 1}[self.placement]
        if units != expected:
            raise ValueError(f"units_per_pseudo_channel: placement {self.placement} with {banks} banks "
                             f"in {groups} groups means {expected} units per pseudo-channel, not {units}")
        if self.sub_batches > 1 and (self.head_groups > 1 or self.gemm_sharing):
            raise ValueError("sub_batches: sub-batch interleaving and AttAcc's overlaps (head_groups, "
                             "gemm_sharing) are alternative schedules; choose one")
        if self.gemm_sharing and not self.dual_row_buffer:
            raise ValueError("gemm_sharing: host and PIM read the same banks at once, which blocked mode "
                             "forbids; set dual_row_buffer: true")
        if self.row_bytes % self.column_bytes:
            raise ValueError(f"row_bytes: a row of {self.row_bytes:g} B is not a whole number of "
                             f"{self.column_bytes} B column accesses")
        return self


@dataclass(frozen=True)
class Geometry:
    """Figures derived from a PimConfig, per stack unless named otherwise (cached: every
    PIM piece of every step asks for them)."""

    cfg: PimConfig
    stack_external_bytes_per_s: float   # pins of one stack (tier bandwidth / stacks)

    @cached_property
    def units_per_stack(self) -> int:
        return self.cfg.pseudo_channels_per_stack * self.cfg.units_per_pseudo_channel

    @cached_property
    def banks_per_unit(self) -> int:
        return self.cfg.banks_per_pseudo_channel // self.cfg.units_per_pseudo_channel

    @cached_property
    def row_stream_s(self) -> float:
        """Time for one unit to stream one row of one bank."""
        return (self.cfg.row_bytes / self.cfg.column_bytes) / self.cfg.clock_hz

    @cached_property
    def exposed_row_open_s(self) -> float:
        """Row opening not hidden behind the unit's other banks' streaming."""
        return max(0.0, self.cfg.row_open_s - (self.banks_per_unit - 1) * self.row_stream_s)

    @cached_property
    def unit_bytes_per_s(self) -> float:
        peak = self.cfg.column_bytes * self.cfg.clock_hz
        return peak * self.row_stream_s / (self.row_stream_s + self.exposed_row_open_s)

    @cached_property
    def internal_bytes_per_s(self) -> float:
        return self.units_per_stack * self.unit_bytes_per_s

    @cached_property
    def flops_per_s(self) -> float:
        """MAC = 2 FLOP per lane per cycle."""
        return self.units_per_stack * self.cfg.simd_lanes * 2 * self.cfg.clock_hz


def load_pim_config(section: dict[str, Any] | None, source: str) -> PimConfig:
    if section is None:
        raise ConfigError(f"{source}: pim: required key is missing (a machine of kind pim needs its geometry)")
    try:
        return PimConfig.model_validate(section)
    except ValidationError as exc:
        raise validation_error(exc, source, prefix="pim", model=PimConfig) from None


PimPolicy = Literal["auto", "attention_only", "fc_and_attention", "none"]
POLICIES: tuple[str, ...] = PimPolicy.__args__


def pim_policy(workload: Workload, cfg: PimConfig | None = None, machine: str = "") -> str:
    """The workload's `pim_policy` (which ops may run in PIM), `auto` when absent, as `cfg`'s stacks can run it
    (PimConfig.computes: an attacc_dgx run of a plain workload had put the FC layers on stacks without weights)."""
    value = workload.section("pim_policy", "auto")
    src = workload.source or workload.name
    if value not in POLICIES:
        raise ConfigError(f"{src}: pim_policy: {value!r} is not one of {', '.join(POLICIES)}")
    if cfg is None or cfg.computes == "any" or value in ("attention_only", "none"):
        return value
    if value == "auto":
        return "attention_only"
    raise ConfigError(f"{src}: pim_policy: {value}: {machine}'s PIM stacks hold the KV cache alone and run "
                      "attention (pim.computes: attention); use attention_only, auto or none")

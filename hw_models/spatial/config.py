"""The `spatial:` section of a spatial-dataflow preset (Groq LPU, Graphcore IPU),
validated here so that errors name the file and the key.

What the core schema already describes is not repeated: the top-level memory
tier of the chip's unit is ONE chip's SRAM (capacity, bandwidth) and the unit is
ONE chip (peak FLOP/s per format, vector rate, power). This section adds what
makes the machine spatial: how many chips, how much SRAM a compiler can really
use, the PE array, the chip-to-chip links and their topology, and where the KV
cache lives.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, StrictInt, ValidationError, field_validator

from hw_models.machine import Machine
from hw_models.spatial.pe_array import PEArray
from sim.core.errors import ConfigError
from sim.core.schema import Quantity, Strict, validation_error


class PEMode(Strict):
    """The PE array's geometry in another number format, where the hardware
    regroups its multipliers: Groq's MXM runs four 320x320 int8 arrays or two
    160x320 fp16 ones (ISCA 2022). In a mode, one operand row streams per
    clock cycle, as in the native format."""

    rows: StrictInt = Field(gt=0)
    cols: StrictInt = Field(gt=0)
    arrays: StrictInt = Field(default=1, gt=0)


class PEArrayConfig(Strict):
    rows: StrictInt = Field(gt=0)
    cols: StrictInt = Field(gt=0)
    dataflow: Literal["ws", "os", "is"] = "ws"
    clock_hz: Quantity = Field(gt=0)
    arrays: StrictInt = Field(default=1, gt=0)  # identical arrays (planes) sharing a GEMM's folds
    format: str                            # the format whose peak rate (units.*.peak_flops_per_s) the arrays deliver
    # Per-format geometry (rows, cols, arrays) where the hardware documents one.
    # A format with neither a mode nor the array's own format runs on the native
    # geometry at 1/ratio of its MACs per cycle (ratio = native peak / format peak).
    modes: dict[str, PEMode] = Field(default_factory=dict)
    # True: folds stream back to back (the next stationary tile installs while the
    # current one streams), so the array fill/drain skew is paid once per GEMM.
    # False: SCALE-Sim's accounting, the skew and tile preload paid on every fold.
    fold_overlap: StrictBool = True
    # With fold_overlap: bytes of stationary operand the chip can install into
    # its arrays per cycle, all arrays together. A fold then costs
    # max(T streamed rows, busy arrays x tile bytes / this). None: installation
    # always hides under streaming (an assumption at small T).
    weight_install_bytes_per_cycle: Quantity | None = Field(default=None, gt=0)

    def array(self) -> PEArray:
        return PEArray(self.rows, self.cols, self.dataflow, self.clock_hz)

    def geometry(self, fmt: str) -> tuple[PEArray, int, bool]:
        """(array, number of arrays, whether it has its own geometry) for a
        GEMM computing in `fmt`; False means the native array is used at a
        reduced MAC rate."""
        mode = self.modes.get(fmt)
        if mode is not None:
            return PEArray(mode.rows, mode.cols, self.dataflow, self.clock_hz), mode.arrays, True
        return self.array(), self.arrays, fmt == self.format


class C2CLinks(Strict):
    count: StrictInt = Field(gt=0)                 # links per chip
    bandwidth_bytes_per_s: Quantity = Field(gt=0)  # per link, per direction
    latency_s: Quantity = Field(default=0.0, ge=0)  # per hop
    # Links bonded between consecutive pipeline stages; None: count // 2 on a
    # chain or ring (half the links face each neighbour), 1 on all_to_all.
    per_hop: StrictInt | None = Field(default=None, gt=0)
    # Share of a link's bytes that is payload: Groq's C2C frames a 320 B vector
    # in 328 B (ISCA 2022, Fig. 11: 97.5%). Divides every transfer's bandwidth.
    payload_fraction: float = Field(default=1.0, gt=0, le=1)
    energy_j_per_byte: Quantity | None = Field(default=None, ge=0)


class SpatialConfig(Strict):
    chips: StrictInt | Literal["auto"] = "auto"  # auto: the fewest that hold the model

    @field_validator("chips", mode="before")
    @classmethod
    def _chips(cls, v):
        """One message for the union, not pydantic's per-branch `chips.int` (an architecture trial's 1.5)."""
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool)):
            return v
        raise ValueError(f"must be a positive integer or auto, got {v!r}")
    usable_fraction: float = Field(default=1.0, gt=0, le=1)  # of each chip's SRAM, for weights+KV+activations
    pe_array: PEArrayConfig
    links: C2CLinks
    topology: Literal["chain", "ring", "all_to_all"] = "ring"
    kv_cache: Literal["sram", "dram"] = "sram"
    dram_tier: str | None = None             # top-level memory tier attached to each chip (IPU Streaming Memory)
    microbatch_size: StrictInt = Field(default=1, gt=0)  # sequences per decode micro-batch
    prefill_chunk_tokens: StrictInt = Field(default=128, gt=0)  # prompt tokens per prefill micro-batch
    # True: the PE array multiplies narrow stored weights (<= 8-bit, per-tensor or
    # per-row scale) against wider activations in the activations' native mode,
    # with no separate dequantization pass on the vector units: the narrow
    # weights stream from SRAM at their own size and are widened as they enter
    # the array (Groq's "TruePoint" numerics). False: the core compute path
    # (hw_models.compute_path.choose) decides, i.e. weight-only quantization is
    # dequantized on the vector units first.
    mixed_precision_matmul: StrictBool = False
    # True: weights the PE array cannot take as stored (block-scaled, below mixed_precision_matmul's reach) are
    # dequantized by the vector units while the array multiplies, one feeding the other on a stream, so a GEMM
    # costs the longer of the two; False: the dequantization pass, then the multiply.
    dequant_overlaps_matmul: StrictBool = False
    # Cycles before a dependent non-GEMM op (vector, attention) can follow: an
    # instruction propagates through the chip's tiles one per cycle (Groq: 20
    # superlanes, 20 cycles; ISCA 2020, T = N + d_func + delta). 0: not modelled.
    op_issue_cycles: StrictInt = Field(default=0, ge=0)
    # Tensor parallelism (hw_models.spatial.tp): chips form groups of this many,
    # the layer pipeline runs over the groups, and each layer is split across
    # the chips of its group (Megatron-style). 1: a pure layer pipeline.
    tensor_parallel: StrictInt = Field(default=1, gt=0)
    # Links each chip bonds to each of its t - 1 group peers (an all-to-all
    # group, as in Groq's fully connected 8-card node). An assumption: the
    # rest of the chip's links carry the pipeline hops (see links_per_hop).
    tensor_parallel_links_per_peer: StrictInt = Field(default=1, gt=0)

    @property
    def group_links(self) -> int:
        """Links per chip taken by its tensor-parallel peers."""
        return (self.tensor_parallel - 1) * self.tensor_parallel_links_per_peer

    @property
    def links_per_hop(self) -> int:
        if self.links.per_hop is not None:
            return self.links.per_hop
        if self.topology == "all_to_all":
            return 1
        # Chain or ring: half of the links not taken by the group face each neighbour.
        return max(1, (self.links.count - self.group_links) // 2)

    @property
    def hop_bandwidth_bytes_per_s(self) -> float:
        return self.links_per_hop * self.link_payload_bytes_per_s

    @property
    def link_payload_bytes_per_s(self) -> float:
        """One link's payload bandwidth per direction, after framing."""
        return self.links.bandwidth_bytes_per_s * self.links.payload_fraction


def spatial_config(machine: Machine) -> SpatialConfig:
    """Validate `machine.section("spatial")` against the machine's tiers and unit."""
    src = machine.source or machine.name
    if machine.section("spatial") is None:
        raise ConfigError(f"{src}: spatial: required key is missing (kind: spatial)")
    try:
        cfg = SpatialConfig.model_validate(machine.section("spatial"))
    except ValidationError as exc:
        raise validation_error(exc, src, prefix="spatial", model=SpatialConfig) from None
    if isinstance(cfg.chips, int) and cfg.chips < 1:
        raise ConfigError(f"{src}: spatial.chips: must be a positive integer or auto, got {cfg.chips}")
    unit = machine.units[machine.main_unit]
    if cfg.pe_array.format not in unit.peak_flops_per_s:
        raise ConfigError(f"{src}: spatial.pe_array.format: {cfg.pe_array.format!r} has no peak rate in "
                          f"units.{machine.main_unit}.peak_flops_per_s ({', '.join(unit.peak_flops_per_s)})")
    for fmt in cfg.pe_array.modes:
        if fmt == cfg.pe_array.format:
            raise ConfigError(f"{src}: spatial.pe_array.modes.{fmt}: is the array's own format; "
                              f"its geometry is spatial.pe_array.rows/cols/arrays")
        if fmt not in unit.peak_flops_per_s:
            raise ConfigError(f"{src}: spatial.pe_array.modes.{fmt}: {fmt!r} has no peak rate in "
                              f"units.{machine.main_unit}.peak_flops_per_s ({', '.join(unit.peak_flops_per_s)})")
    _check_tensor_parallel(cfg, src)
    if cfg.kv_cache == "dram":
        if cfg.dram_tier is None:
            raise ConfigError(f"{src}: spatial.dram_tier: required when spatial.kv_cache is dram")
    if cfg.dram_tier is not None and cfg.dram_tier not in machine.memory:
        raise ConfigError(f"{src}: spatial.dram_tier: no memory tier named {cfg.dram_tier!r}")
    if cfg.dram_tier == machine.device_tier:
        raise ConfigError(f"{src}: spatial.dram_tier: must differ from the SRAM tier {machine.device_tier!r}")
    return cfg


def _check_tensor_parallel(cfg: SpatialConfig, src: str) -> None:
    """An explicit chip count must fill whole groups, and a chip needs links for
    its t - 1 peers plus the pipeline hops (one each way on a chain or ring)."""
    t = cfg.tensor_parallel
    if t == 1:
        return
    if isinstance(cfg.chips, int) and cfg.chips % t:
        raise ConfigError(f"{src}: spatial.chips: {cfg.chips} is not a multiple of spatial.tensor_parallel ({t})")
    hop = cfg.links_per_hop * (1 if cfg.topology == "all_to_all" else 2)
    if cfg.group_links + hop > cfg.links.count:
        raise ConfigError(
            f"{src}: spatial.tensor_parallel_links_per_peer: {t - 1} peers x {cfg.tensor_parallel_links_per_peer} "
            f"link(s) + {hop} for the pipeline hops exceed spatial.links.count ({cfg.links.count})")

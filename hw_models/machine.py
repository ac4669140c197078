"""Hardware description: memory tiers, compute units and links, loaded from
YAML presets through a strict schema.

Kind-specific parts (host offload tiers, PIM geometry, spatial chips) are optional
sections validated by their own hardware-model modules: a preset is one flat, readable file.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import Field, StrictInt, field_validator, model_validator

from hw_models import curves
from hw_models.kinds import KINDS, preset_sections, section_owners
from hw_models.power import MAX_J_PER_FLOP, BoardPower, JPerByte, plausible_joules
from sim.core import graph as g
from sim.core.errors import ConfigError
from sim.core.settings import has_alias, relative, resolve_aliases
from sim.core.formats import get_format
from sim.core.schema import (Quantity, Strict, collect_sections, file_dict, read_yaml, require_file, set_dotted,
                             supported_versions, validate_mapping)

PRESET_DIR = Path(__file__).parent / "presets"


class Tier(Strict):
    capacity_bytes: Quantity = Field(gt=0)
    bandwidth_bytes_per_s: Quantity = Field(gt=0)
    # The datasheet peak where `bandwidth_bytes_per_s` is a measured rate below it (h200: a bf16 sum's 4.13 TB/s of
    # 4.8): the most a fitted streaming kernel may reach (hw_models.stack.attention_kernels; peak_bytes_per_s).
    peak_bandwidth_bytes_per_s: Quantity | None = Field(default=None, gt=0)
    write_bandwidth_bytes_per_s: Quantity | None = Field(default=None, gt=0)
    latency_s: Quantity = Field(default=0.0, ge=0, le=0.1)   # a disk's is ~100 us; past 0.1 s a unit left out
    energy_j_per_byte: JPerByte | None = None

    @property
    def peak_bytes_per_s(self) -> float:
        """The cap of a fitted stream: the datasheet peak, never below the bandwidth (a what-if raises it with it)."""
        return max(self.peak_bandwidth_bytes_per_s or 0.0, self.bandwidth_bytes_per_s)


class KindEfficiency(Strict):
    """Overrides of the unit's efficiency curve for one op kind (sim.core.graph kinds:
    gemm, norm, elementwise, ...). Unset fields keep the unit's value. Fitted by
    `sim calibrate` where one curve cannot serve both tensor-core GEMMs and
    streaming kernels; `overhead_s` replaces the unit's launch_overhead_s for the
    kind (e.g. a split-K GEMM launches a memset and two kernels)."""

    compute_max: float | None = Field(default=None, gt=0, le=1)
    compute_half_flops: float | None = Field(default=None, ge=0)
    memory_max: float | None = Field(default=None, gt=0, le=1)
    memory_half_bytes: float | None = Field(default=None, ge=0)
    overhead_s: Quantity | None = Field(default=None, ge=0)


def known_op_kinds(v: dict) -> dict:
    """A pydantic check of a mapping keyed by op kind (sim.core.graph kinds)."""
    for kind in v:
        if kind not in g.OP_KINDS:
            raise ValueError(f"{kind}: unknown op kind; kinds: {', '.join(g.OP_KINDS)}")
    return v


class Efficiency(Strict):
    """Achieved/peak as a saturating function of op size: eff(x) = max * x / (x + half).
    `half` is the size at which an op gets half of `max`; 0 means always `max`.
    Works on floats and on numpy arrays (calibration evaluates many ops at once).
    `by_kind` optionally overrides the curve per op kind; empty by default.

    Optional GEMM tile/wave quantization (off unless gemm_tile_m/n are set): see
    `gemm_waves`. `parallel_units` is the number of SMs (or cores) tiles run on."""

    # The fields that say what the GPU is, not how efficient it is: a calibrated preset keeps the base's (SMs, clock,
    # the compute capability the stacks pick attention kernels by, its dense GEMM family; sim.apps.trace.calibrate).
    IDENTITY: ClassVar[tuple[str, ...]] = ("parallel_units", "clock_hz", "compute_capability", "dense_gemm")
    compute_max: float = Field(default=1.0, gt=0, le=1)
    compute_half_flops: float = Field(default=0.0, ge=0)
    memory_max: float = Field(default=1.0, gt=0, le=1)
    memory_half_bytes: float = Field(default=0.0, ge=0)
    # The same ramps given as a time: half = ramp_s x rate x max. A fixed half in bytes is a latency of half /
    # (bandwidth x max), which would shrink when a sweep raises the bandwidth; DRAM latency and tile fill do not, so
    # presets meant for "what if the memory were twice as fast" give the ramp in seconds (Little's law).
    compute_ramp_s: float | None = Field(default=None, ge=0)
    memory_ramp_s: float | None = Field(default=None, ge=0)
    parallel_units: StrictInt | None = Field(default=None, gt=0)
    # SM boost clock: on-chip serial work (a kernel's prologue, a split-KV combine) takes cycles, so its
    # time scales as 1 / clock across GPUs (hw_models.stack.attention_kernels); None: not placed.
    clock_hz: Quantity | None = Field(default=None, ge=1e6)
    # CUDA compute capability (9.0 Hopper, 12.0 Blackwell RTX): the engines pick their attention kernels by it
    # (hw_models.stack.attention_kernels.AttentionRule); None: the stack's default family.
    compute_capability: float | None = Field(default=None, gt=0)
    # The kernel family (hw_models/stack/kernel_families_fitted.yaml, fitted per GPU by scripts/fit_kernels.py) that
    # costs this GPU's dense 16-bit GEMMs under a CUDA-graph stack; None: the roofline above with the stack's gap.
    dense_gemm: str | None = None
    gemm_tile_m: StrictInt | None = Field(default=None, gt=0)
    gemm_tile_n: StrictInt | None = Field(default=None, gt=0)
    by_kind: dict[str, KindEfficiency] = {}
    # Optional small-M GEMM class: GEMMs with M <= gemv_max_m take the `gemv` overrides instead of by_kind["gemm"].
    # BLAS libraries run a 1-row product as a matrix-vector kernel (no packing of B), which streams the weights at
    # another rate than the packed GEMM path (on this project's AVX2 CPU, MKL's 8-row sgemm is ~3x slower than the
    # 1-row one). Off (None) unless set.
    gemv_max_m: StrictInt | None = Field(default=None, gt=0)
    gemv: KindEfficiency | None = None

    @model_validator(mode="after")
    def _tiles(self) -> "Efficiency":
        if (self.gemm_tile_m is None) != (self.gemm_tile_n is None):
            raise ValueError("gemm_tile_m and gemm_tile_n: set both or neither")
        if self.gemm_tile_m is not None and self.parallel_units is None:
            raise ValueError("gemm_tile_m/gemm_tile_n need parallel_units (the SM count)")
        if (self.gemv_max_m is None) != (self.gemv is None):
            raise ValueError("gemv_max_m and gemv: set both or neither")
        if self.compute_ramp_s is not None and self.compute_half_flops:
            raise ValueError("compute_ramp_s and compute_half_flops: set one or the other")
        if self.memory_ramp_s is not None and self.memory_half_bytes:
            raise ValueError("memory_ramp_s and memory_half_bytes: set one or the other")
        return self

    def at_rates(self, flops_per_s: float, bytes_per_s: float) -> "Efficiency":
        """The curve with time ramps turned into sizes at these rates (self if none)."""
        update = {}
        if self.compute_ramp_s is not None and not self.compute_half_flops:
            update["compute_half_flops"] = self.compute_ramp_s * flops_per_s * self.compute_max
        if self.memory_ramp_s is not None and not self.memory_half_bytes:
            update["memory_half_bytes"] = self.memory_ramp_s * bytes_per_s * self.memory_max
        return self.model_copy(update=update) if update else self

    def is_gemv(self, kind: str, m: int | None) -> bool:
        """Whether a `kind` op with M = `m` rows takes the small-M (`gemv`) curve."""
        return self.gemv is not None and kind == g.GEMM and m is not None and m <= self.gemv_max_m

    def _override(self, kind: str, m: int | None) -> KindEfficiency | None:
        return self.gemv if self.is_gemv(kind, m) else self.by_kind.get(kind)

    @property
    def tiled(self) -> bool:
        return self.gemm_tile_m is not None

    def gemm_waves(self, m, n, k):
        """Fraction of the SMs' tile throughput that does useful work for an M x N x K GEMM
        (hw_models.curves.gemm_waves; 1.0 when the tile fields are off). Floats or numpy arrays."""
        if not self.tiled:
            return 1.0 if np.ndim(m) == 0 else np.ones(np.shape(m))
        return curves.gemm_waves(m, n, k, self.gemm_tile_m, self.gemm_tile_n, self.parallel_units)

    @field_validator("by_kind")
    @classmethod
    def _known_kinds(cls, v: dict[str, KindEfficiency]) -> dict[str, KindEfficiency]:
        return known_op_kinds(v)

    def compute(self, flops: float) -> float:
        return curves.saturating(flops, self.compute_max, self.compute_half_flops)

    def memory(self, nbytes: float) -> float:
        return curves.saturating(nbytes, self.memory_max, self.memory_half_bytes)

    def for_kind(self, kind: str, m: int | None = None) -> "Efficiency":
        """The curve an op of `kind` gets: the unit's, with that kind's overrides (the `gemv` ones for M <= gemv_max_m)."""
        over = self._override(kind, m)
        if over is None:
            return self
        fields = over.model_dump(exclude_none=True, exclude={"overhead_s"})
        return Efficiency(**{**self.model_dump(exclude={"by_kind", "gemv", "gemv_max_m"}), **fields}) if fields else self

    def overhead_s(self, kind: str, default_s: float, m: int | None = None) -> float:
        over = self._override(kind, m)
        return over.overhead_s if over is not None and over.overhead_s is not None else default_s


class Unit(Strict):
    """A compute unit: a GPU's SMs, a CPU socket, a PIM array, a spatial chip."""

    memory: str                                   # the tier it streams operands from
    peak_flops_per_s: dict[str, Quantity]         # matrix rate per compute format
    vector_flops_per_s: Quantity = Field(gt=0)    # non-matrix ops (norms, softmax, adds)
    launch_overhead_s: Quantity = Field(default=0.0, ge=0, le=0.01)   # a kernel launch past 10 ms: a unit left out
    efficiency: Efficiency = Efficiency()
    power_w: Quantity | None = Field(default=None, gt=0, le=1e5)   # 100 kW: past any unit (attacc_dgx's 8 boards: 3.2 kW)
    # Board power as idle + dynamic (issue 15): with `idle_power_w` set, the unit's energy over a run is idle_power_w
    # x wall time + each op's dynamic energy (FLOPs x energy_j_per_flop of the format it computes in, "vector" for
    # CUDA-core ops, + bytes x its tier's energy_j_per_byte) instead of power_w x busy time (a format without an entry:
    # the largest entry given).
    idle_power_w: Quantity | None = Field(default=None, ge=0)
    energy_j_per_flop: dict[str, Quantity] = {}
    # Issue 33 (hw_models/power.py): power running kernels adds over idle, whatever they compute (clock tree and
    # leakage at boost clock), charged over the unit's busy time; the board power limit (what-if: `--set
    # units.gpu.power_limit_w=400`; default power_w, the TDP) that lowers the SM clock of a step whose average power
    # would exceed it; and an SM clock locked at a share of full (hw_models/clock.py). All only with idle_power_w.
    active_power_w: Quantity = Field(default=0.0, ge=0)
    power_limit_w: Quantity | None = Field(default=None, gt=0)
    sm_clock_fraction: float = Field(default=1.0, gt=0, le=1)
    power_source: str = ""   # what the board-power figures rest on (fitted, or assumed by a rule): the report says it
    boards: StrictInt = Field(default=1, gt=0)   # boards one unit stands for (attacc_dgx: 8 A100s): reports give a board's
    # The on-chip L2 (issue 28). Serving never reads from it: every other layer of a step evicts a layer's
    # KV cache. Only a per-op measurement that replays ONE layer (aiconfigurator's tables: a CUDA graph of
    # one attention call, replayed) re-reads a cache that fits from L2 (hw_models.stack.attention_kernels).
    l2_bytes: Quantity | None = Field(default=None, gt=0)
    l2_bandwidth_bytes_per_s: Quantity | None = Field(default=None, gt=0)

    def board_power(self) -> BoardPower | None:
        """The unit's board-power figures (hw_models.power), None without idle_power_w."""
        if self.idle_power_w is None:
            return None
        return BoardPower(self.idle_power_w, self.active_power_w, self.power_limit_w or self.power_w, self.sm_clock_fraction)

    @model_validator(mode="after")
    def _power_limit(self) -> "Unit":
        what = (f"power_limit_w {self.power_limit_w:g} W" if self.power_limit_w is not None else
                f"sm_clock_fraction {self.sm_clock_fraction:g}" if self.sm_clock_fraction < 1.0 else "")
        if what and self.idle_power_w is None:   # it would be silently ignored
            raise ValueError(f"{what}: this unit has no board-power model (idle_power_w, active_power_w, "
                             "energy_j_per_flop: docs/energy.md), so neither a cap nor a clock lock is modelled; "
                             "presets with one: e.g. h100_sxm, h200, b200, a100_80g, a6000")
        limit = self.power_limit_w or self.power_w
        if self.idle_power_w is not None and limit is not None and limit <= self.idle_power_w:
            which = "power_limit_w" if self.power_limit_w else "power_w"
            raise ValueError(f"{which} {limit:g} W: must exceed idle_power_w ({self.idle_power_w:g} W): "
                             "a board cannot be capped below what it draws at rest")
        return self

    def flop_energy_j(self, flops: float, fmt: str) -> float:
        """Dynamic energy of `flops` computed in `fmt` (0 without energy_j_per_flop)."""
        e = self.energy_j_per_flop
        return flops * e.get(fmt, max(e.values())) if e and flops else 0.0

    @field_validator("energy_j_per_flop")
    @classmethod
    def _energy_formats(cls, v: dict[str, float]) -> dict[str, float]:
        out = {}
        for fmt, joules in v.items():
            plausible_joules(fmt, joules, MAX_J_PER_FLOP, "FLOP")
            try:
                out[fmt if fmt == "vector" else get_format(fmt).name] = joules
            except ConfigError as exc:
                raise ValueError(f"{fmt}: {exc}") from None
        return out

    @field_validator("peak_flops_per_s")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        seen: dict[str, str] = {}   # `fp8` beside `fp8_e4m3`: one format given two rates (the faster won silently)
        for fmt, rate in v.items():
            if rate <= 0:
                raise ValueError(f"{fmt}: must be positive")
            try:
                canonical = get_format(fmt).name  # a typo would otherwise surface mid-run without the file's name
            except ConfigError as exc:
                raise ValueError(f"{fmt}: {exc}") from None
            if seen.setdefault(canonical, fmt) != fmt:
                raise ValueError(f"{seen[canonical]} and {fmt} are one format ({canonical}): give its rate once")
        return v


# A link may end at the host system, which a gpu preset does not model as a tier
# (h200's measured PCIe rates): `src: host` or `dst: host`.
HOST_END = "host"


class Link(Strict):
    src: str
    dst: str
    bandwidth_bytes_per_s: Quantity = Field(gt=0)
    latency_s: Quantity = Field(default=0.0, ge=0, le=0.1)
    energy_j_per_byte: JPerByte | None = None


class Machine(Strict):
    version: Annotated[int, supported_versions(1)] = 1   # the preset format; every preset sim ships is 1
    name: str
    kind: str = "gpu"          # one of hw_models.kinds.KINDS
    description: str = ""
    price_usd: float | None = Field(default=None, ge=0)
    memory: dict[str, Tier]
    units: dict[str, Unit]
    links: dict[str, Link] = {}
    # Per software stack (hw_models/stack/presets), the kernel figures `sim calibrate --stack` fitted on this
    # machine: {stack: {ops: {kind: {floor_s, memory_efficiency, prefill: {...}}}, names: {...}}}. They
    # replace the stack file's where this machine runs that stack (hw_models.stack.spec.stack_for checks them).
    stacks: dict[str, dict[str, Any]] = {}
    # Kind-specific sections (offload's `host`, `pim`, `spatial`: hw_models.kinds says which kind owns which key).
    sections: dict[str, Any] = {}
    source: str = Field(default="", exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _collect_sections(cls, raw: Any) -> Any:
        return collect_sections(raw, preset_sections(), drop_none=True)   # `pim: null` is no section

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        if v not in KINDS:
            raise ValueError(f"unknown kind {v!r}; kinds: {', '.join(KINDS)}")
        return v

    def section(self, name: str) -> dict[str, Any] | None:
        """A kind's section of the preset (`pim`, `spatial`, `host`), None when absent."""
        return self.sections.get(name)

    @model_validator(mode="after")
    def _references(self) -> "Machine":
        if not self.units:
            raise ValueError("at least one compute unit is required")
        for section in self.sections:
            kinds = section_owners(section, "preset")
            if self.kind not in kinds:  # it would be silently ignored
                raise ValueError(f"{section}: a `{section}:` section belongs to kind {' or '.join(kinds)}, "
                                 f"not this preset's kind {self.kind!r}")
        for name, unit in self.units.items():
            if unit.memory not in self.memory:
                raise ValueError(f"units.{name}.memory: no memory tier named {unit.memory!r}")
        for name, link in self.links.items():
            for end in (link.src, link.dst):
                if end not in self.memory and end not in self.units and end != HOST_END:
                    raise ValueError(f"links.{name}: no tier or unit named {end!r}")
        return self

    @property
    def main_unit(self) -> str:   # the first unit but offload's host.cpu (sorted keys had made the CPU the device)
        cpu = host.get("cpu") if isinstance(host := self.section("host"), dict) else None
        return next((u for u in self.units if u != cpu), next(iter(self.units)))

    device_tier = property(lambda self: self.units[self.main_unit].memory)   # the main unit's memory tier

    def board_power(self) -> BoardPower | None:   # the main unit's figures (Unit.board_power), None without them
        return self.units[self.main_unit].board_power()


def preset_names() -> list[str]:
    """The shipped hardware presets' names (hw_models/presets/*.yaml; `sim hw list` describes them)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


@cache
def _raw_cached(path: Path, mtime_ns: int, size: int) -> Any:
    return read_yaml(path)


def _raw_preset(path: Path) -> Any:
    """Parsed YAML, cached per process (sweeps load the same preset thousands of times)."""
    st = path.stat()
    return _raw_cached(path, st.st_mtime_ns, st.st_size)


def resolve_path(spec: str | Path) -> Path:
    text = str(spec)
    if (candidate := PRESET_DIR / f"{text}.yaml").is_file():
        return candidate
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or path.exists():
        require_file(path, "hardware file not found", "a hardware YAML file")
        return path
    topo = f" ({text} is a topology: --set parallel.topology={text} and parallel.tp on a device preset)" if (
        PRESET_DIR.parent / "network" / "presets" / f"{text}.yaml").is_file() else ""   # --hw hgx_h200, a trial
    raise ConfigError(f"unknown hardware preset {text!r}{topo}; presets: {', '.join(preset_names())} (see `sim hw list`)")


def raw_machine(spec: str | Path) -> dict[str, Any]:
    """The preset's YAML as a plain dict (a copy), for overrides and sweeps."""
    path = resolve_path(spec)
    raw = _raw_preset(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return copy.deepcopy(raw)


def machine_from_dict(raw: dict[str, Any], source: str) -> Machine:
    """A Machine from a preset's mapping ('3.35 TB/s' parsed), checked: a refusal is one line naming `source`, key."""
    return validate_mapping(Machine, raw, source, "a mapping")


def load_machine(spec: str | Path, overrides: dict[str, Any] | None = None) -> Machine:
    """A preset by name or path; `overrides`: dotted paths (no 'hw.') to values ({"memory.hbm.x_s": 1e-6}, '2x')."""
    if isinstance(spec, Machine) and not overrides:
        return spec
    path = resolve_path(spec)
    raw = raw_machine(path)
    overrides = {k.removeprefix("hw."): v for k, v in (overrides or {}).items()}   # --set's spelling read too (a trial)
    if any(has_alias(key) for key in overrides):
        overrides = {resolve_aliases(key, machine_aliases(machine_from_dict(raw_machine(path), str(path)))): value
                     for key, value in overrides.items()}
    for key, value in overrides.items():   # `2x`: a factor of the preset's own value (sim.core.settings)
        where, own = f"{path} (with hw.{key} overridden)", lambda: file_dict(machine_from_dict(raw_machine(path), str(path)))
        set_dotted(raw, key, relative(value, own, key, where), source=where)
    try:
        return machine_from_dict(raw, str(path))
    except ConfigError:   # name the overrides: the preset alone is valid, the --set / sweep value is not
        if not overrides:
            raise
    return machine_from_dict(raw, f"{path} (with hw.{', hw.'.join(overrides)} overridden)")   # raises, so named


def machine_aliases(machine: Machine) -> dict[str, str]:
    """What `@device` and `@main` stand for in a hardware path (`--set`, sweeps)."""
    return {"@device": machine.device_tier, "@main": machine.main_unit}

"""The host side of an offload machine and the placement policy.

A preset of kind `offload` keeps its GPU in the ordinary `memory`/`units`
sections. Its host tiers are further entries in `memory` (CPU DRAM; the disk,
whose `bandwidth_bytes_per_s` is the sequential read rate and
`write_bandwidth_bytes_per_s` the write rate) and its CPU a further entry in
`units`, so the core schema checks them and the core report lists them. The
free-form `host:` section, validated here (errors name the file and key),
adds the host link (PCIe, or any link by its rate) and says which entries are the host's:

    host:
      pcie: {generation, lanes, efficiency, pageable_factor}   # or bandwidth_bytes_per_s for generation/lanes
      cpu_memory: cpu_memory     # default names
      disk: disk
      cpu: cpu

A policy (workload key `policy`) gives FlexGen's placement fractions
wg/wc/wd (weights), cg/cc/cd (KV cache), hg/hc/hd (activations, "hidden")
on GPU/CPU/disk, plus gpu_batch_size, num_gpu_batches, cpu_attention and
pinned. Values above 1 in a triple are percentages (FlexGen's `--percent`);
otherwise fractions. A triple may give two values, the third is the rest.
Keys left out are chosen by the policy search (hw_models.offload.search).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pydantic import Field, ValidationError, model_validator

from hw_models.machine import Machine, Tier, Unit
from hw_models.power import JPerByte
from sim.core.errors import ConfigError
from sim.core.schema import Quantity, Strict, validation_error
from sim.core.units import whole_percents

# Transfer rate per lane (GT/s) and line-code efficiency, per PCIe generation
# (PCI-SIG base specs; shared/reference/hardware.md §2.1: x16 gives 15.75 / 31.5 / 63 GB/s).
PCIE_GENERATIONS = {3: (8e9, 128 / 130), 4: (16e9, 128 / 130), 5: (32e9, 128 / 130)}


class Pcie(Strict):
    """The host link, full duplex. A PCIe 3.0-5.0 link is given by generation and lanes; any other (PCIe 6.0, CXL,
    NVLink-C2C) by its raw rate per direction, `bandwidth_bytes_per_s`. An explicit rate overrides generation and
    lanes, so a what-if on a shipped preset (`--set hw.host.pcie.bandwidth_bytes_per_s=450e9`, or a sweep axis over
    it) needs no other key; `efficiency` applies to either."""

    generation: int | None = Field(default=None, ge=3, le=5)
    lanes: int = Field(default=16, ge=1, le=16)
    bandwidth_bytes_per_s: Quantity | None = Field(default=None, gt=0)
    # Achieved / theoretical for large pinned copies (hardware.md §2.1: "~80%").
    efficiency: float = Field(default=0.8, gt=0, le=1)
    # Pageable (unpinned) host memory is staged through a pinned bounce buffer:
    # its copies reach this fraction of the pinned rate.
    pageable_factor: float = Field(default=0.5, gt=0, le=1)
    latency_s: Quantity = Field(default=0.0, ge=0)
    # What a byte moved costs in the link itself, both ends' PHYs and controllers (the memories it is read from and
    # written to are priced by their tiers; hw_models.offload.sched); none: not priced
    energy_j_per_byte: JPerByte | None = None

    @model_validator(mode="after")
    def _rate_given(self) -> "Pcie":
        if self.generation is None and self.bandwidth_bytes_per_s is None:
            raise ValueError("the link's rate is missing: give generation (PCIe 3-5, with lanes) or "
                             "bandwidth_bytes_per_s (per direction, e.g. 450 GB/s for NVLink-C2C)")
        return self

    def raw_bytes_per_s(self) -> float:
        """Theoretical rate per direction: the explicit figure, else GT/s x lanes x line code / 8."""
        if self.bandwidth_bytes_per_s is not None:
            return self.bandwidth_bytes_per_s
        rate, code = PCIE_GENERATIONS[self.generation]
        return rate * self.lanes * code / 8

    def achieved_bytes_per_s(self) -> float:
        """Achieved rate per direction (the link is full duplex)."""
        return self.raw_bytes_per_s() * self.efficiency


class HostSpec(Strict):
    """The `host:` section: which tiers and unit are the host's, and the PCIe link."""

    pcie: Pcie
    cpu_memory: str = "cpu_memory"   # names in the machine's `memory` / `units` sections
    disk: str = "disk"
    cpu: str = "cpu"


@dataclass(frozen=True)
class Host:
    """The host side, resolved against the machine."""

    pcie: Pcie
    cpu_memory_name: str
    cpu_memory: Tier
    disk_name: str
    disk: Tier                # bandwidth = sequential read; write_bandwidth = sequential write
    cpu_name: str
    cpu: Unit                 # runs attention over CPU-resident KV when the policy asks

    @property
    def disk_read_bytes_per_s(self) -> float:
        return self.disk.bandwidth_bytes_per_s

    @property
    def disk_write_bytes_per_s(self) -> float:
        return self.disk.write_bandwidth_bytes_per_s or self.disk.bandwidth_bytes_per_s


def host_spec(machine: Machine) -> Host:
    src = machine.source or machine.name
    if machine.section("host") is None:
        raise ConfigError(f"{src}: host: an offload preset needs a host section (pcie, and the names of the "
                          "cpu_memory and disk tiers and the cpu unit)")
    try:
        spec = HostSpec.model_validate(machine.section("host"))
    except ValidationError as exc:
        raise validation_error(exc, src, prefix="host", model=HostSpec) from None
    for key in ("cpu_memory", "disk"):
        name = getattr(spec, key)
        if name not in machine.memory:
            raise ConfigError(f"{src}: host.{key}: no memory tier named {name!r}")
        if name == machine.device_tier:
            raise ConfigError(f"{src}: host.{key}: {name!r} is the GPU's own tier")
    if spec.disk == spec.cpu_memory:   # one tier as both: the "disk" would stream at DRAM speed, sharing its capacity
        raise ConfigError(f"{src}: host.disk: {spec.disk!r} is host.cpu_memory too; the disk needs a tier of its own")
    if spec.cpu not in machine.units:
        raise ConfigError(f"{src}: host.cpu: no unit named {spec.cpu!r}")
    if machine.units[spec.cpu].memory != spec.cpu_memory:
        raise ConfigError(f"{src}: units.{spec.cpu}.memory: the host CPU must stream from {spec.cpu_memory!r}")
    return Host(spec.pcie, spec.cpu_memory, machine.memory[spec.cpu_memory], spec.disk, machine.memory[spec.disk],
                spec.cpu, machine.units[spec.cpu])


# --- placement policy -------------------------------------------------------

TRIPLES = {"weights": ("wg", "wc", "wd"), "kv_cache": ("cg", "cc", "cd"), "activations": ("hg", "hc", "hd")}
_ALL_FRACTIONS = tuple(k for t in TRIPLES.values() for k in t)
_OTHER_KEYS = ("gpu_batch_size", "num_gpu_batches", "cpu_attention", "pinned")


@dataclass(frozen=True)
class Policy:
    """A complete placement: fractions on (GPU, CPU, disk) per role, as fractions."""

    weights: tuple[float, float, float]
    kv_cache: tuple[float, float, float]
    activations: tuple[float, float, float]
    gpu_batch_size: int
    num_gpu_batches: int
    cpu_attention: bool = False
    pinned: bool = True          # host weights in pinned memory (FlexGen's --pin-weight)

    @property
    def kv_off_gpu(self) -> float:
        """The KV cache's share off the GPU (CPU memory and disk): what CPU attention reads, else what the GPU's
        KV buffer streams in."""
        return self.kv_cache[1] + self.kv_cache[2]

    @property
    def block_size(self) -> int:
        return self.gpu_batch_size * self.num_gpu_batches

    def describe(self) -> str:
        pct = lambda t: "/".join(whole_percents(t))  # noqa: E731
        return (f"weights {pct(self.weights)}, KV {pct(self.kv_cache)}, act {pct(self.activations)} (GPU/CPU/disk %); "
                f"GPU batch {self.gpu_batch_size} x {self.num_gpu_batches}"
                f"{self._attention()}{'' if self.pinned else ', pageable weights'}")

    def _attention(self) -> str:
        if not self.cpu_attention:
            return ""
        return ", CPU attention" if self.kv_off_gpu > 0 else ", CPU attention (no effect: no KV cache off the GPU)"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for role, keys in TRIPLES.items():
            out.update(zip(keys, getattr(self, role)))
        return dict(out, gpu_batch_size=self.gpu_batch_size, num_gpu_batches=self.num_gpu_batches,
                    cpu_attention=self.cpu_attention, pinned=self.pinned)


@dataclass(frozen=True)
class PolicySpec:
    """What the workload fixed; None = left to the search."""

    fractions: dict[str, float]               # subset of wg..hd, as fractions
    gpu_batch_size: int | None = None
    num_gpu_batches: int | None = None
    cpu_attention: bool | None = None
    pinned: bool | None = None

    def complete(self) -> bool:
        return (len(self.fractions) == len(_ALL_FRACTIONS) and self.gpu_batch_size is not None
                and self.num_gpu_batches is not None)

    def policy(self) -> Policy:
        f = self.fractions
        return Policy(*(tuple(f[k] for k in keys) for keys in TRIPLES.values()),
                      gpu_batch_size=self.gpu_batch_size, num_gpu_batches=self.num_gpu_batches,
                      cpu_attention=bool(self.cpu_attention), pinned=self.pinned is not False)


def _check_scale(given: dict[str, float], total: float, missing: str, where: str) -> None:
    """A fraction beside a percentage (wg: 0.5, wc: 30) reads as 0.5% and sends the remainder to `missing`,
    most likely not what was meant: refused in one line with both readings, unless all three are given."""
    small = next((k for k, v in given.items() if 0 < v < 1), None)
    if total == 100.0 and small is not None:
        other = next(k for k in given if k != small)
        v = given[small]
        raise ConfigError(f"{where}: policy.{small}: {v:g} beside a percentage ({other}: {given[other]:g}) reads as "
                          f"{v:g}% and leaves {total - sum(given.values()):g}% to {missing}; write {v * 100:g} for "
                          f"{v:.0%}, or give all three to mean {v:g}%")


def _positive_int(raw: dict[str, Any], key: str, where: str) -> int | None:
    v = raw.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ConfigError(f"{where}: policy.{key}: must be a positive integer, got {v!r}")
    return v


def parse_policy(raw: dict[str, Any] | str | None, batch: int, where: str) -> PolicySpec:
    """Validate the workload's `policy`. `where` names the workload file."""
    if raw is None or raw == "search":
        return PolicySpec({})
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: policy: expected a mapping of placement fractions or 'search', got {raw!r}")
    unknown = [k for k in raw if k not in _ALL_FRACTIONS + _OTHER_KEYS]
    if unknown:
        raise ConfigError(f"{where}: policy.{unknown[0]}: unknown key; keys: {', '.join(_ALL_FRACTIONS + _OTHER_KEYS)}")
    fractions: dict[str, float] = {}
    for role, keys in TRIPLES.items():
        given = {k: raw[k] for k in keys if raw.get(k) is not None}
        if not given:
            continue
        for k, v in given.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or math.isnan(v):
                raise ConfigError(f"{where}: policy.{k}: must be a number >= 0, got {v!r}")
        total = 100.0 if any(v > 1 for v in given.values()) else 1.0
        label = "/".join(keys)
        if len(given) == 1:
            raise ConfigError(f"{where}: policy.{next(iter(given))}: give two or three of {label}")
        if len(given) == 2:
            missing = next(k for k in keys if k not in given)
            _check_scale(given, total, missing, where)
            given[missing] = total - sum(given.values())
            if given[missing] < -1e-9:
                raise ConfigError(f"{where}: policy.{label}: {' + '.join(str(raw[k]) for k in keys if k in raw)} "
                                  f"exceeds {total:g}")
        s = sum(given.values())
        if abs(s - total) > 1e-6 * total:
            unit = "percentages sum" if total == 100.0 else "fractions sum"   # cd 90 is a percentage (a trial)
            raise ConfigError(f"{where}: policy.{label}: {unit} to {s:g}, must sum to 1 (or 100 as percentages)")
        fractions.update({k: max(0.0, given[k] / total) for k in keys})
    gbs = _positive_int(raw, "gpu_batch_size", where)
    nb = _positive_int(raw, "num_gpu_batches", where)
    if gbs and nb and gbs * nb != batch:
        raise ConfigError(f"{where}: policy.gpu_batch_size: {gbs} x num_gpu_batches {nb} = {gbs * nb}, "
                          f"but the workload's batch is {batch}")
    if gbs and not nb:
        if batch % gbs:
            raise ConfigError(f"{where}: policy.gpu_batch_size: {gbs} does not divide the workload's batch {batch}")
        nb = batch // gbs
    elif nb and not gbs:
        if batch % nb:
            raise ConfigError(f"{where}: policy.num_gpu_batches: {nb} does not divide the workload's batch {batch}")
        gbs = batch // nb
    flags = {}
    for k in ("cpu_attention", "pinned"):
        v = raw.get(k)
        if v is not None and not isinstance(v, bool):
            raise ConfigError(f"{where}: policy.{k}: must be true or false, got {v!r}")
        flags[k] = v
    return PolicySpec(fractions, gbs, nb, **flags)

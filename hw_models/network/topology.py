"""Topology presets: a node is N devices of one hardware preset joined by an
interconnect; nodes are joined by a fabric. Loaded from
hw_models/network/presets/<name>.yaml through a strict schema.

Interconnect kinds and the bandwidth a ring of `n` ranks in one node gets per rank
and direction (what the alpha-beta collective costs use):
* nvswitch: every device reaches the switch at its full NVLink rate;
* nvlink_pairs: devices are bridged in pairs; a pair talks over NVLink, a ring of
  more than 2 crosses PCIe between pairs and runs at the PCIe rate;
* pcie_switch: every device at its PCIe x16 rate through a PCIe switch.
A ring that spans nodes runs at most at the fabric's rate per device
(NICs x NIC rate / devices per node).
"""

from __future__ import annotations

import math
from functools import cache, cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from hw_models.machine import PRESET_DIR as DEVICE_DIR
from hw_models.power import JPerByte
from sim.core.errors import ConfigError
from sim.core.schema import Quantity, Strict, read_yaml, validate_mapping

PRESET_DIR = Path(__file__).parent / "presets"


class Interconnect(Strict):
    kind: Literal["nvswitch", "nvlink_pairs", "pcie_switch"]
    bandwidth_bytes_per_s: Quantity = Field(gt=0)        # per device, per direction
    latency_s: Quantity = Field(default=0.0, ge=0)       # per message step
    energy_j_per_byte: JPerByte = 0.0   # per byte a device sends (issue 33; 0: not charged)
    pcie_bandwidth_bytes_per_s: Quantity | None = Field(default=None, gt=0)  # between pairs (nvlink_pairs)

    @model_validator(mode="after")
    def _pairs(self) -> "Interconnect":
        if self.kind == "nvlink_pairs" and self.pcie_bandwidth_bytes_per_s is None:
            raise ValueError("pcie_bandwidth_bytes_per_s: needed for nvlink_pairs (traffic between pairs)")
        return self


class Fabric(Strict):
    name: str = "fabric"
    bandwidth_bytes_per_s: Quantity = Field(gt=0)        # per NIC, per direction
    nics_per_node: int = Field(default=1, gt=0)
    latency_s: Quantity = Field(default=0.0, ge=0)


class Fitted(Strict):
    """Alpha-beta parameters fitted to measured NCCL times (scripts/network_fit.py)."""

    latency_s: Quantity = Field(ge=0)
    bandwidth_bytes_per_s: Quantity = Field(gt=0)


class Topology(Strict):
    name: str
    description: str = ""
    device: str                                   # a hardware preset (hw_models/presets), or a hardware YAML's path
    # set by load_topology where `device` was a file: the name is that file's own (a user's new accelerator)
    device_named_by_file: bool = Field(default=False, exclude=True)
    devices_per_node: int = Field(gt=0)
    nodes: int = Field(default=1, gt=0)
    interconnect: Interconnect
    fabric: Fabric | None = None
    # Per collective and group size (ranks in one node), from scripts/network_fit.py.
    fitted: dict[Literal["all_reduce", "send_recv"], dict[int, Fitted]] = {}
    # A node of the same kind of switched NVLink whose measured collectives stand for this one's (its `fitted:` where
    # this file has none, and its engine_collectives.yaml lines): HGX H200's NVLink 4 on third-generation NVSwitches
    # is DGX H100's. Their latencies are taken as measured, their bandwidths at this node's datasheet link over that
    # node's (collectives_bandwidth_scale: 1 for HGX H200, 2 for HGX B200's NVLink 5). Without it an unmeasured node
    # pays the datasheet ring (several times NCCL's small-message time).
    collectives_of: str | None = None
    source: str = Field(default="", exclude=True)

    @property
    def collectives_node(self) -> str:
        """The node whose measured collectives this one's are (itself unless collectives_of says another)."""
        return self.collectives_of or self.name

    @cached_property   # once per topology, as the scale below: each collective costed asks for it
    def ring_fitted(self) -> dict:
        """The fitted ring lines this node runs on: its own `fitted:`, else those of the node it takes its
        collectives of, else none."""
        return self.fitted or (load_topology(self.collectives_of).fitted if self.collectives_of else {})

    @cached_property   # once per topology: it loads the other node (a stat per collective costed, otherwise)
    def collectives_bandwidth_scale(self) -> float:
        """This node's per-device link bandwidth over that of the node whose measured collectives it takes:
        NCCL's and the custom kernels' achieved share of the link is carried across. The node itself counts as
        another where this file changes its shipped preset's link (a what-if of a faster link): a monotonicity
        trial's rtx_pro_6000_x8_pcie at 0.25x and 4x its bandwidth gave the measured lines' time unchanged."""
        return self._link_over(self.collectives_node)

    @cached_property
    def own_fit_bandwidth_scale(self) -> float:
        """The same for this file's own `fitted:` ring: its link over that of the shipped preset of its name (1
        for the preset itself, and for a node of another name: its fits are its own)."""
        return self._link_over(self.name)

    def _link_over(self, node: str) -> float:
        try:
            other = load_topology(node, self.source, "collectives_of")
        except ConfigError:
            if node == self.collectives_of:
                raise
            return 1.0   # no shipped node of this name: nothing measured to carry across
        return self.interconnect.bandwidth_bytes_per_s / other.interconnect.bandwidth_bytes_per_s

    @model_validator(mode="after")
    def _device_and_fabric(self) -> "Topology":
        if not (DEVICE_DIR / f"{self.device}.yaml").is_file() and not self.device_named_by_file:
            raise ValueError(f"device: no hardware preset named {self.device!r} (a preset name, or the path of a "
                             "hardware YAML, relative to this file)")
        if self.nodes > 1 and self.fabric is None:
            raise ValueError("fabric: needed when nodes > 1")
        for kind, fits in self.fitted.items():   # a fit for more ranks than a node holds was accepted (a trial)
            if (big := max(fits, default=0)) > self.devices_per_node:
                raise ValueError(f"fitted.{kind}: a fit for {big} ranks on a node of {self.devices_per_node} devices")
        if self.collectives_of is not None:   # checked here, so `sim hw check` and every run name this file and key
            self._collectives_of_node()
        return self

    def _collectives_of_node(self) -> None:
        """`collectives_of` names a topology whose interconnect is of this one's kind: another kind's measured lines
        (NVSwitch ones on a PCIe switch) would be carried across at the links' ratio alone (a parallelism trial:
        a PCIe node's prefill collectives read 57% faster without a word)."""
        c = self.collectives_of
        path = PRESET_DIR / f"{c}.yaml"
        if not path.is_file():
            raise ValueError(f"collectives_of: unknown topology {c!r}; presets: {', '.join(preset_names())}")
        other = _load(path, path.stat().st_mtime_ns)
        if other.interconnect.kind != self.interconnect.kind:
            raise ValueError(f"collectives_of: {c}'s interconnect is {other.interconnect.kind}, this node's "
                             f"{self.interconnect.kind}: its measured collectives do not stand for these")

    @property
    def devices(self) -> int:
        return self.devices_per_node * self.nodes

    def ring_bandwidth(self, ranks: int) -> float:
        """Per-rank, per-direction bandwidth of a ring over `ranks` devices (placed
        node by node)."""
        ic = self.interconnect
        bw = ic.bandwidth_bytes_per_s
        if ic.kind == "nvlink_pairs" and ranks > 2:
            bw = min(bw, ic.pcie_bandwidth_bytes_per_s)
        if ranks > self.devices_per_node:
            f = self.fabric
            bw = min(bw, f.nics_per_node * f.bandwidth_bytes_per_s / self.devices_per_node)
        return bw

    def step_latency(self, ranks: int) -> float:
        lat = self.interconnect.latency_s
        return max(lat, self.fabric.latency_s) if ranks > self.devices_per_node else lat

    def check_ranks(self, ranks: int, key: str, where: str = "") -> None:
        """`ranks` devices fit the topology; `where`: the file whose `key` asks for them (the topology's own file
        otherwise), so a serving file's plan on a user's topology names the serving file (a parallelism trial)."""
        if ranks > self.devices:
            raise ConfigError(f"{where or self.source}: {key}: {ranks} ranks but {self.name} has {self.devices} devices "
                              f"({self.nodes} node(s) x {self.devices_per_node})"
                              + (f"; more nodes: parallel.nodes: {-(-ranks // self.devices_per_node)}"
                                 if self.fabric is not None and key.startswith("parallel.") else ""))

    def describe(self) -> str:
        """A text drawing of the topology, for `sim hw show`-style output."""
        ic, lines = self.interconnect, []
        boxes = [f"[{self.device}:{i}]" for i in range(self.devices_per_node)]
        link = f"{ic.kind} {ic.bandwidth_bytes_per_s / 1e9:.0f} GB/s per device per direction"
        if ic.kind == "nvlink_pairs":   # NVLink inside a pair (=), PCIe between pairs
            dev = " -pcie- ".join("=".join(boxes[i:i + 2]) for i in range(0, len(boxes), 2))
            link += f"; between pairs PCIe {ic.pcie_bandwidth_bytes_per_s / 1e9:.0f} GB/s"
        else:
            dev = " ".join(boxes)
        for n in range(self.nodes):
            lines.append(f"node {n}: {dev}")
            lines.append(f"        {'=' * min(60, len(dev))} {link}")
        if self.fabric and self.nodes > 1:
            f = self.fabric
            lines.append(f"fabric {f.name}: {f.nics_per_node} x {f.bandwidth_bytes_per_s * 8 / 1e9:.0f} Gb/s "
                         f"per node, {f.latency_s * 1e6:.1f} us")
        for kind, fits in self.fitted.items():
            # alpha is charged a ring step (2(n - 1) of them in an all-reduce): shown as a total, a trial read 2.2 us
            # where a TP 8 all-reduce of 16 KiB pays 14 x 2.23 = 31 us (hw_models.network.collectives.alpha_beta)
            per = "a ring step" if kind != "send_recv" else "once"
            lines.append(f"fitted {kind} (alpha {per}, B): " + ", ".join(
                f"{n} ranks {f.latency_s * 1e6:.1f} us, {f.bandwidth_bytes_per_s / 1e9:.0f} GB/s"
                for n, f in sorted(fits.items())))
        return "\n".join(lines)


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


@cache
def _load(path: Path, mtime_ns: int) -> Topology:
    raw = read_yaml(path)
    device = raw.get("device") if isinstance(raw, dict) else None
    if isinstance(device, str) and not (DEVICE_DIR / f"{device}.yaml").is_file():
        file = (path.parent / device) if not Path(device).is_absolute() else Path(device)
        for candidate in (file, file.with_suffix(".yaml")):
            if candidate.is_file():   # a device of the user's own: the node holds the preset that file names
                own = read_yaml(candidate)
                name = own.get("name") if isinstance(own, dict) else None
                if not isinstance(name, str):
                    raise ConfigError(f"{path}: device: {candidate} has no name: a hardware YAML names its device")
                raw = {**raw, "device": name, "device_named_by_file": True}
                break
    topo = validate_mapping(Topology, raw, str(path), "a topology mapping")
    shipped = PRESET_DIR / f"{topo.name}.yaml"
    if shipped.is_file() and shipped.resolve() != path.resolve():   # a user's file named as a shipped node
        other = _load(shipped, shipped.stat().st_mtime_ns)
        if other.device != topo.device:   # its measured collectives are found by name (a preset author's trial)
            raise ConfigError(f"{path}: name: {topo.name} is a shipped node's, of {other.device} devices, whose measured "
                              f"collectives would stand for these {topo.device}: give the file its own name (and "
                              f"collectives_of: {topo.name} where they should)")
    return topo


def is_topology_file(spec: str | Path) -> bool:
    """Whether `spec` is a YAML file of a node (a `device:` and no `memory:`), not a hardware preset."""
    path = Path(str(spec))
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return False
    try:
        raw = read_yaml(path)
    except ConfigError:
        return False
    return isinstance(raw, dict) and "device" in raw and "memory" not in raw


def load_topology(spec: str | Path, source: str = "", key: str = "topology") -> Topology:
    """A topology preset by name (hw_models/network/presets) or a path to a YAML file."""
    path = PRESET_DIR / f"{spec}.yaml"
    if not path.is_file():
        path = Path(str(spec))
        beside = Path(source.split(" ")[0]).parent / path   # a relative path from the file that names it, as model paths
        if not path.is_absolute() and not path.is_file() and source and beside.is_file():
            path = beside
        if path.suffix not in (".yaml", ".yml") or not path.is_file():
            where = f"{source}: {key}: " if source else ""
            raise ConfigError(f"{where}unknown topology {str(spec)!r}; presets: {', '.join(preset_names())}")
    return _load(path, path.stat().st_mtime_ns)


def log2_steps(ranks: int) -> int:
    return max(1, math.ceil(math.log2(ranks))) if ranks > 1 else 0

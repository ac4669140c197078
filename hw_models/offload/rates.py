"""The host's links as an offload step uses them: the achieved rate of each transfer kind, and what a byte moved
costs in energy (hw_models.offload.sched's module doc says which memories a transfer touches)."""

from __future__ import annotations

from dataclasses import dataclass

from hw_models.machine import Tier
from hw_models.offload.spec import Host


@dataclass(frozen=True)
class Rates:
    """Achieved transfer rates in bytes/s."""

    h2d: float
    d2h: float
    disk_read: float
    disk_write: float
    pageable_factor: float
    pcie_latency_s: float = 0.0
    disk_latency_s: float = 0.0
    # What a byte moved costs (J/byte; 0 where the preset gives no figure): the host link's PHYs, one access of
    # host DRAM, of the GPU's memory, of the disk (module doc)
    link_j_per_byte: float = 0.0
    host_dram_j_per_byte: float = 0.0
    gpu_memory_j_per_byte: float = 0.0
    disk_j_per_byte: float = 0.0

    @classmethod
    def of(cls, host: Host, gpu_memory: Tier) -> "Rates":
        bw = host.pcie.achieved_bytes_per_s()
        return cls(h2d=bw, d2h=bw, disk_read=host.disk_read_bytes_per_s, disk_write=host.disk_write_bytes_per_s,
                   pageable_factor=host.pcie.pageable_factor, pcie_latency_s=host.pcie.latency_s,
                   disk_latency_s=host.disk.latency_s, link_j_per_byte=host.pcie.energy_j_per_byte or 0.0,
                   host_dram_j_per_byte=host.cpu_memory.energy_j_per_byte or 0.0,
                   gpu_memory_j_per_byte=gpu_memory.energy_j_per_byte or 0.0,
                   disk_j_per_byte=host.disk.energy_j_per_byte or 0.0)

    def host_priced(self) -> str:
        """What of the host's traffic has an energy figure, in words ("host DRAM, link and disk J/byte"), or ""."""
        parts = [name for name, j in (("host DRAM", self.host_dram_j_per_byte), ("link", self.link_j_per_byte),
                                      ("disk", self.disk_j_per_byte)) if j]
        return f"{', '.join(parts[:-1])} and {parts[-1]} J/byte" if len(parts) > 1 else \
            f"{parts[0]} J/byte" if parts else ""

    def transfer_j(self, link: str, nbytes: float, pageable: bool = False) -> tuple[float, float]:
        """(host-side, GPU-side) joules of moving `nbytes` over `link` (a LINKS name, or disk_r / disk_w); a
        `pageable` copy is staged through a pinned buffer first: two more host-DRAM accesses a byte."""
        host = nbytes * self.host_dram_j_per_byte * (3 if pageable else 1)
        if link.startswith("disk"):
            return nbytes * self.disk_j_per_byte + host, 0.0
        return nbytes * self.link_j_per_byte + host, nbytes * self.gpu_memory_j_per_byte

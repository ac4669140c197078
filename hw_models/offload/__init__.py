"""Kind `offload`: one GPU plus CPU DRAM and a disk, as in FlexGen: a placement
policy (or a search for one) and a block schedule over PCIe, disk and compute."""

from __future__ import annotations

from hw_models.offload_cli import register
from hw_models.offload.mapper import OffloadMapper
from hw_models.offload.report import report_sections
from hw_models.offload.spec import HostSpec

KIND = "offload"
MAPPER = OffloadMapper
PRESET_SCHEMA = HostSpec                        # the preset's `host:` section (CPU memory, disk, links)
WORKLOAD_SCHEMAS = {"policy": "placement fractions or 'search' (hw_models.offload.spec.parse_policy)"}

roofs = None                                    # the GPU's and CPU's own roofs suffice

__all__ = ["KIND", "MAPPER", "PRESET_SCHEMA", "WORKLOAD_SCHEMAS", "register", "report_sections", "roofs"]

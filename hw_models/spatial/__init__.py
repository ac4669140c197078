"""Kind `spatial`: weights resident in on-chip SRAM across many chips (Groq LPU,
Graphcore IPU), layers pipelined from chip to chip."""

from __future__ import annotations

from hw_models.spatial.config import SpatialConfig
from hw_models.spatial.mapper import SpatialMapper
from hw_models.spatial.report import report_sections
from hw_models.spatial.roofs import roofs

KIND = "spatial"
MAPPER = SpatialMapper
PRESET_SCHEMA = SpatialConfig                   # the preset's `spatial:` section
WORKLOAD_SCHEMAS: dict = {}
register = None

__all__ = ["KIND", "MAPPER", "PRESET_SCHEMA", "WORKLOAD_SCHEMAS", "register", "report_sections", "roofs"]

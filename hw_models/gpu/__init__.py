"""Kind `gpu` (and `cpu`): one compute unit streaming from one memory tier, kernels
in issue order on one stream, each a roofline with the preset's efficiency curves."""

from __future__ import annotations

from hw_models.base import Section
from hw_models.gpu.mapper import GpuMapper
from sim.core.results import RunResult

KIND = "gpu"
MAPPER = GpuMapper
PRESET_SCHEMA = None        # no section of its own
WORKLOAD_SCHEMAS: dict = {}
register = None             # no subcommand of its own
roofs = None               # each unit's own roof suffices


def report_sections(result: RunResult) -> list[Section]:
    return []

"""Kind `gpu` (and `cpu`): one compute unit streaming from one memory tier, kernels
in issue order on one stream, each a roofline with the preset's efficiency curves."""

from __future__ import annotations

from hw_models.gpu.parallel import MAPPER as _mapper
from hw_models.gpu.plan import ParallelPlan
from hw_models.gpu.report import report_sections

KIND = "gpu"
MAPPER = _mapper           # GpuMapper, or ParallelGpuMapper for a workload with `parallel:`
PRESET_SCHEMA = None        # no section of its own
WORKLOAD_SCHEMAS: dict = {"parallel": ParallelPlan}   # tp, pp, dp, ep, micro_batches, topology
register = None             # no subcommand of its own
roofs = None               # each unit's own roof suffices

__all__ = ["KIND", "MAPPER", "PRESET_SCHEMA", "WORKLOAD_SCHEMAS", "register", "report_sections", "roofs"]

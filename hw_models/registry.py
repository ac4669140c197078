"""The hardware kinds, and the entry point that picks one: `simulate(workload, machine)`."""

from __future__ import annotations

import importlib

from hw_models.base import Mapper
from hw_models.machine import Machine
from sim.core.model import ModelConfig
from sim.core.results import RunResult
from sim.core.workload import Workload

_MODULES = {"gpu": "hw_models.gpu.mapper", "cpu": "hw_models.gpu.mapper", "offload": "hw_models.offload.mapper",
            "pim": "hw_models.pim.mapper", "spatial": "hw_models.spatial.mapper"}


def mapper_for(machine: Machine, workload: Workload, model: ModelConfig) -> Mapper:
    module = importlib.import_module(_MODULES[machine.kind])
    return module.MAPPER(machine, workload, model)


def simulate(workload: Workload, machine: Machine, exhaustive: bool = False, detail: bool = True) -> RunResult:
    """Simulate `workload` on `machine`: the public entry point, a pure function
    of its inputs (so it pickles to sweep workers). `detail=False` skips the
    per-op timelines of the report (sweeps need only the metrics)."""
    model = workload.model_config_()
    return mapper_for(machine, workload, model).simulate(exhaustive=exhaustive, detail=detail)

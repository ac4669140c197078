"""The Python API in one import (docs/api.md):

    from sim.apps.api import load_workload, load_machine, simulate
    result = simulate(load_workload("workloads/llama2_7b_decode.yaml"), load_machine("h200"))
    result.metrics(); result.to_pandas("decode")
"""

from hw_models.machine import load_machine, preset_names as hardware_presets
from hw_models.registry import simulate
from sim.core.model import load_model, preset_names as model_presets
from sim.core.results import RunResult
from sim.core.workload import Workload, load_workload

__all__ = ["RunResult", "Workload", "hardware_presets", "load_machine", "load_model", "load_workload",
           "model_presets", "simulate"]

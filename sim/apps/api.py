"""The Python API in one import (docs/api.md):

    from sim.apps.api import load_workload, load_machine, simulate
    result = simulate(load_workload("workloads/llama2_7b_decode.yaml"), load_machine("h200"))
    result.metrics(); result.to_pandas("decode")

`simulate` here is the registry's with the command line's input checks in front: each note `sim run` prints on
stderr (a setting this hardware ignores, a power limit above the board's TDP) is a `SimInputWarning`, so a script
sees what the CLI says (a trial's `power_limit_w` above the TDP had passed in Python without a word).
"""

from __future__ import annotations

import warnings
from pathlib import Path

from hw_models import registry
from hw_models.machine import Machine, load_machine, preset_names as hardware_presets
from sim.apps.checks import input_notes
from sim.core.model import load_model, preset_names as model_presets
from sim.core.results import RunResult
from sim.core.workload import Workload, load_workload

__all__ = ["RunResult", "SimInputWarning", "Workload", "hardware_presets", "load_machine", "load_model",
           "load_workload", "model_presets", "simulate"]


class SimInputWarning(UserWarning):
    """A setting that is valid but has no effect here, or means an operating point no board offers."""


def simulate(workload: Workload | str | Path, machine: Machine | str | Path, exhaustive: bool = False,
             detail: bool = True) -> RunResult:
    """hw_models.registry.simulate, after warning each input note `sim run` prints (sim.apps.checks)."""
    workload = load_workload(workload) if isinstance(workload, (str, Path)) else workload
    machine = load_machine(machine) if isinstance(machine, (str, Path)) else machine
    for note in input_notes(workload, machine):
        warnings.warn(note, SimInputWarning, stacklevel=2)
    return registry.simulate(workload, machine, exhaustive=exhaustive, detail=detail)

"""The Python API in one import (docs/api.md):

    from sim.apps.api import load_workload, load_machine, simulate
    result = simulate(load_workload("workloads/llama2_7b_decode.yaml"), load_machine("h200"))
    result.metrics(); result.to_pandas("decode")
    served, summary = serve("workloads/serve_llama3_8b_sharegpt.yaml", "h100_sxm")   # sim serve's run and figures

`simulate` here is the registry's with the command line's input checks in front: each note `sim run` prints on
stderr (a setting this hardware ignores, a power limit above the board's TDP) is a `SimInputWarning`, so a script
sees what the CLI says (a trial's `power_limit_w` above the TDP had passed in Python without a word).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from hw_models import registry
from hw_models.machine import Machine, load_machine, machine_from_dict, preset_names as hardware_presets
from sim.apps.checks import input_notes
from sim.apps.serve.request_rows import request_table
from sim.apps.serve.run import refuse_unserved, serve as _serve
from sim.apps.serve.simulator import ServeResult
from sim.apps.serve.spec import ServeFile, load_serve_file, serve_file_from_dict
from sim.core.model import load_model, preset_names as model_presets
from sim.core.results import RunResult
from sim.core.errors import ConfigError
from sim.core.schema import validate_mapping
from sim.core.workload import Workload, load_workload

__all__ = ["Machine", "RunResult", "ServeFile", "ServeResult", "SimInputWarning", "Workload", "hardware_presets",
           "load_machine", "load_model", "load_serve_file", "load_workload", "machine_from_dict", "model_presets",
           "request_table", "serve", "simulate"]


class SimInputWarning(UserWarning):
    """A setting that is valid but has no effect here, or means an operating point no board offers."""


def _inputs(what: str, workload: Workload | ServeFile | str | Path, machine: Machine | str | Path | dict,
            kind: type, **flags: object) -> tuple[Workload, Machine]:
    """The (workload, machine) pair from objects, paths, preset names or (machine) a mapping of preset fields
    (machine_from_dict), each checked: a sweep trial's swapped arguments, an int or exhaustive="yes" had read as
    AttributeErrors deep inside or passed silently."""
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):   # numpy's True as well (a review)
            raise TypeError(f"{what}: {name} must be True or False, got {value!r}")
    if isinstance(workload, Machine) or isinstance(machine, Workload):   # a ServeFile is a Workload
        raise TypeError(f"{what}(workload, machine): the arguments are swapped")
    if isinstance(workload, str) and workload in hardware_presets():   # ("a6000", "workloads/...") read 'not found'
        raise TypeError(f"{what}(workload, machine): {workload!r} is a hardware preset, not a workload; the workload "
                        "comes first")
    if not isinstance(workload, (kind, str, Path)):
        raise TypeError(f"{what}: workload must be a {kind.__name__}, a path or a file name, got {type(workload).__name__}")
    if not isinstance(machine, (Machine, str, Path, dict)):
        raise TypeError(f"{what}: machine must be a Machine, a preset name, a path or a mapping of preset fields, got "
                        f"{type(machine).__name__}")
    load = load_serve_file if kind is ServeFile else load_workload
    workload = load(workload) if isinstance(workload, (str, Path)) else workload
    machine = (machine_from_dict(machine, "machine") if isinstance(machine, dict)
               else load_machine(machine) if isinstance(machine, (str, Path)) else machine)
    return checked(workload), checked(machine)


def _unknown_key(obj: BaseModel, at: str = "") -> str | None:
    """The dotted path of the first attribute of `obj` or its sections that is no field (`w.formats.model_copy(update=
    {"weigths": "int4"})` had run fp16 without a word: a review), None where there is none."""
    extra = sorted(set(vars(obj)) - set(type(obj).model_fields))
    if extra:
        return at + extra[0]
    for name in type(obj).model_fields:
        value = getattr(obj, name, None)
        for key, v in (value.items() if isinstance(value, dict) else [("", value)]):
            if isinstance(v, BaseModel) and (hit := _unknown_key(v, f"{at}{name}.{f'{key}.' if key else ''}")):
                return hit
    return None


def checked(obj: BaseModel) -> BaseModel:
    """A Workload, ServeFile or Machine checked again as its file is: all three are frozen, so a script changes a
    field with `model_copy(update=...)`, which pydantic runs no check on (an API trial's `batch: 0` read a TPOT, `-4`
    NaN times, a negative bandwidth a NaN TPOT; a review's SLO `ttft_p95` died in the metrics after the whole run).
    A refusal is the file's one-line ConfigError, the file named as changed in code; the object itself is returned."""
    source = getattr(obj, "source", "") or ""
    label = f"{source} (as changed in code)" if source else f"{type(obj).__name__}(...)"
    if unknown := _unknown_key(obj):   # model_copy(update=) takes any name silently, at any depth
        raise ConfigError(f"{label}: {unknown}: unknown key")
    data = {k: v for k, v in obj.model_dump(warnings=False).items() if k != "source"}
    if isinstance(obj, ServeFile):
        serve_file_from_dict(data, label)
    else:
        validate_mapping(type(obj), data, label, "a mapping")
    return obj


def simulate(workload: Workload | str | Path, machine: Machine | str | Path | dict, exhaustive: bool = False,
             detail: bool = True) -> RunResult:
    """hw_models.registry.simulate, after warning each input note `sim run` prints (sim.apps.checks). `machine`:
    a Machine, a preset name or path, or a mapping of a preset's fields (a machine built in code)."""
    workload, machine = _inputs("simulate", workload, machine, Workload, exhaustive=exhaustive, detail=detail)
    for note in input_notes(workload, machine):
        warnings.warn(note, SimInputWarning, stacklevel=2)
    return registry.simulate(workload, machine, exhaustive=exhaustive, detail=detail)


def serve(file: ServeFile | str | Path, machine: Machine | str | Path | dict, exact: bool = False
          ) -> tuple[ServeResult, dict]:
    """`sim serve`'s run of a serving file on `machine`: the per-request and per-iteration result (ServeResult:
    `.requests`, `.iterations` as column arrays) and the summary the CLI's --json writes (TTFT/TPOT/E2E statistics,
    throughput, energy, SLOs), after warning what `sim serve` says before it starts; a stream whose every request
    is rejected raises CapacityError, as `sim serve` fails."""
    file, machine = _inputs("serve", file, machine, ServeFile, exact=exact)
    for note in input_notes(file, machine):
        warnings.warn(note, SimInputWarning, stacklevel=2)
    result, summary = _serve(file, machine, exact=exact)
    refuse_unserved(file, summary)   # CapacityError, as sim serve fails
    return result, summary

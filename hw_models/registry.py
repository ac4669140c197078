"""The kinds of hardware and the entry point that picks one: `simulate(workload, machine)`.

hw_models.kinds lists the kinds (one line each); this module loads a kind's folder
and checks its face:

    KIND              the kind's name
    MAPPER            a hw_models.base.Mapper subclass (the generation loop's StepModel), or a
                      factory (machine, workload, model) -> Mapper
    PRESET_SCHEMA     the schema of the preset section it owns, or None
    WORKLOAD_SCHEMAS  {workload key it owns: its schema or a description}
    register          register(subparsers) adding its CLI subcommands, or None
    report_sections   report_sections(result) -> list[Section], its report as data
    roofs             roofs(machine, fmt) -> list[Roof] beyond each unit's own, or None
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import ValidationError

from hw_models.base import Mapper, Section
from hw_models.kinds import KINDS, cli_registrars  # noqa: F401 (cli_registrars: re-exported)
from hw_models.machine import Machine, load_machine, machine_aliases
from hw_models.power import board_columns
from sim.core.errors import ConfigError
from sim.core.model import ModelConfig
from sim.core.results import RunResult
from sim.core.schema import file_dict, validation_error
from sim.core.settings import dotted_items, resolve_aliases
from sim.core.workload import Workload, load_workload

HW_OVERRIDES, HW_FIGURES = "hw_overrides", "hw_figures"   # hardware_record's keys
FACE = ("KIND", "MAPPER", "PRESET_SCHEMA", "WORKLOAD_SCHEMAS", "register", "report_sections", "roofs")


def kind_module(kind: str) -> ModuleType:
    """The folder of `kind`, its face checked."""
    if kind not in KINDS:
        raise ConfigError(f"kind {kind!r}: not a registered kind; kinds: {', '.join(KINDS)}")
    entry = KINDS[kind]
    module = entry.module if isinstance(entry.module, ModuleType) else importlib.import_module(entry.module)
    missing = [a for a in FACE if not hasattr(module, a)]
    if missing:
        raise TypeError(f"{module.__name__}: the kind {kind!r} lacks {', '.join(missing)} (hw_models.registry.FACE)")
    return module


def mapper_for(machine: Machine, workload: Workload, model: ModelConfig) -> Mapper:
    why = KINDS[machine.kind].moe_refusal if machine.kind in KINDS else None
    if model.is_moe and why:
        raise ConfigError(f"{workload.source or 'workload'}: model: {model.name} is a Mixture-of-Experts model, "
                          f"which the {machine.kind} kind ({machine.name}) does not run: {why}; use a gpu preset")
    return kind_module(machine.kind).MAPPER(machine, workload, model)


def simulate(workload: Workload | str | Path, machine: Machine | str | Path, exhaustive: bool = False,
             detail: bool = True) -> RunResult:
    """Simulate `workload` on `machine`: the public entry point, a pure function
    of its inputs (so it pickles to sweep workers). Either may be given as a file or preset name
    (load_workload, load_machine; a trial's `simulate(w, "h100_sxm")` had raised AttributeError).
    `detail=False` skips the per-op timelines of the report (sweeps need only the metrics)."""
    if isinstance(workload, (str, Path)):
        workload = load_workload(workload)
    if isinstance(machine, (str, Path)):
        machine = load_machine(machine)
    model = workload.model_config_()
    result = mapper_for(machine, workload, model).simulate(exhaustive=exhaustive, detail=detail)
    # which energy model the run's J/token is, and the power limit: a script comparing kinds reads them beside it
    result.extra.setdefault("metrics", {}).update(board_columns(machine))
    return result


def report_sections(result: RunResult) -> list[Section]:
    """The kind's own sections of a run's report, as data."""
    return kind_module(result.kind).report_sections(result) if result.kind else []


def machine_data(machine: Machine) -> dict[str, Any]:
    """The machine as data (`sim hw show --format json|csv`): its file's keys, every figure a number
    in the SI unit its key names. Machine keeps a kind's sections as given ('300 MHz'), so each
    goes through the kind's PRESET_SCHEMA, which parses its quantities and fills its defaults."""
    out = file_dict(machine)
    schema = kind_module(machine.kind).PRESET_SCHEMA
    for name in machine.sections if schema is not None else ():
        try:
            out[name] = schema.model_validate(machine.sections[name]).model_dump()
        except ValidationError as exc:   # shown as `sim run` would refuse it: file and key
            raise validation_error(exc, machine.source or machine.name, prefix=name, model=schema) from None
    return out


def hardware_record(machine: Machine, overrides: dict[str, Any]) -> dict[str, Any]:
    """What a `sim run --json` result or `sim serve --json` summary records of its hardware beside its name:
    `hw_overrides`, the `--set hw.*` items (keys without `hw.`, `@device` / `@main` resolved, each value the figure
    the machine read: `1e-6`, a string to YAML 1.1, as 1e-06; as given where it set a whole mapping), and
    `hw_figures`, machine_data: every effective figure. Two runs on one preset that differed only in a power cap
    both said `hardware: h100_sxm`, and sim diff found no input that differed (an architect's trial); with the
    figures a hardware file against a preset, or an --ideal run, shows what differs too."""
    figures = machine_data(machine)
    flat, aliases = dict(dotted_items(figures)), machine_aliases(machine)
    keys = {resolve_aliases(key, aliases): value for key, value in overrides.items()}
    return {HW_OVERRIDES: {key: flat.get(key, value) for key, value in keys.items()}, HW_FIGURES: figures}

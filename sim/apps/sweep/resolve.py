"""A sweep point's workload and machine, built from the base files plus the point's axis values (sim.apps.sweep.expand
makes the points). A machine is memoized over the points that share it, under a source that names no point or axis
(`SWEEP: hw PRESET`): each point names itself in its own config (point_source), so a failure at run time names its
own point's values, not those of whichever point or axis check built the machine first (a trial's error at batch
32 read "workload.batch=1", another "axes.hw.memory.@device.bandwidth_bytes_per_s")."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hw_models.machine import Machine, machine_aliases, machine_from_dict, preset_names, raw_machine
from sim.core.errors import ConfigError
from sim.core.schema import file_dict, set_dotted
from sim.core.settings import HW_ALIASES, FactorError, resolve_aliases, scaled
from sim.core.workload import Workload, set_workload_key, workload_from_dict, workload_keys
from sim.apps.serve.spec import serve_file_from_dict
from sim.apps.sweep.blame import point_label
from sim.apps.sweep.spec import SweepSpec

HW_AXIS = "hw"


class Refused(ConfigError):
    """A machine refused a value that names a field it has (the schema's own check: a power limit on a preset
    without the board-power model, a scaled count left fractional): a property of that preset, which another preset
    of the sweep may take (sim.apps.sweep.expand records such a point as an error row)."""


@dataclass(frozen=True)
class Scaled:
    """A factor of the machine's own value of a field (spec.Scale)."""
    factor: float


def point_source(spec_source: str, axes: dict[str, Any], ref: str) -> str:
    """What a point's messages start with: the sweep file and the point's own values (and its preset, where no hw
    axis names it)."""
    return _named(f"{spec_source}: point ({point_label(axes)})", ref)


def _named(where: str, ref: str) -> str:
    """`where` naming preset `ref`, once (an error row read "hw groq_lpu (hw groq_lpu)", a trial)."""
    return where if f"hw {ref}" in where or f"hw={ref}" in where else f"{where} (hw {ref})"


def _freeze(v: Any) -> Any:
    """A hashable image of nested lists/dicts, for memo keys."""
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


@dataclass
class Resolver:
    """Builds validated workloads and machines from the base files plus overrides,
    memoizing identical ones (most points share a machine or a workload)."""

    spec: SweepSpec
    wl_path: Path
    wl_raw: dict[str, Any]
    serving: bool = False               # the workload is a serving file: points run sim.apps.serve
    _wl: dict[tuple, Workload] = field(default_factory=dict)
    _hw: dict[tuple, Machine] = field(default_factory=dict)
    _base_hw: dict[str, Machine] = field(default_factory=dict)

    def hw_ref(self, value: Any, where: str) -> str:
        """A preset name as is; a file path relative to the sweep file."""
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a preset name or hardware file, got {value!r}")
        if value in preset_names():
            return value
        path = self.spec.base_dir / value
        if path.is_file():
            return str(path)
        raise ConfigError(f"{where}: unknown hardware preset or file {value!r}; presets: {', '.join(preset_names())}")

    def base_machine(self, ref: str, where: str) -> Machine:
        if ref not in self._base_hw:
            self._base_hw[ref] = self.machine(ref, (), where)
        return self._base_hw[ref]

    def hw_path(self, ref: str, path: str, where: str) -> str:
        """`memory.@device.bandwidth_bytes_per_s` with the aliases replaced for this machine."""
        if not any(a in path for a in HW_ALIASES):
            return path
        return resolve_aliases(path, machine_aliases(self.base_machine(ref, where)))

    def machine(self, ref: str, overrides: tuple[tuple[str, Any], ...], where: str) -> Machine:
        """Preset (or file) `ref` with `overrides`; an error names `where`. Refused: the preset's schema refused a
        value, or it lacks a field another preset may have (a `pim` section on groq_lpu); any other ConfigError: two
        axes on one field."""
        memo = (ref, _freeze(overrides))
        if memo not in self._hw:
            raw = self.raw(ref, overrides, where)
            try:
                machine = machine_from_dict(raw, _named(where, ref))
            except ConfigError as exc:
                raise Refused(str(exc)) from None
            self._hw[memo] = machine.model_copy(update={"source": f"{self.spec.source}: hw {ref}"})
        return self._hw[memo]

    def raw(self, ref: str, overrides: tuple[tuple[str, Any], ...], where: str) -> dict[str, Any]:
        """Preset `ref`'s file as a dict with `overrides` set (unvalidated)."""
        src = _named(where, ref)
        raw = raw_machine(ref)
        named: dict[str, str] = {}   # resolved field -> the axis that set it
        for path, value in overrides:
            resolved = self.hw_path(ref, path, where)
            if resolved in named:   # two axes on one field: the later silently won, the record showed both
                raise ConfigError(f"{where}: hw.{named[resolved]} and hw.{path} name the same field of {ref} "
                                  f"(hw.{resolved}); keep one axis")
            named[resolved] = path
            if isinstance(value, Scaled):   # a factor of this machine's own value
                value = self._scaled(ref, resolved, path, value.factor, where)
            try:
                set_dotted(raw, resolved, value, source=src)
            except ConfigError as exc:   # a field this preset lacks (a PIM section on groq_lpu): another may have it
                raise Refused(str(exc)) from None
        return raw

    def overlaid(self, ref: str, overrides: tuple[tuple[str, Any], ...], where: str) -> dict[str, Any]:
        """Preset `ref` as its file gives it with the plain override values set, unvalidated: what a point the preset
        refused reads its `when` and columns from (a factor's field keeps the preset's own value)."""
        tree = copy.deepcopy(file_dict(self.base_machine(ref, where)))
        for path, value in overrides:
            if not isinstance(value, Scaled):
                try:
                    set_dotted(tree, self.hw_path(ref, path, where), value, source=where)
                except ConfigError:   # a field the preset lacks: its column reads missing on the error row
                    pass
        return tree

    def _scaled(self, ref: str, resolved: str, path: str, factor: float, where: str) -> int | float:
        """`factor` times preset `ref`'s own value of field `resolved` (axis `path`), as `--set hw.X=Nx` reads one
        (sim.core.settings.scaled)."""
        try:
            return scaled(file_dict(self.base_machine(ref, where)), resolved, factor)
        except FactorError as exc:
            if exc.missing is not None:   # as the sweep's field lookup says it (expr.lookup_in); another may have it
                raise Refused(f"{_named(where, ref)}: hw.{resolved}: no such field") from None
            if exc.node is None:   # a field the preset leaves to its default (power_limit_w: the TDP), as --set says
                raise ConfigError(f"{where}: hw.{resolved}: scale: {ref} leaves it to its default, which a factor "
                                  "cannot scale: give the values") from None
            raise Refused(f"{where}: hw.{path}: scale: {ref}'s value {exc.node!r} " + (
                "is not a number" if exc.product is None else
                f"x {factor:g} is {exc.product:g}, not a whole number")) from None

    def workload(self, overrides: tuple[tuple[str, Any], ...], where: str) -> Workload:
        memo = _freeze(overrides)
        if memo not in self._wl:
            raw = copy.deepcopy(self.wl_raw)
            keys = workload_keys() + (["serving"] if self.serving else [])
            for path, value in overrides:
                if path.split(".")[0] not in keys:
                    raise ConfigError(f"{where}: workload.{path}: unknown workload field; fields: " + ", ".join(keys))
                set_workload_key(raw, path, value, where)
            wl = serve_file_from_dict(raw, where) if self.serving else workload_from_dict(raw, where)
            # Keep the workload file as source: model paths resolve relative to it.
            self._wl[memo] = wl.model_copy(update={"source": str(self.wl_path)})
        return self._wl[memo]

"""Axes -> points. Every point is resolved into a validated workload and
machine here, in the main process, before anything runs: a typo in a dotted
path or a bad value fails at once with one line naming the sweep file and axis.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import sim
from hw_models.machine import Machine, machine_aliases, machine_from_dict, preset_names, raw_machine
from sim.core.errors import ConfigError, SimError
from sim.core.schema import file_dict, read_yaml, set_dotted
from sim.core.settings import HW_ALIASES, FactorError, resolve_aliases, scaled
from sim.apps.checks import input_notes
from sim.apps.sweep import DEFAULT_MAX_POINTS
from sim.apps.sweep.expr import compile_expr, lookup_in
from sim.apps.sweep.names import check_metrics
from sim.apps.sweep.spec import RANGES, Range, Scale, SweepSpec
from sim.core.workload import Workload, load_workload, set_workload_key, workload_from_dict, workload_keys
from sim.apps.serve.spec import ServeFile, input_files, load_serve_file, serve_file_from_dict
from sim.core.model import model_path

HW_AXIS = "hw"
ALIASES = HW_ALIASES


@dataclass(frozen=True)
class Point:
    index: int                   # position in the expansion
    axes: dict[str, Any]         # axis path -> value, as the spec gives it
    columns: dict[str, Any]      # recorded config fields (spec.columns)
    config: dict[str, Any]       # what the worker needs: workload/machine dumps and their sources
    key: str                     # hash of the resolved config, its files' contents and sim.__version__
    contents: dict[str, str] = field(default_factory=dict)   # every file the point reads -> sha256
    notes: tuple[str, ...] = ()  # what `sim run` / `sim serve` would warn of before this point (sim.apps.checks)


@dataclass
class _Resolver:
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
        if not any(a in path for a in ALIASES):
            return path
        return resolve_aliases(path, machine_aliases(self.base_machine(ref, where)))

    def machine(self, ref: str, overrides: tuple[tuple[str, Any], ...], where: str) -> Machine:
        memo = (ref, _freeze(overrides))
        # a point's `where` may name the preset already (an error row read "hw groq_lpu (hw groq_lpu)", a trial)
        src = where if f"hw {ref}" in where else f"{where} (hw {ref})"
        if memo not in self._hw:
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
                set_dotted(raw, resolved, value, source=src)
            self._hw[memo] = machine_from_dict(raw, src)
        return self._hw[memo]

    def _scaled(self, ref: str, resolved: str, path: str, factor: float, where: str) -> int | float:
        """`factor` times preset `ref`'s own value of field `resolved` (axis `path`), as `--set hw.X=Nx` reads one
        (sim.core.settings.scaled)."""
        try:
            return scaled(file_dict(self.base_machine(ref, where)), resolved, factor)
        except FactorError as exc:
            if exc.node is None:   # as the sweep's field lookup says it (expr.lookup_in)
                raise ConfigError(f"{where}: hw.{resolved}: no such field") from None
            raise ConfigError(f"{where}: hw.{path}: scale: {ref}'s value {exc.node!r} " + (
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


def _freeze(v: Any) -> Any:
    """A hashable image of nested lists/dicts, for memo keys."""
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


def _split(axes: dict[str, Any], scaled: frozenset[str] = frozenset()) -> tuple[Any, tuple, tuple]:
    """Axis values -> (hw value or None, workload overrides, machine overrides); a `scaled` axis's value is a factor
    of the machine's own, marked (Scaled) for _Resolver.machine."""
    wl, hw = [], []
    for path, value in axes.items():
        if path == HW_AXIS:
            continue
        head, _, rest = path.partition(".")
        (wl if head == "workload" else hw).append((rest, Scaled(value) if path in scaled else value))
    return axes.get(HW_AXIS), tuple(wl), tuple(hw)


@dataclass(frozen=True)
class Scaled:
    """A factor of the machine's own value of a field (spec.Scale)."""
    factor: float


def _scaled(spec: SweepSpec) -> frozenset[str]:
    return frozenset(k for k, v in spec.axes.items() if isinstance(v, Scale))


_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".jsonl", ".csv", ".parquet", ".gz")


def _named_files(node: Any, folder: Path) -> list[Path]:
    """The files a config's string values name (a stack, a topology, an MoE histogram): a
    value with a data file's suffix that exists beside the workload or in the current folder."""
    if isinstance(node, dict):
        return [p for v in node.values() for p in _named_files(v, folder)]
    if isinstance(node, (list, tuple)):
        return [p for v in node for p in _named_files(v, folder)]
    if isinstance(node, str) and node.endswith(_FILE_SUFFIXES) and "\n" not in node:
        for p in (folder / node, Path(node)):
            if p.is_file():
                return [p]
    return []


def point_files(workload: Workload, machine: Machine, hw_ref: str) -> list[Path]:
    """Every file a point reads: the workload (or serving) file, the model's config, a serving
    file's trace, histograms and draft, the hardware file (`hw_ref`, unless a preset) and
    whatever the configs name by path."""
    source = workload.source or None
    paths = [Path(p) for p in (source, machine.source, hw_ref) if p and Path(p).is_file()]
    paths += [p for p in [model_path(workload.model, source)] if p is not None]
    if isinstance(workload, ServeFile):
        paths += input_files(workload)
    folder = Path(source).parent if source else Path(".")
    paths += _named_files(workload.model_dump(mode="json"), folder) + _named_files(machine.model_dump(mode="json"), folder)
    return sorted({Path(os.path.realpath(p)) for p in paths if p.is_file()})


class Digests:
    """sha256 of each file's content, read once per expansion."""

    def __init__(self) -> None:
        self._memo: dict[Path, str] = {}

    def __call__(self, paths: list[Path]) -> dict[str, str]:
        for p in paths:
            if p not in self._memo:
                self._memo[p] = hashlib.sha256(p.read_bytes()).hexdigest()
        return {str(p): self._memo[p] for p in paths}


def config_key(workload: Workload, machine: Machine, contents: dict[str, str] | None = None) -> str:
    """The store's key of a point: its resolved config, the content of every file it reads
    (`contents`: path -> sha256; a changed trace or config.json is a new point, not a stale
    row) and the simulator's version."""
    blob = json.dumps({"workload": workload.model_dump(mode="json"), "machine": machine.model_dump(mode="json"),
                       "files": sorted((contents or {}).values()), "sim": sim.__version__}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def count_points(spec: SweepSpec) -> int:
    """How many combinations the axes make, computed without making them."""
    if spec.mode == "random":
        return spec.samples or 0
    lengths = []
    for k, v in spec.axes.items():
        if isinstance(v, Scale):
            lengths.append(len(v.scale))
        elif not isinstance(v, Range):
            lengths.append(len(v))
        elif v.step is not None:
            lengths.append(int(math.floor((v.max - v.min) / v.step + 1e-9)) + 1)
        else:
            lengths.append(v.num if v.num is not None else 1)  # values() names the missing num
    return min(lengths) if spec.mode == "zip" else math.prod(lengths)


def check_size(spec: SweepSpec, max_points: int) -> int:
    n = count_points(spec)
    if n > max_points:
        raise ConfigError(f"{spec.source}: axes: the sweep expands to {n:,} points, over the limit of "
                          f"{max_points:,}; narrow the axes or raise --max-points")
    return n


def _combinations(spec: SweepSpec) -> list[dict[str, Any]]:
    names = list(spec.axes)
    if spec.mode == "random":
        rng = np.random.default_rng(spec.seed)
        out = []
        for _ in range(spec.samples or 0):
            combo = {}
            for k, v in spec.axes.items():
                combo[k] = v.sample(rng) if isinstance(v, RANGES) else _native(v[int(rng.integers(len(v)))])
            out.append(combo)
        return out
    lists = [v.values(f"{spec.source}: axes.{k}") if isinstance(v, RANGES) else list(v) for k, v in spec.axes.items()]
    if spec.mode == "zip":
        lengths = {k: len(v) for k, v in zip(names, lists)}
        if len(set(lengths.values())) > 1:
            raise ConfigError(f"{spec.source}: axes: mode zip needs lists of equal length, got "
                              + ", ".join(f"{k}: {n}" for k, n in lengths.items()))
        return [dict(zip(names, vals)) for vals in zip(*lists)]
    return [dict(zip(names, vals)) for vals in itertools.product(*lists)]


def _native(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def _check_paths(spec: SweepSpec, res: _Resolver, hw_refs: list[str]) -> None:
    """Each axis alone, with its first value, against every machine: names the axis that is wrong."""
    for path, values in spec.axes.items():
        where = f"{spec.source}: axes.{path}"
        if path == HW_AXIS:
            if isinstance(values, Range):
                raise ConfigError(f"{where}: the hw axis takes a list of presets or files, not a range")
            continue
        head = path.partition(".")[0]
        if head not in ("workload", "hw") or "." not in path:
            raise ConfigError(f"{where}: an axis path starts with 'workload.' or 'hw.' (or is exactly 'hw')")
        first = values.values(where)[0] if isinstance(values, RANGES) and spec.mode != "random" else (
            values.min if isinstance(values, RANGES) else values[0])
        _, wl, hw = _split({path: first}, _scaled(spec))
        if wl:
            res.workload(wl, where)
        for ref in hw_refs:
            if hw:
                res.machine(ref, hw, where)


def _serving_file(raw: Any) -> bool:
    """A workload file with a `serving` section is a serving file: each point is a serving run (sim serve)."""
    return isinstance(raw, dict) and "serving" in raw


def is_serving(spec: SweepSpec) -> bool:
    """Whether the sweep's points run `sim serve` (its workload is a serving file) or `sim run`."""
    return _serving_file(read_yaml(spec.workload_path()))


def expand(spec: SweepSpec, max_points: int = DEFAULT_MAX_POINTS) -> list[Point]:
    """All points of the sweep, validated, after the `when` constraint, without duplicates.
    More than `max_points` combinations is refused before any is made."""
    check_size(spec, max_points)
    wl_path = spec.workload_path()
    wl_raw = read_yaml(wl_path)
    serving = _serving_file(wl_raw)
    (load_serve_file if serving else load_workload)(wl_path)  # the base workload must be valid on its own
    check_metrics(spec, serving)   # what the points record depends on their kind: known only here
    res = _Resolver(spec, wl_path, wl_raw, serving)
    base_ref = res.hw_ref(spec.hw, f"{spec.source}: hw")
    hw_values = spec.axes.get(HW_AXIS)
    hw_refs = [res.hw_ref(v, f"{spec.source}: axes.hw") for v in hw_values] if isinstance(hw_values, list) else [base_ref]
    for ref in hw_refs:
        res.base_machine(ref, f"{spec.source}: hw {ref}")
    _check_paths(spec, res, hw_refs)
    when = compile_expr(spec.when, f"{spec.source}: when") if spec.when else None

    recorded = spec.recorded_columns()
    scaled = _scaled(spec)
    points: list[Point] = []
    seen: set[str] = set()
    digests = Digests()
    notes: dict[tuple[int, int], tuple[str, ...]] = {}   # per (workload, machine): the resolver shares them
    for combo in _combinations(spec):
        label = ", ".join(f"{k}={v}" for k, v in combo.items())
        where = f"{spec.source}: point ({label})"
        hw_value, wl_over, hw_over = _split(combo, scaled)
        ref = res.hw_ref(hw_value, where) if hw_value is not None else base_ref
        try:
            workload = res.workload(wl_over, where)
            machine = res.machine(ref, hw_over, where)
        except ConfigError as exc:  # some validators raise without naming the file; say which point
            raise (exc if str(exc).startswith(str(spec.source)) else ConfigError(f"{where}: {exc}")) from None
        tree = {"workload": file_dict(workload), "hw": file_dict(machine)}
        look = aliased(lookup_in(tree, f"{spec.source}: when"), machine)
        look_col = aliased(lookup_in(tree, f"{spec.source}: columns (or a plot's column)"), machine)
        if when is not None:
            if not when(lambda p: hw_value or spec.hw if p == HW_AXIS else look(p)):
                continue
        contents = digests(point_files(workload, machine, ref))
        key = config_key(workload, machine, contents)
        if key in seen:  # random draws or rounding can repeat a point
            continue
        seen.add(key)
        columns = {c: look_col(c) for c in recorded}
        config = dict(workload=file_dict(workload), workload_source=str(wl_path),
                      machine=file_dict(machine), machine_source=machine.source, serving=serving)
        pair = (id(workload), id(machine))
        if pair not in notes:
            notes[pair] = _input_notes(workload, machine)
        points.append(Point(len(points), dict(combo), columns, config, key, contents, notes[pair]))
    return points


def _input_notes(workload: Workload, machine: Machine) -> tuple[str, ...]:
    """The warnings a run of this point prints (settings its machine ignores, an engine's stack beside another's
    scheduler); none where checking fails: the point then fails on its own, as an error row."""
    try:
        return tuple(input_notes(workload, machine))
    except SimError:
        return ()


def gathered_notes(points: list[Point]) -> list[str]:
    """Each distinct note of `points`, with how many points it holds for, in the order first met."""
    counts = Counter(n for p in points for n in p.notes)
    return [note if n == len(points) else f"{n} of {len(points)} points: {note}" for note, n in counts.items()]


def aliased(look, machine: Machine):
    """`look` reading `hw.memory.@device...` as this machine's own tier or unit (as an axis path resolves it)."""
    aliases = machine_aliases(machine)
    return lambda path: look(resolve_aliases(path, aliases) if path.startswith("hw.") else path)

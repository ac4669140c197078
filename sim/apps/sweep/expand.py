"""Axes -> points. Every point is resolved into a validated workload and
machine here, in the main process, before anything runs: a typo in a dotted
path or a bad value fails at once with one line naming the sweep file and axis.
A value that one machine of the `hw` axis refuses and another takes (a power limit on a preset without the
board-power model) is that machine's: its points are error rows, which name them (sim.apps.sweep.blame).
"""

from __future__ import annotations

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
from hw_models.machine import Machine, machine_aliases
from sim.core.errors import ConfigError, SimError
from sim.core.schema import file_dict, read_yaml
from sim.core.settings import resolve_aliases
from sim.apps.checks import input_notes
from sim.apps.sweep import DEFAULT_MAX_POINTS
from sim.apps.sweep.blame import attributed, axis_fields, point_label
from sim.apps.sweep.expr import compile_expr, lookup_in
from sim.apps.sweep.names import check_metrics, check_plot_metrics
from sim.apps.sweep.resolve import HW_AXIS, Refused, Resolver, Scaled, point_source
from sim.apps.sweep.spec import RANGES, Range, Scale, SweepSpec
from sim.core.workload import Workload, load_workload
from sim.apps.serve.spec import ServeFile, input_files, load_serve_file
from sim.core.model import model_path


@dataclass(frozen=True)
class Point:
    index: int                   # position in the expansion
    axes: dict[str, Any]         # axis path -> value, as the spec gives it
    columns: dict[str, Any]      # recorded config fields (spec.columns)
    config: dict[str, Any]       # what the worker needs: workload/machine dumps and their sources
    key: str                     # hash of the resolved config, its files' contents and sim.__version__
    contents: dict[str, str] = field(default_factory=dict)   # every file the point reads -> sha256
    notes: tuple[str, ...] = ()  # what `sim run` / `sim serve` would warn of before this point (sim.apps.checks)


def _split(axes: dict[str, Any], scaled: frozenset[str] = frozenset()) -> tuple[Any, tuple, tuple]:
    """Axis values -> (hw value or None, workload overrides, machine overrides); a `scaled` axis's value is a factor
    of the machine's own, marked (Scaled) for Resolver.machine."""
    wl, hw = [], []
    for path, value in axes.items():
        if path == HW_AXIS:
            continue
        head, _, rest = path.partition(".")
        (wl if head == "workload" else hw).append((rest, Scaled(value) if path in scaled else value))
    return axes.get(HW_AXIS), tuple(wl), tuple(hw)


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


def _check_paths(spec: SweepSpec, res: Resolver, hw_refs: list[str]) -> None:
    """Each axis alone, with its first value, against every machine: names the axis that is wrong. A value that some
    machines refuse and another takes (a power limit where one preset has no board-power model) is those machines'
    property: their points become error rows (expand); refused by every machine, it is the file's error."""
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
        refused = [_refusal(res, ref, hw, where) for ref in hw_refs] if hw else []
        if refused and all(refused):
            raise refused[0]


def _refusal(res: Resolver, ref: str, overrides: tuple, where: str) -> Refused | None:
    """Why machine `ref` refuses `overrides` (Refused), None where it takes them; any other error is raised."""
    try:
        res.machine(ref, overrides, where)
    except Refused as exc:
        return exc
    return None


def _takes(res: Resolver, ref: str, overrides: tuple, where: str) -> bool:
    try:
        return _refusal(res, ref, overrides, where) is None
    except ConfigError:   # any other refusal of machine `ref` (an alias it lacks, two axes on one field)
        return False


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
    check_plot_metrics(spec, serving)
    res = Resolver(spec, wl_path, wl_raw, serving)
    base_ref = res.hw_ref(spec.hw, f"{spec.source}: hw")
    hw_values = spec.axes.get(HW_AXIS)
    hw_refs = [res.hw_ref(v, f"{spec.source}: axes.hw") for v in hw_values] if isinstance(hw_values, list) else [base_ref]
    for ref in hw_refs:
        res.base_machine(ref, f"{spec.source}: hw {ref}")
    _check_paths(spec, res, hw_refs)
    make = _Points(spec, res, base_ref, hw_refs, serving)
    for combo in _combinations(spec):
        make(combo)
    return make.points


@dataclass
class _Points:
    """The points of a sweep, made one combination at a time (expand)."""

    spec: SweepSpec
    res: Resolver
    base_ref: str
    hw_refs: list[str]
    serving: bool
    points: list[Point] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    digests: Digests = field(default_factory=Digests)
    notes: dict[tuple[int, int], tuple[str, ...]] = field(default_factory=dict)   # per (workload, machine) pair

    def __post_init__(self) -> None:
        self.when = compile_expr(self.spec.when, f"{self.spec.source}: when") if self.spec.when else None
        self.recorded = self.spec.recorded_columns()
        self.scaled = _scaled(self.spec)

    def __call__(self, combo: dict[str, Any]) -> None:
        spec, res = self.spec, self.res
        where = f"{spec.source}: point ({point_label(combo)})"
        hw_value, wl_over, hw_over = _split(combo, self.scaled)
        ref = res.hw_ref(hw_value, where) if hw_value is not None else self.base_ref
        try:
            workload = res.workload(wl_over, where)
            refusal = _refusal(res, ref, hw_over, where)
            if refusal and not any(_takes(res, other, hw_over, where) for other in self.hw_refs):
                raise refusal   # no machine of the sweep takes these values: the file's error
        except ConfigError as exc:   # some validators raise without naming the file; say which point
            raise (exc if str(exc).startswith(str(spec.source)) else ConfigError(f"{where}: {exc}")) from None
        # another machine takes the values this one refused: its point is an error row
        machine = None if refusal else res.machine(ref, hw_over, where)
        tree = {"workload": file_dict(workload),
                "hw": file_dict(machine) if machine else res.overlaid(ref, hw_over, where)}
        alias = machine or res.base_machine(ref, where)
        if self.when is not None:
            look = aliased(lookup_in(tree, f"{spec.source}: when"), alias)
            if not self.when(lambda p: hw_value or spec.hw if p == HW_AXIS else look(p)):
                return
        contents = self.digests(point_files(workload, alias, ref))
        key = config_key(workload, machine, contents) if machine else refused_key(workload, ref, hw_over, contents)
        if key in self.seen:  # random draws or rounding can repeat a point
            return
        self.seen.add(key)
        look_col = aliased(lookup_in(tree, f"{spec.source}: columns (or a plot's column)"), alias)
        columns = {c: look_col(c) for c in self.recorded}
        self.points.append(Point(len(self.points), dict(combo), columns,
                                 self._config(combo, ref, workload, machine or refusal, hw_over, where), key, contents,
                                 self._notes(workload, machine)))

    def _config(self, combo: dict[str, Any], ref: str, workload: Workload, machine: Machine | Refused,
                hw_over: tuple, where: str) -> dict[str, Any]:
        """What the worker gets: the point's own source (its errors name it) and the fields its axes set; for a point
        its machine refused, the refusal, which the worker records as the point's error row."""
        source = point_source(str(self.spec.source), combo, ref)
        resolved = {f"hw.{path}": self.res.hw_path(ref, path, where) for path, _ in hw_over}
        fields = axis_fields(combo, resolved)
        if isinstance(machine, Refused):
            return dict(refused=f"ConfigError: {attributed(str(machine), source, fields)}")
        return dict(workload=file_dict(workload), workload_source=str(self.res.wl_path), machine=file_dict(machine),
                    machine_source=source, serving=self.serving, fields=fields)

    def _notes(self, workload: Workload, machine: Machine | None) -> tuple[str, ...]:
        if machine is None:
            return ()
        pair = (id(workload), id(machine))
        if pair not in self.notes:
            self.notes[pair] = _input_notes(workload, machine)
        return self.notes[pair]


def refused_key(workload: Workload, ref: str, overrides: tuple, contents: dict[str, str]) -> str:
    """The store's key of a point whose machine refused its values: the workload, the preset and the values."""
    blob = json.dumps({"refused": ref, "workload": workload.model_dump(mode="json"),
                       "overrides": [(p, v.factor if isinstance(v, Scaled) else v) for p, v in overrides],
                       "files": sorted(contents.values()), "sim": sim.__version__}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


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

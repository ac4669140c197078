"""`--set KEY=VALUE`: the one rule every subcommand follows.

- KEY is a dotted path into the file the subcommand reads (`batch`,
  `formats.weights`, `serving.arrivals.rate`); an optional `workload.` prefix is
  dropped. A key starting `hw.` names a field of the hardware preset instead
  (`hw.memory.hbm.bandwidth_bytes_per_s`), and there `@device` stands for the
  machine's device memory tier and `@main` for its main unit, as in sweeps
  (`hw.memory.@device.bandwidth_bytes_per_s=2e12`).
- VALUE is read as YAML: `16` is an int, `1.5` a float, `true` a bool, `[1, 2]` a
  list, `int4` a string. Text YAML cannot read stays the plain string. (YAML 1.1 reads
  `2e12` as a string; the schemas turn it into a number where a number is expected.)
- A hardware VALUE `Nx` (`2x`, `0.5x`) is N times the preset's own value of that field, in SI (a what-if as a
  factor, as a sweep's `scale:` axis): `hw.memory.@device.bandwidth_bytes_per_s=2x`.
- A later item for the same key wins.
- An item without `=`, with an empty key or with an empty part in the key
  (`a..b`, `hw.`) is refused in one line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import yaml

from sim.core.errors import ConfigError
from sim.core.units import dimension_of, parse_quantity

HW_PREFIX = "hw."
WORKLOAD_PREFIX = "workload."
# Stand-ins in a hardware path, resolved against the machine being loaded.
HW_ALIASES = ("@device", "@main")


@dataclass(frozen=True)
class Settings:
    """`--set` items split by what they override."""

    workload: dict[str, Any] = field(default_factory=dict)   # dotted key -> value
    hw: dict[str, Any] = field(default_factory=dict)         # dotted key without 'hw.' -> value


def _item(item: str) -> tuple[str, Any]:
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set batch=16")
    if any(not part.strip() for part in key.split(".")):
        raise ConfigError(f"--set {item!r}: empty part in the dotted key {key!r}, e.g. --set formats.weights=int4")
    try:
        return key, yaml.safe_load(value)
    except yaml.YAMLError:
        return key, value


def parse_set(items: list[str] | None) -> dict[str, Any]:
    """`--set key=value` items into {dotted key: YAML-parsed value} (the rule above)."""
    return dict(_item(item) for item in items or [])


def split_settings(items: list[str] | None, extra: dict[str, Any] | None = None) -> Settings:
    """`--set` items (then `extra`, e.g. a flag that is a shorthand for one) split into
    workload and hardware overrides."""
    sets = parse_set(items) | (extra or {})
    return Settings(workload={k.removeprefix(WORKLOAD_PREFIX): v for k, v in sets.items() if not k.startswith(HW_PREFIX)},
                    hw={k.removeprefix(HW_PREFIX): v for k, v in sets.items() if k.startswith(HW_PREFIX)})


def hw_only(settings: Settings, command: str) -> dict[str, Any]:
    """The hardware overrides of a subcommand that reads no workload file."""
    if settings.workload:
        key = next(iter(settings.workload))
        raise ConfigError(f"--set {key}: sim {command} reads no workload; only hw.* settings apply here")
    return settings.hw


def resolve_aliases(path: str, aliases: dict[str, str]) -> str:
    """`memory.@device.bandwidth_bytes_per_s` with each alias part replaced."""
    return ".".join(aliases.get(part, part) for part in path.split("."))


_FACTOR = re.compile(r"\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*x\s*")   # signed: -2x is refused as a factor, not a unit


class FactorError(ValueError):
    """A factor of a field that has no number to scale (`product` None), or a count the factor leaves fractional."""

    def __init__(self, node: Any, product: float | None = None, missing: str | None = None):
        super().__init__(node, product)
        self.node, self.product, self.missing = node, product, missing   # missing: the first key the tree lacks


def scaled(tree: dict[str, Any], key: str, factor: float) -> int | float:
    """`factor` times the number at dotted `key` of `tree` (a preset as a mapping, SI): the one rule of `--set hw.X=Nx`
    (relative) and a sweep's `scale:` axis. A kind's section keeps its quantities as written ('2 GiB'), which are
    parsed; a count stays a count (pim.stacks x 2 is 10, not 10.0, which the schema refuses). FactorError else."""
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise FactorError(None, missing=part)
        node = node[part]
    if isinstance(node, str):
        try:
            node = parse_quantity(node, dimension_of(key.rsplit(".", 1)[-1]))
        except ValueError:
            pass
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise FactorError(node)
    out = node * factor
    if isinstance(node, int):
        if out != int(out):
            raise FactorError(node, out)
        return int(out)
    return out


def relative(value: Any, own: Callable[[], dict[str, Any]], key: str, where: str) -> Any:
    """`value`, or where it reads `Nx`, N times the number at dotted `key` of `own()` (scaled):
    `--set hw.X=2x` read as a unit and was refused ("unknown unit 'x'", an architect's trial)."""
    m = _FACTOR.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        return value
    factor = float(m.group(1))
    if not 0 < factor < math.inf:   # as a sweep's scale: factors (sim.apps.sweep.spec.Scale): 1e400x overflowed
        raise ConfigError(f"{where}: {value!r}: a factor must be a finite number above 0")
    try:
        return scaled(own(), key, factor)
    except FactorError as exc:
        if exc.missing is not None:   # a typo (`hmb`) had read "it has no number there (None)"
            raise ConfigError(f"{where}: {value!r} scales the preset's own figure, and the preset has no "
                              f"{exc.missing!r} there: check the key (`sim hw show PRESET` lists them), or give a "
                              "number where the figure is derived (a PCIe link's rate: its generation and lanes)"
                              ) from None
        if exc.node is None:   # a figure left to its default (power_limit_w: the TDP)
            raise ConfigError(f"{where}: {value!r} scales the preset's own figure, and the preset leaves this one "
                              "to its default: give a number") from None
        if exc.product is None:
            raise ConfigError(f"{where}: {value!r} is a factor of the preset's value, and it has no number there "
                              f"({exc.node!r})") from None
        raise ConfigError(f"{where}: {value!r} of {exc.node} is {exc.product:g}, not a whole number") from None


def has_alias(path: str) -> bool:
    return any(part in HW_ALIASES for part in path.split("."))


def dotted_items(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """A nested mapping as (dotted key, value) leaves, the keys `--set hw.KEY=VALUE` takes (`sim hw show
    --format csv`, sim diff's hardware rows); an empty mapping has none."""
    if isinstance(data, dict):
        return [row for k, v in data.items() for row in dotted_items(v, f"{prefix}{k}.")]
    if isinstance(data, list) and any(isinstance(v, (dict, list)) for v in data):
        return [row for i, v in enumerate(data) for row in dotted_items(v, f"{prefix}{i}.")]
    return [(prefix.rstrip("."), data)]

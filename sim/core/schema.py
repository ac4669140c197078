"""Shared helpers for pydantic schemas: quantities with units, and errors that
name the file and the key."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, ValidationInfo

from sim.core.errors import ConfigError
from sim.core.units import dimension_of, parse_quantity


def _quantity(value: Any, info: ValidationInfo) -> float:
    """The field's name says its unit (`bandwidth_bytes_per_s`), so a quantity in
    another dimension (`10 GB` there) is refused; a plain number is taken as SI."""
    try:
        out = parse_quantity(value, dimension_of(info.field_name or ""))
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if not math.isfinite(out):
        raise ValueError(f"must be a finite number, got {value!r}")
    return out


Quantity = Annotated[float, BeforeValidator(_quantity)]
M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Base for every config section: unknown keys are errors, values are frozen."""

    # NaN and infinities are never a valid figure (a NaN peak made runs silently fast).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def validation_error(exc: ValidationError, source: str, prefix: str = "") -> ConfigError:
    """One line naming the file and the first offending key."""
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
    if prefix:
        key = f"{prefix}.{key}" if key else prefix
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif err["type"] == "missing":
        msg = "required key is missing"
    msg = msg.removeprefix("Value error, ")
    return ConfigError(f"{source}: {key}: {msg}" if key else f"{source}: {msg}")


def validate_mapping(model: type[M], raw: Any, source: str, expected: str) -> M:
    """A config file's top-level mapping through its schema: `model` gets the fields plus
    `source` (the file, for later messages); a non-mapping or an invalid field is one line."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected {expected} at the top level")
    try:
        return model.model_validate({**raw, "source": source})
    except ValidationError as exc:
        raise validation_error(exc, source) from None


def read_yaml(path: Path) -> Any:
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; expected a YAML file")
    if not path.is_file():
        raise ConfigError(f"{path}: file not found")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: malformed YAML{at}: {problem}") from None


def set_dotted(tree: dict[str, Any], path: str, value: Any, source: str = "override") -> None:
    """Set `a.b.c` in a nested dict. Every key but the last must exist, so a
    typo fails at once instead of silently adding a field."""
    keys = path.split(".")
    node: Any = tree
    for i, key in enumerate(keys[:-1]):
        if not isinstance(node, dict) or key not in node:
            raise ConfigError(f"{source}: {'.'.join(keys[: i + 1])}: no such field")
        node = node[key]
    if not isinstance(node, dict):
        raise ConfigError(f"{source}: {path}: parent is not a mapping")
    node[keys[-1]] = value

"""Shared helpers for pydantic schemas: quantities with units, and errors that
name the file and the key."""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args, get_origin

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, ValidationInfo

from sim.core.errors import ConfigError
from sim.core.files import note_input
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
    dim = dimension_of(info.field_name or "")
    if dim in _RATES and 0 < out < RATE_FLOOR:   # a negative rate is the field's own error (greater than 0)
        # No memory, link or unit of an inference machine moves less than a megabyte or computes less than a
        # megaFLOP a second: such a figure is a unit left out (an architecture trial's `bandwidth_bytes_per_s=3.35`,
        # meant as TB/s, ran at 3.35 B/s: TTFT 2.1e10 s, exit 0); below one a second every time had overflowed.
        bare = out >= 1 and (isinstance(value, (int, float)) or not str(value).strip().lstrip("+-.0123456789eE"))
        # which prefix was meant, the number does not say (864 an L40S's GB/s, 3.35 an H100's TB/s, 25 a link's
        # GB/s): both are named (a review: a guessed prefix read 25 for a NIC as TB/s)
        hint = (f": a bare number is in {_RATES[dim]}; give the unit, e.g. '{out:g} G{_RATES[dim]}' or "
                f"'{out:g} T{_RATES[dim]}'") if bare else ""
        raise ValueError(f"{value!r} is below 1 M{_RATES[dim]}: out of any physical range{hint}")
    return out


_RATES = {"bytes/s": "B/s", "flop/s": "FLOP/s"}
RATE_FLOOR = 1e6   # per second: the floor of a plausible bandwidth (bytes) or compute rate (FLOP), above


Quantity = Annotated[float, BeforeValidator(_quantity)]


def supported_versions(*versions: int) -> BeforeValidator:
    """The check of a file's format `version:` key: a version this sim cannot read is refused (a hardware
    designer's trial: `version: 2` was read silently as version 1)."""

    def check(value: Any) -> Any:
        if isinstance(value, bool) or value not in versions:   # `true` is no version, though it equals 1
            raise ValueError(f"unsupported version {value!r}; supported: {', '.join(map(str, versions))}")
        return value
    return BeforeValidator(check)


M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Base for every config section: unknown keys are errors, values are frozen."""

    # NaN and infinities are never a valid figure (a NaN peak made runs silently fast).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _loc(err: Any) -> tuple[str, ...]:
    """An error's key path, without pydantic's validator steps (`function-after[...]`)."""
    return tuple(str(p) for p in err["loc"] if not str(p).startswith("function-"))


def _message(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown key"
    if err["type"] == "missing":
        return "required key is missing"
    return err["msg"].removeprefix("Value error, ")


def _typo(errors: list[Any]) -> tuple[tuple[str, ...], str] | None:
    """A required key missing beside an unknown key is most often one typo (`capacity_byte` for
    `capacity_bytes`): (path, message) that names the key the user wrote, and the one it likely
    meant, for the first error when it is such a pair; None otherwise."""
    first = errors[0]
    if first["type"] not in ("missing", "extra_forbidden") or not _loc(first):
        return None
    parent = _loc(first)[:-1]
    beside = [e for e in errors if _loc(e)[:-1] == parent]
    missing = [_loc(e)[-1] for e in beside if e["type"] == "missing"]
    unknown = [_loc(e)[-1] for e in beside if e["type"] == "extra_forbidden"]
    if not missing or not unknown:
        return None
    for key in unknown:
        near = difflib.get_close_matches(key, missing, n=1, cutoff=0.6)
        if near:
            return (*parent, key), f"unknown key (did you mean {near[0]}?)"
    if first["type"] == "missing":   # no near name: still say what was written instead
        return _loc(first), f"required key is missing; unknown key beside it: {', '.join(unknown)}"
    return None


def _missing_tag(err: Any, raw: Any) -> tuple[tuple[str, ...], str] | None:
    """A tagged union's mapping without its tag key (pydantic's "Unable to extract tag using discriminator
    'process'" for `arrivals: {proces: poisson}`, a serving trial): the key written instead where one is near, else
    the tag key as missing; None for other errors."""
    if err["type"] != "union_tag_not_found":
        return None
    tag = str((err.get("ctx") or {}).get("discriminator", "")).strip("'\"")
    node = raw
    for part in _loc(err):
        node = node.get(part) if isinstance(node, dict) else None
    near = difflib.get_close_matches(tag, [k for k in node if isinstance(k, str)], n=1, cutoff=0.6) \
        if isinstance(node, dict) else []
    if near:
        return (*_loc(err), near[0]), f"unknown key (did you mean {tag}?)"
    return (*_loc(err), tag), "required key is missing"


def _as_written(loc: tuple[str, ...], raw: Any) -> tuple[tuple[str, ...], str]:
    """`loc` without the steps the file does not have: a tagged union's tag (`serving.arrivals.closed.concurrency`
    for the `concurrency` under `arrivals: {process: closed}`) names no key of the user's; and the last tag as the
    file writes it (`process: closed`), or ''."""
    out, node, tag = [], raw, ""
    for part in loc:
        if isinstance(node, dict) and part not in node and part in {v for v in node.values() if isinstance(v, str)}:
            tag = next(f"{k}: {v}" for k, v in node.items() if v == part)
            continue   # the tag: the value of the mapping's discriminator key (process: closed), not a key
        out.append(part)
        node = node.get(part) if isinstance(node, dict) else (
            node[int(part)] if isinstance(node, list) and part.isdigit() and int(part) < len(node) else None)
    return tuple(out), tag


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (itself, or inside Optional / Annotated / a union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in get_args(annotation) for m in _models_in(a)]


def _keys_at(model: type[BaseModel] | None, parent: tuple[str, ...]) -> list[str]:
    """The keys a file may write at `parent` under `model` ([] where the path leaves the models: a mapping of
    free keys). A tagged union's tag in the path (`vllm` of `scheduler: {kind: vllm}`, as pydantic reports it) picks
    the member whose discriminator takes that value, so a misspelt key there gets its neighbour too."""
    if not parent and hasattr(model, "file_keys"):   # a model whose file holds more than its fields (Workload)
        return model.file_keys()
    models = [model] if model is not None else []
    free = False   # the last part was a mapping of the file's own names (`units: {gpu: ...}`): this part is one
    for part in parent:
        if free:
            free = False
            continue
        hit = next((m for m in models if part in m.model_fields), None)
        if hit is not None:
            free = _is_mapping(hit.model_fields[part].annotation)
        models = _models_in(hit.model_fields[part].annotation) if hit is not None else [
            m for m in models if any(part in get_args(f.annotation) for f in m.model_fields.values())][:1]
    return [k for k in models[0].model_fields if k != "source"] if models else []


def _is_mapping(annotation: Any) -> bool:
    """Whether an annotation is a dict (or an optional one): its keys are the file's names, not the schema's."""
    return get_origin(annotation) is dict or any(get_origin(a) is dict for a in get_args(annotation))


def _unknown_key(errors: list[Any], model: type[BaseModel] | None) -> str | None:
    """"unknown key (did you mean batch?)" for a misspelt key the model can name the neighbours of, else the keys
    there (README: "an unknown key is refused with the list of them"; `bacth: 4` read only "unknown key")."""
    first = errors[0]
    keys = _keys_at(model, _loc(first)[:-1]) if first["type"] == "extra_forbidden" and _loc(first) else []
    if not keys:
        return None
    near = difflib.get_close_matches(str(_loc(first)[-1]), keys, n=1, cutoff=0.6)
    return f"unknown key (did you mean {near[0]}?)" if near else f"unknown key; keys here: {', '.join(keys)}"


def validation_error(exc: ValidationError, source: str, prefix: str = "", raw: Any = None,
                     model: type[BaseModel] | None = None) -> ConfigError:
    """One line naming the file and the first offending key (or the typo behind it), as the file writes it;
    with the `model` validated against, a misspelt key's nearest neighbour or the keys it could be."""
    errors = exc.errors()
    loc, msg = _typo(errors) or _missing_tag(errors[0], raw) or (_loc(errors[0]), _unknown_key(errors, model)
                                                                  or _message(errors[0]))
    loc, tag = _as_written(loc, raw) if raw is not None else (loc, "")
    if tag and msg.startswith("unknown key"):   # `rate` under a closed loop: not a key of that kind (a trial)
        msg = msg.replace("unknown key", f"unknown key for {tag}", 1)
    key = ".".join((prefix, *loc) if prefix else loc)
    return ConfigError(f"{source}: {key}: {msg}" if key else f"{source}: {msg}")


def validate_mapping(model: type[M], raw: Any, source: str, expected: str) -> M:
    """A config file's top-level mapping through its schema: `model` gets the fields plus
    `source` (the file, for later messages); a non-mapping or an invalid field is one line."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected {expected} at the top level")
    try:
        return model.model_validate({**raw, "source": source})
    except ValidationError as exc:
        raise validation_error(exc, source, raw=raw, model=model) from None


class DuplicateKey(ValueError):
    """A JSON object that gives one key twice."""


def unique_json_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object hook refusing a key given twice (json.loads keeps the last one without a word)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


class _UniqueKeys:
    """Refuses a key given twice in one mapping (PyYAML keeps the last); mixed into a SafeLoader."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):
                continue  # an unhashable key fails in the base class with its own message
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return yaml.constructor.SafeConstructor.construct_mapping(self, node, deep=deep)


class _UniqueKeyLoader(_UniqueKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """libyaml's C parser where PyYAML has it: the pure-Python one took a third of a `stack: vllm` run reading the
    stack's tables (a performance trial: 8.4x faster on the presets, the same documents)."""


class _PyUniqueKeyLoader(_UniqueKeys, yaml.SafeLoader):
    """The pure-Python parser, whose error messages name more (a tab, an undefined alias): only a file the C parser
    refused is read again with it (a review)."""


# A document whose aliases expand past this many values (a "billion laughs") is refused:
# YAML shares aliased nodes, but every copy, dump and sweep expansion walks them all.
MAX_YAML_VALUES = 1_000_000


def _expanded_size(doc: Any) -> int:
    """Values in `doc` with every alias expanded, counted without expanding (memo by id)."""
    memo: dict[int, int] = {}

    def size(node: Any) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        if id(node) in memo:
            return memo[id(node)]
        memo[id(node)] = 1  # a cycle counts once; safe_load cannot build one anyway
        children = node.values() if isinstance(node, dict) else node
        memo[id(node)] = total = 1 + sum(min(size(c), MAX_YAML_VALUES + 1) for c in children)
        return total

    return size(doc)


def not_a_file(path: Path, missing: str = "file not found", expected: str = "a file") -> str | None:
    """Why `path` cannot be read as an input file, or None when it can. A device or FIFO
    (/dev/null, /dev/zero, a named pipe) is refused: it exists, so "not found" would mislead,
    and /dev/zero would be read forever."""
    if path.is_file():
        return None
    if path.is_dir():
        return f"is a directory; expected {expected}"
    return "not a regular file (a device, FIFO or socket)" if path.exists() else missing


def require_file(path: Path, missing: str = "file not found", expected: str = "a file") -> None:
    """Raise the one-line error of `not_a_file`, naming the path, unless `path` is a readable file."""
    problem = not_a_file(path, missing, expected)
    if problem:
        raise ConfigError(f"{path}: {problem}")
    note_input(path)  # no output of this command may replace it


def read_yaml(path: Path) -> Any:
    require_file(path, expected="a YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a YAML file: binary data (not UTF-8 text)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        try:
            doc = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError:   # the pure-Python parser's words for the error: it names a tab, an alias (a review)
            doc = yaml.load(text, Loader=_PyUniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: malformed YAML{at}: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{path}: malformed YAML: nested too deeply") from None
    if _expanded_size(doc) > MAX_YAML_VALUES:
        raise ConfigError(f"{path}: YAML aliases expand to more than {MAX_YAML_VALUES:,} values; refused")
    return doc


def set_dotted(tree: dict[str, Any], path: str, value: Any, source: str = "override") -> None:
    """Set `a.b.c` in a nested dict. Every key but the last must exist, so a
    typo fails at once instead of silently adding a field."""
    keys = path.split(".")
    node: Any = tree
    for i, key in enumerate(keys[:-1]):
        if not isinstance(node, dict) or key not in node:   # as a misspelt last key reads, with the keys there (an
            # architecture trial's memory.gddr on an H100, whose tier is hbm, read only "unknown key")
            there = f"; keys here: {', '.join(map(str, node))}" if isinstance(node, dict) and node else ""
            raise ConfigError(f"{source}: {'.'.join(keys[: i + 1])}: unknown key{there}")
        node = node[key]
    if not isinstance(node, dict):
        parent = ".".join(keys[:-1])
        if keys[0] == "model" and isinstance(node, str):   # a preset name or a config.json path, not its fields
            raise ConfigError(f"{source}: {path}: model is {node!r}, a name, not a mapping of fields; to change "
                              f"{keys[-1]}, give the model as an inline mapping or a config.json / model YAML "
                              "(docs/models.md)")
        raise ConfigError(f"{source}: {path}: {parent} is {node!r}, not a mapping")
    node[keys[-1]] = value


def collect_sections(raw: Any, owned: set[str], drop_none: bool = False) -> Any:
    """A file's top-level keys that a hardware kind owns, moved into `sections` (kept as
    given; the owning kind validates them). `drop_none`: `key: null` means no section.
    The inverse of `file_dict`."""
    if not isinstance(raw, dict) or not owned & raw.keys():
        return raw
    rest = {k: v for k, v in raw.items() if k not in owned}
    given = {k: raw[k] for k in sorted(owned & raw.keys()) if not (drop_none and raw[k] is None)}
    return {**rest, "sections": {**rest.get("sections", {}), **given}}


def file_dict(model: BaseModel) -> dict[str, Any]:
    """A validated workload or preset as its file would give it: the sections a
    hardware kind owns (`sections`) back at the top level."""
    out = model.model_dump()
    out.update(out.pop("sections", None) or {})
    return out

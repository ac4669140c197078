"""Every project name the documents cite still exists in the tree.

The documents (docs/*.md, README.md) cite code three ways; each must resolve in
whatever tree the test runs on (no list of names is kept here, so files may move as
long as the documents move with them):
- a dotted path from a package root, `sim.core.errors.ConfigError`: the longest
  importable module prefix, then attributes;
- a file path, `hw_models/gpu/parallel.py` or `sim/apps/chrome_trace.chrome_trace`:
  the file or folder exists (then the attribute, when one follows a module's path);
- a backticked `module.name` or `Class.name` whose first part is a project module's
  or a top-level name's: the name is an attribute (or a dataclass or schema field) of
  one of them. A setting or a data field is not checked: a name whose first part is a
  section of a shipped YAML file or a --set prefix (`formats.weights`, `spatial.groups`,
  `workload.batch`, not attributes of the modules of those names), or whose last part is a
  key of a YAML file or a name the code uses as data (a keyword argument, a string key, a
  schema field: `energy.per_request_j` is a field of the JSON `sim serve` writes). What the check catches is a name that exists
  nowhere any more: a renamed or deleted function or class.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from sim.core.settings import HW_PREFIX, WORKLOAD_PREFIX
from tests.conftest import ROOT

PACKAGES = ("sim", "hw_models")
FILE_SUFFIXES = {"py", "yaml", "yml", "json", "csv", "png", "md", "toml", "sqlite", "parquet", "gz", "txt", "npy"}
IDENT = r"[A-Za-z_][A-Za-z_0-9]*"
QUALIFIED = re.compile(rf"\b(?:{'|'.join(PACKAGES)})(?:\.{IDENT})+")
FILE_PATH = re.compile(rf"\b(?:{'|'.join(PACKAGES)})/[A-Za-z_0-9/.*-]*[A-Za-z_0-9/]")
BACKTICKED = re.compile(rf"`({IDENT}(?:\.{IDENT})+)(?:\(\))?`")


def documents() -> list[Path]:
    return sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]


def _sources() -> list[Path]:
    return [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _index() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Module basename -> modules, and top-level name -> modules defining it (read, not imported)."""
    by_base: dict[str, list[str]] = {}
    by_name: dict[str, list[str]] = {}
    for path in _sources():
        mod = _module_name(path)
        by_base.setdefault(mod.rsplit(".", 1)[-1], []).append(mod)
        for node in ast.parse(path.read_text()).body:
            names = [node.name] if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) else \
                [t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)]
            for n in names:
                by_name.setdefault(n, []).append(mod)
    return by_base, by_name


@cache
def _data_words() -> frozenset[str]:
    """Names the code uses as data: keyword arguments, string keys of dict displays and
    annotated class fields (a schema's or a dataclass's)."""
    words: set[str] = set()
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg:
                words.add(node.arg)
            elif isinstance(node, ast.Dict):
                words.update(k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
            elif isinstance(node, ast.ClassDef):
                words.update(s.target.id for s in node.body
                             if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name))
    return frozenset(words) | _yaml_keys()[1]


@cache
def _yaml_keys() -> tuple[frozenset[str], frozenset[str]]:
    """Top-level and all mapping keys of the shipped YAML files (presets, stacks, workloads, sweeps)."""
    top: set[str] = set()
    keys: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            keys.update(str(k) for k in node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for path in ROOT.rglob("*.yaml"):
        if not {".venv", ".git", "node_modules"} & set(path.parts):
            try:
                raw = yaml.safe_load(path.read_text())
            except yaml.YAMLError:
                continue
            if isinstance(raw, dict):
                top.update(str(k) for k in raw)
            walk(raw)
    return frozenset(top), frozenset(keys)


def _setting_roots() -> frozenset[str]:
    """First parts of a setting's path: a file's sections and the --set/sweep prefixes."""
    return _yaml_keys()[0] | {HW_PREFIX.rstrip("."), WORKLOAD_PREFIX.rstrip(".")}


def _has(obj, name: str) -> bool:
    if hasattr(obj, name):
        return True
    fields = getattr(obj, "model_fields", None) or {}        # a pydantic schema's field
    if dataclasses.is_dataclass(obj):
        fields = {f.name for f in dataclasses.fields(obj)}
    return name in fields or name in getattr(obj, "__annotations__", {})


def _resolve(obj, attrs: list[str]) -> bool:
    for a in attrs:
        if not _has(obj, a):
            return False
        obj = getattr(obj, a, None)
        if obj is None:       # a field without a class-level value: nothing further to check
            return True
    return True


def _module_then_attrs(parts: list[str]) -> bool:
    """`a.b.c.d`: import the longest module prefix, then the rest as attributes."""
    for i in range(len(parts), 0, -1):
        try:
            mod = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        return _resolve(mod, parts[i:])
    return False


def qualified_ok(name: str) -> bool:
    return _module_then_attrs(name.split("."))


def path_ok(text: str) -> bool:
    text = text.rstrip("/.")
    if "*" in text:                                   # a glob: some file matches
        return any(ROOT.glob(text))
    if (ROOT / text).exists():
        return True
    stem, dot, attr = text.rpartition(".")               # `pkg/module.function`
    return bool(dot) and (ROOT / f"{stem}.py").is_file() and _module_then_attrs(stem.split("/") + [attr])


def backticked_ok(name: str) -> bool | None:
    """True or False for a project name; None when the name is not one of the project's."""
    first, *rest = name.split(".")
    if first in PACKAGES or rest[-1] in FILE_SUFFIXES or first in _setting_roots() or rest[-1] in _data_words():
        return None
    by_base, by_name = _index()
    if first not in by_base and first not in by_name:
        return None           # not the project's (torch.bmm, F.linear, an upstream repository's class)
    mods = [importlib.import_module(m) for m in by_base.get(first, [])]
    owners = [getattr(importlib.import_module(m), first, None) for m in by_name.get(first, [])]
    return any(_resolve(o, rest) for o in mods + owners if o is not None)


def cited_names() -> list[tuple[str, str]]:
    """(where, reason) for each cited name that does not resolve."""
    bad = []
    for doc in documents():
        for n, line in enumerate(doc.read_text().splitlines(), start=1):
            where = f"{doc.relative_to(ROOT)}:{n}"
            bad += [(where, f"{m}: not importable") for m in QUALIFIED.findall(line) if not qualified_ok(m)]
            bad += [(where, f"{m}: no such file, folder or attribute")
                    for m in FILE_PATH.findall(line) if not path_ok(m)]
            bad += [(where, f"`{m}`: no such module or class attribute")
                    for m in BACKTICKED.findall(line) if backticked_ok(m) is False]
    return bad


def test_every_cited_name_resolves():
    bad = cited_names()
    assert not bad, "\n".join(f"{w}: {r}" for w, r in bad)


@pytest.mark.parametrize("name, ok", [
    ("sim.core.errors.ConfigError", True), ("sim.core.errors.NoSuchError", False), ("sim.core.nowhere", False)])
def test_qualified(name, ok):
    assert qualified_ok(name) is ok


@pytest.mark.parametrize("text, ok", [
    ("sim/core/files.py", True), ("sim/core/", True), ("sim/core/files.check_output", True),
    ("sim/core/files.nothing", False), ("sim/core/nofile.py", False), ("hw_models/presets/*.yaml", True)])
def test_paths(text, ok):
    assert path_ok(text) is ok


@pytest.mark.parametrize("name, ok", [
    ("generation.simulate_generation", True), ("generation.step_time", False),   # the name issue 27 found stale
    ("errors.ConfigError", True), ("errors.NoSuchError", False),
    ("Workload.batch", None),            # a schema field: data, whoever owns it
    ("Workload.model_config_", True),
    ("Workload.no_such_field", False),
    ("torch.bmm", None), ("results.csv", None), ("formats.weights", None)])
def test_backticked(name, ok):
    assert backticked_ok(name) is ok

"""The strata (docs/architecture.md): sim.core <- hw_models <- sim.apps. import-linter
checks the direction (`lint-imports`, run by CI). Here: the module graph, imports
inside functions included, has no cycle, so no import inside a function dodges a
circle; and project imports inside functions appear only in command-line modules
(`cli.py`, or a name ending in `_cli.py` such as `hw_cli.py`), where they keep start-up fast (a subcommand's pandas or matplotlib
load only when it runs). Third-party imports inside functions are allowed anywhere
for the same reason. Plus the size limits: no library function over 60 lines, no
file over 400."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = [p for d in ("sim", "hw_models") for p in sorted((ROOT / d).rglob("*.py"))]
PROJECT = ("sim", "hw_models")
MAX_FUNCTION_LINES, MAX_FILE_LINES = 60, 400


def _function_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            out += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in PROJECT]
    return out


def test_no_project_import_inside_a_function_outside_the_command_line():
    found = [hit for p in LIBRARY if not p.name.endswith("cli.py") for hit in _function_imports(p)]
    assert not found, "imports of the project inside functions:\n" + "\n".join(found)


def test_no_import_cycle():
    grimp = pytest.importorskip("grimp")
    nx = pytest.importorskip("networkx")
    g = grimp.build_graph("sim", "hw_models", exclude_type_checking_imports=True)
    dag = nx.DiGraph((m, d) for m in g.modules for d in g.find_modules_directly_imported_by(m))
    cycles = sorted(nx.simple_cycles(dag), key=len)
    assert not cycles, f"{len(cycles)} import cycles, e.g. {' -> '.join(cycles[0])}"


def test_the_check_sees_a_hidden_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\n\ndef f():\n    from hw_models.registry import simulate\n    import numpy\n")
    hits = [h.split()[1] for h in _function_imports_at(f)]
    assert hits == ["hw_models.registry"]


def _function_imports_at(path: Path) -> list[str]:
    global ROOT
    saved, ROOT = ROOT, path.parent
    try:
        return _function_imports(path)
    finally:
        ROOT = saved


def test_small_functions_and_files():
    long_files = [f"{p.relative_to(ROOT)}: {n} lines" for p in LIBRARY
                  if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES]
    long_fns = []
    for p in LIBRARY:
        for fn in ast.walk(ast.parse(p.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = fn.end_lineno - fn.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long_fns.append(f"{p.relative_to(ROOT)}:{fn.lineno} {fn.name}: {n} lines")
    assert not long_files and not long_fns, "\n".join(long_files + long_fns)


LINT = Path(sys.executable).parent / "lint-imports"


@pytest.mark.skipif(not LINT.exists() and shutil.which("lint-imports") is None, reason="import-linter not installed")
def test_layers_contract_holds():
    r = subprocess.run([str(LINT) if LINT.exists() else "lint-imports"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:]

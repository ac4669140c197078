"""Start-up (issue 30): what a command imports, as a property of the module graph rather than a timing
(a timing fails on a loaded machine and passes a regression on an idle one). `sim --help` builds every
subcommand's parser and needs none of the libraries a simulation does; a serving run that writes no
file needs no pandas or matplotlib; a sweep's worker needs no pandas (the sweep's store does)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sim.core import model
from tests.test_sweep_serving import SERVE

ROOT = Path(__file__).resolve().parents[1]
# Each costs 50-500 ms to import on the reference machine; none is needed to print help.
HEAVY = ("pandas", "scipy", "matplotlib", "numpy", "pydantic", "rich.table", "simpy", "networkx", "pyarrow")

PROBE = """
import json, sys
from sim.apps.cli import main
try:
    code = main(json.loads(sys.argv[1]))
except SystemExit as exc:   # --help exits through argparse
    code = exc.code
print(json.dumps(dict(code=code, loaded=[m for m in json.loads(sys.argv[2]) if m in sys.modules])))
"""


def _loaded(argv: list[str], modules: tuple[str, ...], cwd: Path = ROOT) -> list[str]:
    """The `modules` that `sim ARGV` has imported when it returns (it must exit 0)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(modules)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=300)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["code"] == 0, r.stderr[-2000:]
    return out["loaded"]


@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["sweep", "--help"], ["run", "--help"],
                                  ["offload", "search", "--help"]])
def test_help_imports_no_heavy_library(argv):
    assert _loaded(argv, HEAVY) == []


def test_the_probe_sees_an_import():
    """The property test can fail: `sim model list` loads the model presets, and with them pydantic."""
    assert "pydantic" in _loaded(["model", "list"], HEAVY)


def test_a_serving_run_that_writes_no_file_loads_no_pandas(tmp_path):
    f = tmp_path / "serve.yaml"
    f.write_text(yaml.safe_dump(SERVE))
    assert _loaded(["serve", str(f), "--hw", "a6000", "-q", "--no-cache"], ("pandas", "matplotlib")) == []


def test_a_sweep_worker_loads_no_pandas():
    """A worker unpickles run_point by importing its module (sim.apps.sweep.point)."""
    r = subprocess.run([sys.executable, "-c", "import sys, sim.apps.sweep.point; "
                        "print([m for m in ('pandas', 'pyarrow', 'matplotlib') if m in sys.modules])"],
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "[]", r.stderr[-2000:]


def test_model_presets_read_by_libyaml_equal_the_pure_parser():
    text = (ROOT / "sim" / "core" / "data" / "models.yaml").read_text()
    assert model._presets() == yaml.safe_load(text)

"""One rule finds the shared measured data (sim.core.shared_data): SIM_SHARED_VALIDATION wins, else
../shared/validation beside the repo root; the tests (conftest) and every script take it from there."""

import os
import subprocess
import sys
from pathlib import Path

from sim.core.shared_data import ENV_VAR, REPO_ROOT, shared_validation_dir
from tests.conftest import ROOT


def test_env_var_wins():
    assert shared_validation_dir({ENV_VAR: "/some/where"}) == Path("/some/where")


def test_default_is_beside_the_repo_root():
    assert REPO_ROOT == ROOT   # the checkout under test, not another install of sim
    assert shared_validation_dir({}) == ROOT.parent / "shared" / "validation"


def test_conftest_and_a_script_honour_the_override(tmp_path):
    """A fresh process with the variable set: the tests' SHARED_VALIDATION and a script's module constant
    (energy_h200.MICRO, imported by h200_quant_b1 too) both point under it."""
    code = ("import sys; sys.path[:0] = ['scripts']; from tests.conftest import SHARED_VALIDATION as S; "
            "import energy_h200; print(S); print(energy_h200.MICRO)")
    env = {**os.environ, ENV_VAR: str(tmp_path), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[0] == str(tmp_path)
    assert out[1] == str(tmp_path / "h200" / "h200_micro.json")


def test_no_script_computes_the_path_itself():
    """The rule lives in one place: a script that spells the variable's lookup again has copied it."""
    copies = [p.name for p in (ROOT / "scripts").glob("*.py")
              if f'os.environ.get("{ENV_VAR}"' in p.read_text() or "environ[\"SIM_SHARED_VALIDATION\"]" in p.read_text()]
    assert copies == []


def test_the_survey_honours_the_override(monkeypatch, tmp_path):
    """`sim survey`'s default data folder (its own cwd-first search otherwise) follows the variable too."""
    from sim.apps.survey.cli import default_shared
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert default_shared() == tmp_path

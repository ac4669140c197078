"""Behaviour pins across refactors (scripts/golden.py): a subset of the recorded
cases (every preset on the 7B decode workload, two sweeps' first points) must
reproduce the stored metrics to a relative 1e-9. These are regression pins of the
code's own output, not model checks: a deliberate model change regenerates
tests/data/golden/golden_full.json (`python scripts/golden.py --out ...`) and says
which cases moved and why."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("golden", ROOT / "scripts" / "golden.py")
golden = importlib.util.module_from_spec(spec)
spec.loader.exec_module(golden)


@pytest.mark.parametrize("subset", ["llama2_7b_decode", "weight_formats", "pim_vs_hbm"])
def test_recorded_metrics_reproduce(subset, capsys):
    assert golden.main(["--check", str(ROOT / "tests/data/golden/golden_full.json"), "--subset", subset]) == 0, \
        capsys.readouterr().out

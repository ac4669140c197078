import atexit
import gc
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import settings

from sim.core.shared_data import shared_validation_dir

ROOT = Path(__file__).resolve().parents[1]
# ../shared/validation beside the checkout; SIM_SHARED_VALIDATION points elsewhere (a git worktree).
SHARED_VALIDATION = shared_validation_dir()

os.environ.setdefault("MPLBACKEND", "Agg")
# Some shells (this project's worktree machines among them) export PYTHONDONTWRITEBYTECODE=1, so every Python
# process a test starts (the CLI, scripts, workers: ~60 of them) recompiled all of sim from source: 0.1-0.15 s
# of CPU each. The tests' children write and reuse __pycache__ (git-ignored) instead; what they run is unchanged.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# The simulations build millions of small objects (graphs, ops, events) and few reference cycles, so
# Python's cyclic collector, at its default threshold (a young collection every 700 allocations), spends
# 10-14 % of a serving test's CPU finding next to nothing. Collect rarely, and never rescan what the
# imports made (gc.freeze). Objects are still freed by reference counting as before; only cycles wait.
gc.collect()
gc.freeze()
gc.set_threshold(100_000, 50, 100)
# Every serving run in the tests checks the run-wide invariants each iteration (sim.apps.serve.debug_checks).
os.environ.setdefault("SIM_SERVE_CHECKS", "1")
# The persistent step-cost tables (sim.apps.serve.tablecache) of every test and every process a test starts
# go to a fresh temporary folder, never the user's cache.
os.environ["SIM_CACHE_DIR"] = tempfile.mkdtemp(prefix="sim-test-cache-")
# ...and removed when the session ends: a leaked folder per run filled /tmp on a machine that ran the suite
# some four hundred times.
atexit.register(shutil.rmtree, os.environ["SIM_CACHE_DIR"], ignore_errors=True)
# Mutation testing (scripts/mutation_check.py) needs tests that give the same verdict on every run: there the
# property tests draw from hypothesis's fixed per-test seed (SIM_HYPOTHESIS_PROFILE=derandomized), so a fresh
# random draw cannot fail the clean run or a mutant by chance.
settings.register_profile("derandomized", derandomize=True, database=None)   # no replay of saved draws
if os.environ.get("SIM_HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["SIM_HYPOTHESIS_PROFILE"])


@pytest.fixture
def shared_validation() -> Path:
    if not SHARED_VALIDATION.is_dir():
        pytest.skip("../shared/validation is not present")
    return SHARED_VALIDATION


def write_serving_file(folder: Path, base: dict, edit=None, name: str = "s.yaml") -> Path:
    """`base` (a serving workload as data) written as YAML under `folder`, after `edit(serving section)`."""
    raw = json.loads(json.dumps(base))   # a deep copy: `edit` mutates it
    if edit:
        edit(raw["serving"])
    path = folder / name
    path.write_text(yaml.safe_dump(raw))
    return path

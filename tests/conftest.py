import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# ../shared/validation beside the checkout; SIM_SHARED_VALIDATION points elsewhere (a git worktree).
SHARED_VALIDATION = Path(os.environ.get("SIM_SHARED_VALIDATION", ROOT.parent / "shared" / "validation"))

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture
def shared_validation() -> Path:
    if not SHARED_VALIDATION.is_dir():
        pytest.skip("../shared/validation is not present")
    return SHARED_VALIDATION

"""Where the shared measured data live: one rule for the tests, the scripts and the apps.

The data (../shared/validation, read-only, never copied into the repo) sit beside the checkout.
A git worktree's parent has no shared/ folder, so the environment variable SIM_SHARED_VALIDATION
names the folder instead; when it is set it wins. In sim.core so every layer (and scripts/, tests/,
which put the repo root on sys.path first) can import it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

ENV_VAR = "SIM_SHARED_VALIDATION"
# The checkout this package was imported from (sim/core/shared_data.py -> repo root).
REPO_ROOT = Path(__file__).resolve().parents[2]


def shared_validation_dir(environ: Mapping[str, str] | None = None) -> Path:
    """$SIM_SHARED_VALIDATION when set, else ../shared/validation beside the repo root.
    Whether the folder exists is the caller's question (tests skip, scripts exit with a line)."""
    value = (os.environ if environ is None else environ).get(ENV_VAR)
    return Path(value) if value is not None else REPO_ROOT.parent / "shared" / "validation"

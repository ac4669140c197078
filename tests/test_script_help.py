"""Every script answers `--help` with its usage instead of starting its work, and refuses what it does not take."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "scripts").glob("*.py") if "__main__" in p.read_text())


def test_every_script_parses_its_command_line():
    """argparse of its own, or sim.apps.script_help.no_options for a script that takes no options."""
    silent = [p.name for p in SCRIPTS if "argparse" not in (t := p.read_text()) and "no_options(__doc__)" not in t
              and "script_args(__doc__" not in t]
    assert not silent, f"scripts that ignore --help: {silent}"


def test_help_prints_the_docstring_and_a_stray_option_is_refused_before_any_work():
    script = ROOT / "scripts" / "make_serve_trace.py"   # writes workloads/serving/mooncake_style.jsonl when it runs
    out = ROOT / "workloads" / "serving" / "mooncake_style.jsonl"
    before = out.stat().st_mtime_ns
    ok = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0 and "Mooncake's JSONL layout" in ok.stdout
    bad = subprocess.run([sys.executable, str(script), "--bogus"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "unrecognized arguments: --bogus" in bad.stderr
    assert out.stat().st_mtime_ns == before

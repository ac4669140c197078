"""`sim survey`: regenerate docs/survey.md and its plots."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from hw_models.machine import load_machine
from sim.core.files import check_output
from sim.apps.survey.runs import Setup
from sim.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]


def default_shared() -> Path:
    """../shared/validation beside the working directory's checkout, else beside this one."""
    for root in (Path.cwd(), REPO):
        candidate = root.parent / "shared" / "validation"
        if candidate.is_dir():
            return candidate
    return REPO.parent / "shared" / "validation"


def cmd_survey(args: argparse.Namespace) -> int:
    from sim.apps.survey.build import build   # pandas and matplotlib: only for this command
    machines = tuple(m.strip() for m in args.hw.split(",") if m.strip())
    if not machines:
        raise ConfigError("--hw: expected one or more preset names, e.g. --hw a6000,h200")
    for m in machines:
        if load_machine(m).kind != "gpu":
            raise ConfigError(f"--hw {m}: the survey's per-machine analyses need a gpu preset "
                              "(offload, PIM and spatial machines have their own sections)")
    plots = check_output(Path(args.out), directory=True)
    doc = check_output(Path(args.doc) if args.doc else plots.parent / f"{plots.name}.md")
    shared = Path(args.shared) if args.shared else default_shared()
    start = time.perf_counter()
    path, _ = build(Setup.make(machines, args.quick), REPO, shared, plots, doc)
    if not args.quiet:
        print(f"wrote {path} and its plots in {plots}/ ({time.perf_counter() - start:.1f} s)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("survey", help="redo the roofline survey's analyses, with measured points: docs/survey.md",
                       description="Regenerate the survey document (default docs/survey.md) and its plots "
                                   "(PNG, default docs/survey/).")
    p.add_argument("--hw", default="a6000,h200", help="comma-separated GPU presets (default a6000,h200)")
    p.add_argument("--out", default="docs/survey", metavar="DIR", help="folder for the plots (default docs/survey)")
    p.add_argument("--doc", metavar="PATH", help="the document (default: DIR.md beside the plot folder)")
    p.add_argument("--shared", metavar="DIR", help="shared validation data (default ../shared/validation)")
    p.add_argument("--quick", action="store_true", help="reduced sweeps (for CI)")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_survey)

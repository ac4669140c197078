"""`sim survey`: the survey document and its plots, in a new folder or (--update-docs) in docs/."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from sim.apps.progress import bar
from sim.core.files import check_output, transaction
from sim.core.errors import ConfigError
from sim.core.shared_data import ENV_VAR, shared_validation_dir

REPO = Path(__file__).resolve().parents[3]


def default_shared() -> Path:
    """$SIM_SHARED_VALIDATION when set (sim.core.shared_data, the rule the tests and scripts use), else
    ../shared/validation beside the working directory's checkout, else beside this one."""
    if ENV_VAR in os.environ:
        return shared_validation_dir()
    for root in (Path.cwd(), REPO):
        candidate = root.parent / "shared" / "validation"
        if candidate.is_dir():
            return candidate
    return REPO.parent / "shared" / "validation"


def _targets(args: argparse.Namespace) -> tuple[Path, Path]:
    """(plot folder, document). --update-docs: the committed docs/survey/ and docs/survey.md;
    else --out DIR (default a new folder survey-YYYYMMDD-HHMMSS here): DIR/survey/ and
    DIR/survey.md, so a trial run never overwrites the committed survey."""
    if args.update_docs:
        if args.out or args.doc:
            raise ConfigError("--update-docs writes docs/survey.md and docs/survey/; drop --out and --doc")
        if args.quick:
            raise ConfigError("--update-docs with --quick: the quick sweeps' figures hold no measurements; "
                              "the committed survey is regenerated in full")
        return REPO / "docs" / "survey", REPO / "docs" / "survey.md"
    out = Path(args.out) if args.out else Path(time.strftime("survey-%Y%m%d-%H%M%S"))
    if not args.out and out.exists():
        raise ConfigError(f"{out} exists; name a folder with --out DIR")
    plots = check_output(out / "survey", directory=True)
    return plots, check_output(Path(args.doc) if args.doc else out / "survey.md")


def cmd_survey(args: argparse.Namespace) -> int:
    from hw_models.machine import load_machine
    from sim.apps.survey.build import build   # pandas and matplotlib: only for this command
    from sim.apps.survey.runs import Setup

    machines = tuple(m.strip() for m in args.hw.split(",") if m.strip())
    if not machines:
        raise ConfigError("--hw: expected one or more preset names, e.g. --hw a6000,h200")
    for m in machines:
        if load_machine(m).kind != "gpu":
            raise ConfigError(f"--hw {m}: the survey's per-machine analyses need a gpu preset "
                              "(offload, PIM and spatial machines have their own sections)")
    plots, doc = _targets(args)
    shared = Path(args.shared) if args.shared else default_shared()
    if args.shared and not shared.is_dir():   # a mistyped folder ran without the measured rows (a trial)
        raise ConfigError(f"--shared {args.shared}: no such folder (the shared validation data; leave --shared out "
                          "to run without it, or give its path)")
    start = time.perf_counter()
    with transaction(), bar("survey sections", "sections", quiet=args.quiet) as update:
        # the document and every plot, or none of them (a section may fail late)
        path, _ = build(Setup.make(machines, args.quick), REPO, shared, plots, doc, args.update_docs, update)
    if not args.quiet:
        print(f"wrote {path} and its plots in {plots}/ ({time.perf_counter() - start:.1f} s)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("survey", help="redo the roofline survey's analyses, with measured points",
                       description="Write the survey document and its plots to a new folder (default "
                                   "survey-YYYYMMDD-HHMMSS/: survey.md and survey/*.png); --update-docs "
                                   "regenerates the committed docs/survey.md and docs/survey/ instead.")
    p.add_argument("--hw", default="a6000,h200", help="comma-separated GPU presets (default a6000,h200)")
    p.add_argument("--out", metavar="DIR", help="folder for survey.md and survey/ (default: a new "
                                                "survey-YYYYMMDD-HHMMSS folder here)")
    p.add_argument("--doc", metavar="PATH", help="the document (default: DIR/survey.md)")
    p.add_argument("--update-docs", action="store_true",
                   help="write the committed docs/survey.md and docs/survey/ (not with --quick)")
    p.add_argument("--shared", metavar="DIR", help="shared validation data (default ../shared/validation)")
    p.add_argument("--quick", action="store_true", help="reduced sweeps (for CI)")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_survey)

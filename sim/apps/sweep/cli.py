"""`sim sweep SPEC --out DIR` and `sim sweep export DIR --csv PATH | --parquet PATH`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from sim.apps.sweep import DEFAULT_MAX_POINTS
from sim.core import tables
from sim.core.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd


def cmd_sweep(args: argparse.Namespace) -> int:
    from sim.apps.sweep.run import run_sweep
    from sim.apps.sweep.store import load_results

    if args.spec == "export":
        return cmd_export(args)
    if args.target is not None:
        raise ConfigError(f"sim sweep: unexpected argument {args.target!r} (did you mean --out {args.target}?)")
    export_only = [f"--{k}" for k in ("csv", "parquet", "json") if getattr(args, k)]
    if export_only:   # they would be ignored: the run writes results.csv; export writes the others
        raise ConfigError(f"sim sweep: {', '.join(export_only)} write a finished sweep's results: "
                          f"sim sweep export DIR {export_only[0]} PATH (a run writes DIR/results.csv itself)")
    if not args.out:
        raise ConfigError("sim sweep: --out DIR is required (the results folder; rerun with the same one to resume)")

    if args.max_points is not None and args.max_points < 1:
        raise ConfigError(f"--max-points {args.max_points}: must be at least 1")
    s = run_sweep(args.spec, args.out, workers=args.workers, executor=args.executor,
                  progress=not args.quiet, plots=not args.no_plots,
                  max_points=args.max_points or DEFAULT_MAX_POINTS)
    df = load_results(args.out)   # once, for the best points, the failures and the refusal below
    if tables.report_wanted(args):
        _print_best(args.spec, df)
    if not args.quiet:
        print(f"{s.total} points: {s.skipped} already done, {s.ran} run now ({s.failed} failed)"
              + (f" at {s.points_per_s:.1f} points/s" if s.ran else "") + f"; results in {args.out}",
              file=sys.stderr)
        why = _failures(df)
        if why:
            print(f"not run, recorded as error rows (plots mark them): {why}", file=sys.stderr)
        for note in s.notes:   # each point runs with warnings off: what `sim run` would have said, once
            print(f"warning: {note}", file=sys.stderr)
        for path in s.changed:
            print(f"{path}: changed since the stored rows; the points that read it ran again", file=sys.stderr)
        if s.reused:
            ids = ", ".join(map(str, s.reused[:20])) + (", ..." if len(s.reused) > 20 else "")
            print(f"points {ids}: stored by an earlier run of this folder and reused (same resolved configuration)",
                  file=sys.stderr)
    _refuse_if_none_ran(args.spec, args.out, df)
    return 0


def _refuse_if_none_ran(spec: str, out: str, df: "pd.DataFrame") -> None:
    """A sweep whose every point failed exits 2 naming the commonest error (a sweep trial's 24 points all failed,
    18 on a parallel.topology that no axis set, and the sweep exited 0 with no metric column); the error rows stay
    stored, as any failed point's do."""
    from sim.apps.sweep.blame import without_point

    if "status" not in df.columns or len(df) == 0 or (df["status"] == "ok").any():
        return
    # the same error at every point names each point: counted without the point's own label
    errors = df["error"].fillna("").astype(str).map(without_point).value_counts()
    raise ConfigError(f"{spec}: all {len(df)} points failed (error rows in {out}); the commonest, "
                      f"{errors.iloc[0]} of them: {errors.index[0]}")


def _failures(df: "pd.DataFrame") -> str:
    """Why the stored points failed, counted: "6 out of memory (CapacityError)" says they are the
    expected points that do not fit, not a crash."""
    from sim.apps.sweep.plots import failure_kinds

    return failure_kinds(df[df["status"] != "ok"]) if "status" in df.columns else ""


def _print_best(spec_path: str, results: "pd.DataFrame") -> None:
    """A table of the best point for each of the spec's `metrics`: one line per metric,
    its value with a unit, and the axis values where it was reached."""
    from sim.apps.sweep.energy import models_note, pim_note
    from sim.apps.sweep.expand import is_serving
    from sim.apps.sweep.names import for_kind
    from sim.apps.sweep.plots import labelled
    from sim.apps.sweep.spec import load_spec

    spec = load_spec(spec_path)
    spec = for_kind(spec, is_serving(spec))
    df = labelled(results)   # mapping-valued axes as short labels
    ok = df[df["status"] == "ok"] if "status" in df.columns else df
    if ok.empty:
        return
    for i, m in enumerate(spec.metrics):   # a metric of these points that none recorded (names.check_metrics refused
        if m not in ok.columns:            # the others): decode_energy_per_token_j without the board-power model
            print(f"warning: {spec_path}: metrics[{i}]: {m!r} is not a column of the results; left out", file=sys.stderr)
    from sim.apps.axes import factor_axes

    with factor_axes(spec.scaled_axes()):
        tables.console(stderr=tables.data_format() is None).print(best_table(spec, ok, len(df)))   # --format: data on stdout
    if {"batch_simulated", "workload.batch"} <= set(ok.columns):   # an offload policy's block under the batch asked
        fewer = int((ok["batch_simulated"] < ok["workload.batch"]).sum())
        if fewer:
            print(f"note: {fewer} point(s) simulated a smaller batch than their workload.batch (an offload policy's "
                  "block; the column batch_simulated says which): plotted at the batch asked", file=sys.stderr)
    for note in models_note(ok, list(spec.metrics)) + pim_note(ok, list(spec.metrics)) + _sized_chips(ok, spec.axes, str(spec.hw)):
        print(note, file=sys.stderr)


def _sized_chips(ok, axes, hw_name: str) -> list[str]:
    """A note where a spatial preset sized its chip count to each point (spatial.chips varies under one hw and no
    axis sets it): each such point is another machine (a trial read ipu_bow's TPOT falling with context, at 80 to
    728 chips)."""
    if "spatial.chips" not in ok.columns or any(a.endswith("spatial.chips") for a in axes):
        return []
    hw = ok["hw"] if "hw" in ok.columns else None
    groups = ok.groupby(hw) if hw is not None else [(hw_name, ok)]
    spans = [f"{name} {int(g['spatial.chips'].min())}-{int(g['spatial.chips'].max())}" for name, g in groups
             if g["spatial.chips"].nunique() > 1]
    return [f"note: the spatial chip count follows each point ({', '.join(spans)} chips): each is another machine; "
            "add an axis hw.spatial.chips to compare one"] if spans else []


def best_table(spec, ok, total: int):
    import pandas as pd

    from sim.apps.axes import is_number
    from sim.apps.sweep.energy import best_points
    from sim.apps.sweep.labels import axis_for, fmt_value
    from sim.apps.sweep.spec import default_goal

    from rich.table import Table
    from rich.text import Text


    t = Table(title=Text(f"{spec.name}: best points ({len(ok)} of {total} ran without error)"), title_justify="left")
    t.add_column("metric", no_wrap=True)
    t.add_column("best", no_wrap=True, justify="right")
    axes = {a: axis_for(a, ok[a].tolist()) for a in spec.axes}
    for ax in axes.values():  # the cells are bare numbers: the header says their unit, unless its name does (tokens)
        t.add_column(ax.label if ax.unit and ax.unit not in ax.name.split() else ax.name, overflow="fold")
    def cell(v, ax) -> str:
        return f"{v * ax.scale:.4g}" if is_number(v) else str(v)

    for m in spec.metrics:
        if m not in ok.columns or ok[m].isna().all():
            continue
        goal = default_goal(m)
        row, where, tied = best_points(ok, m, goal)
        # Points that tie name every value the axis they differ on takes (an energy trial read 300 W as the best
        # limit where 300, 400 and 700 W gave the same J/token: the cap bound at none); where they differ on more
        # than one axis, the lists would read as every combination (a review): those cells say they vary
        varying = [a for a in axes if tied[a].nunique() > 1]
        many = len(varying) > 1
        t.add_row(f"{goal} {axis_for(m).name}{where}",
                  fmt_value(m, row[m]) + (f" ({len(tied)} points tie{': results.csv lists them' if many else ''})"
                                          if len(tied) > 1 else ""),
                  *("(varies)" if many and a in varying else ", ".join(cell(v, ax) for v in pd.unique(tied[a]))
                    for a, ax in axes.items()))
    return t


def cmd_export(args: argparse.Namespace) -> int:
    from sim.apps.sweep.store import export

    if args.target is None:
        raise ConfigError("sim sweep export: expected the sweep's output folder, e.g. sim sweep export out/ --csv r.csv")
    for path in export(args.target, csv=args.csv, parquet=args.parquet, json_path=args.json):
        print(path, file=sys.stderr)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="architecture-exploration sweep over workload and hardware fields",
        description="sim sweep SPEC --out DIR runs a sweep file (resumable: rerun to finish the rest); "
                    "sim sweep export DIR --csv PATH | --parquet PATH | --json PATH writes its results table.")
    p.add_argument("spec", metavar="SPEC", help="sweep YAML file, or `export`")
    p.add_argument("target", nargs="?", metavar="DIR", help="with `export`: the sweep's output folder")
    p.add_argument("--out", metavar="DIR", help="output folder: results.sqlite, results.csv, plots/")
    p.add_argument("--workers", type=int, metavar="N", help="worker processes (default: all cores)")
    p.add_argument("--executor", metavar="KIND",
                   help="local (default), dask-local (a LocalCluster), or dask://HOST:PORT or tcp://HOST:PORT (a running scheduler)")
    p.add_argument("--no-plots", action="store_true", help="skip the plots (results.csv is still written)")
    p.add_argument("--max-points", type=int, metavar="N",
                   help=f"refuse sweeps expanding to more than N points (default {DEFAULT_MAX_POINTS:,})")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary")
    p.add_argument("--csv", metavar="PATH", help="export: write the results as CSV")
    p.add_argument("--parquet", metavar="PATH", help="export: write the results as Parquet")
    p.add_argument("--json", metavar="PATH", help="export: write the results as JSON, one object per point")
    p.set_defaults(func=cmd_sweep)

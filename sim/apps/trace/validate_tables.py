"""`sim validate`'s tables of a trace validation (sim.apps.trace.validate.Validation): the ops, the MAPE by op kind and
the steps end to end, each row with its trace where there are several, and each capture's launch note."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from sim.apps.trace.timing import DEVICE, launch_note
from sim.core import tables
from sim.core.units import fmt_time


def print_validation(v, args: argparse.Namespace) -> None:
    """The tables on stdout (--all: every row; else the first 60 ops and 40 steps)."""
    console = tables.console()
    # Several traces: each row names its own (a trace trial: 8 rows read step0.prefill, none attributable)
    names = short_names([r.source for r in v.steps])
    many = len(names) > 1
    trace_of = (lambda r: [names[r.source]]) if many else (lambda r: [])   # noqa: E731
    t = Table(title=f"measured vs simulated on {v.machine}" + (f" under stack {args.stack}" if args.stack else ""))
    for col in ("trace", "step", "op", "kind", "measured", "simulated", "error")[0 if many else 1:]:
        t.add_column(col, justify="right" if col in ("measured", "simulated", "error") else "left")
    rows = v.ops if args.all or len(v.ops) <= 60 else v.ops[:60]
    for r in rows:
        t.add_row(*trace_of(r), r.step, r.op, r.kind, fmt_time(r.measured_s), fmt_time(r.simulated_s),
                  f"{r.error:+.1%}")
    console.print(t)
    if len(rows) < len(v.ops):
        console.print(f"({len(v.ops) - len(rows)} more op rows; --all or --json for every row)")
    k = Table(title="MAPE by op kind")
    k.add_column("kind")
    k.add_column("ops", justify="right")
    k.add_column("MAPE", justify="right")
    for kind, m in v.mape_by_kind().items():
        k.add_row(kind, str(sum(r.kind == kind for r in v.ops)), f"{m:.1%}")
    k.add_row("overall", str(len(v.ops)), f"{v.mape:.1%}", style="bold")
    console.print(k)
    s = Table(title="end-to-end per step")
    for col in ("trace", "step", "measured", "simulated", "error", "measured as", "host wall (not compared)")[
            0 if many else 1:]:
        s.add_column(col)
    steps = v.steps if args.all or len(v.steps) <= 40 else v.steps[:40]
    for r in steps:
        wall = r.timing.host_wall_s if r.timing and r.measured_from == DEVICE else None
        s.add_row(*trace_of(r), r.step, fmt_time(r.measured_s), fmt_time(r.simulated_s), f"{r.error:+.1%}", r.measured_from,
                  fmt_time(wall) if wall else "-")
    console.print(s)
    for source in dict.fromkeys(r.source for r in v.steps):
        note = launch_note([r.timing for r in v.steps if r.source == source and r.timing])
        if note:
            console.print(f"{Path(source).name}: {note}")


def short_names(sources: list[str]) -> dict[str, str]:
    """Each source by the fewest trailing path parts that tell it from the others (vidur's tables are all mlp.csv,
    a folder per model: `Llama-2-7b-hf/mlp.csv#tp1`, a review), its `#` part kept."""
    distinct = list(dict.fromkeys(sources))
    parts = {s: Path(s).parts for s in distinct}
    for k in range(1, max((len(p) for p in parts.values()), default=1) + 1):
        short = {s: "/".join(p[-k:]) for s, p in parts.items()}
        if len(set(short.values())) == len(short):
            return short
    return {s: s for s in distinct}

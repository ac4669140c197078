"""`sim validate`, `sim replay` and `sim calibrate`."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sim.apps.arg_types import Once, positive
from sim.core import flags, tables

from sim.core.errors import ConfigError
from sim.core.units import fmt_time

if TYPE_CHECKING:
    from rich.console import Console

# rich's tables and the presets load inside each command: `sim --help` needs neither.


def _add_trace_args(p: argparse.ArgumentParser, many: bool = True) -> None:
    p.add_argument("traces", nargs="+" if many else None, metavar="TRACE",
                   help="torch Chrome trace (.json/.json.gz), capture_trace ops table (.ops.csv) or vidur table (mlp.csv)")
    p.add_argument("--model", help="model of a vidur Chrome trace when its folder does not say (e.g. llama2-7b)")
    p.add_argument("--tokens", type=positive(int), help="token count of a vidur Chrome trace when its name does not say")
    p.add_argument("--tp", type=positive(int), help="only this tensor-parallel degree of a vidur table")


# Kinds whose mappers cost one op or one folded layer at a time, as replay and validate
# need; offload and spatial mappers schedule whole models only.
REPLAY_KINDS = ("gpu", "cpu", "pim")


def _machine(spec: str, command: str, settings: list[str] | None = None, flag: str = "--hw"):
    from hw_models.machine import load_machine
    from sim.core.settings import hw_only, split_settings

    machine = load_machine(spec, hw_only(split_settings(settings), command))
    if machine.kind not in REPLAY_KINDS:
        raise ConfigError(f"{flag} {spec}: kind {machine.kind!r}; sim {command} supports "
                          f"{', '.join(REPLAY_KINDS)} presets (offload and spatial schedule whole models only)")
    return machine


def cmd_validate(args: argparse.Namespace) -> int:
    from sim.core.files import check_output, check_outputs, transaction, write_json
    from sim.apps.trace.load_inputs import load_distinct
    from sim.apps.trace.plots import scatter
    from sim.apps.trace.validate import validate
    from sim.apps.trace.validate_tables import print_validation

    if args.input_format == "aic":
        return _validate_aic(args)
    if args.hw is None:
        raise ConfigError("sim validate: --hw is required (a preset name or YAML file)")
    if args.limit is not None:   # it samples an aic table's rows; a trace's ops are all costed (a trace trial)
        print("note: --limit applies to --input-format aic tables only: every op of a trace is costed", file=sys.stderr)
    machine = _machine(args.hw, "validate", args.set)
    if args.plots:   # the one plot flag of every subcommand: a folder
        check_output(args.plots, directory=True)
        args.plot = str(Path(args.plots) / "validate_scatter.png")
    check_outputs({"--json": args.json, "--plot": args.plot})  # before the work, not after it
    v = validate(load_distinct(args, args.traces, machine), machine, stack=_stack(args.stack))
    _stack_note(args.stack, machine)
    with transaction():  # both outputs or neither
        if args.json:
            write_json(args.json, v.to_json())
        if args.plot:
            scatter(v.ops, f"{v.machine}: simulated vs measured", args.plot)
    if not tables.report_wanted(args):
        return 0
    print_validation(v, args)
    return 0


def _stack_note(stack: str | None, machine) -> None:
    """A note where --stack meets a preset that is not a GPU: the stacks model GPU engines' kernels."""
    if stack and machine.kind != "gpu":
        from hw_models.kinds import KINDS
        why = ("which runs no stack: each op is costed as without one" if not KINDS[machine.kind].runs_stack else
               "and the stacks model GPU engines' kernels: refitted on this machine's CPU traces a stack still read "
               "69% where no stack reads 29% (docs/validation.md)")
        print(f"note: --stack {stack}: {machine.name} is kind {machine.kind}, {why}", file=sys.stderr)


def _stack(spec: str | None) -> str | None:
    """`--stack`, checked before any work (an unknown name is one line, exit 2)."""
    if spec is not None:
        from hw_models.stack.spec import load_stack
        load_stack(spec)
    return spec


def _validate_aic(args: argparse.Namespace) -> int:
    from rich.table import Table

    from sim.core.files import check_output, write_json
    from sim.apps.trace.aic import HELD_OUT, gpu_sort_key, validate_tables

    for flag in ("plot", "plots", "model", "tokens", "tp", "set"):
        if getattr(args, flag):
            raise ConfigError(f"sim validate --input-format aic: --{flag} applies to traces, not to aiconfigurator tables")
    if args.json:
        check_output(args.json)
    v = validate_tables([Path(p) for p in args.traces], args.hw, _stack(args.stack), args.limit)
    if args.json:
        write_json(args.json, v.to_json())
    if not tables.report_wanted(args):
        return 0
    console = tables.console()
    by = v.mape_by_family()
    for held, title in ((False, "in-sample GPUs"), (True, "held-out GPUs (report only: never fitted on)")):
        keys = sorted((k for k in by if (k[0] in HELD_OUT) == held), key=lambda k: (gpu_sort_key(k[0]), k[1]))
        if not keys:
            continue
        t = Table(title=f"aiconfigurator per-op MAPE, {title}")
        for col in ("GPU", "family", "rows", "MAPE", "stack (collectives: algorithm)"):
            t.add_column(col, justify="right" if col in ("rows", "MAPE") else "left")
        for gpu, fam in keys:
            n, m = by[gpu, fam]
            stacks = sorted({r.stack or "-" for r in v.rows if r.gpu == gpu and r.family == fam})
            t.add_row(gpu, fam, str(n), f"{m:.1%}", ", ".join(stacks))
        console.print(t)
    if args.all:
        console.print(_aic_rows_table(v))
    for line in v.skipped:
        console.print(f"not costed: {line}")
    for line in v.notes:
        console.print(f"note: {line}")
    return 0


def _aic_rows_table(v):
    """--all: every row costed, by GPU and family, the largest |error| first (the shapes that miss)."""
    from rich.table import Table

    from sim.apps.trace.aic import HELD_OUT, gpu_sort_key

    t = Table(title=f"aiconfigurator rows ({len(v.rows)}), the largest |error| first in each family")
    for col in ("GPU", "family", "shape", "measured", "simulated", "error"):
        t.add_column(col, justify="left" if col in ("GPU", "family", "shape") else "right")
    for r in sorted(v.rows, key=lambda r: (gpu_sort_key(r.gpu), r.family, -abs(r.error))):
        t.add_row(r.gpu + (" (held out)" if r.gpu in HELD_OUT else ""), r.family, r.shape, fmt_time(r.measured_s),
                  fmt_time(r.simulated_s), f"{r.error:+.1%}")
    return t


def cmd_replay(args: argparse.Namespace) -> int:
    from sim.core.files import check_output, write_json
    from sim.apps.trace.load_inputs import load_traces
    from sim.apps.trace.replay import names_device, replay

    machine = _machine(args.hw, "replay", args.set)
    source = _machine(args.source_hw, "replay", flag="--source-hw") if args.source_hw else None
    stack = _stack(args.stack)
    if args.json:
        check_output(args.json)
    console = tables.console()
    for trace in load_traces(args, [args.traces]):
        if not trace.ops:   # sim validate refuses it too; replayed, every measured cell read "-" and it exited 0
            raise ConfigError(f"{trace.source}: no measured ops to replay (a header without rows?); sim run predicts "
                              "a workload without a trace")
        if source is not None and trace.device_name and not names_device(source.name, trace.device_name):
            print(f"warning: {trace.source}: measured on {trace.device_name}, but --source-hw {source.name} is "  # a trial
                  "another device: the scaled figures carry the two devices' difference", file=sys.stderr)
        r = replay(trace, machine, source, stack=stack)
        if args.json:   # the stack it was costed under, as validate's JSON says it (a trace trial)
            write_json(args.json, {**r.to_json(), "stack": args.stack})
        if not args.quiet:
            _print_replay(console, trace, r, args.all, args.stack)
    return 0


def _print_replay(console: Console, trace, r, show_all: bool, stack: str | None = None) -> None:
    from rich.table import Table

    src = r.source_machine or "-"
    under = f" under stack {stack}" if stack else ""   # it moves the prediction (11.8 -> 15.6 ms): said, as validate does
    t = Table(title=f"{Path(trace.source).name} ({trace.device_name or trace.device}) replayed on {r.machine}{under}; "
              f"measured = {r.measured_from}; scaled = measured x {r.machine}/{src} model ratio")
    for col in ("step", "op", "kind", "measured", "predicted", "scaled"):
        t.add_column(col, justify="left" if col in ("step", "op", "kind") else "right")
    shown = r.ops if show_all or len(r.ops) <= 60 else r.ops[:60]
    for o in shown:
        scaled = "-" if o.scaled_s is None else fmt_time(o.scaled_s) + ("" if o.scaled_from_measured else " (pred.)")
        t.add_row(o.step, o.op, o.kind, fmt_time(o.measured_s) if o.measured_s is not None else "-",
                  fmt_time(o.predicted_s), scaled)
    console.print(t)
    if len(shown) < len(r.ops):
        console.print(f"({len(r.ops) - len(shown)} more op rows; --all or --json for every row)")
    s = Table(title=f"per step (measured = {r.measured_from}; host wall, host launch = sum of op ranges, "
              "device busy span = first kernel start to last kernel end: shown, not compared)")
    for col in ("step", "measured", "predicted", "scaled", "host wall", "host launch", "device busy span"):
        s.add_column(col, justify="left" if col == "step" else "right")
    steps = r.steps if show_all or len(r.steps) <= 40 else r.steps[:40]
    for st in steps:
        tm = st.timing
        s.add_row(st.step, fmt_time(st.measured_s), fmt_time(st.predicted_s),
                  *[fmt_time(x) if x is not None else "-" for x in (st.scaled_s, tm.host_wall_s, tm.host_launch_s,
                                                                    tm.device_busy_span_s)])
    console.print(s)
    n = len(r.steps)
    console.print(f"measured ({r.measured_from}): {fmt_time(r.measured_s)} over {n} step(s)")
    # A prediction over a measurement mixes the model's own error on the measured machine into the ratio (a trial
    # read an H100 "1.05x" faster than the measured H200 it is 0.89x of); the scaled line compares like with like.
    mixed = " over the measured run, the model's own error included (the scaled line leaves it out)" \
        if r.scaled_s is not None else ""
    console.print(f"predicted on {r.machine} (its model alone): {fmt_time(r.predicted_s)}: "
                  f"{speedup_text(r.speedup('predicted'))}{mixed}")
    if r.scaled_s is not None:
        console.print(f"scaled (each measured op x {r.machine} / {r.source_machine} predicted; source from "
                      f"{r.source_from}): {fmt_time(r.scaled_s)}: {speedup_text(r.speedup('scaled'))}, "
                      "the like-for-like figure")
    else:
        console.print(f"scaled: not available ({r.source_from})")
    note = r.launch_note()
    if note:
        console.print(note)


def _gemv_choices(value: str | None) -> list[int | None] | None:
    """--gemv-max-m as calibrate's gemv_max_m: the thresholds to choose from (None: the base preset's own)."""
    from sim.apps.trace.calibrate import GEMV_MAX_M

    if value is None:
        return None
    if value == "search":
        return list(GEMV_MAX_M)
    if value == "none":
        return [None]
    if value.isdigit() and int(value) > 0:
        return [int(value)]
    raise ConfigError(f"--gemv-max-m {value!r}: expected search, none or a positive whole number of rows")


def speedup_text(x: float) -> str:
    """Measured over replayed time. Below 1 (a GPU trace replayed on cpu_host) ':.2f' printed 'speed-up 0.00x':
    three significant digits there, and the same ratio the other way up, which reads more easily."""
    if math.isinf(x):   # Replay.speedup of a replay predicted to take 0 s
        return "speed-up not defined (predicted 0 s)"
    if x >= 1 or x <= 0:
        return f"speed-up {x:.2f}x"
    slower = f"{1 / x:,.0f}" if 1 / x >= 100 else f"{1 / x:.3g}"   # :.3g writes 5,000 as 5e+03
    return f"speed-up {x:.3g}x ({slower}x slower)"


def cmd_calibrate(args: argparse.Namespace) -> int:
    from rich.table import Table

    from hw_models.machine import load_machine
    from sim.core.files import check_output
    from sim.apps.trace.calibrate_preset import write_preset
    from sim.apps.trace.load_inputs import load_distinct
    from sim.apps.trace.stack_calibrate import at_bounds, calibrate_for, held_out

    if not args.output and not args.report:   # not argparse's required=: the deprecated --output spelling fills it too
        raise ConfigError("sim calibrate: --out PRESET.yaml is required (the calibrated preset to write)")
    base = load_machine(args.hw)
    if args.output:
        check_output(args.output)  # before the fit, not after it
    if (args.report or args.force) and not args.held_out:
        raise ConfigError("--report and --force compare with --held-out traces: give some")
    name = args.name or (Path(args.output).stem if args.output else f"{base.name}_calibrated")
    if not name.isprintable() or not name.strip():  # a newline would write a preset that cannot load
        raise ConfigError(f"--name {name!r}: must be one printable line")
    fit_traces = load_distinct(args, args.traces, base, refuse=True)
    held = load_distinct(args, args.held_out, base, refuse=True, fitted=fit_traces) if args.held_out else []
    cal, note = calibrate_for(fit_traces, base, args.stack, per_kind=not args.single_curve, name=name,
                              min_traces=args.min_traces, gemv_max_m=_gemv_choices(args.gemv_max_m))
    console = tables.console()
    fit = held_out(fit_traces, base, cal.machine, args.stack, refuse=False)   # the fit's own traces, before and after
    for line in filter(None, (at_bounds(cal), fit.kinds_warning())):   # figures the data push past, kinds made worse
        print(line, file=sys.stderr)
    if fit.worse:   # a fit its own data disagree with (a trace workflow trial: 79.8% -> 298.8%, written silently)
        print(f"warning: the fit makes its own traces' per-op MAPE worse ({fit.before:.1%} with {base.name} -> "
              f"{fit.after:.1%}): noisy or contended captures, or traces unlike each other", file=sys.stderr)
    if args.held_out:   # refuses (ConfigError) before anything is written, unless --report / --force
        h = held_out(held, base, cal.machine, args.stack, refuse=not (args.report or args.force))
        if args.report:
            console.print(f"{h.line()}: {'worse: sim calibrate would refuse it' if h.worse else 'not worse'}; "
                          "--report writes nothing")
            return 0
        note += f"\nHeld out ({len(args.held_out)} traces, {h.n_ops} ops): per-op MAPE {h.before:.1%} -> {h.after:.1%}"
        if h.worse:   # --force: written anyway, and the preset says so
            note += " (WORSE on the held-out traces: written with --force)"
        console.print(note.splitlines()[-1])
    else:
        console.print("no --held-out traces: the calibrated preset's error on unseen data is not checked")
    path = write_preset(cal, args.output, note)
    t = Table(title=f"{name}: fitted on {cal.overall.n} ops")   # every curve's, as the header (477 had read vs 639)
    for col in ("curve", "compute_max", "compute_half_flops", "memory_max", "memory_half_bytes", "overhead",
                "MAPE (fit)"):
        t.add_column(col, justify="left" if col == "curve" else "right")
    for label, f in [("all ops, one curve" if cal.by_kind else "all ops", cal.overall), *cal.by_kind.items()]:
        p = f.params
        t.add_row(label, f"{p['compute_max']:.3f}", f"{p['compute_half_flops']:.3g}", f"{p['memory_max']:.3f}",
                  f"{p['memory_half_bytes']:.3g}", fmt_time(p["overhead_s"]), f"{f.mape:.1%}")
    console.print(t)
    if args.stack:   # the stack's kernel figures, fitted on the other ops, shown as the preset's header has them
        console.print(note.split("\nHeld out")[0])   # (a trace trial: stdout had the roofline curves alone)
    if cal.tile_scores:
        chosen = "none" if cal.tile is None else f"{cal.tile[0]}x{cal.tile[1]}"
        console.print(f"GEMM tile/wave term: {chosen} (RMS log residual by tile: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in cal.tile_scores.items()) + ")")
    console.print(f"wrote {path}")
    return 0


def _add_hw_set_quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", action="append", metavar="hw.KEY=VALUE",
                   help="override a hardware field of --hw (hw.memory.@device.bandwidth_bytes_per_s=2e12)")
    p.add_argument("-q", "--quiet", action="store_true", help="no tables on stdout (with --json: the file only)")


def register(sub) -> None:
    v = sub.add_parser("validate", help="compare measured traces (or aiconfigurator op tables) with the simulator "
                                        "op by op")
    _add_trace_args(v)
    v.add_argument("--hw", action=Once, help="hardware preset name or YAML file (--input-format aic: default the preset of the GPU "
                                "the table's file name says)")
    # Not `--format`: that is every command's table output format (sim.core.tables).
    v.add_argument("--input-format", choices=("trace", "aic"), default="trace",
                   help="aic: the arguments are NVIDIA aiconfigurator per-op tables (shared/validation/aic "
                        "<table>_<gpu>.csv.gz); MAPE per op family per GPU, held-out GPUs apart")
    v.add_argument("--stack", help="software stack the measured runs used (hw_models/stack/presets; --input-format aic: "
                                   "default each row's engine's stack)")
    v.add_argument("--limit", type=positive(int), metavar="N", help="--input-format aic: at most N rows per table, evenly spread")
    v.add_argument("--json", metavar="PATH", help="write per-op rows, MAPE by kind and overall `mape` (a fraction); "
                   "--input-format aic: every row and the MAPE per (GPU, family)")
    v.add_argument("--plots", metavar="DIR", help="write DIR/validate_scatter.png: simulated vs measured, log-log")
    flags.deprecated_alias(v, "--plot", "--plots DIR", "plot", metavar="FILE")
    v.add_argument("--all", action="store_true", help="print every row (--input-format aic: every table row "
                   "costed, the largest |error| first in each family)")
    _add_hw_set_quiet(v)
    v.set_defaults(func=cmd_validate)

    r = sub.add_parser("replay", help="rebuild a traced run and simulate it on other hardware")
    _add_trace_args(r, many=False)
    r.add_argument("--hw", action=Once, required=True, help="target hardware preset name or YAML file")
    r.add_argument("--source-hw", metavar="PRESET",
                   help="the machine the trace was measured on, for scaled mode (default: the preset whose name "
                        "the trace's device name holds, e.g. h200 for 'NVIDIA H200')")
    r.add_argument("--stack", help="software stack to run the rebuilt steps under (hw_models/stack/presets)")
    r.add_argument("--json", metavar="PATH", help="write the replay as JSON: per-op and per-step measured, predicted "
                   "and scaled seconds, the speed-ups, the machines and the stack")
    r.add_argument("--all", action="store_true", help="print every row")
    _add_hw_set_quiet(r)
    r.set_defaults(func=cmd_replay)

    c = sub.add_parser("calibrate", help="fit a preset's efficiency curves to measured traces")
    _add_trace_args(c)
    c.add_argument("--hw", action=Once, required=True, help="base preset whose peaks are kept")
    c.add_argument("--out", "-o", dest="output", metavar="PRESET.yaml",
                   help="the calibrated preset to write")
    flags.deprecated_alias(c, "--output", "--out PRESET.yaml", "output")
    c.add_argument("--name", help="preset name (default: the output file's stem)")
    c.add_argument("--single-curve", action="store_true", help="one efficiency curve for all op kinds")
    c.add_argument("--stack", help="software stack the traces ran under (hw_models/stack/presets): its kernels' figures are "
                                   "fitted into the preset's stacks.<name>, the curves on the ops it leaves to the roofline")
    c.add_argument("--min-traces", type=positive(int), default=1, metavar="N",
                   help="an op kind gets its own curve only with ops from N traces (default 1): one run's shapes "
                        "cannot tell a kind's curve from its shape")
    c.add_argument("--gemv-max-m", metavar="search|none|M",
                   help="GEMMs with at most M rows get their own fitted curve (efficiency.gemv): 'search' picks M "
                        "from none, 1, 8, 64 by the fit on the traces (docs/validation.md's CPU preset), 'none' "
                        "fits one GEMM curve; default: the base preset's own class")
    c.add_argument("--held-out", nargs="+", metavar="TRACE", default=[],
                   help="traces not fitted: refuse (exit 2) to write a preset whose per-op MAPE on them is worse")
    c.add_argument("--report", action="store_true",
                   help="with --held-out: print the held-out MAPE before and after the fit and write nothing")
    c.add_argument("--force", action="store_true",
                   help="with --held-out: write the preset even when the held-out MAPE is worse (its header says so)")
    c.set_defaults(func=cmd_calibrate)

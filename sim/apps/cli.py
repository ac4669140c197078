"""The `sim` command line.

User mistakes (a SimError) print one line and exit 2; no traceback.
Further subcommands come from the applications' CLI modules (validate, replay,
calibrate, sweep, survey) and from each hardware kind that has one (`sim offload
search`): every module exposes register(subparsers).
"""

# ruff: noqa: E402 (the imports below follow interrupt.install() on purpose: Ctrl-C during them is covered)
from __future__ import annotations

import sys

from sim.apps.arg_types import Once
from sim.core import interrupt

interrupt.install()   # already, when sim was imported as the CLI; here for any other way main() is reached

import argparse
import os
import warnings
from pathlib import Path

from hw_models.kinds import cli_registrars
from sim.apps import diff_cli, formats_cli, hw_cli, progress
from sim.core.files import check_output, check_outputs, transaction, write_json
from sim.apps.serve import cache_cli, cli as serve_cli
from sim.apps.survey import cli as survey_cli
from sim.apps.serve import mlenergy_cli, validate_cli as serve_validate_cli
from sim.apps.sweep import cli as sweep_cli
from sim.apps.trace import cli as trace_cli
from sim.core import flags, tables
from sim.core.errors import ConfigError, SimError
from sim.core.files import guard_inputs, note_input

# Only the parser's modules load at start-up (`sim --help` in ~0.1 s); each command imports
# what it simulates with (pydantic, numpy, the kinds, rich tables) when it runs.

_APPS = (trace_cli.register, sweep_cli.register, survey_cli.register, serve_cli.register, diff_cli.register, cache_cli.register,
         serve_validate_cli.register, mlenergy_cli.register)


def _load(args: argparse.Namespace):
    """Workload, machine and the hardware overrides (for the run JSON) from the common arguments."""
    from hw_models.ideal import ideal
    from hw_models.machine import load_machine
    from sim.apps.checks import ideal_unit, ignored_hw_overrides, run_notes
    from sim.core.settings import split_settings
    from sim.core.workload import load_workload

    sets = split_settings(getattr(args, "set", None), {"policy": args.policy} if getattr(args, "policy", None) else None)
    workload = load_workload(args.workload, sets.workload)
    machine = load_machine(args.hw, sets.hw)
    ideal_said = [] if getattr(args, "ideal", False) else ideal_unit(machine)   # --ideal says its own
    for note in run_notes(workload, machine) + ideal_said + ignored_hw_overrides(machine, sets.hw):
        print(f"warning: {note}", file=sys.stderr)
    if getattr(args, "ideal", False):
        machine = ideal(machine)
        if workload.stack is not None:   # a stack adds kernels, floors and host time: the pure roofline has none
            print(f"note: --ideal is the pure roofline; stack {workload.stack!r} is not applied", file=sys.stderr)
            workload = workload.model_copy(update={"stack": None})
        for name in sorted(machine.sections):   # a kind's own timings (chip hops, PIM mode switches) stay the preset's
            print(f"note: --ideal idealises units, memory and links only; the preset's `{name}:` section (its "
                  f"{machine.kind} timings) is applied as given", file=sys.stderr)
    return workload, machine, sets.hw


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", help="workload YAML file")
    p.add_argument("--hw", action=Once, required=True, help="hardware preset name or YAML file (see `sim hw list`)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a workload field (batch=16, formats.weights=int4) or hardware field "
                        "(hw.memory.@device.bandwidth_bytes_per_s=2e12); values are YAML (sim.core.settings)")
    p.add_argument("--ideal", action="store_true", help="efficiencies 1 and overheads 0: the pure roofline")


def cmd_run(args: argparse.Namespace) -> int:
    from hw_models.registry import hardware_record, simulate
    from sim.core.generation import STEP_PROGRESS
    from sim.core.results import check_finite
    from sim.apps.gantt import parse_layers

    from sim.apps.checks import naming

    layers = parse_layers(args.gantt_layers, args.plots)
    workload, machine, hw_sets = _load(args)
    check_outputs({"--json": args.json, "--chrome-trace": args.chrome_trace})  # before the run, not after it
    if args.plots:
        check_output(args.plots, directory=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # notes are printed in the report
        with naming(workload, machine, hw_sets), progress.bar("simulating", "steps", quiet=args.quiet) as update:
            token = STEP_PROGRESS.set(update)
            try:
                result = check_finite(simulate(workload, machine, exhaustive=args.exhaustive), machine.source)
            finally:
                STEP_PROGRESS.reset(token)
    hw = hardware_record(machine, hw_sets)
    if getattr(args, "ideal", False):   # said in the report and the JSON, so an ideal run never passes for a real one
        result.notes.append("--ideal: the pure roofline (efficiencies 1, overheads and latencies 0, no power cap or "
                            "clock lock)")
        hw["ideal"] = True
    with transaction():  # every output or none
        _write_run_outputs(args, result, workload, machine, layers, hw)
    if not tables.report_wanted(args):
        return 0
    from sim.apps.report import print_report   # rich tables and the kinds' report sections

    print_report(result, machine)
    return 0


def _write_run_outputs(args: argparse.Namespace, result, workload, machine, layers, hw: dict) -> None:
    from sim.apps.chrome_trace import chrome_trace
    from hw_models.roofs import roofs
    from sim.apps.counters import step_tracks
    from sim.apps.gantt import gantt
    from sim.apps.plots import roofline

    if args.json:
        write_json(args.json, result.to_json() | hw)   # the hardware's overrides and figures: sim diff lists them
    if args.chrome_trace:
        decode = f"decode step (kv_len {result.decode_kv_len})"
        write_json(args.chrome_trace, chrome_trace(
            {"prefill": result.prefill_timeline, decode: result.decode_timeline},
            {"prefill": step_tracks(result, "prefill"), decode: step_tracks(result, "decode")},
            result.extra.get("parallel", {}).get("lanes")))
    if args.plots:
        out = Path(args.plots)
        roofline(result, roofs(machine, workload.formats.activations), out / "roofline.png")
        gantt(result.decode_ops, f"one decode step, kv_len {result.decode_kv_len}", out / "decode_gantt.png",
              layers)


# What a kind places beyond one device's roofline (an architect's trial: the table read 3-10x off sim run on them,
# in a column labelled simulated, without a word); `sim run --plots` draws the kind's own roofs.
_KIND_PLACEMENT = {"pim": "the PIM units (every op on the host GPU alone)",
                   "spatial": "the chip pipeline and the PE array's weight installs (the whole model in one chip's "
                              "SRAM, streamed at its bandwidth)",
                   "offload": "the offload placement (every weight in the GPU's memory, fitting or not)"}


def cmd_roofline(args: argparse.Namespace) -> int:
    from rich.table import Table

    from sim.apps.roofline_rows import roofline_rows
    from sim.core.units import fmt_time
    from sim.core.workload import beyond_context

    workload, machine, hw_sets = _load(args)
    if args.kv_len is not None and args.kv_len < 1:
        raise ConfigError(f"--kv-len {args.kv_len}: must be at least 1 (the decode token's own key)")
    # What sim run adds and this table does not: a stack's kernels and host time, a plan's split over devices,
    # the board power cap (a prefill sim run stretches reads shorter here).
    board = machine.board_power()
    skipped = ([f"stack {workload.stack!r}"] if workload.stack is not None else []) + (
        ["the pipeline stages (parallel.pp: every layer counted on one rank)"]
        if (workload.section("parallel") or {}).get("pp", 1) > 1 else []) + (
        ["the board power cap" + (f" and the {board.clock:.0%} SM clock lock" if board.clock < 1.0 else "")]
        if board is not None and board.acts else []) + (
        [_KIND_PLACEMENT[machine.kind]] if machine.kind in _KIND_PLACEMENT else [])
    if args.json:
        check_output(args.json)
    model = workload.model_config_()
    q, kv = (workload.prompt_len, workload.prompt_len) if args.phase == "prefill" else (1, args.kv_len or workload.prompt_len + 1)
    if args.phase == "prefill" and args.kv_len is not None:
        print("note: --kv-len sets a decode step's context; a prefill attends over its prompt (prompt_len)",
              file=sys.stderr)
    if (beyond := beyond_context(kv, model)) is not None:   # as sim run warns (sim.core.workload.check_context)
        print(f"warning: kv_len {kv} is {beyond}", file=sys.stderr)
    from sim.apps.checks import naming

    with naming(workload, machine, hw_sets):
        rows = roofline_rows(workload, machine, args.phase, q, kv)
    if skipped:   # once the rows are priced: a mistake in the input is its one line alone
        print(f"note: sim roofline prices each op on one device's roofline; {', '.join(skipped)}: not applied "
              "(sim run applies them)", file=sys.stderr)
    totals = dict(roofline_s=sum(r["roofline_s"] * r["count"] for r in rows),
                  simulated_s=sum(r["simulated_s"] * r["count"] for r in rows),
                  flops=sum(r["flops"] * r["count"] for r in rows), bytes=sum(r["bytes"] * r["count"] for r in rows))
    if args.json:
        write_json(args.json, dict(phase=args.phase, kv_len=kv, ops=rows, totals=totals))
        return 0
    t = Table(title=f"{model.name} {args.phase} (batch {workload.batch}, q_len {q}, kv_len {kv}) on {machine.name}")
    for col in ("op", "kind", "x", "FLOPs", "bytes", "FLOP/B", "bound", "roofline", "simulated"):
        t.add_column(col, justify="left" if col in ("op", "kind", "bound") else "right")

    for r in rows:
        t.add_row(r["op"], r["kind"], str(r["count"]), f"{r['flops']:.3g}", f"{r['bytes']:.3g}", f"{r['intensity']:.2f}",
                  r["bound"], fmt_time(r["roofline_s"]), fmt_time(r["simulated_s"]))
    t.add_row("total", "", "", f"{totals['flops']:.3g}", f"{totals['bytes']:.3g}", "", "",
              fmt_time(totals["roofline_s"]), fmt_time(totals["simulated_s"]), style="bold")
    tables.console().print(t)
    return 0


MODEL_SHOW_FORMATS = ("fp32", "fp16", "bf16", "fp8_e4m3", "int8", "mxfp6_e2m3", "int4", "mxfp4", "nvfp4")


def cmd_model_show(args: argparse.Namespace) -> int:
    from rich.table import Table

    from sim.core.footprint import weight_bytes
    from sim.core.formats import get_format
    from sim.core.lowering import FormatPolicy
    from sim.core.model import load_model

    m = load_model(args.model)
    fmts = (flags.comma_list("--formats", args.formats, lambda n: get_format(n).name) if args.formats
            else list(MODEL_SHOW_FORMATS))
    by_fmt = {f: weight_bytes(m, FormatPolicy(weights=f, activations="fp16")) for f in fmts}
    # a token's KV: one row more of each layer's K and V (a per-tensor scale, NVFP4's, is the tensor's, not the row's)
    kv = {f: m.kv_bytes_per_token((get_format(f).storage_bytes((2, m.kv_dim)) - get_format(f).storage_bytes((1, m.kv_dim)))
                                  / m.kv_dim) for f in fmts}
    data = dict(m.to_dict(), params=m.params(), weight_bytes=by_fmt, kv_cache_bytes_per_token=kv)
    if m.is_moe:   # what one token reads: the routed experts it goes to, not all of them
        data["active_params"] = m.params(active=True)
    if args.json:
        flags.emit_json(args.json, data)
        return 0
    active = f" ({data['active_params']:,} active per token)" if m.is_moe else ""
    t = Table(title=f"{m.name}: {m.params():,} parameters{active}", show_header=False, title_justify="left")
    # A field the model reads through another (0: the experts are the dense MLP's width) shows what it means.
    effective = {"moe_intermediate_size": f"{m.expert_intermediate} (not given: intermediate_size's)"
                 if m.is_moe and not m.moe_intermediate_size else None,
                 "shared_expert_intermediate_size": f"{m.shared_intermediate} (not given: num_shared_experts x "
                 "the experts' width)" if m.num_shared_experts and not m.shared_expert_intermediate_size else None}
    for k, v in m.to_dict().items():
        t.add_row(k, effective.get(k) or str(v))
    for f in fmts:
        t.add_row(f"weights in {f}", f"{by_fmt[f]:,} bytes ({by_fmt[f] / 1e9:.2f} GB)")
    for f in fmts:
        t.add_row(f"KV cache per token in {f}", f"{kv[f]:,.0f} bytes")
    if m.sliding_window:   # a model-import trial read the figure as the windowed cache's (Mistral at 16k: 4x it)
        t.add_row("KV cache of windowed layers", f"every layer's whole context: a {m.sliding_window}-key window "
                  "bounds what attention reads, not what the cache holds (docs/models.md)")
    tables.console().print(t)
    return 0


class OneLineErrors(argparse.ArgumentParser):
    """A parser whose usage errors are one line on stderr, exit 2 (docs/cli.md), as every other error of what the
    user typed: argparse's own print the usage block first (a trial counted 7 lines for `--every 0`)."""

    def error(self, message: str):
        for action in self._actions:   # a missing subcommand by its choices, not argparse's dest (`hw_cmd`: a review)
            if isinstance(action, argparse._SubParsersAction) and message.endswith(f"required: {action.dest}"):
                message = f"expected a subcommand: {', '.join(action.choices)}"
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    from sim import __version__

    p = OneLineErrors(prog="sim", description="Discrete-event simulator of LLM inference hardware.")
    p.add_argument("--version", action="version", version=f"sim {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="simulate a workload on a hardware preset")
    _add_common(r)
    r.add_argument("--json", metavar="PATH", help="write results as JSON")
    r.add_argument("--chrome-trace", metavar="PATH", help="write a Chrome/Perfetto trace of prefill and one decode step")
    r.add_argument("--plots", metavar="DIR", help="write roofline and Gantt plots")
    r.add_argument("--gantt-layers", metavar="FIRST-LAST",
                   help="layers the Gantt plot's zoom panel shows (default 0-1)")
    r.add_argument("--exhaustive", action="store_true", help="simulate every layer and step (no shortcuts)")
    r.add_argument("--policy", help="offload placement: 'search' (the default where the workload has no `policy:` mapping of "
                        "placement fractions, docs/offload.md)")
    r.add_argument("-q", "--quiet", action="store_true", help="no report on stdout")
    r.set_defaults(func=cmd_run)

    rf = sub.add_parser("roofline", help="per-op roofline table of one step")
    _add_common(rf)
    rf.add_argument("--phase", choices=("decode", "prefill"), default="decode")
    rf.add_argument("--kv-len", type=int, help="decode kv_len (default prompt_len + 1)")
    rf.add_argument("--json", metavar="PATH", help="write the table as JSON")
    rf.set_defaults(func=cmd_roofline)

    mp = sub.add_parser("model", help="model configs").add_subparsers(dest="model_cmd", required=True)
    ms = mp.add_parser("show", help="parameters, bytes per format, KV bytes per token")
    ms.add_argument("model", help="preset name or path to config.json")
    flags.json_option(ms, "the figures")
    ms.add_argument("--formats", help=f"comma-separated formats to tabulate (default {','.join(MODEL_SHOW_FORMATS)})")
    ms.set_defaults(func=cmd_model_show)
    ml = mp.add_parser("list", help="model presets")
    ml.set_defaults(func=lambda a: print("\n".join(__import__("sim.core.model", fromlist=["x"]).preset_names())) or 0)

    fp = sub.add_parser("formats", help="number formats: exact bits per element and the error each causes")
    fp.add_argument("--formats", help="comma-separated formats (default: all)")
    fp.add_argument("--array", metavar="NPY", help="measure the error on this .npy array (default: Gaussian)")
    flags.json_option(fp, "each format's bits and errors")
    fp.set_defaults(func=formats_cli.cmd_formats)

    hw_cli.register(sub)

    for register in (*_APPS, *cli_registrars()):
        register(sub)
    tables.add_to_every_command(p)
    return p


# Output options of every subcommand: an empty path ("--json ''") would otherwise write nothing, silently.
_OUTPUTS = ("json", "chrome_trace", "plots", "requests", "out", "plot", "output")


# Arguments that name files a command reads (`sweep export DIR` reads DIR's store).
_INPUTS = ("workload", "file", "spec", "traces", "held_out", "hw", "source_hw", "model")


def _named_inputs(args: argparse.Namespace) -> list[Path]:
    """The input files named on the command line that exist (a preset name is no file)."""
    names = [getattr(args, a, None) for a in _INPUTS]
    flat = [str(n) for v in names for n in (v if isinstance(v, list) else [v]) if n]
    if getattr(args, "func", None) is sweep_cli.cmd_sweep:  # a sweep reads its store (to resume, to export)
        from sim.apps.sweep.store import DB_NAME

        folder = args.target if args.spec == "export" else args.out
        flat += [str(Path(folder) / DB_NAME)] if folder else []
    return [Path(n) for n in flat if Path(n).is_file()]


def _check_empty_outputs(args: argparse.Namespace) -> None:
    for name in _OUTPUTS:
        if getattr(args, name, None) == "":
            raise ConfigError(f"--{name.replace('_', '-')}: an empty path; give a name")


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()  # imports every subcommand: Ctrl-C may land here
        args = parser.parse_args(argv)
        _check_empty_outputs(args)
        tables.configure(args.format, args.width, args.quiet)
        with guard_inputs():  # no output may replace a file the command reads
            note_input(*_named_inputs(args))  # now, so the commands' early output checks see them
            code = int(args.func(args) or 0)
        tables.flush()
        return code
    except SimError as exc:
        # One line whatever the input held: a value with a newline ("a\nb") is shown escaped.
        print("error: " + str(exc).replace("\r", "\\r").replace("\n", "\\n"), file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:   # a command may say what it kept (sim sweep: the points stored)
        print("interrupted" + (f": {exc.args[0]}" if exc.args else ""), file=sys.stderr)
        return 130
    except BrokenPipeError:   # `sim roofline ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def entry() -> None:
    """The `sim` console script: main(), and after an interrupt no interpreter shutdown. Its exit joins the
    process pool's manager thread, which an interrupt can leave waiting on a lock forever (a sweep trial: 1 of 2
    Ctrl-Cs of a 90,000-point sweep printed "interrupted" and hung); every output is already written atomically
    and the sweep's store committed, so nothing is lost by not waiting."""
    code = main()
    if code == 130:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    sys.exit(code)


if __name__ == "__main__":
    entry()

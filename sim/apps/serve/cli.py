"""`sim serve FILE --hw PRESET`: a request stream through a serving engine on a machine."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any

from sim.apps.arg_types import Once
from sim.core import flags, tables
from sim.core.errors import ConfigError


def _slo(items: list[str] | None) -> dict[str, float]:
    import yaml

    from sim.apps.serve.spec import check_slo

    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        try:
            out[key.strip()] = float(yaml.safe_load(value))
        except (TypeError, ValueError, yaml.YAMLError):
            sep = ""
        if not sep or not 0 < out.get(key.strip(), 0) < float("inf"):   # NaN fails both
            raise ConfigError(f"--slo {item!r}: expected METRIC=SECONDS with a positive, finite number, e.g. ttft_p90=0.2")
    check_slo(out, "--slo")
    return out


def _check_outputs(args: argparse.Namespace, file) -> None:
    from sim.apps.serve.spec import input_files
    from sim.core.files import check_output, check_outputs, note_input, require_parquet

    note_input(*input_files(file))  # read later (the trace, the model's config): refused as outputs now
    check_outputs({"--json": args.json, "--requests": args.requests, "--chrome-trace": args.chrome_trace})
    if args.requests and args.requests != "-" and Path(args.requests).suffix not in (".csv", ".parquet"):
        raise ConfigError(f"--requests {args.requests}: expected a .csv or .parquet file name, or - for CSV on stdout")
    if args.requests and Path(args.requests).suffix == ".parquet":
        require_parquet(f"--requests {args.requests}")   # before the run, not after it
    if args.plots:
        check_output(args.plots, directory=True)


def cmd_serve(args: argparse.Namespace) -> int:
    from sim.apps.serve.arrivals import make_requests
    from sim.apps.serve.cluster import serve_stream
    from sim.apps.serve.disagg import instance_setup
    from sim.apps.serve.engine_defaults import with_engine_defaults
    from sim.apps.serve.invariants import budget_warning, check_run
    from sim.apps.serve.run import refuse_unserved, summary_of
    from sim.apps.serve.spec import load_serve_file
    from sim.apps.checks import ignored_hw_overrides, input_notes, naming
    from hw_models.registry import hardware_record
    from sim.core.settings import split_settings

    from sim.apps.serve import tablecache
    if args.no_cache:
        tablecache.disable()
    elif why := tablecache.unusable():   # the run goes without it: said (a hostile-input trial: a corrupt cache file)
        print(f"warning: the step-cost cache is unusable, this run goes without it: {why}", file=sys.stderr)
    sets = split_settings(args.set)
    file = load_serve_file(args.file, sets.workload)
    machine = _machine(args, file, sets.hw)
    file = with_engine_defaults(file, machine)   # vLLM's budget and sequence cap follow the GPU where left out
    for note in input_notes(file, machine) + ignored_hw_overrides(machine, sets.hw):
        print(f"warning: {note}", file=sys.stderr)
    slo = _slo(args.slo) or dict(file.serving.slo)
    if slo != file.serving.slo:
        file = file.model_copy(update={"serving": file.serving.model_copy(update={"slo": slo})})
    _check_outputs(args, file)
    with warnings.catch_warnings(), naming(file, machine, sets.hw, packaged_only=True):   # a preset's error: whose
        warnings.simplefilter("ignore")
        if args.find_capacity:
            return _capacity(args, file, machine, slo)
        setup = instance_setup(file, machine, args.exact)
        reqs = make_requests(file)
        note = budget_warning(file, reqs)
        if note:
            print(f"warning: {note}", file=sys.stderr)
        with _progress(args.quiet, len(reqs)) as (prog, task):
            res, extra = serve_stream(file, setup, reqs,
                                      None if prog is None else lambda d, n: prog.update(task, completed=d))
    s = summary_of(file, machine, res, extra)
    check_run(res, s, str(args.file))   # a bug in sim, not the input, if it fails: kept loud
    refuse_unserved(file, s)
    hardware, hw = machine.name, hardware_record(machine, sets.hw)   # sim diff lists a --set hw.*
    if file.serving.disaggregated is not None:
        from sim.apps.serve.disagg import pools_label
        hardware, hw = pools_label(s["disaggregated"]), {}   # a machine per pool: no one machine's figures
    # the serving section as run (its --set items applied), so that sim diff can say which of its settings differ
    s.update(hardware=hardware, model=setup.model.name, scheduler=file.serving.scheduler.kind,
             deployment=file.serving.deployment, exact=args.exact, **hw, stack=file.stack or "",
             formats=file.formats.model_dump(mode="json"), parallel=file.section("parallel") or {},
             serving_file=str(args.file), serving=file.serving.model_dump(mode="json", exclude_none=True))
    _write(args, res, s)
    if tables.report_wanted(args):
        from sim.apps.serve.report import print_report   # rich's tables: only to print them

        print_report(s, f"{file.name}: {setup.model.name} on {hardware}, {file.serving.scheduler.kind} scheduler"
                        + (" behind Dynamo" if file.serving.deployment == "dynamo" else "")
                        + (" (exact step costs)" if args.exact else ""))
    return 0


def _machine(args: argparse.Namespace, file, hw_sets: dict[str, Any]):
    """The machine of --hw; a disaggregated file names each pool's own preset instead, so --hw is not needed
    there (the prefill pool's machine stands in where one machine is asked for) and --set hw.* has no target."""
    if file.serving.disaggregated is None:
        from hw_models.machine import load_machine

        if args.hw is None:
            raise ConfigError("--hw: required: the hardware preset name or YAML file to serve on (`sim hw list`)")
        return load_machine(args.hw, hw_sets)
    from sim.apps.serve.disagg import pool_machine
    if hw_sets:
        raise ConfigError(f"--set hw.{next(iter(hw_sets))}: serving.disaggregated runs each pool on its own preset "
                          "(serving.disaggregated.prefill.hw, .decode.hw): set its fields per pool "
                          "(serving.disaggregated.decode.hw_overrides: {KEY: VALUE})")
    if args.hw is not None:
        print(f"warning: --hw {args.hw} is not used: serving.disaggregated names each pool's hardware", file=sys.stderr)
    return pool_machine(file, "prefill")


def _write(args, res, summary, sweep=None) -> None:
    """All outputs after the run, every one or none: an interrupted run has written nothing.
    `res` is the run the per-request table, the Chrome trace and the plots show (with
    --find-capacity, the run at the capacity rate; `summary` is then the search's)."""
    from sim.core.files import transaction, write_json

    with transaction():
        if args.json:
            write_json(args.json, summary)
        if not (args.requests or args.chrome_trace or args.plots):
            return   # sim.apps.serve.output loads pandas and matplotlib (~0.5 s): only when a file needs them
        from sim.apps.serve.output import plots, write_chrome_trace, write_requests

        if args.requests:
            write_requests(args.requests, res)
        if args.chrome_trace:
            write_chrome_trace(args.chrome_trace, res)
        if args.plots:
            plots(res, Path(args.plots), sweep)


def _capacity(args, file, machine, slo) -> int:
    from sim.apps.serve.capacity import find_capacity
    from sim.apps.serve.report import of_limit, print_capacity
    from sim.apps.serve.spec import Closed

    console = tables.console(stderr=True)   # unbounded when piped, as cli.md says (a plain Console wrapped at 80)
    # a closed loop's search moves the client count, not a rate: the JSON keys say which it holds
    key = "clients" if isinstance(file.serving.arrivals, Closed) else "rate"

    def point(rate, s, ok):
        if not args.quiet:
            st = s.get("settled")
            worst = st["slo"] if st else max(s["slo_met"], key=s["slo_met"].get)
            # the verdict first: a pass at 0.9977 and a miss both read "1.00x of limit" (a serving trial)
            console.print(f"  {key} {rate:8.4g}{'' if key == 'clients' else '/s'}: {'meets' if ok else 'fails'}: {worst} "
                          + (f">= {of_limit(s['slo_met'][worst])}, stopped after {st['requests_done']} requests "
                             f"({st['violations']} over it, {st['allowed']} allowed: fails with certainty)" if st
                             else of_limit(s["slo_met"][worst])))
    from sim.apps.serve.disagg import pools_devices
    from sim.apps.serve.report import plan_price

    cap = find_capacity(file, machine, slo, exact=args.exact, on_point=point, early_stop=args.early_stop)
    best = cap["summary"]
    # what the devices cost: a disaggregated file's pools at each pool's price (the report and the JSON alike)
    price_usd, priced = plan_price(pools_devices(file) if file.serving.disaggregated
                                   else [("", machine, (best.get("energy") or {}).get("devices") or 1)])
    out = {"capacity_clients" if key == "clients" else "capacity_rate_req_s": cap["rate"]}
    out |= dict(goodput_req_s=cap["goodput_req_s"], goodput_tok_s=cap["goodput_tok_s"],
                goodput_window_s=cap["window_s"], within_slo=cap["within_slo"], transient=cap["transient"],
                limiting_metric=cap["limiting"], plan_price_usd=price_usd, plan_price=priced,
                # a step stopped early ran part of its stream: its verdict is certain, its figures are the part's:
                # slo_met of the SLO that settled it (settled_by, over the requests_done whose figure was known) a
                # lower bound of the full run's, the others over the requests completed by then (a serving trial
                # read them as the full run's)
                points=[{key: p["rate"], "ok": p["ok"], "stopped_early": "settled" in p["summary"],
                         "slo_met": p["summary"]["slo_met"],
                         **({"settled_by": st["slo"], "requests_done": st["requests_done"],
                             "completed": p["summary"]["completed"]}
                            if (st := p["summary"].get("settled")) else {})} for p in cap["points"]], summary=best)
    # --plots, --requests, --chrome-trace show the search's step at capacity itself (the same run as `summary`)
    _write(args, cap["result"], out, cap["points"])
    if cap["transient"]:
        print(f"warning: {file.source}: --find-capacity: {cap['transient']}", file=sys.stderr)
    if tables.report_wanted(args):
        print_capacity(cap, price=(price_usd, priced))
    return 0


class _progress:
    def __init__(self, quiet: bool, total: int):
        self.quiet, self.total = quiet or not sys.stderr.isatty(), total

    def __enter__(self):
        if self.quiet:   # rich's progress and console modules (~0.1 s) only for a bar on a terminal
            return None, None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.p = Progress(TextColumn("serving"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=Console(stderr=True), transient=True)
        self.p.__enter__()
        return self.p, self.p.add_task("requests", total=self.total)

    def __exit__(self, *exc):
        if not self.quiet:
            self.p.__exit__(*exc)
        return False


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="simulate a request stream on a serving engine (continuous batching, paged KV)",
                              description="sim serve FILE --hw PRESET: arrivals, scheduler, KV blocks, step costs "
                                          "from the hardware model; see docs/serving.md.")
    p.add_argument("file", metavar="FILE", help="serving file: a workload YAML with a serving: section")
    p.add_argument("--hw", action=Once, help="hardware preset name or YAML file (not for a file with serving.disaggregated, "
                                "whose pools name their own)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a field: serving.arrivals.rate=20, hw.memory.hbm.capacity_bytes=40e9")
    p.add_argument("--json", metavar="PATH", help="write the summary as JSON")
    p.add_argument("--requests", metavar="PATH", help="write the per-request table (.csv or .parquet; - for CSV on stdout)")
    p.add_argument("--chrome-trace", metavar="PATH", help="write a Chrome/Perfetto trace: requests and iterations")
    p.add_argument("--plots", metavar="DIR", help="write latency CDFs, KV blocks, batch size and board power over time")
    p.add_argument("--exhaustive", dest="exact", action="store_true",
                   help="cost every iteration with the op-level simulation (no step-cost surrogate)")
    flags.deprecated_alias(p, "--exact", "--exhaustive", "exact", action="store_true")
    p.add_argument("--find-capacity", action="store_true", help="bisect the load for the highest meeting the SLO: the arrival rate, or a closed loop's "
                   "client count")
    p.add_argument("--no-early-stop", dest="early_stop", action="store_false",
                   help="--find-capacity: run every step to its end, even one that already fails its SLO for certain")
    p.add_argument("--slo", action="append", metavar="METRIC=SECONDS", help="e.g. ttft_p90=0.2 (replaces the file's slo)")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the persistent step-cost tables (`sim cache info`)")
    p.add_argument("-q", "--quiet", action="store_true", help="no report or progress bar")
    p.set_defaults(func=cmd_serve)

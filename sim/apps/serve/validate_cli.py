"""`sim validate-serving FILE --hw PRESET [--stack S]`: measured serving runs against the simulator
(sim.apps.serve.validate). FILE is a silicon-sample table (its rows of the GPU --hw names), a vLLM
benchmark_serving result JSON, a genai-perf or aiperf profile export JSON (--engine and --model say
what served it; --deployment how: the engine's own server by default), or an LLMServingSim case folder
(per-request vLLM timestamps, replayed open-loop by sim.apps.trace.validate_serving). --plots DIR writes the
scatter and the errors by concurrency."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import warnings
from pathlib import Path

from sim.apps.arg_types import Once, positive
from sim.core import tables
from sim.core.errors import ConfigError
from sim.core.files import check_output, check_outputs, transaction, write_json


def _runs(args: argparse.Namespace):
    from sim.apps.serve.validate import GPUS
    from sim.apps.serve.bench_logs import bench_kind, logged_engine, logged_model, read_bench_json, read_json
    from sim.apps.serve.validate_models import checkpoint_quant
    from sim.apps.serve.overhead_fit import in_training
    from sim.apps.serve.validate import reasons
    from sim.apps.serve.validate_consistency import contradictions
    from sim.apps.serve.validate_readers import SILICON_COLUMNS, is_silicon, read_silicon

    path = Path(args.file)
    if path.suffix == ".json":
        d = read_json(path)   # a file that is not JSON says so first, then one that is no benchmark's
        bench_kind(path, d)
        model, engine = args.model or logged_model(d), args.engine or logged_engine(d)
        if not (engine and model):
            missing = [flag for flag, v in (("--engine", engine), ("--model", model)) if not v]
            raise ConfigError(f"{path}: the benchmark JSON does not say {'which engine' if model else 'what'} "
                              f"served it: give {' and '.join(missing)}")
        run = read_bench_json(path, args.hw, engine, model, "--model" if args.model else f"{path}: its model", d)
        if args.requests_per_client and run.num_requests:   # the file says how many it sent: a flag would be ignored
            raise ConfigError(f"--requests-per-client {args.requests_per_client}: {path} records the {run.num_requests} "
                              "requests it measured, which the replay sends")
        return [dataclasses.replace(run, tp=args.tp or 1, ep=args.ep or 1, quant=checkpoint_quant(run.model))], [], 0, []
    if args.tp or args.ep:
        raise ConfigError(f"{path}: --tp/--ep: for a benchmark JSON, which does not record the server's layout "
                          "(a silicon-sample row carries its own tp_size and moe_ep_size; an LLMServingSim case its own)")
    if not path.is_file():
        raise ConfigError(f"{path}: not found")
    if not is_silicon(path):
        raise ConfigError(f"{path}: not a silicon-sample table (expected columns {', '.join(sorted(SILICON_COLUMNS))}), "
                          "a benchmark JSON or a case folder")
    systems = set(table_presets(args.hw))
    runs, skipped = read_silicon(path, systems)
    found = contradictions(runs)   # over every row of the GPU's: a held-out row's partner may be in training
    left_out = len(runs)
    if args.held_out:
        runs = [r for r in runs if not in_training(r.name)]
    left_out -= len(runs)   # the fit's training half, left out under --held-out
    if not runs:
        why = (f"its {left_out} replayable row(s) are all in the fit's training half (--held-out)" if left_out else
               f"{len(skipped)} row(s) skipped: {reasons(skipped)}" if skipped else
               f"GPUs in the table map to presets: {', '.join(f'{s}->{p}' for s, p in GPUS.items())}")
        raise ConfigError(f"{path}: no replayable run on {args.hw} ({why})")
    return runs, skipped, left_out, found


def table_presets(hw: str) -> dict[str, str]:
    """The table's GPU systems --hw stands for, each with the preset to replay it on: a preset name by GPUS; a preset
    file (a calibrated one) by its own name, whose first word names the GPU (h100_sxm_calibrated, h100_cal: h100)."""
    from hw_models.machine import load_machine
    from sim.apps.serve.validate import GPUS

    if not Path(hw).is_file():
        return {s: p for s, p in GPUS.items() if p == hw or s == hw}
    name = load_machine(hw).name
    found = {s: hw for s, p in GPUS.items() if name.split("_")[0] in (s.split("_")[0], p.split("_")[0])}
    if not found:
        raise ConfigError(f"--hw {hw}: its preset {name!r} names none of the table's GPUs ({', '.join(GPUS)}): "
                          "give it a name that begins with one (sim calibrate --name)")
    return found


def _folder(args: argparse.Namespace) -> int:
    from sim.apps.trace import validate_serving as M
    from sim.apps.serve.run import serve
    from sim.apps.serve.validate import machine_loader

    folder = Path(args.file)
    if args.deployment:
        raise ConfigError(f"{folder}: --deployment: an LLMServingSim case times TTFT from the engine's own queue, "
                          "so no delay in front of the engine enters it")
    if args.client_connections:
        raise ConfigError(f"{folder}: --client-connections: an LLMServingSim case replays its logged arrivals "
                          "(open loop), with no client pool to hold them")
    measured_on = M.PRESETS.get(folder.name.split("_")[0])
    if measured_on is not None and args.hw != measured_on:   # errors against another GPU's measurements mean nothing
        raise ConfigError(f"{folder}: measured on {measured_on}: --hw {measured_on} (a what-if on {args.hw} is "
                          "`sim serve` of the case's requests, with nothing measured to compare)")
    unused = [flag for flag, v in (("--json", args.json), ("--plots", args.plots), ("--plot", args.plot),
                                   ("--summary", args.summary), ("--held-out", args.held_out)) if v]
    if unused:
        raise ConfigError(f"{folder}: {', '.join(unused)}: not for an LLMServingSim case folder (its report is the "
                          "per-case table and the engine's state over time)")
    stack = args.stack or "vllm"
    results = M.validate(folder.parent, machine_loader(engine_side_ttft=True, overrides=_hw_sets(args)),
                         lambda f, m, r: serve(f.model_copy(update={"stack": stack}), m, requests=r),
                         args.limit, names=[folder.name])
    if not results:
        raise ConfigError(f"{folder}: not an LLMServingSim case folder (vllm/meta.json, vllm/requests.jsonl)")
    tables.print_markdown(M.render(results))
    return 0


def _hw_sets(args: argparse.Namespace) -> dict:
    from sim.core.settings import split_settings

    return split_settings(args.set).hw


# What a replay takes from the measured run itself: a setting of them would compare another run with this one's
# measurements.
REPLAYED = ("name", "model", "serving.arrivals", "serving.lengths", "parallel", "batch", "prompt_len", "gen_len")


def _server_sets(args: argparse.Namespace) -> dict:
    """The --set items that say how the user's server ran (serving.scheduler.max_num_batched_tokens=2048,
    formats.kv_cache=fp8, serving.prefix_caching.enabled=true): applied to every replayed run (run_file). A trial
    could not replay a server launched with non-default options: every non-hw key was refused."""
    from sim.core.settings import split_settings

    sets = split_settings(args.set).workload
    if "stack" in sets and args.stack:
        raise ConfigError(f"--stack {args.stack} and --set stack={sets['stack']}: two stacks; give one")
    for key in sets:
        if any(key == r or key.startswith(r + ".") or r.startswith(key + ".") for r in REPLAYED):   # `serving` too
            raise ConfigError(f"--set {key}: the replay takes it from the measured run (its model, arrivals, "
                              "lengths and layout: --tp, --ep); set the server's options (serving.scheduler.*, "
                              "formats.*, stack, serving.prefix_caching.*)")
    if sets and Path(args.file).is_dir():
        raise ConfigError(f"--set {next(iter(sets))}: an LLMServingSim case folder replays its own server's settings")
    return sets


def cmd_validate_serving(args: argparse.Namespace) -> int:
    from sim.apps.serve.validate import machine_loader, render, simulate
    from sim.apps.serve.validate_plots import scatter, write_plots
    from sim.apps.workers import check_workers, worker_count

    from sim.apps.serve.validate import REQUESTS_PER_CLIENT

    check_workers(args.workers)
    settings = _server_sets(args)
    per_client = args.requests_per_client or REQUESTS_PER_CLIENT
    if Path(args.file).is_dir():
        return _folder(args)
    _check_outputs(args)   # a bad path says so before minutes of replays
    runs, skipped, left_out, found = _runs(args)
    if args.deployment:
        runs = [dataclasses.replace(r, deployment=args.deployment) for r in runs]
    if args.client_connections:   # the closed loops' client pool (open-loop runs keep theirs unbounded)
        runs = [dataclasses.replace(r, client_connections=args.client_connections) if r.rate is None else r
                for r in runs]
    if args.limit:
        runs = runs[:: max(1, len(runs) // args.limit)][: args.limit]
    if settings and runs:   # a key the schema refuses: one line before the replays, not one failure per run
        from sim.apps.serve.validate import run_file
        try:
            run_file(runs[0], args.stack, per_client, settings)
        except ConfigError as exc:
            raise ConfigError(f"--set: {str(exc).split(': ', 1)[-1]}") from None
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    from sim.apps.progress import bar

    with bar("replaying runs", "runs", len(runs), quiet=args.quiet) as update:
        loader = machine_loader(overrides=_hw_sets(args), presets=table_presets(args.hw) if Path(args.hw).is_file() else None)
        results, failed = simulate(runs, loader, args.stack, per_client, settings=settings,
                                   progress=lambda done, total: update(done),
                                   jobs=worker_count(args.workers))
    if failed and not results:   # nothing to tabulate: say why, and fail
        raise ConfigError(f"{args.file}: none of its {len(failed)} run(s) could be simulated on {args.hw}; the first: "
                          f"{failed[0][1]}")
    tables.print_markdown(render(results, skipped, failed, time.perf_counter() - t0, per_run=not args.summary,
                                 name_width=None if tables.full_width() else 40, left_out=left_out, found=found))
    with transaction():   # every output or none (a plot that failed had left the JSON written)
        if args.json:
            write_json(args.json, as_json(args.hw, results, skipped, failed, found))
        if args.plot:
            scatter(results, Path(args.plot))
        written = write_plots(results, Path(args.plots)) if args.plots else []
    for path in written if not args.quiet else ():   # -q: nothing but what was asked for (docs/cli.md; a docs trial)
        print(f"wrote {path}", file=sys.stderr)
    return 0


# What --plot may name: the formats every matplotlib backend writes (a .xyz path had died in savefig, after the
# replays and with the JSON written)
PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def _check_outputs(args: argparse.Namespace) -> None:
    """Every output path, before the replays: one line and nothing written when one cannot be."""
    check_outputs({"--json": args.json, "--plot": args.plot})
    if args.plot and Path(args.plot).suffix.lower() not in PLOT_SUFFIXES:
        raise ConfigError(f"--plot {args.plot}: the plot is written as {', '.join(PLOT_SUFFIXES)} by the path's "
                          "suffix; give one of them")
    if args.plots:
        check_output(args.plots, directory=True)


def as_json(hw: str, results: list, skipped: list[tuple[str, str]], failed: list[tuple[str, str]],
            found: list | None = None) -> dict:
    """The replay as data (--json): each run as read (its measured means) with the simulated means and the signed
    errors, (simulated - measured) / measured, in seconds and requests/s; MAPE per (GPU, engine, model), per release
    where a group mixes them, over all, and over the runs no other row contradicts (sim.apps.serve.validate_consistency:
    the pairs a replayed run is in, with why); the rows not replayed and why."""
    from sim.apps.serve.validate import mape, overall, replayed_lengths
    from sim.apps.serve.validate_consistency import decoding, run_key, uncontradicted

    def run(r) -> dict:   # the per-request lengths of a log are its file's, not repeated here; a rate has no clients
        d = {k: v for k, v in dataclasses.asdict(r.run).items() if k != "lengths"}
        d["lengths_replayed"] = replayed_lengths(r.run)
        return {**d, "concurrency": None} if r.run.rate is not None else d
    kept = uncontradicted(results, found or [])
    replayed = {run_key(r.run) for r in results}
    return dict(hw=hw, runs=[dict(run(r), sim=r.sim, error=r.error, decoding=decoding(r)) for r in results],
                mape=[dict(gpu=g, engine=e, model=m, **row) for (g, e, m), row in mape(results).items()],
                overall=dict(runs=len(results), **overall(results)),
                overall_uncontradicted=dict(runs=len(kept), **overall(kept)) if kept else None,
                contradictions=[dict(fewer=c.fewer, more=c.more, why=c.why) for c in found or ()
                                if replayed & set(c.keys)],   # the pairs a replayed run is in
                skipped=[dict(run=n, why=w) for n, w in skipped], failed=[dict(run=n, why=w) for n, w in failed])


def register(subparsers) -> None:
    p = subparsers.add_parser("validate-serving", help="replay measured serving runs and print the simulator's errors",
                              description=__doc__)
    p.add_argument("file", metavar="FILE", help="silicon-sample CSV(.gz), benchmark_serving, genai-perf or aiperf JSON, or LLMServingSim case folder")
    p.add_argument("--hw", action=Once, required=True, help="hardware preset: the GPU whose runs are replayed (h100_sxm, h200, ...)")
    p.add_argument("--stack", help="replay every run under this stack (default: each engine's own)")
    p.add_argument("--engine", choices=("vllm", "trtllm", "sglang"),
                   help="the engine of a benchmark JSON (default: the one a vLLM result's backend names)")
    p.add_argument("--model", help="the model of a benchmark JSON: a Hugging Face name of the replayed tables (e.g. "
                   "meta-llama/Llama-3.1-8B), a model preset or a config.json (default: the one the file names)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a hardware field of --hw (hw.spatial.chips=166, hw.memory.@device.bandwidth_bytes_per_s=4e12), "
                        "or an option every replayed server ran with (serving.scheduler.max_num_batched_tokens=2048, "
                        "formats.kv_cache=fp8)")
    p.add_argument("--tp", type=positive(int), metavar="N",
                   help="the tensor-parallel size a benchmark JSON's server ran (--tensor-parallel-size; default 1)")
    p.add_argument("--ep", type=positive(int), metavar="N",
                   help="the expert-parallel ways of a MoE benchmark JSON's server (a multiple of --tp; default 1)")
    p.add_argument("--deployment", choices=("direct", "dynamo"),
                   help="what stood between the clients and the engine (serving.deployment): its own server or "
                        "NVIDIA Dynamo (default: a benchmark JSON direct, a silicon-sample row as it was served)")
    p.add_argument("--client-connections", type=positive(int), metavar="N",
                   help="the closed-loop client's connection pool: at most N requests at the server, the other "
                        "clients' sends waiting with their clocks running (serving.arrivals.max_connections; "
                        "aiohttp's default connector holds 100; default: a connection per client)")
    p.add_argument("--requests-per-client", type=positive(int),
                   help="closed-loop requests per client where the file does not record how many it sent (default 10, "
                        "as InferenceMAX's client)")
    p.add_argument("--limit", type=positive(int), help="replay about this many runs, spread over the table (an LLMServingSim case folder: its first N requests)")
    p.add_argument("--held-out", action="store_true",
                   help="only the runs scripts/fit_engine_overheads.py did not fit on (half of the H100 rows)")
    p.add_argument("--json", metavar="PATH", help="write every run's measured and simulated means, signed errors "
                   "and the MAPE tables as JSON (numbers in seconds and requests/s; not for a case folder)")
    p.add_argument("--summary", action="store_true", help="only the MAPE table, not every run")
    p.add_argument("--workers", type=int, metavar="N",
                   help="worker processes, each taking whole groups of runs that share step costs (default: all "
                        "cores; 1: in this process); the results do not depend on it")
    p.add_argument("--plots", metavar="DIR", help="write the plots into DIR (created): scatter.png (simulated vs "
                   "measured TTFT and TPOT), errors_vs_concurrency.png (signed errors by clients) and errors_vs_rate.png "
                   "(by requests/s), each where such runs are (not for a case folder)")
    p.add_argument("--plot", metavar="PATH", help="write only the scatter plot, to PATH")
    p.set_defaults(func=cmd_validate_serving)

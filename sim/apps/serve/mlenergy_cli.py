"""`sim validate-energy PATH --hw PRESET`: replay ML.ENERGY's measured serving runs (issue 33) on a
preset and print the simulated J per output token, power per GPU and output tokens/s against the
measured ones (sim.apps.serve.mlenergy states the replay's assumptions: input lengths are not
published). PATH is the runs CSV (energy/mlenergy_llm_runs.csv of the shared validation data) or a
folder holding it (as `energy/mlenergy_llm_runs.csv` or `mlenergy_llm_runs.csv`)."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sim.apps.arg_types import Once, positive
from sim.core import tables
from sim.core.errors import ConfigError
from sim.core.files import check_output, write_json

if TYPE_CHECKING:
    from rich.table import Table


def _csv_path(path: Path) -> Path:
    from sim.apps.serve import mlenergy as M

    if path.is_dir():
        for p in (path / M.CSV_NAME, path / Path(M.CSV_NAME).name):
            if p.is_file():
                return p
        raise ConfigError(f"{path}: no {M.CSV_NAME} or {Path(M.CSV_NAME).name} in this folder")
    if not path.is_file():
        raise ConfigError(f"{path}: not found")
    return path


def _gpu_of(hw: str) -> str:
    """The ML.ENERGY GPU whose runs `--hw` replays: a preset of mlenergy.PRESETS, or a hardware file whose preset name
    begins with that preset's GPU (an energy trial's h100_sxm copies, a power model to check, were refused)."""
    from hw_models.machine import load_machine
    from sim.apps.serve import mlenergy as M

    gpus = {preset: gpu for gpu, preset in M.PRESETS.items()}
    machine = load_machine(hw)
    found = [gpu for preset, gpu in gpus.items() if machine.kind == "gpu" and (
        machine.name == preset or machine.name.split("_")[0] == preset.split("_")[0])]   # not h100_offload (a review)
    if not found:
        raise ConfigError(f"--hw {hw}: ML.ENERGY has runs on " + ", ".join(f"{p} ({g})" for p, g in gpus.items())
                          + "; a gpu-kind hardware file whose preset name begins with one's GPU (h100_..., b200_...)")
    return found[0]


def _runs(args: argparse.Namespace) -> tuple[list, set]:
    """The runs to replay, and those of the whole table the shipped power figures were fitted on."""
    from sim.apps.serve import mlenergy as M

    gpu = _gpu_of(args.hw)
    path = _csv_path(Path(args.path))
    try:
        runs = M.read_runs(path)
    except UnicodeDecodeError:   # a ValueError too: caught first, its codec text says nothing to a user
        raise ConfigError(f"{path}: not a text CSV (binary content that is not gzip)") from None
    except EOFError as e:   # a gzip cut short
        raise ConfigError(f"{path}: {e} (a truncated gzip?)") from None
    except (ValueError, KeyError, csv.Error, OSError) as e:   # OSError: gzip's BadGzipFile
        raise ConfigError(f"{path}: {e}") from None
    fitted = set(M.fit_runs(runs))
    runs = M.select(runs, gpu, args.every, args.max_num_seqs, tuple(args.task) if args.task else None)
    runs = runs[: args.limit]
    if not runs:
        raise ConfigError(f"{path}: no replayable {gpu} run (bf16 Llama-3.1/3.3, Qwen3 dense and MoE; "
                          f"max_num_seqs <= {args.max_num_seqs}{'; task ' + ', '.join(args.task) if args.task else ''})")
    return runs, fitted


def _table(replays: list, fitted: set) -> Table:
    from rich.table import Table


    t = Table(title="ML.ENERGY runs: simulated vs measured (error = sim / measured - 1); fit: the run is one the "
                    "shipped power figures were fitted on (in sample)")
    for col in ("model", "task", "GPUs", "max_num_seqs", "fit", "J/token", "measured", "error", "W/GPU", "measured",
                "error", "tok/s error"):
        t.add_column(col)
    for x in replays:
        r = x.run
        t.add_row(r.model.split("/")[1], r.task, str(r.num_gpus), str(r.max_num_seqs), "yes" if r in fitted else "",
                  f"{x.j_per_token:.4f}", f"{r.j_per_token:.4f}", f"{x.j_error:+.1%}", f"{x.power_per_gpu_w:.0f}",
                  f"{r.power_per_gpu_w:.0f}", f"{x.power_error:+.1%}", f"{x.throughput_error:+.1%}")
    for label, _, xs in _groups(replays, fitted):
        e = _errors(xs)
        t.add_row(f"MAPE ({len(xs)} runs{label})", "", "", "", "", "", "",
                  f"{e['j_per_token']:.1%} (median {_median(xs):+.1%})", "", "",
                  f"{e['power_per_gpu']:.1%}", f"{e['throughput']:.1%}")
    return t


def _groups(replays: list, fitted: set) -> list[tuple[str, dict, list]]:
    """The runs the MAPEs are taken over, each with its table label and its JSON keys: all; those in the power fit
    and the others (where both occur); each (model, GPUs), whose signed median shows what one MAPE over every model
    hides (an energy trial: the 8B's error grows with max_num_seqs, -6 to -31%, inside an 8% MAPE)."""
    from sim.apps.serve import mlenergy as M

    out = [("", {"runs_of": "all"}, replays)]
    if any(x.run in fitted for x in replays) and not all(x.run in fitted for x in replays):
        # "not in the fit": the fit's models' other runs, as docs/energy.md's table counts them (a review: the runs of
        # models the fit never saw had joined them)
        out += [(" in the power fit", {"runs_of": "fit", "in_fit": True}, [x for x in replays if x.run in fitted]),
                (" of its models not in the power fit", {"runs_of": "fit", "in_fit": False},
                 [x for x in replays if x.run not in fitted and x.run.model in M.FIT_MODELS])]
    unseen = [x for x in replays if x.run.model not in M.FIT_MODELS]
    if unseen and len(unseen) < len(replays):   # models added after the fit: held out by model (mlenergy.FIT_MODELS)
        out.append((" of models the fit did not see", {"runs_of": "unseen_models"}, unseen))
    by: dict[tuple[str, int], list] = {}
    for x in replays:
        by.setdefault((x.run.model.split("/")[1], x.run.num_gpus), []).append(x)
    if len(by) > 1:
        out += [(f": {model}, {gpus} GPU{'s' if gpus > 1 else ''}", {"runs_of": "model", "model": model, "gpus": gpus},
                 xs) for (model, gpus), xs in sorted(by.items())]
    return out


def _errors(xs: list) -> dict[str, float]:
    """MAPEs of J/token, power and tokens/s over `xs`."""
    from sim.apps.serve import mlenergy as M

    return dict(j_per_token=M.mape([x.j_error for x in xs]), power_per_gpu=M.mape([x.power_error for x in xs]),
                throughput=M.mape([x.throughput_error for x in xs]))


def _median(xs: list) -> float:
    """The median signed J/token error over `xs`."""
    import statistics

    return statistics.median(x.j_error for x in xs)


def _inputs_line(scale: float) -> str:
    """The prompt lengths the replays assumed (ML.ENERGY publishes none; a trial found the table silent on it)."""
    from sim.apps.serve.mlenergy import INPUT_CV
    from sim.apps.serve.mlenergy_inputs import INPUT_MEAN

    means = ", ".join(f"{task} {mean * scale:g}" for task, mean in INPUT_MEAN.items())
    return (f"note: prompt lengths are assumed, not published: lognormal (cv {INPUT_CV:g}) with mean tokens {means}"
            f"{f' (--input-scale {scale:g})' if scale != 1 else ''}; sim.apps.serve.mlenergy_inputs, docs/energy.md")


def _record(x, fitted: set) -> dict:
    return dict(run=x.run.__dict__, in_fit=x.run in fitted, j_per_token=x.j_per_token, power_per_gpu_w=x.power_per_gpu_w,
                throughput_tok_s=x.throughput_tok_s, j_error=x.j_error, power_error=x.power_error,
                throughput_error=x.throughput_error)


def cmd_validate_energy(args: argparse.Namespace) -> int:
    from hw_models.machine import load_machine
    from sim.apps.serve import mlenergy as M
    from sim.core.settings import hw_only, split_settings

    if args.json:
        check_output(args.json)
    runs, fitted = _runs(args)
    machine = load_machine(args.hw, hw_only(split_settings(args.set), "validate-energy"))   # the runs say the rest
    replays = [M.replay(r, machine, input_scale=args.input_scale, sampling=args.sampling) for r in runs]
    tables.console().print(_table(replays, fitted))
    print(_inputs_line(args.input_scale), file=sys.stderr)
    if args.json:
        write_json(args.json, dict(hw=args.hw, input_scale=args.input_scale, sampling=args.sampling,
                                   runs=[_record(x, fitted) for x in replays], mape=_errors(replays),
                                   # every MAPE row of the table (an energy trial: the JSON held the overall alone)
                                   groups=[dict(**keys, runs=len(xs), mape=_errors(xs), j_median_error=_median(xs))
                                           for _, keys, xs in _groups(replays, fitted)]))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("validate-energy", help="replay ML.ENERGY's measured serving runs: J/token and power errors",
                              description=__doc__)
    p.add_argument("path", metavar="PATH", help="mlenergy_llm_runs.csv or a folder holding it")
    p.add_argument("--hw", action=Once, default="h100_sxm",
                   help="h100_sxm (H100 runs) or b200 (B200 runs), or a hardware file whose preset name begins with "
                        "one's GPU (h100_..., b200_...); default %(default)s")
    p.add_argument("--set", action="append", metavar="hw.KEY=VALUE",
                   help="override a hardware field of --hw (hw.units.gpu.active_power_w=250): a power model to check")
    p.add_argument("--every", type=positive(int), default=1, help="every Nth run of each sweep (default %(default)s)")
    p.add_argument("--limit", type=positive(int), help="at most this many runs")
    p.add_argument("--max-num-seqs", type=positive(int), default=512,
                   help="only runs up to this max_num_seqs (larger ones take minutes each; default %(default)s)")
    p.add_argument("--task", choices=("lm-arena-chat", "gpqa", "sourcegraph-fim"), action="append",
                   help="only this task's runs (repeat for several: docs/energy.md's table is --task lm-arena-chat "
                        "--task sourcegraph-fim --every 2)")
    p.add_argument("--input-scale", type=positive(float), default=1.0,
                   help="scale the assumed mean input lengths (inputs are not published; default %(default)s)")
    p.add_argument("--sampling", choices=("top_p", "greedy", "random"), default="top_p",
                   help="how the replay samples: the benchmark's client sends top_p 0.95 (default); greedy or random "
                        "replays without the top-p sampler's GPU work, to see its share")
    p.add_argument("--json", metavar="PATH", help="write the runs and errors as JSON")
    p.set_defaults(func=cmd_validate_energy)

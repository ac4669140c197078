#!/usr/bin/env python3
"""Energy against ML.ENERGY's measured serving runs (issue 33): fit on H100, report B200 out of sample.

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/energy_mlenergy.py [--every N] [--write]
    ... --fit            the fitted figures (scripts/fit_energy.py: H100 runs only) into docs/energy.md
    ... --sensitivity    J/token and power against the assumed input lengths (x0.5, x1, x2, LMSYS-Chat-1M's)

The replay is sim.apps.serve.mlenergy (its module doc states the assumptions). `--write`
replaces the generated section of docs/energy.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from fit_energy import MAX_SEQS, TASKS, fit_line, fit_runs  # noqa: E402
from hw_models.machine import load_machine  # noqa: E402
from sim.apps.serve import mlenergy as M  # noqa: E402
from sim.apps.serve import mlenergy_fit as F  # noqa: E402
from sim.apps.serve import mlenergy_inputs as I  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402

SHARED = shared_validation_dir()
DOC = ROOT / "docs" / "energy.md"
START, END = "<!-- energy-validation:start -->", "<!-- energy-validation:end -->"
# Replay time (minutes per run on a shared 2-core machine): runs above MAX_SEQS and gpqa's (8,000-token outputs)
# are left out of the table, as out of the fit (scripts/fit_energy.py); the CSV has them.


def collect(gpu: str, every: int, cache: Path | None, cached_only: bool = False) -> list[F.Components]:
    """Components of the sampled runs of `gpu` (max_num_seqs <= MAX_SEQS), read from / written to `cache`
    (`cached_only`: the sampled runs the cache has, no new replays)."""
    runs = M.load_runs(SHARED)
    keys = F.run_keys(runs)
    by_key = {k: r for r, k in keys.items()}
    have = {c.run: c for c in (F.from_dict(d, by_key) for d in (json.loads(cache.read_text())
                                                                  if cache and cache.is_file() else [])) if c}
    out = []
    for r in M.select(runs, gpu, every, MAX_SEQS, TASKS):
        if cached_only and r not in have:
            continue
        c = have.get(r) or F.components(r)
        have[r] = c
        out.append(c)
        if cache:
            cache.write_text(json.dumps([x.to_dict(keys) for x in have.values()]))
    return out


def table(replays: list[M.Replay]) -> str:
    groups: dict[tuple, list[M.Replay]] = {}
    for x in replays:
        groups.setdefault((x.run.gpu, x.run.model.split("/")[1], x.run.precision, x.run.num_gpus), []).append(x)
    rows = ["| GPU | model | precision | GPUs | runs | J/token MAPE | J/token median | power MAPE | power median | "
            "tok/s MAPE |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (gpu, model, prec, n), xs in sorted(groups.items()):
        je, pe, te = ([getattr(x, k) for x in xs] for k in ("j_error", "power_error", "throughput_error"))
        rows.append(f"| {gpu} | {model} | {prec} | {n} | {len(xs)} | {M.mape(je):.1%} | {np.median(je):+.1%} | "
                    f"{M.mape(pe):.1%} | {np.median(pe):+.1%} | {M.mape(te):.1%} |")
    fitted = set(fit_runs(M.load_runs(SHARED)))
    h100 = [x for x in replays if x.run.gpu == "H100"]
    fit_models = [x for x in h100 if x.run.model in M.FIT_MODELS]
    parts = [("H100 runs the fit used", [x for x in fit_models if x.run in fitted]),
             ("H100 runs it did not, of its models", [x for x in fit_models if x.run not in fitted])]
    for gpu in ("H100", "B200"):
        xs = [x for x in replays if x.run.gpu == gpu]
        parts += [(f"**{gpu}, the fit's models**", [x for x in xs if x.run.model in M.FIT_MODELS]),
                  (f"{gpu}, models the fit did not see", [x for x in xs if x.run.model not in M.FIT_MODELS]),
                  (f"**{gpu} all**", xs)]
    rows += [summary_row(name, xs) for name, xs in parts if xs]
    return "\n".join(rows)


def summary_row(name: str, xs: list[M.Replay]) -> str:
    """A table row of `xs`' MAPEs and medians; a name in bold has its MAPEs in bold, any other is in italics."""
    bold = name.startswith("**")
    mark = (lambda v: f"**{v}**") if bold else (lambda v: v)
    je, pe = [x.j_error for x in xs], [x.power_error for x in xs]
    return (f"| {name if bold else f'*{name}*'} | | | | {len(xs)} | {mark(f'{M.mape(je):.1%}')} | {np.median(je):+.1%} | "
            f"{mark(f'{M.mape(pe):.1%}')} | {np.median(pe):+.1%} | {M.mape([x.throughput_error for x in xs]):.1%} |")


def preset_figures(gpu: str) -> tuple[float, float, float, float]:
    """(active_power_w, fp16 J/FLOP, HBM J/byte, power limit W) of the GPU's preset."""
    m = load_machine(M.PRESETS[gpu])
    u = m.units["gpu"]
    return u.active_power_w, u.energy_j_per_flop["fp16"], m.memory[u.memory].energy_j_per_byte, \
        u.power_limit_w or u.power_w


def run_table(every: int, cache: Path | None, gpus: tuple[str, ...] = ("H100", "B200"),
              cached_only: bool = False) -> tuple[list[M.Replay], str]:
    """Every sampled run at its preset's figures: by linearity from its components, or, where the prediction
    comes within CAP_MARGIN of the power limit, replayed under the cap."""
    replays = []
    for gpu in gpus:
        active_w, j, b, limit = preset_figures(gpu)
        for c in collect(gpu, every, cache and cache.with_name(f"{cache.stem}_{gpu}{cache.suffix}"), cached_only):
            x = F.predict(c, active_w, j, b)
            capped = x.power_per_gpu_w > F.CAP_MARGIN * limit
            if capped:
                x = M.replay(x.run)
            replays.append(x)
            r = x.run
            print(f"  {r.gpu} {r.preset} tp{r.tp} ep{r.ep} {r.task} seqs {r.max_num_seqs}: J/token {x.j_per_token:.4f} "
                  f"vs {r.j_per_token:.4f} ({x.j_error:+.0%}), W/GPU {x.power_per_gpu_w:.0f} vs {r.power_per_gpu_w:.0f} "
                  f"({x.power_error:+.0%}), tok/s {x.throughput_error:+.0%}{' (capped)' if capped else ''}", flush=True)
    return replays, table(replays)


def sensitivity() -> str:
    """J/token and power of a few runs at x0.5, x1 and x2 the assumed input lengths, and at the chat prompt
    LMSYS-Chat-1M's statistics would give (sim.apps.serve.mlenergy_inputs)."""
    lmsys = I.request_prompt_tokens(I.LMSYS_CHAT_1M) / M.INPUT_MEAN["lm-arena-chat"]
    runs = M.load_runs(SHARED)
    pick = [r for r in runs if (r.gpu, r.preset, r.max_num_seqs) in
            {("H100", "llama3-8b", 64), ("H100", "llama3-70b", 64), ("B200", "llama3-8b", 64)}
            and r.model != "meta-llama/Llama-3.3-70B-Instruct"]
    rows = ["| run | input scale | J/token | error | W/GPU | error |", "|---|---:|---:|---:|---:|---:|"]
    for r in pick:
        for s in (0.5, 1.0, 2.0, round(lmsys, 2)):
            x = M.replay(r, input_scale=s)
            rows.append(f"| {r.gpu} {r.preset} seqs {r.max_num_seqs} | {s:g} | {x.j_per_token:.4f} | {x.j_error:+.1%} | "
                        f"{x.power_per_gpu_w:.0f} | {x.power_error:+.1%} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=4, help="replay every Nth run of each sweep (default %(default)s)")
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--sensitivity", action="store_true")
    ap.add_argument("--cache", type=Path, help="JSON file (one per GPU, suffixed) to keep the replays' components in")
    ap.add_argument("--gpus", default="H100,B200", help="GPUs of the table (default %(default)s)")
    ap.add_argument("--cached-only", action="store_true", help="the table of the sampled runs --cache has, no replays")
    ap.add_argument("--write", action="store_true", help="replace the generated section of docs/energy.md")
    args = ap.parse_args()
    if not (SHARED / M.CSV_NAME).is_file():
        sys.exit(f"{SHARED / M.CSV_NAME}: not found (shared validation data; set SIM_SHARED_VALIDATION)")
    if args.fit:
        body, section = fit_line(), ("<!-- energy-fit:start -->", "<!-- energy-fit:end -->")
    elif args.sensitivity:
        body, section = sensitivity(), (START.replace(":", "-sensitivity:"), END.replace(":", "-sensitivity:"))
    else:
        body, section = run_table(args.every, args.cache, tuple(args.gpus.split(",")), args.cached_only)[1], (START, END)
    print(body)
    if args.write:
        text = DOC.read_text()
        a, b = text.index(section[0]) + len(section[0]), text.index(section[1])
        DOC.write_text(text[:a] + "\n" + body + "\n" + text[b:])
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Energy against ML.ENERGY's measured serving runs (issue 33): fit on H100, report B200 out of sample.

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/energy_mlenergy.py [--every N] [--write]
    ... --fit            the one fitted figure (active_power_w, H100 runs only; see docs/energy.md)
    ... --sensitivity    J/token and power against the assumed input lengths (x0.5, x2)

The replay is sim.apps.serve.mlenergy (its module doc states the assumptions). `--write`
replaces the generated section of docs/energy.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from hw_models.machine import load_machine  # noqa: E402
from hw_models.registry import simulate  # noqa: E402
from sim.apps.serve import mlenergy as M  # noqa: E402
from sim.apps.serve.energy import energy_window  # noqa: E402
from sim.apps.serve.run import serve  # noqa: E402
from sim.core.workload import workload_from_dict  # noqa: E402

SHARED = Path(os.environ.get("SIM_SHARED_VALIDATION", ROOT.parent / "shared" / "validation"))
DOC = ROOT / "docs" / "energy.md"
START, END = "<!-- energy-validation:start -->", "<!-- energy-validation:end -->"
# The formats' energy per FLOP relative to fp16 (hw_models/presets/h200.yaml: ASSUMED ratios).
FLOP_RATIOS = {"fp16": 1.0, "bf16": 1.0, "fp8_e4m3": 0.5, "fp8_e5m2": 0.5, "int8": 0.5, "fp32": 3.0, "vector": 3.0}
NO_CAP = 1e6   # W: the fit's replays run uncapped, so their times do not depend on the figures fitted
# Replay time (minutes per run on a shared 2-core machine): runs above MAX_SEQS and gpqa's (8,000-token outputs)
# are left out of the table; the CSV has them.
MAX_SEQS = 512
TASKS = ("lm-arena-chat", "sourcegraph-fim")
FIT_EVERY = 4   # the fit's sample: every 4th run of each sweep (--fit --every 4, docs/energy.md)
CAP_MARGIN = 0.97   # a run predicted above this share of its power limit is replayed under the cap


def _machine(preset: str, active_w: float, fp16_j_per_flop: float):
    return load_machine(preset, {"units.gpu.active_power_w": active_w, "units.gpu.power_limit_w": NO_CAP,
                                 "units.gpu.energy_j_per_flop": {k: r * fp16_j_per_flop
                                                                 for k, r in FLOP_RATIOS.items()}})


def components(run: M.Run) -> dict:
    """One run's steady-state power per GPU as its parts: `p0` idle + bytes (+ links) (W), `busy` the GPU's
    busy share (W per W of active_power_w), `per_pj` W per pJ/FLOP of fp16 (the formats' ratios held), and
    `tput` the output tokens/s. Uncapped, energy is linear in these figures and the time does not depend on
    them, so two replays give the power and J/token at any (active_power_w, J/FLOP)."""
    out = []
    for scale in (0.0, 1e-12):
        res, _ = serve(M.serve_file(run), _machine(M.PRESETS[run.gpu], 0.0, scale))
        t0, t1 = M.steady_window(res, run.max_num_seqs)
        joules, tokens = energy_window(res, t0, t1)
        out.append((joules / (t1 - t0) / run.num_gpus, tokens / (t1 - t0), res.busy_s.get("gpu", 0.0) / res.makespan_s))
    (p0, tput, busy), (p1, _, _) = out
    return dict(run=run.__dict__, p0=p0, busy=busy, per_pj=p1 - p0, tput=tput)


def collect(gpu: str, every: int, cache: Path | None, cached_only: bool = False) -> list[dict]:
    """Components of the sampled runs of `gpu` (max_num_seqs <= MAX_SEQS), read from / written to `cache`
    (`cached_only`: the sampled runs the cache has, no new replays)."""
    have = {json.dumps(c["run"], sort_keys=True): c for c in (json.loads(cache.read_text()) if cache and cache.is_file()
                                                              else [])}
    out = []
    for r in M.sample([r for r in M.load_runs(SHARED) if r.gpu == gpu], every):
        if r.max_num_seqs > MAX_SEQS or r.task not in TASKS:
            continue
        key = json.dumps(r.__dict__, sort_keys=True)
        if cached_only and key not in have:
            continue
        c = have.get(key) or components(r)
        have[key] = c
        out.append(c)
        if cache:
            cache.write_text(json.dumps(list(have.values())))
    return out


def predict(c: dict, active_w: float, fp16_j_per_flop: float) -> M.Replay:
    """The replay of `c`'s run at these figures (uncapped: exact by linearity, components())."""
    run = M.Run(**c["run"])
    w = c["p0"] + active_w * c["busy"] + fp16_j_per_flop * 1e12 * c["per_pj"]
    return M.Replay(run, w * run.num_gpus / c["tput"], w, c["tput"])


def h200_prefill_line() -> tuple[float, float]:
    """The fp16 J/FLOP that makes the H200's measured prefill (h200_micro.json; scripts/energy_h200.py) come
    out, as (its value at active_power_w 0, its change per W of active_power_w): the prefill keeps the GPU
    busy throughout, so what active power takes of the measured energy the FLOPs no longer explain."""
    import json
    micro = json.loads((SHARED / "h200" / "h200_micro.json").read_text())["power"]
    meas = micro["prefill_llama2_7b_fp16_b1_p2048"]
    t_s = meas["ms_per_call"] / 1e3
    w = workload_from_dict(dict(name="prefill", model="llama2-7b", batch=1, prompt_len=2048, gen_len=1,
                                formats=dict(weights="fp16", activations="fp16", kv_cache="fp16")), "energy fit")
    e = []
    for scale in (0.0, 1e-12):
        r = simulate(w, _machine("h200", 0.0, scale), detail=False)
        e.append(r.prefill_energy_per_token_j * 2048 - micro["idle_w"] * r.ttft_s)
    bytes_j, per_pj = e[0], (e[1] - e[0]) / 1e-12
    return ((meas["avg_power_w"] - micro["idle_w"]) * t_s - bytes_j) / per_pj, -t_s / per_pj


def fit(comps: list[dict]) -> tuple[float, float, float]:
    """(active_power_w, fp16 J/FLOP, power MAPE): the active power whose H200-prefill-tied J/FLOP gives the
    smallest mean |power error| over the H100 runs `comps`."""
    j0, slope = h200_prefill_line()
    best = None
    for a in np.arange(0.0, 600.0, 1.0):
        j = j0 + slope * a
        if j < 0:
            break
        err = M.mape([predict(c, a, j).power_error for c in comps])
        if best is None or err < best[2]:
            best = (float(a), float(j), err)
    return best


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
    fitted = {json.dumps(r.__dict__, sort_keys=True) for r in M.sample(M.load_runs(SHARED), FIT_EVERY)}
    h100 = [x for x in replays if x.run.gpu == "H100"]
    parts = [("H100 runs the fit used", [x for x in h100 if json.dumps(x.run.__dict__, sort_keys=True) in fitted]),
             ("H100 runs it did not", [x for x in h100 if json.dumps(x.run.__dict__, sort_keys=True) not in fitted])]
    for name, xs in parts:
        if xs:
            rows.append(f"| *{name}* | | | | {len(xs)} | {M.mape([x.j_error for x in xs]):.1%} | "
                        f"{np.median([x.j_error for x in xs]):+.1%} | {M.mape([x.power_error for x in xs]):.1%} | "
                        f"{np.median([x.power_error for x in xs]):+.1%} | {M.mape([x.throughput_error for x in xs]):.1%} |")
    for gpu in ("H100", "B200"):
        xs = [x for x in replays if x.run.gpu == gpu]
        if xs:
            rows.append(f"| **{gpu} all** | | | | {len(xs)} | **{M.mape([x.j_error for x in xs]):.1%}** | "
                        f"{np.median([x.j_error for x in xs]):+.1%} | **{M.mape([x.power_error for x in xs]):.1%}** | "
                        f"{np.median([x.power_error for x in xs]):+.1%} | "
                        f"{M.mape([x.throughput_error for x in xs]):.1%} |")
    return "\n".join(rows)


def preset_figures(gpu: str) -> tuple[float, float, float]:
    """(active_power_w, fp16 J/FLOP, power limit W) of the GPU's preset."""
    u = load_machine(M.PRESETS[gpu]).units["gpu"]
    return u.active_power_w, u.energy_j_per_flop["fp16"], u.power_limit_w or u.power_w


def run_table(every: int, cache: Path | None, gpus: tuple[str, ...] = ("H100", "B200"),
              cached_only: bool = False) -> tuple[list[M.Replay], str]:
    """Every sampled run at its preset's figures: by linearity from its components, or, where the prediction
    comes within CAP_MARGIN of the power limit, replayed under the cap."""
    replays = []
    for gpu in gpus:
        active_w, j, limit = preset_figures(gpu)
        for c in collect(gpu, every, cache and cache.with_name(f"{cache.stem}_{gpu}{cache.suffix}"), cached_only):
            x = predict(c, active_w, j)
            capped = x.power_per_gpu_w > CAP_MARGIN * limit
            if capped:
                x = M.replay(x.run)
            replays.append(x)
            r = x.run
            print(f"  {r.gpu} {r.preset} tp{r.tp} ep{r.ep} {r.task} seqs {r.max_num_seqs}: J/token {x.j_per_token:.4f} "
                  f"vs {r.j_per_token:.4f} ({x.j_error:+.0%}), W/GPU {x.power_per_gpu_w:.0f} vs {r.power_per_gpu_w:.0f} "
                  f"({x.power_error:+.0%}), tok/s {x.throughput_error:+.0%}{' (capped)' if capped else ''}", flush=True)
    return replays, table(replays)


def sensitivity() -> str:
    """J/token and power of a few runs at x0.5 and x2 the assumed input lengths."""
    runs = M.load_runs(SHARED)
    pick = [r for r in runs if (r.gpu, r.preset, r.max_num_seqs) in
            {("H100", "llama3-8b", 64), ("H100", "llama3-70b", 64), ("B200", "llama3-8b", 64)}
            and r.model != "meta-llama/Llama-3.3-70B-Instruct"]
    rows = ["| run | input scale | J/token | error | W/GPU | error |", "|---|---:|---:|---:|---:|---:|"]
    for r in pick:
        for s in (0.5, 1.0, 2.0):
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
    cache = args.cache and args.cache.with_name(f"{args.cache.stem}_H100{args.cache.suffix}")
    if args.fit:
        comps = collect("H100", args.every, cache)
        a, j, err = fit(comps)
        j0, slope = h200_prefill_line()
        body = (f"Fitted on {len(comps)} H100 runs (every {args.every}th of each sweep): active_power_w **{a:.0f} W**, "
                f"and with it fp16 **{j * 1e12:.3f} pJ/FLOP** (the H200 prefill line: {j0 * 1e12:.3f} pJ/FLOP "
                f"{slope * 1e12:+.5f} per W of active power); power MAPE at the fit {err:.1%}.")
        section = ("<!-- energy-fit:start -->", "<!-- energy-fit:end -->")
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

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


def _machine(preset: str, active_w: float, fp16_j_per_flop: float):
    return load_machine(preset, {"units.gpu.active_power_w": active_w, "units.gpu.power_limit_w": NO_CAP,
                                 "units.gpu.energy_j_per_flop": {k: r * fp16_j_per_flop
                                                                 for k, r in FLOP_RATIOS.items()}})


def components(run: M.Run) -> tuple[float, float, float, float]:
    """One run's power per GPU as idle + bytes (W), + per unit of active_power_w (the GPU's busy share),
    + per pJ/FLOP of fp16 (W); and the steady-state output tokens/s. Energy is linear in these figures
    when no cap binds, so two replays give the power at any (active_w, J/FLOP)."""
    out = []
    for scale in (0.0, 1e-12):
        res, _ = serve(M.serve_file(run), _machine(M.PRESETS[run.gpu], 0.0, scale))
        t0, t1 = M.steady_window(res, run.max_num_seqs)
        joules, tokens = energy_window(res, t0, t1)
        out.append((joules / (t1 - t0) / run.num_gpus, tokens / (t1 - t0), res.busy_s.get("gpu", 0.0) / res.makespan_s))
    (p0, tput, busy), (p1, _, _) = out
    return p0, busy, p1 - p0, tput


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


def fit(every: int) -> None:
    runs = M.sample([r for r in M.load_runs(SHARED) if r.gpu == "H100"], every)
    comps = []
    for r in runs:
        comps.append(components(r))
        print(f"  {r.preset} tp{r.tp} B{r.max_num_seqs}: base {comps[-1][0]:.0f} W, busy {comps[-1][1]:.2f}, "
              f"{comps[-1][2]:.0f} W per pJ/FLOP", flush=True)
    meas = np.array([r.power_per_gpu_w for r in runs])
    j0, slope = h200_prefill_line()
    best = None
    for a in np.arange(0.0, 600.0, 2.5):
        j = j0 + slope * a
        if j < 0:
            break
        pred = np.array([p0 + a * u + j * 1e12 * f for p0, u, f, _ in comps])
        err = float(np.mean(np.abs(pred / meas - 1)))
        if best is None or err < best[0]:
            best = (err, a, j)
    print(f"fitted on {len(runs)} H100 runs: active_power_w {best[1]:.1f} W, fp16 {best[2]:.3g} J/FLOP "
          f"(H200 prefill line {j0:.3g} {slope:+.3g} x active_w), power MAPE {best[0]:.1%}")


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
    for gpu in ("H100", "B200"):
        xs = [x for x in replays if x.run.gpu == gpu]
        if xs:
            rows.append(f"| **{gpu} all** | | | | {len(xs)} | **{M.mape([x.j_error for x in xs]):.1%}** | "
                        f"{np.median([x.j_error for x in xs]):+.1%} | **{M.mape([x.power_error for x in xs]):.1%}** | "
                        f"{np.median([x.power_error for x in xs]):+.1%} | "
                        f"{M.mape([x.throughput_error for x in xs]):.1%} |")
    return "\n".join(rows)


def run_table(every: int) -> tuple[list[M.Replay], str]:
    replays = []
    for r in M.sample(M.load_runs(SHARED), every):
        x = M.replay(r)
        replays.append(x)
        print(f"  {r.gpu} {r.preset} tp{r.tp} ep{r.ep} {r.task} seqs {r.max_num_seqs}: J/token {x.j_per_token:.4f} vs "
              f"{r.j_per_token:.4f} ({x.j_error:+.0%}), W/GPU {x.power_per_gpu_w:.0f} vs {r.power_per_gpu_w:.0f} "
              f"({x.power_error:+.0%}), tok/s {x.throughput_error:+.0%}", flush=True)
    return replays, table(replays)


def sensitivity() -> str:
    """J/token and power of a few runs at x0.5 and x2 the assumed input lengths."""
    runs = M.load_runs(SHARED)
    pick = [r for r in runs if (r.gpu, r.preset, r.max_num_seqs) in
            {("H100", "llama3-8b", 64), ("H100", "llama3-70b", 256), ("B200", "llama3-8b", 256)}
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
    ap.add_argument("--every", type=int, default=3, help="replay every Nth run of each sweep (default %(default)s)")
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--sensitivity", action="store_true")
    ap.add_argument("--write", action="store_true", help="replace the generated section of docs/energy.md")
    args = ap.parse_args()
    if not (SHARED / M.CSV_NAME).is_file():
        sys.exit(f"{SHARED / M.CSV_NAME}: not found (shared validation data; set SIM_SHARED_VALIDATION)")
    if args.fit:
        fit(args.every)
        return 0
    body = sensitivity() if args.sensitivity else run_table(args.every)[1]
    print(body)
    if args.write:
        text = DOC.read_text()
        start, end = (START, END) if not args.sensitivity else (START.replace(":", "-sensitivity:"),
                                                                END.replace(":", "-sensitivity:"))
        a, b = text.index(start) + len(start), text.index(end)
        DOC.write_text(text[:a] + "\n" + body + "\n" + text[b:])
    return 0


if __name__ == "__main__":
    sys.exit(main())

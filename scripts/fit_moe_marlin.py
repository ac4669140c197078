#!/usr/bin/env python3
"""Fit vLLM's fused Marlin MoE kernel for MXFP4 experts (kernel family marlin_moe_mxfp4) on the silicon sample's
training half: the vLLM gpt-oss-120b rows at <= 8 clients (procedure: sim/apps/serve/marlin_moe_fit.py).

    python scripts/fit_moe_marlin.py            # the fit from the stored replays and the measured table
    python scripts/fit_moe_marlin.py --replay   # replay the rows under the dense family first (a minute or two)
    python scripts/fit_moe_marlin.py --check    # exit 1 if kernel_families.yaml's curve is not the fit's, or a
                                                # stored replay is more than 2% off a fresh one

The held-out half is never read here; `sim validate-serving ... --held-out` reports it.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.machine import load_machine  # noqa: E402
from hw_models.stack.kernel_families import families  # noqa: E402
from sim.apps.serve import marlin_moe_fit as M  # noqa: E402
from sim.apps.serve import overhead_fit as F  # noqa: E402
from sim.apps.serve.validate import machine_loader, simulate  # noqa: E402
from sim.apps.serve.validate_readers import read_silicon  # noqa: E402
from sim.core.model import load_model  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402

TABLE = shared_validation_dir() / "aic" / "silicon_sample_h100.csv.gz"
COMPONENTS = ROOT / "scripts" / "marlin_moe_fit_components.json"
STALE = 0.02
# The replay's experts take the dense weight-only FP4 family, as the vllm stack priced them before this fit.
DENSE_STACK = {"stacks": {"vllm": {"quant_gemm_experts_by_capability": {9.0: {"mxfp4": M.DENSE}}}}}


def fit_runs() -> list:
    runs, _ = read_silicon(TABLE, F.TRAINING_SYSTEMS)
    return [r for r in runs if r.model == M.MODEL and r.engine == "vllm" and F.in_training(r.name)
            and r.concurrency <= M.MAX_CLIENTS]


def replay(runs: list) -> list[M.Point]:
    warnings.simplefilter("ignore")
    results, failed = simulate(runs, machine_loader(overrides=DENSE_STACK))
    if failed:
        raise SystemExit(f"{len(failed)} run(s) failed: {failed[0]}")
    return [M.Point(r.run.name, r.run.isl, r.run.tp, r.run.measured["ttft_s"], r.sim["ttft_s"]) for r in results]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replay", action="store_true", help="replay the fit's rows under the dense family first")
    ap.add_argument("--check", action="store_true", help="exit 1 if the shipped curve or the stored replays are stale")
    args = ap.parse_args()
    if not TABLE.is_file():
        print(f"{TABLE}: not found (set SIM_SHARED_VALIDATION)", file=sys.stderr)
        return 2
    runs = fit_runs()
    if args.replay:
        M.save(replay(runs), COMPONENTS)
        print(f"wrote {COMPONENTS}")
    points = M.load(COMPONENTS, {r.name: r.measured["ttft_s"] for r in runs})
    model, peak = load_model(M.PRESET), load_machine("h100_sxm").units["gpu"].peak_flops_per_s["bf16"]
    for p in sorted(points, key=lambda p: (p.isl, p.tp)):
        print(f"  isl {p.isl:5d} tp {p.tp}  measured {p.measured_ttft_s * 1e3:7.1f} ms  dense family "
              f"{p.dense_ttft_s * 1e3:7.1f} ms  -> {p.rows_per_expert(model):3d} rows/expert at "
              f"{p.fraction(model, peak):.3f} of the bf16 peak")
    curve, exponent, ref = M.fit(points, model, peak)
    print(f"{M.FAMILY} rate_points: {curve}, size_exponent: {exponent}, size_ref: {ref:.6g} (least squares over "
          f"{len(points)} training rows: a fraction per prompt length at TP {M.SIZE_TP}'s size, one slope in size)")
    if not args.check:
        return 0
    bad = []
    shipped = families()[M.FAMILY]
    got = ([list(x) for x in shipped.rate_points], shipped.size_exponent, shipped.size_ref)
    if got[0] != curve or got[1] != exponent or got[2] is None or abs(got[2] / ref - 1.0) > 1e-9:
        bad.append(f"kernel_families.yaml {M.FAMILY} rate_points {got[0]}, size_exponent {got[1]}, size_ref {got[2]}; "
                   f"the fit gives {curve}, {exponent}, {ref:.6g}")
    stored, eligible = M.stored_ids(COMPONENTS), {r.name for r in runs}
    if stored != eligible:   # the rows the fit reads are the rows the rule selects (a review: a missing one passed)
        bad.append(f"{COMPONENTS.name} holds {len(stored)} rows, the rule selects {len(eligible)} "
                   f"({len(eligible - stored)} missing, {len(stored - eligible)} extra): rerun with --replay")
    firsts = {}   # one stored replay per (prompt, TP), replayed afresh
    for p in sorted(points, key=lambda p: p.run_id):
        firsts.setdefault((p.isl, p.tp), p)
    fresh = {f.run_id: f for f in replay([r for r in runs if r.name in {p.run_id for p in firsts.values()}])}
    for p in firsts.values():
        if abs(fresh[p.run_id].dense_ttft_s / p.dense_ttft_s - 1.0) > STALE:
            bad.append(f"stored replay of {p.run_id} {p.dense_ttft_s:.4g} s, fresh {fresh[p.run_id].dense_ttft_s:.4g} s: "
                       "rerun with --replay")
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

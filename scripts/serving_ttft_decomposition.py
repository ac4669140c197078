#!/usr/bin/env python3
"""Where the simulated TTFT of the H100 silicon-sample training runs misses the measured one, before any
fitted term (docs/serving.md, "TTFT, decomposed").

The overhead fit's features file (tests/data/engine_overheads_features.csv, written by
scripts/fit_engine_overheads.py --simulate) holds each training run's simulated mean TTFT with every fitted
term at zero. The miss, measured - simulated, is then what the terms have to carry. Three shapes are told
apart per engine and model by least squares over the runs, in ms:

* a constant (a front end: HTTP, tokenization, hand-off): miss = a;
* proportional to the prompt (a per-prompt-token cost: tokenization, or prefill kernels too slow/fast):
  miss = a + b x isl;
* proportional to the simulated TTFT itself (what the replay queues, prefill and the steps it waits for,
  at another rate: queueing / scheduling policy): miss = a + k x simulated TTFT;

each fitted on the relative miss (every run weighs alike, as in the overhead fit) and scored by the share of
the relative miss it explains (R^2 against no term at all) and by the TTFT MAPE left after it. The
bands tables split the miss by clients (<= 16, 32, >= 64) and by the measured request rate (clients / E2E): a
load-dependent miss grows across them.

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/serving_ttft_decomposition.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.apps.serve import overhead_fit as F  # noqa: E402
from sim.apps.script_help import no_options  # noqa: E402
from sim.apps.serve.validate_readers import read_silicon  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402

SHARED = shared_validation_dir()
SILICON = SHARED / "aic" / "silicon_sample_h100.csv.gz"
FEATURES = ROOT / "tests" / "data" / "engine_overheads_features.csv"
BANDS = (("<= 16", 0, 17), ("32", 17, 33), (">= 64", 33, 10**9))
RATES = (("< 5", 0.0, 5.0), ("5-20", 5.0, 20.0), (">= 20", 20.0, 1e9))   # measured requests/s: clients / E2E


def shape_fits(isl: np.ndarray, sim_ms: np.ndarray, meas_ms: np.ndarray) -> dict[str, tuple[float, float, list]]:
    """Per shape: (R^2 of the miss, TTFT MAPE after the shape's least-squares fit, its coefficients)."""
    miss = (meas_ms - sim_ms) / meas_ms   # relative, as the overhead fit weighs runs: each run alike
    ones = np.ones_like(miss)
    out = {}
    for name, cols in (("constant", [ones]), ("per prompt token", [ones, isl]), ("x simulated TTFT", [ones, sim_ms])):
        A = np.stack(cols, axis=1) / meas_ms[:, None]
        coef, *_ = np.linalg.lstsq(A, miss, rcond=None)
        left = miss - A @ coef
        r2 = 1 - float(np.sum(left ** 2) / np.sum(miss ** 2)) if len(miss) > 1 else 0.0
        out[name] = (r2, float(np.mean(np.abs(left))), [float(c) for c in coef])
    return out


def main() -> int:
    no_options(__doc__)
    if not SILICON.is_file():
        print(f"{SILICON}: not found (set SIM_SHARED_VALIDATION)", file=sys.stderr)
        return 2
    runs, _ = read_silicon(SILICON, F.TRAINING_SYSTEMS)
    by_id = {r.name: r for r in runs}
    rows = [(by_id[f["id"]], f) for f in F.read_features(FEATURES) if f["id"] in by_id]
    groups: dict[tuple[str, str], list] = {}
    for run, f in rows:
        groups.setdefault((run.engine, run.model.split("/")[-1] + (f" {run.quant}" if run.quant else "")), []).append((run, f))
    print("| engine | model | runs | TTFT MAPE, terms at 0 | constant: R^2, MAPE after, a ms | per prompt token: R^2, "
          "MAPE, a ms + b us/token | x simulated: R^2, MAPE, a ms + k |")
    print("|---|---|---|---|---|---|---|")
    for (engine, model), rs in sorted(groups.items()):
        isl = np.array([r.isl for r, _ in rs], float)
        sim = np.array([f["sim_ttft_s"] for _, f in rs]) * 1e3
        meas = np.array([r.measured["ttft_s"] for r, _ in rs]) * 1e3
        fits = shape_fits(isl, sim, meas)
        c, p, s = fits["constant"], fits["per prompt token"], fits["x simulated TTFT"]
        print(f"| {engine} | {model} | {len(rs)} | {np.mean(np.abs(sim - meas) / meas):.1%} | {c[0]:.2f}, {c[1]:.1%}, "
              f"{c[2][0]:.0f} | {p[0]:.2f}, {p[1]:.1%}, {p[2][0]:.0f} + {p[2][1] * 1e3:.0f} | {s[0]:.2f}, {s[1]:.1%}, "
              f"{s[2][0]:.0f} {s[2][1]:+.2f} x |")
    bands(groups, "clients", BANDS, lambda r: r.concurrency)
    bands(groups, "requests/s", RATES, lambda r: r.concurrency / r.measured["e2e_s"])
    return 0


def bands(groups: dict, label: str, edges: tuple, key) -> None:
    """The miss by band of `key` (clients, or the measured request rate, where a saturated front end shows)."""
    print(f"\n| engine | model | {label} | runs | miss ms (median) | measured / simulated (median) |")
    print("|---|---|---|---|---|---|")
    for (engine, model), rs in sorted(groups.items()):
        for name, lo, hi in edges:
            band = [(r, f) for r, f in rs if lo <= key(r) < hi]
            if not band:
                continue
            sim = np.array([f["sim_ttft_s"] for _, f in band]) * 1e3
            meas = np.array([r.measured["ttft_s"] for r, _ in band]) * 1e3
            print(f"| {engine} | {model} | {name} | {len(band)} | {np.median(meas - sim):.0f} | "
                  f"{np.median(meas / sim):.2f} |")


if __name__ == "__main__":
    sys.exit(main())

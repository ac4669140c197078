#!/usr/bin/env python3
"""The decode step of the H100 silicon-sample runs, measured against simulated (docs/serving.md, "The decode
step, decomposed").

The sample has no per-step trace, but at fixed engine, layout, prompt and clients c it varies osl, and
TPOT = D(c) + (prefill work per request) x c / osl: TPOT regressed on 1 / osl over the osl values measured
gives D(c), the step with c requests running. Beside it sim's step of c decodes at prompt + 128 tokens of KV
under the engine's stack (device cost, the engine's host work and its fitted engine_overheads terms), and
the simulated marginal cost of one prompt's prefill added to that step.

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/serving_step_decomposition.py \
        [--engine trtllm] [--model Llama-3.1-8B-Instruct] [--isl 1024]
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.machine import load_machine  # noqa: E402
from sim.apps.serve.iteration import features  # noqa: E402
from sim.apps.serve.stepcost import ExactCost  # noqa: E402
from sim.apps.serve.validate import MODELS, Run, run_file  # noqa: E402
from sim.apps.serve.validate_readers import silicon_sampling  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402

SHARED = shared_validation_dir()
SILICON = SHARED / "aic" / "silicon_sample_h100.csv.gz"


def measured_steps(path: Path) -> dict[tuple, tuple[float, int, str]]:
    """(engine, model, quant, tp, isl, c) -> (D(c) in ms, osl values, how its server sampled) for every
    aggregated H100 group with two or more osl values."""
    groups: dict[tuple, list[tuple[int, float]]] = collections.defaultdict(list)
    sampling: dict[tuple, str] = {}
    with gzip.open(path, "rt") as fh:
        for r in csv.DictReader(fh):
            if r["mode"] != "agg" or r["system"] != "h100_sxm" or not r["batch_size"] or r["model_path"] not in MODELS:
                continue
            key = (r["backend"], r["model_path"], r["gemm_quant_mode"] or None, int(r["tp_size"]), int(r["isl"]),
                   int(r["batch_size"]))
            groups[key].append((int(r["osl"]), float(r["silicon_tpot_ms"])))
            sampling[key] = silicon_sampling(r["id"], r["backend"], r["model_path"])
    out = {}
    for key, rows in groups.items():
        rows = sorted(set(rows))
        if len({o for o, _ in rows}) < 2:
            continue
        x = np.array([1.0 / o for o, _ in rows])
        a, _ = np.polyfit(x, np.array([t for _, t in rows]), 1)[::-1]
        out[key] = (float(a), len(rows), sampling[key])
    return out


def simulated_step(machine, key: tuple, sampling: str = "greedy") -> tuple[float, float]:
    """sim's decode step of c sequences (ms) and the marginal cost of one prefill of isl tokens in it, sampling
    as the group's server did (validate_readers.silicon_sampling)."""
    engine, model, quant, tp, isl, c = key
    f = run_file(Run("step", "h100_sxm", engine, model, isl, 256, c, tp, quant, sampling=sampling))
    cost = ExactCost(machine, f, f.model_config_())
    d = cost(features([(1, isl + 128)] * c))[0]
    mixed = cost(features([(1, isl + 128)] * c + [(isl, isl)]))[0]
    return d * 1e3, (mixed - d) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", help="only this engine (vllm, trtllm, sglang)")
    ap.add_argument("--model", help="only models whose name contains this")
    ap.add_argument("--isl", type=int, default=1024, help="prompt length of the groups shown (default %(default)s)")
    args = ap.parse_args()
    if not SILICON.is_file():
        print(f"{SILICON}: not found (set SIM_SHARED_VALIDATION)", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")
    machine = load_machine("h100_sxm")
    print("| engine | model | quant | TP | clients | measured D(c) ms | sim D(c) ms | error | sim prefill in step ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, (meas, _, sampling) in sorted(measured_steps(SILICON).items(), key=lambda kv: (*kv[0][:2], kv[0][2] or "", *kv[0][3:])):
        engine, model, quant, tp, isl, c = key
        if isl != args.isl or (args.engine and engine != args.engine) or (args.model and args.model not in model):
            continue
        sim, prefill = simulated_step(machine, key, sampling)
        print(f"| {engine} | {model.split('/')[-1]} | {quant or 'bf16'} | {tp} | {c} | {meas:.2f} | {sim:.2f} | "
              f"{sim / meas - 1:+.1%} | {prefill:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

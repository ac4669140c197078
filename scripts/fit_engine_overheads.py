#!/usr/bin/env python3
"""Fit the engine_overheads terms of the vllm, trtllm and sglang stacks once, on the H100 runs of the
aiconfigurator silicon sample (procedure: sim/apps/serve/overhead_fit.py).

    python scripts/fit_engine_overheads.py --simulate   # replay the training runs with the terms at zero
                                                        # (minutes): tests/data/engine_overheads_features.csv
    python scripts/fit_engine_overheads.py              # NNLS from that file and the measured means: print
    python scripts/fit_engine_overheads.py --write      # ... and put the blocks into hw_models/stack/presets/*.yaml
    python scripts/fit_engine_overheads.py --scan-front-end 0,25e-6,50e-6 [--engines trtllm,sglang] [--write]
        # the API front end's service time per streamed token by profile (overhead_fit step 3): the training
        # runs replayed at each value, NNLS at each, the least residual kept with its features

The features file holds simulated figures only (no measured value); the measured means are read from
$SIM_SHARED_VALIDATION/aic/silicon_sample_h100.csv.gz, h100_sxm rows. tests/test_engine_overheads.py
fails if the stack files differ from what this script writes.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.machine import load_machine  # noqa: E402
from hw_models.stack.spec import STACK_DIR, stack_for  # noqa: E402
from sim.apps.serve import overhead_fit as F  # noqa: E402
from sim.apps.serve.validate import ENGINES, GPUS, simulate  # noqa: E402
from sim.apps.serve.validate_readers import read_silicon  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402

SHARED = shared_validation_dir()
TRAINING = SHARED / "aic" / "silicon_sample_h100.csv.gz"
FEATURES = ROOT / "tests" / "data" / "engine_overheads_features.csv"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", action="store_true", help="replay the training runs (terms at zero) first")
    ap.add_argument("--write", action="store_true", help="write the fitted blocks into the stack files")
    ap.add_argument("--scan-front-end", metavar="S,S,...", help="seconds per streamed token to try (overhead_fit step 3)")
    ap.add_argument("--engines", help="only these engine families' runs (with --simulate or --scan-front-end)")
    args = ap.parse_args()
    if not TRAINING.is_file():
        print(f"{TRAINING}: not found (set SIM_SHARED_VALIDATION)", file=sys.stderr)
        return 2
    runs, _ = read_silicon(TRAINING, F.TRAINING_SYSTEMS)
    runs = [r for r in runs if F.in_training(r.name)]
    engines = set(args.engines.split(",")) if args.engines else set(ENGINES)
    measured = {r.name: r.measured for r in runs}
    if args.simulate or args.scan_front_end:
        warnings.simplefilter("ignore")
        values = [float(v) for v in args.scan_front_end.split(",")] if args.scan_front_end else [None]
        rows = best_rows([r for r in runs if r.engine in engines], values, measured)
        keep = [r for r in F.read_features(FEATURES) if r["engine"] not in engines] if FEATURES.is_file() else []
        F.write_features(keep + rows, FEATURES)
    for f in F.fit(F.read_features(FEATURES), measured):
        body = F.block(f, TRAINING.name)
        print(f"# {ENGINES[f.engine].stack}.yaml\n{body}")
        if args.write:
            path = STACK_DIR / f"{ENGINES[f.engine].stack}.yaml"
            path.write_text(F.with_block(path, body))
    return 0


def replay(runs, front: float | None) -> list[dict]:
    """Feature rows of `runs` replayed with the fitted terms at zero and the front end's time per token at
    `front` (None: each stack's own)."""
    over = F.zero_terms()
    if front is not None:
        for e in ENGINES.values():
            over["stacks"][e.stack]["engine_overheads"][F.FRONT] = front
    machine = load_machine(GPUS["h100_sxm"], over)
    t0 = time.perf_counter()
    results, failed = simulate(runs, lambda gpu: machine,
                               progress=lambda i, n: print(f"\r{i}/{n}", end="", file=sys.stderr))
    print(f"\n{len(results)} runs in {time.perf_counter() - t0:.0f} s; failed: {failed}", file=sys.stderr)
    per_token = {e: stack_for(spec.stack, machine).engine_overheads.front_end_output_token_s for e, spec in ENGINES.items()}
    return F.feature_rows(results, per_token)


def best_rows(runs, values: list[float | None], measured: dict) -> list[dict]:
    """Per engine family, the rows of the grid value whose NNLS leaves the least residual."""
    best: dict[str, tuple[float, list[dict]]] = {}
    for v in values:
        rows = replay(runs, v)
        for f in F.fit(rows, measured):
            print(f"{f.engine}: front end {v} s/token: residual {f.residual:.4f}, {f.terms}", file=sys.stderr)
            if f.engine not in best or f.residual < best[f.engine][0]:
                best[f.engine] = (f.residual, [r for r in rows if r["engine"] == f.engine])
    return [r for _, rs in best.values() for r in rs]


if __name__ == "__main__":
    sys.exit(main())

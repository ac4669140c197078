#!/usr/bin/env python3
"""Fit the engine_overheads terms of the vllm, trtllm and sglang stacks once, on the H100 runs of the
aiconfigurator silicon sample (procedure: sim/apps/serve/overhead_fit.py).

    python scripts/fit_engine_overheads.py --simulate   # replay the training runs with the terms at zero
                                                        # (minutes): tests/data/engine_overheads_features.csv
    python scripts/fit_engine_overheads.py              # NNLS from that file and the measured means: print
    python scripts/fit_engine_overheads.py --write      # ... and put the blocks into hw_models/stack/presets/*.yaml

The features file holds simulated figures only (no measured value); the measured means are read from
$SIM_SHARED_VALIDATION/aic/silicon_sample_h100.csv.gz, h100_sxm rows. tests/test_engine_overheads.py
fails if the stack files differ from what this script writes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.machine import load_machine  # noqa: E402
from hw_models.stack.spec import STACK_DIR  # noqa: E402
from sim.apps.serve import overhead_fit as F  # noqa: E402
from sim.apps.serve.validate import ENGINES, GPUS, simulate  # noqa: E402
from sim.apps.serve.validate_readers import read_silicon  # noqa: E402

SHARED = Path(os.environ.get("SIM_SHARED_VALIDATION", ROOT.parent / "shared" / "validation"))
TRAINING = SHARED / "aic" / "silicon_sample_h100.csv.gz"
FEATURES = ROOT / "tests" / "data" / "engine_overheads_features.csv"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", action="store_true", help="replay the training runs (terms at zero) first")
    ap.add_argument("--write", action="store_true", help="write the fitted blocks into the stack files")
    args = ap.parse_args()
    if not TRAINING.is_file():
        print(f"{TRAINING}: not found (set SIM_SHARED_VALIDATION)", file=sys.stderr)
        return 2
    runs, _ = read_silicon(TRAINING, F.TRAINING_SYSTEMS)
    runs = [r for r in runs if F.in_training(r.name)]
    if args.simulate:
        warnings.simplefilter("ignore")
        machine = load_machine(GPUS["h100_sxm"], F.zero_terms())
        t0 = time.perf_counter()
        results, failed = simulate(runs, lambda gpu: machine,
                                   progress=lambda i, n: print(f"\r{i}/{n}", end="", file=sys.stderr))
        print(f"\n{len(results)} runs in {time.perf_counter() - t0:.0f} s; failed: {failed}", file=sys.stderr)
        F.write_features(F.feature_rows(results), FEATURES)
    measured = {r.name: r.measured for r in runs}
    for f in F.fit(F.read_features(FEATURES), measured):
        body = F.block(f, TRAINING.name)
        print(f"# {ENGINES[f.engine].stack}.yaml\n{body}")
        if args.write:
            path = STACK_DIR / f"{ENGINES[f.engine].stack}.yaml"
            path.write_text(F.with_block(path, body))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Fit vLLM V1's per-sequence host work beyond vidur's V0 curve (vllm.yaml step_overhead.per_seq_s) on
ML.ENERGY's H100 runs (those at the power cap included: they bound the host term from above); B200 out of sample (sim.apps.serve.v1_host_fit has the procedure).

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/fit_v1_host.py [--table]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.stack.spec import load_stack  # noqa: E402
from sim.apps.serve import mlenergy as M  # noqa: E402
from sim.apps.serve import v1_host_fit as V  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402

SHARED = shared_validation_dir()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", action="store_true", help="print every run's step parts")
    args = ap.parse_args()
    if not (SHARED / M.CSV_NAME).is_file():
        print(f"error: no {SHARED / M.CSV_NAME} (set SIM_SHARED_VALIDATION)", file=sys.stderr)
        return 2
    runs = M.load_runs(SHARED)
    h100, b200 = V.points(runs, "H100"), V.points(runs, "B200")
    s = V.fit(h100)
    shipped = load_stack("vllm").step_overhead.per_seq_s
    print(f"fitted per_seq_s = {s * 1e6:.0f} us on {len(h100)} H100 runs ({sum(p.capped for p in h100)} at the cap); "
          f"vllm.yaml ships {shipped * 1e6:.0f} us")
    big = [p for p in h100 + b200 if p.run.max_num_seqs >= 256]
    for name, pts in (("H100 (fit)", h100), ("B200 (out of sample)", b200),
                      ("H100, max_num_seqs >= 256", [p for p in big if p.run.gpu == "H100"]),
                      ("B200, max_num_seqs >= 256", [p for p in big if p.run.gpu == "B200"])):
        print(f"  {name:26s} {len(pts):3d} runs, step MAPE {V.step_mape(pts, 0.0):6.1%} at 0 -> "
              f"{V.step_mape(pts, s):6.1%} at the fit")
    if args.table:
        for p in h100 + b200:
            print(f"{p.run.gpu} {p.run.model[-28:]:28s} {p.run.task[:6]} tp{p.run.tp} n={p.run.max_num_seqs:5d} "
                  f"dev {p.device_s * 1e3:7.2f} host {p.host_s * 1e3:7.2f} serial {p.serial_s * 1e3:6.2f} "
                  f"sim {p.step_s(s) * 1e3:7.2f} measured {p.measured_s * 1e3:7.2f} ms  "
                  f"{p.run.power_per_gpu_w:4.0f} W{' capped' if p.capped else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Speed of `sim validate-serving` on a 300-run silicon table (issue 29's target: <= 60 s on 2 cores).

Each measurement is a whole `sim validate-serving` process on a cold step-cost cache (SIM_NO_CACHE=1: nothing read
from or written to disk; a process's runs of one model and layout share their grid points, as on a first run),
over the first --runs replayable H100 rows of shared/validation/aic/silicon_sample_h100.csv.gz (training
and held-out rows alike, spread by --limit), once per worker count; medians of --repeat and the ratio
to one worker printed. The machine is shared and noisy: quote the medians.

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/bench_validate_serving.py [--repeat 3]
        [--runs 300] [--workers 1,2]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.core.shared_data import shared_validation_dir  # noqa: E402


def one(table: Path, runs: int, workers: int) -> tuple[float, int]:
    """Wall seconds of one whole process, and the runs it simulated (read off its summary line)."""
    cmd = [sys.executable, "-m", "sim.apps.cli", "validate-serving", str(table), "--hw", "h100_sxm", "--summary",
           "--limit", str(runs), "--workers", str(workers)]
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "SIM_NO_CACHE": "1"}, cwd=ROOT)
    wall = time.perf_counter() - t
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip()[-500:]}")
    m = re.search(r"(\d+) runs simulated in", out.stdout)
    return wall, int(m.group(1)) if m else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    args = ap.parse_args()
    table = shared_validation_dir() / "aic" / "silicon_sample_h100.csv.gz"
    if not table.is_file():
        print(f"{table}: not found (set SIM_SHARED_VALIDATION); nothing measured")
        return 0
    print(f"{os.cpu_count()} CPUs; whole processes, cold step-cost cache, median of {args.repeat}")
    base = None
    for w in (int(x) for x in args.workers.split(",")):
        walls, n = [], 0
        for _ in range(args.repeat):
            wall, n = one(table, args.runs, w)
            walls.append(wall)
        med = statistics.median(walls)
        base = base or med
        print(f"workers {w}: {n} runs, median {med:.1f} s (min {min(walls):.1f}, max {max(walls):.1f}); "
              f"{base / med:.2f}x one worker's speed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

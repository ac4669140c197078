"""Sweep throughput: points per second of a Llama-2-13B decode sweep (prompt 1024,
128 new tokens, full fidelity) on 1 and 2 local worker processes, and the scaling.

    python scripts/bench_sweep.py                      # 1,000 points, 3 repeats
    python scripts/bench_sweep.py --points 200 --repeats 1 --profile

Each repeat runs into a fresh folder (nothing is skipped); the rate counts only
the running of points (expansion and plots are timed apart). Medians are printed.
With --profile, one point is profiled in this process and the top functions
by cumulative time are printed.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.apps.sweep.expand import expand  # noqa: E402
from sim.apps.sweep.run import run_point, run_sweep  # noqa: E402
from sim.apps.sweep.spec import spec_from_dict  # noqa: E402


def make_spec(points: int, tmp: Path):
    """Batch 1..20 (every point fits in the a6000's 48 GB: 26 GB of fp16 weights plus
    0.84 GB of KV cache per sequence at 1152 tokens) x log-spaced device bandwidth."""
    n_batch = min(20, points)
    n_bw = math.ceil(points / n_batch)
    spec = dict(name="bench", workload=str(ROOT / "workloads/llama13b_decode.yaml"), hw="a6000",
                axes={"workload.batch": list(range(1, n_batch + 1)),
                      "hw.memory.@device.bandwidth_bytes_per_s": {"min": 0.4e12, "max": 4e12, "num": n_bw, "log": True}})
    path = tmp / "bench.yaml"
    path.write_text(yaml.safe_dump(spec))
    return spec_from_dict(spec, str(path))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--profile", action="store_true", help="profile one point in-process")
    ap.add_argument("--cpu-sample", type=int, default=40, help="points timed in-process for CPU time per point")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        spec = make_spec(args.points, tmp)
        t0 = time.perf_counter()
        points = expand(spec)
        print(f"{len(points)} points, expanded and validated in {time.perf_counter() - t0:.2f} s")
        if args.profile:
            run_point(points[0].config)  # warm imports and caches
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.runcall(run_point, points[len(points) // 2].config)
            print(f"one point (batch {points[len(points) // 2].axes['workload.batch']}), profiled: "
                  f"{time.perf_counter() - t0:.3f} s")
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        # CPU time per point in this process: the rate a free core would give, whatever the machine's load.
        sample = points[:: max(1, len(points) // args.cpu_sample)][: args.cpu_sample]
        run_point(sample[0].config)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for p in sample:
            run_point(p.config)
        cpu = (time.process_time() - cpu0) / len(sample)
        wall = (time.perf_counter() - wall0) / len(sample)
        print(f"in-process, {len(sample)} points: {cpu * 1e3:.1f} ms CPU per point ({wall * 1e3:.1f} ms wall) "
              f"= {1 / cpu:.1f} points/s per free core; load average now {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores", flush=True)
        rates: dict[int, float] = {}
        for workers in [int(w) for w in args.workers.split(",")]:
            runs = []
            for r in range(args.repeats):
                s = run_sweep(spec, tmp / f"out_{workers}_{r}", workers=workers, progress=False, plots=False)
                runs.append(s.points_per_s)
                print(f"  workers {workers}, repeat {r + 1}: {s.ran} points in {s.seconds:.1f} s = "
                      f"{s.points_per_s:.2f} points/s ({s.failed} failed; load average {os.getloadavg()[0]:.1f})", flush=True)
            rates[workers] = statistics.median(runs)
            print(f"workers {workers}: median {rates[workers]:.2f} points/s")
        if 1 in rates and len(rates) > 1:
            for w, rate in rates.items():
                if w != 1:
                    print(f"scaling 1 -> {w} workers: x{rate / rates[1]:.2f} (ideal x{w})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

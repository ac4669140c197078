#!/usr/bin/env python3
"""Speed and memory of `sim serve` (issue 13 targets), measured, medians printed.

1. Capacity of llama3-8b on h100_sxm for workloads/serve_llama3_8b_sharegpt.yaml's SLO
   (bisection, 2,000 requests per point), then 10,000 requests at 80% of it: wall time of
   the whole `sim serve` process (target <= 10 s on one core).
2. 1,000,000 requests at the same rate (surrogate step costs): peak resident memory of the
   process (target < 2 GB) and its wall time.
3. The same 200-request case with surrogate and with --exact step costs: wall-time ratio,
   and the agreement of TTFT/TPOT mean and p99.

    python scripts/bench_serve.py [--repeat 3] [--big 1000000] [--skip-big] [--scheduler vllm]

--scheduler replaces the file's serving.scheduler.kind (vllm-v0 in the file; vllm is V1's).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.machine import load_machine  # noqa: E402
from sim.apps.serve.capacity import find_capacity  # noqa: E402
from sim.apps.serve.spec import load_serve_file  # noqa: E402

FILE = ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml"
SIM = [sys.executable, "-m", "sim.apps.cli"]


KIND: list[str] = []   # --set serving.scheduler.kind=... for every run, when --scheduler is given


def run_sim(args: list[str]) -> tuple[float, float, float, dict]:
    """Wall seconds, CPU seconds and peak RSS (MB) of one `sim serve` process, and its JSON summary.
    Peak RSS is read from /usr/bin/time-style rusage of that child alone (ru_maxrss of
    RUSAGE_CHILDREN is the largest of all children so far, so the big run goes last)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "s.json"
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run([*SIM, "serve", str(FILE), "--hw", "h100_sxm", "-q", "--json", str(out), *KIND, *args],
                       check=True, cwd=ROOT)
        wall = time.perf_counter() - t
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
        return wall, cpu, r1.ru_maxrss / 1024, json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--scheduler", help="serving.scheduler.kind for every run (default: the file's)")
    a = ap.parse_args()
    sets = {"serving.arrivals.num_requests": 2000}
    if a.scheduler:
        KIND.extend(["--set", f"serving.scheduler.kind={a.scheduler}"])
        sets["serving.scheduler.kind"] = a.scheduler

    f = load_serve_file(FILE, sets)
    t = time.perf_counter()
    cap = find_capacity(f, load_machine("h100_sxm"), dict(f.serving.slo))
    rate = 0.8 * cap["rate"]
    print(f"capacity (SLO {f.serving.slo}): {cap['rate']:.2f} requests/s, limited by {cap['limiting']} "
          f"({len(cap['points'])} runs, {time.perf_counter() - t:.1f} s); 80%: {rate:.2f} requests/s")

    walls, cpus = [], []
    for _ in range(a.repeat):
        wall, cpu, rss, s = run_sim(["--set", f"serving.arrivals.rate={rate}", "--set",
                                     "serving.arrivals.num_requests=10000"])
        walls.append(wall)
        cpus.append(cpu)
    print(f"10,000 requests at {rate:.2f}/s: median wall {statistics.median(walls):.2f} s, CPU "
          f"{statistics.median(cpus):.2f} s over {a.repeat} "
          f"(walls {', '.join(f'{w:.2f}' for w in walls)}), {s['iterations']} iterations, "
          f"TTFT p90 {s['latency']['ttft']['p90'] * 1e3:.1f} ms, TPOT p90 {s['latency']['tpot']['p90'] * 1e3:.2f} ms")

    small = ["--set", f"serving.arrivals.rate={rate}", "--set", "serving.arrivals.num_requests=200"]
    ws, cs, _, sur = run_sim(small)
    we, ce, _, ex = run_sim(small + ["--exact"])
    print(f"200 requests: surrogate {ws:.2f} s wall / {cs:.2f} s CPU, --exact {we:.2f} s / {ce:.2f} s "
          f"(x{ce / cs:.1f} CPU; whole processes, the surrogate's tables included)")
    for m in ("ttft", "tpot"):
        for st in ("mean", "p99"):
            x, y = sur["latency"][m][st], ex["latency"][m][st]
            print(f"  {m} {st}: surrogate {x * 1e3:.3f} ms, exact {y * 1e3:.3f} ms ({x / y - 1:+.3%})")

    if not a.skip_big:
        wall, cpu, rss, s = run_sim(["--set", f"serving.arrivals.rate={rate}", "--set",
                                     f"serving.arrivals.num_requests={a.big}"])
        print(f"{a.big:,} requests (surrogate): wall {wall:.1f} s, CPU {cpu:.1f} s, peak RSS {rss:.0f} MB, "
              f"{s['completed']:,} completed, {s['iterations']:,} iterations")


if __name__ == "__main__":
    main()

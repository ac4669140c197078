#!/usr/bin/env python3
"""Speed and memory of `sim serve` on fixed cases (issue 30), medians printed, with the ratio to the
figures stored in scripts/bench_serve_figures.json (the previous commit's, written by --save).

Cases (llama3-8b on h100_sxm, workloads/serve_llama3_8b_sharegpt.yaml, vLLM V0 as in the file):
  10k       10,000 requests at RATE (80% of the file's SLO capacity, below): the serve() call in a
            fresh process (warm step-cost cache: a process has run the key before), the whole
            `sim serve` process, its peak RSS, requests simulated per second of serve().
  capacity  --find-capacity with 1,000-request steps in a fresh process, warm step-cost cache.
  startup   `sim --help` whole process, and the import time of sim.apps.cli (python -X importtime, and CPU
            seconds), beside the floor: `python -c pass` and `python -c "import numpy"`, whole processes.
  run       a small `sim run` (workloads/llama2_7b_decode.yaml on h100_sxm, -q) whole process.
  run13b    `sim run workloads/llama13b_decode.yaml --hw a6000 -q`, whole process (the README's small run).
  v1        the 10k case's serve() in a fresh process under vLLM V1 (serving.scheduler.kind: vllm).
  cold      the 10k case's whole `sim serve` process on a cold step-cost cache (a new SIM_CACHE_DIR).
  sweep200  sweeps/serve_sweep200.yaml (200 serving points of 1,000 requests) with --executor dask-local
            --workers 2 --no-plots, whole process, on a cold step-cost cache (a new SIM_CACHE_DIR):
            CPU of the sweep and its workers. --sweep-out DIR keeps each run's results.csv there
            (DIR/sweep<i>.csv) to compare runs point by point.
  exact     200 requests, surrogate against --exact: CPU ratio, TTFT/TPOT mean and p99 agreement.
  spec      workloads/serve_llama2_7b_speculative.yaml (300 requests, a TinyLlama draft, k = 4) on h100_sxm,
            whole `sim serve` process on a cold step-cost cache (a new SIM_CACHE_DIR).
  1m        1,000,000 requests at RATE, whole `sim serve` process: wall and peak RSS (--big to run it).
Each case runs in its own process, so an earlier case's memory or imports do not flatter a later one.

    python scripts/bench_serve.py [--repeat 3] [--cases 10k,capacity,startup,run,sweep200] [--big] [--save]
                                  [--root DIR] [--profile] [--no-cache] [--sweep-out DIR]

--root runs another checkout's code (e.g. the previous commit exported to a folder) with these cases:
before/after figures measured back to back. --no-cache sets SIM_NO_CACHE=1 for every child.

Children write and read compiled bytecode (__pycache__), as an installed package does, whatever
PYTHONDONTWRITEBYTECODE says here: with it set (as on the development machine) and a checkout without
__pycache__ (a worktree), every child compiled all of sim's and hw_models' sources again, ~0.3 s CPU of
each whole process that an installed package does not pay. --no-bytecode measures that case: the
checkout is copied without __pycache__ and run with PYTHONDONTWRITEBYTECODE=1 (the libraries in the
environment keep their compiled bytecode).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "scripts" / "bench_serve_figures.json"
FILE = "workloads/serve_llama3_8b_sharegpt.yaml"
# The file's SLO capacity (ttft_p90 0.2 s, tpot_p90 0.05 s) found by find_capacity with 2,000-request
# steps at commit cc181f4: 56.5625 requests/s (ttft_p90 limiting); 80% of it. Fixed, so every commit
# runs the same stream.
RATE = 0.8 * 56.5625

IN_PROCESS = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from hw_models.machine import load_machine
from sim.apps.serve.spec import load_serve_file
from sim.apps.serve.run import serve
from sim.apps.serve.capacity import find_capacity
t1 = time.perf_counter()
case, n, rate, profile = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
sets = {"serving.arrivals.num_requests": n, "serving.arrivals.rate": rate}
if case == "v1":
    sets["serving.scheduler.kind"] = "vllm"
f = load_serve_file(%r, sets)
m = load_machine("h100_sxm")
if profile:
    import cProfile, pstats
    pr = cProfile.Profile(); pr.enable()
t2, c2 = time.perf_counter(), time.process_time()
if case == "capacity":
    out = find_capacity(f, m, dict(f.serving.slo))
    extra = dict(rate=out["rate"], runs=len(out["points"]))
else:
    _, s = serve(f, m)
    extra = dict(iterations=s["iterations"], completed=s["completed"])
t3, c3 = time.perf_counter(), time.process_time()
if profile:
    pr.disable(); pstats.Stats(pr, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
print(json.dumps(dict(import_s=t1 - t0, run_s=t3 - t2, run_cpu_s=c3 - c2, rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      **extra)))
"""


def child(root: Path, args: list[str], env: dict[str, str]) -> tuple[float, float, str, float]:
    """Wall seconds and peak RSS (MB) of one child process, its stdout and its CPU seconds. The child's
    own figures are read from wait4's rusage, not RUSAGE_CHILDREN (that holds the largest of all children
    so far). On a shared machine CPU seconds are the figure to compare; wall is inflated by the load."""
    t = time.perf_counter()
    p = subprocess.Popen(args, cwd=root, env=env, stdout=subprocess.PIPE)
    out = p.stdout.read().decode()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"failed: {' '.join(args)}")
    return wall, ru.ru_maxrss / 1024, out, ru.ru_utime + ru.ru_stime


def in_process(root: Path, env: dict[str, str], case: str, n: int, profile: bool = False) -> dict:
    _, _, out, _ = child(root, [sys.executable, "-c", IN_PROCESS % FILE, case, str(n), str(RATE), "1" if profile else "0"],
                      env)
    return json.loads(out.strip().splitlines()[-1])


def sim_serve(root: Path, env: dict[str, str], n: int) -> tuple[float, float, float]:
    wall, rss, _, cpu = child(root, [sys.executable, "-m", "sim.apps.cli", "serve", FILE, "--hw", "h100_sxm", "-q",
                                "--set", f"serving.arrivals.rate={RATE}", "--set", f"serving.arrivals.num_requests={n}"],
                         env)
    return wall, rss, cpu


def import_s(root: Path, env: dict[str, str]) -> float:
    """Cumulative import time of sim.apps.cli (python -X importtime), seconds."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", "import sim.apps.cli"], cwd=root, env=env,
                       capture_output=True, text=True, check=True)
    for line in p.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| sim\.apps\.cli$", line)
        if m:
            return int(m.group(1)) / 1e6
    raise SystemExit("no import time for sim.apps.cli")


def sweep200(root: Path, env: dict[str, str], i: int, keep: Path | None) -> tuple[float, float]:
    """Wall and CPU seconds of the 200-point sweep (this checkout's spec, `root`'s code) on a cold cache.
    wait4's rusage of the sweep holds its Dask scheduler's, nannies' and workers' CPU: they are its
    descendants, each waited for before it exits."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "sweep"
        wall, _, _, cpu = child(root, [sys.executable, "-m", "sim.apps.cli", "sweep", str(ROOT / "sweeps" / "serve_sweep200.yaml"),
                                       "--out", str(out), "--executor", "dask-local", "--workers", "2", "--no-plots", "-q"],
                                {**env, "SIM_CACHE_DIR": str(Path(d) / "cache")})
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"sweep{i}.csv").write_bytes((out / "results.csv").read_bytes())
    return wall, cpu


def import_cpu_s(root: Path, env: dict[str, str]) -> float:
    """CPU seconds of `import sim.apps.cli` (process_time; -X importtime's figures are wall, which a
    shared machine inflates)."""
    code = "import time; t = time.process_time(); import sim.apps.cli; print(time.process_time() - t)"
    return float(child(root, [sys.executable, "-c", code], env)[2].strip())


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", default="10k,capacity,startup")
    ap.add_argument("--big", action="store_true", help="also the 1,000,000-request case (minutes)")
    ap.add_argument("--big-n", type=int, default=1_000_000, help="requests of the big case")
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout whose code runs (default: this one)")
    ap.add_argument("--save", action="store_true", help=f"store the medians in {FIGURES.relative_to(ROOT)}")
    ap.add_argument("--label", default="", help="what the figures are of, stored with --save (a commit)")
    ap.add_argument("--profile", action="store_true", help="cProfile one 10k run (stderr)")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--no-bytecode", action="store_true", help="children compile the checkout's sources every run (no __pycache__ of its own)")
    ap.add_argument("--sweep-out", type=Path, help="keep each sweep200 run's results.csv here")
    a = ap.parse_args()
    root = a.root.resolve()
    if a.no_bytecode:   # a copy of the checkout without __pycache__, none written: the libraries keep theirs
        copy = Path(tempfile.mkdtemp(prefix="bench-nopyc-")) / "tree"
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__", ".git", ".venv*", "mutants*"))
        root = copy
    env = dict(os.environ, PYTHONPATH=str(root))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if a.no_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    if a.no_cache:
        env["SIM_NO_CACHE"] = "1"
    cases = a.cases.split(",") + (["1m"] if a.big else [])
    fig: dict[str, float] = {}
    if "10k" in cases:
        in_process(root, env, "10k", 10_000, a.profile)   # warms the step-cost cache (a miss on a first run)
        runs = [in_process(root, env, "10k", 10_000) for _ in range(a.repeat)]
        whole = [sim_serve(root, env, 10_000) for _ in range(a.repeat)]
        fig.update({"10k.serve_s": med([r["run_s"] for r in runs]), "10k.serve_cpu_s": med([r["run_cpu_s"] for r in runs]),
                    "10k.process_s": med([w for w, _, _ in whole]), "10k.process_cpu_s": med([c for _, _, c in whole]),
                    "10k.peak_rss_mb": med([r for _, r, _ in whole])})
        fig["10k.requests_per_s"] = 10_000 / fig["10k.serve_s"]
        fig["10k.requests_per_cpu_s"] = 10_000 / fig["10k.serve_cpu_s"]
        print(f"10k: {runs[0]['iterations']} iterations; serve() runs {[round(r['run_s'], 2) for r in runs]}, "
              f"processes {[round(w, 2) for w, _, _ in whole]}")
    if "v1" in cases:
        in_process(root, env, "v1", 10_000)   # its own step-cost tables (V1 mixes prefill and decode)
        runs = [in_process(root, env, "v1", 10_000) for _ in range(a.repeat)]
        fig["10k.v1.serve_s"] = med([r["run_s"] for r in runs])
        fig["10k.v1.serve_cpu_s"] = med([r["run_cpu_s"] for r in runs])
        print(f"10k V1: {runs[0]['iterations']} iterations; serve() runs {[round(r['run_cpu_s'], 2) for r in runs]} s CPU")
    if "cold" in cases:
        colds = []
        for _ in range(a.repeat):
            with tempfile.TemporaryDirectory() as d:
                colds.append(sim_serve(root, {**env, "SIM_CACHE_DIR": d}, 10_000))
        fig["10k.cold_process_s"] = med([w for w, _, _ in colds])
        fig["10k.cold_process_cpu_s"] = med([c for _, _, c in colds])
    if "capacity" in cases:
        runs = [in_process(root, env, "capacity", 1_000) for _ in range(a.repeat)]
        fig["capacity.search_s"] = med([r["run_s"] for r in runs])
        fig["capacity.search_cpu_s"] = med([r["run_cpu_s"] for r in runs])
        print(f"capacity (1,000-request steps): {runs[0]['rate']:.4g} requests/s after {runs[0]['runs']} runs; "
              f"searches {[round(r['run_s'], 2) for r in runs]}")
    if "startup" in cases:
        helps = [child(root, [sys.executable, "-m", "sim.apps.cli", "--help"], env) for _ in range(a.repeat)]
        fig["startup.help_s"] = med([h[0] for h in helps])
        fig["startup.help_cpu_s"] = med([h[3] for h in helps])
        fig["startup.import_s"] = med([import_s(root, env) for _ in range(a.repeat)])
        fig["startup.import_cpu_s"] = med([import_cpu_s(root, env) for _ in range(a.repeat)])
        fig["startup.floor_cpu_s"] = med([child(root, [sys.executable, "-c", "pass"], env)[3] for _ in range(a.repeat)])
        fig["startup.numpy_cpu_s"] = med([child(root, [sys.executable, "-c", "import numpy"], env)[3] for _ in range(a.repeat)])
    if "run" in cases:
        runs = [child(root, [sys.executable, "-m", "sim.apps.cli", "run", "workloads/llama2_7b_decode.yaml", "--hw",
                             "h100_sxm", "-q"], env) for _ in range(a.repeat)]
        fig["run.process_s"], fig["run.process_cpu_s"] = med([r[0] for r in runs]), med([r[3] for r in runs])
    if "run13b" in cases:
        runs = [child(root, [sys.executable, "-m", "sim.apps.cli", "run", "workloads/llama13b_decode.yaml", "--hw",
                             "a6000", "-q"], env) for _ in range(a.repeat)]
        fig["run13b.process_s"], fig["run13b.process_cpu_s"] = med([r[0] for r in runs]), med([r[3] for r in runs])
    if "sweep200" in cases:
        sweeps = [sweep200(root, env, i, a.sweep_out) for i in range(a.repeat)]
        fig["sweep200.process_s"], fig["sweep200.process_cpu_s"] = med([w for w, _ in sweeps]), med([c for _, c in sweeps])
        print(f"sweep200 (cold cache): CPU {[round(c, 1) for _, c in sweeps]}, wall {[round(w, 1) for w, _ in sweeps]}")
    if "exact" in cases:   # 200 requests, surrogate against --exact: CPU ratio and latency agreement
        out: dict[str, dict] = {}
        for mode, extra in (("surrogate", []), ("exact", ["--exact"])):
            with tempfile.TemporaryDirectory() as d:
                js = Path(d) / "s.json"
                _, _, _, cpu = child(root, [sys.executable, "-m", "sim.apps.cli", "serve", FILE, "--hw", "h100_sxm", "-q",
                                            "--set", f"serving.arrivals.rate={RATE}", "--set",
                                            "serving.arrivals.num_requests=200", "--json", str(js), *extra], env)
                out[mode] = dict(cpu=cpu, s=json.loads(js.read_text()))
        fig["exact.cpu_ratio"] = out["exact"]["cpu"] / out["surrogate"]["cpu"]
        for m in ("ttft", "tpot"):
            for st in ("mean", "p99"):
                x, y = out["surrogate"]["s"]["latency"][m][st], out["exact"]["s"]["latency"][m][st]
                print(f"200 requests, {m} {st}: surrogate {x * 1e3:.3f} ms, exact {y * 1e3:.3f} ms ({x / y - 1:+.3%})")
    if "spec" in cases:
        specs = []
        for _ in range(a.repeat):
            with tempfile.TemporaryDirectory() as d:
                specs.append(child(root, [sys.executable, "-m", "sim.apps.cli", "serve",
                                          "workloads/serve_llama2_7b_speculative.yaml", "--hw", "h100_sxm", "-q"],
                                   {**env, "SIM_CACHE_DIR": d}))
        fig["spec.process_s"], fig["spec.process_cpu_s"] = med([r[0] for r in specs]), med([r[3] for r in specs])
    if "1m" in cases:
        wall, rss, cpu = sim_serve(root, env, a.big_n)
        fig.update({"1m.process_s": wall, "1m.process_cpu_s": cpu, "1m.peak_rss_mb": rss, "1m.requests": a.big_n})

    stored = json.loads(FIGURES.read_text()) if FIGURES.is_file() else {}
    old = stored.get("figures", {})
    print(f"\n{'figure':22s} {'now':>10s} {'stored':>10s} {'now/stored':>10s}   (stored: {stored.get('label', '-')})")
    for k, v in fig.items():
        o = old.get(k)
        print(f"{k:22s} {v:10.3f} {o if o is not None else float('nan'):10.3f} "
              f"{v / o if o else float('nan'):10.2f}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; CPU time of children "
          f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime:.1f} s")
    if a.save:
        FIGURES.write_text(json.dumps({**stored, "label": a.label, "figures": {**old, **fig}}, indent=1) + "\n")


if __name__ == "__main__":
    main()

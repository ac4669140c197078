#!/usr/bin/env python3
"""Speed of the simulator, measured: engine ops/s, wall time of whole generations
(start-up included, as a user sees it), and the ratio to an analytic roofline sum
of the same graph computed with numpy (the floor any simulator is compared with).

Medians of --repeat runs; this machine is shared and noisy.

    python scripts/bench.py [--json PATH] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.registry import mapper_for  # noqa: E402
from hw_models.cost import MATRIX_KINDS  # noqa: E402
from hw_models.machine import load_machine  # noqa: E402
from sim.core import engine  # noqa: E402
from sim.core.lowering import lower  # noqa: E402
from hw_models.registry import simulate  # noqa: E402
from sim.core.generation import decode_kv_lens  # noqa: E402
from sim.core.workload import workload_from_dict  # noqa: E402

CASES = [("llama2-7b", "h200"), ("llama2-70b", "h200")]
PROMPT, GEN = 2048, 2048
# Multi-device generations (issue 14's speed targets): (model, hw, batch, parallel section, target s).
PARALLEL_CASES = [("llama2-70b", "a100_80g", 8, "{tp: 8, topology: dgx_a100}", 2.0),
                  ("mixtral-8x7b", "h200", 8, "{ep: 8, topology: hgx_h200}", 3.0)]
# Spatial generations (issue 17 item 12 / issue 22): (workload file, preset), whole `sim run` process.
SPATIAL_CASES = [("workloads/llama2_7b_groq_2k.yaml", "groq_lpu"), ("workloads/llama70b_groq_4k.yaml", "groq_lpu"),
                 ("workloads/llama70b_decode.yaml", "ipu_bow")]


def median_time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def engine_ops_per_s(repeat: int) -> float:
    """Tasks through the engine per second, on a full 80-layer decode step graph."""
    w = workload_from_dict(dict(model="llama2-70b", prompt_len=PROMPT, gen_len=GEN), "bench")
    mapper = mapper_for(load_machine("h200"), w, w.model_config_())
    tasks = mapper.plan_step(lower(mapper.model, "decode", 1, 1, PROMPT + 1, mapper.formats, True))
    t, _ = median_time(lambda: engine.run(tasks, in_order=mapper.in_order), repeat)
    return len(tasks) / t


def numpy_roofline(model: str, hw: str) -> tuple[float, float]:
    """Pure roofline of every op of every step: sum over ops of max(FLOPs/peak, bytes/BW),
    vectorised with numpy over the decode steps (attention ops scale with kv_len)."""
    start = time.perf_counter()
    w = workload_from_dict(dict(model=model, prompt_len=PROMPT, gen_len=GEN, flash_attention=True), "bench")
    m = w.model_config_()
    machine = load_machine(hw)
    unit, tier = machine.units[machine.main_unit], machine.memory[machine.device_tier]
    peak, bw, vec = unit.peak_flops_per_s["fp16"], tier.bandwidth_bytes_per_s, unit.vector_flops_per_s

    def arrays(phase, q, kv):
        g = lower(m, phase, 1, q, kv, w.formats.policy(), True, num_layers=1)
        ops = list(g.ops())
        rate = np.array([peak if o.kind in MATRIX_KINDS else vec for o in ops])
        mult = np.array([m.num_layers if o.layer is not None else 1 for o in ops])
        return (np.array([o.flops for o in ops]), np.array([o.bytes for o in ops]), rate, mult)

    f, b, r, n = arrays("prefill", PROMPT, PROMPT)
    total = float((np.maximum(f / r, b / bw) * n).sum())
    kv = decode_kv_lens(PROMPT, GEN)
    f0, b0, r, n = arrays("decode", 1, int(kv[0]))
    f1, b1, _, _ = arrays("decode", 1, int(kv[0]) + 1)       # per-op growth per extra key (linear in kv_len)
    steps = kv - kv[0]
    F = f0[None, :] + steps[:, None] * (f1 - f0)[None, :]
    B = b0[None, :] + steps[:, None] * (b1 - b0)[None, :]
    total += float((np.maximum(F / r, B / bw) * n).sum())
    return total, time.perf_counter() - start


def parallel_case(model: str, hw: str, batch: int, parallel: str, target_s: float, repeat: int) -> dict:
    """Whole `sim run` process of a multi-device generation, median wall time."""
    wl = ROOT / f".bench_parallel_{model}.yaml"
    wl.write_text(f"model: {model}\nbatch: {batch}\nprompt_len: {PROMPT}\ngen_len: {GEN}\n"
                  f"flash_attention: true\nparallel: {parallel}\n")
    try:
        cmd = [sys.executable, "-m", "sim.apps.cli", "run", str(wl), "--hw", hw, "-q"]
        wall, _ = median_time(lambda: subprocess.run(cmd, check=True, cwd=ROOT), repeat)
    finally:
        wl.unlink(missing_ok=True)
    print(f"{model} on {hw} x parallel {parallel}, batch {batch}, {PROMPT} + {GEN}: CLI {wall:.2f} s wall "
          f"(target < {target_s:g} s, median of {repeat})")
    return dict(model=model, hw=hw, batch=batch, parallel=parallel, wall_s_cli=wall, target_s=target_s)


def spatial_case(workload: str, hw: str, repeat: int) -> dict:
    """Whole `sim run` process of a spatial-pipeline generation, median wall time."""
    cmd = [sys.executable, "-m", "sim.apps.cli", "run", workload, "--hw", hw, "-q"]
    wall, _ = median_time(lambda: subprocess.run(cmd, check=True, cwd=ROOT), repeat)
    print(f"{workload} on {hw}: CLI {wall:.2f} s wall (median of {repeat})")
    return dict(workload=workload, hw=hw, wall_s_cli=wall)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures as JSON")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    out: dict = {"engine_ops_per_s": engine_ops_per_s(args.repeat), "cases": []}
    print(f"engine: {out['engine_ops_per_s'] / 1e3:.1f} k ops/s (median of {args.repeat})")
    for model, hw in CASES:
        wl = ROOT / f".bench_{model}.yaml"
        wl.write_text(f"model: {model}\nbatch: 1\nprompt_len: {PROMPT}\ngen_len: {GEN}\nflash_attention: true\n")
        cmd = [sys.executable, "-m", "sim.apps.cli", "run", str(wl), "--hw", hw, "-q"]
        try:
            wall, _ = median_time(lambda: subprocess.run(cmd, check=True, cwd=ROOT), args.repeat)
            w = workload_from_dict(dict(model=model, prompt_len=PROMPT, gen_len=GEN, flash_attention=True), "bench")
            # Cold: the per-process cache of lowered graphs is cleared before each run.
            in_proc, res = median_time(lambda: (lower.cache_clear(), simulate(w, load_machine(hw)))[1], args.repeat)
        finally:
            wl.unlink(missing_ok=True)
        roof_pred, roof_wall = numpy_roofline(model, hw)
        represented = (1 + GEN - 1) * (res.model["num_layers"] * 17 + 3)
        case = dict(model=model, hw=hw, prompt=PROMPT, gen=GEN, wall_s_cli=wall, wall_s_in_process=in_proc,
                    numpy_roofline_wall_s=roof_wall, wall_ratio_to_numpy=in_proc / roof_wall,
                    e2e_s=res.e2e_s, roofline_e2e_s=roof_pred, e2e_ratio_to_roofline=res.e2e_s / roof_pred,
                    ops_represented=represented, effective_ops_per_s=represented / in_proc,
                    steps_simulated=res.simulated_steps)
        out["cases"].append(case)
        print(f"{model} on {hw}, prompt {PROMPT} + {GEN} new tokens: CLI {wall:.2f} s wall (start-up included), "
              f"in-process {in_proc:.2f} s, numpy roofline {roof_wall:.3f} s (ratio {in_proc / roof_wall:.1f}x); "
              f"predicted e2e {res.e2e_s:.2f} s vs roofline {roof_pred:.2f} s (x{res.e2e_s / roof_pred:.2f}); "
              f"{represented / 1e6:.2f} M ops represented, {represented / in_proc / 1e6:.2f} M ops/s effective")
    out["parallel_cases"] = [parallel_case(*c, args.repeat) for c in PARALLEL_CASES]
    out["spatial_cases"] = [spatial_case(*c, args.repeat) for c in SPATIAL_CASES]
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

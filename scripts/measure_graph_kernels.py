#!/usr/bin/env python3
"""Kernels under CUDA-graph replay on one GPU: the gap between graph nodes, unpadded FP8 GEMMs at small M, and
torch's scaled-dot-product attention at decode (issue 28). Each measurement captures `--calls` calls in one CUDA
graph and replays it; the per-call time is the median of `--reps` blocks of replays between CUDA events, and the
profiler (CUPTI sees graph-launched kernels) gives the kernels' own durations, so per-call time less kernel time
is the gap a graph node adds.

* `gap`: back-to-back `x.add_(1)` on 1024 floats (a kernel with next to no work), and M = 1 bf16 F.linear at
  4096 x 4096 (a memory-bound kernel of ~10 us): per-call time, kernel time, gap.
* `fp8`: W8A8 `torch._scaled_mm` with M NOT padded (M = 1..16; per-tensor scales, bf16 out) on LLaMA shapes,
  with the activation's cast to e4m3 as its own kernel: per-call time of cast + GEMM and of each kernel.
* `sdpa`: `F.scaled_dot_product_attention` with one query token per sequence over a KV cache (bf16, head_dim 128;
  MHA 32/32 and GQA 32/8), the backend torch picks: per-call time, kernel time and the kernels' names.
* `prefill`: the same call causal (`is_causal=True`, q_len = kv_len = S: a whole prompt, as a torch prefill runs
  it) over S = 128..16384, batch 1..32 (batch x S <= 64K tokens) and the head layouts of LLaMA-family models
  (MHA 8..40 heads, GQA 32/8 and 64/8), bf16, head_dim 128: per-call time, kernel time and the kernels' names.

    python scripts/measure_graph_kernels.py --out kernels.json [--only gap,fp8,sdpa,prefill]

Needs a CUDA GPU; without one it says so and exits 2.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

FP8_SHAPES = ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336), (5120, 5120),
              (13824, 5120), (1024, 4096))
FP8_M = (1, 2, 4, 8, 16)
SDPA_BATCH = (1, 4, 16, 64)
SDPA_KV = (256, 1024, 4096, 16384)
SDPA_HEADS = ((32, 32), (32, 8))
PREFILL_S = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PREFILL_BATCH = (1, 2, 4, 8, 16, 32)
PREFILL_HEADS = ((8, 8), (16, 16), (32, 32), (40, 40), (32, 8), (64, 8))
PREFILL_MAX_TOKENS = 65536


def capture_graph(torch, fn: Callable[[], object], calls: int = 1, warmups: int = 3, replays: int = 3):
    """`calls` calls of `fn` captured in one CUDA graph, after `warmups` calls off the capture stream (as
    torch.cuda.graphs' docs ask), and replayed `replays` times before it is returned."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    for _ in range(replays):
        g.replay()
    torch.cuda.synchronize()
    return g


def time_graph(torch, replay: Callable[[], None], replays: int, reps: int) -> tuple[float, float]:
    """`reps` blocks of `replays` back-to-back replays between two CUDA events: (the median block's mean seconds
    per replay, max / min block)."""
    blocks = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            replay()
        end.record()
        end.synchronize()
        blocks.append(start.elapsed_time(end) * 1e-3 / replays)
    return statistics.median(blocks), max(blocks) / min(blocks)


def graph_time(torch, fn: Callable[[], None], calls: int, reps: int) -> dict:
    """`calls` calls of `fn` in one graph: per-call replay time, per-call kernel time and count, kernel names."""
    g = capture_graph(torch, fn, calls, warmups=2)
    per_replay, spread = time_graph(torch, g.replay, 5, reps)
    per_call = per_replay / calls
    k = replay_kernels(torch, g.replay, calls)
    del g
    return dict(per_call_s=per_call, spread=spread, kernel_s=k["kernel_s"],
                kernels_per_call=k["kernels"], gap_per_kernel_s=(per_call - k["kernel_s"]) / max(k["kernels"], 1e-9),
                kernels=k["names"])


def replay_kernels(torch, replay: Callable[[], None], calls: int) -> dict:
    """One replay under the profiler (CUPTI records graph-launched kernels): per call, the kernels' summed
    device time and their count, and each kernel name's median duration."""
    from torch.autograd import DeviceType
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        replay()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    names: dict[str, list[float]] = {}
    for e in kernels:
        names.setdefault(e.name[:120], []).append(e.time_range.elapsed_us() * 1e-6)
    return dict(kernel_s=sum(sum(v) for v in names.values()) / calls, kernels=len(kernels) / calls,
                names={n: statistics.median(v) for n, v in names.items()})


def measure_gap(torch, args) -> list[dict]:
    x = torch.zeros(1024, device="cuda")
    out = [dict(what="add_ 1024 fp32", **graph_time(torch, lambda: x.add_(1.0), 1000, args.reps))]
    F = torch.nn.functional
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    a = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    out.append(dict(what="F.linear bf16 M=1 4096x4096", **graph_time(torch, lambda: F.linear(a, w), 50, args.reps)))
    return out


def measure_fp8(torch, args) -> list[dict]:
    rows = []
    for n, k in FP8_SHAPES:
        wq_t = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        for m in FP8_M:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)

            def call():
                return torch._scaled_mm(x.to(torch.float8_e4m3fn), wq_t, scale_a=one, scale_b=one,
                                        out_dtype=torch.bfloat16)
            rows.append(dict(M=m, N=n, K=k, **graph_time(torch, call, 20, args.reps)))
            print(f"fp8 M={m} N={n} K={k}: {rows[-1]['per_call_s'] * 1e6:.2f} us/call", flush=True)
    return rows


def measure_sdpa(torch, args) -> list[dict]:
    F = torch.nn.functional
    rows = []
    for heads, kv_heads in SDPA_HEADS:
        for b in SDPA_BATCH:
            for L in SDPA_KV:
                q = torch.randn(b, heads, 1, 128, device="cuda", dtype=torch.bfloat16)
                k = torch.randn(b, kv_heads, L, 128, device="cuda", dtype=torch.bfloat16)
                v = torch.randn_like(k)

                def call():
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=heads != kv_heads)
                rows.append(dict(batch=b, heads=heads, kv_heads=kv_heads, kv_len=L,
                                 kv_bytes=2 * k.numel() * k.element_size(), **graph_time(torch, call, 10, args.reps)))
                print(f"sdpa b={b} h={heads}/{kv_heads} L={L}: {rows[-1]['per_call_s'] * 1e6:.2f} us/call", flush=True)
    return rows


def measure_prefill(torch, args) -> list[dict]:
    F = torch.nn.functional
    rows = []
    for heads, kv_heads in PREFILL_HEADS:
        for S in PREFILL_S:
            for b in (b for b in PREFILL_BATCH if b * S <= PREFILL_MAX_TOKENS):
                q = torch.randn(b, heads, S, 128, device="cuda", dtype=torch.bfloat16)
                k = torch.randn(b, kv_heads, S, 128, device="cuda", dtype=torch.bfloat16)
                v = torch.randn_like(k)

                def call():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=heads != kv_heads)
                calls = 10 if b * S * heads <= 2 ** 17 else 2   # short calls: more of them per graph
                rows.append(dict(batch=b, heads=heads, kv_heads=kv_heads, q_len=S, kv_len=S,
                                 **graph_time(torch, call, calls, args.reps)))
                print(f"prefill b={b} h={heads}/{kv_heads} S={S}: {rows[-1]['kernel_s'] * 1e6:.1f} us kernel",
                      flush=True)
    return rows


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default="gap,fp8,sdpa", help="comma-separated parts: gap, fp8, sdpa, prefill")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("measure_graph_kernels: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        raise SystemExit(2)
    from capture_trace import _nvidia_driver
    from sim.apps.trace.scrub import portable_argv
    result = dict(tool="scripts/measure_graph_kernels.py",
                  argv=portable_argv(list(sys.argv[1:] if argv is None else argv), ROOT),
                  date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  device_name=torch.cuda.get_device_name(), torch_version=torch.__version__,
                  cuda_version=torch.version.cuda, driver_version=_nvidia_driver())
    parts = {"gap": measure_gap, "fp8": measure_fp8, "sdpa": measure_sdpa, "prefill": measure_prefill}
    with torch.inference_mode():
        for name in args.only.split(","):
            try:
                result[name] = parts[name](torch, args)
            except Exception as exc:   # one part failing must not lose the others
                result[name] = dict(error=f"{type(exc).__name__}: {exc}")
                print(f"{name}: failed: {exc}", flush=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()

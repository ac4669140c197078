#!/usr/bin/env python3
"""Board power of single kernels held busy, to separate the power model's terms (issue 33): idle without and with a
CUDA context, the activity power of a busy board, and the energy per HBM byte and per tensor-core FLOP by format.

The ML.ENERGY runs the model is fitted on keep the GPU busy ~100% of their window, so they cannot tell the
activity power (what any running kernel adds) from the traffic power (J/byte x bytes/s): docs/energy.md, "A third
free figure". Here every case keeps the board busy back to back, and the cases differ in what a second moves:

* `l2_copy`: a copy of a buffer small enough for the L2 (the HBM barely moves): busy, ~no DRAM traffic;
* `hbm_copy`, `hbm_read`: copies and a reduction over buffers far larger than the L2: busy, the HBM at full stream;
* `gemv_bf16`, `gemv_fp8`: M = 1 GEMMs over weights far larger than the L2 (the decode step's GEMV; FP8 is
  `torch._scaled_mm`, W8A8 with the activation cast), at 2 and 1 bytes a weight;
* `gemm_bf16`, `gemm_fp8`: M = N = K = 8192: tensor-core bound.

Each case is captured as a CUDA graph of `--calls` calls, timed (blocks of replays between CUDA events), then
replayed back to back for `--seconds` while NVML's energy counter reads the board (scripts/measure_decode_power.py's
`draw`). Idle is read twice first: before this process makes a CUDA context (bare idle) and with one held, nothing
running (the static power a serving engine sees between requests; arXiv:2605.23918 puts the difference at 26-50 W on
HBM GPUs). Per case the JSON has the call's time, bytes (HBM traffic as the op's operands, the L2 copy's counted
apart) and FLOPs, so P = P_ctx + P_active + J/byte x bytes/s + J/FLOP x FLOP/s can be solved for the figures.

    python scripts/measure_power_micro.py --out power_micro.json [--only l2_copy,hbm_copy,...] [--seconds 3]

Without a GPU (`--device cpu`) it runs each case once eagerly and reports its size only: a dry run of the script.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from capture_trace import _nvidia_driver  # noqa: E402
from measure_decode_power import draw, idle_power, open_board  # noqa: E402
from measure_graph_kernels import capture_graph, time_graph  # noqa: E402
from sim.apps.trace.scrub import portable_argv  # noqa: E402

L2_COPY_BYTES = 8 * 2**20          # 8 MiB each way: source and destination well inside a 50-60 MB L2
HBM_BYTES = 2 * 2**30              # 2 GiB buffers: 40x an H200's L2
GEMV_N = 16384                     # square: 512 MiB of bf16 weights, 256 MiB of FP8
GEMM_N = 8192


@dataclass(frozen=True)
class Kernel:
    """One case: a call to repeat, its DRAM bytes and FLOPs per call, and how many calls a graph holds."""
    call: Callable[[], object]
    dram_bytes: float
    flops: float
    calls: int
    note: str = ""


def cases(torch, device: str, gemm_n: int = GEMM_N, big: int = HBM_BYTES, gemv_n: int = GEMV_N
          ) -> dict[str, Callable[[], Kernel]]:
    """Each case's builder (buffers are made when the case runs, freed after)."""
    F, bf16 = torch.nn.functional, torch.bfloat16

    def l2_copy() -> Kernel:
        src = torch.ones(L2_COPY_BYTES // 2, dtype=bf16, device=device)
        dst = torch.empty_like(src)
        return Kernel(lambda: dst.copy_(src), 0.0, 0.0, 200, f"L2-resident copy, {2 * L2_COPY_BYTES} B moved per call")

    def hbm_copy() -> Kernel:
        src = torch.ones(big // 2, dtype=bf16, device=device)
        dst = torch.empty_like(src)
        return Kernel(lambda: dst.copy_(src), 2.0 * big, 0.0, 4)

    def hbm_read() -> Kernel:
        src = torch.ones(big // 2, dtype=bf16, device=device)
        return Kernel(lambda: src.sum(), float(big), float(big // 2), 4)

    def gemv_bf16() -> Kernel:
        w = torch.randn(gemv_n, gemv_n, dtype=bf16, device=device)
        x = torch.randn(1, gemv_n, dtype=bf16, device=device)
        return Kernel(lambda: F.linear(x, w), 2.0 * gemv_n ** 2, 2.0 * gemv_n ** 2, 10)

    def gemv_fp8() -> Kernel:
        w_t = torch.randn(gemv_n, gemv_n, device=device).to(torch.float8_e4m3fn).t()
        x = torch.randn(1, gemv_n, dtype=bf16, device=device)
        one = torch.ones((), device=device)
        return Kernel(lambda: torch._scaled_mm(x.to(torch.float8_e4m3fn), w_t, scale_a=one, scale_b=one,
                                               out_dtype=bf16),
                      1.0 * gemv_n ** 2, 2.0 * gemv_n ** 2, 10, "W8A8, the activation cast in the call")

    def gemm(fp8: bool) -> Kernel:
        a = torch.randn(gemm_n, gemm_n, dtype=bf16, device=device)
        b = torch.randn(gemm_n, gemm_n, dtype=bf16, device=device)
        flops = 2.0 * gemm_n ** 3
        if not fp8:
            return Kernel(lambda: a @ b, 3 * 2.0 * gemm_n ** 2, flops, 4)
        a8, b8_t = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        return Kernel(lambda: torch._scaled_mm(a8, b8_t, scale_a=one, scale_b=one, out_dtype=bf16),
                      (2 * 1.0 + 2.0) * gemm_n ** 2, flops, 4)

    return {"l2_copy": l2_copy, "hbm_copy": hbm_copy, "hbm_read": hbm_read, "gemv_bf16": gemv_bf16,
            "gemv_fp8": gemv_fp8, "gemm_bf16": lambda: gemm(False), "gemm_fp8": lambda: gemm(True)}


def measure(torch, k: Kernel, board, args) -> dict:
    """One case on the GPU: the per-call time of a graph of `k.calls` calls, then its power over `args.seconds`."""
    def calls():
        for _ in range(k.calls):
            k.call()
    g = capture_graph(torch, calls)
    per_replay, spread = time_graph(torch, g.replay, 5, args.reps)
    call_s = per_replay / k.calls
    p = draw(torch, board, g.replay, per_replay, args.seconds)
    del g
    return dict(call_s=call_s, spread=spread, dram_bytes_per_s=k.dram_bytes / call_s, flops_per_s=k.flops / call_s,
                **p)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default=None, help="comma-separated cases (default: all)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--seconds", type=float, default=3.0, help="power window per case")
    ap.add_argument("--idle-seconds", type=float, default=3.0)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    cuda = args.device == "cuda"
    board = open_board() if cuda else None
    bare = idle_power(board, args.idle_seconds) if board is not None else None   # before any CUDA context
    import torch
    if cuda and not torch.cuda.is_available():
        raise SystemExit("measure_power_micro: --device cuda but torch.cuda.is_available() is False")
    # A CPU dry run shrinks the buffers: it checks the calls, not their sizes.
    builders = cases(torch, args.device, **({} if cuda else {"gemm_n": 256, "big": 2**20, "gemv_n": 256}))
    names = args.only.split(",") if args.only else list(builders)
    unknown = [n for n in names if n not in builders]
    if unknown:
        raise SystemExit(f"measure_power_micro: unknown case {unknown[0]!r}; cases: {', '.join(builders)}")
    result = dict(tool="scripts/measure_power_micro.py",
                  argv=portable_argv(list(sys.argv[1:] if argv is None else argv), ROOT),
                  date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  device_name=torch.cuda.get_device_name() if cuda else "cpu", torch_version=torch.__version__,
                  driver_version=_nvidia_driver() if cuda else None, idle_bare=bare, cases={})
    if cuda:
        torch.ones(1, device="cuda")          # the context, and nothing running on it
        torch.cuda.synchronize()
        result.update(power_limit_w=board.limit_w(), energy_counter=board.has_energy,
                      idle_context=idle_power(board, args.idle_seconds))
    with torch.inference_mode():
        for name in names:
            try:
                k = builders[name]()
                if cuda:
                    row = measure(torch, k, board, args)
                else:
                    t0 = time.perf_counter()
                    k.call()
                    row = dict(call_s=time.perf_counter() - t0)
                row.update(dram_bytes=k.dram_bytes, flops=k.flops, calls_per_graph=k.calls, note=k.note)
            except Exception as exc:   # one case failing must not lose the others
                row = dict(error=f"{type(exc).__name__}: {exc}")
            result["cases"][name] = row
            watts = f", {row['avg_power_w']:.0f} W at {row['sm_mhz']} MHz" if "avg_power_w" in row else ""
            print(f"{name}: {row.get('call_s', float('nan')) * 1e6:.1f} us/call{watts}"
                  + (f" ({row['error']})" if "error" in row else ""), flush=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")   # each finished case survives a later failure
            if cuda:
                torch.cuda.empty_cache()
    return result


if __name__ == "__main__":
    main()

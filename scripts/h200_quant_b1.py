#!/usr/bin/env python3
"""FP8 and INT4 decode GEMMs at batch 1 on the H200 against this project's own capture (issue 28).

The measurement: ../shared/validation/h200/h200_micro.json `graph_timed_gemm_us`, M = 1 rows (20 calls of one
kernel captured in a CUDA graph and replayed; fp8 = torch._scaled_mm alone, the activation quantization not
timed; int4 = tinygemm _weight_int4pack_mm). sim: the same GEMM op (the Llama projections of those (N, K)),
costed by hw_models.cost.roofline_cost on the h200 preset under torch-cudagraph, the stack that replays as
the capture does. Decomposed: the family's floor, the weight stream, and the activation-quantization pass
(W8A8 only: a separate kernel sim charges inside the GEMM op, which the capture did not time). A Llama-2-7B
layer at batch 1 (q, k, v, o at 4096 x 4096, gate and up at 11008 x 4096, down at 4096 x 11008) sums them as
a decode step's GEMMs would.

The headline compares like with like: the capture timed `torch._scaled_mm` alone, so the FP8 error that
counts is sim's GEMM kernel less its activation-quantization pass ("kernel" columns); the error of sim's
whole W8A8 op (that pass included) is printed beside it, since serving pays it.

What was fitted on what: the FP8 family's floor and weight-stream efficiency (kernel_families.yaml
fp8_scaled_mm) were read off this same file's M = 1 rows, tinygemm's too: in sample, not a held-out check.

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/h200_quant_b1.py [--stack torch-cudagraph]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from energy_h200 import MICRO  # noqa: E402  (the shared h200_micro.json, SIM_SHARED_VALIDATION honoured)
from md_table import table  # noqa: E402
from validation_h200_stacks import _gemm_ops  # noqa: E402
from hw_models.cost import roofline_cost  # noqa: E402
from hw_models.machine import load_machine  # noqa: E402
from hw_models.stack.kernel_families import families  # noqa: E402
from hw_models.stack.spec import load_stack  # noqa: E402
from sim.core import graph as g  # noqa: E402

FORMATS = (("fp8_e4m3", "fp8_us"), ("int4", "int4_us"))
LAYER_7B = {(4096, 4096): 4, (11008, 4096): 2, (4096, 11008): 1}   # Llama-2-7B's projections, count per layer


def quant_pass_s(op, unit, tier, stack, family: str) -> tuple[float, float]:
    """The activation-quantization kernel sim charges inside a W8A8 GEMM (hw_models.stack.cost.family_cost):
    its floor and its traffic time (read 2 B, write 1 B per activation)."""
    fam = families()[family]
    if not fam.activation_quant:
        return 0.0, 0.0
    m, k = op.dims.get("m", 1), op.dims.get("k", 1)
    bw = tier.bandwidth_bytes_per_s * unit.efficiency.for_kind(g.GEMM, m).memory_max
    floor = stack.floor_s if fam.quant_floor_s is None else fam.quant_floor_s
    return floor, m * k * 3 / (bw * fam.quant_stream_efficiency)


def rows_for(micro: dict, stack_name: str) -> list[dict]:
    machine = load_machine("h200")
    unit, tier, stack = machine.units["gpu"], machine.memory["hbm"], load_stack(stack_name)
    out = []
    for fmt, key in FORMATS:
        ops = _gemm_ops(fmt, 1)
        for r in (r for r in micro["graph_timed_gemm_us"] if r["M"] == 1 and (r["N"], r["K"]) in ops):
            op = ops[(r["N"], r["K"])]
            c = roofline_cost(op, unit, "gpu", tier, stack=stack)
            q_floor, q_traffic = quant_pass_s(op, unit, tier, stack, c.path)
            out.append(dict(fmt=fmt, n=r["N"], k=r["K"], meas=r[key], sim=c.duration_s * 1e6,
                            quant=(q_floor + q_traffic) * 1e6, floor=families()[c.path].floor_s * 1e6,
                            stream=(c.memory_s - q_traffic) * 1e6, family=c.path))
    return out


def summary(rows: list[dict]) -> list[list[str]]:
    out = []
    for fmt, _ in FORMATS:
        rs = [r for r in rows if r["fmt"] == fmt]
        err = [r["sim"] / r["meas"] - 1 for r in rs]
        err_k = [(r["sim"] - r["quant"]) / r["meas"] - 1 for r in rs]
        layer = {(r["n"], r["k"]): r for r in rs}
        meas = sum(c * layer[s]["meas"] for s, c in LAYER_7B.items())
        sim = sum(c * layer[s]["sim"] for s, c in LAYER_7B.items())
        kern = sum(c * (layer[s]["sim"] - layer[s]["quant"]) for s, c in LAYER_7B.items())
        out.append([fmt, str(len(rs)), f"{statistics.fmean(map(abs, err_k)):.1%}", f"{statistics.fmean(err_k):+.1%}",
                    f"{statistics.fmean(map(abs, err)):.1%}", f"{meas:.1f}", f"{kern:.1f}", f"{kern / meas - 1:+.1%}",
                    f"{sim / meas - 1:+.1%}"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stack", default="torch-cudagraph", help="software stack (%(default)s)")
    args = ap.parse_args(argv)
    if not MICRO.is_file():
        print(f"{MICRO}: not found (set SIM_SHARED_VALIDATION)", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")
    rows = rows_for(json.loads(MICRO.read_text()), args.stack)
    print(table(["format", "N", "K", "measured us", "sim kernel us", "kernel error", "family floor us",
                 "weight stream us", "quant pass us", "error with quant pass"],
                [[r["fmt"], str(r["n"]), str(r["k"]), f"{r['meas']:.2f}", f"{r['sim'] - r['quant']:.2f}",
                  f"{(r['sim'] - r['quant']) / r['meas'] - 1:+.1%}", f"{r['floor']:.2f}", f"{r['stream']:.2f}",
                  f"{r['quant']:.2f}", f"{r['sim'] / r['meas'] - 1:+.1%}"] for r in rows]))
    print()
    print(table(["format", "GEMMs", "kernel MAPE (as captured)", "kernel mean error", "MAPE with quant pass",
                 "7B layer measured us", "7B layer sim kernel us", "layer kernel error", "layer error with quant pass"],
                summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

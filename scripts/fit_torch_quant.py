#!/usr/bin/env python3
"""Fit the quantized GEMM families torch eager and torch-cudagraph run (`fp8_scaled_mm`: W8A8 torch._scaled_mm;
`tinygemm`: W4A16 aten._weight_int4pack_mm, group 128) at M = 1 on this project's own H200 captures, and check
kernel_families.yaml carries the fit (issue 28).

Data (calibration): traces/h200/quant/llama2-7b_L4_bf16-w{fp8_e4m3,int4}_b1_p1024_d8_cuda_flash.trace.json.gz, a
4-layer Llama-2-7B decoding at batch 1 with quantized projections (scripts/capture_trace.py --weights): each
projection's kernels (FP8: the activation's cast, the GEMM, a split-K reduction where cuBLASLt adds one; int4: one
tinygemm kernel) by profiler correlation, the median per projection over 4 layers x 8 decode steps. Unlike the
h200_micro.json rows the families were first read off, the weights stream from the HBM (the micro's 20 calls
re-read one weight that fits the 60 MB L2) and FP8's M = 1 is not padded to 16 (torch 2.11 takes it as it is; the
padded call is another kernel). The families' times are graph-replayed ones (their other sources are), so each
kernel's device time gets torch-cudagraph's measured node gap (torch-cudagraph.yaml node_gap_s).

Model (hw_models.stack.cost.family_cost at M = 1, memory-bound): time = floor_s + weights / (bandwidth x
weight_stream_efficiency) + the rest (FP8's cast kernel at the stack's floor, activation bytes), linear in floor_s
and 1 / efficiency: least squares on the relative error, three significant figures. Held out: the whole
graph-replayed steps of Llama-2-7B and -13B (scripts/validation_h200_graph.py; the 13B's shapes are not in the
captures).

    python scripts/fit_torch_quant.py [--check]
"""

from __future__ import annotations

import statistics
import sys
from functools import cache
from pathlib import Path
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hw_models import cost as hw_cost  # noqa: E402
from hw_models.machine import load_machine  # noqa: E402
from hw_models.stack import cost as stack_cost_module  # noqa: E402
from hw_models.stack.kernel_families import families  # noqa: E402
from hw_models.stack.spec import load_stack  # noqa: E402
from sim.apps.script_help import script_args  # noqa: E402
from sim.apps.trace.parser import load_trace  # noqa: E402
from sim.apps.trace.shapes import step_graph  # noqa: E402

CAPTURE = ROOT / "traces" / "h200" / "quant" / "llama2-7b_L4_bf16-w{}_b1_p1024_d8_cuda_flash.trace.json.gz"
FAMILIES = {"fp8_e4m3": "fp8_scaled_mm", "int4": "tinygemm"}   # weight format -> the family torch runs for it
STACK = "torch-cudagraph"
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@cache   # fit() and main() both read it
def measured(fmt: str) -> tuple[object, dict[str, float]]:
    """(the `fmt` capture, graph-replayed seconds per projection: median device time + kernels x node gap)."""
    trace = load_trace(Path(str(CAPTURE).format(fmt)))[0]
    gap = load_stack(STACK).node_gap_s
    out = {}
    for name in PROJECTIONS:
        ops = [o for o in trace.ops if o.name.endswith("." + name) and trace.steps[o.step].phase == "decode"]
        out[name] = statistics.median(o.duration_s + o.kernels * gap for o in ops)
    return trace, out


def simulated(trace, family: str, floor_s: float, efficiency: float) -> dict[str, float]:
    """Each projection's time under torch-cudagraph on the h200 with `family` at these two figures."""
    fam = families()[family].model_copy(update={"floor_s": floor_s, "weight_stream_efficiency": efficiency})
    table = {**families(), family: fam}
    m = load_machine("h200")
    unit = m.units[m.main_unit]
    tier = m.memory[unit.memory]
    stack = load_stack(STACK)
    graph = step_graph(trace, next(s for s in trace.steps if s.phase == "decode"))
    with mock.patch.object(stack_cost_module, "families", lambda: table):
        return {name: hw_cost.roofline_cost(graph.op(f"L0.{name}"), unit, m.main_unit, tier, stack=stack).duration_s
                for name in PROJECTIONS}


def fit(fmt: str) -> tuple[float, float, float]:
    """(floor_s, weight_stream_efficiency, MAPE of the projections at them) of `fmt`'s family."""
    trace, meas = measured(fmt)
    family = FAMILIES[fmt]
    at = {x: simulated(trace, family, 0.0, x) for x in (1.0, 0.5)}   # time = floor + A / eff + R, per projection
    y = np.array([meas[n] for n in PROJECTIONS])
    a = np.array([at[0.5][n] - at[1.0][n] for n in PROJECTIONS])
    r = np.array([at[1.0][n] for n in PROJECTIONS]) - a
    A = np.c_[np.ones_like(y), a] / y[:, None]
    (floor, inv_eff), *_ = np.linalg.lstsq(A, (y - r) / y, rcond=None)
    floor, eff = float(f"{floor:.3g}"), float(f"{1.0 / inv_eff:.3g}")
    sim = simulated(trace, family, floor, eff)
    return floor, eff, statistics.fmean(abs(sim[n] / meas[n] - 1) for n in PROJECTIONS)


def main() -> int:
    args = script_args(__doc__, check="exit 1 where kernel_families.yaml differs from the fits")
    stale = 0
    for fmt, family in FAMILIES.items():
        floor, eff, err = fit(fmt)
        fam = families()[family]
        trace, meas = measured(fmt)
        shipped = simulated(trace, family, fam.floor_s, fam.weight_stream_efficiency)
        before = statistics.fmean(abs(shipped[n] / meas[n] - 1) for n in PROJECTIONS)
        print(f"{family}: floor_s {floor:.3g} s, weight_stream_efficiency {eff:.3g} (projection MAPE {err:.1%}; "
              f"at the shipped {fam.floor_s:.3g} s / {fam.weight_stream_efficiency:.3g}: {before:.1%})")
        if (fam.floor_s, fam.weight_stream_efficiency) != (floor, eff):
            stale += 1
    if args.check:
        print("kernel_families.yaml carries the fits" if not stale else "kernel_families.yaml: copy the fits above")
        return 1 if stale else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

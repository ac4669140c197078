"""Hand-worked checks for the last survivors of the core mutation job (issue 32 item 2): the layer
fold with a period, a cost curve that gives no rate, and where a CUDA graph's gap replaces the launch."""

from __future__ import annotations

import math

import pytest

from hw_models.cost import roofline_cost, work_time_s
from hw_models.machine import load_machine
from hw_models.stack.spec import load_stack
from sim.apps.trace.aic import gemm_op
from sim.core.generation import fold_layers
from sim.core.results import StepResult

# Layer costs of a made-up 10-layer model: 3 leading layers of 5 s (dense layers before the MoE
# ones, say), then a period of 2 layers of 1 s and 2 s.
LEAD, PATTERN = (5.0, 5.0, 5.0), (1.0, 2.0)


def _layer_s(i: int) -> float:
    return LEAD[i] if i < len(LEAD) else PATTERN[(i - len(LEAD)) % len(PATTERN)]


def test_fold_is_raised_to_whole_periods():
    """10 layers, fold 3, period 2: 7 layers after the fold is not whole periods, so the fold is
    RAISED to 4 (never lowered into the leading layers): runs of 4 layers (15 + 1 = 16 s) and 6
    (16 + 2 + 1 = 19 s), k = (10 - 4) / 2 = 3 periods: 16 + 3 x 3 = 25 s, the exact sum
    5 x 3 + (1 + 2 + 1 + 2 + 1 + 2 + 1) = 25 s. A fold lowered to 2 would extrapolate the 5 s
    layers: 10 + 4 x 6 = 34 s."""
    ran: list[int] = []

    def run(n: int) -> StepResult:
        ran.append(n)
        return StepResult("decode", 1, sum(_layer_s(i) for i in range(n)), {})

    assert fold_layers(run, 10, 3, period=2).time_s == pytest.approx(25.0)
    assert ran == [4, 6]


def test_no_rate_is_an_infinite_time_not_a_crash():
    """A curve that gives no throughput for the issued work (a ramp so long its half size
    overflows) takes forever: inf, which the run's finiteness check refuses with a message."""
    assert work_time_s(1e9, 1e12, lambda issued: 0.0) == math.inf


def _h200():
    """H200: no dense GEMM family (h100_sxm names dense_bf16_h100), so a bf16 GEMM keeps the roofline."""
    m = load_machine("h200")
    u = m.units[m.main_unit]
    return u, m.main_unit, m.memory[u.memory]


def test_graph_gap_needs_graphs_and_a_launched_kernel():
    """bf16 M=1 4096x4096 on h200 under vllm (1.19 us gap): the gap replaces the 3 us launch
    only when the stack replays CUDA graphs and the kernel is launched. With graphs off the same
    stack pays the launch (the plain cost); a steady slice continues a running kernel and pays
    neither (the plain steady cost, no 1.19 us added)."""
    u, name, tier = _h200()
    op = gemm_op(1, 4096, 4096, "bf16")
    plain = roofline_cost(op, u, name, tier)
    eager = load_stack("vllm").model_copy(update={"graphs": False})
    assert roofline_cost(op, u, name, tier, stack=eager).duration_s == pytest.approx(plain.duration_s)
    steady = roofline_cost(op, u, name, tier, steady=True)
    got = roofline_cost(op, u, name, tier, steady=True, stack=load_stack("vllm"))
    assert got.duration_s == pytest.approx(steady.duration_s, rel=1e-9)
    assert got.overhead_s == steady.overhead_s

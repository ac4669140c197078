"""Graph replay costs no launch (issue 28): under a CUDA-graph stack with `graph_gap_s`, a kernel the
stack says nothing else about pays that gap in place of the preset's host launch overhead."""

from __future__ import annotations

import pytest

from hw_models.cost import roofline_cost
from hw_models.machine import load_machine
from hw_models.stack.spec import load_stack
from sim.apps.trace.aic import gemm_op


def _h200():
    """H200: no dense GEMM family (no aic table; h100_sxm names dense_bf16_h100), so a GEMM keeps the roofline."""
    m = load_machine("h200")
    u = m.units[m.main_unit]
    return u, m.main_unit, m.memory[u.memory]


def test_small_gemm_pays_the_gap_not_the_launch():
    """bf16 M=1 4096x4096 on h200: plain = 3 us launch + max(compute, memory); under vllm
    (graphs, 1.19 us gap) the same less 3 us plus 1.19 us."""
    u, name, tier = _h200()
    op = gemm_op(1, 4096, 4096, "bf16")
    plain = roofline_cost(op, u, name, tier)
    assert plain.overhead_s == pytest.approx(3e-6)
    vllm = roofline_cost(op, u, name, tier, stack=load_stack("vllm"))
    assert vllm.overhead_s == pytest.approx(1.19e-6)
    assert vllm.duration_s == pytest.approx(plain.duration_s - 3e-6 + 1.19e-6)


def test_no_gap_without_graphs_or_without_a_figure():
    u, name, tier = _h200()
    op = gemm_op(1, 4096, 4096, "bf16")
    plain = roofline_cost(op, u, name, tier)
    for stack in ("torch-eager", "vllm-v0-eager"):   # launched from the host: the preset's launch stays
        assert roofline_cost(op, u, name, tier, stack=load_stack(stack)).duration_s == pytest.approx(plain.duration_s)
    gapless = load_stack("vllm").model_copy(update={"graph_gap_s": None})
    assert roofline_cost(op, u, name, tier, stack=gapless).duration_s == pytest.approx(plain.duration_s)


@pytest.mark.parametrize("stack", ["vllm", "trtllm", "torch-cudagraph"])
def test_never_faster_with_more_rows(stack):
    u, name, tier = _h200()
    s = load_stack(stack)
    for n, k in ((512, 512), (4096, 4096), (14336, 4096)):
        t = [roofline_cost(gemm_op(m, n, k, "bf16"), u, name, tier, stack=s).duration_s
             for m in (1, 2, 8, 16, 64, 256, 1024, 8192)]
        assert t == sorted(t)

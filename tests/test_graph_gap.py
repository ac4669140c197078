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


def _norm_op():
    from sim.core.lowering import FormatPolicy, lower
    from sim.core.model import load_model
    graph = lower(load_model("llama2-7b"), "decode", 1, 1, 513, FormatPolicy("bf16", "bf16", "bf16"),
                  flash_attention=True, num_layers=1)
    return graph.op("L0.attn_norm")


def test_graph_nodes_add_their_gap_per_kernel():
    """torch-cudagraph prices a decode RMSNorm as 8 kernels (torch-cudagraph.yaml ops.norm); replayed from a graph
    each leaves node_gap_s to the next node: 8 x 0.34715 us more than the same stack without the gap."""
    u, name, tier = _h200()
    op, s = _norm_op(), load_stack("torch-cudagraph")
    assert s.ops["norm"].kernels == 8 and s.node_gap_s == pytest.approx(0.34715e-6)
    with_gap = roofline_cost(op, u, name, tier, stack=s)
    without = roofline_cost(op, u, name, tier, stack=s.model_copy(update={"node_gap_s": None}))
    assert with_gap.duration_s - without.duration_s == pytest.approx(8 * 0.34715e-6)
    assert with_gap.overhead_s == pytest.approx(8 * (1.34e-6 + 0.34715e-6))


def test_no_node_gap_when_launched_from_the_host():
    """Eager launches: the host's launch gap is the stack's host cost, not a graph node's; node_gap_s is ignored."""
    u, name, tier = _h200()
    op = _norm_op()
    eager = load_stack("torch-eager")
    gapped = eager.model_copy(update={"node_gap_s": 1e-6})
    assert roofline_cost(op, u, name, tier, stack=gapped).duration_s == \
        pytest.approx(roofline_cost(op, u, name, tier, stack=eager).duration_s)


def test_node_gap_is_the_calibration_steps_measurement():
    """The shipped figure is (replay - kernels' device time) / kernels of the one calibration step
    (scripts/validation_h200_graph.py; the other graph-replayed steps are held out)."""
    import json
    from pathlib import Path
    doc = json.loads((Path(__file__).resolve().parent.parent / "traces" / "h200" / "graph_steps" /
                      "llama2-7b_kernels.json").read_text())
    c = next(c for c in doc["cases"] if c["case"] == "decode:bf16:1:512")
    assert load_stack("torch-cudagraph").node_gap_s == pytest.approx((c["step_s"] - c["kernel_s"]) / c["kernels"],
                                                                     rel=1e-4)

"""Report tables count an op once, whatever pieces it ran in."""

import pytest

from sim.core.results import OpRecord, aggregate_by_name, group_name


def _rec(name, start, end, kind="gemm", bound="memory"):
    return OpRecord(name, kind, "u", start, end, 1.0, 1.0, bound)


def test_pieces_layers_and_batches_group():
    ops = [
        # q_proj split over two PIM stacks that ran side by side: wall time 0..3, not 2 + 3
        _rec("L0.q_proj@stack0", 0.0, 2.0), _rec("L0.q_proj@stack1", 0.0, 3.0),
        _rec("L1.q_proj@stack0", 5.0, 6.0), _rec("L1.q_proj@stack1", 5.0, 6.0),
        # a block schedule's GPU batches of one layer op
        _rec("L0.b0.cpu_attn", 0.0, 4.0, "compute", "compute"), _rec("L0.b1.cpu_attn", 4.0, 8.0, "compute", "compute"),
        _rec("lm_head", 9.0, 9.5),
    ]
    assert group_name(ops[0]) == "q_proj" and group_name(ops[4]) == "cpu_attn"
    rows = {name: (secs, count) for name, _, secs, _, count in aggregate_by_name(ops)}
    assert rows["q_proj"] == (pytest.approx(3.0 + 1.0), 2)
    assert rows["cpu_attn"] == (pytest.approx(8.0), 2)
    assert rows["lm_head"] == (pytest.approx(0.5), 1)

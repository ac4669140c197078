"""Report tables count an op once, whatever pieces it ran in: the planner says which
execution a task is a piece of (`group`) and which op it works for (`op`); results
group by those fields, never by parsing names."""

import pytest

from sim.core.engine import Task, run
from sim.core.results import OpRecord, aggregate_by_name, group_name, merge_pieces, op_records


def _rec(name, start, end, kind="gemm", bound="memory", group="", op=""):
    return OpRecord(name, kind, "u", start, end, 1.0, 1.0, bound, group=group or name, op=op or group or name)


def test_pieces_layers_and_batches_group():
    ops = [
        # q_proj split over two PIM stacks that ran side by side: wall time 0..3, not 2 + 3
        _rec("L0.q_proj@stack0", 0.0, 2.0, group="L0.q_proj"), _rec("L0.q_proj@stack1", 0.0, 3.0, group="L0.q_proj"),
        _rec("L1.q_proj@stack0", 5.0, 6.0, group="L1.q_proj"), _rec("L1.q_proj@stack1", 5.0, 6.0, group="L1.q_proj"),
        # a block schedule's GPU batches of one layer op: two executions of one op
        _rec("L0.b0.cpu_attn", 0.0, 4.0, "compute", "compute", op="L0.cpu_attn"),
        _rec("L0.b1.cpu_attn", 4.0, 8.0, "compute", "compute", op="L0.cpu_attn"),
        _rec("lm_head", 9.0, 9.5),
    ]
    assert group_name(ops[0]) == "q_proj" and group_name(ops[4]) == "cpu_attn"
    assert [o.name for o in merge_pieces(ops)] == ["L0.q_proj", "L1.q_proj", "L0.b0.cpu_attn", "L0.b1.cpu_attn",
                                                   "lm_head"]
    rows = {name: (secs, count) for name, _, secs, _, count in aggregate_by_name(ops)}
    assert rows["q_proj"] == (pytest.approx(3.0 + 1.0), 2)
    assert rows["cpu_attn"] == (pytest.approx(8.0), 2)
    assert rows["lm_head"] == (pytest.approx(0.5), 1)


def test_names_are_not_parsed():
    """A name that looks like a piece (`@`, `.b1`, `.h2`) is just a name when the planner
    says the task is whole."""
    ops = [_rec("L0.x@y", 0.0, 1.0), _rec("L0.x@z", 0.0, 1.0), _rec("L0.a.b1", 1.0, 2.0), _rec("L0.a.h2", 2.0, 3.0)]
    rows = {name: count for name, _, _, _, count in aggregate_by_name(ops)}
    assert rows == {"x@y": 1, "x@z": 1, "a.b1": 1, "a.h2": 1}


def test_engine_carries_group_and_op_into_records():
    tl = run([Task("t0", "r0", 1.0, group="g", op="L3.q"), Task("t1", "r1", 2.0, group="g", op="L3.q"),
              Task("t2", "r0", 1.0, deps=("t0",))])
    recs = {r.name: r for r in op_records(tl)}
    assert (recs["t0"].group, recs["t0"].op) == ("g", "L3.q")
    assert (recs["t2"].group, recs["t2"].op) == ("t2", "t2")     # whole: its own id
    (merged, alone) = merge_pieces(sorted(recs.values(), key=lambda r: r.name))
    assert merged.name == "g" and (merged.start_s, merged.end_s) == (0.0, 2.0) and alone.name == "t2"


@pytest.mark.parametrize("hw", ["hbm_pim", "groq_lpu"])
def test_a_split_op_s_parts_carry_their_share(hw):
    """A PIM stack's piece and a spatial chip's slice carry their share of the op's FLOPs and bytes: a step's
    records sum to the same model's step on a GPU (each part had carried the whole op: hbm_pim's Llama-2-13B
    decode step summed to 5x its bytes), and merged pieces to the whole op."""
    from hw_models.machine import load_machine
    from hw_models.registry import simulate
    from sim.core.results import merge_pieces, whole_op
    from sim.core.workload import workload_from_dict

    w = workload_from_dict(dict(name="t", model="llama2-7b", batch=1, prompt_len=256, gen_len=2), "t.yaml")
    # every die with PIM units, so no op is also cut between host and PIM (whose two parts both read the input:
    # tests/test_pim_reach.py)
    all_dies = {"pim.pim_capacity_bytes_per_stack": None} if hw == "hbm_pim" else None
    split, whole = (simulate(w, load_machine(m, all_dies if m == hw else None)).decode_ops for m in (hw, "a6000"))
    ops = [o for o in split if o.kind != "transfer"]
    groups = {o.group for o in ops}
    assert any(sum(o.group == g for o in ops) > 1 for g in groups)     # some op does run in parts
    assert sum(o.flops for o in ops) == pytest.approx(sum(o.flops for o in whole), rel=1e-9)
    assert sum(o.bytes for o in ops) == pytest.approx(sum(o.bytes for o in whole), rel=1e-9)
    flops = {o.name: o.flops for o in whole}
    assert all(o.flops == pytest.approx(flops[whole_op(o.name)]) for o in merge_pieces(ops))


def test_offload_compute_tasks_carry_their_ops_flops_and_bytes():
    """FlexGen's per-layer compute task (and, under CPU attention, its GPU and CPU parts) had 0 FLOPs and 0 bytes in
    the op records, labelled compute-bound: the step's computes now sum to the same model's step on a GPU."""
    from hw_models.machine import load_machine
    from hw_models.registry import simulate
    from sim.core.workload import workload_from_dict

    w = workload_from_dict(dict(name="t", model="llama2-7b", batch=1, prompt_len=256, gen_len=2), "t.yaml")
    off, gpu = (simulate(w, load_machine(m)).decode_ops for m in ("flexgen_t4", "a6000"))
    computes = [o for o in off if o.kind == "compute"]
    assert computes and all(o.flops > 0 for o in computes if o.name.startswith("L"))   # an embedding gathers
    assert sum(o.flops for o in computes) == pytest.approx(sum(o.flops for o in gpu), rel=1e-9)
    assert sum(o.bytes for o in computes) == pytest.approx(sum(o.bytes for o in gpu), rel=1e-9)

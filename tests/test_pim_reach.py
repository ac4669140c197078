"""What the PIM dies reach (hw_models/pim/reach.py): Aquabolt-XL stacks mix four 4 Gb PIM dies with four 8 Gb
plain ones, so hbm_pim's units reach 2 GiB of each 6 GiB stack; an op whose data lies in plain dies runs on the
host. Hand-derived: Llama-2-13B's decode reads 26.59 GB of weights and KV, of which the 10.74 GB the PIM dies hold
runs on PIM."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

from hw_models.machine import load_machine
from hw_models.pim.mapper import PimMapper
from hw_models.pim.reach import BEYOND_REACH, allocate, data_bytes
from hw_models.registry import simulate
from sim.core.graph import GEMM, Op, TensorUse
from sim.core.workload import workload_from_dict

GiB = 2 ** 30


def _decision(name: str, nbytes: int, saved_s: float, columns: int = 0, where: str = "pim"):
    w = TensorUse(name + ".w", "weight", (max(columns, 1), 1), "fp16", nbytes)
    op = Op(name, GEMM if columns else "attn_score", 1.0, (w,), (), (("m", 1), ("n", columns), ("k", 1)))
    return SimpleNamespace(op=op, where=where, host=SimpleNamespace(duration_s=2 * saved_s), pim_s=saved_s), name


def test_allocation_fills_the_dies_by_time_saved_per_byte():
    # a: 1.0 s/B, c: 0.8 s/B (a GEMM of 10 columns), b: 0.5 s/B; 15 B of reach: a whole, half of c's columns, b out.
    d = [_decision("a", 10, 10.0), _decision("b", 10, 5.0), _decision("c", 10, 8.0, columns=10),
         _decision("host_op", 99, 50.0, where="host")]
    alloc = allocate([d], 15, num_layers=1)
    assert alloc.placed_bytes == 30 and not alloc.fits
    assert alloc.host == {"b"} and alloc.split == ("c", 5, 10)
    assert alloc.moved_bytes == 15
    assert allocate([d], 30, num_layers=1).fits


def test_an_op_that_cannot_split_goes_to_the_host_and_the_next_may_still_fit():
    """A code review: the first op that did not fit whole ended the filling even when it could not split (batch-1
    attention, one sequence), so the rest of the reach stayed empty (Llama-2-13B at 8,192 tokens: 8.72 of 10.74 GB
    held, 4.3% slower). a 1.0 s/B whole; b 0.8 s/B, 10 B, cannot split; c 0.5 s/B, 4 B: 15 B hold a and c."""
    d = [_decision("a", 10, 10.0), _decision("b", 10, 8.0), _decision("c", 4, 2.0)]
    alloc = allocate([d], 15, num_layers=1)
    assert alloc.host == {"b"} and alloc.split is None and alloc.moved_bytes == 10


def test_sub_batch_chains_share_the_weights_and_sum_their_kv():
    """A code review: with sub-batches the reach was reckoned for the whole batch's placement, and each chain could
    put other GEMMs on PIM. Now the chains are allocated together: a weight op's bytes once, a KV op's per chain."""
    w_op = _decision("w", 10, 10.0, columns=10)                  # reads weights
    kv0, kv1 = _decision("kv", 6, 3.0), _decision("kv", 6, 3.0)  # one chain's KV each (role 'weight' in the helper)
    for d, _ in (kv0, kv1):
        d.op = Op("kv", "attn_score", 1.0, (TensorUse("k", "kv", (1,), "fp16", 6),), (), (("batch", 2),))
    alloc = allocate([[w_op, kv0], [w_op, kv1]], 100, num_layers=1)
    assert alloc.placed_bytes == 10 + 12


def test_a_layer_op_counts_its_bytes_in_every_layer():
    d = [_decision("x", 10, 1.0)]
    d[0][0].op = Op("L0.x", "attn_score", 1.0, d[0][0].op.reads, (), (("n", 0),), layer=0)
    assert allocate([d], 10, num_layers=40).placed_bytes == 400


def test_a_split_s_share_is_whole_units_whatever_the_rounding():
    """A code review: the split was a float share, and int(1/49 * 49) is 0: the op stayed whole on PIM while the
    allocation counted it moved (Llama-2-7B, 49 sequences at 810 tokens: 20.8 GB on PIM against 10.74). The split is
    whole units now, and the dies never hold more than they reach."""
    w = workload_from_dict(dict(model="llama2-7b", batch=49, prompt_len=809, gen_len=2), "t")
    m = PimMapper(load_machine("hbm_pim"), w, w.model_config_())
    s = m.schedule(m.step_graph("decode", 1, 810, num_layers=1))
    on_pim = sum(data_bytes(op) for op in s.graph.ops() if m.decide(op, s).where == "pim") * 32
    assert s.reach.split is not None and on_pim <= s.reach.reach_bytes


def _run(overrides=None):
    w = workload_from_dict(dict(model="llama2-13b", batch=1, prompt_len=1024, gen_len=128), "t")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate(w, load_machine("hbm_pim", overrides)), PimMapper(load_machine("hbm_pim", overrides), w,
                                                                           w.model_config_())


@pytest.fixture(scope="module")
def reach_run():
    return _run()


def test_llama13b_pim_dies_hold_what_they_reach(reach_run):
    res, m = reach_run
    alloc = m.schedule(m.step_graph("decode", 1, 1088, num_layers=1)).reach
    # Weights but the embedding: 40 x (4 x 5120^2 + 3 x 5120 x 13824) + 32000 x 5120 params at 2 B; KV at 1088
    # tokens: 2 x 40 x 1088 x 5120 x 2 B.
    placed = 2 * (40 * (4 * 5120 ** 2 + 3 * 5120 * 13824) + 32000 * 5120) + 2 * 40 * 1088 * 5120 * 2
    assert alloc.placed_bytes == placed                      # 26.59 GB
    assert alloc.reach_bytes == 5 * 2 * GiB                  # 10.74 GB
    held = alloc.placed_bytes - alloc.moved_bytes
    # the split GEMM's columns are whole: at most one column (5120 x 2 B) a layer of the reach is left unused
    assert alloc.reach_bytes - 40 * 5120 * 2 <= held <= alloc.reach_bytes
    placement = res.extra["pim"]["placement"]
    assert [k for k, v in placement.items() if v["why"] == BEYOND_REACH] == sorted(alloc.host, key=list(placement).index)
    assert any("pim_capacity_bytes_per_stack" in n and "runs on the host" in n for n in res.notes)


def test_more_reach_is_never_slower_and_enough_is_the_all_pim_part(reach_run):
    tpot = [_run({"pim.pim_capacity_bytes_per_stack": c})[0].tpot_s for c in ("1 GiB", "3 GiB")]
    tpot.insert(1, reach_run[0].tpot_s)   # 2 GiB, as shipped
    all_dies = _run({"pim.pim_capacity_bytes_per_stack": None})[0].tpot_s
    enough = _run({"pim.pim_capacity_bytes_per_stack": "6 GiB"})[0].tpot_s   # 30 GiB >= 26.59 GB
    assert tpot[0] > tpot[1] > tpot[2] > all_dies
    assert enough == all_dies
    assert tpot[0] < reach_run[0].extra["metrics"]["pim.tpot_no_pim_s"]   # PIM still gains on what it holds


def test_the_split_gemm_s_parts_share_its_work_and_both_read_its_input(reach_run):
    _, m = reach_run
    s = m.schedule(m.step_graph("decode", 1, 1088, num_layers=1))
    key, n_pim, n_units = s.reach.split
    whole = next(op for op in m.step_graph("decode", 1, 1088, num_layers=1).ops() if op.base_name == key)
    parts = [op for op in s.graph.ops() if op.base_name.startswith(key + "~")]
    assert {s.forced[p.name] for p in parts} == {"pim", "host"}
    assert sum(p.flops for p in parts) == pytest.approx(whole.flops)
    weights = [sum(t.bytes for t in p.reads if t.role == "weight") for p in parts]
    assert sum(weights) == pytest.approx(sum(t.bytes for t in whole.reads if t.role == "weight"), abs=2)
    pim = next(p for p in parts if s.forced[p.name] == "pim")
    assert pim.dims["n"] == n_pim and n_units == whole.dims["n"]
    for p in parts:   # the activation vector goes to both
        assert [t.bytes for t in p.reads if t.role == "activation"] == \
            [t.bytes for t in whole.reads if t.role == "activation"]


def test_attention_splits_by_sequences_when_the_kv_outgrows_what_the_weights_leave():
    """Llama-2-7B at 12 sequences: the GEMMs run on the host (12 rows re-stream the matrix), so the KV cache has the
    PIM dies to themselves. One sequence's K (or V) over the model is 2,048 tokens x 32 layers x 4,096 x 2 B = 2^29 B,
    and the dies hold 5 x 2 GiB = 20 x 2^29 B: av (placed first, it gains more per byte) takes its 12 sequences
    whole, and qk the 8 that are left; qk's other 4 sequences run on the host."""
    w = workload_from_dict(dict(model="llama2-7b", batch=12, prompt_len=2047, gen_len=2), "t")
    m = PimMapper(load_machine("hbm_pim"), w, w.model_config_())
    s = m.schedule(m.step_graph("decode", 1, 2048, num_layers=1))
    per_seq = 2048 * 32 * 4096 * 2   # one sequence's K over the model
    assert s.reach.placed_bytes == 2 * 12 * per_seq
    assert s.reach.split == ("qk", 8, 12) and s.reach.host == set()
    qk = {s.forced[op.name]: op.dims["batch"] for op in s.graph.ops() if op.base_name.startswith("qk~")}
    assert qk == {"pim": 8, "host": 4}
    assert s.reach.moved_bytes == 4 * per_seq


def test_gemm_sharing_s_pim_columns_count_against_the_reach():
    """GEMM sharing picks its columns as if every die carried PIM units; the reach then sends the columns beyond it
    back to the host. Llama-2-13B at batch 1 (attention on PIM, dual row buffers): 2.88x with every die, 1.23x on the
    shipped part, and the PIM dies never hold more than they reach."""
    def step(share: bool):
        w = workload_from_dict(dict(model="llama2-13b", batch=1, prompt_len=1024, pim_policy="attention_only"), "t")
        m = PimMapper(load_machine("hbm_pim", {"pim.dual_row_buffer": True, "pim.gemm_sharing": share}), w,
                      w.model_config_())
        s = m.schedule(m.step_graph("decode", 1, 1025, num_layers=1))
        return m.step("decode", 1, 1025).time_s, s.reach
    (plain, _), (shared, alloc) = step(False), step(True)
    assert alloc.placed_bytes > alloc.reach_bytes >= alloc.placed_bytes - alloc.moved_bytes
    assert plain / shared == pytest.approx(1.23, abs=0.02)


def test_pim_dies_beyond_the_stacks_capacity_are_refused():
    """An architect's trial: `pim.pim_capacity_bytes_per_stack: 20 GiB` on hbm_pim's 6.44 GB stacks ran exactly as
    `null` (every die PIM) without a word. PIM dies past what the stacks hold name the key, the tier's capacity and
    the largest figure a stack takes; at most the stack's capacity is taken as given."""
    from sim.core.errors import ConfigError

    w = workload_from_dict(dict(model="tinyllama-1.1b", batch=1, prompt_len=64, gen_len=2), "t")
    hbm = load_machine("hbm_pim")
    stack = hbm.memory["hbm"].capacity_bytes / 5
    with pytest.raises(ConfigError, match=r"pim\.pim_capacity_bytes_per_stack: 21\.47 GB x 5 stacks is more than "
                                          r"memory\.hbm's 32\.21 GB; at most 6\.44 GB a stack"):
        PimMapper(load_machine("hbm_pim", {"pim.pim_capacity_bytes_per_stack": 20 * 2**30}), w, w.model_config_())
    PimMapper(load_machine("hbm_pim", {"pim.pim_capacity_bytes_per_stack": stack}), w, w.model_config_())

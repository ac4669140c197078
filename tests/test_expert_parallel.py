"""Expert parallelism and TP of MoE layers (hw_models/gpu/expert_parallel.py), checked by hand
on Mixtral-8x7B (h = 4096, 8 experts of width 14336, top-2, 32 layers) on hgx_h200 unfitted
(datasheet NVSwitch: alpha 5 us per message step, 450 GB/s per GPU and direction)."""

import pytest

from hw_models.gpu.expert_parallel import EXPERT_OPS, moe_rank
from hw_models.machine import load_machine
from hw_models.registry import mapper_for
from sim.core import engine
from sim.core.errors import ConfigError
from sim.core.workload import Workload
from tests.conftest import ROOT as _ROOT

DATASHEET = _ROOT / "tests/data/topologies/nvswitch4_datasheet.yaml"   # hgx_h200 unfitted

H, F, E = 4096, 14336, 8
ALPHA, BW = 5e-6, 450e9


def _mapper(parallel, batch=64, model="mixtral-8x7b", load=None):
    w = Workload(model=model, batch=batch, prompt_len=512, gen_len=16, flash_attention=True, parallel=parallel,
                 **({"moe": load} if load else {}))
    return mapper_for(load_machine("h200"), w, w.model_config_())


def _decode(mp, layers=2):
    return mp.step_graph("decode", 1, 600, layers)


def test_ep8_decode_all_to_all_by_hand():
    """Batch 64 over EP8 (tp 1): each rank attends 8 sequences and routes 8 tokens -> 16
    assignments sent; each rank holds 1 expert, which gets 64 x 2 / 8 = 16 assignments from
    the group. S = 16 x 4096 x 2 B = 131,072 B per dispatch and per combine, 2 per layer;
    each takes 7 alpha + 7/8 S / B = 35.255 us."""
    mp = _mapper({"ep": 8, "topology": str(DATASHEET)})
    graph = _decode(mp)
    assert graph.batch == 8
    rank, colls = moe_rank(graph, mp.model, 1, 8)
    assert [(c.name, c.kind, c.ranks) for c in colls] == [
        ("L0.dispatch", "all_to_all", 8), ("L0.combine", "all_to_all", 8),
        ("L1.dispatch", "all_to_all", 8), ("L1.combine", "all_to_all", 8)]
    assert all(c.bytes == 16 * H * 2 for c in colls)
    a2a_s = 7 * ALPHA + 7 / 8 * 16 * H * 2 / BW
    tasks = mp.plan_step(graph)
    links = [t for t in tasks if t.resource == "link"]
    assert [t.duration_s for t in links] == pytest.approx([a2a_s] * 4)
    # The experts wait for the dispatch, the combine for the experts; nothing overlaps.
    tl = engine.run(tasks, {}, {}, True)
    assert tl.makespan_s == pytest.approx(sum(mp.cost(op).duration_s for op in rank.ops()) + 4 * a2a_s)


def test_ep8_rank_runs_its_one_expert_over_the_group_tokens():
    """The rank's gate GEMM: one expert (touched with probability 1 - 0.75^64 ~ 1), 16 rows:
    weights 14336 x 4096 x 2 B, FLOPs 2 x 16 x 4096 x 14336. Its router sees its 8 tokens."""
    mp = _mapper({"ep": 8, "topology": str(DATASHEET)})
    rank, _ = moe_rank(_decode(mp), mp.model, 1, 8)
    gate = rank.op("L0.expert_gate")
    touched = 1 - 0.75 ** 64
    assert gate.flops == pytest.approx(2 * 16 * H * F)
    assert gate.bytes_by_role()["weight"] == pytest.approx(touched * F * H * 2, rel=1e-4)
    assert rank.op("L0.router").flops == 2 * 8 * H * E
    assert {op.base_name for op in rank.ops()} >= set(EXPERT_OPS)   # lowering's names still match


def test_zipf_routing_busiest_rank_receives_more():
    """Zipf skew 1 over 8 experts: p_0 = 1 / H_8 = 0.3679, so expert 0 gets q_0 = min(1, 2 p_0)
    = 0.7358 of the 64 tokens = 47.09 assignments; rank 0 receives them, more than the 16 it sends."""
    mp = _mapper({"ep": 8, "topology": str(DATASHEET)}, load={"distribution": "zipf", "skew": 1.0})
    _, colls = moe_rank(_decode(mp), mp.model, 1, 8)
    p0 = 1 / sum(1 / i for i in range(1, 9))
    assert colls[0].bytes == pytest.approx(64 * 2 * p0 * H * 2)


def test_tp_equals_ep_all_reduces_the_combined_output():
    """tp = ep = 8: the hidden states are on every rank, so no all-to-all; one expert per rank
    over the whole batch (16 assignments), the combined output (64 x 4096 x 2 B) all-reduced."""
    mp = _mapper({"tp": 8, "ep": 8, "topology": str(DATASHEET)})
    graph = _decode(mp, layers=1)
    assert graph.batch == 64
    rank, colls = moe_rank(graph, mp.model, 8, 8)
    assert "all_to_all" not in {c.kind for c in colls}
    combine = next(c for c in colls if c.after == "L0.moe_combine")
    assert (combine.kind, combine.bytes) == ("all_reduce", 64 * H * 2)
    assert rank.op("L0.expert_gate").flops == pytest.approx(2 * 16 * H * F)
    assert rank.op("L0.router").flops == 2 * 64 * H * E          # router kept whole


def test_tp_on_moe_splits_each_expert():
    """ep = 1, tp = 4: the router is whole on every rank, each expert's width is cut 4 ways, and each rank
    combines its partial expert outputs before one all-reduce of the combined T x h (a capacity planner's trial:
    the down projection's T x k x h partial sums were all-reduced, k = 2 times the bytes here, 8 for Qwen3-30B-A3B)."""
    mp = _mapper({"tp": 4, "topology": str(DATASHEET)})
    graph = _decode(mp, layers=1)
    rank, colls = moe_rank(graph, mp.model, 4, 1)
    whole = graph.op("L0.expert_gate")
    assert rank.op("L0.expert_gate").flops == pytest.approx(whole.flops / 4)
    assert rank.op("L0.router").flops == whole.dims["k"] * 2 * 64 * E
    assert [c.kind for c in colls if c.after == "L0.expert_down"] == []
    combine = next(c for c in colls if c.after == "L0.moe_combine")
    assert (combine.kind, combine.bytes) == ("all_reduce", 64 * H * 2)   # batch 64 tokens x hidden, fp16


def test_ep8_footprint_per_device():
    """Per device: the dense weights whole (tp 1) plus 1/8 of the experts, KV of 8 sequences."""
    mp = _mapper({"ep": 8, "topology": str(DATASHEET)})
    fp = mp.footprint()
    experts = 3 * E * F * H * 2 * 32
    dense = 2 * mp.model.params() - experts
    assert fp.tiers["hbm"]["weights"] == pytest.approx(dense + experts / 8, rel=1e-3)
    assert fp.tiers["hbm"]["kv_cache"] == pytest.approx(2 * 32 * 8 * 528 * 1024 * 2)


@pytest.mark.parametrize("parallel,batch,match", [
    ({"tp": 4, "ep": 2, "topology": str(DATASHEET)}, 8, "parallel.ep: 2 is not a multiple of tp 4"),
    ({"tp": 2, "ep": 16, "topology": str(DATASHEET)}, 8, "parallel.ep: 16 ranks but mixtral-8x7b has 8 experts"),
    ({"ep": 8, "topology": str(DATASHEET)}, 4, "parallel.ep: batch 4 does not split over 8 attention groups"),
    ({"ep": 8}, 8, "parallel.topology: needed"),
])
def test_bad_ep_plans(parallel, batch, match):
    with pytest.raises(ConfigError, match=match):
        _mapper(parallel, batch=batch).footprint()

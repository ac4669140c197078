"""Tensor and pipeline parallelism on the gpu kind."""

from pathlib import Path

import pytest

from hw_models.gpu.parallel import ParallelGpuMapper
from hw_models.gpu.tensor_parallel import shard
from hw_models.machine import load_machine
from hw_models.network.collectives import collective_s
from hw_models.network.topology import load_topology
from hw_models.registry import mapper_for
from sim.apps.trace.shapes import vidur_layer
from sim.core import engine
from sim.core.errors import ConfigError
from sim.core.lowering import lower
from sim.core.model import load_model
from sim.core.workload import Workload


@pytest.mark.parametrize("name,tp", [("llama2-7b", 4), ("llama2-70b", 8), ("llama3-8b", 2)])
def test_shard_matches_vidur_shapes(name, tp):
    """The transform of the TP1 layer gives the shapes vidur's profiler runs at TP t
    (sim.apps.trace.shapes.vidur_layer, written independently from vidur's code)."""
    m = load_model(name)
    rank, colls = shard(vidur_layer(m, 64, 1), m, tp, frozenset({"ctx", "qkv.qk"}))
    want = vidur_layer(m, 64, tp)
    for op in want.ops():
        assert rank.op(op.name).flops == pytest.approx(op.flops), op.name
        assert rank.op(op.name).bytes == pytest.approx(op.bytes, rel=2e-3), op.name
    # (vidur's partial layer leaves the QKV output unread, so the plan also gathers it, like logits.)
    assert [c.after for c in colls if c.kind == "all_reduce"] == ["emb", "attn_post_proj", "mlp_down_proj"]


def test_kv_heads_replicated_past_tp():
    m = load_model("llama2-70b")   # 8 KV heads
    rank, _ = shard(lower(m, "decode", 1, 1, 100, num_layers=1), m, 16)
    assert rank.op("L0.k_proj").dims["n"] == 128          # one whole KV head per rank, not half
    assert rank.op("L0.q_proj").dims["n"] == 8192 // 16


def _mapper(parallel, model="llama2-70b", hw="a100_80g", batch=8):
    w = Workload(model=model, batch=batch, prompt_len=512, gen_len=16, flash_attention=True, parallel=parallel)
    return mapper_for(load_machine(hw), w, w.model_config_())


def test_tp_step_is_rank_ops_plus_collectives():
    """A decode step of one TP rank is serial: its kernels plus 2 all-reduces per layer,
    one for the embedding, and the logits' all-gather (fitted dgx_a100 ring)."""
    mp = _mapper({"tp": 8, "topology": "dgx_a100"})
    graph = lower(mp.model, "decode", 8, 1, 600, mp.formats, True, num_layers=2)
    tl = engine.run(mp.plan_step(graph), {}, {}, True)
    rank, _ = shard(graph, mp.model, 8)
    topo, act = load_topology("dgx_a100"), 8 * 8192 * 2
    links = 5 * collective_s(topo, "all_reduce", act, 8) + collective_s(topo, "all_gather", 8 * 32000 * 2, 8)
    assert tl.makespan_s == pytest.approx(sum(mp.cost(op).duration_s for op in rank.ops()) + links)


def test_pipeline_bubble_emerges():
    """pp stages of equal time s and m micro-batches take (m + pp - 1) s plus sends:
    the bubble (pp - 1) s comes out of the schedule."""
    mp = _mapper({"tp": 2, "pp": 4, "micro_batches": 4, "topology": "dgx_a100"})
    graph = lower(mp.model, "decode", 8, 1, 600, mp.formats, True, num_layers=2)
    tasks = mp.pipeline_tasks(graph)
    tl = engine.run(tasks, {}, {}, True)
    stage = {t.id: t.duration_s for t in tasks}
    send = stage["mb0.send0"]
    # Stages 1 and 2 hold only layers; the critical path runs mb0 through stages 0..2 and every
    # micro-batch through the last stage.
    expected = stage["mb0.stage0"] + stage["mb0.stage1"] + stage["mb0.stage2"] + 3 * send + 4 * stage["mb0.stage3"]
    assert tl.makespan_s == pytest.approx(expected)
    busy = tl.busy_s()
    assert busy["gpu.s1"] / tl.makespan_s < 0.8   # idle in the bubble


@pytest.mark.parametrize("parallel,match", [
    ({"tp": 3, "topology": "dgx_a100"}, "parallel.tp: 3 does not divide llama2-70b's 64 heads"),
    ({"pp": 81, "topology": "dgx_a100"}, "parallel.pp: 81 stages but llama2-70b has 80 layers"),
    ({"tp": 8}, "parallel.topology: needed"),
    ({"tp": 8, "topology": "dgx_h100"}, "dgx_h100 holds h100_sxm devices, not a100_80g"),
    ({"tp": 8, "topology": "dgx_q"}, "parallel.topology: unknown topology 'dgx_q'"),
    ({"tp": 2, "pp": 2, "micro_batches": 3, "topology": "dgx_a100"}, "micro_batches: 3 does not divide batch 8"),
    # micro-batches without stages run in turn, each reading every weight (a parallelism trial: 4x the decode step,
    # and a tp x pp sweep on workloads/llama70b_tp4_pp2.yaml ranked TP 8 last)
    ({"tp": 2, "micro_batches": 4, "topology": "dgx_a100"}, r"micro_batches: 4 with pp 1: .* set micro_batches: 1"),
    ({"tq": 2}, "parallel: tq: unknown key"),
    ({"tp": 8, "pp": 2, "topology": "dgx_a100"}, r"16 ranks but dgx_a100 has 8 devices .*; more nodes: parallel.nodes: 2"),
    ({"tp": 8, "pp": 2, "topology": "dgx_a100", "nodes": 0}, "parallel: nodes: Input should be greater than 0"),
    # stated nodes hold the replicas too: 2 replicas of TP 8 need two DGX nodes (a planner's trial: one was accepted)
    ({"tp": 8, "dp": 2, "topology": "dgx_a100", "nodes": 1},
     r"parallel.nodes: 1 node\(s\) of 8 hold 8 devices, but dp 2 x 8 devices per replica need 16; parallel.nodes: 2"),
])
def test_bad_plans(parallel, match):
    with pytest.raises(ConfigError, match=match):
        _mapper(parallel)


def test_nodes_extend_a_topology_over_its_fabric():
    """A new user's trial: two DGX nodes needed a copied topology file (`nodes:` was in no doc). parallel.nodes
    takes the preset's node that many times, joined by its fabric: a TP8 x PP2 plan then places its 16 ranks, a
    stage per node, and a ring over both nodes pays the fabric's latency (dgx_a100: 8 x NDR 50 GB/s, 10 us)."""
    mp = _mapper({"tp": 8, "pp": 2, "topology": "dgx_a100", "nodes": 2})
    assert (mp.topo.nodes, mp.topo.devices) == (2, 16)
    assert mp.topo.step_latency(16) == max(mp.topo.interconnect.latency_s, mp.topo.fabric.latency_s)


def test_ep_more_than_experts():
    with pytest.raises(ConfigError, match="parallel.ep: 16 ranks but mixtral-8x7b has 8 experts"):
        _mapper({"ep": 16}, model="mixtral-8x7b", hw="h200")


def test_no_plan_is_the_single_device_mapper():
    assert not isinstance(_mapper(None, model="llama2-7b"), ParallelGpuMapper)


def test_tp_rank_waits_for_host_launches(tmp_path):
    """Under a stack without CUDA graphs every kernel and every NCCL collective of a TP rank
    is launched by its host first (as on one device): with a 1 ms launch, far longer than
    any kernel or collective here, the step takes one launch per op and collective plus
    the last task. Before, a TP run dropped the host and ran at device speed."""
    import yaml
    spec = yaml.safe_load((Path(__file__).parents[1] / "hw_models/stack/presets/torch-eager.yaml").read_text())
    spec["host_launch_s"] = "1 ms"
    path = tmp_path / "slow-host.yaml"
    path.write_text(yaml.safe_dump(spec))
    w = Workload(model="llama2-70b", batch=8, prompt_len=512, gen_len=16, flash_attention=True,
                 stack=str(path), parallel={"tp": 8, "topology": "dgx_a100"})
    mp = mapper_for(load_machine("a100_80g"), w, w.model_config_())
    graph = lower(mp.model, "decode", 8, 1, 600, mp.formats, True, num_layers=2)
    tasks = mp.plan_step(graph)
    rank, colls = shard(graph, mp.model, 8)
    host = [t for t in tasks if t.resource == "host"]
    kernels = sum(mp.stack.host_s(op) for op in rank.ops()) / 1e-3
    assert len(host) == len(list(rank.ops())) + len(colls)
    assert sum(t.duration_s for t in host) == pytest.approx((kernels + len(colls)) * 1e-3)
    tl = engine.run(tasks, {}, {}, True)
    assert (kernels + len(colls)) * 1e-3 < tl.makespan_s < (kernels + len(colls) + 0.1) * 1e-3


@pytest.mark.parametrize("model, parallel, hw", [
    ("llama2-70b", {"tp": 4}, "a100_80g"),                    # dense: 2 all-reduces a layer, embedding, logits
    ("gemma-2-9b", {"tp": 2}, "a100_80g"),                    # layers in local/global pairs (period 2)
    ("deepseek-v2-lite", {"tp": 2, "ep": 4}, "h100_sxm"),     # a dense first layer, then dispatch/combine/gather
    ("qwen3-235b-a22b", {"tp": 4, "ep": 4}, "h100_sxm"),
])
def test_collectives_per_iteration_folds_to_the_whole_graphs_count(model, parallel, hw):
    """The count folded from a few layers (as a step's time is) is the count of the whole model's rank graph."""
    from sim.core.mixed import lower_iteration
    mp = _mapper({**parallel, "topology": "dgx_h100" if hw == "h100_sxm" else "dgx_a100"}, model, hw)
    whole = len(mp.rank_graph(lower_iteration(mp.model, ((1, 1),), mp.formats, True, None))[1])
    assert mp.collectives_per_iteration() == whole
    if model == "llama2-70b":
        assert whole == 2 * 80 + 2


def test_a_moes_routed_and_shared_experts_are_reduced_once_under_tp():
    """A parallelism trial: DeepSeek-V2-Lite under TP paid three all-reduces a MoE layer (o_proj, the routed experts'
    combine, the shared experts' down_proj), where vLLM reduces the shared experts' output with the routed ones'
    once, after the sum (FusedMoE.must_reduce_shared_expert_outputs). Two a layer now, the second after the sum; a
    dense layer keeps its two (o_proj, down_proj), and the attention residual, whose other input is the residual
    stream, is never merged with o_proj's."""
    m = load_model("deepseek-v2-lite")
    _, colls = shard(lower(m, "decode", 1, 1, 100, num_layers=2), m, 8)
    reduces = [c.after for c in colls if c.kind == "all_reduce"]
    moe_layer = [a for a in reduces if a.startswith("L1.")]   # layer 0 is dense (first_dense_layers)
    assert moe_layer == ["L1.o_proj", "L1.mlp_residual"]
    assert [a for a in reduces if a.startswith("L0.")] == ["L0.o_proj", "L0.down_proj"]


def test_a_plan_past_a_user_topology_names_the_workload(tmp_path, capsys):
    """A parallelism trial: `sim serve FILE --set parallel.topology=four.yaml --set parallel.tp=8` read
    `four.yaml: parallel.max(tp, ep) x pp: 8 ranks ...`, the workload's key put in the topology's file and the serving
    file unnamed. The file that asks for the ranks is named."""
    from sim.apps.cli import main
    from tests.conftest import ROOT

    four = tmp_path / "four.yaml"
    four.write_text("name: four_h100\ndevice: h100_sxm\ndevices_per_node: 4\n"
                    "interconnect: {kind: nvswitch, bandwidth_bytes_per_s: 4.5e11}\n")
    wl = ROOT / "workloads/llama70b_decode.yaml"
    assert main(["run", str(wl), "--hw", "h100_sxm", "--set", f"parallel.topology={four}", "--set", "parallel.tp=8"]) == 2
    assert capsys.readouterr().err.strip() == (f"error: {wl}: parallel.max(tp, ep) x pp: 8 ranks but four_h100 has 4 "
                                               "devices (1 node(s) x 4)")


def test_the_plan_row_names_the_custom_kernel_as_an_all_reduce():
    """An EP run's all-to-all was labelled `vllm_custom`, the engine's all-reduce kernel; its other collectives are
    NCCL's fitted lines (a many-device trial)."""
    from hw_models.gpu.report import _plan_rows
    plan = dict(tp=2, pp=1, ep=2, dp=1, micro_batches=1, topology="dgx_h100", devices_per_replica=2, devices=2,
                stage_layers=[48])
    rows = dict(_plan_rows({**plan, "algorithm": "vllm_custom"}))
    assert rows["devices"].endswith("on dgx_h100 (collectives: vllm_custom all-reduce, nccl otherwise)")
    assert dict(_plan_rows({**plan, "algorithm": "ring"}))["devices"].endswith("(collectives: ring)")

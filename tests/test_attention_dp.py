"""Expert parallelism with data-parallel attention groups of tp > 1 ranks (ep = g x tp), in
`sim run` and `sim serve` (hw_models/gpu/expert_parallel.py, sim/apps/serve/attention_dp.py),
checked by hand on Mixtral-8x7B (h = 4096, 8 experts of width 14336, top-2, 32 layers, 8 KV
heads of 128) on an H200 node of datasheet collectives (tests/data/topologies: hgx_h200 unfitted; NVSwitch: alpha 5 us per message step, 450 GB/s per
GPU and direction) at tp 2, ep 4: 2 attention groups of 2 ranks, 2 experts per rank."""

import pytest

from hw_models.gpu.expert_parallel import moe_rank
from hw_models.machine import load_machine
from hw_models.registry import mapper_for, simulate
from sim.apps.serve.attention_dp import split
from sim.apps.serve.schedulers import Request
from sim.apps.serve.instance import prepare
from sim.apps.serve.spec import ServeFile
from sim.core import engine
from sim.core.errors import ConfigError
from sim.core.schema import validate_mapping
from sim.core.workload import Workload
from tests.conftest import ROOT as _ROOT

DATASHEET = _ROOT / "tests/data/topologies/nvswitch4_datasheet.yaml"   # hgx_h200 unfitted

H, F = 4096, 14336
ALPHA, BW = 5e-6, 450e9
PLAN = {"tp": 2, "ep": 4, "topology": str(DATASHEET)}


def _mapper(batch=8, parallel=PLAN):
    w = Workload(model="mixtral-8x7b", batch=batch, prompt_len=512, gen_len=16, flash_attention=True,
                 parallel=parallel)
    return mapper_for(load_machine("h200"), w, w.model_config_())


def test_tp2_ep4_decode_by_hand():
    """Batch 8 over 2 groups: a group attends 4 sequences, TP2 (o_proj all-reduce of 4 x 4096 x 2 B
    = 32,768 B: 2 alpha + S / B = 10.073 us). Each rank routes its chunk of 2 tokens (4 assignments
    sent); its 2 experts receive 8 x 2 x 2/8 = 4 assignments of the group's 8 tokens, so
    S = 4 x 8192 B = 32,768 B per dispatch and combine over 4 ranks: 3 alpha + 3/4 S / B = 15.055 us.
    The all-gather of the group's 4 tokens over its 2 ranks: alpha + S / (2B) = 5.036 us.
    Expert weights read: 2 experts x P(touched) = 1 - (6/8)^8 = 0.89989, x 14336 x 4096 x 2 B per
    GEMM = 211.37 MB; FLOPs 2 x 4 x 4096 x 14336."""
    mp = _mapper()
    graph = mp.step_graph("decode", 1, 600, 2)
    assert graph.batch == 4
    rank, colls = moe_rank(graph, mp.model, 2, 4)
    by = {c.name: c for c in colls}
    assert (by["L0.dispatch"].kind, by["L0.dispatch"].bytes, by["L0.dispatch"].ranks) == ("all_to_all", 32768, 4)
    assert (by["L0.gather"].kind, by["L0.gather"].bytes, by["L0.gather"].ranks) == ("all_gather", 32768, 2)
    gate = rank.op("L0.expert_gate")
    assert gate.bytes_by_role()["weight"] == pytest.approx(2 * (1 - 0.75 ** 8) * F * H * 2, rel=1e-6)
    assert gate.flops == pytest.approx(2 * 4 * H * F)
    assert rank.op("L0.router").flops == 2 * 2 * H * 8          # the rank's chunk of 2 tokens
    tasks = mp.plan_step(graph)
    link = {t.id: t.duration_s for t in tasks if t.resource == "link"}
    assert link["L0.dispatch"] == pytest.approx(3 * ALPHA + 0.75 * 32768 / BW)
    assert link["L0.combine"] == pytest.approx(3 * ALPHA + 0.75 * 32768 / BW)
    assert link["L0.gather"] == pytest.approx(ALPHA + 0.5 * 32768 / BW)
    assert link["L0.o_proj.all_reduce"] == pytest.approx(2 * ALPHA + 32768 / BW)
    # The straggler is the only group: every op and collective one after another.
    tl = engine.run(tasks, {}, {}, True)
    kernels = sum(mp.stream_cost(op, mp.fused(rank)).duration_s for op in rank.ops())
    assert tl.makespan_s == pytest.approx(kernels + sum(link.values()))


def test_tp2_ep4_footprint_by_hand():
    """Per device: dense weights / 2 + experts / 4; KV of its group's 4 sequences, half the KV heads."""
    fp = _mapper().footprint()
    experts = 3 * 8 * F * H * 2 * 32
    dense = 2 * _mapper().model.params() - experts
    assert fp.tiers["hbm"]["weights"] == pytest.approx(dense / 2 + experts / 4, rel=1e-3)
    assert fp.tiers["hbm"]["kv_cache"] == pytest.approx(2 * 32 * 4 * 528 * 1024 * 2 / 2)


def test_tp2_ep4_generation_runs():
    """A plan refused before (1 < tp < ep) runs a whole generation on 4 devices; its time per
    output token lies between its first and last decode steps (kv_len 257 and 263)."""
    w = Workload(model="mixtral-8x7b", batch=8, prompt_len=256, gen_len=8, flash_attention=True, parallel=PLAN)
    r = simulate(w, load_machine("h200"))
    assert r.extra["parallel"]["plan"]["devices_per_replica"] == 4
    mp = _mapper(8)
    lo, hi = mp.step("decode", 1, 257).time_s, mp.step("decode", 1, 263).time_s
    assert lo * (1 - 1e-9) <= r.tpot_s <= hi * (1 + 1e-9)


def _serve_file(parallel, sched=None):
    serving = dict(arrivals=dict(process="poisson", rate=4, num_requests=16, seed=1),
                   lengths=dict(prompt=dict(dist="uniform", low=32, high=256),
                                output=dict(dist="uniform", low=4, high=32)),
                   scheduler=sched or dict(kind="sarathi", max_num_batched_tokens=512, max_num_seqs=16))
    raw = dict(name="t", model="mixtral-8x7b", flash_attention=True, serving=serving, parallel=parallel)
    return validate_mapping(ServeFile, raw, "t.yaml", "a serving file")


def _req(i, computed):
    r = Request(i, 0.0, 64, 8)
    r.computed = computed
    return r


def test_split_round_robin_by_request():
    """Request i runs on group i mod g, whatever the order of the batch."""
    its = split([(_req(3, 100), 1), (_req(0, 50), 1), (_req(2, 0), 64), (_req(5, 10), 1)], 2)
    assert [it.seqs for it in its] == [((1, 51), (64, 64)), ((1, 101), (1, 11))]


def test_serving_iteration_straggler_by_hand():
    """Exact costs. An even split (4 + 4 decodes at one kv_len) costs what `sim run`'s decode step of
    batch 8 costs (the decomposition D + X is exact for the serial schedule). An uneven one (6 + 2):
    the 6-sequence group sets D, and its chunk of 3 tokens (6 assignments) sets the all-to-all buffer:
    S = 6 x 8192 B, 3 alpha + 3/4 S / B per dispatch and combine, 32 layers."""
    setup = prepare(_serve_file(PLAN), load_machine("h200"), exact=True)
    cost, mp = setup.target_cost, setup.target_cost.mapper
    assert setup.groups == 2
    even = split([(_req(i, 600), 1) for i in range(8)], 2)
    run = _mapper(8)
    step = run.step("decode", 1, 601)
    assert cost(even)[0] == pytest.approx(step.time_s, rel=1e-6)
    uneven = split([(_req(i, 600), 1) for i in (0, 2, 4, 6, 8, 10, 1, 3)], 2)
    assert [it.n_decode for it in uneven] == [6, 2]
    dense6 = cost.dense(uneven[0])[0]
    a2a = 3 * ALPHA + 0.75 * 6 * H * 2 / BW
    experts_s, _, busy = mp.expert_part(6, 8)
    assert busy["link"] == pytest.approx(32 * 2 * a2a)
    assert cost(uneven)[0] == pytest.approx(dense6 + experts_s)
    assert cost(uneven)[0] > cost(even)[0]


@pytest.mark.parametrize("limit_w,n", [(300.0, 8), (300.0, 64), (400.0, 64)])
def test_an_even_split_under_a_binding_limit_costs_what_sim_run_costs(limit_w, n):
    """The same under a board limit that binds (the clock falls to 28-83% of full): the routed experts' ops keep their
    split by what the SM clock paces (hw_models.clock; a review: booked as compute-bound, they read the serving step
    1.10-1.70x `sim run`'s), so time and energy agree with `sim run`'s capped decode step."""
    m = load_machine("h200", {"units.gpu.power_limit_w": limit_w})
    setup = prepare(_serve_file(PLAN), m, exact=True)
    t, j = setup.target_cost(split([(_req(i, 600), 1) for i in range(n)], 2))[:2]
    w = Workload(model="mixtral-8x7b", batch=n, prompt_len=512, gen_len=16, flash_attention=True, parallel=PLAN)
    run = mapper_for(m, w, w.model_config_())
    step = run.step("decode", 1, 601)
    assert step.counters["power_cap_window_s"] > 0   # it binds
    # to 1e-4 (measured 1e-6 and 1.3e-5 at 300 W): the serving cost sums the straggler group's ops and the experts'
    # by bin (hw_models.clock.MEM_BINS), `sim run` its step's, whose shapes put a few ops in neighbouring bins
    assert t == pytest.approx(step.time_s, rel=1e-4)
    assert j == pytest.approx(step.energy_j + run.power_j(step.busy_s, step.time_s), rel=1e-4)


def test_serving_pool_counts_groups():
    """Each group's devices hold their own sequences' KV: the pool is 2 x what one device holds,
    a device's block 16 tokens x half the KV heads (2 x 32 x 512 x 2 B)."""
    s = prepare(_serve_file(PLAN), load_machine("h200"), exact=True)
    one = prepare(_serve_file({"tp": 2, "ep": 2, "topology": str(DATASHEET)}), load_machine("h200"), exact=True)
    assert s.block_bytes == one.block_bytes == 16 * 2 * 32 * 512 * 2
    per_device = (0.9 * 141e9 - s.weights_bytes - s.activation_bytes - 1.528e9) // s.block_bytes
    assert s.total_blocks == 2 * per_device


@pytest.mark.parametrize("parallel,sched,match", [
    ({"ep": 4, "pp": 2, "topology": str(DATASHEET)}, None, "t.yaml: parallel.pp: 2 with ep 4 > tp 1"),
    (PLAN, dict(kind="static", batch_size=4), "t.yaml: serving.scheduler.kind: static"),
    ({"tp": 4, "ep": 2, "topology": str(DATASHEET)}, None, "t.yaml: parallel.ep: 2 is not a multiple of tp 4"),
])
def test_serving_refusals_one_line(parallel, sched, match):
    with pytest.raises(ConfigError, match=match) as e:
        prepare(_serve_file(parallel, sched), load_machine("h200"), exact=True)
    assert "\n" not in str(e.value)


def test_an_even_split_costs_what_sim_run_costs_and_the_surrogate_serves():
    """Eight decodes split evenly over two attention groups cost what `sim run`'s decode step of the same 8 costs,
    time and energy: the routed experts' joules are every rank's, as the dense part's are (a review: one rank's read
    the step 2.5 J low, and the board cap saw that). The default surrogate serves the plan too (a review: its grouped
    cost asked the surrogate for the cap, which it lacked)."""
    from sim.apps.serve.run import serve

    setup = prepare(_serve_file(PLAN), load_machine("h200"), exact=True)
    even = split([(_req(i, 600), 1) for i in range(8)], 2)
    t, j = setup.target_cost(even)[:2]
    run = _mapper(8)
    step = run.step("decode", 1, 601)
    assert t == pytest.approx(step.time_s, rel=1e-9)
    assert j == pytest.approx(step.energy_j + run.power_j(step.busy_s, step.time_s), rel=1e-5)
    _, summary = serve(_serve_file(PLAN), load_machine("h200", {"units.gpu.power_limit_w": 400.0}))
    assert summary["completed"] > 0

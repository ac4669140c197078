"""Utilisation per resource of a serving run (sim.apps.serve.metrics.utilization), checked against
the op-level costs recomputed here, and the step-cost cache of setup.prepare."""

import gc

import pytest

from hw_models.op_cost import OpCost
from hw_models.machine import load_machine, machine_from_dict
from hw_models.registry import mapper_for
from sim.apps.serve.arrivals import make_requests
from sim.apps.serve.simulator import ServeSim
from sim.apps.serve.metrics import summarize, utilization
from sim.apps.serve.run import serve
from sim.apps.serve.instance import prepare
from sim.apps.serve.spec import ServeFile
from sim.apps.serve.stepcost import resource_busy_s
from sim.core.mixed import lower_iteration
from sim.core.schema import file_dict, validate_mapping

TINY = dict(name="tiny", hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256, max_position_embeddings=512)
CACHE: dict = {}


def file(serving: dict, model=TINY) -> ServeFile:
    return validate_mapping(ServeFile, dict(name="t", model=model, flash_attention=True, serving=serving),
                            "test.yaml", "a serving file")


def fixed(n, rate, prompt, output, sched=None, process="constant") -> dict:
    return dict(arrivals=dict(process=process, rate=rate, num_requests=n, seed=0),
                lengths=dict(prompt=dict(dist="fixed", value=prompt), output=dict(dist="fixed", value=output)),
                scheduler=sched or dict(kind="vllm", max_num_batched_tokens=512))


def test_memory_busy_is_summed_op_memory_time_over_the_wall_time():
    """Three requests (prompt 32, 8 tokens out) one second apart, each alone on the engine: one prefill
    iteration and 7 decodes over 33..39 keys. Every op's memory time (OpCost.memory_s: its bytes at the
    tier's capped rate) summed over those 8 iterations, x3, over the wall time (the last finish), is
    the memory busy share; compute likewise; the gpu is busy for the iterations' whole length."""
    a6000 = load_machine("a6000")
    f = file(fixed(3, 1.0, 32, 8))
    res, s = serve(f, a6000, exact=True)
    mapper = mapper_for(a6000, f, f.model_config_())
    seqs = [((32, 32),)] + [((1, 32 + j),) for j in range(1, 8)]
    mem = comp = dur = 0.0
    for it in seqs:   # two layers: no folding, every op of the full graph
        tl = mapper.run_graph(lower_iteration(mapper.model, it, mapper.formats, True, None))
        ops = [i.tag for i in tl.intervals if isinstance(i.tag, OpCost)]
        mem, comp, dur = mem + sum(c.memory_s for c in ops), comp + sum(c.compute_s for c in ops), dur + tl.makespan_s
    arrivals = res.requests["arrival_s"]
    assert res.makespan_s == pytest.approx(arrivals[-1] + dur, rel=1e-12)   # idle between requests
    u = s["utilization"]
    assert set(u) == {"gpu", "gpu.compute", "gpu.memory"}
    assert u["gpu.memory"] == pytest.approx(3 * mem / res.makespan_s, rel=1e-9)
    assert u["gpu.compute"] == pytest.approx(3 * comp / res.makespan_s, rel=1e-9)
    assert u["gpu"] == pytest.approx(3 * dur / res.makespan_s, rel=1e-9) == pytest.approx(s["engine_busy"])
    assert 0 < u["gpu.compute"] < u["gpu.memory"] < u["gpu"] < 0.1   # decode-bound, mostly idle


def test_folded_busy_equals_every_layer_simulated():
    """llama2-7b (32 layers) folds from 2 and 3 layers; the busy times fold like the time."""
    a6000 = load_machine("a6000")
    f = file(fixed(1, 1.0, 32, 2), model="llama2-7b")
    mapper = mapper_for(a6000, f, f.model_config_())
    seqs = ((1, 700),) * 5 + ((300, 300),)
    folded = mapper.iteration(seqs, busy=resource_busy_s)
    full = mapper.iteration(seqs, exhaustive=True, busy=resource_busy_s)
    assert folded.busy_s.keys() == full.busy_s.keys() and len(full.busy_s) == 3
    for k, v in full.busy_s.items():
        assert folded.busy_s[k] == pytest.approx(v, rel=1e-9), k


def test_swap_link_busy_is_the_blocks_moved_over_its_bandwidth():
    a6000 = load_machine("a6000")
    sched = dict(kind="vllm-v0", gpu_memory_utilization=0.34, preemption="swap", swap_bandwidth_bytes_per_s=25e9,
                 max_num_batched_tokens=4096)
    f = file(fixed(40, 50.0, 96, 150, sched=sched, process="poisson"), model="llama2-7b")
    setup = prepare(f, a6000, cache=CACHE)
    res = ServeSim(setup, make_requests(f)).run()
    assert res.swapped_out_blocks > 0
    moved_s = (res.swapped_out_blocks + res.swapped_in_blocks) * setup.block_bytes / 25e9
    assert summarize(res, {})["utilization"]["host_link"] == pytest.approx(moved_s / res.makespan_s, rel=1e-9)


def test_families_and_instances():
    busy = {"gpu": 6.0, "pim.stack0": 1.0, "pim.stack1": 3.0, "pim.stack0.memory": 0.5, "pim.stack1.memory": 1.5,
            "kv_transfer": 2.0}
    u = utilization(busy, 10.0, instances=2)
    assert u == pytest.approx({"gpu": 0.3, "pim.stack0-1": 0.1, "pim.stack0-1.memory": 0.05, "kv_transfer": 0.1})
    assert utilization(busy, 0.0) == {}


def test_prepare_cache_is_keyed_by_content_not_identity():
    """Equal machines share one step-cost table; another machine never gets it, even when it is built
    where a collected machine's object was (the same id)."""
    a6000 = load_machine("a6000")
    f = file(fixed(1, 1.0, 32, 2))
    cache: dict = {}
    first = prepare(f, a6000, cache=cache).target_cost
    assert prepare(f, load_machine("a6000"), cache=cache).target_cost is first
    raw = file_dict(a6000)
    tier = next(iter(raw["memory"]))
    for k in range(4):   # machines made and dropped: ids get reused; each must get its own costs
        raw["memory"][tier]["bandwidth_bytes_per_s"] = 100e9 * (k + 1)
        m = machine_from_dict(raw, "test")
        cost = prepare(f, m, cache=cache).target_cost
        assert cost.exact.mapper.machine.memory[tier].bandwidth_bytes_per_s == 100e9 * (k + 1)
        del m, cost
        # The young generations only: a cycle made in this iteration is there unless a generation-1
        # collection fell inside it (one per ~5 M allocations at conftest's thresholds), while a full
        # collection walks the whole test session's heap (~1 s each: 4.5 s of this test's CPU in the suite).
        gc.collect(1)
    assert len(cache) == 5

"""Data parallelism in serving: replicas behind a router (sim/apps/serve/router.py)."""

import numpy as np
import pytest

from hw_models.machine import load_machine
from sim.apps.serve.arrivals import make_requests
from sim.apps.serve.simulator import ServeSim
from sim.apps.serve.router import merge, run_replicas
from sim.apps.serve.run import serve
from sim.apps.serve.instance import prepare
from sim.apps.serve.spec import ServeFile
from sim.apps.serve.traces import Requests
from sim.core.errors import ConfigError
from sim.core.schema import validate_mapping

CACHE: dict = {}


def _file(rate, n, seed=5, router=None, process="poisson", cv=None, **extra) -> ServeFile:
    arrivals = dict(process=process, rate=rate, num_requests=n, seed=seed, **({"cv": cv} if cv else {}))
    serving = dict(arrivals=arrivals,
                   lengths=dict(prompt=dict(dist="uniform", low=32, high=512),
                                output=dict(dist="uniform", low=8, high=64)),
                   scheduler=dict(kind="vllm", max_num_batched_tokens=4096))
    if router:
        serving["router"] = router
    raw = dict(name="t", model="llama2-7b", flash_attention=True, serving=serving, **extra)
    return validate_mapping(ServeFile, raw, "test.yaml", "a serving file")


@pytest.fixture(scope="module")
def a6000():
    CACHE["a6000"] = load_machine("a6000")
    return CACHE["a6000"]


def test_one_replica_is_the_plain_engine(a6000):
    f = _file(6.0, 100)
    _, plain = serve(f, a6000, cache=CACHE)
    _, routed = serve(_file(6.0, 100, router={"replicas": 1}), a6000, cache=CACHE)
    assert routed["latency"] == plain["latency"] and routed["iterations"] == plain["iterations"]


@pytest.mark.parametrize("stack", ["vllm", "trtllm"])
def test_one_replica_under_a_stack_is_the_plain_engine_front_end_and_delay_included(a6000, stack):
    """A serving trial: behind a router the stack's per-request delay (vllm 5.322 ms, trtllm 42.06 ms) and its API
    front end (trtllm's 70 us a streamed token) were dropped, so one replica read TTFT 5.3 ms lower than the plain
    engine under vllm and 110 ms under sglang, while the report said they were held. They are the same run now."""
    f = _file(6.0, 60, stack=stack)
    _, plain = serve(f, a6000, cache=CACHE)
    _, routed = serve(_file(6.0, 60, router={"replicas": 1}, stack=stack), a6000, cache=CACHE)
    assert plain["request_delay_s"] > 0.005
    assert routed["latency"] == plain["latency"] and routed["iterations"] == plain["iterations"]


def test_round_robin_replica_serves_its_substream_exactly(a6000):
    """Round-robin gives replica k requests k, k+2, ...: its records are those of one engine
    fed only that sub-stream."""
    f = _file(12.0, 120)
    setup, reqs = prepare(f, a6000, cache=CACHE), make_requests(f)
    results, where = run_replicas(setup, reqs, 2, "round_robin")
    assert list(where[:6]) == [0, 1, 0, 1, 0, 1]
    odd = Requests(reqs.arrival_s[1::2], reqs.prompt_len[1::2], reqs.output_len[1::2])
    alone = ServeSim(setup, odd).run()
    merged = merge(results, where)
    for col in ("first_token_s", "finish_s", "scheduled_s"):
        np.testing.assert_array_equal(merged.requests[col][1::2], alone.requests[col])
    # KV use: each replica's time-weighted mean, summed, over both pools (one mean over all the iterations,
    # as before, read one replica's use against two pools: about half the use)
    from sim.apps.serve.metrics import kv_usage_mean
    each = [np.average(r.iterations["kv_blocks_used"], weights=r.iterations["duration_s"]) for r in results]
    assert merged.total_blocks == 2 * results[0].total_blocks
    assert kv_usage_mean(merged) == pytest.approx(sum(each) / merged.total_blocks, rel=1e-12)
    assert kv_usage_mean(results[0]) == pytest.approx(each[0] / results[0].total_blocks, rel=1e-12)
    # The run's KV in use from each iteration's start: both replicas' latest counts (by brute force), not the one
    # replica's that happened to start an iteration (the KV timeline and plot drew that, against both pools)
    from sim.apps.serve.timeline import summed_over_instances
    it = merged.iterations
    want = [sum(next((u for j, u in reversed(list(enumerate(it["kv_blocks_used"][:i + 1]))) if it["instance"][j] == k), 0)
                for k in (0, 1)) for i in range(len(it["start_s"]))]
    np.testing.assert_array_equal(summed_over_instances(merged.iterations, it["kv_blocks_used"]), want)
    assert max(want) > max(it["kv_blocks_used"])   # both replicas hold blocks at once somewhere
    # the peak is the most blocks held at one moment (a serving trial: the report summed each replica's own peak,
    # reached at other times, 3,199 where the plot topped at 2,934), at least the larger replica's own
    assert merged.peak_blocks == max(max(want), max(r.peak_blocks for r in results))
    assert max(r.peak_blocks for r in results) <= merged.peak_blocks <= sum(r.peak_blocks for r in results)


def _means(rate, n, seeds=4, router=None, **arrivals):
    """TTFT and TPOT means of runs with seeds 0..seeds-1: their mean and standard error."""
    runs = np.array([[serve(_file(rate, n, seed=k, router=router, **arrivals), CACHE["a6000"], cache=CACHE)[1]
                      ["latency"][m]["mean"] for m in ("ttft", "tpot")] for k in range(seeds)])
    return runs.mean(0), runs.std(0, ddof=1) / np.sqrt(seeds)


def _agree(x, y):
    (mx, sx), (my, sy) = x, y
    assert np.all(np.abs(mx - my) < 3 * np.sqrt(sx ** 2 + sy ** 2)), (mx, my, sx, sy)


def test_dp2_at_twice_the_rate_matches_one_replica(a6000):
    """DP=2 round-robin at 2r against one replica at r, Poisson, same seeds: TTFT and TPOT means
    agree within 3 standard errors (seed to seed) at a light load (r = 2/s, ~20% busy)."""
    _agree(_means(2.0, 300), _means(4.0, 600, router={"replicas": 2}))


def test_round_robin_replica_sees_erlang2_arrivals(a6000):
    """At a heavier load (r = 8/s) round-robin DP=2 has ~10% lower TTFT than one replica under
    Poisson at r: each replica gets every other Poisson arrival, an Erlang-2 stream (gaps' cv
    1/sqrt 2), which queues less. One replica fed gamma arrivals with that cv matches it."""
    dp2 = _means(16.0, 600, router={"replicas": 2})
    _agree(_means(8.0, 300, process="gamma", cv=2 ** -0.5), dp2)
    poisson = _means(8.0, 300)
    assert poisson[0][0] > dp2[0][0] + 2 * np.hypot(poisson[1][0], dp2[1][0])   # one-sided, ~98%


def test_least_outstanding(a6000):
    """A burst of 4 at once: outstanding 0/0 -> replica 0, 1/0 -> 1, 1/1 -> 0, 2/1 -> 1. Arrivals
    10 s apart (each request long done): always 0 (ties to the lowest index); round-robin alternates."""
    setup = prepare(_file(1.0, 4), a6000, cache=CACHE)
    burst = Requests(np.zeros(4), np.full(4, 64), np.full(4, 8))
    assert list(run_replicas(setup, burst, 2, "least_outstanding")[1]) == [0, 1, 0, 1]
    apart = Requests(np.arange(4) * 10.0, np.full(4, 64), np.full(4, 8))
    assert list(run_replicas(setup, apart, 2, "least_outstanding")[1]) == [0, 0, 0, 0]
    assert list(run_replicas(setup, apart, 2, "round_robin")[1]) == [0, 1, 0, 1]


def test_replicas_and_dp_must_agree(a6000):
    f = _file(1.0, 4, router={"replicas": 2}, parallel={"dp": 3})
    with pytest.raises(ConfigError, match="serving.router.replicas: 2, but parallel.dp is 3"):
        serve(f, a6000, cache=CACHE)


def _prefix_file(router=None, rate=2.0) -> ServeFile:
    """100 prompts of 512 tokens, each beginning with one of 4 shared 384-token prefixes (a serving researcher's
    trial: a DP + prefix-caching study had no router that keeps a prefix on the replica caching it)."""
    serving = dict(arrivals=dict(process="poisson", rate=rate, num_requests=100, seed=3),
                   lengths=dict(prompt=dict(dist="fixed", value=512), output=dict(dist="fixed", value=8)),
                   scheduler=dict(kind="vllm"), prefix_caching=dict(enabled=True, shared_prefix=dict(tokens=384, groups=4)))
    if router:
        serving["router"] = router
    raw = dict(name="t", model="llama2-7b", flash_attention=True, serving=serving)
    return validate_mapping(ServeFile, raw, "test.yaml", "a serving file")


def test_cache_aware_routing_keeps_each_prefix_on_one_replica(a6000):
    """One engine hits (100 - 4) x 384 / (100 x 512) = 72% of the prompt tokens (each group's first prompt
    computes its prefix). Round robin over 4 replicas computes each prefix on every replica it reaches (lower);
    cache_aware (SGLang's router) sends a group's first prompt to the replica caching least and the rest to the
    replica caching it (share 384 / 512 = 0.75 > 0.3): every group on one replica, the one engine's 72%."""
    _, one = serve(_prefix_file(), a6000, cache=CACHE)
    assert one["prefix_hit_share"] == pytest.approx(96 * 384 / (100 * 512), rel=1e-9)
    _, rr = serve(_prefix_file({"replicas": 4, "policy": "round_robin"}), a6000, cache=CACHE)
    f = _prefix_file({"replicas": 4, "policy": "cache_aware"})
    res, ca = serve(f, a6000, cache=CACHE)
    assert rr["prefix_hit_share"] < ca["prefix_hit_share"] == pytest.approx(one["prefix_hit_share"], rel=1e-9)
    group = [h[0] for h in make_requests(f).hash_ids]   # each prompt's shared-prefix unit
    where = {g: {int(k) for k, h in zip(res.requests["instance"], group) if h == g} for g in set(group)}
    assert sorted(len(w) for w in where.values()) == [1, 1, 1, 1]            # a group on one replica
    assert set().union(*where.values()) == {0, 1, 2, 3}                      # the 4 groups on the 4 empty caches


def test_cache_aware_falls_back_to_the_least_loaded_when_imbalanced():
    """The decision by hand (sim.apps.serve.router.cache_aware): replica 0 caches the request's prefix (share
    0.75). At loads 10 / 0 it wins; at 70 / 5 the load is imbalanced (70 - 5 > 64 and 70 > 1.5 x 5): the least
    loaded, replica 1. A request without hashes goes to the least loaded too."""
    from types import SimpleNamespace

    from sim.apps.serve.kvpool import BlockPool
    from sim.apps.serve.router import cache_aware

    def replica(load, cached):
        pool = BlockPool(1000, 16, unit_blocks=24, caching=True)
        for h in cached:
            pool.refs[h] = 0
        return SimpleNamespace(outstanding=load, sched=SimpleNamespace(pool=pool),
                               reqs=SimpleNamespace(hash_ids=[(7,), ()], prompt_len=np.array([512, 512])))
    assert cache_aware(0, [replica(10, {7}), replica(0, set())], least=1) == 0
    assert cache_aware(0, [replica(70, {7}), replica(5, set())], least=1) == 1
    assert cache_aware(1, [replica(10, {7}), replica(0, set())], least=1) == 1

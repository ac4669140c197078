"""Data parallelism in serving: N replicas of an instance (each a serving engine with
its own scheduler and KV pool, costed by the instance's parallel plan) behind a router.

All replicas and the router run in one simpy environment. The router sees each
request when it arrives and hands it to one replica:

* round_robin: request i to replica i mod N (vLLM's and most load balancers' default);
* least_outstanding: to the replica with the fewest requests routed to it and not yet
  finished (ties to the lowest index), as llm-d / Ray Serve's "least requests" policy;
* cache_aware: SGLang's router (sgl-router, now SMG: lightseekorg/smg docs/concepts/routing/cache-aware.md
  and docs/getting-started/load-balancing.md, defaults --cache-threshold 0.3, --balance-abs-threshold 64,
  --balance-rel-threshold 1.5). When the load is imbalanced (most outstanding - least > 64 and most > 1.5 x
  least) to the least loaded replica; otherwise to the replica whose prefix cache holds the largest share of
  the prompt, if that share exceeds 0.3, else to the one caching the least (its "smallest tree": the most
  room; ties to the less loaded). The share is read from each replica's
  own pool (SMG mirrors the engines' caches; the older router kept an approximate tree of what it had
  routed), at the pool's unit (a trace's hash block, a generated shared prefix). Without hashes (no prefix
  information in the stream) it is least_outstanding.

The result merges the replicas: each request's record from the replica that served it,
iterations of all replicas (sorted by start), KV blocks summed (peak: the sum of the
replicas' peaks, an upper bound on their simultaneous peak), busy time per resource
summed (utilisation: the mean over replicas), makespan the latest end.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import simpy

from sim.apps.serve.simulator import ServeResult, ServeSim
from sim.apps.serve.metrics import utilization
from sim.apps.serve.instance import Setup
from sim.apps.serve.spec import Router, ServeFile
from sim.apps.serve.timeline import summed_over_instances
from sim.apps.serve.traces import Requests
from sim.core.errors import ConfigError

POLICIES = ("round_robin", "least_outstanding", "cache_aware")
CACHE_THRESHOLD, BALANCE_ABS, BALANCE_REL = 0.3, 64, 1.5   # SMG's defaults (module doc)


class Replica(ServeSim):
    """One replica's engine; requests come from the router, not from its own arrival process."""

    def __init__(self, setup: Setup, reqs: Requests, index: int):
        super().__init__(setup, reqs)
        self.index = index
        self.routed = 0
        self.skipped = 0

    @property
    def outstanding(self) -> int:
        return self.routed - (self.done - self.skipped)

    def take(self, i: int) -> None:
        self.routed += 1
        self.enter(i)   # through its front end, as a lone engine's requests

    def skip(self) -> None:
        """A request routed elsewhere: counted as arrived and done here, so the engine stops with the stream."""
        self.arrived += 1
        self.done += 1
        self.skipped += 1
        self.poke()


def replica_count(file: ServeFile) -> int:
    """serving.router.replicas, else parallel.dp, else 1; both given must agree."""
    router = file.serving.router
    dp = (file.section("parallel") or {}).get("dp")
    n = router.replicas if router is not None else None
    if n is not None and dp is not None and n != dp:
        raise ConfigError(f"{file.source}: serving.router.replicas: {n}, but parallel.dp is {dp}; give one")
    return n or dp or 1


def choose(policy: str, i: int, replicas: list[Replica]) -> int:
    if policy == "round_robin":
        return i % len(replicas)
    least = min(range(len(replicas)), key=lambda k: replicas[k].outstanding)
    return cache_aware(i, replicas, least) if policy == "cache_aware" else least


def cache_aware(i: int, replicas: list[Replica], least: int) -> int:
    """SGLang's cache-aware choice for request i (module doc); `least`: the least loaded replica."""
    loads = [r.outstanding for r in replicas]
    lo, hi = loads[least], max(loads)
    reqs = replicas[0].reqs
    hashes = reqs.hash_ids[i] if reqs.hash_ids else ()
    if (hi - lo > BALANCE_ABS and hi > BALANCE_REL * lo) or not hashes:
        return least
    prompt = int(reqs.prompt_len[i])
    pools = [r.sched.pool for r in replicas]
    share = [min(p.match(hashes) * p.unit_blocks * p.block_size, prompt) / prompt for p in pools]
    best = max(range(len(replicas)), key=lambda k: (share[k], -loads[k]))   # ties to the less loaded
    if share[best] > CACHE_THRESHOLD:
        return best
    return min(range(len(replicas)), key=lambda k: (len(pools[k].refs), loads[k]))   # the smallest tree


def stream(env: simpy.Environment, reqs: Requests, route: Callable[[int], None], delay_s: float = 0.0):
    """The router's process: each request to `route` `delay_s` after its arrival (the stack's per-request delay,
    ServeSim.front_end_s, which a lone engine's arrivals take too: one replica behind a router is that engine)."""
    for i, at in enumerate(reqs.arrivals()):
        dt = at + delay_s - env.now
        if dt > 0:
            yield env.timeout(dt)
        route(i)


def run_replicas(setup: Setup, reqs: Requests, n: int, policy: str,
                 progress: Callable[[int, int], None] | None = None) -> tuple[list[ServeResult], np.ndarray]:
    """Simulate `n` replicas of `setup` behind the router: each replica's result and the
    replica each request went to."""
    env = simpy.Environment()
    reps = [Replica(setup, reqs, k) for k in range(n)]
    where = np.zeros(len(reqs), dtype=np.int64)

    def route(i: int) -> None:
        k = where[i] = choose(policy, i, reps)
        for r in reps:
            r.take(i) if r.index == k else r.skip()
        if progress is not None and i % 1024 == 0:
            progress(sum(r.done - r.skipped for r in reps), len(reqs))

    env.process(stream(env, reqs, route, reps[0].front_end_s))   # first, as a single engine starts its arrivals
    for r in reps:
        r.start(env)
        env.process(r._engine(env))
    env.run()
    return [r.result(env.now) for r in reps], where


def merge(results: list[ServeResult], where: np.ndarray) -> ServeResult:
    """One result over all replicas (module doc)."""
    reqs = {c: v.copy() for c, v in results[0].requests.items()}
    for k, res in enumerate(results[1:], start=1):
        mine = where == k
        for c, v in res.requests.items():
            reqs[c][mine] = v[mine]
    reqs["instance"] = where.astype(float)   # which replica (or pool instance) served each request
    its = {c: np.concatenate([r.iterations[c] for r in results]) for c in results[0].iterations}
    # which instance ran each iteration: they overlap in time, and a timeline draws one track each
    its["instance"] = np.concatenate([np.full(len(r.iterations["start_s"]), k) for k, r in enumerate(results)])
    order = np.argsort(its["start_s"], kind="stable")
    its = {c: v[order] for c, v in its.items()}
    # the most blocks in use at one moment, not the sum of each instance's own peak, reached at other times (a
    # serving trial read 3,199 where kv_and_batch.png's curve tops at 2,934); an instance's own peak, which may fall
    # between two iterations' samples, bounds it from below
    held = summed_over_instances(its, its["kv_blocks_used"]) if len(order) else [0]
    return ServeResult(
        reqs, its,
        np.concatenate([r.tbt_s for r in results]), np.concatenate([r.tbt_weight for r in results]),
        sum(r.preemptions for r in results), sum(r.swapped_out_blocks for r in results),
        sum(r.swapped_in_blocks for r in results), sum(r.total_blocks for r in results),
        int(max(max(r.peak_blocks for r in results), max(held))), max(r.makespan_s for r in results),
        sum(r.tokens_out for r in results), sum(r.energy_j for r in results),
        [x for r in results for x in r.swap_log], sum(r.spec_steps for r in results),
        sum(r.spec_tokens for r in results), summed([r.busy_s for r in results]), sum(r.instances for r in results),
        {k: int(v) for k, v in summed([r.rejected_reasons for r in results]).items()},
        kv_block_tokens=sizes.pop() if len(sizes := {r.kv_block_tokens for r in results}) == 1 else 0,
        preempt_log=sorted(x for r in results for x in r.preempt_log))


def summed(dicts: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0.0) + v
    return out


def replica_figures(results: list[ServeResult], where: np.ndarray) -> list[dict[str, float]]:
    """Per replica: requests routed, output tokens, busy fraction of the whole run, utilisation per resource."""
    span = max(r.makespan_s for r in results)
    return [dict(replica=k, requests=int((where == k).sum()), tokens=r.tokens_out,
                 busy=float(r.iterations["duration_s"].sum()) / span if span else 0.0,
                 utilization=utilization(r.busy_s, span))
            for k, r in enumerate(results)]


def policy_of(file: ServeFile) -> str:
    return (file.serving.router or Router()).policy

"""vLLM V1's running pass (schedulers/vllm.py) as array operations when it is a pure decode pass
(issue 30): every running request has one token pending, the token budget covers them all and the
pool holds their new blocks in one allocation. Then the pass makes the same decisions as the
per-request loop of VllmV1._running: each request one token, its block for that token (the same
blocks, evictions and peak, as allocations only ever take from the head of the free queue), and the
unit its token fills cached. The waiting pass then runs as usual: prompts it admits are entries after
the members', costed and handed out per request (DecodeCohort.features, the engine's hand-out).

Caching a member's filled unit after the one allocation, not between allocations, changes nothing:
a decode fills a unit past the prompt, whose key is private to the request and was never cached
(units a preempted request cached lie below the tokens it has again), so publishing it always
succeeds and touches no block an allocation could take.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.apps.serve.schedulers.base import Batch, Request

if TYPE_CHECKING:
    from sim.apps.serve.cohort import DecodeCohort
    from sim.apps.serve.schedulers.vllm import VllmV1


def _decoding(sched: VllmV1, r: Request) -> bool:
    """r has exactly one token pending and, with prefix caching, its filled units all cached."""
    if not r.generated or r.computed != r.prompt + r.generated - 1:
        return False
    return not sched.pool.caching or (r.published and sched.cached.get(r.idx, 0) == r.computed // sched.unit_tokens)


def cohort_step(sched: VllmV1, waiting: bool = True) -> Batch | None:
    """The step, its running pass over the cohort (sim.apps.serve.cohort), then (`waiting`) its waiting
    pass; None (the cohort dissolved) when the per-request pass must decide: too few running, budget
    short, a prefill, no blocks."""
    c, n = sched.cohort, len(sched.running)
    # Small batches: the cohort's fixed cost per step outweighs a Python loop over a few requests
    # (cohort_min 8 against 32, 16 and 4: least CPU at 10-20 running, 2,000 requests at 8/s).
    if n < (sched.cohort_min // 2 if len(c) else sched.cohort_min) or n > sched.max_tokens:
        return _dissolved(c)
    new = sched.running[len(c):]
    if not all(_decoding(sched, r) for r in new):
        return _dissolved(c)
    c.join(new, sched.pool.unit_blocks)
    if not grow_members(sched, c):
        return _dissolved(c)
    batch = Batch(list(c.entries), cohort=c)
    if waiting:
        sched._waiting(batch, sched.max_tokens - n)   # prompts it admits follow the members, per request
    return batch


def grow_members(sched: VllmV1, c: DecodeCohort) -> bool:
    """The members due a block get it (False: the pool cannot hold them, nothing taken), then the units
    their tokens fill are cached."""
    if not c.grow(sched.pool):
        return False
    if sched.pool.caching:
        _cache_filled(sched)
    return True


def _dissolved(c: DecodeCohort) -> None:
    if len(c):
        c.dissolve()


def _cache_filled(sched: VllmV1) -> None:
    """Members whose token this step fills a unit: that unit cached (VllmV1._cache), in running order."""
    for r, computed, generated in sched.cohort.filling(sched.unit_tokens):
        # the member's true counters on its object (as sync would write them) before _cache reads them
        r.computed, r.generated = computed, generated
        sched._cache(r, computed + 1)

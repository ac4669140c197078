"""vLLM V1's scheduler (sim.apps.serve.schedulers.vllm) on hand-worked scenarios with a tiny block pool:
blocks per chunk, the full-sequence admission gate, the preemption victim and what it keeps, and the
single LRU free queue of V1's block pool (vllm/v1/core/sched/scheduler.py, kv_cache_manager.py,
block_pool.py at v0.19). Blocks of 4 tokens; one prefix unit = one block; no trace hashes, so every
unit is private to its request (only a preempted request can hit its own blocks)."""

from __future__ import annotations

from sim.apps.serve.kvpool import BlockPool, LruBlockPool
from sim.apps.serve.schedulers import Request
from sim.apps.serve.schedulers.vllm import VllmV1
from sim.apps.serve.spec import Vllm


def v1(blocks: int, budget: int, caching: bool = True, max_seqs: int = 256) -> VllmV1:
    cfg = Vllm(kind="vllm", max_num_seqs=max_seqs, max_num_batched_tokens=budget, block_size=4)
    return VllmV1(cfg, LruBlockPool(blocks, 4, 1, caching))


def step(s: VllmV1) -> list[tuple[int, int]]:
    """One iteration: schedule, then what the engine does with it (sim.apps.serve.simulator._apply):
    computed tokens advance, a request whose KV caught up emits a token, a finished one leaves."""
    batch = s.schedule(0.0, True)
    out = [(r.idx, q) for r, q in batch.entries] if batch else []
    for r, q in batch.entries if batch else []:
        r.computed += q
        if r.computed == r.prompt + r.generated:
            r.generated += 1
            if r.generated >= r.output:
                s.finish(r)
    return out


def test_blocks_are_allocated_per_chunk_not_per_prompt():
    s = v1(blocks=20, budget=8)                 # 19 usable (block 0 is V1's null block)
    assert s.pool.available == 19 and s.pool.used == 0
    assert s.add(Request(0, 0.0, prompt=20, output=3))
    chunks, used = [], []
    for _ in range(4):
        chunks.append(step(s))
        used.append(s.pool.used)
    # 8 + 8 + 4 prompt tokens in chunks of the budget, then one decode token (the 21st token opens block 6).
    assert chunks == [[(0, 8)], [(0, 8)], [(0, 4)], [(0, 1)]]
    assert used == [2, 4, 5, 6]


def test_whole_sequence_must_fit_to_be_admitted():
    s = v1(blocks=9, budget=20)                 # 8 usable
    assert s.add(Request(0, 0.0, prompt=16, output=4))
    assert s.add(Request(1, 0.0, prompt=20, output=4))
    # Request 0 takes 16 tokens (4 blocks); request 1's 4-token chunk would fit the 4 free blocks, but its
    # 20-token prompt needs 5 (scheduler_reserve_full_isl): it waits.
    assert step(s) == [(0, 16)]
    assert [r.idx for r in s.waiting] == [1] and s.pool.used == 4


def test_victim_is_the_last_running_and_keeps_its_cached_blocks():
    s = v1(blocks=7, budget=64)                 # 6 usable
    a, b = Request(0, 0.0, prompt=8, output=7), Request(1, 0.0, prompt=8, output=10)
    assert s.add(a)
    assert s.add(b)
    assert step(s) == [(0, 8), (1, 8)]          # 2 blocks each
    for _ in range(4):                          # tokens 9..12 of each: one more block each, 6 of 6 used
        assert step(s) == [(0, 1), (1, 1)]
    assert s.pool.used == 6 and s.pool.available == 0
    # A's 13th token needs a 4th block: the last running request (B) is preempted, its 3 cached blocks
    # go to the free queue tail-first, A's block evicts B's third block; no waiting request is admitted.
    assert step(s) == [(0, 1)]
    assert s.preemptions == 1 and b.preemptions == 1 and b.computed == 0 and list(s.waiting) == [b]
    assert s.pool.evictions == 1 and s.pool.available == 2
    # B (13 tokens: 4 blocks) waits: only 2 blocks are free, its own 2 cached ones.
    assert step(s) == [(0, 1)]                  # A's 7th and last token: A finishes, its 4 blocks freed
    assert a.generated == 7 and s.running == [] and s.pool.available == 6
    # B returns with its first 2 blocks still cached: 8 tokens hit, 5 recomputed (of 13).
    assert step(s) == [(1, 5)]
    assert b.computed == 13 and b.generated == 6 and b.prefix_hit == 0
    assert s.pool.used == 4 and s.pool.evictions == 2   # the new blocks took A's free block and A's 3rd unit


def test_without_prefix_caching_a_victim_recomputes_everything():
    s = v1(blocks=7, budget=64, caching=False)
    a, b = Request(0, 0.0, prompt=8, output=7), Request(1, 0.0, prompt=8, output=10)
    assert s.add(a)
    assert s.add(b)
    for _ in range(7):
        step(s)
    assert b.preemptions == 1 and a.generated == 7
    assert step(s) == [(1, 13)]


def test_running_request_asking_last_preempts_itself():
    s = v1(blocks=4, budget=64)                 # 3 usable
    a, b = Request(0, 0.0, prompt=3, output=9), Request(1, 0.0, prompt=8, output=4)
    assert s.add(a)
    assert s.add(b)
    assert step(s) == [(0, 3), (1, 8)]          # 1 + 2 blocks: all 3 used
    # A's 4th token fits its block; B's 9th needs a 3rd block, none is free, and B is the last
    # running request: B preempts itself and the running pass stops.
    assert step(s) == [(0, 1)]
    assert s.preemptions == 1 and s.running == [a] and list(s.waiting) == [b] and b.computed == 0
    # A's 5th token takes the head of the free queue: B's second (tail) block, evicted; B's first
    # stays cached, but B's 9 tokens need 3 blocks and 1 is free: B waits.
    assert step(s) == [(0, 1)]
    assert s.pool.evictions == 1 and s._hits(b, 9) == ((1, 0),) and list(s.waiting) == [b]


def test_v1_free_queue_evicts_older_cached_blocks_before_later_freed_plain_ones():
    for pool, kept in ((LruBlockPool(5, 4, 1, True), False), (BlockPool(4, 4, 1, True), True)):
        pool.allocate(4)
        pool.publish(7)              # one block of a request becomes cached (block hash 7) ...
        pool.drop((7,))              # ... the request ends: hash 7 is free but cached
        pool.release(3)              # its 3 other (plain) blocks follow it into the free queue
        pool.allocate(1)
        # V1: the head of the queue is the cached block: evicted. V0 (BlockPool): plain blocks go first.
        assert (7 in pool.refs) is kept and pool.evictions == (0 if kept else 1)

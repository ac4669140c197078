"""More scheduler paths worked by hand (issue 32: the survivors of the whole-set mutation run on
sim.apps.serve.schedulers): an idle scheduler of every kind, two swap preemptions in one V0 step of
requests that hold only cached units, one request preempted twice, Sarathi's partial prefills sharing
the budget, Static's batch edges, Orca's refusals at their limits, TensorRT-LLM's reservation at its
limit. Blocks of 4 tokens; `apply` (tests/test_serve_scenarios.py) does what the engine does with a
batch, the run-wide invariants checked around it."""

from __future__ import annotations

import pytest

from sim.apps.serve import spec as s
from sim.apps.serve.cohort import DecodeCohort
from sim.apps.serve.kvpool import BlockPool, LruBlockPool
from sim.apps.serve.schedulers import SCHEDULERS, Batch, Request
from sim.apps.serve.schedulers.orca import Orca
from sim.apps.serve.schedulers.sarathi import Sarathi
from sim.apps.serve.schedulers.sglang import Sglang
from sim.apps.serve.schedulers.static import Static
from sim.apps.serve.schedulers.trtllm import Trtllm
from sim.apps.serve.schedulers.vllm import VllmV1
from sim.apps.serve.schedulers.vllm_v0 import VllmV0
from tests.test_serve_scenarios import apply, step, v0
from tests.test_serve_v1 import step as step_v1

CONFIGS = {"static": s.Static, "orca": s.Orca, "vllm-v0": s.VllmV0, "sarathi": s.Sarathi, "vllm": s.Vllm,
           "sglang": s.Sglang, "trtllm": s.Trtllm}


@pytest.mark.parametrize("kind", CONFIGS)
def test_an_idle_scheduler_schedules_nothing(kind):
    """Nothing waiting, nothing running: every kind returns no batch (None, not an empty one, which the
    engine would run as an iteration of nothing); so after its one request has run to its end."""
    cfg = CONFIGS[kind](kind=kind)
    cls = SCHEDULERS[type(cfg)]
    sched = cls(cfg, cls.pool_class(64, 4 if kind not in ("static", "orca") else 1), prompt_limit=1 << 20)
    sched.max_model_len = 64
    assert sched.schedule(0.0, False) is None
    assert sched.add(Request(0, 0.0, 4, 2))
    for _ in range(3):
        step(sched)
    assert not sched.busy() and sched.schedule(0.0, False) is None


def test_v0_swaps_two_requests_out_in_one_step_with_their_cached_units():
    """V0, swap preemption, prefix caching, 8 blocks of 4 tokens, a prefix unit of 2 blocks (8 tokens).
    A, B, C, D: prompt 8 (one unit, hashes 10..13), output 4. it1: the four prompts, 2 blocks each: 8 used;
    each publishes its unit, so it holds 0 blocks of its own and 1 cached unit (2 blocks).
    it2: token 9 of each needs a 3rd block (blocks_for(9) = 3 - 2 held), none free. A: D (the last) is
    swapped out: 0 own + 1 unit x 2 = 2 blocks over the link, its unit idle in the pool; A's block evicts
    it (2 free, 1 taken). B takes the other. C: none free, nothing behind it: C swaps itself out (2 blocks).
    The step: A 1, B 1; 4 blocks over the link, preempted (D, 2 blocks, 8 tokens), (C, 2, 8)."""
    cfg = s.VllmV0(kind="vllm-v0", block_size=4, watermark=0.0, max_num_batched_tokens=64, preemption="swap")
    sched = VllmV0(cfg, BlockPool(8, 4, 2, True), prompt_limit=64)
    sched.max_model_len = 1 << 20
    reqs = [Request(i, 0.0, 8, 4, (10 + i,)) for i in range(4)]
    assert all(sched.add(r) for r in reqs)
    assert step(sched) == [(0, 8), (1, 8), (2, 8), (3, 8)]
    assert [(r.blocks, r.shared) for r in reqs] == [(0, (10 + i,)) for i in range(4)] and sched.pool.used == 8
    batch = sched.schedule(0.0, True)
    assert apply(sched, batch) == [(0, 1), (1, 1)]
    assert batch.swap_blocks == 4 and batch.preempted == [(3, 2, 8), (2, 2, 8)]
    assert sched.swapped_out_blocks == 4 and sched.preemptions == 2 and list(sched.swapped) == [reqs[3], reqs[2]]
    # it3, it4: A and B decode tokens 3, 4 (their 3 blocks hold 12 tokens) and end: all 8 blocks free or
    # evictable (their units stay cached, idle).
    # it5: D and C come back in one step, 2 blocks each over the link, plus the block their 9th token opens.
    assert [step(sched), step(sched)] == [[(0, 1), (1, 1)]] * 2 and sched.pool.available == 8
    batch = sched.schedule(0.0, True)
    assert apply(sched, batch) == [(3, 1), (2, 1)]
    assert batch.swap_blocks == 4 and sched.swapped_in_blocks == 4 and (reqs[3].blocks, reqs[2].blocks) == (3, 3)


def test_v0_preempts_the_same_request_twice():
    """V0, recompute, 4 blocks, budget 64; A (prompt 4, output 6), B (2, 10), C (4, 6), caching on (no
    hashes: only the published flag moves).
    it1: the three prompts, 1 block each (1 free); tokens 1.
    it2: A's token 5 takes the free block; B's 3rd fits; C's 5th needs a block, none free, C is last: C
         preempts itself (computed 0, to wait again; it will publish its prompt again when recomputed).
    it3: C's 5 tokens need 2 blocks, 1 free: it waits; A, B decode. it4: B's 5th token takes the free block.
    it5: A, B decode. it6: A's 9th token needs a 3rd block: B (the last) is preempted (2 blocks back);
         A's 6th and last token, A ends. it7: B (7 tokens) and C (5), 2 blocks each.
    it8: B 1, C 1. it9: B's 9th token needs a 3rd block: C is preempted a second time. it10-11: B to
    its 10th token. it12: C recomputes 7 tokens; it13-14: its 5th and 6th."""
    sched = v0(blocks=4, budget=64, caching=True)
    a, b, c = Request(0, 0.0, 4, 6), Request(1, 0.0, 2, 10), Request(2, 0.0, 4, 6)
    assert sched.add(a) and sched.add(b) and sched.add(c)
    assert step(sched) == [(0, 4), (1, 2), (2, 4)] and c.published
    assert step(sched) == [(0, 1), (1, 1)] and c.preemptions == 1 and not c.published and list(sched.waiting) == [c]
    got = [step(sched) for _ in range(12)]
    assert got == [[(0, 1), (1, 1)]] * 3 + [[(0, 1)], [(1, 7), (2, 5)], [(1, 1), (2, 1)]] + [[(1, 1)]] * 3 \
        + [[(2, 7)], [(2, 1)], [(2, 1)]]
    assert (a.preemptions, b.preemptions, c.preemptions, sched.preemptions) == (0, 1, 2, 3)
    assert not sched.busy() and sched.pool.used == 0


def test_sarathi_partial_prefills_share_what_the_decodes_leave():
    """Sarathi, budget 4, 40 blocks. A (prompt 3, output 3), B, C, D (prompt 6, output 2).
    it1: A 3, B's first chunk 1 (budget 0). it2: A decodes 1; B continues 3 (budget 0).
    it3: A 1 (its last); B's last 2 (budget 1); C is admitted with the 1 left.
    it4: B decodes 1 (its last); C continues 3. it5: C's last 2; D admitted with 2.
    it6: C 1 (its last); D continues 3. it7: D's one prompt token left, a chunk of 1. it8: D decodes."""
    sched = v0(blocks=40, budget=4, cls=Sarathi)
    for i, (p, o) in enumerate([(3, 3), (6, 2), (6, 2), (6, 2)]):
        assert sched.add(Request(i, 0.0, p, o))
    got = [step(sched) for _ in range(8)]
    assert got == [[(0, 3), (1, 1)], [(0, 1), (1, 3)], [(0, 1), (1, 2), (2, 1)], [(1, 1), (2, 3)],
                   [(2, 2), (3, 2)], [(2, 1), (3, 3)], [(3, 1)], [(3, 1)]]
    assert not sched.busy()


def _static(batch: int, pool_tokens: int, max_wait_s: float = 0.0, prompt_limit: int | None = None) -> Static:
    return Static(s.Static(kind="static", batch_size=batch, max_wait_s=max_wait_s), BlockPool(pool_tokens, 1),
                  prompt_limit=prompt_limit)


def test_static_batch_edges():
    """Batch size 2, a pool of 20 token slots. Three requests of 6 + 4 tokens wait: the batch takes 2
    (not 3), whose KV (6 + 4) x 2 = 20 slots fills the pool exactly. While it runs with the third
    waiting, no timer is set; in a pool of 100 slots the batch size alone stops it at 2. A request of 12 + 8 = 20 tokens fits the pool alone (no lookahead slot);
    with a prompt limit of 16 (no chunking) it is refused."""
    sched = _static(2, 20)
    reqs = [Request(i, 0.0, 6, 4) for i in range(3)]
    assert all(sched.add(r) for r in reqs)
    batch = sched.schedule(0.0, True)
    assert [(r.idx, q) for r, q in batch.entries] == [(0, 6), (1, 6)] and batch.padded == [(6, 6)] * 2
    assert sched.timer(0.0, True) is None
    roomy = _static(2, 100)   # the batch size alone stops the batch at 2
    assert all(roomy.add(Request(i, 0.0, 6, 4)) for i in range(3))
    assert [r.idx for r, _ in roomy.schedule(0.0, True).entries] == [0, 1]
    assert _static(2, 20).refusal(Request(0, 0.0, 12, 8)) is None
    assert _static(2, 20, prompt_limit=16).add(Request(0, 0.0, 12, 8)) is False


def test_static_starts_a_late_batch_on_its_deadline():
    """Batch size 4, max_wait 1 s, more coming: a lone request of t = 0.5 s waits at 1.4 s and starts at
    1.5 s exactly (arrival + max_wait), the batch not full."""
    sched = _static(4, 100, max_wait_s=1.0)
    assert sched.add(Request(0, 0.5, 3, 1))
    assert sched.schedule(1.4, True) is None
    assert [(r.idx, q) for r, q in sched.schedule(1.5, True).entries] == [(0, 3)]


def test_orca_refusals_at_their_limits():
    """Orca reserves max_model_len = 32 token slots of a 32-slot pool: that fits. Without a prompt limit
    a request of 30 + 4 > 32 tokens is longer than max_model_len; with a budget of 16, a prompt of exactly
    16 is no reason either: 16 + 20 > 32 is still 'longer than max_model_len'; 16 + 8 is accepted."""
    for limit in (None, 16):
        sched = Orca(s.Orca(kind="orca", max_model_len=32), BlockPool(32, 1), prompt_limit=limit)
        sched.max_model_len = 32
        assert sched.refusal(Request(0, 0.0, 16, 8)) is None
        assert sched.refusal(Request(0, 0.0, 30 if limit is None else 16, 4 if limit is None else 20)) \
            == "prompt + output longer than max_model_len 32"


def _trtllm(blocks: int, lookahead: int = 0) -> Trtllm:
    cfg = s.Trtllm(kind="trtllm", max_num_batched_tokens=64, block_size=4)
    return Trtllm(cfg, LruBlockPool(blocks, 4, 1, False), lookahead) if lookahead else \
        Trtllm(cfg, LruBlockPool(blocks, 4, 1, False))


def test_trtllm_reservation_at_its_limits():
    """8 usable blocks (9, block 0 the null block). A (prompt 8, output 8: 4 blocks) and B (8 + 8) reserve
    4 + 4 = 8 blocks, exactly the pool: both start. With a lookahead of 1 slot (speculative decoding),
    10 usable blocks: A (4 + 12 + 1 = 17 tokens: 5 blocks) and B (4 + 20 + 1 = 25: 7 blocks) reserve 12 > 10:
    B waits."""
    sched = _trtllm(9)
    assert sched.add(Request(0, 0.0, 8, 8)) and sched.add(Request(1, 0.0, 8, 8))
    assert step_v1(sched) == [(0, 8), (1, 8)] and sched.reserved == {0: 4, 1: 4}
    sched = _trtllm(11, lookahead=1)
    assert sched.add(Request(0, 0.0, 4, 12)) and sched.add(Request(1, 0.0, 4, 20))
    assert step_v1(sched) == [(0, 4)] and sched.reserved == {0: 5}


def _cohort_run(sched: VllmV0 | VllmV1, steps: int) -> list[int]:
    """Steps as the engine runs them with a decode cohort (sim.apps.serve.simulator: a cohort step's
    members each emit a token, the finished leave); each step's cohort size, 0 for a per-request step."""
    sizes = []
    for _ in range(steps):
        batch = sched.schedule(0.0, True)
        if batch.cohort is None:
            apply(sched, batch)
            sizes.append(0)
            continue
        sizes.append(len(batch.cohort))
        rest = batch.entries[len(batch.cohort):]   # prompts a V1 step admitted after the members
        for r in batch.cohort.hand_out(0.0, {}):
            sched.finish(r)
        if rest:
            apply(sched, Batch(rest))
    return sizes


@pytest.mark.parametrize("n", [4, 5])
def test_v0_cohort_forms_from_cohort_min_and_dissolves_below_half(n):
    """V0 with prefix caching (so a member must have published its prompt), cohort_min 5 (5 // 2 = 2),
    64 blocks; n requests of prompt 4 and outputs 2, 3, 4, ...: after it1 (the prompts) n decode.
    n = 5: a cohort of 5 forms at it2 (5 >= 5); a member leaves each step and the cohort keeps stepping
    while 4, 3, 2 (>= 2) run; with 1 left (< 2) it dissolves and the last request decodes per request.
    n = 4: no cohort ever forms (4 < 5), the steps are per request."""
    sched = v0(blocks=64, caching=True)
    sched.cohort_min, sched.cohort = 5, DecodeCohort(4, 0)
    reqs = [Request(i, 0.0, 4, 2 + i) for i in range(n)]
    assert all(sched.add(r) for r in reqs)
    assert _cohort_run(sched, n + 1) == ([0, 5, 4, 3, 2, 0] if n == 5 else [0] * 5)
    assert [r.generated for r in reqs] == [r.output for r in reqs] and not sched.busy()


def test_v1_prefix_units_of_two_blocks_and_a_lookahead_slot():
    """V1, 16 blocks of 4 tokens (15 usable), prefix units of 2 blocks (8 tokens), caching, a lookahead
    of 1 slot (speculative decoding), budget 12. A: prompt 18, hashes 1, 2, output 4.
    it1: A's chunk 12: blocks_for(12) = 3 (no lookahead for a first chunk); unit 1 (tokens 0-7) is full:
         cached, A holds it (2 blocks) and 1 block of its own. 3 used.
    it2: A's last 6: blocks_for(18 + 1) = 5, less 1 own and 1 unit of 2: 2 more (3 own); unit 2 full:
         cached, A keeps 1 own. 5 used. A's token 1. B arrives: prompt 17, hashes 1, 2, output 2.
    it3: A 1 (end 19: blocks_for(20) = 5, held: no block). B hits both units ((17 - 1) // 8 = 2): 16
         tokens; computes 1 token, blocks_for(17) = 5 less 4 shared: 1 block. 6 used; prefix hit 16.
    it4: A 1 (end 20: blocks_for(21) = 6: its lookahead slot opens a 6th block), B 1 (end 18: 5, held):
         B's 2nd and last token, its own block freed: A 2 own + 2 units = 6 used.
    it5: A's 4th and last (end 21, blocks_for(22) = 6, held); everything freed, both units idle."""
    cfg = s.Vllm(kind="vllm", max_num_seqs=256, max_num_batched_tokens=12, block_size=4)
    sched = VllmV1(cfg, LruBlockPool(16, 4, 2, True), lookahead=1)
    a, b = Request(0, 0.0, 18, 4, (1, 2)), Request(1, 0.0, 17, 2, (1, 2))
    assert sched.add(a)

    def it() -> tuple:
        return step(sched), a.blocks, list(a.shared), b.blocks, sched.pool.used
    assert it() == ([(0, 12)], 1, [1], 0, 3)
    assert it() == ([(0, 6)], 1, [1, 2], 0, 5) and a.generated == 1
    assert sched.add(b)
    assert it() == ([(0, 1), (1, 1)], 1, [1, 2], 1, 6) and b.shared == [1, 2] and b.prefix_hit == 16
    assert it() == ([(0, 1), (1, 1)], 2, [1, 2], 0, 6) and b.generated == 2
    assert it() == ([(0, 1)], 0, [], 0, 0) and not sched.busy()
    assert sched.pool.available == 15 and len(sched.pool.refs) == 2


@pytest.mark.parametrize("caching", [True, False])
def test_v1_cohort_forms_from_cohort_min_within_the_budget(caching):
    """The V0 scenario above under V1 (schedulers/vllm_cohort.py), prompts of 1 token, 64 blocks, a budget
    of 5 tokens, with and without prefix caching: it1 runs the 5 prompts; from it2 the 5 decodes take the
    whole budget (5 tokens for 5 running is within it): a cohort of 5, then 4, 3, 2, then per request."""
    cfg = s.Vllm(kind="vllm", max_num_seqs=256, max_num_batched_tokens=5, block_size=4)
    sched = VllmV1(cfg, LruBlockPool(64, 4, 1, caching))
    sched.cohort_min, sched.cohort = 5, DecodeCohort(4, 0)
    reqs = [Request(i, 0.0, 1, 2 + i) for i in range(5)]
    assert all(sched.add(r) for r in reqs)
    assert _cohort_run(sched, 6) == [0, 5, 4, 3, 2, 0]
    assert [r.generated for r in reqs] == [r.output for r in reqs] and not sched.busy()


def test_v1_a_prompt_joins_the_cohort_after_its_prefill():
    """V1, caching, cohort_min 4 (4 // 2 = 2), budget 64: requests 0-3 (prompt 1, outputs 2-5); it1 the
    prompts; it2 a cohort of 4 (request 0 ends). Request 4 (prompt 1, output 3) arrives: it3 the 3 members
    step and the waiting pass adds its prompt after them (request 1 ends). it4: request 4, one token
    pending and its units cached as far as computed, joins: a cohort of 3 (request 2 ends); it5: 2."""
    cfg = s.Vllm(kind="vllm", max_num_seqs=256, max_num_batched_tokens=64, block_size=4)
    sched = VllmV1(cfg, LruBlockPool(64, 4, 1, True))
    sched.cohort_min, sched.cohort = 4, DecodeCohort(4, 0)
    assert all(sched.add(Request(i, 0.0, 1, 2 + i)) for i in range(4))
    assert _cohort_run(sched, 2) == [0, 4]
    assert sched.add(Request(4, 0.0, 1, 3))
    assert _cohort_run(sched, 3) == [3, 3, 2]


def test_v1_preempts_the_same_request_twice():
    """V1, 5 blocks (4 usable), no caching, budget 64. A (prompt 8, output 5), B, C (prompt 4, output 6).
    it1: A 8 (2 blocks), B 4, C 4 (1 each): 4 used. it2: A's 9th token needs a block: C (the last) is
         preempted; B's 5th needs one, none is free and B is now the last: B preempts itself.
    it3-5: A to its 5th token, then ends: 4 free. it6: B and C recompute 5 tokens each (2 blocks each).
    it7-9: both decode. it10: B's 9th token needs a 3rd block: C is preempted a second time; B ends.
    it11: C recomputes 9 tokens (3 blocks) and ends."""
    cfg = s.Vllm(kind="vllm", max_num_seqs=256, max_num_batched_tokens=64, block_size=4)
    sched = VllmV1(cfg, LruBlockPool(5, 4, 1, False))
    a, b, c = Request(0, 0.0, 8, 5), Request(1, 0.0, 4, 6), Request(2, 0.0, 4, 6)
    assert sched.add(a) and sched.add(b) and sched.add(c)
    got = [step(sched) for _ in range(11)]
    assert got == [[(0, 8), (1, 4), (2, 4)]] + [[(0, 1)]] * 4 + [[(1, 5), (2, 5)]] + [[(1, 1), (2, 1)]] * 3 \
        + [[(1, 1)], [(2, 9)]]
    assert (a.preemptions, b.preemptions, c.preemptions, sched.preemptions) == (0, 1, 2, 3)


def test_v1_a_trace_hash_of_a_partial_block_is_not_a_prefix_key():
    """V1, caching, blocks of 4. A (prompt 6) carries trace hashes 1, 2, the second over its partial 2nd
    block (Mooncake hashes every 512-token block, the last one partial too). Its 2nd block fills with
    generated tokens at its 8th token: cached under A's own key, not hash 2. B (prompt 9, hashes 1, 2, 3)
    then hits only block 1 (4 tokens) and computes 5. A prompt of exactly two blocks keeps both hashes."""
    cfg = s.Vllm(kind="vllm", max_num_seqs=256, max_num_batched_tokens=64, block_size=4)
    sched = VllmV1(cfg, LruBlockPool(16, 4, 1, True))
    a, b = Request(0, 0.0, 6, 4, (1, 2)), Request(1, 0.0, 9, 1, (1, 2, 3))
    assert sched.add(a)
    assert [step(sched) for _ in range(4)] == [[(0, 6)], [(0, 1)], [(0, 1)], [(0, 1)]] and not sched.busy()
    assert sched.add(b) and step(sched) == [(1, 5)] and b.prefix_hit == 4
    # C (prompt 8, hashes 7, 8: two whole blocks) caches both under the trace's hashes; D (prompt 9,
    # hashes 7, 8, 9) hits both (8 tokens) and computes 1.
    c, d = Request(2, 0.0, 8, 1, (7, 8)), Request(3, 0.0, 9, 1, (7, 8, 9))
    assert sched.add(c) and step(sched) == [(2, 8)]
    assert sched.add(d) and step(sched) == [(3, 1)] and d.prefix_hit == 8



def test_v0_lookahead_slots_in_decodes_preemption_and_swap_in():
    """V0, swap preemption, a lookahead of 1 slot, 5 blocks of 4 tokens. A, B: prompt 7, output 4.
    it1: both prompts, blocks_for(7 + 1) = 2 each: 4 used, 1 free.
    it2: token 8 with its slot needs blocks_for(9) = 3 each: 2 more, 1 free; A takes it, B (the last)
         swaps itself out (2 blocks, 7 tokens computed).
    it3: A's token 9 (3 blocks hold 12 >= 9 + 1); B needs its 2 blocks back plus blocks_for(7 + 1 + 1) - 2
         = 1: 3 > 2 free, it stays out. it4: A's 4th and last token (10 + 1 <= 12).
    it5: B comes back with 3 blocks (2 over the link) and decodes."""
    cfg = s.VllmV0(kind="vllm-v0", block_size=4, watermark=0.0, max_num_batched_tokens=64, preemption="swap")
    sched = VllmV0(cfg, BlockPool(5, 4), lookahead=1, prompt_limit=64)
    sched.max_model_len = 1 << 20
    a, b = Request(0, 0.0, 7, 4), Request(1, 0.0, 7, 4)
    assert sched.add(a) and sched.add(b)
    assert step(sched) == [(0, 7), (1, 7)] and sched.pool.used == 4
    assert step(sched) == [(0, 1)] and a.blocks == 3 and list(sched.swapped) == [b] and b.swapped == 2
    assert [step(sched), step(sched)] == [[(0, 1)], [(0, 1)]] and list(sched.swapped) == [b]
    batch = sched.schedule(0.0, True)
    assert apply(sched, batch) == [(1, 1)] and batch.swap_blocks == 2 and b.blocks == 3


def test_v0_swap_in_may_leave_exactly_the_watermark_free():
    """V0, swap preemption, 4 blocks, watermark 0.25 (1 block). A, B: prompt 4, output 6.
    it1: both prompts, 1 block each (4 - 1 = 3 and 3 - 1 = 2 free, not below 1). it2: token 5 of each
    opens a 2nd block: 4 used. it3-5: tokens 6-8 fit. it6: token 9 of each needs a 3rd block, none is
    free: B (the last) is swapped out (2 blocks); A takes one and emits its 6th and last token: 4 free.
    it7: B needs its 2 blocks back plus blocks_for(9) - 2 = 1: 4 - 3 = 1 free after, not below the
    watermark: B comes back and emits its 6th token."""
    cfg = s.VllmV0(kind="vllm-v0", block_size=4, watermark=0.25, max_num_batched_tokens=64, preemption="swap")
    sched = VllmV0(cfg, BlockPool(4, 4), prompt_limit=64)
    sched.max_model_len = 1 << 20
    a, b = Request(0, 0.0, 4, 6), Request(1, 0.0, 4, 6)
    assert sched.watermark == 1 and sched.add(a) and sched.add(b)
    got = [step(sched) for _ in range(7)]
    assert got == [[(0, 4), (1, 4)]] + [[(0, 1), (1, 1)]] * 4 + [[(0, 1)], [(1, 1)]]
    assert sched.swapped_out_blocks == sched.swapped_in_blocks == 2 and not sched.busy()


def test_v0_swap_in_of_a_request_whose_next_token_fits_its_blocks():
    """V0, swap preemption, 4 blocks. A (prompt 8, output 3), B (prompt 5, output 3): 2 blocks each.
    it2: A's 9th token needs a 3rd block; B's 6th fits its 2 blocks; none is free: B (the last) is
    swapped out (2 blocks) and A takes one. it3: A's 10th token, its last (B cannot come back: 1 free).
    it4: B comes back with just its 2 blocks (its 6th token needs no new one) and decodes; it5: its last."""
    cfg = s.VllmV0(kind="vllm-v0", block_size=4, watermark=0.0, max_num_batched_tokens=64, preemption="swap")
    sched = VllmV0(cfg, BlockPool(4, 4), prompt_limit=64)
    sched.max_model_len = 1 << 20
    a, b = Request(0, 0.0, 8, 3), Request(1, 0.0, 5, 3)
    assert sched.add(a) and sched.add(b)
    assert [step(sched), step(sched), step(sched)] == [[(0, 8), (1, 5)], [(0, 1)], [(0, 1)]] and b.swapped == 2
    assert step(sched) == [(1, 1)] and b.blocks == 2 and sched.swapped_in_blocks == 2
    assert step(sched) == [(1, 1)] and not sched.busy()


def test_refusals_at_the_pool_and_budget_limits():
    """V0 (10 blocks of 4, watermark 0.2: 2 kept free, budget 16, no chunking): 8 blocks may be taken, so
    16 + 16 = 32 tokens fit, 36 do not; a prompt + output of exactly the 16-token budget fits, 17 not; with
    a lookahead of 1 slot, 32 tokens take 33 slots: 9 blocks, refused. V1 (9 blocks, block 0 null: 8
    usable): 32 tokens fit, 33 do not, nor 32 with a lookahead slot."""
    def v0_(lookahead: int = 0, budget: int = 64) -> VllmV0:
        cfg = s.VllmV0(kind="vllm-v0", block_size=4, watermark=0.2, max_num_batched_tokens=budget)
        return VllmV0(cfg, BlockPool(10, 4), lookahead, prompt_limit=budget)
    assert v0_().refusal(Request(0, 0.0, 16, 16)) is None and v0_().refusal(Request(0, 0.0, 4, 32)) is not None
    assert v0_(budget=16).refusal(Request(0, 0.0, 12, 4)) is None and v0_(budget=16).refusal(Request(0, 0.0, 12, 5))
    assert v0_(lookahead=1).refusal(Request(0, 0.0, 16, 16)) is not None

    def v1_(lookahead: int = 0) -> VllmV1:
        cfg = s.Vllm(kind="vllm", max_num_batched_tokens=64, block_size=4)
        return VllmV1(cfg, LruBlockPool(9, 4, 1, False), lookahead)
    assert v1_().refusal(Request(0, 0.0, 16, 16)) is None and v1_().refusal(Request(0, 0.0, 16, 17)) is not None
    assert v1_().refusal(Request(0, 0.0, 4, 32)) is not None and v1_(1).refusal(Request(0, 0.0, 16, 16)) is not None


def test_v1_the_last_token_of_the_budget_goes_to_the_last_running():
    """V1, budget 3: A, B, C (prompt 1, output 3) take 1 token each in it1; in it2 each decodes, the 3rd
    decode taking the budget's last token."""
    sched = VllmV1(s.Vllm(kind="vllm", max_num_batched_tokens=3, block_size=4), LruBlockPool(16, 4, 1, False))
    assert all(sched.add(Request(i, 0.0, 1, 3)) for i in range(3))
    assert [step(sched), step(sched)] == [[(0, 1), (1, 1), (2, 1)]] * 2


def test_sglang_a_two_token_remainder_is_a_prefill():
    """SGLang, budget 8: A (prompt 4, output 5), B (prompt 6). it1: A 4, B's first 4. it2: B's last 2 are
    a prefill batch of their own (more than one token pending), A's decode waits; it3 both decode."""
    sched = Sglang(s.Sglang(kind="sglang", max_num_batched_tokens=8, block_size=4), LruBlockPool(16, 4, 1, False))
    assert sched.add(Request(0, 0.0, 4, 5)) and sched.add(Request(1, 0.0, 6, 3))
    assert [step(sched), step(sched), step(sched)] == [[(0, 4), (1, 4)], [(1, 2)], [(0, 1), (1, 1)]]


def test_v0_admission_and_decode_blocks_with_a_lookahead_and_units_of_two():
    """V0, max 2 running: A, B, C (prompt 8, output 3) wait; it1 admits A and B only. With a lookahead of
    1 slot, a prompt of 8 takes blocks_for(9) = 3 blocks. With prefix caching in units of 2 blocks, A
    (prompt 8, hash 1) publishes its unit (holding 0 blocks of its own); its 9th token needs
    blocks_for(9) - 2 = 1 block of its own."""
    cfg = s.VllmV0(kind="vllm-v0", block_size=4, watermark=0.0, max_num_batched_tokens=64, max_num_seqs=2)
    sched = VllmV0(cfg, BlockPool(40, 4), prompt_limit=64)
    assert all(sched.add(Request(i, 0.0, 8, 3)) for i in range(3))
    assert step(sched) == [(0, 8), (1, 8)]
    look, a = VllmV0(cfg, BlockPool(40, 4), 1, prompt_limit=64), Request(0, 0.0, 8, 3)
    assert look.add(a) and step(look) == [(0, 8)] and a.blocks == 3
    units, a = VllmV0(cfg, BlockPool(40, 4, 2, True), prompt_limit=64), Request(0, 0.0, 8, 3, (1,))
    assert units.add(a) and step(units) == [(0, 8)] and (a.blocks, a.shared) == (0, (1,))
    assert step(units) == [(0, 1)] and a.blocks == 1 and units.pool.used == 3

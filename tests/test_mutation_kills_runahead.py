"""The decode run-ahead's scheduler hooks and the cohort's advance worked by hand (issue 32: the survivors of
the mutation job in sim.apps.serve.schedulers' run-ahead hooks and DecodeCohort.advance). sim.apps.serve.runahead
books a run's KV blocks and cache units at the steps these hooks name; tests/test_serve_runahead.py compares
whole runs with runs off, but its random streams are too slow for the mutation job, so each hook's answer is
pinned here on a request small enough to count its token slots by hand."""

from __future__ import annotations

import pytest

from sim.apps.serve import spec as s
from sim.apps.serve.cohort import DecodeCohort
from sim.apps.serve.kvpool import BlockPool, LruBlockPool
from sim.apps.serve.runahead import _steps_left
from sim.apps.serve.schedulers.base import Request, Scheduler
from sim.apps.serve.schedulers.orca import Orca
from sim.apps.serve.schedulers.vllm import VllmV1
from sim.apps.serve.schedulers.vllm_v0 import VllmV0


def v0(lookahead: int = 0) -> VllmV0:
    """V0 on a caching pool of 32 blocks of 4 tokens, cache units of 2 blocks (8 tokens)."""
    cfg = s.VllmV0(kind="vllm-v0", block_size=4, watermark=0.0, max_num_batched_tokens=256, max_num_seqs=8)
    return VllmV0(cfg, BlockPool(32, 4, 2, caching=True), lookahead=lookahead, prompt_limit=256)


def v1(caching: bool) -> VllmV1:
    """V1 on a pool of 16 blocks of 4 tokens, cache units of one block."""
    cfg = s.Vllm(kind="vllm", block_size=4, max_num_batched_tokens=256, max_num_seqs=8)
    return VllmV1(cfg, LruBlockPool(16, 4, 1, caching))


def holding(private: int, shared: tuple, **counts) -> Request:
    r = Request(0, 0.0, prompt=5, output=20)
    r.blocks, r.shared = private, shared
    for k, v in counts.items():
        setattr(r, k, v)
    return r


@pytest.mark.parametrize("lookahead", [0, 2])
def test_a_shared_unit_counts_toward_the_slots_a_decode_has(lookahead):
    """Kills base.Scheduler.decode_event__mutmut_3 (the shared units subtracted) and decode_need__mutmut_3
    (the private blocks added). A request holding 1 private block and 1 cached unit of 2 blocks has
    (1 + 2) x 4 = 12 token slots, `lookahead` of them kept for draft tokens: the decode step after computed
    12 - lookahead needs a fourth block, the one after 11 - lookahead none (need = (computed + lookahead) // 4
    + 1 - 3: 0 at 11 - lookahead, 1 at 12 to 15 - lookahead, 2 at 16 - lookahead)."""
    sched = v0(lookahead)
    r = holding(1, ("u0",))
    assert sched.decode_event(r) == 12 - lookahead
    assert sched.decode_need(r, 11 - lookahead) == 0
    assert sched.decode_need(r, 12 - lookahead) == 1
    assert sched.decode_need(r, 15 - lookahead) == 1 and sched.decode_need(r, 16 - lookahead) == 2


def test_v1_acts_one_token_before_a_block_fills_under_prefix_caching():
    """Kills vllm.VllmV1.decode_event__mutmut_3 (caching ignored) and __mutmut_13 (a token early). A V1 request
    holding one cached unit and one private block (4-token units) has 8 slots: without caching its next
    event is the block at computed 8; with caching, the step after computed 7 writes token 8, which fills
    unit 1 (cached units 1 -> 2: (1 + 1) x 4 - 1 = 7), one step before the block."""
    r = holding(1, ["u0"])
    plain = v1(caching=False)
    plain.cached[r.idx] = 1
    assert plain.decode_event(r) == 8
    caching = v1(caching=True)
    caching.cached[r.idx] = 1
    assert caching.decode_event(r) == 7


def test_v1_regrow_caches_the_unit_a_decode_fills():
    """Kills vllm.VllmV1.regrow__mutmut_13 (the unit cached for no request). A request (prompt 5, 3 tokens
    generated, computed 7) holds cached unit u0 and a private block; regrow of its step (need 0) writes token
    8, filling unit 1: it becomes a cached block keyed (request 0, unit 1), moved from the private blocks to
    the shared units, and the request's cached units go 1 -> 2. Its next step (computed 8) needs block 3: one
    allocation, the pool's used blocks 2 -> 3."""
    sched = v1(caching=True)
    pool = sched.pool
    assert pool.allocate(2) and pool.publish("u0")
    r = holding(1, ["u0"], computed=7, generated=3)
    sched.cached[r.idx] = 1
    sched.regrow([(r, 0)])
    assert (r.blocks, r.shared, sched.cached[r.idx], pool.used) == (0, ["u0", (0, 1)], 2, 2)
    r.computed, r.generated = 8, 4
    assert sched.decode_need(r, 8) == 1
    sched.regrow([(r, 1)])
    assert (r.blocks, pool.used, sched.cached[r.idx]) == (1, 3, 2)


def test_v1_cohort_regrow_grows_the_members_due_a_block():
    """Kills vllm.VllmV1.cohort_regrow__mutmut_3 (grow_members called without the scheduler). A member with a
    5-token prompt and its first token out (computed 5) holds 2 blocks (8 slots); the cohort's step t writes
    token 5 + t + 1 and needs (5 + t) // 4 + 1 blocks: 2 at steps 0-2, 3 from step 3 (token 9)."""
    sched = v1(caching=False)
    r = holding(2, [], computed=5, generated=1)
    assert sched.pool.allocate(2)
    cohort = DecodeCohort(block_size=4)
    cohort.join([r], sched.pool.unit_blocks)
    held = []
    for step in range(5):
        assert sched.cohort_regrow(cohort) is True
        held.append(r.blocks)
        cohort.hand_out(1.0 + step, {})
    assert held == [2, 2, 2, 3, 3] and sched.pool.used == 3


def test_schedulers_that_decode_through_grow_take_runs():
    """Kills base.Scheduler.runs_ahead__mutmut_3 (runs only on the reference path). V0 and V1 declare
    run_ahead and decode through Scheduler._grow: runs are taken, except on the reference path (issue 30's
    old per-request paths, which the runs do not replay); Orca declares none."""
    assert v0().runs_ahead() and v1(caching=True).runs_ahead()
    orca = Orca(s.Orca(kind="orca", max_num_batched_tokens=64, max_model_len=64), BlockPool(16, 1), prompt_limit=64)
    assert not orca.runs_ahead()
    old = Scheduler.reference
    Scheduler.reference = True
    try:
        assert not v0().runs_ahead() and not v1(caching=False).runs_ahead()
    finally:
        Scheduler.reference = old


def test_advance_moves_the_cohort_as_its_hand_outs_would():
    """Kills cohort.DecodeCohort.advance__mutmut_3 (the tick counted down) and __mutmut_13 (KV divided by the
    steps). Two members (computed 5 and 9) handed out once at t = 1, then three run steps at 1.5, 2.5 and 4:
    each step every member computes one more token, so the tick goes up 3 and the summed KV by 2 x 3 = 6; the
    last token time is 4. A plain hand-out at 5 after that: KV 2 more; five hand-outs in all, so each member
    has computed 5 more tokens, and its largest gap (0.5, 0.5, 1, 1.5, 1 from its previous token at 0.5) is the
    run's 4 - 2.5 = 1.5."""
    reqs = [holding(2, (), computed=5, generated=1, last_at=0.5), holding(3, (), computed=9, generated=1, last_at=0.5)]
    reqs[1].idx = 1
    cohort = DecodeCohort(block_size=4)
    cohort.join(reqs, 1)
    cohort.hand_out(1.0, {})
    tick, kv = cohort.tick, cohort.kv
    cohort.advance([1.5, 2.5, 4.0])
    assert (cohort.tick, cohort.kv, cohort.last) == (tick + 3, kv + 6, 4.0)
    cohort.hand_out(5.0, {})
    assert cohort.kv == kv + 8
    cohort.dissolve()
    assert [r.max_tbt for r in reqs] == [1.5, 1.5]
    assert [r.computed for r in reqs] == [5 + 5, 9 + 5]


def _decoding(sched: Scheduler, last_at: float, published: bool) -> list:
    """One running request of 5 prompt tokens, 3 of its 20 out (computed 5 + 3 - 1 = 7: one token pending)."""
    r = holding(0, (), generated=3, computed=7, last_at=last_at, published=published)
    sched.running[:] = [r]
    return [(r, 1)]


def test_steps_left_until_the_first_member_finishes():
    """Kills runahead._steps_left__mutmut_23 (the published test inverted) and __mutmut_33 (a previous token at
    0 s refused). The one member has 20 - 3 = 17 tokens to go: 17 steps, its previous token at 0 s or 0.5 s.
    Under prefix caching a member whose prompt is not yet published cannot run ahead (0); a request with no
    token out yet (last_at -1) neither."""
    sched = v0()   # a caching pool
    assert _steps_left(sched, _decoding(sched, 0.0, published=True)) == 17
    assert _steps_left(sched, _decoding(sched, 0.5, published=True)) == 17
    assert _steps_left(sched, _decoding(sched, 0.5, published=False)) == 0
    assert _steps_left(sched, _decoding(sched, -1.0, published=True)) == 0

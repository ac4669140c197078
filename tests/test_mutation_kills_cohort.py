"""The decode cohort's block growth worked by hand (issue 32: survivors of the mutation job on
sim.apps.serve.cohort's DecodeCohort.grow). The cohort books a member's next block under the step
whose token first needs it, with the scheduler's lookahead slots counted (Scheduler._grow)."""

from __future__ import annotations

from sim.apps.serve.cohort import DecodeCohort
from sim.apps.serve.kvpool import BlockPool
from sim.apps.serve.schedulers.base import Request


def test_blocks_grow_at_the_steps_the_lookahead_slots_need_them():
    """Block size 4, 2 lookahead slots. A request of a 5-token prompt, its first token out (computed 5,
    generated 1), holds the 2 blocks that prefill allocated for 5 + 2 slots. Step t (t = 0, 1, ...) computes
    token 5 + t and needs (5 + t + 2) // 4 + 1 blocks: 3 from step 1 (slots up to 8), 4 from step 5 (up to
    12), 5 from step 9. The blocks held after each step's grow, steps 0-9: 2, 3, 3, 3, 3, 4, 4, 4, 4, 5;
    whole blocks, taken from the pool as they grow and on the request once the cohort syncs (the member's
    later blocks are its KV phase's, booked per phase: DecodeCohort.grow)."""
    pool = BlockPool(total_blocks=16, block_size=4)
    r = Request(0, 0.0, prompt=5, output=20)
    r.computed, r.generated, r.blocks = 5, 1, 2
    assert pool.allocate(2)
    cohort = DecodeCohort(block_size=4, lookahead=2)
    cohort.join([r], pool.unit_blocks)
    held, used = [], []
    for step in range(10):
        assert cohort.grow(pool)
        used.append(pool.used)
        cohort.sync()
        held.append(r.blocks)
        cohort.hand_out(1.0 + step, {})
    assert held == [2, 3, 3, 3, 3, 4, 4, 4, 4, 5]
    assert used == held
    assert type(r.blocks) is int and pool.used == 5


def test_cache_units_filled_when_caching_starts_after_the_first_step():
    """Cache units of 4 tokens; a member joins at step 0 with computed 5, generated 1 (base 5, lag 4). The
    first call to `filling` comes at step 1 (computed 6); the step at t computes token 5 + t and fills a unit
    when (5 + t + 1) % 4 == 0: at t = 2 (computed 7, generated 3) and t = 6 (11, 7), none in between."""
    r = Request(0, 0.0, prompt=5, output=20)
    r.computed, r.generated, r.blocks = 5, 1, 1
    cohort = DecodeCohort(block_size=16)
    cohort.join([r], 1)
    cohort.hand_out(1.0, {})
    fills = []
    for step in range(1, 8):
        fills += [(cohort.tick, c, g) for _, c, g in cohort.filling(4)]
        cohort.hand_out(1.0 + step, {})
    assert fills == [(2, 7, 3), (6, 11, 7)]


def test_shared_gap_adds_to_a_count_already_there():
    """The gaps map counts tokens by their previous token's time and is shared with the per-request path.
    A member (previous token at 0.5) gets its token at 1.0: one gap from 0.5. Then the per-request path
    counts 3 tokens whose previous was at 1.0, and the member's next token at 2.0 adds one more: 4."""
    r = Request(0, 0.0, prompt=5, output=20)
    r.computed, r.generated, r.blocks, r.last_at = 5, 1, 1, 0.5
    cohort = DecodeCohort(block_size=16)
    cohort.join([r], 1)
    gaps: dict[float, int] = {}
    cohort.hand_out(1.0, gaps)
    assert gaps == {0.5: 1}
    gaps[1.0] = 3
    cohort.hand_out(2.0, gaps)
    assert gaps == {0.5: 1, 1.0: 4}

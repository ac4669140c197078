"""Hand-worked scenarios for every scheduler (issue 32): a few requests with known lengths and a
tiny KV pool; the schedule iteration by iteration, the blocks, preemptions, prefix-cache hits and
token times are worked out by hand in each docstring (as vLLM's own scheduler tests do). Each step
is checked against the run-wide invariants (sim.apps.serve.debug_checks) as well.

Blocks of 4 tokens unless said; `step` does what the engine does with a batch
(sim.apps.serve.simulator.ServeSim._apply, without speculation): computed tokens advance, a request
whose KV caught up emits a token (and publishes its prompt's prefix units once), a finished one leaves.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from sim.apps.serve import debug_checks
from sim.apps.serve import spec as s
from sim.apps.serve.kvpool import BlockPool, LruBlockPool
from sim.apps.serve.schedulers import Batch, Request, Scheduler
from sim.apps.serve.schedulers.orca import Orca
from sim.apps.serve.schedulers.sarathi import Sarathi
from sim.apps.serve.schedulers.static import Static
from sim.apps.serve.schedulers.vllm import VllmV1
from sim.apps.serve.schedulers.vllm_v0 import VllmV0
from sim.apps.serve.metrics import stats, summarize, utilization
from sim.apps.serve.simulator import DONE, ServeResult, ServeSim
from sim.apps.serve.iteration import Iteration, features
from sim.apps.serve.stepcost import Surrogate, _grid
from sim.apps.serve.traces import Requests


def step(sched: Scheduler) -> list[tuple[int, int]]:
    batch = sched.schedule(0.0, True)
    return [] if batch is None else apply(sched, batch)


def apply(sched: Scheduler, batch: Batch) -> list[tuple[int, int]]:
    """What the engine does with a scheduled batch (module doc), the invariants checked around it."""
    debug_checks.check_batch(sched, batch)
    out = [(r.idx, q) for r, q in batch.entries]
    for r, q in batch.entries:
        r.computed += q
        if r.computed < r.prompt + r.generated:
            continue
        r.generated += 1
        if sched.pool.caching and not r.published:
            sched.publish(r)
        if r.generated >= r.output:
            sched.finish(r)
    debug_checks.check_blocks(sched)
    return out


def v0(blocks: int, budget: int | None = None, watermark: float = 0.0, caching: bool = False,
       unit_blocks: int = 1, cls: type[VllmV0] = VllmV0) -> VllmV0:
    kind = "sarathi" if cls is Sarathi else "vllm-v0"
    cfg = (s.Sarathi if cls is Sarathi else s.VllmV0)(kind=kind, block_size=4, watermark=watermark,
                                                       max_num_batched_tokens=budget)
    sched = cls(cfg, BlockPool(blocks, 4, unit_blocks, caching), prompt_limit=budget if cls.whole_prompts else None)
    sched.max_model_len = 1 << 20
    return sched


# -- vLLM V0 -------------------------------------------------------------------------------------

@pytest.mark.parametrize("second_prompt, admitted", [(32, True), (36, False)])
def test_v0_watermark_keeps_its_share_of_the_pool_free(second_prompt, admitted):
    """20 blocks, watermark 0.1: int(0.1 x 20) = 2 blocks stay free when a prompt is admitted.
    A (40 tokens: 10 blocks) is admitted, 10 free. B needs 8 blocks (32 tokens): 10 - 8 = 2, not below
    the watermark: admitted in the same prefill iteration. With 36 tokens (9 blocks) 10 - 9 = 1 < 2:
    B waits, though its 9 blocks would fit the 10 free ones; A decodes alone next."""
    sched = v0(blocks=20, watermark=0.1)
    a, b = Request(0, 0.0, prompt=40, output=2), Request(1, 0.0, prompt=second_prompt, output=2)
    assert sched.watermark == 2 and sched.add(a) and sched.add(b)
    first = step(sched)
    assert first == ([(0, 40), (1, 32)] if admitted else [(0, 40)])
    assert sched.pool.used == (18 if admitted else 10)
    # Next: decodes (A's 41st token opens its 11th block); B's prefill must wait for A to finish.
    assert step(sched) == ([(0, 1), (1, 1)] if admitted else [(0, 1)])
    if not admitted:
        assert a.generated == 2 and step(sched) == [(1, 36)]


def test_v0_prefill_first_then_decodes_and_recompute_preemption_of_the_latest():
    """6 blocks, no watermark, budget 64. A (prompt 8, output 7), B (prompt 8, output 6).
    it1: prefill A 8, B 8 (2 blocks each, 4 used); each emits token 1.
    it2: decodes: token 9 of each opens a 3rd block: 6 used; tokens 2.
    it3-it5: tokens 10-12 fit the 3rd blocks; tokens 3, 4, 5.
    it6: A's token 13 needs a 4th block, none free: the most recently arrived running (B) is preempted
         (recompute: its 3 blocks freed, computed = 0, to the front of waiting); A takes a block, emits 6.
    it7: prefill first, but B's 8 + 5 = 13 tokens need 4 blocks and 6 - 4 = 2 are free: B waits. A decodes
         its 7th and last token (its 14th fits its 4th block); A ends, its 4 blocks freed.
    it8: B re-prefills 13 tokens (4 blocks) and emits token 6: done."""
    sched = v0(blocks=6, budget=64)
    a, b = Request(0, 0.0, prompt=8, output=7), Request(1, 0.0, prompt=8, output=6)
    assert sched.add(a) and sched.add(b)
    got = [step(sched) for _ in range(8)]
    assert got == [[(0, 8), (1, 8)]] + [[(0, 1), (1, 1)]] * 4 + [[(0, 1)], [(0, 1)], [(1, 13)]]
    assert sched.preemptions == 1 and b.preemptions == 1 and a.preemptions == 0
    assert a.generated == 7 and b.generated == 6 and not sched.busy() and sched.pool.used == 0


def test_v0_swap_preemption_and_swap_in():
    """The scenario above with preemption: swap (6 blocks, budget 64; A prompt 8 output 7, B 8 and 7).
    it1-it5 as above. it6: A's token 13 needs a 4th block: B (12 tokens computed, 3 blocks) is swapped out
    (3 blocks over the link; B keeps its 12 computed tokens) and A runs alone. it7: no prefill while B is
    swapped; A's 7th token (its 14th fits its 4th block); B cannot come back (2 free < 3); A ends.
    it8: B is swapped in (3 blocks back over the link) and decodes token 13, which needs a 4th block:
    blocks_for(13) = 4, allocated with the swap-in (this scenario found it missing: the debug checks'
    blocks-per-computed-token rule)."""
    cfg = s.VllmV0(kind="vllm-v0", block_size=4, watermark=0.0, max_num_batched_tokens=64, preemption="swap")
    sched = VllmV0(cfg, BlockPool(6, 4), prompt_limit=64)
    sched.max_model_len = 1 << 20
    a, b = Request(0, 0.0, prompt=8, output=7), Request(1, 0.0, prompt=8, output=7)
    assert sched.add(a) and sched.add(b)
    got = [step(sched) for _ in range(7)]
    assert got == [[(0, 8), (1, 8)]] + [[(0, 1), (1, 1)]] * 4 + [[(0, 1)], [(0, 1)]]
    assert sched.swapped_out_blocks == 3 and b.computed == 12 and list(sched.swapped) == [b]
    assert step(sched) == [(1, 1)]
    assert sched.swapped_in_blocks == 3 and b.blocks == 4


def test_v0_prefix_cache_evicts_the_least_recently_used_unit():
    """6 blocks, prefix caching, one block a unit. A (prompt 5, hash 10) and then B (prompt 5, hash 20),
    one output token each, run one after the other: each publishes its full first block, then ends;
    cached idle units in order of release: 10, then 20, and 4 plain free blocks.
    C (20 tokens, no hashes: 5 blocks) needs one more block than the 4 free: it evicts ONE unit, the least
    recently used, 10. Then D (prompt 5, hash 20) hits 4 tokens and computes 1; E (hash 10) hits nothing."""
    sched = v0(blocks=6, caching=True)
    reqs = [Request(0, 0.0, 5, 1, (10,)), Request(1, 0.0, 5, 1, (20,)), Request(2, 0.0, 20, 1),
            Request(3, 0.0, 5, 1, (20,)), Request(4, 0.0, 5, 1, (10,))]
    got = []
    for r in reqs:
        assert sched.add(r)
        got.append(step(sched))
    assert got == [[(0, 5)], [(1, 5)], [(2, 20)], [(3, 1)], [(4, 5)]]
    assert [r.prefix_hit for r in reqs] == [0, 0, 0, 4, 0]
    assert sched.pool.evictions == 1    # E's 2 blocks come from the 5 plain free ones


def test_v0_multi_block_prefix_units():
    """12 blocks of 4 tokens, a prefix unit of 2 blocks (8 tokens). A (17 tokens, hashes 1, 2; one output
    token) takes blocks_for(17) = 5 blocks, publishes its 17 // 8 = 2 whole units (4 blocks) and keeps 1
    own block; at its end the 2 units stay cached, idle. B (same prompt, 2 output tokens) may hit
    (17 - 1) // 8 = 2 units = 16 tokens: it holds those 4 blocks, allocates 5 - 4 = 1, computes 1 token.
    In use while B runs: 4 shared + 1 own = 5. B's 18th token fits its own block."""
    sched = v0(blocks=12, caching=True, unit_blocks=2)
    a, b = Request(0, 0.0, 17, 1, (1, 2)), Request(1, 0.0, 17, 2, (1, 2))
    assert sched.add(a) and step(sched) == [(0, 17)]
    assert sched.pool.used == 0 and sched.pool.available == 12 and len(sched.pool.idle) == 2
    assert sched.add(b) and step(sched) == [(1, 1)]
    assert b.prefix_hit == 16 and b.blocks == 1 and b.shared == (1, 2) and sched.pool.used == 5
    assert step(sched) == [(1, 1)] and b.generated == 2 and sched.pool.used == 0


# -- Sarathi (vLLM V0 chunked prefill) -------------------------------------------------------------

def test_sarathi_charges_decodes_to_the_budget():
    """Budget 8 tokens, 20 blocks. A (prompt 4, output 3), B (prompt 16, output 2).
    it1: no decodes; prefills A 4 (budget 8 - 4 = 4), B's first chunk 4 (B's whole prompt, 4 blocks, is
         reserved at admission): A emits token 1.
    it2: decodes first: A 1 (token 5 opens its 2nd block); budget 8 - 1 = 7: B's chunk 7 (4+7 = 11).
    it3: A 1 (its 3rd and last token); B's last chunk 5 (min(5, 7)): B emits token 1.
    it4: B decodes token 2 (its 17th token opens a 5th block) and ends."""
    sched = v0(blocks=20, budget=8, cls=Sarathi)
    a, b = Request(0, 0.0, prompt=4, output=3), Request(1, 0.0, prompt=16, output=2)
    assert sched.add(a) and sched.add(b)
    got = [step(sched) for _ in range(4)]
    assert got == [[(0, 4), (1, 4)], [(0, 1), (1, 7)], [(0, 1), (1, 5)], [(1, 1)]]
    assert all(sum(q for _, q in it) <= 8 for it in got)


# -- Orca ----------------------------------------------------------------------------------------

def orca(pool_tokens: int, max_model_len: int) -> Orca:
    sched = Orca(s.Orca(kind="orca", max_model_len=max_model_len), BlockPool(pool_tokens, 1))
    sched.max_model_len = max_model_len
    return sched


def test_orca_reserves_max_model_len_per_request():
    """A pool of 40 token slots, max_model_len 16: each admitted request reserves 16 slots, whatever its
    length. A, B, C (prompt 4, output 2) arrive together: A and B take 32 slots; C's 16 do not fit the 8
    left, though its 6 tokens would. it1: A 4, B 4. it2: A 1, B 1 (both end, 32 slots freed; C is still
    refused in this iteration, admission comes before the finish). it3: C 4. it4: C 1."""
    sched = orca(40, 16)
    reqs = [Request(i, 0.0, prompt=4, output=2) for i in range(3)]
    assert all(sched.add(r) for r in reqs)
    got = [step(sched) for _ in range(2)]
    assert got == [[(0, 4), (1, 4)], [(0, 1), (1, 1)]]
    assert [r.blocks for r in reqs] == [0, 0, 0] and sched.pool.used == 0
    assert [step(sched), step(sched)] == [[(2, 4)], [(2, 1)]]


def test_orca_charges_running_decodes_to_the_token_budget():
    """Budget 8 tokens, a pool of 64 slots, max_model_len 16. A (prompt 4, output 3) runs alone: it1 A 4.
    B (prompt 8, output 1) arrives: in it2 A's decode takes 1 token, leaving 7, and B's 8-token prompt
    (Orca does not chunk) waits; so in it3 (A's last token). it4: B 8. A full budget for prompts beside
    the decodes would have run A 1 + B 8 = 9 tokens in it2."""
    sched = Orca(s.Orca(kind="orca", max_num_batched_tokens=8, max_model_len=16), BlockPool(64, 1), prompt_limit=8)
    sched.max_model_len = 16
    a, b = Request(0, 0.0, prompt=4, output=3), Request(1, 0.0, prompt=8, output=1)
    assert sched.add(a)
    assert step(sched) == [(0, 4)]
    assert sched.add(b)
    assert [step(sched), step(sched), step(sched)] == [[(0, 1)], [(0, 1)], [(1, 8)]]


# -- Static ----------------------------------------------------------------------------------------

def static(batch: int, pool_tokens: int) -> Static:
    return Static(s.Static(kind="static", batch_size=batch), BlockPool(pool_tokens, 1))


def test_static_batch_is_padded_and_runs_to_its_longest_output():
    """Batch size 2, a pool of 20 token slots. A (prompt 4, output 2), B (6, 3), C (3, 1).
    A batch of A and B is shaped by its longest prompt (6) and output (3): (6 + 3) x 2 = 18 slots fit 20.
    step 0: both prompts, padded to 6 each; step 1: decodes at KV 7; step 2: only B is live, the batch
    still runs 2 sequences at KV 8 (A's slot padded). Then C alone: its prompt of 3."""
    sched = static(2, 20)
    reqs = [Request(0, 0.0, 4, 2), Request(1, 0.0, 6, 3), Request(2, 0.0, 3, 1)]
    assert all(sched.add(r) for r in reqs)
    pads = []
    for _ in range(4):
        batch = sched.schedule(0.0, False)
        pads.append(([(r.idx, q) for r, q in batch.entries], batch.padded))
        for r, q in batch.entries:
            r.computed += q
            r.generated += 1
            if r.generated >= r.output:
                sched.finish(r)
    assert pads == [([(0, 4), (1, 6)], [(6, 6)] * 2), ([(0, 1), (1, 1)], [(1, 7)] * 2),
                    ([(1, 1)], [(1, 8)] * 2), ([(2, 3)], [(3, 3)])]


def test_static_batch_only_takes_what_its_kv_fits():
    """With 17 slots, A and B's batch would need 18: A runs alone (4 + 2 = 6 slots)."""
    sched = static(2, 17)
    assert sched.add(Request(0, 0.0, 4, 2)) and sched.add(Request(1, 0.0, 6, 3))
    batch = sched.schedule(0.0, True)
    assert [(r.idx, q) for r, q in batch.entries] == [(0, 4)] and batch.padded == [(4, 4)]


# -- vLLM V1 ---------------------------------------------------------------------------------------

def v1(blocks: int, unit_blocks: int = 1) -> VllmV1:
    cfg = s.Vllm(kind="vllm", max_num_batched_tokens=64, block_size=4)
    return VllmV1(cfg, LruBlockPool(blocks, 4, unit_blocks, True))


def test_v1_fully_cached_prompt_still_computes_its_last_block():
    """10 blocks (9 usable), one block a unit. A (prompt 8, hashes 1, 2; one output token) caches both its
    blocks as they fill. B, the same prompt, may hit at most (8 - 1) // 4 = 1 unit (vLLM: a hit stops one
    token short of the prompt, so the last token's logits are computed): 4 tokens hit, 4 computed."""
    sched = v1(10)
    a, b = Request(0, 0.0, 8, 1, (1, 2)), Request(1, 0.0, 8, 2, (1, 2))
    assert sched.add(a) and step(sched) == [(0, 8)]
    assert sched.add(b) and step(sched) == [(1, 4)]
    assert b.prefix_hit == 4 and b.generated == 1


def test_v1_multi_block_prefix_units():
    """6 blocks (5 usable), a unit of 2 blocks (8 tokens). A (17 tokens, hashes 1, 2) takes all 5 blocks and
    caches its 2 whole units as they fill; at its end they join the free queue. B (the same prompt, 2
    outputs) hits (17 - 1) // 8 = 2 units, 16 tokens. The admission gate: B's whole sequence less its hit,
    5 - 2 x 2 = 1 block, plus the 4 idle hit blocks it takes out of the free queue, is 5 of the 5 free: B is
    admitted, holds the 4 blocks and allocates 1 for token 17. In use: 5 of 5."""
    sched = v1(6, unit_blocks=2)
    a, b = Request(0, 0.0, 17, 1, (1, 2)), Request(1, 0.0, 17, 2, (1, 2))
    assert sched.add(a) and step(sched) == [(0, 17)] and sched.pool.used == 0
    assert sched.add(b) and step(sched) == [(1, 1)]
    assert b.prefix_hit == 16 and b.blocks == 1 and sched.pool.used == 5


# -- token times through the engine ------------------------------------------------------------------

class LinearCost:
    """1 ms per iteration plus 0.1 ms per token (of the padded sequences for a static batch)."""
    keys: list[str] = []

    def __call__(self, it: Iteration) -> tuple[float, float]:
        return 1e-3 + 1e-4 * it.tokens, 0.0


def run_result(sched: Scheduler, prompts: list[int], outputs: list[int]) -> ServeResult:
    n = len(prompts)
    reqs = Requests(np.zeros(n), np.array(prompts), np.array(outputs))
    serving = SimpleNamespace(speculative=None, arrivals=SimpleNamespace())
    # No stack: no engine overheads, no async scheduling (each step scheduled when the last ends).
    setup = SimpleNamespace(scheduler=lambda _: sched, file=SimpleNamespace(serving=serving, stack=None), machine=None,
                            target_cost=LinearCost(),
                            draft_cost=None, groups=1, block_bytes=0.0, swap_bytes_per_s=None)
    res = ServeSim(setup, reqs).run()
    assert (res.requests["status"] == DONE).all()
    return res


def run(sched: Scheduler, prompts: list[int], outputs: list[int]) -> dict[str, np.ndarray]:
    return run_result(sched, prompts, outputs).requests


def test_static_token_times():
    """The static scenario above, timed: step 0 runs 2 x 6 padded tokens (2.2 ms), steps 1 and 2 two
    sequences of one token (1.2 ms each), C's prompt 3 tokens (1.3 ms).
    A: first token 2.2 ms, last 3.4 ms; B: 2.2 and 4.6 ms; C: 5.9 ms."""
    rec = run(static(2, 20), [4, 6, 3], [2, 3, 1])
    assert rec["first_token_s"] == pytest.approx([2.2e-3, 2.2e-3, 5.9e-3], rel=1e-12)
    assert rec["finish_s"] == pytest.approx([3.4e-3, 4.6e-3, 5.9e-3], rel=1e-12)


def test_orca_token_times():
    """The Orca scenario above, timed: it1 8 tokens (1.8 ms), it2 2 (1.2 ms: 3.0), it3 4 (1.4 ms: 4.4),
    it4 1 (1.1 ms: 5.5). A, B: first token 1.8 ms, last 3.0 ms; C: 4.4 and 5.5 ms (queued 3.0 ms)."""
    rec = run(orca(40, 16), [4, 4, 4], [2, 2, 2])
    assert rec["first_token_s"] == pytest.approx([1.8e-3, 1.8e-3, 4.4e-3], rel=1e-12)
    assert rec["finish_s"] == pytest.approx([3.0e-3, 3.0e-3, 5.5e-3], rel=1e-12)
    assert rec["scheduled_s"] == pytest.approx([0.0, 0.0, 3.0e-3], rel=1e-12, abs=1e-15)


def test_sarathi_token_times():
    """The Sarathi scenario above, timed: 8, 8, 6 and 1 tokens: 1.8, 1.8, 1.6, 1.1 ms.
    A: first token 1.8 ms, last 5.2 ms (3 tokens); B: first 5.2 ms, last 6.3 ms."""
    rec = run(v0(blocks=20, budget=8, cls=Sarathi), [4, 16], [3, 2])
    assert rec["first_token_s"] == pytest.approx([1.8e-3, 5.2e-3], rel=1e-12)
    assert rec["finish_s"] == pytest.approx([5.2e-3, 6.3e-3], rel=1e-12)
    assert rec["max_tbt_s"][0] == pytest.approx(1.8e-3, rel=1e-12)


# -- the surrogate step cost -------------------------------------------------------------------------

class SquareCost:
    """An exact cost nonlinear in tokens (1 ms + 1 us x tokens^2; joules twice the seconds)."""
    keys: list[str] = []

    def device(self, it: Iteration) -> tuple[float, float]:
        t = 1e-3 + 1e-6 * it.tokens ** 2
        return t, 2 * t

    def engine(self, c, it):
        return c


def test_surrogate_equals_exact_at_grid_points_and_interpolates_linearly_between():
    """Pure prefill P(T) on the grid 2, 4, 8, 16, 32, 48, 64 (max_tokens 64): at each point the exact cost;
    at T = 24, halfway between 16 and 32, the mean of theirs: 1 ms + (256 + 1024) / 2 us = 1.640 ms (the
    exact cost is 1.576 ms). Pure decode D(n) on 1, 2, 4, 8: at n = 3 the mean of n = 2 and 4 (KV 1
    each): 1 ms + (4 + 16) / 2 us = 1.010 ms."""
    sur = Surrogate(SquareCost(), max_tokens=64, max_decode=8, max_kv=128)
    assert _grid(64) == [0, 1, 2, 4, 8, 16, 32, 48, 64]
    for t in (2, 4, 8, 16, 32, 48, 64):
        it = features([(t, t)])
        assert sur.device(it) == pytest.approx(SquareCost().device(it), rel=1e-9, abs=0)
    assert sur.device(features([(24, 24)])) == pytest.approx((1.640e-3, 3.280e-3), rel=1e-9)
    assert sur.device(features([(1, 1)] * 3)) == pytest.approx((1.010e-3, 2.020e-3), rel=1e-9)
    debug_checks.surrogate_at_grid(sur)


def test_summary_of_the_static_scenario_by_hand():
    """The static scenario's summary (sim.apps.serve.metrics), ms: A (2 tokens) first 2.2, last 3.4;
    B (3) 2.2 and 4.6; C (1) queued 4.6, first and last 5.9; all arrive at 0.
    TTFT 2.2 2.2 5.9: mean 3.4333, p50 2.2 (the smallest with half the weight at or below), p90 5.9.
    TPOT (last - first) / (tokens - 1): 1.2, 1.2, none for C. E2E 3.4 4.6 5.9. Gaps: 1.2 twice at 3.4
    (A and B) and once at 4.6: TBT mean 1.2. Span 5.9 ms: 6 tokens, 3 requests; SLO TTFT <= 3 ms met by A
    and B (2 requests, 5 tokens). Iterations 2.2, 1.2, 1.2, 1.3 ms running 10, 2, 1, 3 tokens over 2, 2, 2, 1
    sequences: duration-weighted 29.5 / 5.9 = 5 tokens and 10.5 / 5.9 sequences; busy all of the 5.9 ms."""
    res = run_result(static(2, 20), [4, 6, 3], [2, 3, 1])
    out = summarize(res, {"ttft_p90": 3e-3})
    ms = 1e-3
    assert (out["requests"], out["completed"], out["rejected"], out["iterations"]) == (3, 3, 0, 4)
    assert out["duration_s"] == pytest.approx(5.9 * ms, rel=1e-12)
    assert out["throughput_tok_s"] == pytest.approx(6 / (5.9 * ms), rel=1e-12)
    assert out["throughput_req_s"] == pytest.approx(3 / (5.9 * ms), rel=1e-12)
    assert out["goodput_req_s"] == pytest.approx(2 / (5.9 * ms), rel=1e-12)
    assert out["goodput_tok_s"] == pytest.approx(5 / (5.9 * ms), rel=1e-12)
    lat = out["latency"]
    assert [lat["ttft"][k] / ms for k in ("mean", "p50", "p90", "p99", "max")] == pytest.approx(
        [10.3 / 3, 2.2, 5.9, 5.9, 5.9], rel=1e-12)
    assert [lat["tpot"][k] / ms for k in ("mean", "p50", "max")] == pytest.approx([1.2, 1.2, 1.2], rel=1e-12)
    assert [lat["e2e"][k] / ms for k in ("mean", "p50", "max")] == pytest.approx([13.9 / 3, 4.6, 5.9], rel=1e-12)
    assert [lat["queue"][k] / ms for k in ("mean", "max")] == pytest.approx([4.6 / 3, 4.6], rel=1e-12)
    assert [lat["tbt"][k] / ms for k in ("mean", "p50", "max")] == pytest.approx([1.2, 1.2, 1.2], rel=1e-12)
    assert out["tokens_per_iteration"]["mean"] == pytest.approx(5.0, rel=1e-12)
    assert out["batch_size"]["mean"] == pytest.approx(10.5 / 5.9, rel=1e-12)
    assert out["engine_busy"] == pytest.approx(1.0, rel=1e-12)
    assert out["slo_met"] == {"ttft_p90": pytest.approx(5.9 / 3, rel=1e-12)}
    # A static batch holds (longest prompt + longest output) slots per sequence for its whole run: A and B
    # 2 x (6 + 3) = 18 of 20 through their first two iterations (2.2 and 1.2 ms); the pool is read after each
    # iteration's hand-out, so the iterations that finish a batch (1.2 ms, then C's 1.3 ms) read 0.
    assert out["kv_blocks_total"] == 20
    assert out["kv_usage_mean"] == pytest.approx(18 * (2.2 + 1.2) / 5.9 / 20, rel=1e-12)


def test_utilization_folds_numbered_members_into_one_family():
    """Busy seconds over a 4 s run: gpu 2 s -> 0.5; pim.stack0 and pim.stack1 (1 s and 3 s) -> one entry
    pim.stack0-1 at their mean 0.5; their .compute parts apart: (1 + 0) / 2 / 4; over 2 instances, halved."""
    busy = {"gpu": 2.0, "pim.stack0": 1.0, "pim.stack1": 3.0, "pim.stack0.compute": 1.0, "pim.stack1.compute": 0.0}
    assert utilization(busy, 4.0) == {"gpu": 0.5, "pim.stack0-1": 0.5, "pim.stack0-1.compute": 0.125}
    assert utilization({"pim.stack3": 2.0}, 4.0, instances=2) == {"pim.stack3": 0.25}
    assert utilization(busy, 0.0) == {}


def test_quantiles_are_the_inverted_cdf():
    """The p-quantile is the smallest value with at least p of the weight at or below it: of 1 and 2, p50 is
    1 (half the weight at or below 1); of 1, 2, 3 weighted 1, 1, 2, p50 is 2 (2 of 4 at or below), p90 3.
    NaNs (one-token TPOTs) are left out of an unweighted sample."""
    assert stats(np.array([1.0, 2.0]))["p50"] == 1.0
    w = stats(np.array([3.0, 1.0, 2.0]), np.array([2.0, 1.0, 1.0]))
    assert (w["p50"], w["p90"], w["max"], w["mean"]) == (2.0, 3.0, 3.0, 2.25)
    assert stats(np.array([np.nan, 4.0]))["mean"] == 4.0


class FeatureCost:
    """An exact cost linear in the features the surrogate's tables interpolate (tokens, decode sequences,
    their KV, prefill chunks): the tables are differences and slopes of it, so interpolating them must give
    it back exactly, on the grid or off it. (Attended pairs are left out: they are quadratic in a chunk's
    tokens, which the tables are indexed by, so a pairs term is interpolated, not reproduced.)"""
    keys: list[str] = []

    def device(self, it: Iteration) -> tuple[float, float]:
        t = 1e-3 + 1e-6 * it.tokens + 2e-9 * it.decode_kv + 4e-6 * it.chunks + 5e-7 * it.n_decode
        return t, 3 * t

    def engine(self, c, it):
        return c


@pytest.mark.parametrize("seqs", [
    [(1, 40)] * 5,                                   # decodes at KV 40 (the kv slope table)
    [(1, 40), (1, 900), (1, 7)],                     # mixed KV lengths
    [(1, 2000)] * 3,                                 # KV beyond the grid's last point (extended linearly)
    [(1, 30)] * 6 + [(37, 37)],                      # decodes with a fresh chunk (the M table)
    [(1, 30)] * 3 + [(20, 120)],                     # a chunk after a 100-token prefix (pairs)
    [(12, 12), (17, 17), (9, 9)],                    # three fresh chunks (the C table)
    [(5, 5), (40, 40)],                              # two uneven fresh chunks (the split table)
    [(1, 64)] * 2 + [(10, 50), (13, 13)],            # all of it at once
])
def test_surrogate_reproduces_a_cost_linear_in_its_features(seqs):
    sur = Surrogate(FeatureCost(), max_tokens=64, max_decode=8, max_kv=1024)
    it = features(seqs)
    assert sur.device(it) == pytest.approx(FeatureCost().device(it), rel=1e-9, abs=0)
    assert sur.exact_fallbacks == 0

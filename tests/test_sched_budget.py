"""The token budget is a hard cap on every iteration of the V0 schedulers (vllm-v0, sarathi), swap-ins
included, worked by hand (issue 32's run-wide invariant "tokens per iteration <= budget", which
sim.apps.serve.debug_checks now checks in swapping iterations too).

vLLM V0 charges a swapped-in request's tokens to the budget and stops swapping in at the first one it
cannot take (vllm/core/scheduler.py, _schedule_swapped: `budget.can_schedule`), and its chunked scheduler
stops scheduling running requests when the budget is spent (_schedule_running: no tokens left, break).
vLLM refuses `max_num_batched_tokens < max_num_seqs` outright (vllm/config.py, SchedulerConfig._verify_args:
"max_num_batched_tokens (...) must be greater than or equal to max_num_seqs (...)"); sim warns instead
(tests/test_robust_serve_checks.py) and keeps the budget as the cap, so decodes over it wait a step.
Blocks of 4 tokens; `step` (tests/test_serve_scenarios.py) applies a batch as the engine does and checks
the invariants around it."""

from __future__ import annotations

from collections import deque

from sim.apps.serve import spec as s
from sim.apps.serve.kvpool import BlockPool
from sim.apps.serve.schedulers import Request
from sim.apps.serve.schedulers.sarathi import Sarathi
from sim.apps.serve.schedulers.vllm_v0 import VllmV0
from tests.test_serve_scenarios import step


def _sched(cls: type[VllmV0], blocks: int, budget: int, swap: bool = False) -> VllmV0:
    cfg_cls = s.Sarathi if cls is Sarathi else s.VllmV0
    cfg = cfg_cls(kind="sarathi" if cls is Sarathi else "vllm-v0", block_size=4, watermark=0.0,
                  max_num_batched_tokens=budget, preemption="swap" if swap else "recompute")
    sched = cls(cfg, BlockPool(blocks, 4), prompt_limit=budget if cls.whole_prompts else None)
    sched.max_model_len = 1 << 20
    return sched


def test_sarathi_charges_a_swapped_in_request_to_the_budget():
    """Sarathi, budget 2 tokens, 2 blocks, swap preemption. A (prompt 3, output 5), B (1, 3), C (2, 1).
    it1: A's first chunk 2 (A's 1 block reserved; budget spent).
    it2: A's last prompt token 1 (A emits token 1); B admitted, 1 token (1 block; pool full; B emits).
    it3: decodes A 1, B 1 (A's 4th, B's 2nd token: no new block); budget spent, C waits.
    it4: A's 5th token opens a block, none free: B (the back) swaps out (1 block) and A decodes.
         Something was preempted: no swap-in; something is swapped: no prefill.
    it5, it6: A decodes alone (tokens 6, 7 fit its 2 blocks); B needs its block back, none free.
         A's 5th output token ends it (2 blocks freed).
    it7: B swaps back in (1 block) and decodes: 1 of the budget's 2 tokens. C is admitted (1 block) and
         gets the 1 token left: a 1-token chunk of its 2-token prompt. (Charging B nothing, C's chunk
         was 2: 3 tokens in a 2-token iteration.) B's 3rd token ends it.
    it8: C's last prompt token; C emits its only token and ends."""
    sched = _sched(Sarathi, blocks=2, budget=2, swap=True)
    a, b, c = Request(0, 0.0, 3, 5), Request(1, 0.0, 1, 3), Request(2, 0.0, 2, 1)
    assert sched.add(a) and sched.add(b) and sched.add(c)
    got = [step(sched) for _ in range(8)]
    assert got == [[(0, 2)], [(0, 1), (1, 1)], [(0, 1), (1, 1)], [(0, 1)], [(0, 1)], [(0, 1)],
                   [(1, 1), (2, 1)], [(2, 1)]]
    assert sched.swapped_out_blocks == sched.swapped_in_blocks == 1 and sched.preemptions == 1
    assert not sched.busy() and sched.pool.used == 0


def test_sarathi_swap_in_waits_when_the_decodes_spend_the_budget():
    """Sarathi, budget 2, swap. Running decodes A and B, C swapped out (1 block), blocks to spare:
    A 1 + B 1 spend the budget, so C stays swapped (vLLM's _schedule_swapped: can_schedule fails) until
    a decode ends. Charging C nothing, this step ran 3 decodes in a 2-token iteration."""
    sched = _sched(Sarathi, blocks=10, budget=2, swap=True)
    a, b, c = Request(0, 0.0, 1, 3), Request(1, 0.0, 1, 2), Request(2, 0.0, 1, 3)
    for r in (a, b):
        r.computed, r.generated, r.blocks = 1, 1, 1
    c.computed, c.generated, c.swapped = 1, 1, 1
    sched.running, sched.swapped = [a, b], deque([c])
    assert sched.pool.allocate(2)                 # A's and B's blocks
    # it1: A 1, B 1 (B's 2nd token ends it); C waits. it2: A 1, C back in (1 block) with the token left.
    assert step(sched) == [(0, 1), (1, 1)] and list(sched.swapped) == [c]
    assert step(sched) == [(0, 1), (2, 1)] and not sched.swapped and c.blocks == 1


def test_sarathi_preempts_from_the_back_of_the_whole_running_queue_and_stops_at_the_budget():
    """Sarathi, budget 2, 4 blocks, recompute. A, B, C, D each decoding with 1 block (computed 4, so
    A's 5th token needs a 2nd block; B's, C's and D's computed 2 need none); the pool is full. A needs a
    block, none is free: D, the back of the running queue (past the budget, unscheduled), is preempted
    (vLLM's _schedule_running pops the victim from the whole queue) and its block goes to A. A 1, B 1:
    the budget is spent, C waits running, unscheduled, and D (to recompute) at the front of the queue:
    no budget is left for a prefill."""
    sched = _sched(Sarathi, blocks=4, budget=2)
    reqs = [Request(i, 0.0, 1, 9) for i in range(4)]
    for r, computed in zip(reqs, (4, 2, 2, 2)):
        r.computed, r.generated, r.blocks = computed, computed, 1
    sched.running = list(reqs)
    assert sched.pool.allocate(4)
    assert step(sched) == [(0, 1), (1, 1)]
    a, b, c, d = reqs
    assert sched.running == [a, b, c] and list(sched.waiting) == [d] and sched.preemptions == 1
    assert (a.blocks, c.blocks, d.blocks, d.computed) == (2, 1, 0, 0)


def test_swap_in_respects_max_num_seqs():
    """Sarathi, max_num_seqs 1, budget 4, 10 blocks, swap. A decodes; B (swapped out, 1 block) would fit
    the blocks and the budget, but A fills the one sequence slot: B stays out until A ends."""
    cfg = s.Sarathi(kind="sarathi", block_size=4, watermark=0.0, max_num_batched_tokens=4, max_num_seqs=1,
                    preemption="swap")
    sched = Sarathi(cfg, BlockPool(10, 4))
    sched.max_model_len = 1 << 20
    a, b = Request(0, 0.0, 1, 2), Request(1, 0.0, 1, 3)
    a.computed, a.generated, a.blocks = 1, 1, 1
    b.computed, b.generated, b.swapped = 1, 1, 1
    sched.running, sched.swapped = [a], deque([b])
    assert sched.pool.allocate(1)
    assert step(sched) == [(0, 1)] and list(sched.swapped) == [b]      # A's last token; A ends
    assert step(sched) == [(1, 1)] and not sched.swapped


def test_v0_decodes_over_the_budget_wait_a_step():
    """vllm-v0 (no chunking), budget 3 (below max_num_seqs 256, which vLLM refuses; sim warns), 10 blocks.
    A, B, C, D (prompt 1, output 2; 3 tokens each: within the 3-token prompt limit). it1: prefills A, B,
    C, 1 token each (the budget; each emits token 1). it2: prefills first: D 1. it3: four decodes, a
    budget of 3: A, B and C decode (their last tokens) and D, over the budget, stays running
    unscheduled. it4: D decodes and ends."""
    sched = _sched(VllmV0, blocks=10, budget=3)
    reqs = [Request(i, 0.0, 1, 2) for i in range(4)]
    assert all(sched.add(r) for r in reqs)
    got = [step(sched) for _ in range(4)]
    assert got == [[(0, 1), (1, 1), (2, 1)], [(3, 1)], [(0, 1), (1, 1), (2, 1)], [(3, 1)]]
    assert not sched.busy() and sched.pool.used == 0

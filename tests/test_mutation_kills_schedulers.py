"""Scheduler paths the hand-worked scenarios did not reach, worked by hand (issue 32: the survivors of the
mutation job on sim.apps.serve.schedulers): refusals on arrival, Static's batch trigger and timer,
a swap preemption of the only running request, and Sarathi swapping a request back in.
Blocks of 4 tokens; `step` (tests/test_serve_scenarios.py) applies a batch as the engine does."""

from __future__ import annotations

from sim.apps.serve import spec as s
from sim.apps.serve.kvpool import BlockPool
from sim.apps.serve.schedulers import Request
from sim.apps.serve.schedulers.orca import Orca
from sim.apps.serve.schedulers.sarathi import Sarathi
from sim.apps.serve.schedulers.static import Static
from sim.apps.serve.schedulers.vllm_v0 import VllmV0
from tests.test_serve_scenarios import step


def _v0(blocks: int, cls: type[VllmV0] = VllmV0, budget: int = 64, swap: bool = False) -> VllmV0:
    kind, cfg_cls = ("sarathi", s.Sarathi) if cls is Sarathi else ("vllm-v0", s.VllmV0)
    cfg = cfg_cls(kind=kind, block_size=4, watermark=0.0, max_num_batched_tokens=budget,
                  preemption="swap" if swap else "recompute")
    sched = cls(cfg, BlockPool(blocks, 4), prompt_limit=budget if cls.whole_prompts else None)
    sched.max_model_len = 1 << 20
    return sched


def test_refused_on_arrival_for_its_whole_length():
    """V0 without chunking, budget 16 tokens, 10 blocks: a request of prompt 10 + output 10 = 20 tokens
    cannot be recomputed in one 16-token iteration after a preemption: refused (add is False, it does not
    wait), though prompt - output = 0 and its 5 blocks fit. With max_model_len 16 the same request is
    "longer than max_model_len" (20 > 16; prompt - output would be 0)."""
    sched = _v0(10, budget=16)
    r = Request(0, 0.0, 10, 10)
    assert sched.refusal(r) == "longer than max_num_batched_tokens (no chunked prefill)"
    assert sched.add(r) is False and not sched.waiting
    sched.max_model_len = 16
    assert sched.refusal(r) == "prompt + output longer than max_model_len 16"


def test_orca_refusal_names_the_prompt_when_the_reservation_just_fits():
    """Orca reserves max_model_len = 32 token slots of a 32-slot pool: that fits (32 <= 32), so a prompt
    of 20 over the 16-token budget is refused for its prompt, not for the reservation."""
    sched = Orca(s.Orca(kind="orca", max_model_len=32), BlockPool(32, 1), prompt_limit=16)
    sched.max_model_len = 32
    assert sched.refusal(Request(0, 0.0, 20, 2)) == "prompt longer than max_num_batched_tokens (Orca does not chunk)"


def _static(batch: int, max_wait_s: float = 0.0) -> Static:
    return Static(s.Static(kind="static", batch_size=batch, max_wait_s=max_wait_s), BlockPool(100, 1))


def test_static_starts_a_full_batch_at_once_and_waits_otherwise():
    """Batch size 2, max_wait 1 s, more requests coming. At t = 0.1 s with one request waiting: no batch
    (not full, not late); the timer is its arrival + 1 s = 1.0 s. A second arrives: the batch is full
    (2 >= 2) and starts at once, and while it runs there is no timer."""
    sched = _static(2, max_wait_s=1.0)
    sched.add(Request(0, 0.0, 4, 2))
    assert sched.schedule(0.1, True) is None
    assert sched.timer(0.1, True) == 1.0
    sched.add(Request(1, 0.05, 4, 2))
    batch = sched.schedule(0.1, True)
    assert [(r.idx, q) for r, q in batch.entries] == [(0, 4), (1, 4)]
    assert sched.timer(0.1, True) is None


def test_static_runs_a_partial_batch_when_nothing_more_comes():
    """Batch size 4, no wait: one request waiting at t = 0 and no more coming: it runs alone, padded
    to its own prompt of 3. While more could come, it would have waited."""
    sched = _static(4, max_wait_s=5.0)
    sched.add(Request(0, 0.0, 3, 1))
    assert sched.schedule(0.0, True) is None
    batch = sched.schedule(0.0, False)
    assert [(r.idx, q) for r, q in batch.entries] == [(0, 3)] and batch.padded == [(3, 3)]


def test_v0_swaps_out_the_only_decode_that_cannot_grow():
    """V0, swap preemption, 3 blocks. A (prompt 4, output 3) and B (4, 3): it1 both prompts, 1 block
    each (1 free). it2: A's token 5 takes the free block; B's too needs a second block, none is free and
    no request is behind it: B swaps itself out (1 block over the link, 4 tokens kept)."""
    sched = _v0(3, swap=True)
    a, b = Request(0, 0.0, 4, 3), Request(1, 0.0, 4, 3)
    assert sched.add(a) and sched.add(b)
    assert step(sched) == [(0, 4), (1, 4)]
    assert step(sched) == [(0, 1)]
    assert list(sched.swapped) == [b] and b.swapped == 1 and b.computed == 4 and sched.swapped_out_blocks == 1


def test_sarathi_swaps_back_in_once_blocks_free():
    """The scenario above under Sarathi (budget 64): it1 both prompts; it2 A decodes, B swaps out
    (1 block). it3: A's token 6 fits its 2 blocks; B needs 2 blocks back (its block and the one its
    5th token opens) and 1 is free: it stays out. A's third token ends it (2 blocks freed). it4: nothing
    was preempted, 3 blocks free: B comes back with 2 blocks and decodes its token."""
    sched = _v0(3, cls=Sarathi, swap=True)
    a, b = Request(0, 0.0, 4, 3), Request(1, 0.0, 4, 3)
    assert sched.add(a) and sched.add(b)
    assert [step(sched), step(sched), step(sched)] == [[(0, 4), (1, 4)], [(0, 1)], [(0, 1)]]
    assert a.generated == 3 and list(sched.swapped) == [b]
    assert step(sched) == [(1, 1)]
    assert not sched.swapped and b.blocks == 2 and sched.swapped_in_blocks == 1

"""TensorRT-LLM's GUARANTEED_NO_EVICT admission (sim.apps.serve.schedulers.trtllm) on a hand-worked pool:
a request starts only when its whole life's KV (prompt + every output token) fits beside what the running
ones will still take, so nothing is preempted where vLLM V1 admits and then preempts. Blocks of 4 tokens,
8 usable (block 0 is the null block); tests/test_serve_v1.py's `step` plays the engine."""

from __future__ import annotations

from sim.apps.serve.kvpool import LruBlockPool
from sim.apps.serve.schedulers import Request
from sim.apps.serve.schedulers.trtllm import Trtllm
from sim.apps.serve.schedulers.vllm import VllmV1
from sim.apps.serve.spec import Trtllm as TrtllmConfig, Vllm
from tests.test_serve_v1 import step


def pair(cls, cfg):
    s = cls(cfg(kind=cfg.model_fields["kind"].annotation.__args__[0], max_num_batched_tokens=64, block_size=4),
            LruBlockPool(9, 4, 1, False))
    assert s.add(Request(0, 0.0, prompt=8, output=12))     # life: 20 tokens = 5 blocks
    assert s.add(Request(1, 0.0, prompt=8, output=12))     # the same
    return s


def test_a_request_waits_until_its_whole_life_fits():
    s = pair(Trtllm, TrtllmConfig)
    # 5 + 5 = 10 blocks > 8: request 1 waits though its prompt's 2 blocks are free now.
    assert step(s) == [(0, 8)]
    assert [r.idx for r in s.waiting] == [1]
    for _ in range(11):
        step(s)                                  # request 0's 11 more tokens: it finishes, its 5 blocks return
    assert step(s) == [(1, 8)] and not s.waiting
    assert s.preemptions == 0


def test_vllm_v1_admits_both_and_preempts_instead():
    s = pair(VllmV1, Vllm)
    assert step(s) == [(0, 8), (1, 8)]           # both prompts fit the free blocks now
    for _ in range(12):
        step(s)
    assert s.preemptions >= 1                    # two sequences of 19 KV tokens need 10 blocks of the 8


def budget_pair(chunked: bool):
    """Budget 12 tokens, a pool that holds both lives (blocks of 4, 32 usable): prompts of 8 and 6."""
    s = Trtllm(TrtllmConfig(kind="trtllm", max_num_batched_tokens=12, block_size=4, enable_chunked_prefill=chunked),
               LruBlockPool(33, 4, 1, False))
    assert s.add(Request(0, 0.0, prompt=8, output=4))
    assert s.add(Request(1, 0.0, prompt=6, output=4))
    return s


def test_prompts_run_whole_without_chunked_prefill():
    # TensorRT-LLM's default: 8 tokens leave 4 of the 12; the 6-token prompt does not fit and waits whole.
    s = budget_pair(chunked=False)
    assert step(s) == [(0, 8)]
    assert step(s) == [(0, 1), (1, 6)]           # next step: one decode + the whole prompt, 7 <= 12


def test_chunked_prefill_cuts_the_last_prompt_to_the_budget():
    s = budget_pair(chunked=True)
    assert step(s) == [(0, 8), (1, 4)]           # 4 of 6 tokens now, as vLLM V1 chunks
    assert step(s) == [(0, 1), (1, 2)]


def test_a_prompt_over_the_whole_budget_is_refused_without_chunking():
    s = budget_pair(chunked=False)
    r = Request(2, 0.0, prompt=13, output=1)
    assert not s.add(r)
    assert s.refusal(r) == "longer than max_num_batched_tokens (no chunked prefill)"


def test_a_prompt_of_exactly_the_budget_runs_alone():
    """A 12-token prompt under the 12-token budget fits (the scheduler's `>` test: batch + prompt > budget breaks):
    it is accepted and runs whole in a step of its own once the running requests leave it room."""
    s = Trtllm(TrtllmConfig(kind="trtllm", max_num_batched_tokens=12, block_size=4), LruBlockPool(33, 4, 1, False))
    assert s.add(Request(0, 0.0, prompt=12, output=2))
    assert step(s) == [(0, 12)]

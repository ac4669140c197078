"""SGLang's scheduler (sim.apps.serve.schedulers.sglang) on hand-worked steps: a step is a prefill batch
or a decode batch, never both, and prefill goes first (sglang/srt/managers/scheduler.py
get_next_batch_to_run without --enable-mixed-chunk), so the requests of one burst decode and finish together.
Blocks of 4 tokens, as tests/test_serve_v1.py (whose `step` plays the engine's part)."""

from __future__ import annotations

from hw_models.machine import load_machine
from sim.apps.serve.kvpool import LruBlockPool
from sim.apps.serve.run import serve
from sim.apps.serve.schedulers import Request
from sim.apps.serve.schedulers.sglang import Sglang
from sim.apps.serve.spec import Sglang as SglangConfig, serve_file_from_dict
from tests.test_serve_v1 import step


def sglang(budget: int, blocks: int = 64) -> Sglang:
    cfg = SglangConfig(kind="sglang", max_num_batched_tokens=budget, block_size=4)
    return Sglang(cfg, LruBlockPool(blocks, 4, 1, False))


def test_a_new_prompt_stalls_the_running_decodes():
    s = sglang(budget=16)
    assert s.add(Request(0, 0.0, prompt=8, output=4))
    assert step(s) == [(0, 8)]                        # prefill: its first token
    assert step(s) == [(0, 1)]                        # decode
    assert s.add(Request(1, 0.0, prompt=12, output=2))
    # vLLM V1 would run [(0, 1), (1, 12)] in one step; SGLang prefills alone, request 0 waits.
    assert step(s) == [(1, 12)]
    assert step(s) == [(0, 1), (1, 1)]


def test_a_burst_is_prefilled_in_budget_chunks_then_decodes_as_one_batch():
    s = sglang(budget=16)
    for i in range(3):
        assert s.add(Request(i, 0.0, prompt=8, output=3))
    # 24 prompt tokens, 16 per prefill batch: two whole prompts, then the third; no decode in between,
    # so all three have 2 tokens to go after the prefills and finish in the same step.
    assert step(s) == [(0, 8), (1, 8)]
    assert step(s) == [(2, 8)]
    assert step(s) == [(0, 1), (1, 1), (2, 1)]
    assert step(s) == [(0, 1), (1, 1), (2, 1)]
    assert not s.running and not s.waiting


def test_a_long_prompt_is_chunked_before_anything_decodes():
    s = sglang(budget=8)
    assert s.add(Request(0, 0.0, prompt=4, output=3))
    assert step(s) == [(0, 4)]
    assert s.add(Request(1, 0.0, prompt=20, output=2))
    # 20 tokens in chunks of 8: the chunked request continues first, request 0 decodes only after.
    assert [step(s) for _ in range(4)] == [[(1, 8)], [(1, 8)], [(1, 4)], [(0, 1), (1, 1)]]


def test_kind_sglang_is_a_serving_scheduler_with_sglangs_chunk_default():
    f = serve_file_from_dict({"model": "tinyllama-1.1b", "serving": {
        "arrivals": {"process": "closed", "concurrency": 2, "num_requests": 4},
        "lengths": {"prompt": {"dist": "fixed", "value": 64}, "output": {"dist": "fixed", "value": 8}},
        "scheduler": {"kind": "sglang"}}}, "t.yaml")
    assert f.serving.scheduler.token_budget == 8192    # chunked_prefill_size on a 60-90 GB GPU


def test_a_closed_loop_of_identical_requests_stays_in_waves_under_sglang_not_under_vllm():
    """The engine behaviour the measured SGLang runs show (docs/serving.md, lock-step): 4 clients, identical
    requests, a budget of one prompt per step. SGLang prefills the burst one prompt a step with every decode
    stalled, so all four finish in the same step and the next wave leaves together; vLLM V1 decodes the first
    prompts beside the later ones, so they finish a step apart and the waves smear into staggered sends."""
    def finishes(kind: str) -> list[int]:
        f = serve_file_from_dict({"model": "tinyllama-1.1b", "flash_attention": True, "serving": {
            "arrivals": {"process": "closed", "concurrency": 4, "num_requests": 12},
            "lengths": {"prompt": {"dist": "fixed", "value": 256}, "output": {"dist": "fixed", "value": 8}},
            "scheduler": {"kind": kind, "max_num_batched_tokens": 256, "max_num_seqs": 4}}}, "t.yaml")
        res, _ = serve(f, load_machine("h100_sxm"))
        return [len(set(res.requests["finish_s"][i:i + 4].round(12))) for i in (0, 4, 8)]
    assert finishes("sglang") == [1, 1, 1]        # each wave of 4 finishes in one step
    assert finishes("vllm")[0] == 4               # the first wave already finishes in 4 different steps

"""The serving engine's fast paths (issue 30: one-pass hand-out, V0 decodes in one allocation, the
decode cohort of sim.apps.serve.cohort) decide exactly what the per-request paths written before them
decide. Both run the same random stream: Scheduler.reference = True runs the old paths (scheduler
and engine); every step's sequences as costed, every request's times and counts, every iteration
record, the gap samples and the pool's figures must be equal, not close.

The streams are drawn to reach the paths that differ: pools small enough to preempt (recompute and
swap), prefix caching with shared hash prefixes, requests that finish in their prefill, arrivals
during decode runs (members joining a cohort), for each paged scheduler (SGLang's and TensorRT-LLM's
decode steps run V1's cohort pass) and Orca.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.apps.serve import spec as s
from sim.apps.serve.cohort import DecodeCohort
from sim.apps.serve.kvpool import BlockPool, LruBlockPool
from sim.apps.serve.schedulers import Scheduler
from sim.apps.serve.schedulers.orca import Orca
from sim.apps.serve.schedulers.sarathi import Sarathi
from sim.apps.serve.schedulers.sglang import Sglang
from sim.apps.serve.schedulers.trtllm import Trtllm
from sim.apps.serve.schedulers import vllm
from sim.apps.serve.schedulers.vllm import VllmV1
from sim.apps.serve.schedulers.vllm_v0 import VllmV0
from sim.apps.serve.simulator import ITER_COLUMNS, ServeResult, ServeSim
from sim.apps.serve.iteration import Iteration
from sim.apps.serve.traces import Requests

BLOCK = 4
V1_KINDS = {"vllm": (s.Vllm, VllmV1), "sglang": (s.Sglang, Sglang), "trtllm": (s.Trtllm, Trtllm)}


class RecordingCost:
    """A cost that reads every feature (so a feature computed differently moves a time) and keeps the
    iterations it was asked about."""
    keys: list[str] = []

    def __init__(self) -> None:
        self.seen: list[Iteration] = []

    def __call__(self, it: Iteration) -> tuple[float, float]:
        self.seen.append(it)
        t = 1e-3 + 1e-4 * it.tokens + 3e-6 * it.decode_kv + 1e-7 * it.pairs + 2e-5 * it.n_decode + 5e-5 * it.chunks
        return t + 1e-6 * len(it.seqs), 0.25 * t


def scheduler(kind: str, blocks: int, swap: bool, caching: bool, budget: int) -> Scheduler:
    if kind == "orca":
        cfg = s.Orca(kind="orca", max_num_batched_tokens=budget, max_model_len=64)
        sched: Scheduler = Orca(cfg, BlockPool(blocks * BLOCK, 1), prompt_limit=budget)
        sched.max_model_len = 64
        return sched
    if kind in V1_KINDS:
        conf, cls = V1_KINDS[kind]
        cfg = conf(kind=kind, block_size=BLOCK, max_num_batched_tokens=budget, max_num_seqs=8)
        return cls(cfg, LruBlockPool(blocks, BLOCK, 1, caching))
    cls, conf = (Sarathi, s.Sarathi) if kind == "sarathi" else (VllmV0, s.VllmV0)
    cfg = conf(kind=kind, block_size=BLOCK, watermark=0.0, max_num_batched_tokens=budget, max_num_seqs=8,
               preemption="swap" if swap else "recompute")
    sched = cls(cfg, BlockPool(blocks, BLOCK, 1, caching), prompt_limit=budget if cls.whole_prompts else None)
    sched.max_model_len = 1 << 20
    return sched


def run(stream: dict, reference: bool) -> tuple[ServeResult, list[Iteration]]:
    reqs = Requests(np.array(stream["arrival_s"]), np.array(stream["prompt"]), np.array(stream["output"]),
                    stream["hashes"])
    sched = scheduler(stream["kind"], stream["blocks"], stream["swap"], stream["caching"], stream["budget"])
    cost = RecordingCost()
    serving = SimpleNamespace(speculative=None, arrivals=SimpleNamespace())
    setup = SimpleNamespace(scheduler=lambda _: sched, file=SimpleNamespace(serving=serving, stack=None), machine=None,
                            target_cost=cost, draft_cost=None, groups=1, block_bytes=1.0, swap_bytes_per_s=1e6)
    sched.cohort_min = stream.get("cohort_min", 1)   # cohorts from any size: these streams run a few requests
    old = Scheduler.reference
    Scheduler.reference = reference
    try:
        return ServeSim(setup, reqs).run(), cost.seen
    finally:
        Scheduler.reference = old


@st.composite
def streams(draw) -> dict:
    n = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.sampled_from([0.0, 5e-4, 2e-3, 1e-2]), min_size=n, max_size=n))
    prompt = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 24), min_size=n, max_size=n))
    caching = draw(st.booleans())
    # Hash units of BLOCK tokens from a small alphabet, so prompts share prefixes.
    hashes = [tuple(draw(st.lists(st.integers(0, 2), min_size=p // BLOCK, max_size=p // BLOCK))) for p in prompt]
    return dict(arrival_s=np.cumsum(gaps).tolist(), prompt=prompt, output=output, hashes=hashes if caching else None,
                kind=draw(st.sampled_from(["vllm-v0", "vllm-v0", "sarathi", "vllm", "orca", "sglang", "trtllm"])),
                blocks=draw(st.integers(8, 40)), swap=draw(st.booleans()), caching=caching,
                budget=draw(st.sampled_from([16, 48, 256])), cohort_min=draw(st.sampled_from([1, 1, 4])))


def assert_same(a: ServeResult, b: ServeResult) -> None:
    for k in a.requests:
        np.testing.assert_array_equal(a.requests[k], b.requests[k], err_msg=k)
    for k in a.iterations:
        np.testing.assert_array_equal(a.iterations[k], b.iterations[k], err_msg=k)
    np.testing.assert_array_equal(a.tbt_s, b.tbt_s)
    np.testing.assert_array_equal(a.tbt_weight, b.tbt_weight)
    assert (a.preemptions, a.swapped_out_blocks, a.swapped_in_blocks, a.peak_blocks, a.tokens_out, a.swap_log,
            a.makespan_s, a.energy_j) == (b.preemptions, b.swapped_out_blocks, b.swapped_in_blocks, b.peak_blocks,
                                          b.tokens_out, b.swap_log, b.makespan_s, b.energy_j)


@settings(max_examples=150, deadline=None)
@given(streams())
def test_fast_paths_schedule_exactly_as_the_reference(stream):
    ref, ref_steps = run(stream, reference=True)   # the per-iteration invariants hold on both paths
    fast, fast_steps = run(stream, reference=False)
    assert fast_steps == ref_steps          # the same sequences costed at every step, in order
    assert_same(fast, ref)


def test_the_comparison_can_fail(monkeypatch):
    """The reference switch reaches different code: cohort steps costed with one more KV token per
    member (a deliberate bug) are caught by the comparison above (a decode run on an idle V0 engine)."""
    stream = dict(arrival_s=[0.0, 0.0], prompt=[8, 8], output=[20, 20], hashes=None, kind="vllm-v0", blocks=40,
                  swap=False, caching=False, budget=256)
    ref, ref_steps = run(stream, reference=True)
    features = DecodeCohort.features

    def off_by_one(self, rest=None) -> Iteration:
        it = features(self, rest)
        return Iteration(it.seqs, it.tokens, it.n_decode, it.decode_kv + it.n_decode, it.pairs, it.chunks)
    monkeypatch.setattr(DecodeCohort, "features", off_by_one)
    fast, fast_steps = run(stream, reference=False)
    assert fast_steps != ref_steps
    with pytest.raises(AssertionError):
        assert_same(fast, ref)


def test_v1_cohort_steps_carry_admitted_prompts(monkeypatch):
    """A V1 decode run that prompts keep joining, with prefix caching and a pool tight enough to
    preempt: some cohort steps carry prompts the waiting pass admitted after their members, and the
    schedule is still exactly the reference's (so the comparison above does reach that path)."""
    carried = []
    cohort_step = vllm.cohort_step

    def spy(sched):
        b = cohort_step(sched)
        carried.append(b is not None and len(b.entries) > len(b.cohort))
        return b
    monkeypatch.setattr(vllm, "cohort_step", spy)
    n = 12
    prompt = [10 + 3 * (i % 4) for i in range(n)]
    stream = dict(arrival_s=[2e-3 * i for i in range(n)], prompt=prompt, output=[20] * n, kind="vllm", blocks=40,
                  hashes=[tuple(i % 2 for _ in range(p // BLOCK)) for i, p in enumerate(prompt)], swap=False,
                  caching=True, budget=256, cohort_min=1)
    ref, ref_steps = run(stream, reference=True)
    fast, fast_steps = run(stream, reference=False)
    assert any(carried) and ref.preemptions > 0
    assert fast_steps == ref_steps
    assert_same(fast, ref)


def test_iteration_records_by_column():
    """The engine keeps one flat row a step (ServeSim.iteration_columns cuts the columns out). One
    5-token prompt, 3 tokens out, alone on V0: a prefill step then two decodes, by hand: seqs 1 each;
    tokens 5, 1, 1; prefill sequences 1, 0, 0; KV blocks after each step 2, 2 (5 then 6 tokens in
    4-token blocks), then 0 (the finish frees them before the record); running 1, 1, 0; nothing waiting
    or swapped. Each step starts where the last ended; RecordingCost's energy is a quarter of its time
    less the 1e-6 s per sequence."""
    stream = dict(arrival_s=[0.0], prompt=[5], output=[3], hashes=None, kind="vllm-v0", blocks=8, swap=False,
                  caching=False, budget=256)
    it = run(stream, reference=False)[0].iterations
    assert list(it) == list(ITER_COLUMNS)
    want = dict(seqs=[1, 1, 1], tokens=[5, 1, 1], prefill_seqs=[1, 0, 0], kv_blocks_used=[2, 2, 0], swap_blocks=[0, 0, 0],
                running=[1, 1, 0], waiting=[0, 0, 0])
    for k, v in want.items():
        assert it[k].tolist() == v, k
    assert it["start_s"][0] == 0.0
    np.testing.assert_allclose(it["start_s"][1:], it["start_s"][:-1] + it["duration_s"][:-1], rtol=1e-12)
    np.testing.assert_allclose(it["energy_j"], 0.25 * (it["duration_s"] - 1e-6), rtol=1e-9)

"""Decode run-ahead (sim.apps.serve.runahead) changes no answer: the same random stream run with runs
on and off gives equal (not close) per-request times and counts, iteration records, gap samples, pool
figures, energy, busy time and makespan, and the progress callback sees the same counts.

The streams are tests/test_serve_fastpath.py's (small pools that preempt, prefix caching, arrivals
during decode runs, every paged scheduler, cohorts from any size), costed by a cost that reads every
feature and declares itself interpolated (op_level False), as the surrogate does, so runs are taken;
some run under async scheduling with a front end (held arrivals) and with a progress callback (runs
stop at its every-64 iterations).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.apps.serve import runahead
from sim.apps.serve.schedulers import Scheduler
from sim.apps.serve.simulator import ServeResult, ServeSim
from sim.apps.serve.stepcost import Iteration
from sim.apps.serve.traces import Requests
from tests.test_serve_fastpath import BLOCK, RecordingCost, assert_same, scheduler, streams


class InterpolatedCost(RecordingCost):
    """RecordingCost's step time and energy (every feature moves it) and one busy resource, as an
    interpolated cost: a function of the features only."""
    op_level = False
    keys = ["gpu"]

    def __call__(self, it: Iteration) -> tuple[float, float, float]:
        t, e = super().__call__(it)
        return t, e, 0.5 * t + 1e-7 * it.n_decode


def run(stream: dict, ahead: bool) -> tuple[ServeResult, list[tuple[int, int]], int]:
    """The stream's result, the progress callback's calls and the steps landed by runs."""
    reqs = Requests(np.array(stream["arrival_s"]), np.array(stream["prompt"]), np.array(stream["output"]),
                    stream["hashes"])
    sched = scheduler(stream["kind"], stream["blocks"], stream["swap"], stream["caching"], stream["budget"])
    serving = SimpleNamespace(speculative=None, arrivals=SimpleNamespace())
    setup = SimpleNamespace(scheduler=lambda _: sched, file=SimpleNamespace(serving=serving, stack=None), machine=None,
                            target_cost=InterpolatedCost(), draft_cost=None, groups=1, block_bytes=1.0,
                            swap_bytes_per_s=1e6)
    sched.cohort_min = stream.get("cohort_min", 1)
    calls: list[tuple[int, int]] = []
    sim = ServeSim(setup, reqs, progress=(lambda d, t: calls.append((d, t))) if stream.get("progress") else None)
    sim.async_scheduling, sim.front_end_s = stream.get("async", False), stream.get("front_end_s", 0.0)
    assert bool(sim.ahead) == (sched.runs_ahead() and runahead.enabled())   # on by default where the scheduler allows it
    sim.ahead = sim.ahead if ahead else 0
    landed = []
    land = runahead.land

    def counting(s, r):
        landed.append(r.steps)
        land(s, r)
    runahead.land = counting
    try:
        return sim.run(), calls, sum(landed)
    finally:
        runahead.land = land


def same(a: ServeResult, b: ServeResult) -> None:
    assert_same(a, b)
    assert a.busy_s == b.busy_s and a.total_blocks == b.total_blocks and a.rejected_reasons == b.rejected_reasons


@st.composite
def async_streams(draw) -> dict:
    s = draw(streams())
    s.update(progress=draw(st.booleans()), front_end_s=draw(st.sampled_from([0.0, 0.0, 1e-3])))
    s["async"] = draw(st.booleans())
    return s


@settings(max_examples=200, deadline=None)
@given(async_streams())
def test_runs_change_no_answer(stream):
    off, off_calls, _ = run(stream, ahead=False)
    on, on_calls, _ = run(stream, ahead=True)
    same(on, off)
    assert on_calls == off_calls


def decode_alone(kind: str, **extra) -> dict:
    """Two requests a second apart, each decoding 40 tokens alone on an idle engine: a run from its
    second token to its last, stopping where its KV blocks grow."""
    return dict(arrival_s=[0.0, 1.0], prompt=[6, 9], output=[40, 40], hashes=None, kind=kind, blocks=40, swap=False,
                caching=False, budget=256, **extra)


def test_runs_are_taken_and_match_for_each_scheduler():
    for kind in ("vllm-v0", "sarathi", "vllm", "sglang", "trtllm"):
        for cohort_min in (1, 8):   # as a cohort and request by request
            stream = decode_alone(kind, cohort_min=cohort_min)
            off, _, none = run(stream, ahead=False)
            on, _, landed = run(stream, ahead=True)
            assert none == 0 and landed > 60, (kind, landed)   # nearly all of the 78 decode steps
            same(on, off)


def test_orca_and_reference_paths_take_no_runs():
    on, _, landed = run(decode_alone("orca"), ahead=True)
    assert landed == 0
    old = Scheduler.reference
    Scheduler.reference = True
    try:
        assert run(decode_alone("vllm-v0"), ahead=True)[2] == 0
    finally:
        Scheduler.reference = old


def test_the_off_switch(monkeypatch):
    monkeypatch.setenv(runahead.ENV, "1")
    assert run(decode_alone("vllm"), ahead=True)[2] == 0


def test_the_comparison_can_fail(monkeypatch):
    """A run that lands one gap sample short of its steps' time is caught by the comparison above."""
    stream = decode_alone("vllm-v0", cohort_min=1)
    off, _, _ = run(stream, ahead=False)
    advance = runahead.DecodeCohort.advance
    monkeypatch.setattr(runahead.DecodeCohort, "advance", lambda c, times: advance(c, [t * (1 + 1e-12) for t in times]))
    on, _, landed = run(stream, ahead=True)
    assert landed
    with pytest.raises(AssertionError):
        same(on, off)


def test_blocks_grow_inside_runs():
    """A request's 39 decode steps cross about ten 4-token blocks, all inside runs (which stop only where
    the pool would not hold them): the pool's peak is the larger request's last KV, 9 prompt + 39 decoded
    tokens = 48 = 12 blocks, as on the step-by-step path (same() above compares every iteration's)."""
    assert BLOCK == 4
    for cohort_min in (1, 8):
        on, _, _ = run(decode_alone("vllm", cohort_min=cohort_min), ahead=True)
        assert on.peak_blocks == 12 and on.iterations["kv_blocks_used"].max() == 12

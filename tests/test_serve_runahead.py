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
from sim.apps.serve.iteration import Iteration
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


def run(stream: dict, ahead: bool | int) -> tuple[ServeResult, list[tuple[int, int]], int]:
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
    sim.ahead = sim.ahead if ahead is True else int(ahead)   # False: off; a number: that many sequences at most
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
    return {**dict(arrival_s=[0.0, 1.0], prompt=[6, 9], output=[40, 40], hashes=None, kind=kind, blocks=40, swap=False,
                   caching=False, budget=256), **extra}


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


def test_a_run_of_as_many_sequences_as_allowed():
    """Kills runahead.plan__mutmut_13 (`n >= sim.ahead`): each request decodes alone (n = 1), so a limit of one
    sequence still takes their runs, and a limit of 0 none."""
    off, _, _ = run(decode_alone("vllm"), ahead=False)
    on, _, landed = run(decode_alone("vllm"), ahead=1)
    assert landed > 60
    same(on, off)


def test_runs_stop_where_progress_is_reported():
    """Kills runahead.plan__mutmut_43: with a progress callback a run stops at the engine's 64th iteration, where
    the callback is called, so it sees the same (done, total) as step by step: once, at iteration 64, with the
    first request done (its prefill and 39 decode steps end by iteration 40) out of 2."""
    stream = decode_alone("vllm", progress=True)
    off, off_calls, _ = run(stream, ahead=False)
    on, on_calls, landed = run(stream, ahead=True)
    assert landed > 60 and on_calls == off_calls == [(1, 2)]
    same(on, off)


def test_every_decode_step_lands_in_a_run():
    """Each request decodes 39 tokens after its prefill's first, alone: request by request all 39 steps of
    each are one run (78 landed); as a cohort the first decode step forms the cohort, whose members have had
    no hand-out yet (_cohort_left 0), so its other 38 are the run (76). Kills runahead._extend__mutmut_23 (a
    cohort's regrow cut two steps short: 72)."""
    for kind in ("vllm", "vllm-v0", "sglang", "trtllm"):
        assert [run(decode_alone(kind, cohort_min=m), ahead=True)[2] for m in (8, 1)] == [78, 76], kind


def test_runs_book_blocks_as_steps_under_prefix_caching():
    """Under prefix caching V1 schedulers act one token before a block fills (test_mutation_kills_runahead),
    so a run's regrow must ask for the blocks of the token its step writes: the blocks in use, iteration by
    iteration, are those of the step-by-step run. Kills runahead._regrow_requests__mutmut_33 (the need two
    tokens on: a block taken two steps early in 19 of the 80 iterations)."""
    for kind in ("vllm", "sglang", "trtllm", "vllm-v0"):
        stream = decode_alone(kind, cohort_min=8, caching=True, hashes=[(100,), (200, 201)])   # one per full block
        off, _, _ = run(stream, ahead=False)
        on, _, landed = run(stream, ahead=True)
        assert landed == 78, kind
        same(on, off)

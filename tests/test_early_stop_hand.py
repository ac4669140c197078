"""The early stop's pieces worked by hand without a capacity search (issue 32: the survivors of the
mutation run on sim.apps.serve.early_stop, whose only other test runs two searches): which values are
final for each metric, and the Watch that stops a run on a tiny engine once a p90 has failed for certain."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from sim.apps.serve.early_stop import Settled, Watch, allowed_violations, known, settled_failure
from sim.apps.serve.simulator import DONE, REJECTED, ServeSim
from sim.apps.serve.traces import Requests
from tests.test_serve_fastpath import RecordingCost, scheduler

NAN = np.nan


def test_known_values_of_each_metric():
    """Six requests, all arrived at 0.25 s (times in eighths, exact in binary): A done (scheduled 0.375,
    first token 0.5, finish 1.0, 5 tokens), B waiting, C running (0.5, 0.625), D done with 2 tokens (0.5,
    0.75, 1.5), E rejected (its times, were any recorded, do not count), F done with 1 token (0.5, 0.75,
    0.75). TTFT known for A, C, D, F: 0.25, 0.375, 0.5, 0.5; queueing 0.125, 0.25, 0.25, 0.25; E2E for the
    done A, D, F: 0.75, 1.25, 0.5; TPOT for A ((1.0 - 0.5) / 4 = 0.125) and D ((1.5 - 0.75) / 1 = 0.75),
    none for F's single token."""
    rec = dict(arrival_s=np.full(6, 0.25), scheduled_s=np.array([0.375, NAN, 0.5, 0.5, 0.625, 0.5]),
               first_token_s=np.array([0.5, NAN, 0.625, 0.75, 0.75, 0.75]),
               finish_s=np.array([1.0, NAN, NAN, 1.5, 1.0, 0.75]), output_tokens=np.array([5, 0, 1, 2, 3, 1]),
               status=np.array([DONE, 0.0, 0.0, DONE, REJECTED, DONE]))
    assert known(rec, "ttft").tolist() == [0.25, 0.375, 0.5, 0.5]
    assert known(rec, "queue").tolist() == [0.125, 0.25, 0.25, 0.25]
    assert known(rec, "e2e").tolist() == [0.75, 1.25, 0.5]
    assert known(rec, "tpot").tolist() == [0.125, 0.75]
    assert known(rec, "tbt") is None
    # e2e_max <= 1 s: D's 1.25 s is one violation of the none a max allows: settled, bound 1.25 s
    assert settled_failure(rec, {"e2e_max": 1.0}) == ("e2e_max", 1, 0, 1.25)
    assert settled_failure(rec, {"e2e_max": 1.25}) is None       # at the limit is no violation
    # a mean SLO is passed over, not the end of the check: the e2e_max after it still settles
    assert settled_failure(rec, {"ttft_mean": 0.01, "e2e_max": 1.0}) == ("e2e_max", 1, 0, 1.25)
    # p5 of 10: the 1st smallest must be within, 9 may be over; 'x50' is no percentile
    assert allowed_violations(10, "p5") == 9 and allowed_violations(10, "x50") is None


def test_watch_stops_a_run_whose_p90_has_failed():
    """40 requests at t = 0 (prompt 8, output 80) on a V0 engine of 1000 blocks, budget 256, at most 8
    running (tests/test_serve_fastpath.scheduler), under ttft_p90 <= 1 ns: every first token violates it,
    and a p90 of 40 allows 4. Iteration 1 prefills 8 prompts (their first tokens); 2-64 decode them. The
    watch looks at iteration 64: 8 known violations > 4, so the run stops there, none of the 80-token
    requests done, and the settled p90's bound is the 5th largest known TTFT."""
    reqs = Requests(np.zeros(40), np.full(40, 8), np.full(40, 80), None)
    sched = scheduler("vllm-v0", 1000, False, False, 256)
    serving = SimpleNamespace(speculative=None, arrivals=SimpleNamespace())
    setup = SimpleNamespace(scheduler=lambda _: sched, file=SimpleNamespace(serving=serving, stack=None), machine=None,
                            target_cost=RecordingCost(), draft_cost=None, groups=1, block_bytes=1.0,
                            swap_bytes_per_s=1e6)
    sim = ServeSim(setup, reqs, watch=Watch({"ttft_p90": 1e-9}))
    with pytest.raises(Settled) as stop:
        sim.run()
    s = stop.value.summary
    ttft = known(sim.rec, "ttft")
    assert s["settled"]["slo"] == "ttft_p90" and s["settled"]["allowed"] == 4 == allowed_violations(40, "p90")
    # the requests the verdict saw: the 8 with a first token (none completed: it read "stopped after 0 requests")
    assert s["settled"]["violations"] == len(ttft) == 8 and s["settled"]["requests_done"] == 8 and s["completed"] == 0
    assert s["slo_met"]["ttft_p90"] == pytest.approx(np.sort(ttft)[::-1][4] / 1e-9)
    assert stop.value.args == (s,) and s["settled"]["confidence"].startswith("certain")

"""Capacity-search steps that stop once their SLO verdict is a certain failure (sim.apps.serve.early_stop):
the counts worked by hand, and a search that finds the same capacity, with the same verdict at every
step, as one that runs every step to its end."""

from __future__ import annotations

import numpy as np
import pytest

from hw_models.machine import load_machine
from sim.apps.serve.capacity import find_capacity
from sim.apps.serve.early_stop import allowed_violations, settled_failure
from sim.apps.serve.simulator import REJECTED
from sim.apps.serve.spec import load_serve_file
from tests.conftest import ROOT


@pytest.mark.parametrize("n, stat, allowed", [
    (10, "p90", 1),      # p90 of 10 = the 9th smallest: met with 9 within the limit, so 1 violation allowed
    (1000, "p90", 100),  # the 900th smallest: 100 may be over
    (10, "p50", 5),      # the 5th smallest: 5 within, 5 over
    (10, "p99", 0),      # the 10th smallest: none over
    (10, "max", 0),
    (10, "mean", None),  # a mean is never settled early
])
def test_violations_allowed(n, stat, allowed):
    assert allowed_violations(n, stat) == allowed


def rec(ttft: list[float]) -> dict[str, np.ndarray]:
    """Ten requests arrived at 0; the first len(ttft) have their first token at those times, none finished."""
    n = 10
    first = np.full(n, np.nan)
    first[:len(ttft)] = ttft
    return dict(arrival_s=np.zeros(n), first_token_s=first, finish_s=np.full(n, np.nan), scheduled_s=np.zeros(n),
                output_tokens=np.zeros(n), status=np.zeros(n))


def test_two_ttft_violations_of_ten_settle_a_p90():
    """ttft_p90 <= 0.2 s over 10 requests allows 1 over. Known TTFTs 0.1, 0.5, 0.3: two over, settled;
    the full run's p90 is at least the 2nd largest known over (0.3 s)."""
    assert settled_failure(rec([0.1, 0.5, 0.3]), {"ttft_p90": 0.2}) == ("ttft_p90", 2, 1, 0.3)
    assert settled_failure(rec([0.1, 0.5]), {"ttft_p90": 0.2}) is None          # one over: still open
    assert settled_failure(rec([0.1, 0.5, 0.3]), {"ttft_mean": 0.2}) is None    # a mean: never early


def test_rejected_requests_are_not_counted():
    r = rec([0.1, 0.5, 0.3])
    r["status"][2] = REJECTED
    assert settled_failure(r, {"ttft_p90": 0.2}) is None


def test_search_finds_the_same_capacity_with_fewer_requests_simulated():
    # 150 requests: 14 search steps, 3 of them settle early (capacity 199.4/s); 300 requests took 13 steps,
    # 4 settled, at 2.8x the CPU (3.1 s against 1.1 s), the same comparisons.
    f = load_serve_file(ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml", {"serving.arrivals.num_requests": 150})
    m = load_machine("h100_sxm")
    slo = {"ttft_p90": 0.2, "tpot_p90": 0.05}
    full = find_capacity(f, m, slo, early_stop=False)
    early = find_capacity(f, m, slo)
    assert early["rate"] == full["rate"]
    assert [(p["rate"], p["ok"]) for p in early["points"]] == [(p["rate"], p["ok"]) for p in full["points"]]
    stopped = [(p, q) for p, q in zip(early["points"], full["points"]) if "settled" in p["summary"]]
    assert stopped, "no step settled early: the test no longer reaches the early stop"
    for p, q in stopped:   # the settled lower bound is below the full run's value, and over the limit
        key = p["summary"]["settled"]["slo"]
        assert 1.0 < p["summary"]["slo_met"][key] <= q["summary"]["slo_met"][key]
        assert p["summary"]["completed"] < q["summary"]["completed"]
    # --plots draws the steps by rate (the search tries them out of order) and marks the stopped ones: their
    # figures are of the part they ran (drawn as whole runs before)
    from sim.apps.serve.output import search_steps
    pts, x, flagged, closed = search_steps(early["points"])
    assert list(x) == sorted(p["rate"] for p in early["points"]) and not closed
    assert [p["rate"] for p, f in zip(pts, flagged) if f] == sorted(p["rate"] for p, _ in stopped)


def test_closed_loop_search_settles_steps_early_and_finds_the_same_client_count():
    """A closed loop's steps stop early too: a request's TTFT is known once its first token is out, whenever its
    client sent it. ttft_p90 within 3 lone prefills over 10 requests a client: the same client count, the
    same verdict at every step, and the failing steps stop before all their requests are done."""
    from tests.test_serve_closed import H100, closed_file
    from sim.apps.serve.run import serve

    f = closed_file(2, 20, prompt=256, output=16)
    base = serve(closed_file(1, 10, prompt=256, output=16), H100)[1]["benchmark"]["ttft_s"]
    slo = {"ttft_p90": 3.0 * base}
    full = find_capacity(f, H100, slo, early_stop=False)
    early = find_capacity(f, H100, slo)
    assert early["knob"] == "concurrency" and early["rate"] == full["rate"]
    assert [(p["rate"], p["ok"]) for p in early["points"]] == [(p["rate"], p["ok"]) for p in full["points"]]
    stopped = [(p, q) for p, q in zip(early["points"], full["points"]) if "settled" in p["summary"]]
    assert stopped
    for p, q in stopped:
        assert not p["ok"] and p["summary"]["completed"] < q["summary"]["completed"] == 10 * p["rate"]
    # the capacity plot draws them against clients although a stopped step has no benchmark means (it had read
    # "rate (requests/s)" whenever a step stopped early, the default)
    from sim.apps.serve.output import search_steps
    assert search_steps(early["points"])[3]


def test_a_stopped_step_draws_only_the_figure_of_the_slo_that_settled_it(monkeypatch, tmp_path):
    """A step stopped on tpot_p90 after its first wave had its TTFT p90 drawn at 6x the full run's, beside the limit
    it met (a serving trial read a wrong verdict): a stopped step's other figures are not drawn."""
    from sim.apps.mpl import pyplot
    from sim.apps.serve import output

    kept = []
    monkeypatch.setattr(output, "_save", lambda fig, path: kept.append(fig) or path)
    slo = {"ttft_p90": 0.3, "tpot_p90": 0.03}

    def step(rate, ttft, tpot, settled=None):
        s = {"latency": {"ttft": {"p90": ttft}, "tpot": {"p90": tpot}}, "throughput_tok_s": 100.0 * rate, "slo": slo}
        return {"rate": rate, "summary": {**s, **({"settled": {"slo": settled}} if settled else {})}}
    output._capacity_search([step(1, 0.1, 0.01), step(2, 0.2, 0.02), step(4, 1.3, 0.05, "tpot_p90")], tmp_path / "c.png")
    ax = kept[0].axes[0]
    hollow = {ln.get_label().split(",")[0]: list(ln.get_xdata()) for ln in ax.get_lines() if "stopped early" in ln.get_label()}
    assert hollow == {"tpot p90": [4.0]}   # no TTFT point at 4 requests/s
    pyplot().close(kept[0])

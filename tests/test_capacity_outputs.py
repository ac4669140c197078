"""--find-capacity's outputs at capacity are the search's own step (found by a new-user trial: under
a closed loop the --requests/--plots/--chrome-trace run re-simulated the file's num_requests at the
capacity's clients, while the search's step at that load ran clients x requests-per-client), the
JSON marks the steps stopped early, and the plot draws the figures the SLO names."""

import csv
import json

import yaml

from sim.apps.cli import main
from sim.apps.serve.capacity import _report
from sim.apps.serve.output import slo_series
from tests.test_serve_closed import closed_file


def test_the_outputs_at_capacity_are_the_steps_run(tmp_path):
    """2 clients x 3 requests each in the file: a step at c clients runs 3c requests. The per-request
    table at capacity has the step's count and its TTFT p90 is the step's."""
    raw = closed_file(2, 6, prompt=256, output=16).model_dump(mode="json", exclude={"source"})
    raw["serving"]["slo"] = {"ttft_p90": 0.006}   # 4 clients 5.0 ms, 8 clients 48 ms (max_num_seqs 4)
    f = tmp_path / "closed.yaml"
    f.write_text(yaml.safe_dump(raw))
    out, req = tmp_path / "cap.json", tmp_path / "r.csv"
    assert main(["serve", str(f), "--hw", "h100_sxm", "-q", "--find-capacity", "--json", str(out),
                 "--requests", str(req)]) == 0
    cap = json.loads(out.read_text())
    clients = cap["capacity_clients"]       # a client count, named as one (it was under capacity_rate_req_s)
    assert "capacity_rate_req_s" not in cap and all("clients" in p and "rate" not in p for p in cap["points"])
    assert clients > 2                      # the search moved off the file's 2 clients
    # what the devices cost, as the report prices them (one h100_sxm at its preset's $30,000)
    assert (cap["plan_price_usd"], cap["plan_price"]) == (30000.0, "1 x $30,000")
    rows = list(csv.DictReader(req.open()))
    assert len(rows) == 3 * clients == cap["summary"]["requests"]
    assert all(isinstance(p["stopped_early"], bool) for p in cap["points"])
    assert any(p["stopped_early"] for p in cap["points"] if not p["ok"]) or all(p["ok"] for p in cap["points"][:1])
    # a stopped step names the SLO whose figure is a bound and how many requests its other figures are over (a
    # serving trial read a part run's figures as the full run's); a step run to its end has neither
    for p in cap["points"]:
        assert ({"settled_by", "requests_done", "completed"} <= p.keys()) == p["stopped_early"]
        if p["stopped_early"]:
            assert p["settled_by"] in p["slo_met"] and 0 < p["requests_done"] <= 3 * p["clients"]
            assert 0 <= p["completed"] <= p["requests_done"]   # a TTFT is known before its request completes
    assert main(["serve", str(f), "--hw", "h100_sxm", "-q", "--find-capacity", "--plots", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p" / "latency_throughput_vs_clients.png").is_file()   # the closed loop's knob, not a rate


def test_the_plot_draws_what_the_slo_names():
    assert slo_series({"e2e_p99": 2.0, "ttft_p50": 0.1}) == [("e2e", "p99", 2.0), ("ttft", "p50", 0.1)]
    assert slo_series(None) == [("ttft", "p90", None), ("tpot", "p90", None)]


def _summary(requests: int, duration_s: float) -> dict:
    return dict(requests=requests, duration_s=duration_s, goodput_req_s=1.0, goodput_tok_s=1.0, throughput_req_s=1.0,
                slo_met={"ttft_p90": 0.5})


def test_a_capacity_that_holds_only_for_a_short_stream_is_flagged():
    """A trial: 300 requests gave 136 requests/s as capacity where 10,000 gave 51. At 136/s the 300 arrivals span
    299 / 136 = 2.2 s but the run drained 10 s more: past a quarter of the arrival window, flagged. 3,000 requests
    at 51.9/s: arrivals 57.8 s, the run 68.9 s, a drain of 11 s (19%): not flagged."""
    def report(n, rate, duration_s):
        pts = [dict(rate=rate, ok=True, summary=_summary(n, duration_s)),
               dict(rate=2 * rate, ok=False, summary=_summary(n, duration_s))]
        return _report(pts, rate, 2 * rate, "rate", False)

    assert "drained for 10 s after its arrivals' ~2.2 s" in report(300, 136.0, 12.2)["transient"]
    assert report(3000, 51.875, 68.87)["transient"] is None

"""Closed-loop load (sim.apps.serve.closed): N clients, each sending its next request when the
previous one returns. Properties of any closed loop: never more than N in flight; at N = 1 every
request meets an idle engine, so its TTFT is one lone prefill step; throughput rises with N until
the engine's batch limit saturates it. The benchmark means are checked by hand on a made-up run."""

from __future__ import annotations

import numpy as np
import pytest

from hw_models.machine import load_machine
from sim.apps.serve.arrivals import make_requests
from sim.apps.serve.closed import ClosedLoopSim, benchmark_figures, in_flight_max
from sim.apps.serve.simulator import DONE, REJECTED, ServeResult
from sim.apps.serve.run import serve
from sim.apps.serve.instance import prepare
from sim.apps.serve.spec import serve_file_from_dict
from sim.apps.serve.iteration import features
from sim.core.errors import ConfigError

H100 = load_machine("h100_sxm")


def closed_file(n: int, m: int, prompt: dict | int = 256, output: dict | int = 16, **extra):
    length = (lambda v: {"dist": "fixed", "value": v} if isinstance(v, int) else v)
    raw = {"model": "tinyllama-1.1b", "formats": {"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"},
           "flash_attention": True,
           "serving": {"arrivals": {"process": "closed", "concurrency": n, "num_requests": m, **extra},
                       "lengths": {"prompt": length(prompt), "output": length(output)},
                       "scheduler": {"kind": "vllm", "max_num_seqs": 4}}}
    return serve_file_from_dict(raw, "closed.yaml")


def test_in_flight_never_exceeds_concurrency():
    f = closed_file(3, 24, prompt={"dist": "uniform", "low": 16, "high": 600},
                    output={"dist": "uniform", "low": 2, "high": 40})
    res, s = serve(f, H100)
    assert s["completed"] == 24
    assert in_flight_max(res) == 3
    r = res.requests
    # The first three go out together at t = 0; every later send is some earlier request's reply.
    assert (r["arrival_s"][:3] == 0).all()
    assert set(r["arrival_s"][3:]) <= set(r["finish_s"])


def test_one_client_sees_a_lone_prefill_and_think_time_spaces_sends():
    f = closed_file(1, 5, prompt=300, output=4, think_time_s=0.25)
    setup = prepare(f, H100)
    reqs = make_requests(f)
    res = ClosedLoopSim(setup, reqs).run()
    r = res.requests
    lone = setup.target_cost(features([(300, 300)]))[0]
    np.testing.assert_allclose(r["first_token_s"] - r["arrival_s"], lone, rtol=1e-12)
    np.testing.assert_allclose(r["arrival_s"][1:], r["finish_s"][:-1] + 0.25, rtol=1e-12)


@pytest.mark.parametrize("clients", [1, 2])
def test_the_run_ends_at_the_last_reply_not_after_a_last_think(clients):
    """A client with nothing left to send does not think: the run's wall time, which utilisation, idle energy and
    J/token are taken over, ends at the last reply. (A serving trial: 1 client, 3 requests, 10 s of think time read
    engine_busy 0.087 against 0.124 and J/token 12.4 against 9.4, over one think time past the last reply.) With one
    client it is every request's E2E plus a think between each two sends."""
    f = closed_file(clients, 4, prompt=300, output=4, think_time_s=0.5)
    res, s = serve(f, H100)
    r = res.requests
    assert res.makespan_s == pytest.approx(float(r["finish_s"].max()), rel=1e-12)
    if clients == 1:
        assert res.makespan_s == pytest.approx(float((r["finish_s"] - r["arrival_s"]).sum()) + 3 * 0.5, rel=1e-12)
    busy = float(res.iterations["duration_s"].sum())
    assert s["engine_busy"] == pytest.approx(busy / res.makespan_s, rel=1e-9)


def test_front_end_delay_adds_to_every_ttft():
    f = closed_file(1, 3, prompt=300, output=4)
    setup = prepare(f, H100)
    base = ClosedLoopSim(setup, make_requests(f)).run().requests
    slow = ClosedLoopSim(setup, make_requests(f), front_end_s=0.004).run().requests
    np.testing.assert_allclose((slow["first_token_s"] - slow["arrival_s"]) - (base["first_token_s"] - base["arrival_s"]),
                               0.004, rtol=1e-9)


def test_throughput_rises_with_clients_until_the_batch_limit():
    rate = {n: serve(closed_file(n, 32), H100)[1]["benchmark"]["req_s"] for n in (1, 2, 4, 8)}
    assert rate[2] > 1.3 * rate[1] and rate[4] > 1.3 * rate[2]
    # max_num_seqs 4: four more clients only wait in the queue.
    assert rate[8] == pytest.approx(rate[4], rel=0.05)


def test_benchmark_means_by_hand():
    # Two requests: sent at 0 and 1 s, first tokens at 0.5 and 1.2 s, last at 2.5 (5 tokens) and 1.2 s (1 token).
    req = {"arrival_s": np.array([0.0, 1.0]), "first_token_s": np.array([0.5, 1.2]),
           "finish_s": np.array([2.5, 1.2]), "output_tokens": np.array([5.0, 1.0]),
           "scheduled_s": np.array([0.0, 1.0]), "max_tbt_s": np.array([0.5, np.nan]),
           "status": np.array([DONE, DONE])}
    res = ServeResult(req, {}, np.zeros(0), np.zeros(0), 0, 0, 0, 1, 0, 2.5, 6, 0.0)
    b = benchmark_figures(res, devices=2)
    assert b["ttft_s"] == pytest.approx((0.5 + 0.2) / 2)
    assert b["tpot_s"] == pytest.approx(2.0 / 4)          # the one-token request has no TPOT
    assert b["itl_s"] == pytest.approx(2.0 / 4)
    assert b["e2e_s"] == pytest.approx((2.5 + 0.2) / 2)
    assert b["req_s"] == pytest.approx(2 / 2.5) and b["out_tok_s_per_gpu"] == pytest.approx(6 / 2.5 / 2)
    w = benchmark_figures(res, devices=2, warmup=1)       # the first send left out
    assert w["ttft_s"] == pytest.approx(0.2) and w["completed"] == 1


def test_itl_is_the_gap_between_streamed_chunks():
    """vLLM's client times one gap per streamed chunk; a speculative step hands a request several tokens in one.
    By hand: the 5-token request's first token at 0.5 s, then two chunks of 2 tokens at 1.5 and 2.5 s: TPOT is
    2.0 / 4 = 0.5 s, ITL 2.0 / 2 = 1.0 s (it had read ITL = TPOT, a serving engineer's trial). In a run, the mean
    chunk is the mean tokens a step accepts plus its bonus token, (1 - alpha^(k+1)) / (1 - alpha) = 2.77 at k 4,
    alpha 0.7 (Leviathan et al., 2023), so ITL / TPOT comes near it."""
    req = {"arrival_s": np.array([0.0]), "first_token_s": np.array([0.5]), "finish_s": np.array([2.5]),
           "output_tokens": np.array([5.0]), "scheduled_s": np.array([0.0]), "max_tbt_s": np.array([1.0]),
           "status": np.array([DONE])}
    res = ServeResult(req, {}, np.array([1.0, 1.0]), np.array([1.0, 1.0]), 0, 0, 0, 1, 0, 2.5, 5, 0.0)
    b = benchmark_figures(res, devices=1)
    assert b["tpot_s"] == pytest.approx(0.5) and b["itl_s"] == pytest.approx(1.0)
    raw = {"model": "llama2-7b", "formats": {"weights": "fp16", "activations": "fp16", "kv_cache": "fp16"},
           "flash_attention": True,
           "serving": {"arrivals": {"process": "closed", "concurrency": 4, "num_requests": 12},
                       "lengths": {"prompt": {"dist": "fixed", "value": 256}, "output": {"dist": "fixed", "value": 64}},
                       "scheduler": {"kind": "vllm"},
                       "speculative": {"draft": "tinyllama-1.1b", "k": 4, "alpha": 0.7}}}
    run = serve(serve_file_from_dict(raw, "spec.yaml"), H100)[1]["benchmark"]
    assert run["itl_s"] / run["tpot_s"] == pytest.approx((1 - 0.7 ** 5) / 0.3, rel=0.1)


def test_itl_without_multi_token_chunks_is_the_measured_requests_own():
    """One token per chunk (no speculation): ITL is the measured requests' decode span over their gaps, the warm-up
    send left out, not the run's pooled chunk gap. By hand: the warm-up request's gaps are 1 s (tokens at 0.5, 1.5,
    2.5), the measured one's 0.1 s (1.2, 1.3, 1.4): ITL 0.2 / 2 = 0.1 s, where the pooled mean is 0.55 s."""
    req = {"arrival_s": np.array([0.0, 1.0]), "first_token_s": np.array([0.5, 1.2]),
           "finish_s": np.array([2.5, 1.4]), "output_tokens": np.array([3.0, 3.0]),
           "scheduled_s": np.array([0.0, 1.0]), "max_tbt_s": np.array([1.0, 0.1]), "status": np.array([DONE, DONE])}
    res = ServeResult(req, {}, np.array([1.0, 0.1]), np.array([2.0, 2.0]), 0, 0, 0, 1, 0, 2.5, 6, 0.0)
    assert benchmark_figures(res, devices=1, warmup=1)["itl_s"] == pytest.approx(0.1)
    assert benchmark_figures(res, devices=1)["itl_s"] == pytest.approx((2.0 + 0.2) / 4)


@pytest.mark.parametrize("settings, message", [
    ({"serving.arrivals.warmup_requests": 8}, "serving.arrivals: warmup_requests 8 leaves none of num_requests 8 to "
                                              "measure"),   # the means had read "nan us over 0 requests", exit 0
    ({"serving.arrivals.concurrency": 0}, "serving.arrivals.concurrency: Input should be greater than 0"),
])
def test_a_bad_closed_loop_is_one_line_at_the_key_the_file_has(tmp_path, capsys, settings, message):
    """The key as the file writes it: no union tag (`serving.arrivals.closed.concurrency` named a key no file has)."""
    import yaml
    from sim.apps.cli import main

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(dict(model="llama3-8b", serving=dict(
        arrivals=dict(process="closed", concurrency=2, num_requests=8),
        lengths=dict(prompt=dict(dist="fixed", value=64), output=dict(dist="fixed", value=4))))))
    argv = ["serve", str(path), "--hw", "h100_sxm", "-q"] + [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"error: {path} (with {', '.join(settings)} overridden): {message}"


def test_closed_loop_behind_a_router_is_refused():
    f = closed_file(2, 4)
    f = f.model_copy(update={"serving": f.serving.model_copy(update={"router": {"replicas": 2}})})
    with pytest.raises(ConfigError, match="closed drives one instance"):
        serve(f, H100)


def test_find_capacity_searches_the_client_count():
    from sim.apps.serve.capacity import find_capacity

    f = closed_file(2, 8, prompt=256, output=16)
    base = serve(closed_file(1, 4, prompt=256, output=16), H100)[1]["benchmark"]["ttft_s"]
    cap = find_capacity(f, H100, {"ttft_mean": 3.5 * base})
    assert cap["knob"] == "concurrency" and isinstance(cap["rate"], int) and cap["rate"] >= 1
    counts = sorted({p["rate"] for p in cap["points"]})
    assert counts == [int(c) for c in counts]
    # the answer meets the SLO and one more client does not
    assert any(p["rate"] == cap["rate"] and p["ok"] for p in cap["points"])
    assert any(p["rate"] == cap["rate"] + 1 and not p["ok"] for p in cap["points"])


def test_benchmark_figures_without_gaps_or_completions():
    """What a client reports with nothing to average, by hand: one request answered with a single token (at
    0.4 s, sent at 0.1) has a TTFT and an E2E of 0.3 s but no gap between tokens, so TPOT and ITL are NaN,
    over a span of 0.3 s: 1 / 0.3 requests/s, 1 / 0.3 tokens/s, half that per GPU on 2. With only a
    rejected request nothing completed: every mean NaN, every rate 0."""
    req = {"arrival_s": np.array([0.1, 0.2]), "first_token_s": np.array([0.4, np.nan]),
           "finish_s": np.array([0.4, np.nan]), "output_tokens": np.array([1.0, 0.0]),
           "scheduled_s": np.array([0.1, np.nan]), "max_tbt_s": np.array([np.nan, np.nan]),
           "status": np.array([DONE, REJECTED])}
    res = ServeResult(req, {}, np.zeros(0), np.zeros(0), 0, 0, 0, 1, 0, 0.4, 1, 0.0)
    b = benchmark_figures(res, devices=2)
    assert b["ttft_s"] == pytest.approx(0.3) and b["e2e_s"] == pytest.approx(0.3) and b["completed"] == 1
    assert np.isnan(b["tpot_s"]) and np.isnan(b["itl_s"])
    assert b["req_s"] == pytest.approx(1 / 0.3) and b["out_tok_s"] == pytest.approx(1 / 0.3)
    assert b["out_tok_s_per_gpu"] == pytest.approx(0.5 / 0.3)
    none = benchmark_figures(res, devices=2, warmup=1)     # the answered request left out as warm-up
    assert none["completed"] == 0 and (none["req_s"], none["out_tok_s"], none["out_tok_s_per_gpu"]) == (0.0, 0.0, 0.0)
    assert all(np.isnan(none[k]) for k in ("ttft_s", "tpot_s", "itl_s", "e2e_s"))


def test_in_flight_max_counts_each_reply_once():
    """Kills closed.in_flight_max__mutmut_13 (a reply counted as two). Sends at 0, 1, 2, 3 s; the first
    answered at 1.5 s, the rest at 10 s: in flight 1, 2, then 1 after the reply, 2, 3. The most is 3 (a reply
    counted twice would leave 0, 1, 2 after it: 2)."""
    n = 4
    req = {"arrival_s": np.array([0.0, 1.0, 2.0, 3.0]), "finish_s": np.array([1.5, 10.0, 10.0, 10.0]),
           "status": np.full(n, DONE)}
    res = ServeResult(req, {}, np.zeros(0), np.zeros(0), 0, 0, 0, 1, 0, 10.0, 1, 0.0)
    assert in_flight_max(res) == 3


def test_closed_loop_energy_counts_idle_power_and_every_device():
    """A closed loop's energy is an open loop's: its board (sim.apps.serve.energy.instance_board) gives the idle power
    between iterations (think time leaves the engine idle) and the devices a TP plan spans. h100_sxm idles at
    117.1 W a device, so with think time the idle share is idle seconds x 117.1 W x 2 devices exactly."""
    raw = closed_file(1, 4, think_time_s=0.05).model_dump(mode="json", exclude={"source"})
    raw["parallel"] = {"tp": 2, "topology": "dgx_h100"}
    res, s = serve(serve_file_from_dict(raw, "closed.yaml"), H100)
    e = s["energy"]
    assert e["devices"] == 2
    idle_s = res.makespan_s - float(res.iterations["duration_s"].sum())
    assert idle_s > 0.1                       # three think times of 50 ms at least
    assert e["by_phase_j"]["idle"] == pytest.approx(117.1 * 2 * idle_s, rel=1e-9)


def test_the_report_says_the_warm_up_sends_are_left_out_of_its_closed_loop_row_only():
    """A serving trial: with warmup_requests the closed-loop row's means (the later sends') disagreed with every
    other table of the report (all requests) without a word. The row now says what it left out and that the rest
    count every request; the JSON's benchmark figures carry the count."""
    from sim.apps.serve.report import _optional_rows as summary_rows   # the summary's optional rows

    f = closed_file(2, 8, prompt=256, output=16, warmup_requests=2)
    _, extra = serve(f, H100)
    assert extra["benchmark"]["warmup_requests"] == 2 and extra["benchmark"]["completed"] == 6
    (row,) = [v for k, v in summary_rows({"benchmark": extra["benchmark"]}) if k == "closed loop (means)"]
    assert row.endswith("over 6 requests after 2 warm-up sends (every other figure of this report counts every request)")
    (plain,) = [v for k, v in summary_rows({"benchmark": serve(closed_file(2, 8), H100)[1]["benchmark"]})
                if k == "closed loop (means)"]
    assert "warm-up" not in plain


def test_a_connection_pool_holds_the_excess_sends_in_the_client_with_their_clocks_running():
    """Four clients over two connections (Closed.max_connections): the first two requests run as a two-client loop
    would; the other two sends wait in the client until those replies free the connections, then meet the engine
    as idle as the first pair did. So their TTFT is the first pair's E2E plus the first pair's own TTFT, and the
    four-request mean TTFT is ttft2 + e2e2 / 2, with ttft2 and e2e2 a two-client, two-request run's (equal
    lengths, no front end: the same steps in both waves)."""
    two = serve(closed_file(2, 2, prompt=300, output=8), H100)[0].requests
    ttft2, e2e2 = float(np.mean(two["first_token_s"] - two["arrival_s"])), float(np.mean(two["finish_s"]))
    res, s = serve(closed_file(4, 4, prompt=300, output=8, max_connections=2), H100)
    r = res.requests
    assert s["completed"] == 4
    assert (r["arrival_s"] == 0).all()   # every client sent at t = 0; two waited for a connection
    ttft = r["first_token_s"] - r["arrival_s"]
    assert float(np.mean(ttft)) == pytest.approx(ttft2 + e2e2 / 2, rel=1e-9)
    assert sorted(ttft)[2:] == pytest.approx([e2e2 + ttft2] * 2, rel=1e-9)
    assert res.iterations["running"].max() <= 2   # never more than the pool at the engine


def test_a_pool_at_least_the_clients_changes_nothing():
    base = serve(closed_file(3, 9, prompt=200, output=6), H100)[0].requests
    pooled = serve(closed_file(3, 9, prompt=200, output=6, max_connections=3), H100)[0].requests
    for col in ("arrival_s", "first_token_s", "finish_s"):
        np.testing.assert_array_equal(base[col], pooled[col])


def test_the_summary_says_what_the_pool_held_back(capsys):
    """Four clients over two connections (the case above, by hand): two sends waited for a connection, each the
    first pair's E2E, so the mean wait over the four sends is e2e2 / 2; the report names the pool in a row of its
    own, and a loop without a pool has no such entry."""
    two = serve(closed_file(2, 2, prompt=300, output=8), H100)[0].requests
    e2e2 = float(np.mean(two["finish_s"]))
    _, s = serve(closed_file(4, 4, prompt=300, output=8, max_connections=2), H100)
    pool = s["benchmark"]["client_pool"]
    assert (pool["connections"], pool["waited"]) == (2, 2)
    assert pool["wait_s"] == pytest.approx(e2e2 / 2, rel=1e-9)
    assert "client_pool" not in serve(closed_file(4, 4, prompt=300, output=8), H100)[1]["benchmark"]
    from sim.apps.serve.report import _optional_rows
    rows = dict(_optional_rows(s))
    assert rows["client pool"].startswith("2 connections: 2 sends waited for one, ")

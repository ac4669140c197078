"""The serving summary's figures on a made-up result, worked by hand (issue 32: the survivors of the
mutation job on sim.apps.serve.metrics): a run that does not start at t = 0, runs on 2 instances,
rejects a request and draws idle power; and a run in which nothing completed."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from hw_models.power import Board
from sim.apps.serve.metrics import stats, summarize
from sim.apps.serve.simulator import DONE, ITER_COLUMNS, REJECTED, ServeResult

NAN = float("nan")


def _result(requests: dict[str, list[float]], iterations: dict[str, list[float]], tbt: list[float],
            tbt_weight: list[float] | None = None, **kw) -> ServeResult:
    its = {c: np.array(iterations.get(c, [0.0] * len(iterations["duration_s"])), dtype=float) for c in ITER_COLUMNS}
    weight = np.ones(len(tbt)) if tbt_weight is None else np.array(tbt_weight, dtype=float)
    return ServeResult(requests={k: np.array(v, dtype=float) for k, v in requests.items()}, iterations=its,
                       tbt_s=np.array(tbt, dtype=float), tbt_weight=weight, **kw)


def test_summary_of_a_two_instance_run_by_hand():
    """Requests: A arrives at 1 s, first token 1.5 s, done 2.5 s, 3 tokens (gaps 0.4, 0.6 s); B arrives
    2 s, scheduled 2.5 s, tokens at 3 s and 4 s; C arrives 3 s and is refused. Span 4 - 1 = 3 s (first
    arrival to last finish): 5 tokens / 3 s, 2 requests / 3 s. TTFT 0.5, 1.0 (mean 0.75); E2E 1.5, 2.0
    (1.75); queue 0, 0.5 (0.25); TPOT (2.5 - 1.5) / 2 = 0.5 and (4 - 3) / 1 = 1.0 (0.75). Gaps 0.4, 0.6
    and 1.0 s, the last seen twice: TBT mean 3 / 4 = 0.75. SLO TBT <= 0.6 s (a request's largest gap) and
    TTFT <= 10 s: A (0.6, at the limit) meets both, B (1.0) not the first: goodput 1 / 3 req/s, 3 / 3 tok/s.
    KV blocks in use 2, 2, 4 weighted by 0.5, 0.5, 1.0 s: 3 of 16 = 0.1875. Speculation: 10 tokens in
    4 steps, 2.5 per step.
    Iterations 0.5, 0.5, 1.0 s (busy 2 s) over a makespan of 4 s x 2 instances: engine busy 2 / 8 = 0.25;
    the gpu's 2 busy s -> utilization 0.25; the host's 0.3 s over 3 iterations: 0.1 s each.
    Energy: 10 + 10 + 20 = 40 J in iterations; idle 8 - 2 = 6 s at 10 W on 1 device: 60 J; 100 J in
    all, 100 / 5 = 20 J per output token."""
    res = _result(
        requests=dict(arrival_s=[1.0, 2.0, 3.0], scheduled_s=[1.0, 2.5, NAN], first_token_s=[1.5, 3.0, NAN],
                      finish_s=[2.5, 4.0, NAN], prompt_tokens=[8, 4, 9], output_tokens=[3, 2, 0],
                      preemptions=[0, 1, 0], prefix_hit_tokens=[0, 0, 0], max_tbt_s=[0.6, 1.0, NAN],
                      status=[DONE, DONE, REJECTED]),
        iterations=dict(start_s=[1.0, 2.5, 3.0], duration_s=[0.5, 0.5, 1.0], energy_j=[10.0, 10.0, 20.0],
                        seqs=[1, 1, 2], tokens=[8, 4, 2], prefill_seqs=[1, 1, 0], kv_blocks_used=[2, 2, 4]),
        tbt=[0.4, 0.6, 1.0], tbt_weight=[1, 1, 2], spec_steps=4, spec_tokens=10, preemptions=1, swapped_out_blocks=4, swapped_in_blocks=4, total_blocks=16,
        peak_blocks=5, makespan_s=4.0, tokens_out=5, energy_j=40.0, busy_s={"gpu": 2.0, "host": 0.3},
        instances=2, rejected_reasons={"its KV cache never fits the pool": 1}, board=Board(10.0, 1))
    slo = {"tbt_p99": 0.6, "ttft_p90": 10.0}
    out = summarize(res, slo)
    assert (out["requests"], out["completed"], out["rejected"]) == (3, 2, 1)
    assert out["rejected_reasons"] == {"its KV cache never fits the pool": 1}
    assert out["duration_s"] == pytest.approx(3.0, rel=1e-12)
    assert out["throughput_tok_s"] == pytest.approx(5 / 3, rel=1e-12)
    assert (out["goodput_req_s"], out["goodput_tok_s"]) == pytest.approx((1 / 3, 1.0), rel=1e-12)
    assert (out["preemptions"], out["swapped_out_blocks"]) == (1, 4)
    assert (out["kv_blocks_total"], out["kv_blocks_peak"]) == (16, 5)
    assert out["engine_busy"] == pytest.approx(0.25, rel=1e-12)
    assert out["utilization"] == pytest.approx({"gpu": 0.25, "host": 0.3 / 8}, rel=1e-12)
    assert out["host_per_iteration_s"] == pytest.approx(0.1, rel=1e-12)
    assert out["energy"]["total_j"] == pytest.approx(100.0, rel=1e-12)
    assert out["energy_per_token_j"] == pytest.approx(20.0, rel=1e-12)
    lat = out["latency"]
    assert [lat[m]["mean"] for m in ("ttft", "e2e", "queue", "tpot", "tbt")] == pytest.approx(
        [0.75, 1.75, 0.25, 0.75, 0.75], rel=1e-12)
    assert out["kv_usage_mean"] == pytest.approx(0.1875, rel=1e-12)
    assert (out["instances"], out["slo"], out["spec_tokens_per_step"]) == (2, slo, 2.5)
    assert summarize(replace(res, busy_s={"gpu": 2.0}), slo)["host_per_iteration_s"] == 0.0   # no host work


def test_weighted_median_needs_half_the_weight():
    """1 with weight 0.496 and 2 with 0.504: less than half the weight is at or below 1, so p50 is 2."""
    assert stats(np.array([1.0, 2.0]), np.array([0.496, 0.504]))["p50"] == 2.0


def test_summary_of_a_run_that_completed_nothing():
    """One request, refused at t = 0: no tokens, no iterations, no gaps, a makespan of 0. Every rate and the
    span are 0 (not a division by 0), the energy per token undefined, the batch statistics empty, no speculation
    figure, and every latency
    statistic NaN, under the same names as a run with data (mean, p50, p90, p99, max)."""
    res = _result(
        requests=dict(arrival_s=[0.0], scheduled_s=[NAN], first_token_s=[NAN], finish_s=[NAN], prompt_tokens=[9],
                      output_tokens=[0], preemptions=[0], prefix_hit_tokens=[0], max_tbt_s=[NAN],
                      status=[REJECTED]),
        iterations=dict(duration_s=[]), tbt=[], preemptions=0, swapped_out_blocks=0, swapped_in_blocks=0,
        total_blocks=16, peak_blocks=0, makespan_s=0.0, tokens_out=0, energy_j=0.0)
    out = summarize(res, {})
    assert (out["completed"], out["rejected"], out["iterations"]) == (0, 1, 0)
    assert (out["throughput_tok_s"], out["goodput_req_s"]) == (0.0, 0.0)
    assert math.isnan(out["energy_per_token_j"])   # no token out: undefined (JSON null), not 0 J
    assert (out["host_per_iteration_s"], out["kv_usage_mean"]) == (0.0, 0.0)
    assert (out["duration_s"], out["throughput_req_s"], out["goodput_tok_s"], out["engine_busy"]) == (0.0,) * 4
    assert (out["batch_size"], out["tokens_per_iteration"], out["spec_tokens_per_step"]) == ({}, {}, None)
    for metric in ("ttft", "tpot", "e2e", "queue", "tbt"):
        assert set(out["latency"][metric]) == {"mean", "p50", "p90", "p99", "max"}
        assert all(math.isnan(v) for v in out["latency"][metric].values())
    # the rejected request counts against a percentile SLO as never served: unbounded, not unknown (NaN)
    assert summarize(res, {"ttft_p90": 0.2})["slo_met"] == {"ttft_p90": math.inf}

"""Serving validation's error figures worked by hand (issue 32: survivors of the mutation job in
sim.apps.serve.validate): the signed error of each metric measured, and the mean absolute error per
(GPU, engine, model) and over all runs."""

from __future__ import annotations

import math

import pytest

from sim.apps.serve.validate import Result, Run, group_key, mape, overall, signed_errors


def result(name: str, model: str, error: dict[str, float]) -> Result:
    return Result(Run(name, "h100_sxm", "vllm", model, 1024, 128, 16), {}, error, {})


def test_signed_errors_by_hand():
    """Kills validate.signed_errors__mutmut_3. sim 0.12 s against 0.10 s measured is +20 %, 0.008 against 0.010
    is -20 %; a metric not simulated, measured as 0 or not finite has no error."""
    got = signed_errors({"ttft_s": 0.12, "tpot_s": 0.008, "e2e_s": 1.0},
                        {"ttft_s": 0.10, "tpot_s": 0.010, "req_s": 2.0, "e2e_s": 0.0})
    assert got == pytest.approx({"ttft_s": 0.2, "tpot_s": -0.2}, rel=1e-12)
    assert signed_errors({"ttft_s": 1.0}, {"ttft_s": float("nan")}) == {}


def test_mean_absolute_errors_per_group_and_overall():
    """Kills validate.group_key__mutmut_3, mape__mutmut_3/13 and overall__mutmut_3. Three runs, two of
    Qwen/Qwen3-32B (TTFT errors +10 % and -30 %: MAPE 20 %; TPOT measured in one, -4 %) and one of
    meta-llama/Llama-3.1-8B (TTFT +50 %). Groups by (GPU, engine, the model's last path part), sorted;
    overall TTFT (10 + 30 + 50) / 3 = 30 %, TPOT 4 %, E2E and req/s measured nowhere: NaN."""
    rs = [result("a", "Qwen/Qwen3-32B", {"ttft_s": 0.1}), result("b", "Qwen/Qwen3-32B", {"ttft_s": -0.3, "tpot_s": -0.04}),
          result("c", "meta-llama/Llama-3.1-8B", {"ttft_s": 0.5})]
    assert group_key(rs[0]) == ("h100_sxm", "vllm", "Qwen3-32B")
    assert group_key(result("d", "llama2-7b", {}))[2] == "llama2-7b"   # a name without an organisation
    got = mape(rs)
    assert list(got) == [("h100_sxm", "vllm", "Llama-3.1-8B"), ("h100_sxm", "vllm", "Qwen3-32B")]
    qwen = got[("h100_sxm", "vllm", "Qwen3-32B")]
    assert qwen["runs"] == 2 and qwen["ttft_s"] == pytest.approx(0.2, rel=1e-12)
    assert qwen["tpot_s"] == pytest.approx(0.04, rel=1e-12) and math.isnan(qwen["e2e_s"])
    assert got[("h100_sxm", "vllm", "Llama-3.1-8B")]["runs"] == 1
    o = overall(rs)
    assert o["ttft_s"] == pytest.approx(0.3, rel=1e-12) and o["tpot_s"] == pytest.approx(0.04, rel=1e-12)
    assert math.isnan(o["e2e_s"]) and math.isnan(o["req_s"])

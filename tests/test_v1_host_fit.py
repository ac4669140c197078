"""vLLM V1's per-sequence host term (sim.apps.serve.v1_host_fit, scripts/fit_v1_host.py): the step it
predicts by hand, and the fit recovering a figure planted in synthetic runs."""

import pytest

from sim.apps.serve import mlenergy as M
from sim.apps.serve.v1_host_fit import StepPoint, fit, prompts_per_step, steady_device_s, step_mape


def run(n: int, tok_s: float, power_w: float = 500.0) -> M.Run:
    return M.Run("H100", "meta-llama/Llama-3.1-8B-Instruct", "bfloat16", "lm-arena-chat", 1, 1, 1, n, 900.0,
                 power_w / tok_s, power_w, tok_s)


def test_step_is_max_of_device_and_host_plus_serial():
    # 512 sequences, device 20 ms, curve 22 ms, serial 8 ms: at 0 the host binds (22 + 8 = 30 ms);
    # at 50 us a sequence it is 22 + 25.6 = 47.6 ms, + 8 = 55.6 ms; a 40 ms device at 0: 48 ms.
    p = StepPoint(run(512, 512 / 0.050), 0.020, 0.022, 0.008, 0.050, 700.0)
    assert p.step_s(0.0) == pytest.approx(0.030)
    assert p.step_s(50e-6) == pytest.approx(0.0556)
    q = StepPoint(run(512, 512 / 0.050), 0.040, 0.022, 0.008, 0.050, 700.0)
    assert q.step_s(0.0) == pytest.approx(0.048)
    assert not p.capped and StepPoint(run(512, 1e4, 690.0), 0, 0, 0, 1, 700.0).capped   # 690 >= 0.97 x 700


def test_fit_recovers_a_planted_figure():
    # Host-bound runs measured at exactly curve + 37 us x n + serial: the fit's grid (1 us) finds 37 us, MAPE 0.
    pts = []
    for n in (64, 256, 1024):
        measured = 1e-3 + n * 50e-6 + n * 37e-6 + 2e-3
        pts.append(StepPoint(run(n, n / measured), 1e-3, 1e-3 + n * 50e-6, 2e-3, measured, 700.0))
    assert fit(pts) == pytest.approx(37e-6)
    assert step_mape(pts, fit(pts)) == pytest.approx(0.0, abs=1e-9)
    assert step_mape(pts, 0.0) > 0.2


def test_steady_step_adds_the_prompts_that_replace_finished_requests():
    # 512 sequences of 256 output tokens: 2 requests finish a step and 2 prompts are computed. A decode step of
    # 20 ms that one whole prompt lengthens to 26 ms: 20 + 2 x 6 = 32 ms. sourcegraph-fim's 8 sequences of
    # 250 tokens: 0.032 prompts a step, the 6 ms a prompt adds paid once in 31.25 steps: 20.192 ms.
    r = M.Run("H100", "meta-llama/Llama-3.1-8B-Instruct", "bfloat16", "lm-arena-chat", 1, 1, 1, 512, 256.0, 0.1, 500.0, 1e4)
    assert prompts_per_step(r) == pytest.approx(2.0)
    assert steady_device_s(0.020, 0.026, prompts_per_step(r)) == pytest.approx(0.032)
    f = M.Run("H100", "Qwen/Qwen3-Coder-30B-A3B-Instruct", "bfloat16", "sourcegraph-fim", 1, 1, 1, 8, 250.0, 0.1,
              500.0, 1e4)
    assert steady_device_s(0.020, 0.026, prompts_per_step(f)) == pytest.approx(0.020192)

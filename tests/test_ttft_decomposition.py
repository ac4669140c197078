"""scripts/serving_ttft_decomposition.py: each shape of TTFT miss is recognised on runs built from it by
hand, with its own coefficients back, and a shape that is not there explains less."""

import importlib.util

import numpy as np
import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("ttft_decomposition", ROOT / "scripts" / "serving_ttft_decomposition.py")
dec = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dec)

ISL = np.array([1024.0, 2048.0, 4096.0, 1024.0, 4096.0, 2048.0])
SIM_MS = np.array([60.0, 140.0, 200.0, 90.0, 500.0, 100.0])   # not proportional to ISL (other loads)


def test_a_constant_miss_is_the_constant_shape():
    # 80 ms more than simulated on every run, whatever its prompt or simulated TTFT: a front end.
    r2, mape, (a,) = dec.shape_fits(ISL, SIM_MS, SIM_MS + 80.0)["constant"]
    assert (r2, mape, a) == pytest.approx((1.0, 0.0, 80.0), abs=1e-9)


def test_a_per_token_miss_is_found_with_its_rate():
    # 10 ms + 45 us a prompt token: 1024 tokens -> 56.08 ms, 4096 -> 194.32 ms more than simulated.
    meas = SIM_MS + 10.0 + 0.045 * ISL
    fits = dec.shape_fits(ISL, SIM_MS, meas)
    r2, mape, (a, b) = fits["per prompt token"]
    assert (r2, mape, a, b) == pytest.approx((1.0, 0.0, 10.0, 0.045), abs=1e-9)
    assert fits["constant"][0] < 0.99 and fits["x simulated TTFT"][0] < 0.99


def test_a_miss_proportional_to_the_simulated_ttft_is_that_shape():
    # Measured = 1.8 x simulated (a queue the replay holds at another rate): miss = 0.8 x simulated.
    fits = dec.shape_fits(ISL, SIM_MS, 1.8 * SIM_MS)
    r2, mape, (a, k) = fits["x simulated TTFT"]
    assert (r2, mape, a, k) == pytest.approx((1.0, 0.0, 0.0, 0.8), abs=1e-9)
    assert fits["per prompt token"][0] < 0.99

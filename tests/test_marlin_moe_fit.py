"""vLLM's fused Marlin MoE for MXFP4 experts (kernel family marlin_moe_mxfp4, sim.apps.serve.marlin_moe_fit): a row's
fraction by hand, the curve's shape, where the vllm stack runs it, and the shipped curve is the fit's on the
silicon sample's training half (with the shared data)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hw_models.stack.kernel_families import families
from hw_models.stack.spec import load_stack
from sim.apps.serve import marlin_moe_fit as M
from sim.core.model import load_model
from tests.conftest import ROOT

PEAK = 989.4e12    # h100_sxm.yaml bf16


def test_a_row_s_fraction_by_hand():
    """1k prompt at TP 2: expert FLOPs = 3 GEMMs x 2 x 1024 tokens x top-4 x 2880 x 2880 x 36 layers / 2 ranks
    = 3.669 TFLOP; measured 59.3 ms against the dense family's 35.4 ms: the experts take 23.9 ms more than their
    3.669e12 / (989.4e12 x 0.70) = 5.30 ms, so f = 3.669e12 / (989.4e12 x 29.2 ms) = 0.127."""
    m = load_model(M.PRESET)
    p = M.Point("r", 1024, 2, 0.0593, 0.0354)
    assert p.expert_flops(m) == pytest.approx(3 * 2 * 1024 * 4 * 2880 * 2880 * 36 / 2)
    assert p.expert_flops(m) == pytest.approx(3.669e12, rel=1e-3)
    assert p.rows_per_expert(m) == 32 and M.Point("r", 8192, 8, 1.0, 0.5).rows_per_expert(m) == 256
    assert p.fraction(m, PEAK) == pytest.approx(3.669e12 / (PEAK * (0.0593 - 0.0354 + 3.669e12 / (PEAK * 0.70))), rel=1e-3)
    assert p.fraction(m, PEAK) == pytest.approx(0.127, abs=0.001)
    # a row the dense family already matched needs the dense family's own fraction
    assert M.Point("r", 1024, 2, 0.05, 0.05).fraction(m, PEAK) == pytest.approx(M.DENSE_FRACTION)


def test_the_curve_is_flat_below_its_first_point_and_never_falls():
    m = load_model(M.PRESET)
    short = [M.Point(f"s{i}", 1024, 2, 0.0354 + gap, 0.0354) for i, gap in enumerate((0.020, 0.024, 0.028))]
    long_ = [M.Point(f"l{i}", 8192, 2, 0.132 + gap, 0.132) for i, gap in enumerate((0.40, 0.45, 0.50))]
    curve = M.rate_points(short + long_, m, PEAK)
    assert [x for x, _ in curve] == [1, 32, 256] and curve[0][1] == curve[1][1]
    assert curve[1][1] == round(short[1].fraction(m, PEAK), 2)
    assert all(b[1] >= a[1] for a, b in zip(curve, curve[1:]))   # the long prompts' lower fraction held up


def test_the_vllm_stack_runs_it_for_mxfp4_experts_on_hopper_only():
    s = load_stack("vllm")
    assert s.family("mxfp4", 9.0, experts=True) == M.FAMILY
    assert s.family("mxfp4", 9.0, experts=False) == M.DENSE              # a dense MXFP4 Linear: Marlin's
    assert s.family("mxfp4", 10.0, experts=True) == M.DENSE              # Blackwell: not this kernel
    assert s.family("mxfp4", 8.0, experts=True) == M.DENSE               # Ampere: not measured
    fam = families()[M.FAMILY]
    assert fam.rate_fraction(32, False) < families()[M.DENSE].rate_fraction(32, False)


def test_shipped_curve_is_the_fit(shared_validation):
    """scripts/fit_moe_marlin.py --check: the curve is the stored replays' fit on the measured training rows."""
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "fit_moe_marlin.py"), "--check"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr

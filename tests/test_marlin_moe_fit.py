"""vLLM's fused Marlin MoE for MXFP4 experts (kernel family marlin_moe_mxfp4, sim.apps.serve.marlin_moe_fit): a row's
fraction by hand, the curve's shape, where the vllm stack runs it, and the shipped curve is the fit's on the
silicon sample's training half (with the shared data)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
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
    short = [M.Point(f"s{i}", 1024, 4, 0.0354 + gap, 0.0354) for i, gap in enumerate((0.020, 0.024, 0.028))]
    long_ = [M.Point(f"l{i}", 8192, 4, 0.132 + gap, 0.132) for i, gap in enumerate((0.40, 0.45, 0.50))]
    curve, exponent, ref = M.fit(short + long_, m, PEAK)
    assert [x for x, _ in curve] == [1, 32, 256] and curve[0][1] == curve[1][1]
    # one TP: no slope to fit, and each intercept is the geometric mean of its rows' fractions
    assert abs(exponent) < 1e-9 and ref == pytest.approx(128 * 2880 * 2880 / 4)
    geo = float(np.exp(np.mean(np.log([p.fraction(m, PEAK) for p in short]))))
    assert curve[1][1] == float(f"{geo:.3g}")
    assert all(b[1] >= a[1] for a, b in zip(curve, curve[1:]))   # the long prompts' lower fraction held up


def test_the_slope_in_size_by_hand():
    """Rows whose fraction doubles from TP 8 to TP 2 (4x the N x K on a rank) at both prompt lengths: the fit's slope
    is log 2 / log 4 = 0.5 and its intercepts the TP-4 fractions."""
    m = load_model(M.PRESET)

    def row(isl: int, tp: int, f: float) -> M.Point:   # measured - dense gap that makes the row's fraction f
        flops = M.Point("x", isl, tp, 0.0, 0.0).expert_flops(m)
        return M.Point(f"{isl}-{tp}", isl, tp, 0.1 + flops / PEAK * (1 / f - 1 / M.DENSE_FRACTION), 0.1)
    pts = [row(1024, 2, 0.2), row(1024, 8, 0.1), row(8192, 2, 0.24), row(8192, 8, 0.12)]
    assert [round(p.fraction(m, PEAK), 6) for p in pts] == [0.2, 0.1, 0.24, 0.12]
    curve, exponent, _ = M.fit(pts, m, PEAK)
    assert exponent == 0.5
    assert curve == [[1, 0.141], [32, 0.141], [256, 0.17]]   # 0.1 x 2 ** 0.5 and 0.12 x 2 ** 0.5, three digits


def test_the_family_scales_its_fraction_with_the_size_on_a_rank():
    fam = families()[M.FAMILY]
    assert fam.size_exponent > 0 and fam.size_ref == pytest.approx(128 * 2880 * 2880 / 4)
    at_ref = fam.rate_fraction(256, False, fam.size_ref)
    assert at_ref == pytest.approx(fam.rate_fraction(256, False))             # no size: rate_points alone
    assert fam.rate_fraction(256, False, fam.size_ref * 4) == pytest.approx(at_ref * 4 ** fam.size_exponent)
    assert fam.rate_fraction(256, False, fam.size_ref * 1e12) == 1.0          # never above the whole rate
    # more work on a rank never takes less time: size / fraction grows with size
    assert fam.size_ref * 4 / fam.rate_fraction(256, False, fam.size_ref * 4) > fam.size_ref / at_ref


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


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_the_fit_s_size_is_what_the_cost_model_reads_on_a_rank(tp):
    """The fit's size (M.size_at) is the N x K family_cost passes for each grouped expert GEMM of a prefill on one TP
    rank (gate and up split by column, down by row); a fused gate+up, say, would double it and break the fit's tie."""
    from hw_models.gpu.tensor_parallel import shard
    from sim.core.lowering import EXPERT_GEMMS, lower

    m = load_model(M.PRESET)
    graph, _ = shard(lower(m, "prefill", 1, 1024, 1024), m, tp)
    experts = [op for op in graph.ops() if op.layer == 0 and op.name.split(".", 1)[-1] in EXPERT_GEMMS]
    assert len(experts) == 3
    for op in experts:
        d = dict(op.shape)
        assert d["n"] * d["k"] == pytest.approx(M.size_at(m, tp), rel=1e-3), op.name


@pytest.mark.parametrize("extra, why", [({"size_exponent": 0.3}, "size_exponent needs size_ref"),
                                        ({"size_exponent": 1.0, "size_ref": 1e8}, "less than 1")])
def test_a_size_slope_needs_its_reference_and_stays_below_one(extra, why):
    from pydantic import ValidationError

    from hw_models.stack.kernel_families import Family
    with pytest.raises(ValidationError, match=why):
        Family(cite="x", rate_points=[[1, 0.1]], **extra)

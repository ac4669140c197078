"""GEMM tile/wave quantization (Efficiency.gemm_waves) in the roofline and in calibration.

Hand derivations are in each test. SM counts: shared/reference/hardware.md §1.1
(A6000 84, A100 108).
"""

from __future__ import annotations

import pytest

from tests.test_trace import _synthetic_trace

from hw_models.cost import roofline_cost
from hw_models.gpu.mapper import GpuMapper
from hw_models.machine import Efficiency, load_machine, machine_from_dict, raw_machine
from sim.core.errors import ConfigError
from sim.core.model import load_model
from sim.apps.trace.calibrate import calibrate
from sim.apps.trace.records import Trace
from sim.apps.trace.shapes import vidur_layer
from sim.apps.trace.validate import validate


def _eff(units: int, tm: int, tn: int) -> Efficiency:
    return Efficiency(parallel_units=units, gemm_tile_m=tm, gemm_tile_n=tn)


def test_wave_efficiency_hand_derived():
    # M=N=1024 on 84 SMs, 128x128 tiles: 8 x 8 = 64 tiles; floor(84/64) = 1 (no split-K);
    # one partial wave of 84 slots, 64 busy -> 64/84.
    assert _eff(84, 128, 128).gemm_waves(1024, 1024, 4096) == pytest.approx(64 / 84, rel=1e-12)
    # M=512, N=4096 on 108 SMs (A100), 128x128: 4 x 32 = 128 tiles >= 108 -> no split;
    # ceil(128/108) = 2 waves = 216 slots, 128 busy -> 128/216.
    assert _eff(108, 128, 128).gemm_waves(512, 4096, 4096) == pytest.approx(128 / 216, rel=1e-12)
    # M=300 padded to 3 x 128 = 384 rows, N=4096: 3 x 32 = 96 tiles on 84 SMs -> 2 waves of 84;
    # useful 300 x 4096 of 168 x 128 x 128 issued.
    assert _eff(84, 128, 128).gemm_waves(300, 4096, 4096) == pytest.approx(300 * 4096 / (168 * 128 * 128))
    # Decode, M=1, N=K=4096: 32 tiles (M padded to 128); split-K floor(84/32) = 2 -> 64 CTAs in
    # one wave; useful 1 x 4096 x 2 of 84 x 128 x 128 -> 1/168.
    assert _eff(84, 128, 128).gemm_waves(1, 4096, 4096) == pytest.approx(1 / 168, rel=1e-12)
    # Split-K is capped at one K-tile (32) per slice: K=64 -> at most 2 slices although
    # floor(84/1) = 84; one 128x128 tile x 2 slices of 84 slots -> 2/84.
    assert _eff(84, 128, 128).gemm_waves(128, 128, 64) == pytest.approx(2 / 84, rel=1e-12)
    assert Efficiency().gemm_waves(1024, 1024, 4096) == 1.0


def test_tile_fields_validated():
    raw = raw_machine("a6000")
    raw["units"]["gpu"]["efficiency"].pop("parallel_units")
    raw["units"]["gpu"]["efficiency"].update(gemm_tile_m=128, gemm_tile_n=128)
    with pytest.raises(ConfigError, match="parallel_units"):
        machine_from_dict(raw, "x")
    raw["units"]["gpu"]["efficiency"].update(parallel_units=84, gemm_tile_n=None)
    with pytest.raises(ConfigError, match="both or neither"):
        machine_from_dict(raw, "x")


def _o_proj_1024():
    return vidur_layer(load_model("llama2-7b"), 1024).op("attn_post_proj")   # M=1024, N=K=4096


def test_presets_without_tiles_unchanged():
    # a6000 (datasheet, no tile fields): the o_proj GEMM at 1024 tokens costs exactly the
    # pre-wave roofline: 4 us + max(2*1024*4096*4096 FLOP / (154.8e12 * 0.80) + 1.61 us ramp,
    # bytes / (768e9 * 0.85) + 2.3 us ramp) -- compute-bound.
    m = load_machine("a6000")
    assert m.units["gpu"].efficiency.parallel_units == 84 and not m.units["gpu"].efficiency.tiled
    op = _o_proj_1024()
    flops = 2 * 1024 * 4096 * 4096
    expect = 4e-6 + flops / (154.8e12 * 0.80) + 1.61e-6
    c = roofline_cost(op, m.units["gpu"], "gpu", m.memory["gddr"])
    assert c.duration_s == pytest.approx(expect, rel=1e-12)
    # With 128x128 tiles the SMs issue the work over the wave utilization 64/84 (above) and
    # the 1.61 us ramp is paid once on that issued work, not scaled by it (issue 17 item 12).
    raw = raw_machine("a6000")
    raw["units"]["gpu"]["efficiency"].update(gemm_tile_m=128, gemm_tile_n=128)
    tiled = machine_from_dict(raw, "tiled")
    ct = roofline_cost(op, tiled.units["gpu"], "gpu", tiled.memory["gddr"])
    assert ct.compute_s == pytest.approx(flops * 84 / 64 / (154.8e12 * 0.80) + 1.61e-6, rel=1e-12)
    # Non-GEMM ops are untouched by the tile fields.
    norm = vidur_layer(load_model("llama2-7b"), 1024).op("input_layernorm")
    assert roofline_cost(norm, tiled.units["gpu"], "gpu", tiled.memory["gddr"]).duration_s == \
        roofline_cost(norm, m.units["gpu"], "gpu", m.memory["gddr"]).duration_s


def test_mapper_cache_tells_transposed_gemms_apart():
    # gate (M x 11008 x 4096) and down (M x 4096 x 11008) have equal FLOPs and bytes but,
    # at M=512 with 128x128 tiles on 84 SMs, 4 x 86 = 344 tiles (5 waves, 344/420) vs
    # 4 x 32 = 128 tiles (2 waves, 128/168): the cost cache must not merge them.
    from sim.core.lowering import lower
    from sim.core.workload import Workload

    raw = raw_machine("a6000")
    raw["units"]["gpu"]["efficiency"].update(gemm_tile_m=128, gemm_tile_n=128)
    m = machine_from_dict(raw, "tiled")
    wl = Workload(name="w", model="llama2-7b", batch=1, prompt_len=512, gen_len=1)
    g = lower(load_model("llama2-7b"), "prefill", 1, 512, 512, num_layers=1)
    mapper = GpuMapper(m, wl, load_model("llama2-7b"))
    gate, down = mapper.cost(g.op("L0.gate_proj")), mapper.cost(g.op("L0.down_proj"))
    # Issued FLOPs = useful / utilization, at 154.8 TFLOP/s x 0.80, plus the 1.61 us ramp once.
    flops = 2 * 512 * 11008 * 4096
    rate = 154.8e12 * 0.80
    assert gate.compute_s == pytest.approx(flops * 420 / 344 / rate + 1.61e-6, rel=1e-9)
    assert down.compute_s == pytest.approx(flops * 168 / 128 / rate + 1.61e-6, rel=1e-9)


def _synthetic(machine, tokens) -> Trace:
    """vidur-layer ops timed by the simulator itself on `machine` (Llama-2-7B shapes)."""
    return _synthetic_trace(machine, "llama2-7b", tuple(tokens))


def test_calibration_recovers_tile_and_parameters():
    truth = raw_machine("a6000")
    truth["units"]["gpu"]["efficiency"] = dict(compute_max=0.75, compute_half_flops=5e7, memory_max=0.9,
                                               memory_half_bytes=5e5, parallel_units=84,
                                               gemm_tile_m=128, gemm_tile_n=64)
    truth["units"]["gpu"]["launch_overhead_s"] = 3e-6
    # Token counts off the tile grid (100, 300, ...) make the M padding of 128x64 and 64x128 differ.
    trace = _synthetic(machine_from_dict(truth, "truth"), (1, 16, 100, 300, 700, 1500, 3000))
    cal = calibrate([trace], load_machine("a6000"), per_kind=False)   # a6000: 84 SMs, no tile
    assert cal.tile == (128, 64)
    assert cal.tile_scores["128x64"] < 0.01 < min(v for k, v in cal.tile_scores.items() if k != "128x64")
    assert cal.overall.params["compute_max"] == pytest.approx(0.75, rel=0.02)
    assert cal.overall.params["memory_max"] == pytest.approx(0.9, rel=0.02)
    e = cal.machine.units["gpu"].efficiency
    assert (e.parallel_units, e.gemm_tile_m, e.gemm_tile_n) == (84, 128, 64)
    assert validate([trace], cal.machine).mape < 0.01


def test_no_parallel_units_means_no_tile_search():
    cal_base = load_machine("cpu_host")
    assert cal_base.units[cal_base.main_unit].efficiency.parallel_units is None
    truth = raw_machine("a6000")
    truth["units"]["gpu"]["efficiency"].pop("parallel_units")
    base = machine_from_dict(truth, "no-sms")
    trace = _synthetic(base, (16, 1024))
    cal = calibrate([trace], base, per_kind=False)
    assert cal.tile is None and cal.tile_scores == {}
    assert not cal.machine.units["gpu"].efficiency.tiled


@pytest.mark.parametrize("units, tm, tn", [(84, 64, 128), (108, 64, 64), (84, 128, 256)])
@pytest.mark.parametrize("n, k", [(4096, 4096), (11008, 4096), (4096, 11008), (32000, 4096), (128, 64)])
def test_issued_work_never_falls_as_m_grows(units, tm, tn, n, k):
    """Issue 17 item 12: the curve applies to the issued work M*N*K / gemm_waves =
    K x waves x SMs x tile_m x tile_n / splits, which can only grow with M: below one
    wave the splits floor(SMs / tiles) shrink as the tiles grow, above it the waves grow.
    So a tiled GEMM's compute time never falls as M grows (it did when the ramp was
    evaluated on the useful FLOPs and then divided by the utilization)."""
    e = _eff(units, tm, tn)
    issued = [m * n * k / e.gemm_waves(m, n, k) for m in range(1, 1100)]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(issued, issued[1:]))


def test_fp32_decode_gemm_time_never_falls_as_m_grows():
    """The shipped a6000_calibrated (64x128 tile, fitted ramp) on o_proj, fp32: compute time
    for M = 1..256 is non-decreasing (it fell 2.3x from M = 1 to 10 before issue 17 item 12)."""
    m, model = load_machine("a6000_calibrated"), load_model("llama2-7b")
    times = []
    for tokens in range(1, 257):
        op = vidur_layer(model, tokens, dtype="fp32").op("attn_post_proj")
        times.append(roofline_cost(op, m.units["gpu"], "gpu", m.memory["gddr"]).compute_s)
    assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:]))

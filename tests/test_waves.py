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
    # With 128x128 tiles the compute time divides by the wave utilization 64/84 (above).
    raw = raw_machine("a6000")
    raw["units"]["gpu"]["efficiency"].update(gemm_tile_m=128, gemm_tile_n=128)
    tiled = machine_from_dict(raw, "tiled")
    ct = roofline_cost(op, tiled.units["gpu"], "gpu", tiled.memory["gddr"])
    assert ct.compute_s == pytest.approx(c.compute_s * 84 / 64, rel=1e-12)
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
    assert gate.compute_s / down.compute_s == pytest.approx((128 / 168) / (344 / 420), rel=1e-9)


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

"""The per-op tables' GEMM replay (hw_models.stack.cost.replay_weight_l2_s): each engine's collector cycles through
copies of the weights (aiconfigurator collector/<engine>/collect_gemm.py: TensorRT-LLM max(1, min(5, ceil(L2 / W))),
vLLM and SGLang 6, vLLM's fp8_block and nvfp4 1), so weights whose copies fit the L2 stream from it, at the dense
family's fitted replay L2 rate (else the preset's), only under a stack marked single_layer_replay
(sim.apps.trace.aic); serving streams every weight from DRAM."""

from __future__ import annotations

import pandas as pd
import pytest

from hw_models.machine import load_machine
from hw_models.stack.cost import family_cost, replay_weight_copies, replay_weight_l2_s
from hw_models.stack.kernel_families import families
from hw_models.stack.spec import load_stack
from sim.apps.trace.aic import gemm_op, validate_tables

MIB = 1 << 20
PRO = load_machine("rtx_pro_6000")
UNIT = PRO.units["gpu"]
TIER = PRO.memory[UNIT.memory]
FAMILY = "dense_bf16_rtx_pro_6000"
PRESET_L2_BW = 23.35e12              # rtx_pro_6000.yaml l2_bandwidth_bytes_per_s (assumed there)
DRAM = 1.792e12 * 0.85               # datasheet DRAM x the preset's GEMM memory_max
# 6 copies (vLLM, SGLang) fit 128 MiB up to 22,369,621 B each: K = 4096 bf16 (8192 B a column) -> N <= 2730
# (22,364,160 B); N = 2731 is 22,372,352 B. 5 copies (TensorRT-LLM): N <= 3276 (26,836,992 B).
FITS_6, SPILLS_6, FITS_5 = 2730, 2731, 3276


def _cost(m: int, n: int, k: int, replay: bool, collector: str | None = "vllm", unit=UNIT, tier=TIER,
          family=FAMILY, fmt: str = "bf16"):
    stack = load_stack("vllm").model_copy(update={"single_layer_replay": replay, "replay_collector": collector})
    return family_cost(gemm_op(m, n, k, fmt), unit, "gpu", tier, stack, family)


@pytest.mark.parametrize("collector, w_mib, fmt, copies", [
    ("trtllm", 1, "bf16", 5),            # ceil(128 / 1) = 128, capped at 5
    ("trtllm", 32, "bf16", 4),           # ceil(128 / 32) = 4
    ("trtllm", 40, "bf16", 4),           # ceil(3.2) = 4
    ("trtllm", 200, "bf16", 1),          # larger than the L2: one copy
    (None, 32, "bf16", 4),               # no collector: TensorRT-LLM's rule
    ("vllm", 1, "bf16", 6), ("vllm", 200, "bf16", 6), ("sglang", 1, "bf16", 6),
    ("vllm", 1, "fp8_block128", 1), ("vllm", 1, "nvfp4", 1), ("sglang", 1, "fp8_block128", 6)])
def test_copies_match_the_collectors(collector, w_mib, fmt, copies):
    assert replay_weight_copies(collector, 128 * MIB, w_mib * MIB, fmt) == copies


def test_l2_switch_at_the_boundary_by_hand():
    """vLLM, N = 2730: 22.36 MB from the L2 at the family's fitted replay rate, plus the 8 KB input and 5.5 KB
    output at 1.523 TB/s; N = 2731 (6 copies 3 KB over the L2): the DRAM stream at 1.523 TB/s x the fitted
    efficiency. TensorRT-LLM's 5 copies of N = 2731 fit: the L2 again."""
    fam = families()[FAMILY]
    rate, eff = fam.replay_l2_bytes_per_s, fam.weight_stream_efficiency
    assert rate is not None and rate != PRESET_L2_BW
    fits, spills = FITS_6 * 4096 * 2, SPILLS_6 * 4096 * 2
    assert replay_weight_l2_s(UNIT, fits, "bf16", "vllm", rate) == pytest.approx(fits / rate)
    assert replay_weight_l2_s(UNIT, fits, "bf16", "vllm") == pytest.approx(fits / PRESET_L2_BW)
    assert replay_weight_l2_s(UNIT, spills, "bf16", "vllm", rate) is None
    assert replay_weight_l2_s(UNIT, spills, "bf16", "trtllm", rate) == pytest.approx(spills / rate)
    assert replay_weight_l2_s(UNIT, (FITS_5 + 1) * 8192, "bf16", "trtllm", rate) is None
    other = lambda n: (4096 + n) * 2 / DRAM   # noqa: E731
    assert _cost(1, FITS_6, 4096, True).memory_s == pytest.approx(fits / rate + other(FITS_6), rel=1e-3)
    assert _cost(1, SPILLS_6, 4096, True).memory_s == pytest.approx(spills / (DRAM * eff) + other(SPILLS_6), rel=1e-3)
    assert _cost(1, SPILLS_6, 4096, True, "trtllm").memory_s == pytest.approx(spills / rate + other(SPILLS_6),
                                                                              rel=1e-3)


def test_serving_streams_from_dram():
    """Without the replay condition the same 22.36 MB stream from DRAM: 22.36 MB / (1.523 TB/s x eff); the
    fitted replay rate changes nothing there."""
    eff = families()[FAMILY].weight_stream_efficiency
    w = FITS_6 * 4096 * 2
    assert _cost(1, FITS_6, 4096, False).memory_s == pytest.approx(w / (DRAM * eff) + (4096 + FITS_6) * 2 / DRAM,
                                                                   rel=1e-3)


def test_no_l2_rate_means_dram():
    """H100 cites no L2 read rate: a family without a fitted replay rate (TensorRT-LLM's FP8) prices its small
    weights under a replay as serving does; the dense family, which has one, reads them from the L2."""
    h100 = load_machine("h100_sxm")
    u = h100.units[h100.main_unit]
    assert u.l2_bandwidth_bytes_per_s is None
    args = dict(unit=u, tier=h100.memory[u.memory], family="trtllm_fp8_per_tensor", fmt="fp8_e4m3")
    assert families()["trtllm_fp8_per_tensor"].replay_l2_bytes_per_s is None
    assert _cost(1, 1024, 1024, True, **args).duration_s == _cost(1, 1024, 1024, False, **args).duration_s
    dense = dict(unit=u, tier=h100.memory[u.memory], family="dense_bf16_h100")
    rate = families()["dense_bf16_h100"].replay_l2_bytes_per_s
    bw = h100.memory[u.memory].bandwidth_bytes_per_s * u.efficiency.for_kind("gemm", 1).memory_max
    # 4096 x 1024 bf16 = 8 MiB, 6 copies 48 MiB <= 50 MiB: 1.54 us at 5.44 TB/s, over the K-walk's 1024 steps
    assert _cost(1, 4096, 1024, True, **dense).memory_s == pytest.approx(
        4096 * 1024 * 2 / rate + (1024 + 4096) * 2 / bw, rel=1e-3)
    assert 4096 * 1024 * 2 / rate > 1024 * families()["dense_bf16_h100"].k_walk_s_per_k


@pytest.mark.parametrize("collector", ["vllm", "sglang"])
@pytest.mark.parametrize("m", [1, 16, 256, 4096])
def test_never_faster_with_more_work_across_the_switch(m, collector):
    """N from 2048 to 4096 at K = 4096 crosses the 6-copy switch: the time never falls with N, nor with M."""
    ts = [_cost(m, n, 4096, True, collector).duration_s for n in range(2048, 4097, 64)]
    assert all(b >= a for a, b in zip(ts, ts[1:]))
    tm = [_cost(x, SPILLS_6, 4096, True, collector).duration_s for x in (1, 2, 8, 64, 512, 4096)]
    assert all(b >= a for a, b in zip(tm, tm[1:]))


def test_trtllm_copies_fill_the_l2_exactly():
    """TensorRT-LLM's copy count is not monotone in W: 8192 x 4096 bf16 (64 MiB) replays 2 copies, exactly the
    128 MiB L2, while 6144 x 4096 (48 MiB) replays 3 (144 MiB, DRAM). The measured PRO 6000 table shows the same
    (gemm_rtx_pro_6000 trtllm bfloat16, M = 1, K = 4096: N = 8192 20.1 us, N = 6144 36.4 us), so the replay
    prices the larger GEMM faster; the dense family is monotone everywhere else (test_dense_gemm)."""
    assert replay_weight_copies("trtllm", 128 * MIB, 64 * MIB, "bf16") == 2
    assert replay_weight_copies("trtllm", 128 * MIB, 48 * MIB, "bf16") == 3
    assert _cost(1, 8192, 4096, True, "trtllm").duration_s < _cost(1, 6144, 4096, True, "trtllm").duration_s
    assert _cost(1, 8192, 4096, True, "vllm").duration_s > _cost(1, 6144, 4096, True, "vllm").duration_s


def test_each_row_takes_its_own_collectors_copies(tmp_path):
    """sim validate --input-format aic passes each row's engine as the collector: the same M = 1, 8192 x 4096
    bf16 GEMM on the RTX PRO 6000 measured 20.1 us under TensorRT-LLM (2 copies fill the 128 MiB L2) and 45.2 us
    under vLLM (6 copies: DRAM), against 36.4 / 34.2 us at N = 6144 (gemm_rtx_pro_6000.csv.gz, trtllm 1.3.0rc20,
    vllm 0.24.0). sim orders them as measured, each within 10% (the 4 rows copied here)."""
    measured = {("trtllm", 8192): 20.064, ("trtllm", 6144): 36.414, ("vllm", 8192): 45.204, ("vllm", 6144): 34.238}
    path = tmp_path / "gemm_rtx_pro_6000.csv.gz"
    pd.DataFrame([dict(framework=fw, version="-", kernel="-", dtype="bfloat16", m=1, n=n, k=4096, latency_us=us)
                  for (fw, n), us in measured.items()]).to_csv(path, index=False)
    sim = {(r.engine, int(r.shape.split("x")[1])): r.simulated_s for r in validate_tables([path]).rows}
    assert sim[("trtllm", 8192)] < sim[("trtllm", 6144)] and sim[("vllm", 8192)] > sim[("vllm", 6144)]
    assert all(abs(sim[key] / (us * 1e-6) - 1) < 0.10 for key, us in measured.items())

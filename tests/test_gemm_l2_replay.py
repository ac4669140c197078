"""The per-op tables' GEMM replay (hw_models.stack.cost.replay_weight_l2_s): the collector cycles through 5 copies
of the weights, so weights W with 5 W <= L2 stream from the L2 at the preset's L2 rate, only under a stack marked
single_layer_replay (sim.apps.trace.aic); serving streams every weight from DRAM."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from hw_models.stack.cost import REPLAY_WEIGHT_COPIES, family_cost, replay_weight_l2_s
from hw_models.stack.kernel_families import families
from hw_models.stack.spec import load_stack
from sim.apps.trace.aic import gemm_op

MIB = 1 << 20
PRO = load_machine("rtx_pro_6000")
UNIT = PRO.units["gpu"]
TIER = PRO.memory[UNIT.memory]
FAMILY = "dense_bf16_rtx_pro_6000"
L2_BW = 23.35e12                     # rtx_pro_6000.yaml l2_bandwidth_bytes_per_s (assumed there)
DRAM = 1.792e12 * 0.85               # datasheet DRAM x the preset's GEMM memory_max
# 5 copies fit 128 MiB up to 25.6 MiB each: K = 4096 bf16 -> N <= 3276 (26,836,992 B); N = 3277 is 26,845,184 B.
FITS_N, SPILLS_N = 3276, 3277


def _cost(m: int, n: int, k: int, replay: bool, unit=UNIT, tier=TIER, family=FAMILY):
    stack = load_stack("vllm").model_copy(update={"single_layer_replay": replay})
    return family_cost(gemm_op(m, n, k, "bf16"), unit, "gpu", tier, stack, family)


def test_copies_match_the_collector():
    assert REPLAY_WEIGHT_COPIES == 5


def test_l2_switch_at_the_boundary_by_hand():
    """N = 3276: 26.84 MB from the L2 at 23.35 TB/s = 1.149 us, plus the 8 KB input and 6.6 KB output at
    1.523 TB/s; N = 3277 (5 copies 0.01 MiB over the L2): the DRAM stream at 1.523 TB/s x the fitted efficiency."""
    eff = families()[FAMILY].weight_stream_efficiency
    fits, spills = FITS_N * 4096 * 2, SPILLS_N * 4096 * 2
    assert replay_weight_l2_s(UNIT, fits) == pytest.approx(fits / L2_BW)
    assert replay_weight_l2_s(UNIT, spills) is None
    other = lambda n: (4096 + n) * 2 / DRAM   # noqa: E731
    assert _cost(1, FITS_N, 4096, True).memory_s == pytest.approx(fits / L2_BW + other(FITS_N), rel=1e-3)
    assert _cost(1, SPILLS_N, 4096, True).memory_s == pytest.approx(spills / (DRAM * eff) + other(SPILLS_N), rel=1e-3)


def test_serving_streams_from_dram():
    """Without the replay condition the same 26.84 MB stream from DRAM: 26.84 MB / (1.523 TB/s x eff)."""
    eff = families()[FAMILY].weight_stream_efficiency
    w = FITS_N * 4096 * 2
    assert _cost(1, FITS_N, 4096, False).memory_s == pytest.approx(w / (DRAM * eff) + (4096 + FITS_N) * 2 / DRAM,
                                                                   rel=1e-3)


def test_no_cited_l2_rate_means_dram():
    """H100 cites no L2 read rate: a replay prices its small weights as serving does."""
    h100 = load_machine("h100_sxm")
    u = h100.units[h100.main_unit]
    args = dict(unit=u, tier=h100.memory[u.memory], family="dense_bf16_h100")
    assert _cost(1, 1024, 1024, True, **args).duration_s == _cost(1, 1024, 1024, False, **args).duration_s


@pytest.mark.parametrize("m", [1, 16, 256, 4096])
def test_never_faster_with_more_work_across_the_switch(m):
    """N from 2048 to 4096 at K = 4096 crosses the switch: the time never falls with N, nor with M."""
    ts = [_cost(m, n, 4096, True).duration_s for n in range(2048, 4097, 64)]
    assert all(b >= a for a, b in zip(ts, ts[1:]))
    tm = [_cost(x, SPILLS_N, 4096, True).duration_s for x in (1, 2, 8, 64, 512, 4096)]
    assert all(b >= a for a, b in zip(tm, tm[1:]))

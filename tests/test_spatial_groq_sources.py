"""Issue 22: the Groq costs taken from the ISCA 2020 / 2022 papers (via the secondary
summaries cited in hw_models/presets/groq_lpu.yaml), each derived by hand: the per-hop
latency and C2C framing in a pipeline hop, the one-hop all-reduce of a tensor-parallel
group, the instruction issue latency of a vector op, and the install rate against the
paper's "409,600 weights in less than 40 cycles"."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from hw_models.spatial.config import spatial_config
from hw_models.spatial.partition import hop_time_s, return_time_s
from hw_models.spatial.tp import all_gather_s, all_reduce_s
from sim.core.workload import load_workload
from tests.test_spatial import _mapper, _toy_hw, _toy_wl


def _groq(**overrides):
    return spatial_config(load_machine("groq_lpu", overrides))


def test_groq_preset_carries_the_cited_figures():
    """722 ns per hop (ISCA 2022, 3 x 722 ns = 2,166 ns all-reduce across 256 TSPs);
    320 B of payload per 328 B frame (Fig. 11); 20 cycles for an instruction to
    cross the 20 superlanes (ISCA 2020); and an install rate that puts the four
    320x320 int8 arrays' 409,600 weights in at most 40 cycles (ISCA 2020)."""
    cfg = _groq()
    assert cfg.links.latency_s == pytest.approx(722e-9)
    assert 3 * cfg.links.latency_s == pytest.approx(2.166e-6)
    assert cfg.links.payload_fraction == 0.975 == pytest.approx(320 / 328, abs=1e-3)   # "97.5%"
    assert cfg.op_issue_cycles == 20
    pe = cfg.pe_array
    tiles = pe.arrays * pe.rows * pe.cols
    assert tiles == 409_600
    assert tiles / pe.weight_install_bytes_per_cycle == 20 <= 40
    # ... and no more than the stream registers carry: 2 directions x 32 B/lane x 320 lanes (eq. 1).
    assert pe.weight_install_bytes_per_cycle == 2 * 32 * 320


def test_groq_pipeline_hop_by_hand():
    """A pure-pipeline hop of one fp16 8192-wide row (16,384 B) over the 8 links that
    face a neighbour (16 / 2, ring), each 14 GB/s at 97.5% payload = 13.65 GB/s:
    16,384 / 109.2e9 = 150.04 ns + 722 ns = 872.04 ns. The sampled id returns in one
    hop: 4 B / 109.2e9 + 722 ns."""
    cfg = _groq()
    assert cfg.links_per_hop == 8
    assert cfg.hop_bandwidth_bytes_per_s == pytest.approx(8 * 14e9 * 0.975)
    assert hop_time_s(cfg, 16_384) == pytest.approx(16_384 / 109.2e9 + 722e-9, rel=1e-12)
    assert hop_time_s(cfg, 16_384) == pytest.approx(872.04e-9, rel=1e-5)
    assert return_time_s(cfg, 40, 1) == pytest.approx(4 / 109.2e9 + 722e-9, rel=1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_all_reduce_takes_the_cheaper_schedule(t):
    """Reduce-scatter + all-gather = 2 x (L + B/t / bw); one hop of the whole partial
    = L + B / bw. At t = 2 the one hop always wins (same bytes, one latency); at t = 8
    it wins below B = L x bw x t / (t - 2) = 722 ns x 13.65 GB/s x 8/6 = 13,141 B."""
    cfg = _groq(**{"spatial.tensor_parallel": t})
    bw = 14e9 * 0.975
    for nbytes in (2_048, 8_192, 16_384, 57_344):
        two = 2 * (722e-9 + nbytes / t / bw)
        one = 722e-9 + nbytes / bw
        assert all_reduce_s(cfg, nbytes) == pytest.approx(min(two, one), rel=1e-12)
        assert all_gather_s(cfg, nbytes) == pytest.approx(722e-9 + nbytes / t / bw, rel=1e-12)
    if t == 2:
        assert all_reduce_s(cfg, 57_344) == pytest.approx(722e-9 + 57_344 / bw, rel=1e-12)
    if t == 8:
        crossover = 722e-9 * bw * t / (t - 2)
        assert crossover == pytest.approx(13_141, rel=1e-3)
        assert all_reduce_s(cfg, 13_000) == pytest.approx(722e-9 + 13_000 / bw, rel=1e-12)
        assert all_reduce_s(cfg, 13_300) == pytest.approx(2 * (722e-9 + 13_300 / t / bw), rel=1e-12)


def test_vector_op_pays_its_issue_cycles():
    """Llama-2-70B decode, L0.attn_norm (RMSNorm of one 8192-wide row, 32,768 FLOPs) on
    groq_lpu: 32,768 / 4.6 TFLOP/s = 7.12 ns of vector work + 20 cycles / 900 MHz =
    22.22 ns of issue latency = 29.35 ns. A GEMM pays no issue term (its fill/drain
    skew already holds the array's pipeline)."""
    w = load_workload("workloads/llama70b_groq_fp16act.yaml")
    m = _mapper(w, load_machine("groq_lpu"))
    graph = m.decode_graph(1152)
    norm = m.chip.cost(graph.op("L0.attn_norm"), 1.0, "c")
    assert norm.compute_s == pytest.approx(32_768 / 4.6e12 + 20 / 0.9e9, rel=1e-12)
    assert norm.duration_s == pytest.approx(29.35e-9, rel=1e-3)
    off = _mapper(w, load_machine("groq_lpu", {"spatial.op_issue_cycles": 0}))
    q, q0 = (mm.chip.cost(graph.op("L0.q_proj"), 1.0, "c").compute_s for mm in (m, off))
    assert q == q0 == pytest.approx(4017 / 0.9e9, rel=1e-12)


def test_new_keys_default_to_the_old_model():
    """payload_fraction 1 and op_issue_cycles 0 (the defaults) leave a machine as it was:
    the toy's hop is its latency plus bytes / raw bandwidth."""
    hw = _toy_hw(links=dict(count=2, bandwidth_bytes_per_s=1e9, latency_s=2e-7))
    cfg = spatial_config(hw)
    assert (cfg.links.payload_fraction, cfg.op_issue_cycles) == (1.0, 0)
    assert hop_time_s(cfg, 1000) == pytest.approx(1000 / 1e9 + 2e-7, rel=1e-12)
    assert _mapper(_toy_wl(), hw).decode_step_s(36) > 0

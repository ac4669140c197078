"""Hand-derived checks of the core cost functions that one-line bugs used to slip past
(issue 21): the KV-cache bytes and footprint, energy per token, and the PIM placement
decision (slowest stack, mode switches, per-row weight re-streaming).

Every expected number is written as arithmetic from the model's shape and the preset's
figures; none is the code's own output. Llama-2-13B: hidden 5120 (= kv_dim, 40 KV heads
x 128), 40 layers, MLP 13824, vocab 32000, 13,015,864,320 parameters. Llama-2-7B: hidden
4096, 32 layers, 6,738,415,616 parameters. Llama-2-70B: 80 layers, 8 KV heads x 128.
"""

from __future__ import annotations

import numpy as np
import pytest

from hw_models.cost import work_time_s
from hw_models.ideal import ideal
from hw_models.machine import load_machine
from hw_models.pim.mapper import PimMapper
from hw_models.pim.plan import Schedule
from hw_models.registry import mapper_for, simulate
from sim.core import graph as g
from sim.core.errors import CapacityError
from sim.core.footprint import kv_bytes, weight_bytes
from sim.core.generation import sample_indices
from sim.core.graph import GEMM, Op, OpGraph, TensorUse
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import load_model
from sim.core.workload import workload_from_dict

GIB = 2**30


# ----------------------------------------------------------------- KV cache and footprint

def test_kv_bytes_counts_k_and_v_over_every_layer():
    # Llama-2-13B, fp16, batch 16, 2048 positions: K and V (2) x 40 layers x 16 x 2048 x 5120 x 2 B.
    assert kv_bytes(load_model("llama2-13b"), FormatPolicy(), 16, 2048) == 2 * 40 * 16 * 2048 * 5120 * 2
    # Llama-2-70B (GQA, 8 KV heads x 128 = 1024): 2 x 80 x 1024 x 2 B = 327,680 B per token, 1.25 GiB at 4096.
    assert kv_bytes(load_model("llama2-70b"), FormatPolicy(), 1, 4096) == 4096 * 327_680 == 1.25 * GIB
    # int8 KV (per channel: one fp16 scale per cached row of 5120): (5120 + 2) B per row and K/V per layer.
    assert kv_bytes(load_model("llama2-13b"), FormatPolicy(kv_cache="int8"), 1, 100) == 2 * 40 * 100 * (5120 + 2)


def test_weight_bytes_in_the_weight_format():
    """Llama-2-13B with int4 weights (groups of 128 along the input axis, one fp16 scale each): the
    layer matrices and LM head 6,626,611,200 B (tests/test_format_sim.py's docstring derives it), the
    embedding table likewise 32000 x 5120 / 2 + 32000 x 40 x 2 = 84,480,000 B, and the 81 norms stay
    fp16, 81 x 5120 x 2 = 829,440 B. Mixtral-8x7B (MoE, every expert counted once): 2 B x its
    46,702,792,704 parameters (the model card's 46.7B)."""
    int4 = weight_bytes(load_model("llama2-13b"), FormatPolicy(weights="int4"))
    assert int4 == 6_626_611_200 + 84_480_000 + 81 * 5120 * 2
    assert weight_bytes(load_model("mixtral-8x7b"), FormatPolicy()) == 2 * 46_702_792_704


def test_llama13b_batch16_full_context_does_not_fit_a6000():
    """Llama-2-13B fp16, batch 16, 1024 prompt + 1024 new tokens on a6000 (48 GiB = 51,539,607,552 B).
    Weights: 2 B x 13,015,864,320 parameters = 26,031,728,640 B. KV of all 2048 positions:
    2 x 40 x 16 x 2048 x 5120 x 2 = 26,843,545,600 B. Together 52,875,274,240 B > 48 GiB before any
    activation: it must not fit. (Counting only the 1024 prompt positions, 13.4 GB of KV, it would.)
    The largest live activations are the prefill softmax's scores in and probabilities out:
    2 x 16 x 40 heads x 1024 x 1024 x 2 B = 2,684,354,560 B. The same batch with 256 new tokens
    needs 26.03 + 16.78 + 2.68 = 45.49 GB: it fits."""
    model = load_model("llama2-13b")
    weights = weight_bytes(model, FormatPolicy())
    assert weights == 2 * 13_015_864_320
    kv = kv_bytes(model, FormatPolicy(), 16, 2048)
    assert weights + kv == 52_875_274_240 > 48 * GIB
    a6000 = load_machine("a6000")
    w = workload_from_dict(dict(model="llama2-13b", batch=16, prompt_len=1024, gen_len=1024), "t")
    with pytest.raises(CapacityError, match=r"needs 55\.56 GB in a6000\.gddr \(weights 26\.03 GB \+ "
                       r"kv cache 26\.84 GB \+ activations 2\.68 GB\) but it holds 51\.54 GB: short by 4\.02 GB"):
        mapper_for(a6000, w, w.model_config_()).footprint()
    short = workload_from_dict(dict(model="llama2-13b", batch=16, prompt_len=1024, gen_len=256), "t")
    fp = mapper_for(a6000, short, short.model_config_()).footprint()
    roles = fp.tiers["gddr"]
    assert roles["weights"] == weights
    assert roles["kv_cache"] == 2 * 40 * 16 * 1280 * 5120 * 2
    assert roles["activations"] == 2 * 16 * 40 * 1024 * 1024 * 2


@pytest.mark.parametrize("model, hw, phase, q_len, kv_len", [("tinyllama-1.1b", "a6000", "decode", 1, 300),
                                                            ("llama2-7b", "a6000", "prefill", 32, 32)])
def test_folded_step_equals_every_layer(model, hw, phase, q_len, kv_len):
    """Identical layers: T(L) = T(2) + (L - 2) (T(3) - T(2)) is exact for the GPU's one stream
    (22 and 32 layers here), for the time, every resource's busy time, the energy and the counters."""
    w = workload_from_dict(dict(model=model, batch=2, prompt_len=kv_len, gen_len=2), "t")
    m = mapper_for(load_machine(hw), w, w.model_config_())
    fast, full = m.step(phase, q_len, kv_len), m.step(phase, q_len, kv_len, exhaustive=True)
    assert (fast.phase, fast.kv_len) == (phase, kv_len)
    assert fast.time_s == pytest.approx(full.time_s, rel=1e-12)
    assert fast.energy_j == pytest.approx(full.energy_j, rel=1e-12)
    assert fast.busy_s.keys() == full.busy_s.keys() == {"gpu"}
    assert fast.busy_s["gpu"] == pytest.approx(full.busy_s["gpu"], rel=1e-12) == pytest.approx(full.time_s)
    assert fast.counters == pytest.approx(full.counters, rel=1e-12)


def test_sampled_decode_steps():
    """Up to 9 decode steps are simulated, spread evenly over the run, first and last included:
    linspace(0, 99, 9) = 0, 12.375, 24.75, ... rounds to these; 10 steps keep 9 (4.5 rounds to even 4)."""
    assert sample_indices(100, 9).tolist() == [0, 12, 25, 37, 50, 62, 74, 87, 99]
    assert sample_indices(10, 9).tolist() == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert sample_indices(9, 9).tolist() == list(range(9))
    assert sample_indices(3, 9).tolist() == [0, 1, 2]


def test_work_time_on_arrays_is_the_scalar_formula():
    """Calibration costs many ops at once: the array path gives each element what the scalar path
    gives it, and 0 for no work. The units issue work / scale and the curve applies to that
    issued work (issue 17 item 12): with max 0.85 and a 2.3 us ramp at 768 GB/s, half =
    2.3e-6 x 768e9 x 0.85 B, so t = (work / scale + half) / (768e9 x 0.85)."""
    eff = load_machine("a6000").units["gpu"].efficiency.at_rates(154.8e12, 768e9)
    work = np.array([0.0, 1e6, 3e9])
    scale = np.array([1.0, 0.5, 0.9])
    got = work_time_s(work, 768e9, eff.memory, scale)
    half = 2.3e-6 * 768e9 * 0.85
    by_hand = [0.0] + [(w / s + half) / (768e9 * 0.85) for w, s in zip(work[1:], scale[1:])]
    assert got == pytest.approx(by_hand, rel=1e-12)
    assert work_time_s(1e6, 768e9, eff.memory, 0.5) == pytest.approx(by_hand[1], rel=1e-12)
    assert work_time_s(0.0, 768e9, eff.memory) == 0.0


# ----------------------------------------------------------------- energy per token

def test_energy_per_token_by_hand():
    """Llama-2-7B, batch 1, prompt 1 + 2 new tokens on the ideal l40s (efficiencies 1, no launch; the busy-time
    power model: no idle_power_w): two steps (the one-token prefill and one decode step), each streaming the weights
    2 x (6,738,415,616 - 32000 x 4096) = 13,214,695,424 B (all but the embedding table) plus a
    few MB of activations and KV, memory bound at 864 GB/s: 15.29 ms each, the GPU busy all along.
    Energy per step = bytes x 7e-11 J/B (GDDR6) + 350 W x bytes / 864e9 = 13.2147e9 x 4.75093e-10
    = 6.278 J; two steps over two tokens: 6.278 J per token (the weight stream alone; activations
    and KV add ~0.1 %). Without the 350 W the figure would be 0.925 J."""
    w = workload_from_dict(dict(model="llama2-7b", batch=1, prompt_len=1, gen_len=2), "t")
    r = simulate(w, ideal(load_machine("l40s")), exhaustive=True)
    stream = 13_214_695_424
    assert r.ttft_s == pytest.approx(stream / 864e9, rel=5e-3)
    assert r.e2e_s == pytest.approx(2 * stream / 864e9, rel=5e-3)
    assert r.energy_per_token_j == pytest.approx(stream * (7e-11 + 350 / 864e9), rel=5e-3)
    # Power alone (energy per byte 0) is 350 W x the end-to-end time, per token.
    no_bytes = ideal(load_machine("l40s", {"memory.gddr.energy_j_per_byte": 0.0}))
    r0 = simulate(w, no_bytes, exhaustive=True)
    assert r0.energy_per_token_j == pytest.approx(350 * r0.e2e_s / 2, rel=1e-9)


def test_board_power_energy_per_token_by_hand():
    """The same two steps on the ideal a6000 (board power: idle + activity + dynamic; ideal() lifts the cap): each
    streams 13,214,695,424 B at 768 GB/s, 17.207 ms, the GPU busy all along, so it draws idle 50.2 W + activity
    98.6 W over that time (2.5604 J), the bytes at 70 pJ (0.9250 J) and the matrix FLOPs, 2 x 6,607,339,520 (the
    weights but the embedding table) x 1.21 pJ (0.0160 J): 3.501 J per step, one token each. Norms, RoPE and softmax
    add a few MFLOP at 3.63 pJ (< 0.01 %)."""
    w = workload_from_dict(dict(model="llama2-7b", batch=1, prompt_len=1, gen_len=2), "t")
    r = simulate(w, ideal(load_machine("a6000")), exhaustive=True)
    stream, t = 13_214_695_424, 13_214_695_424 / 768e9
    by_hand = (50.2 + 98.6) * t + stream * 70e-12 + 2 * 6_607_339_520 * 1.21e-12
    assert by_hand == pytest.approx(3.501, abs=5e-4)
    assert r.energy_per_token_j == pytest.approx(by_hand, rel=5e-3)

# ----------------------------------------------------------------- PIM placement

def pim_mapper(hw: str = "hbm_pim", overrides: dict | None = None, **wl) -> PimMapper:
    w = workload_from_dict({"model": "llama2-13b", **wl}, "t")
    return PimMapper(load_machine(hw, overrides), w, w.model_config_())


# hbm_pim, per stack (Aquabolt-XL, hw_models/presets/hbm_pim.yaml): 128 units x 32 B x 300 MHz =
# 1228.8 GB/s inside, 128 x 16 lanes x 2 FLOP x 300 MHz = 1228.8 GFLOP/s, pins 1536 / 5 = 307.2 GB/s;
# 16 pseudo-channels, 16 partial sums per output, 4 us launch, 0.25 us per mode switch.
HBM_INTERNAL, HBM_PINS, LAUNCH, SWITCH = 1228.8e9, 307.2e9, 4e-6, 0.25e-6


def test_pim_time_is_the_slowest_stack_with_both_mode_switches():
    """Llama-2-13B qk at batch 6, kv_len 1025, KV placed by request (request r on stack r % 5):
    stack 0 holds requests 0 and 5 = 80 (request, head) groups, stacks 1-4 hold 40.
    One group: K 1025 x 128 x 2 = 262,400 B streamed (262,400 FLOP), q 256 B in, 1025 fp16 scores x
    16 partial sums out. Stack 0, 80 groups over 16 pseudo-channels (5 each, balanced):
      stream 80 x 262,400 / 1228.8 GB/s = 17.083 us; pins (80 x 256 + 80 x 2050 x 16) / 307.2 GB/s
      = 8.608 us; launch 4 us + enter and leave PIM mode 2 x 0.25 us: 30.19 us.
    Stacks 1-4, 40 groups (3 rounds of 16 for 2.5 groups' work, imbalance 1.2): 19.05 us.
    The op takes the slowest stack's 30.19 us."""
    m = pim_mapper(overrides={"pim.kv_placement": "request"}, batch=6)
    op = lower(m.model, "decode", 6, 1, 1025, m.formats, num_layers=1).op("L0.qk")
    group = 1025 * 128 * 2

    def stack_s(groups: int, imbalance: float) -> float:
        return (LAUNCH + 2 * SWITCH + groups * group / HBM_INTERNAL * imbalance
                + groups * (256 + 2050 * 16) / HBM_PINS)

    slowest, others = stack_s(80, 1.0), stack_s(40, 3 / 2.5)
    assert slowest == pytest.approx(30.19e-6, rel=1e-3) and others == pytest.approx(19.05e-6, rel=1e-3)
    d = m.decide(op)
    assert d.where == "pim" and d.why == f"{d.host.duration_s / slowest:.1f}x faster than host"
    assert [p.stack for p in d.pieces] == [0, 1, 2, 3, 4]
    assert d.pim_s == pytest.approx(slowest, rel=1e-9)
    # Each stack's piece: DRAM energy 0.55 pJ/bit inside the banks, 3.59 pJ/bit through the pins ...
    for p, groups, imbalance in zip(d.pieces, (80, 40, 40, 40, 40), (1.0, 1.2, 1.2, 1.2, 1.2)):
        c = m.piece_cost(op, p, 2)
        assert c.duration_s == pytest.approx(stack_s(groups, imbalance), rel=1e-9)
        assert c.memory_s == c.compute_s == pytest.approx(groups * group / HBM_INTERNAL * imbalance, rel=1e-9)
        assert (c.mode_switch_s, c.overhead_s) == (pytest.approx(2 * SWITCH), pytest.approx(LAUNCH + 2 * SWITCH))
        assert c.transfer_s == pytest.approx(groups * (256 + 2050 * 16) / HBM_PINS, rel=1e-9)
        assert c.energy_internal_j == pytest.approx(groups * group * 0.55e-12 * 8, rel=1e-9)
        assert c.energy_external_j == pytest.approx(groups * (256 + 2050 * 16) * 3.59e-12 * 8, rel=1e-9)
        # ... and the MACs: 262,400 FLOP per group at 0.75 pJ/FLOP (pim.energy_j_per_flop's default, issue 33)
        assert c.energy_mac_j == pytest.approx(groups * 262_400 * 0.75e-12, rel=1e-9)
        assert c.energy_j == pytest.approx(c.energy_internal_j + c.energy_external_j + c.energy_mac_j, rel=1e-12)


def gemv(n: int, k: int) -> Op:
    graph = OpGraph("decode", 1, 1, 1)
    graph.add(Op("gemv", GEMM, 2.0 * n * k, (TensorUse("x", "activation", (1, k), "fp16", 2 * k),
                                              TensorUse("w", "weight", (n, k), "fp16", 2 * n * k)),
                 (TensorUse("y", "activation", (1, n), "fp16", 2 * n),), (("m", 1), ("n", n), ("k", k))), [])
    return graph.op("gemv")


@pytest.mark.parametrize("switch_s, where", [(0.25e-6, "pim"), (60e-6, "host")])
def test_mode_switches_count_in_the_placement(switch_s, where):
    """A 4096 x 4096 fp16 GEMV on one Aquabolt-XL stack (307.2 GB/s pins). PIM: 32 MiB / 1228.8 GB/s
    = 27.31 us + x to 16 pseudo-channels and 16 partial sums back, (131,072 + 131,072) B / 307.2 GB/s
    = 0.853 us + 4 us launch = 32.16 us, plus entering and leaving PIM mode. Host: 4 us + 2.3 us ramp
    + 33,570,816 B / (0.85 x 307.2 GB/s) = 134.86 us. At 0.25 us a switch PIM wins (32.66 us); at
    60 us a switch it loses (152.16 us), though without the switches it would still win."""
    one = {"pim.stacks": 1, "memory.hbm.bandwidth_bytes_per_s": 307.2e9, "memory.hbm.capacity_bytes": 6 * GIB,
           "pim.mode_switch_s": switch_s}
    m = pim_mapper(overrides=one)
    d = m.decide(gemv(4096, 4096))
    pim_no_switch = LAUNCH + 4096 * 4096 * 2 / HBM_INTERNAL + (2 * 4096 * 16 + 4096 * 16 * 2) / HBM_PINS
    assert pim_no_switch == pytest.approx(32.16e-6, rel=1e-3)
    assert d.host.duration_s == pytest.approx(4e-6 + 2.3e-6 + 33_570_816 / (0.85 * 307.2e9), rel=1e-9)
    assert d.pim_s == pytest.approx(pim_no_switch + 2 * switch_s, rel=1e-9)
    assert d.where == where, d.why


AIM_BF16 = dict(weights="bf16", activations="bf16", kv_cache="bf16")


def test_aim_gddr6_batch16_gemms_stay_on_the_host():
    """GDDR6-AiM (hw_models/presets/aim_gddr6.yaml), Llama-2-13B bf16 decode at batch 16. Per chip
    (12 chips, 2 channels): a channel streams 16 banks x 32 B x 1 GHz = 512 GB/s, but a 2 KiB row
    (64 ns) cannot hide the 30.8 ns row opening with one PU per bank: 512 x 64 / 94.8 = 345.65 GB/s,
    691.31 GB/s per chip; pins 768 / 12 = 64 GB/s. PIM has no weight reuse: each of the 16 rows
    re-streams W. q_proj (W = 5120 x 5120 x 2 = 52,428,800 B):
      PIM per chip: 16 x W / 12 / 691.31 GB/s = 101.12 us (compute 16 x 2 x 5120^2 / 12 / 1.024 TFLOP/s
      = 68.3 us hides under it) + x to both channels (16 x 5120 x 2 x 2 B) and one result per
      output (16 x 5120 x 2 / 12 B), 341,333 B / 64 GB/s = 5.33 us + 4 us launch + 2 x 0.1 us = 110.65 us.
      Host: 4 us + 2.3 us + (W + 2 x 16 x 5120 x 2 B) / (0.85 x 768 GB/s) = 87.12 us.
    So q_proj, and every layer GEMM (same ratio of W to the rows' traffic), stays on the host; at
    batch 1 (one pass over W, 6.3 us of stream) PIM wins."""
    internal = 2 * 512e9 * 64 / 94.8
    W = 5120 * 5120 * 2
    pim_s = 4e-6 + 2 * 0.1e-6 + 16 * W / 12 / internal + (16 * 5120 * 2 * 2 + 16 * 5120 * 2 / 12) / 64e9
    host_s = 4e-6 + 2.3e-6 + (W + 2 * 16 * 5120 * 2) / (0.85 * 768e9)
    assert (pim_s, host_s) == (pytest.approx(110.65e-6, rel=1e-3), pytest.approx(87.12e-6, rel=1e-3))
    m = pim_mapper("aim_gddr6", batch=16, formats=AIM_BF16)
    graph = lower(m.model, "decode", 16, 1, 1025, m.formats, num_layers=1)
    q = m.decide(graph.op("L0.q_proj"))
    assert q.pim_s == pytest.approx(pim_s, rel=1e-9)
    assert q.host.duration_s == pytest.approx(host_s, rel=1e-9)
    gemms = [op for op in graph.ops() if op.kind == g.GEMM]
    assert len(gemms) == 8                                   # q k v o gate up down + lm_head
    for op in gemms:
        d = m.decide(op)
        assert d.where == "host" and "re-streams the matrix for 16 rows" in d.why, (op.name, d.why)
    one = pim_mapper("aim_gddr6", batch=1, formats=AIM_BF16)
    q1 = lower(one.model, "decode", 1, 1, 1025, one.formats, num_layers=1).op("L0.q_proj")
    assert one.decide(q1).where == "pim"


def test_placement_reasons_and_forced_parts():
    """The policies' reasons, and GEMM sharing's forced parts: a PIM part runs whatever its rows.
    A 32-row 5120 x 5120 fp16 GEMM (more than max_rows 16) on hbm_pim's 5 stacks, forced to PIM: each
    stack re-streams W for each row, 32 x 52,428,800 / 5 / 1228.8 GB/s = 273.07 us, + x to 16
    pseudo-channels (32 x 5120 x 2 x 16 B) and 16 partial sums per output (32 x 5120 x 2 / 5 x 16 B),
    6,291,456 B / 307.2 GB/s = 20.48 us, + 4 us launch + 2 x 0.25 us: 298.05 us."""
    graph = OpGraph("decode", 32, 1, 1)
    n = k = 5120
    graph.add(Op("fc", GEMM, 2.0 * 32 * n * k, (TensorUse("x", "activation", (32, k), "fp16", 2 * 32 * k),
                                                 TensorUse("w", "weight", (n, k), "fp16", 2 * n * k)),
                 (TensorUse("y", "activation", (32, n), "fp16", 2 * 32 * n),), (("m", 32), ("n", n), ("k", k))), [])
    op = graph.op("fc")
    for policy, where in (("none", "host"), ("attention_only", "host"), ("fc_and_attention", "pim")):
        d = pim_mapper(pim_policy=policy).decide(gemv(n, k))
        assert (d.where, d.why) == (where, f"policy {policy}")
    m = pim_mapper(overrides={"pim.dual_row_buffer": True, "pim.gemm_sharing": True})
    assert m.decide(op).why == "wide GEMM: 32 rows > 16 (weights are reused across rows on the host)"
    d = m.decide(op, Schedule(graph, forced={"fc": "host"}))
    assert (d.where, d.why) == ("host", "GEMM sharing: host columns")
    d = m.decide(op, Schedule(graph, forced={"fc": "pim"}))
    assert (d.where, d.why, len(d.pieces)) == ("pim", "GEMM sharing: PIM columns", 5)
    by_hand = (32 * 2 * n * k / 5 / HBM_INTERNAL + (32 * k * 2 * 16 + 32 * n * 2 / 5 * 16) / HBM_PINS
               + LAUNCH + 2 * SWITCH)
    assert by_hand == pytest.approx(298.05e-6, rel=1e-4)
    assert d.pim_s == pytest.approx(by_hand, rel=1e-9)

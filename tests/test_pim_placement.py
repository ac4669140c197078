"""The PIM placement decision by hand, beyond tests/test_hand_checks.py: what each policy's
decision carries, a step schedule's continuations (no launch), why PIM loses, and the costs of a
softmax piece on the buffer die. Figures of hbm_pim per stack (Aquabolt-XL) as there:
1228.8 GB/s and 1228.8 GFLOP/s inside, 307.2 GB/s pins, 16 pseudo-channels, 16 partial sums per
output, 4 us launch, 0.25 us per mode switch, 0.55 / 3.59 pJ/bit inside / through the pins.
The host (A100-class): 312 TFLOP/s fp16 at 0.8 with a 1.6 us ramp, 0.85 of the HBM bandwidth
with a 2.3 us ramp, so a memory-bound op takes 4 us + 2.3 us + bytes / (0.85 x bandwidth).
"""

from __future__ import annotations

import pytest

from tests.test_hand_checks import GIB, HBM_INTERNAL, HBM_PINS, LAUNCH, SWITCH, gemv, pim_mapper

from hw_models.pim.plan import Schedule
from sim.core.graph import GEMM, Op, OpGraph, TensorUse
from sim.core.lowering import lower

N = K = 4096
W = 2 * N * K
# One stack with the pins of one (host bandwidth 307.2 GB/s), as test_mode_switches_count_in_the_placement.
ONE = {"pim.stacks": 1, "memory.hbm.bandwidth_bytes_per_s": 307.2e9, "memory.hbm.capacity_bytes": 6 * GIB}


def host_memory_bound(nbytes: float, bandwidth: float, launch: float = LAUNCH) -> float:
    return launch + 2.3e-6 + nbytes / (0.85 * bandwidth)


def test_policies_carry_the_host_cost_and_the_pim_time():
    """The 4096 x 4096 GEMV on one stack: PIM 32.16 us + 2 x 0.25 us (test_hand_checks), host
    4 + 2.3 + 33,570,816 B / (0.85 x 307.2 GB/s) us. A residual add of Llama-2-13B (5120 x 3 fp16 =
    30,720 B) split over hbm_pim's 5 stacks: 6144 B per stack, 5 ns, + 4.5 us of launch and switches."""
    gemv_pim = LAUNCH + 2 * SWITCH + W / HBM_INTERNAL + (2 * N * 16 + N * 16 * 2) / HBM_PINS
    gemv_host = host_memory_bound(W + 4 * N, 307.2e9)
    for policy, where in (("attention_only", "host"), ("fc_and_attention", "pim")):
        op = gemv(N, K)
        d = pim_mapper(overrides=ONE, pim_policy=policy).decide(op)
        assert (d.op, d.where, d.why) == (op, where, f"policy {policy}")
        assert d.host.duration_s == pytest.approx(gemv_host, rel=1e-9, abs=0)
        assert d.pim_s == pytest.approx(gemv_pim, rel=1e-9, abs=0)
        assert len(d.pieces) == (1 if where == "pim" else 0)
    m = pim_mapper(pim_policy="fc_and_attention", batch=1)
    add = lower(m.model, "decode", 1, 1, 1025, m.formats, num_layers=1).op("L0.attn_residual")
    d = m.decide(add)
    assert (d.op, d.where, d.why, d.pieces) == (add, "host", "policy fc_and_attention", ())
    assert d.host.duration_s == pytest.approx(host_memory_bound(30720, 1536e9), rel=1e-9, abs=0)
    assert d.pim_s == pytest.approx(LAUNCH + 2 * SWITCH + 30720 / 5 / HBM_INTERNAL, rel=1e-9, abs=0)


@pytest.mark.parametrize("policy", ["attention_only", "fc_and_attention"])
def test_attention_goes_to_pim_under_both_policies(policy):
    """Llama-2-13B qk at batch 6, kv_len 1025, KV by request: the slowest stack (80 groups) takes
    4 + 0.5 + 17.083 + 8.608 = 30.19 us (test_hand_checks); every stack holding KV gets a piece."""
    m = pim_mapper(overrides={"pim.kv_placement": "request"}, batch=6, pim_policy=policy)
    op = lower(m.model, "decode", 6, 1, 1025, m.formats, num_layers=1).op("L0.qk")
    d = m.decide(op)
    slowest = LAUNCH + 2 * SWITCH + 80 * 1025 * 256 / HBM_INTERNAL + 80 * (256 + 2050 * 16) / HBM_PINS
    assert (d.op, d.where, d.why) == (op, "pim", f"policy {policy}")
    assert d.pim_s == pytest.approx(slowest, rel=1e-9, abs=0)
    assert [p.stack for p in d.pieces] == [0, 1, 2, 3, 4]
    assert d.host.duration_s > 0 and d.host.op is op


def test_continuations_pay_no_launch():
    """An op continuing an earlier op's kernel (Schedule.continuations) pays no launch on either side:
    PIM 32.16 - 4 + 0.5 us; host steady, no launch and no ramp, 33,570,816 B / (0.85 x 307.2 GB/s).
    GEMM sharing's PIM part of the 32-row GEMM likewise loses its 4 us (298.05 us by hand there)."""
    op = gemv(N, K)
    graph = OpGraph("decode", 1, 1, 1)
    d = pim_mapper(overrides=ONE).decide(op, Schedule(graph, continuations=frozenset({"gemv"})))
    assert d.pim_s == pytest.approx(2 * SWITCH + W / HBM_INTERNAL + (2 * N * 16 + N * 16 * 2) / HBM_PINS, rel=1e-9, abs=0)
    assert d.host.duration_s == pytest.approx((W + 4 * N) / (0.85 * 307.2e9), rel=1e-9, abs=0)
    n = k = 5120
    wide = Op("fc", GEMM, 2.0 * 32 * n * k, (TensorUse("x", "activation", (32, k), "fp16", 2 * 32 * k),
                                             TensorUse("w", "weight", (n, k), "fp16", 2 * n * k)),
              (TensorUse("y", "activation", (32, n), "fp16", 2 * 32 * n),), (("m", 32), ("n", n), ("k", k)))
    m = pim_mapper(overrides={"pim.dual_row_buffer": True, "pim.gemm_sharing": True})
    d = m.decide(wide, Schedule(graph, forced={"fc": "pim"}, continuations=frozenset({"fc"})))
    by_hand = 32 * 2 * n * k / 5 / HBM_INTERNAL + (32 * k * 2 * 16 + 32 * n * 2 / 5 * 16) / HBM_PINS + 2 * SWITCH
    assert d.where == "pim" and d.pim_s == pytest.approx(by_hand, rel=1e-9, abs=0)
    assert d.host.op is wide and d.host.overhead_s == 0.0


def test_why_pim_loses():
    """Three ways to lose, each by hand on one stack (or hbm_pim's five):
    * GEMV with 60 us mode switches: 32.16 + 120 = 152.16 us against the host's 134.86 us, memory
      27.31 us under half of it: "PIM 1.1x slower: overheads ... dominate".
    * 4-row GEMM with 75 us switches: W re-streamed 4 times, 109.23 us, + x to 16 channels and 16
      partial sums back, 1,048,576 B / 307.2 GB/s = 3.41 us, + 4 + 150 us = 266.64 us; memory is 41 %
      of it (under half): overheads again. Host 4 + 2.3 + (W + 4 x 4096 x 4 B) / (0.85 x 307.2 GB/s)
      = 135.05 us: 1.97x.
    * Llama-2-13B qk at batch 1, kv_len 4096, KV by request: all 40 heads on stack 0, 3 rounds of 16
      channels for 2.5 heads' work (x1.2): K 40 x 4096 x 256 B / 1228.8 GB/s x 1.2 = 40.96 us, + q in
      and 16 partial scores per key out, 40 x (256 + 4096 x 2 x 16) B / 307.2 GB/s = 17.10 us, + 4.5 us
      = 62.56 us, memory bound (65 %); attention has no M, one row: "streams slower than the host".
      Host: 4 + 2.3 us + (K 41,943,040 + q 10,240 + scores 327,680 B) / (0.85 x 1536 GB/s) = 38.68 us."""
    d = pim_mapper(overrides={**ONE, "pim.mode_switch_s": 60e-6}).decide(gemv(N, K))
    assert d.why == "PIM 1.1x slower: overheads (launch, mode switch, transfers) dominate"

    graph = OpGraph("decode", 4, 1, 1)
    graph.add(Op("fc4", GEMM, 2.0 * 4 * N * K, (TensorUse("x", "activation", (4, K), "fp16", 2 * 4 * K),
                                                 TensorUse("w", "weight", (N, K), "fp16", W)),
                 (TensorUse("y", "activation", (4, N), "fp16", 2 * 4 * N),), (("m", 4), ("n", N), ("k", K))), [])
    d = pim_mapper(overrides={**ONE, "pim.mode_switch_s": 75e-6}).decide(graph.op("fc4"))
    pim_s = LAUNCH + 150e-6 + 4 * W / HBM_INTERNAL + 1_048_576 / HBM_PINS
    host_s = host_memory_bound(W + 4 * N * 4, 307.2e9)
    assert (pim_s, host_s) == (pytest.approx(266.64e-6, rel=1e-4), pytest.approx(135.05e-6, rel=1e-4))
    assert (d.pim_s, d.host.duration_s) == (pytest.approx(pim_s, rel=1e-9, abs=0), pytest.approx(host_s, rel=1e-9, abs=0))
    assert d.why == "PIM 2.0x slower: overheads (launch, mode switch, transfers) dominate"

    m = pim_mapper(overrides={"pim.kv_placement": "request"}, batch=1)
    qk = lower(m.model, "decode", 1, 1, 4096, m.formats, num_layers=1).op("L0.qk")
    d = m.decide(qk)
    pim_s = LAUNCH + 2 * SWITCH + 40 * 4096 * 256 / HBM_INTERNAL * 1.2 + 40 * (256 + 4096 * 2 * 16) / HBM_PINS
    host_s = host_memory_bound(41_943_040 + 10_240 + 327_680, 1536e9)
    assert (pim_s, host_s) == (pytest.approx(62.56e-6, rel=1e-3), pytest.approx(38.68e-6, rel=1e-3))
    assert (d.pim_s, d.host.duration_s) == (pytest.approx(pim_s, rel=1e-9, abs=0), pytest.approx(host_s, rel=1e-9, abs=0))
    assert d.why == "PIM 1.6x slower: streams slower than the host"


def test_softmax_on_the_buffer_die_is_bound_by_the_pins():
    """With softmax on the buffer die (AttAcc-style), no launch and no mode switch: Llama-2-13B at
    batch 1, kv_len 1025, 8 heads per stack; each head's 1025 fp16 scores go in and its probabilities
    come out at the pin rate, 8 x 4 x 1025 = 32,800 B / 307.2 GB/s = 106.8 ns, after 5 FLOP per score,
    8 x 5125 FLOP / 1228.8 GFLOP/s = 33.4 ns (in-memory work and transfers are serial): 140.1 ns, link
    bound. Energy: those bytes through the pins at 3.59 pJ/bit, nothing streamed inside."""
    m = pim_mapper(overrides={"pim.softmax": "buffer_die", "pim.mode_switch_s": 0.0,
                              "units.gpu.launch_overhead_s": 0.0}, batch=1)
    op = lower(m.model, "decode", 1, 1, 1025, m.formats, num_layers=1).op("L0.softmax")
    pieces = m.split(op)
    assert [p.stack for p in pieces] == [0, 1, 2, 3, 4]
    for p in pieces:
        c = m.piece_cost(op, p, 2)
        assert (c.stack, c.unit, c.path, c.bound) == (p.stack, f"pim.stack{p.stack}", "PIM (bank_pair)", "link")
        assert c.compute_s == pytest.approx(8 * 5125 / 1228.8e9, rel=1e-9, abs=0)
        assert c.duration_s == pytest.approx(8 * 5125 / 1228.8e9 + 32_800 / HBM_PINS, rel=1e-9, abs=0)
        assert (c.energy_internal_j, c.energy_external_j) == (0.0, pytest.approx(32_800 * 3.59e-12 * 8, rel=1e-9, abs=0))


def test_a_gemm_bias_is_not_streamed_by_pim():
    """PIM streams the weight matrix, once per input row; a 1-D bias (OPT) is added by the host
    when it sums the partial sums, so the GEMV's stream on one stack stays W = 33,554,432 B."""
    graph = OpGraph("decode", 1, 1, 1)
    graph.add(Op("fcb", GEMM, 2.0 * N * K, (TensorUse("x", "activation", (1, K), "fp16", 2 * K),
                                            TensorUse("w", "weight", (N, K), "fp16", W),
                                            TensorUse("b", "weight", (N,), "fp16", 2 * N)),
                 (TensorUse("y", "activation", (1, N), "fp16", 2 * N),), (("m", 1), ("n", N), ("k", K))), [])
    (piece,) = pim_mapper(overrides=ONE).split(graph.op("fcb"))
    assert piece.stream_bytes == W


def test_the_crossover_script_runs_and_names_the_gemms_pim_takes():
    """scripts/pim_crossover.py (docs/pim.md's crossover table) read PimMapper.last_decisions, gone since the mappers
    return their placement (decisions(graph)): it crashed. One cell: at batch 1 every FC GEMM of Llama-2-13B runs on
    PIM under auto (a GEMV streams its weights once, in the banks), and the step is faster than without PIM."""
    import importlib.util
    from pathlib import Path

    from hw_models.machine import load_machine

    path = Path(__file__).resolve().parents[1] / "scripts" / "pim_crossover.py"
    spec = importlib.util.spec_from_file_location("pim_crossover", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # every die with PIM units: the preset's PIM dies reach 10.7 of the 26 GB (tests/test_pim_reach.py)
    out = mod.cell(load_machine("hbm_pim", {"pim.pim_capacity_bytes_per_stack": None}), "llama2-13b", 1, 512)
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} <= set(out["fc_on_pim"])
    assert out["auto"] < out["none"] and out["fits"]

"""The single-layer-replay condition of per-op tables (hw_models.stack.attention_kernels): a KV cache no
larger than the unit's L2 streams at the cited L2 rate, only when the caller declares that condition
(sim.apps.trace.aic); serving, whose stacks never declare it, streams every cache from DRAM."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from hw_models.stack.attention_kernels import Decode, attention_cost, attention_families
from hw_models.stack.spec import load_stack
from sim.apps.trace.aic import _mapper, attention_ops
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import load_model

MODEL = {"name": "t", "hidden_size": 4096, "intermediate_size": 14336, "num_layers": 1, "num_heads": 32,
         "num_kv_heads": 8, "head_dim": 128, "vocab_size": 32000, "max_position_embeddings": 1 << 20}
MIB = 1 << 20
DRAM_BW = 1792e9 * load_machine("rtx_pro_6000").units["gpu"].efficiency.for_kind("attention").memory_max


def _op(batch: int, kv_len: int, kv: str = "bf16"):
    graph = lower(load_model(MODEL), "decode", batch, 1, kv_len, FormatPolicy("bf16", "bf16", kv), True, 1)
    return graph.op("L0.attention")


def _cost(op, family: str, preset: str, replay: bool):
    m = load_machine(preset)
    u = m.units[m.main_unit]
    return attention_cost(op, u, m.main_unit, m.memory[u.memory], family, replay)


def _kv_bytes(op) -> float:
    return float(sum(t.bytes for t in op.reads if t.role == "kv"))


def test_l2_stream_by_hand():
    """64 MiB from a 20 TB/s L2 with kv_ramp_ctas 2 and 8 CTAs: 67.1 MB / 20 TB/s x (1 + 2 / 8) = 4.194 us;
    the DRAM stream efficiency (0.5 here) is a DRAM figure and does not apply."""
    d = Decode(fixed_s=0, cta_s=0, mha_cta_s=0, kv_stream_efficiency=0.5, kv_ramp_ctas=2)
    assert d.l2_memory_s(64 * MIB, 8, 20e12) == pytest.approx(64 * MIB / 20e12 * 1.25)


def test_l2_stream_efficiency_by_hand():
    """The same 64 MiB at l2_stream_efficiency 0.125 (2.5 TB/s of the 20 TB/s cited): 8x the time, 33.55 us;
    an MHA call (mha=True) with its own ramp 6: x (1 + 6 / 8) instead of x 1.25."""
    d = Decode(fixed_s=0, cta_s=0, mha_cta_s=0, kv_stream_efficiency=0.5, kv_ramp_ctas=2,
               mha_kv_stream_efficiency=0.25, mha_kv_ramp_ctas=6, l2_stream_efficiency=0.125)
    assert d.l2_memory_s(64 * MIB, 8, 20e12) == pytest.approx(64 * MIB / 2.5e12 * 1.25)
    assert d.l2_memory_s(64 * MIB, 8, 20e12, mha=True) == pytest.approx(64 * MIB / 2.5e12 * 1.75)


def test_cache_that_fits_streams_from_l2_only_under_replay():
    """RTX PRO 6000 (128 MiB L2, 23.35 TB/s): batch 16 x 2048 tokens x 8 KV heads x 128 x 2 (K, V) x 2 B
    = 128 MiB fits, and under replay streams at 23.35 TB/s x l2_stream_efficiency / (1 + ramp / 128 CTAs), still
    faster than DRAM (the fitted efficiencies put the L2 at 2.9-4.9 TB/s, DRAM at 1.5 TB/s); without the replay
    condition, and for 160 MiB (batch 20) either way, at the DRAM rate as before."""
    for name, fam in attention_families().items():
        if "bf16" not in fam.decode:    # vllm_flashinfer: FP8 KV only
            continue
        d = fam.decode["bf16"]
        fits = _op(16, 2048)
        assert _kv_bytes(fits) == 128 * MIB
        replay = _cost(fits, name, "rtx_pro_6000", True)
        ctas = d.launch(16, 32, 8, 188, 2048)[0]     # FA2 and FlashInfer split these calls (test_attention_kernels)
        assert replay.memory_s == pytest.approx(128 * MIB / (23.35e12 * d.l2_stream_efficiency)
                                                * (1 + d.kv_ramp_ctas / ctas))
        plain = _cost(fits, name, "rtx_pro_6000", False)
        assert plain.memory_s == pytest.approx(d.memory_s(128 * MIB, ctas, DRAM_BW))
        assert replay.overhead_s == plain.overhead_s and replay.memory_s < plain.memory_s
        big = _op(20, 2048)
        assert _cost(big, name, "rtx_pro_6000", True).duration_s == _cost(big, name, "rtx_pro_6000", False).duration_s


def test_no_l2_rate_no_l2_term():
    """h100_sxm and a100_80g carry l2_bytes but no L2 read rate (their rows show no gain): replay or not,
    a 16 MiB cache costs the same."""
    op = _op(4, 1024)
    for preset in ("h100_sxm", "a100_80g"):
        assert _cost(op, "flash_attn", preset, True).duration_s == _cost(op, "flash_attn", preset, False).duration_s


def test_serving_stacks_never_declare_replay():
    """Only the per-op validation path sets single_layer_replay; every shipped stack leaves it off."""
    for name in ("vllm", "sglang", "trtllm", "torch-cudagraph", "torch-eager"):
        assert load_stack(name).single_layer_replay is False
    assert _mapper("rtx_pro_6000", "vllm").stack.single_layer_replay is True
    assert _mapper("rtx_pro_6000", "vllm", True).stack.single_layer_replay is False   # the "before" column


@pytest.mark.parametrize("family", sorted(attention_families()))
def test_replay_never_faster_with_more_work(family):
    """Across the L2 boundary too: a longer cache or a larger batch never costs less under replay."""
    for kv in ("bf16", "fp8_e4m3"):
        if kv not in attention_families()[family].decode:
            continue
        for batch in (1, 16, 64):
            t = [_cost(_op(batch, n, kv), family, "rtx_pro_6000", True).duration_s
                 for n in (64, 1024, 2048, 2560, 4096, 65536)]
            assert t == sorted(t)
        t = [_cost(_op(b, 2048, kv), family, "rtx_pro_6000", True).duration_s for b in (1, 8, 16, 17, 20, 256)]
        assert t == sorted(t)


def test_mapper_tells_kv_heads_and_kv_format_apart():
    """Batch 32, 2 tokens, 32 heads: 4 KV heads of bf16 cache and 8 of FP8 have equal FLOPs, bytes and query
    shape (the GPU mapper's cost key before): costed one after the other by the same mapper, each takes its own
    format's figures (the FP8 call at 12.2 us, not the bf16 one's 9.4)."""
    bf16 = attention_ops("rtx_pro_6000", "trtllm", "trtllm", "decode", 32, 1, 2, 32, 4, 128, "bf16")[0]
    fp8 = attention_ops("rtx_pro_6000", "trtllm", "trtllm", "decode", 32, 1, 2, 32, 8, 128, "fp8_e4m3")[0]
    assert (bf16[0].flops, bf16[0].bytes) == (fp8[0].flops, fp8[0].bytes)
    for op, seconds in (bf16, fp8):
        assert seconds == _cost(op, "trtllm_attention_sm120", "rtx_pro_6000", True).duration_s
    assert fp8[1] != bf16[1]


def _prefill_ops(batch: int, q_len: int) -> tuple:
    graph = lower(load_model(MODEL), "prefill", batch, q_len, 0, FormatPolicy("bf16", "bf16", "bf16"), True, 1)
    return graph.op("L0.rope"), graph.op("L0.kv_append")


def _stack_cost(op, preset: str, replay: bool):
    from hw_models.cost import roofline_cost
    m = load_machine(preset)
    u = m.units[m.main_unit]
    stack = load_stack("trtllm").model_copy(update={"single_layer_replay": replay})
    return roofline_cost(op, u, m.main_unit, m.memory[u.memory], stack=stack)


def test_kernel_traffic_that_fits_the_l2_streams_from_it_under_replay():
    """The RoPE and KV-write kernels of a replayed attention call (hw_models.stack.cost.replay_l2_s) on the L40S
    (96 MiB L2, 16.96 TB/s cited as assumed in its preset): 8 sequences x 128 tokens read and write Q and K,
    (32 + 8) heads x 128 x 2 B x 2 = 20,480 B a token, 20.97 MB, under 96 MiB: traffic / 16.96 TB/s plus the
    kernel floor, 1.24 us of streaming where the DRAM rate (864 GB/s) would take ~24 us. 8 x 4096 tokens of RoPE
    traffic (671 MB) does not fit: the DRAM stream, replay or not. Without the replay condition nothing changes."""
    rope, kv = _prefill_ops(8, 128)
    assert rope.bytes == 8 * 128 * 40 * 128 * 2 * 2
    for op in (rope, kv):
        replay, plain = _stack_cost(op, "l40s", True), _stack_cost(op, "l40s", False)
        spec = load_stack("trtllm").spec(op)
        assert replay.memory_s == pytest.approx(spec.traffic * op.bytes / 16.96e12)
        assert plain.memory_s > 10 * replay.memory_s and replay.overhead_s == plain.overhead_s
        assert plain.bound == "memory"     # fused into the attention op: no kernel floor of its own (trtllm.yaml)
    big, _ = _prefill_ops(8, 4096)
    assert big.bytes > 96 * MIB
    assert _stack_cost(big, "l40s", True).duration_s == _stack_cost(big, "l40s", False).duration_s
    # h100_sxm cites no L2 rate: the DRAM stream under replay too
    assert _stack_cost(rope, "h100_sxm", True).duration_s == _stack_cost(rope, "h100_sxm", False).duration_s

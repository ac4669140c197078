"""Lowering: per-op FLOPs and bytes of a Llama-2-7B fp16 decode step, derived by hand."""

import networkx as nx
import pytest

from sim.core.lowering import FormatPolicy, lower, lower_attention
from sim.core.model import load_model

M = load_model("llama2-7b")
H, F, V, L = 4096, 11008, 32000, 32
KV = 1024  # attended keys in this decode step


@pytest.fixture(scope="module")
def step():
    return lower(M, "decode", batch=1, q_len=1, kv_len=KV)


def test_projection_costs(step):
    q = step.op("L0.q_proj")
    assert q.flops == 2 * 4096 * 4096                       # 2 FLOPs per MAC, one token
    assert q.bytes_by_role()["weight"] == 33_554_432        # 4096*4096*2 bytes
    assert q.bytes_by_role()["activation"] == 2 * 4096 * 2  # x in, q out
    up = step.op("L5.up_proj")
    assert up.flops == 2 * H * F and up.bytes_by_role()["weight"] == H * F * 2
    head = step.op("lm_head")
    assert head.flops == 2 * H * V and head.bytes_by_role()["weight"] == V * H * 2


def test_attention_costs(step):
    qk, av, sm = step.op("L0.qk"), step.op("L0.av"), step.op("L0.softmax")
    assert qk.flops == 2 * 32 * KV * 128 == av.flops        # heads * kv_len * head_dim MACs
    assert qk.bytes_by_role()["kv"] == KV * 4096 * 2        # the whole K cache of the layer, fp16
    assert sm.flops == 5 * 32 * KV
    assert sm.bytes == 2 * 32 * KV * 2                      # scores in, probabilities out


def test_weight_bytes_equal_two_bytes_per_param_minus_embedding(step):
    # A decode step reads every weight once, except the embedding table, of which
    # it reads one row per token (batch 1: one row).
    weights = step.bytes_by_role()["weight"]
    assert weights == 2 * (M.params() - V * H) + 2 * H


def test_kv_bytes_and_flops_total(step):
    kv = step.bytes_by_role()["kv"]
    # K and V read over kv_len, plus one new K and V row appended, per layer.
    assert kv == L * (2 * KV * 4096 * 2 + 2 * 4096 * 2)
    # Decode FLOPs ~ 2 * params * tokens + attention (4 * heads * kv_len * head_dim per layer).
    matmul = 2 * (M.params() - V * H - L * 2 * H - H)      # every matrix weight, one MAC each
    attention = L * 4 * 32 * KV * 128
    assert step.flops == pytest.approx(matmul + attention, rel=1e-3)


def test_graph_is_a_dag_with_data_edges(step):
    assert nx.is_directed_acyclic_graph(step.dag.to_networkx())
    assert set(step.deps("L0.qk")) == {"L0.rope", "L0.kv_append"}
    assert set(step.deps("L1.attn_residual")) == {"L0.mlp_residual", "L1.o_proj"}
    assert len(step) == 1 + L * 17 + 2


def test_gqa_prefill_and_flash():
    m = load_model("llama2-70b")
    g = lower(m, "prefill", batch=2, q_len=128, kv_len=128, flash_attention=True, num_layers=1)
    k = g.op("L0.k_proj")
    assert k.flops == 2 * 256 * 8192 * 1024                 # 8 KV heads x 128 = 1024 wide
    att = g.op("L0.attention")
    # causal flash: each query sees on average (128 + 1) / 2 keys
    pairs = 2 * 64 * 128 * (128 + 1) / 2
    assert att.flops == pytest.approx(4 * pairs * 128 + 5 * pairs)
    assert g.op("lm_head").flops == 2 * 2 * 8192 * 32000    # last token of each sequence only


def test_formats_per_role_and_override():
    pol = FormatPolicy(weights="int4", activations="fp16", kv_cache="int8", overrides=(("lm_head", "bf16"),))
    g = lower(M, "decode", 1, 1, KV, pol, num_layers=1)
    q = g.op("L0.q_proj")
    w = next(t for t in q.reads if t.role == "weight")
    # int4 groups of 128 with an fp16 scale: 4096*4096/2 + 4096*32*2
    assert w.fmt == "int4" and w.bytes == 4096 * 4096 // 2 + 4096 * 32 * 2
    head = next(t for t in g.op("lm_head").reads if t.role == "weight")
    assert head.fmt == "bf16" and head.bytes == V * H * 2
    norm_w = next(t for t in g.op("L0.attn_norm").reads if t.role == "weight")
    assert norm_w.fmt == "fp16"                              # vectors stay in the activation format
    k = next(t for t in g.op("L0.qk").reads if t.role == "kv")
    assert k.bytes == KV * 4096 + KV * 2                     # int8 per row + one fp16 scale per row


@pytest.mark.parametrize("name", ["llama2-7b", "opt-6.7b", "qwen3-8b", "mistral-7b", "gemma-2-9b"])
@pytest.mark.parametrize("phase,batch,q_len,kv_len,flash", [("decode", 3, 1, 9000, True),
                                                             ("prefill", 2, 300, 300, False)])
def test_attention_half_has_the_ops_of_the_whole_step(name, phase, batch, q_len, kv_len, flash):
    """lower_attention (what sim.apps.trace.aic costs per engine attention call) builds layer 0's
    ops up to the attention exactly as `lower` does (q/k norm, RoPE or none, windows, unfused
    attention), and nothing of the MLP, the embedding or the LM head."""
    model = load_model(name)
    pol = FormatPolicy("bf16", "bf16", "fp8_e4m3")
    whole = lower(model, phase, batch, q_len, kv_len, pol, flash, 1)
    half = lower_attention(model, phase, batch, q_len, kv_len, pol, flash)
    names = [op.name for op in half.ops()]
    assert "L0.kv_append" in names and ("L0.attention" if flash else "L0.av") in names
    assert {"embed", "L0.o_proj", "L0.down_proj", "lm_head"}.isdisjoint(names)
    for n in names:
        assert half.op(n) == whole.op(n), n


@pytest.mark.parametrize("act", ["fp8_e4m3", "mxfp4"])
def test_unfused_attention_scores_stay_16_bit_under_a_narrow_activation_format(act):
    """The scores are qk's GEMM output and the probabilities softmax's: 16-bit (bf16) whatever formats.activations
    says, as every other GEMM output (a formats trial: an a6000 W4A4 prefill held its 1 x 1024^2 scores at 0.53 bytes
    a value, most of its documented 1.08x). Llama-2-7B prefill of 1 x 128: 32 heads x 128 x 128 scores x 2 bytes."""
    m = load_model("llama2-7b")
    graph = lower(m, "prefill", 1, 128, 128, FormatPolicy(weights=act, activations=act), flash_attention=False)
    softmax = graph.op("L0.softmax")
    (scores,), (probs,) = softmax.reads, softmax.writes
    assert scores.fmt == probs.fmt == "bf16"
    assert scores.bytes == probs.bytes == 32 * 128 * 128 * 2
    q = [t for t in graph.op("L0.qk").reads if t.role == "activation"]
    assert q and all(t.fmt == act for t in q)   # the GEMM's input keeps the activation format


def test_per_tensor_and_per_channel_ints_take_their_widths_mma():
    """int8_pt W8A8 ran at the bf16 rate on an a6000 while group-wise int4 W4A4 ran at the INT4 rate (a formats
    trial): a symmetric per-tensor or per-row scale multiplies the int32 accumulator in the epilogue, so the pair runs
    on the integer MMA of its width; asymmetric and other group sizes stay dequantized unless a preset lists them."""
    from hw_models.compute_path import choose
    from hw_models.machine import load_machine

    gpu = load_machine("a6000").units["gpu"]
    for w, a, mma, rate in (("int8_pt", "int8_pt", "int8", 309.7e12), ("int4_pc", "int4_pc", "int4", 619.4e12),
                            ("int8", "int8_pt", "int8", 309.7e12)):
        path = choose(gpu, "gpu", w, a)
        assert (path.fmt, path.rate_flops_per_s, path.dequant) == (mma, rate, False), (w, a)
        assert path.label.endswith(f"native ({mma} MMA)") or path.label == f"{w} x {a} native", path.label
    for w in ("int4_g64", "int4_g128_asym"):
        assert choose(gpu, "gpu", w, w).dequant, w

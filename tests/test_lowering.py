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

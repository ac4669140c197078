"""Rebuild the op graph a measured step ran, so the simulator can cost the
same ops: the project's labels lower through sim.core.lowering unchanged; vidur's
labels get vidur's fused shapes (one QKV GEMM, one gate+up GEMM), with the
weights sharded 1/TP as vidur profiles them (column-parallel QKV and gate+up,
row-parallel o_proj and down_proj, no all-reduce).
"""

from __future__ import annotations

from sim.core import graph as g
from sim.core.errors import ConfigError
from sim.core.graph import OpGraph
from sim.core.lowering import FormatPolicy, _Builder, lower
from sim.core.model import ModelConfig
from sim.apps.trace.records import StepShape, Trace


def weight_overrides(dtype: str, weights: str | None) -> dict[str, str]:
    """capture_trace --weights quantizes the layers' projections only: embed and lm_head keep `dtype`."""
    return {"embed": dtype, "lm_head": dtype} if weights and weights != dtype else {}


def formats_for(dtype: str, weights: str | None = None) -> FormatPolicy:
    return FormatPolicy(weights=weights or dtype, activations=dtype, kv_cache=dtype,
                        overrides=tuple(weight_overrides(dtype, weights).items()))


def vidur_layer(model: ModelConfig, tokens: int, tp: int = 1, dtype: str = "fp16") -> OpGraph:
    """One decoder layer as vidur's profiler runs it (attention itself excluded):
    emb, input_layernorm, attn_pre_proj (fused QKV), attn_rope, attn_post_proj,
    post_attention_layernorm, mlp_up_proj (fused gate+up), mlp_act, mlp_down_proj, add.
    FLOP counts per element follow sim.core.lowering (RMSNorm 4, RoPE 6, SiLU*mul 5, add 1)."""
    if model.hidden_size % tp or model.intermediate_size % tp or model.num_kv_heads % tp and model.num_kv_heads > tp:
        raise ConfigError(f"{model.name}: TP {tp} does not divide its dimensions")
    graph = OpGraph("prefill", 1, tokens, tokens)
    b = _Builder(graph, formats_for(dtype))
    T, h = tokens, model.hidden_size
    q = model.q_dim // tp
    kv = max(model.kv_dim // tp, model.head_dim)   # KV heads are replicated when TP exceeds them
    f = model.intermediate_size // tp

    x = b.act("in", T, h)
    b.add("emb", g.EMBED, 0, [b.weight("emb", "emb.w", T, h)], [x], None, tokens=T, hidden=h)
    xn = b.act("xn", T, h)
    b.add("input_layernorm", g.NORM, 4 * T * h, [x, b.weight("input_layernorm", "ln1.w", h)], [xn], None,
          tokens=T, hidden=h)
    qkv = b.act("qkv", T, q + 2 * kv)
    b.add("attn_pre_proj", g.GEMM, 2 * T * h * (q + 2 * kv), [xn, b.weight("attn_pre_proj", "wqkv", q + 2 * kv, h)],
          [qkv], None, m=T, n=q + 2 * kv, k=h)
    qk = b.act("qk_rot", T, q + kv)
    b.add("attn_rope", g.ROPE, 6 * T * (q + kv), [b.act("qkv.qk", T, q + kv)], [qk], None,
          tokens=T, heads=model.num_heads // tp, kv_heads=kv // model.head_dim, head_dim=model.head_dim)
    ctx = b.act("ctx", T, q)   # attention itself is not profiled: its output is random in vidur
    o = b.act("attn_out", T, h)
    b.add("attn_post_proj", g.GEMM, 2 * T * q * h, [ctx, b.weight("attn_post_proj", "wo", h, q)], [o], None,
          m=T, n=h, k=q)
    hn = b.act("hn", T, h)
    b.add("post_attention_layernorm", g.NORM, 4 * T * h, [o, b.weight("post_attention_layernorm", "ln2.w", h)],
          [hn], None, tokens=T, hidden=h)
    gu = b.act("gate_up", T, 2 * f)
    b.add("mlp_up_proj", g.GEMM, 2 * T * h * 2 * f, [hn, b.weight("mlp_up_proj", "wgu", 2 * f, h)], [gu], None,
          m=T, n=2 * f, k=h)
    a = b.act("act", T, f)
    b.add("mlp_act", g.ELEMENTWISE, 5 * T * f, [gu], [a], None, tokens=T, hidden=f)
    y = b.act("mlp_out", T, h)
    b.add("mlp_down_proj", g.GEMM, 2 * T * f * h, [a, b.weight("mlp_down_proj", "wd", h, f)], [y], None,
          m=T, n=h, k=f)
    b.add("add", g.ELEMENTWISE, T * h, [o, y], [b.act("out", T, h)], None, tokens=T, hidden=h)
    return graph


def step_graph(trace: Trace, step: StepShape) -> OpGraph:
    """The simulated graph of one measured step."""
    if trace.model is None:
        raise ConfigError(f"{trace.source}: the trace does not say which model ran (no .meta.json beside it?)")
    if trace.vocabulary == "vidur":
        return vidur_layer(trace.model, step.tokens, step.tp, trace.dtype)
    return lower(trace.model, step.phase, step.batch, step.q_len, step.kv_len, formats_for(trace.dtype, trace.weights),
                 trace.flash, num_layers=trace.num_layers)

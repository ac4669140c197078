"""Lower a model config into the op DAG of one prefill or decode step.

One function, `lower`, for the whole LLaMA family (GQA/MQA through
num_kv_heads, SwiGLU, RMSNorm, RoPE) and OPT (LayerNorm, ReLU MLP, learned
positions, biases), with the decoder variants of sim.core.architectures: q/k/v
biases, q/k norm, sandwich norms, sliding windows, soft-capping. Per-element
FLOP counts of the small ops follow the usual roofline-tool conventions
(LLM-Viewer): RMSNorm 4, LayerNorm 5, RoPE 6 per rotated element, softmax 5,
SiLU*mul 5 (GELU*mul, Gemma's, counted the same), ReLU 1, residual add 1; our
own: soft-capping 3 (divide, tanh, multiply).
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, replace
from functools import lru_cache

from sim.core import graph as g
from sim.core.formats import get_format
from sim.core.graph import Op, OpGraph, TensorUse
from sim.core.model import ModelConfig
from sim.core.moe import route


@dataclass(frozen=True)
class FormatPolicy:
    """Number format per tensor role, with optional per-op weight overrides
    (glob on the op name, first match wins), e.g. (("lm_head", "bf16"),)."""

    weights: str = "fp16"
    activations: str = "fp16"
    kv_cache: str = "fp16"
    overrides: tuple[tuple[str, str], ...] = ()

    def weight_format(self, op_name: str) -> str:
        return next((fmt for pattern, fmt in self.overrides if override_matches(pattern, op_name)), self.weights)

    @property
    def wide(self) -> str:
        """The format of the residual stream, of the GEMM outputs it and the MLP's activation function read, of
        the logits and of 1-D weights: the activation format where it has 16 bits or more, else bf16. Quantized
        deployments quantize a GEMM's input in the kernel before it (vLLM's fused RMSNorm + FP8 quant and SiLU-and-mul
        + quant; TensorRT-LLM's fused norm-quant plugins) and keep those 16-bit. The attention's q/k/v and output
        keep the activation format (FP8 attention kernels read and write them so: the fitted attention families)."""
        return self.activations if get_format(self.activations).bits >= 16 else "bf16"


def override_matches(pattern: str, op_name: str) -> bool:
    """Whether a `formats.overrides` glob names op `op_name`: its whole name (L0.q_proj) or its
    name within a layer (q_proj, standing for the op in every layer)."""
    return fnmatch.fnmatchcase(op_name, pattern) or fnmatch.fnmatchcase(op_name.split(".", 1)[-1], pattern)


class _Builder:
    def __init__(self, graph: OpGraph, formats: FormatPolicy):
        self.graph = graph
        self.formats = formats
        self.producer: dict[str, tuple[str, ...]] = {}

    def tensor(self, name: str, role: str, shape: tuple[int, ...], fmt: str) -> TensorUse:
        return TensorUse(name, role, shape, fmt, get_format(fmt).storage_bytes(shape))

    def act(self, name: str, *shape: int) -> TensorUse:
        return self.tensor(name, "activation", tuple(shape), self.formats.activations)

    def wide(self, name: str, *shape: int) -> TensorUse:
        """An activation kept 16-bit under a narrower activation format (FormatPolicy.wide)."""
        return self.tensor(name, "activation", tuple(shape), self.formats.wide)

    def kv(self, name: str, *shape: int) -> TensorUse:
        return self.tensor(name, "kv", tuple(shape), self.formats.kv_cache)

    def weight(self, op_name: str, name: str, *shape: int) -> TensorUse:
        # Matrices take the weight format; 1-D vectors (norm scales, biases) stay
        # 16-bit (FormatPolicy.wide), as every quantized deployment keeps them.
        fmt = self.formats.weight_format(op_name) if len(shape) > 1 else self.formats.wide
        return self.tensor(name, "weight", tuple(shape), fmt)

    def add(self, name: str, kind: str, flops: float, reads: list[TensorUse], writes: list[TensorUse],
            layer: int | None, part: bool = False, after: tuple[str, ...] = (), **dims: int) -> None:
        """`part`: the op writes one part of its outputs (a ragged batch's attention over some of
        the sequences), so readers of those tensors wait for every part, not only the last.
        `after`: ops it follows without reading their outputs (kernels issued in sequence)."""
        deps = sorted({p for t in reads for p in self.producer.get(t.name, ())} | set(after))
        op = Op(name, kind, float(flops), tuple(reads), tuple(writes), tuple(dims.items()),
                self.formats.activations, layer)
        self.graph.add(op, deps)
        for t in writes:
            self.producer[t.name] = (*self.producer.get(t.name, ()), name) if part else (name,)


@lru_cache(maxsize=256)
def lower(model: ModelConfig, phase: str, batch: int, q_len: int, kv_len: int,
          formats: FormatPolicy = FormatPolicy(), flash_attention: bool = False,
          num_layers: int | None = None) -> OpGraph:
    """The op DAG of one step: `batch` sequences, each with `q_len` new tokens
    attending to `kv_len` keys (the new ones included). `num_layers` lowers only
    the first layers, used to fold identical layers in the engine.

    Results are cached per process (a sweep over hardware lowers the same
    graphs again and again), so callers must treat the graph as read-only."""
    if phase not in ("prefill", "decode"):
        raise ValueError(f"phase must be prefill or decode, got {phase!r}")
    graph = OpGraph(phase, batch, q_len, kv_len)
    b = _Builder(graph, formats)
    x = embed(b, model, batch * q_len)
    layers = model.num_layers if num_layers is None else num_layers
    for i in range(layers):
        x = _lower_layer(b, model, i, x, batch, q_len, kv_len, flash_attention)
    lm_head(b, model, x, batch)
    return graph


def embed(b: _Builder, m: ModelConfig, T: int) -> TensorUse:
    """The embedding lookup of `T` tokens: one table row per token."""
    h = m.hidden_size
    opt = m.family == "opt"
    reads = [b.weight("embed", "embed_tokens", T, h)]  # one table row per token
    if opt:
        reads.append(b.weight("embed", "embed_positions", T, h))
    x = b.wide("L0.in", T, h)
    b.add("embed", g.EMBED, T * h if opt else 0, reads, [x], None, tokens=T, hidden=h)
    return x


def lm_head(b: _Builder, m: ModelConfig, x: TensorUse, rows: int) -> None:
    """Final norm over every token, then the LM head over the `rows` tokens that sample."""
    T, h = x.shape
    opt = m.family == "opt"
    norm_w = b.weight("final_norm", "final_norm.w", (2 if opt else 1) * h)  # LayerNorm: weight + bias
    xn = b.act("final.xn", T, h)
    b.add("final_norm", g.NORM, (5 if opt else 4) * T * h, [x, norm_w], [xn], None, tokens=T, hidden=h)
    last = b.act("final.xn", rows, h)  # only each sequence's last token reaches the LM head
    head = "embed_tokens" if m.tie_word_embeddings else "lm_head.w"
    logits = b.wide("logits", rows, m.vocab_size)
    b.add("lm_head", g.GEMM, 2 * rows * h * m.vocab_size,
          [last, b.weight("lm_head", head, m.vocab_size, h)], [logits],
          None, m=rows, n=m.vocab_size, k=h)
    if m.final_softcap:
        b.add("final_softcap", g.ELEMENTWISE, SOFTCAP_FLOPS * rows * m.vocab_size, [logits],
              [b.wide("logits.capped", rows, m.vocab_size)], None, tokens=rows, hidden=m.vocab_size)


# cap * tanh(x / cap): a divide, a tanh and a multiply per element (Gemma-2's soft-capping).
SOFTCAP_FLOPS = 3


def _linear(b: _Builder, layer: int, name: str, x: TensorUse, out_dim: int, bias: bool, out: str,
            wide: bool = True) -> TensorUse:
    """A GEMM; its output 16-bit (FormatPolicy.wide) unless `wide` is False (q/k/v: the attention's inputs)."""
    op = f"L{layer}.{name}"
    tokens, in_dim = x.shape
    reads = [x, b.weight(op, f"L{layer}.{name}.w", out_dim, in_dim)]
    if bias:
        reads.append(b.weight(op, f"L{layer}.{name}.b", out_dim))
    y = (b.wide if wide else b.act)(f"L{layer}.{out}", tokens, out_dim)
    b.add(op, g.GEMM, 2 * tokens * in_dim * out_dim, reads, [y], layer, m=tokens, n=out_dim, k=in_dim)
    return y


def _norm(b: _Builder, layer: int, name: str, x: TensorUse, opt: bool, to_gemm: bool = True) -> TensorUse:
    """A norm; `to_gemm`: its output feeds GEMMs (the input norms: quantized there), else the residual (16-bit)."""
    op = f"L{layer}.{name}"
    tokens, h = x.shape
    w = b.weight(op, f"{op}.w", (2 if opt else 1) * h)  # LayerNorm: weight + bias, 1-D like a vector
    y = (b.act if to_gemm else b.wide)(f"{op}.out", tokens, h)
    b.add(op, g.NORM, (5 if opt else 4) * tokens * h, [x, w], [y], layer, tokens=tokens, hidden=h)
    return y


def _qk_norm(b: _Builder, m: ModelConfig, i: int, q: TensorUse, k: TensorUse) -> tuple[TensorUse, TensorUse]:
    """Qwen3's RMSNorm over each head of q and of k (one head_dim scale each), before RoPE."""
    op, T = f"L{i}.qk_norm", q.shape[0]
    q_n, k_n = b.act(f"{op}.q", T, m.q_dim), b.act(f"{op}.k", T, m.kv_dim)
    b.add(op, g.NORM, 4 * T * (m.q_dim + m.kv_dim), [q, k, b.weight(op, f"{op}.w", 2 * m.head_dim)],
          [q_n, k_n], i, tokens=T, hidden=m.q_dim + m.kv_dim)
    return q_n, k_n


def lower_attention(model: ModelConfig, phase: str, batch: int, q_len: int, kv_len: int,
                    formats: FormatPolicy = FormatPolicy(), flash_attention: bool = False) -> OpGraph:
    """The attention half of layer 0 of `lower`'s step (norm, q/k/v, RoPE, KV append, attention),
    its ops equal to those `lower` builds, without the embedding, the MLP or the LM head: what an
    engine's attention call covers (sim.apps.trace.aic), at a third of a whole step's lowering."""
    graph = OpGraph(phase, batch, q_len, kv_len)
    b = _Builder(graph, formats)
    _attention_block(b, model, 0, b.act("L0.in", batch * q_len, model.hidden_size), batch, q_len, kv_len,
                     flash_attention)
    return graph


def _lower_layer(b: _Builder, m: ModelConfig, i: int, x: TensorUse, batch: int, q_len: int, kv_len: int,
                 flash: bool) -> TensorUse:
    return mlp_block(b, m, i, x, _attention_block(b, m, i, x, batch, q_len, kv_len, flash))


def _attention_block(b: _Builder, m: ModelConfig, i: int, x: TensorUse, batch: int, q_len: int, kv_len: int,
                     flash: bool) -> TensorUse:
    """Layer `i` up to the attention's output (ctx): qkv, the KV append and the attention."""
    L = f"L{i}"
    T = x.shape[0]
    q, k, v = qkv(b, m, i, x)
    new_k, new_v = b.kv(f"{L}.k_cache", batch, q_len, m.kv_dim), b.kv(f"{L}.v_cache", batch, q_len, m.kv_dim)
    b.add(f"{L}.kv_append", g.KV_APPEND, 0, [k, v], [new_k, new_v], i, tokens=T, kv_dim=m.kv_dim)
    keys = m.keys_read(i, q_len, kv_len)   # all kv_len keys, or those within a sliding window's reach
    k_cache = b.kv(f"{L}.k_cache", batch, keys, m.kv_dim)
    v_cache = b.kv(f"{L}.v_cache", batch, keys, m.kv_dim)
    ctx = b.act(f"{L}.ctx", T, m.q_dim)
    # `context`: a prefill step's call, which an engine runs through its context kernel even for one new token
    # (hw_models.stack.attention_kernels prices a one-token call as decode otherwise).
    attention(b, m, i, "", q, k_cache, v_cache, ctx, ((batch, q_len, kv_len),), (batch, m.num_heads, q_len, keys),
              flash, False, batch=batch, heads=m.num_heads, kv_heads=m.num_kv_heads, q_len=q_len, kv_len=keys,
              head_dim=m.head_dim, context=int(b.graph.phase == "prefill"))
    return ctx


def qkv(b: _Builder, m: ModelConfig, i: int, x: TensorUse) -> tuple[TensorUse, TensorUse, TensorUse]:
    """Attention norm, q/k/v projections and RoPE over every token of the step."""
    L = f"L{i}"
    T = x.shape[0]
    opt = m.family == "opt"
    xn = _norm(b, i, "attn_norm", x, opt)
    bias = opt or m.qkv_bias
    q = _linear(b, i, "q_proj", xn, m.q_dim, bias, "q", wide=False)
    k = _linear(b, i, "k_proj", xn, m.kv_dim, bias, "k", wide=False)
    v = _linear(b, i, "v_proj", xn, m.kv_dim, bias, "v", wide=False)
    if m.qk_norm:
        q, k = _qk_norm(b, m, i, q, k)
    if not opt:
        q_r, k_r = b.act(f"{L}.q_rot", T, m.q_dim), b.act(f"{L}.k_rot", T, m.kv_dim)
        b.add(f"{L}.rope", g.ROPE, 6 * T * (m.q_dim + m.kv_dim), [q, k], [q_r, k_r], i,
              tokens=T, heads=m.num_heads, kv_heads=m.num_kv_heads, head_dim=m.head_dim)
        q, k = q_r, k_r
    return q, k, v


def attention(b: _Builder, m: ModelConfig, i: int, suffix: str, q: TensorUse, k_cache: TensorUse,
              v_cache: TensorUse, ctx: TensorUse, groups: tuple[tuple[int, int, int], ...],
              score_shape: tuple[int, ...], flash: bool, part: bool, after: tuple[str, ...] = (),
              **dims: int) -> str:
    """Attention of `groups` of sequences, each (count, q_len, kv_len), over the given cache
    tensors (of the keys in reach: ModelConfig.keys_read); FLOPs summed sequence by sequence.
    Op names end in `suffix`; the first op waits for `after`. Returns the name of the last op."""
    L, H, d = f"L{i}", m.num_heads, m.head_dim
    elementwise = 5 + (SOFTCAP_FLOPS if m.attn_softcap else 0)   # softmax, and the cap before it
    if flash:
        # Causal flash kernels skip fully masked blocks (and, with a window, those out of reach).
        attended = sum(n * H * causal_keys(ql, kl, m.window(i)) for n, ql, kl in groups)
        b.add(f"{L}.attention{suffix}", g.ATTENTION, 4 * attended * d + elementwise * attended,
              [q, k_cache, v_cache], [ctx], i, part, after, **dims)
        return f"{L}.attention{suffix}"
    # Unfused kernels compute every score of the keys read, masked ones included.
    pairs = sum(n * H * ql * m.keys_read(i, ql, kl) for n, ql, kl in groups)
    # The scores are a GEMM's output and the probabilities the softmax's: 16-bit under a narrower activation
    # format (FormatPolicy.wide), as an unfused (eager) attention holds them; they were narrow until stop 67, so
    # an a6000 W4A4 prefill read its 1 x 1024^2 scores at 0.53 bytes a value.
    scores = b.wide(f"{L}.scores{suffix}", *score_shape)
    probs = b.wide(f"{L}.probs{suffix}", *score_shape)
    b.add(f"{L}.qk{suffix}", g.ATTN_SCORE, 2 * pairs * d, [q, k_cache], [scores], i, after=after, **dims)
    b.add(f"{L}.softmax{suffix}", g.SOFTMAX, elementwise * pairs, [scores], [probs], i, **dims)
    b.add(f"{L}.av{suffix}", g.ATTN_CONTEXT, 2 * pairs * d, [probs, v_cache], [ctx], i, part, **dims)
    return f"{L}.av{suffix}"


def causal_keys(q_len: int, kv_len: int, window: int = 0) -> float:
    """Keys the last `q_len` of `kv_len` queries attend to in all, causally: query j (0-based)
    sees kv_len - q_len + 1 + j keys, or at most `window` of them (0: no window)."""
    if not window or window >= kv_len:
        return q_len * (kv_len - (q_len - 1) / 2)
    first = kv_len - q_len + 1
    below = max(0, min(kv_len, window - 1) - first + 1)   # queries that see fewer than `window` keys
    return below * (first + first + below - 1) / 2 + (q_len - below) * window


def mlp_block(b: _Builder, m: ModelConfig, i: int, x: TensorUse, ctx: TensorUse) -> TensorUse:
    """o_proj and the attention residual, then the MLP and its residual: the next layer's input."""
    L = f"L{i}"
    T, h = x.shape
    opt = m.family == "opt"
    o = _linear(b, i, "o_proj", ctx, h, opt or m.o_bias, "attn_out")
    if m.post_norms:
        o = _norm(b, i, "post_attn_norm", o, False, to_gemm=False)
    h1 = b.wide(f"{L}.h1", T, h)
    b.add(f"{L}.attn_residual", g.ELEMENTWISE, T * h, [x, o], [h1], i, tokens=T, hidden=h)

    hn = _norm(b, i, "mlp_norm", h1, opt)
    if opt:
        up = _linear(b, i, "fc1", hn, m.intermediate_size, True, "fc1_out")
        a = b.act(f"{L}.act_out", T, m.intermediate_size)
        b.add(f"{L}.act", g.ELEMENTWISE, T * m.intermediate_size, [up], [a], i, tokens=T, hidden=m.intermediate_size)
        branches = [_linear(b, i, "fc2", a, h, True, "mlp_out")]
    elif m.is_moe_layer(i):
        branches = [_moe(b, m, i, hn)]
        if m.shared_intermediate:
            branches.append(_swiglu(b, i, hn, m.shared_intermediate, "shared_"))
    else:
        branches = [_swiglu(b, i, hn, m.intermediate_size, "")]
    if m.post_norms:
        branches = [_norm(b, i, "post_mlp_norm", branches[0], False, to_gemm=False), *branches[1:]]
    out = b.wide(f"L{i + 1}.in", T, h)
    b.add(f"{L}.mlp_residual", g.ELEMENTWISE, len(branches) * T * h, [h1, *branches], [out], i, tokens=T, hidden=h)
    return out


def _swiglu(b: _Builder, i: int, hn: TensorUse, width: int, prefix: str) -> TensorUse:
    """gate/up/SiLU*mul/down; prefix "" is the dense MLP, "shared_" DeepSeek's shared experts."""
    T, h = hn.shape
    gate = _linear(b, i, f"{prefix}gate_proj", hn, width, False, f"{prefix}gate")
    up = _linear(b, i, f"{prefix}up_proj", hn, width, False, f"{prefix}up")
    a = b.act(f"L{i}.{prefix}act_out", T, width)
    b.add(f"L{i}.{prefix}act", g.ELEMENTWISE, 5 * T * width, [gate, up], [a], i, tokens=T, hidden=width)
    return _linear(b, i, f"{prefix}down_proj", a, h, False, f"{prefix}mlp_out")


# The routed experts' grouped GEMMs as _moe names them: hardware models and stacks key on these names
# (hw_models.gpu.expert_parallel, hw_models.stack.spec.is_expert_gemm).
EXPERT_GEMMS = ("expert_gate", "expert_up", "expert_down")


def _moe(b: _Builder, m: ModelConfig, i: int, hn: TensorUse) -> TensorUse:
    """Router GEMM, top-k gating, the routed experts as grouped GEMMs, and the
    weighted combine. The experts' work is the expected routing of sim.core.moe:
    the grouped GEMMs read the weights of the experts touched (fractional in
    expectation: rows = experts touched x expert width) and do the FLOPs of the
    token-expert assignments kept after capacity."""
    L, (T, h) = f"L{i}", hn.shape
    E, k, f = m.num_experts, m.experts_per_token, m.expert_intermediate
    logits = _linear(b, i, "router", hn, E, False, "router_logits")
    r = route(E, k, m.expert_load, T)
    touched, kept = r.experts_touched, r.assignments
    gating = b.wide(f"{L}.routing", T, k)
    # Softmax over E logits (5 per element) and a top-k selection (k compares per logit, our convention).
    b.add(f"{L}.topk", g.SOFTMAX, (5 + k) * T * E, [logits], [gating], i,
          tokens=T, experts=E, top_k=k, dropped=round(r.dropped))
    rows, a_rows = max(1, round(touched * f)), max(1, round(kept))   # shapes need integers; FLOPs stay exact
    per_expert = max(1, math.ceil(kept / touched)) if touched else 1
    x = b.act(hn.name, a_rows, h)   # the kept tokens' rows, gathered per expert

    def grouped(name: str, src: TensorUse, w_shape: tuple[int, int], out_dim: int, n: int, k_dim: int) -> TensorUse:
        op = f"{L}.{name}"
        y = b.wide(f"{op}.out", a_rows, out_dim)
        b.add(op, g.GEMM, 2 * kept * h * f, [src, b.weight(op, f"{op}.w", *w_shape)], [y], i,
              m=per_expert, n=n, k=k_dim)
        return y

    gate = grouped("expert_gate", x, (rows, h), f, rows, h)
    up = grouped("expert_up", x, (rows, h), f, rows, h)
    a = b.act(f"{L}.expert_act.out", a_rows, f)
    b.add(f"{L}.expert_act", g.ELEMENTWISE, 5 * kept * f, [gate, up], [a], i, tokens=a_rows, hidden=f)
    down = grouped("expert_down", a, (h, rows), h, max(1, round(touched * h)), f)
    out = b.wide(f"{L}.moe_out", T, h)
    # Each kept assignment scales its expert's output by its gate weight and adds it in: 2 per element.
    b.add(f"{L}.moe_combine", g.ELEMENTWISE, 2 * kept * h, [down, gating], [out], i, tokens=T, hidden=h)
    return out


@lru_cache(maxsize=256)
def formats_repeat_from(model: ModelConfig, formats: FormatPolicy) -> int:
    """The first layer from which every layer's weights take the formats of the layer
    `layer_period` before it: 0 unless an override names some layers only ("L0.*" keeps the
    first layer in bf16, which returns 1; "L31.*" of 32 layers the last, which returns 31). The
    layer fold and the footprint take the layers before it one by one, one layer for the rest."""
    if not formats.overrides:
        return 0
    ops = lower(model, "decode", 1, 1, 2, formats, num_layers=model.layers_of_each_kind).ops()
    suffixes = sorted({op.name.split(".", 1)[1] for op in ops if op.layer is not None})
    signature = [tuple(formats.weight_format(f"L{i}.{s}") for s in suffixes) for i in range(model.num_layers)]
    period = model.layer_period
    return 1 + max((i for i in range(model.num_layers - period) if signature[i] != signature[i + period]),
                   default=-1)


def per_layer_overrides(model: ModelConfig, formats: FormatPolicy) -> list[str]:
    """The override globs that give some layers other formats than the rest (L0.*, L3.q_proj)."""
    return [p for p, f in formats.overrides
            if formats_repeat_from(model, replace(formats, overrides=((p, f),)))]


def repeating_from(model: ModelConfig, formats: FormatPolicy) -> int:
    """The first layer from which the layers repeat every `layer_period` layers, in structure
    (an MoE model's leading dense layers come before it) and in weight formats."""
    return max(model.first_dense_layers if model.is_moe else 0, formats_repeat_from(model, formats))

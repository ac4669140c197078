"""The op DAG of one serving iteration: prefill chunks and decode sequences of
different lengths in one batch (continuous batching, chunked prefill).

Each sequence is (q_len, kv_len): q_len new tokens attending to kv_len keys, its
own new ones included (a decode sequence is (1, kv); a prefill chunk after a
cached prefix of p tokens is (q, p + q)). GEMMs, norms, RoPE and the KV append
run over the total tokens of the iteration, as a serving engine flattens its
batch. Attention is ragged: its FLOPs and bytes are summed sequence by sequence,
and it is one op per kernel an engine launches (vLLM: one varlen flash kernel for
the prefill chunks, one paged-attention kernel for the decode sequences), so that
a mapper charges one launch per kernel, not one per sequence.

The builder is sim.core.lowering's: a uniform batch lowered here has exactly the
ops, FLOPs and bytes of `lower()` (tests/test_mixed.py).
"""

from __future__ import annotations

from functools import lru_cache

from sim.core import graph as g
from sim.core.graph import OpGraph, TensorUse
from sim.core.lowering import FormatPolicy, _Builder, attention, embed, lm_head, mlp_block, qkv
from sim.core.model import ModelConfig

Seq = tuple[int, int]   # (q_len, kv_len)


@lru_cache(maxsize=512)
def lower_iteration(model: ModelConfig, seqs: tuple[Seq, ...], formats: FormatPolicy = FormatPolicy(),
                    flash_attention: bool = False, num_layers: int | None = None,
                    logits: int | None = None) -> OpGraph:
    """One engine iteration over `seqs`. `logits`: rows that reach the LM head
    (default one per sequence; a speculative verify step samples q_len rows).
    Cached per process: treat the graph as read-only."""
    seqs = tuple(seqs)
    if not seqs:
        raise ValueError("an iteration needs at least one sequence")
    for q, kv in seqs:
        if q < 1 or kv < q:
            raise ValueError(f"sequence (q_len {q}, kv_len {kv}): need 1 <= q_len <= kv_len")
    T = sum(q for q, _ in seqs)
    graph = OpGraph("mixed", len(seqs), max(q for q, _ in seqs), max(kv for _, kv in seqs))
    b = _Builder(graph, formats)
    x = embed(b, model, T)
    layers = model.num_layers if num_layers is None else num_layers
    groups = [(".decode", [s for s in seqs if s[0] == 1]), (".prefill", [s for s in seqs if s[0] > 1])]
    for i in range(layers):
        x = _layer(b, model, i, x, [grp for grp in groups if grp[1]], flash_attention)
    lm_head(b, model, x, len(seqs) if logits is None else logits)
    return graph


def _layer(b: _Builder, m: ModelConfig, i: int, x: TensorUse, groups: list[tuple[str, list[Seq]]],
           flash: bool) -> TensorUse:
    L, T = f"L{i}", x.shape[0]
    q, k, v = qkv(b, m, i, x)
    new_k, new_v = b.kv(f"{L}.k_cache", T, m.kv_dim), b.kv(f"{L}.v_cache", T, m.kv_dim)
    b.add(f"{L}.kv_append", g.KV_APPEND, 0, [k, v], [new_k, new_v], i, tokens=T, kv_dim=m.kv_dim)
    # One kernel after the other, as an engine issues them on one stream: where decode attention
    # runs beside the host (PIM stacks), the prefill kernel then waits for the stacks as a whole
    # instead of taking some of them while the others still work.
    last: tuple[str, ...] = ()
    for suffix, seqs in groups:
        q_tokens = sum(s[0] for s in seqs)
        keys = sum(m.keys_read(i, ql, kl) for ql, kl in seqs)   # a sliding window reads only its reach
        # A ragged batch: the tensors hold the group's rows back to back; their bytes are the
        # sums over its sequences. Dims give the count, the longest q_len (a mapper's "rows
        # per KV head" test) and the mean kv_len.
        op = attention(b, m, i, suffix, b.act(q.name, q_tokens, m.q_dim), b.kv(f"{L}.k_cache", keys, m.kv_dim),
                       b.kv(f"{L}.v_cache", keys, m.kv_dim), b.act(f"{L}.ctx", q_tokens, m.q_dim),
                       tuple((1, ql, kl) for ql, kl in seqs), (m.num_heads, sum(ql * m.keys_read(i, ql, kl) for ql, kl in seqs)),
                       flash, True, last, batch=len(seqs), heads=m.num_heads, kv_heads=m.num_kv_heads,
                       q_len=max(s[0] for s in seqs), kv_len=round(keys / len(seqs)), head_dim=m.head_dim)
        last = (op,)
    return mlp_block(b, m, i, x, b.act(f"{L}.ctx", T, m.q_dim))

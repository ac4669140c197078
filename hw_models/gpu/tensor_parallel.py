"""Megatron tensor parallelism as a graph transform: the graph one rank of a TP
group runs, plus the collectives it needs.

Which op splits how comes from hw_models.network.sharding.plan (op kinds and sharded
activations, never op names): column-parallel GEMMs reading a replicated input
(q/k/v, gate/up, the LM head by vocabulary columns), row-parallel GEMMs reading a
sharded one (o_proj, down_proj) followed by an all-reduce, a vocab-parallel
embedding followed by an all-reduce, the logits all-gathered, attention and the
element-wise ops between split by heads/columns, norms and residual adds replicated.

KV heads: with t ranks and KV KV-heads each rank holds max(1, KV / t) of them; when t
exceeds KV the heads are replicated (as vLLM and TensorRT-LLM do), so the K/V
projections and the KV cache of a rank are max(1, KV/t) / KV of the whole, not 1/t.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hw_models.network.sharding import COLUMN, EMBED_VOCAB, REPLICATED, ROW, OpSplit, plan
from sim.core.graph import Op, OpGraph, TensorUse
from sim.core.model import ModelConfig


@dataclass(frozen=True)
class Collective:
    """A collective after op `after` on `bytes` of its output (the whole buffer, per rank).
    `ranks`: the group it spans (0: the TP group); `before`: ops that wait for it
    without reading `after`'s output (an MoE dispatch precedes the expert GEMMs)."""

    name: str
    kind: str
    after: str
    bytes: float
    ranks: int = 0
    before: tuple[str, ...] = ()


def kv_fraction(model: ModelConfig, tp: int) -> float:
    return max(1, model.num_kv_heads // tp) / model.num_kv_heads


def _scale(t: TensorUse, frac: float) -> TensorUse:
    """A tensor's share `frac` along its last axis (rows of an (n, k) weight are axis 0)."""
    if frac == 1.0:
        return t
    axis = 0 if t.role == "weight" and len(t.shape) == 2 else len(t.shape) - 1
    shape = list(t.shape)
    shape[axis] = max(1, round(shape[axis] * frac))
    return TensorUse(t.name, t.role, tuple(shape), t.fmt, round(t.bytes * frac))


def _shard_op(op: Op, split: OpSplit, sharded: set[str], tp: int, kv_frac: float, kv_dim: int) -> Op:
    if split.mode in (REPLICATED, EMBED_VOCAB):
        return op
    dims = dict(op.shape)
    if split.mode == COLUMN:
        frac = kv_frac if dims.get("n") == kv_dim else 1.0 / tp
        reads = tuple(_scale(t, frac) if t.role == "weight" else t for t in op.reads)
        writes = tuple(_scale(t, frac) for t in op.writes)
        dims["n"] = max(1, round(dims["n"] * frac))
    elif split.mode == ROW:
        frac = 1.0 / tp
        # Row-parallel: the weight's columns (K) and the sharded input are split, the output is whole.
        reads = tuple(_k_share(t, tp) if t.role == "weight" else
                      (_scale(t, frac) if t.name in sharded else t) for t in op.reads)
        writes = op.writes
        dims["k"] = max(1, dims["k"] // tp)
    else:  # SPLIT by heads/columns; the KV cache by the KV heads a rank holds
        frac = 1.0 / tp
        reads = tuple(_scale(t, kv_frac if t.role == "kv" else frac) for t in op.reads)
        writes = tuple(_scale(t, kv_frac if t.role == "kv" else frac) for t in op.writes)
        for key in ("heads", "kv_heads", "hidden", "kv_dim"):   # KV heads: replicated past tp
            if key in dims:
                dims[key] = max(1, dims[key] // tp)
    return replace(op, flops=op.flops * frac, reads=reads, writes=writes, shape=tuple(dims.items()))


def _k_share(t: TensorUse, tp: int) -> TensorUse:
    """A row-parallel weight (n, k) keeps k / tp columns; a bias (n,) stays whole."""
    if len(t.shape) != 2:
        return t
    return TensorUse(t.name, t.role, (t.shape[0], max(1, t.shape[1] // tp)), t.fmt, round(t.bytes / tp))


def shard(graph: OpGraph, model: ModelConfig, tp: int,
          sharded_inputs: frozenset[str] = frozenset(),
          overrides: dict[str, OpSplit] | None = None) -> tuple[OpGraph, list[Collective]]:
    """The per-rank graph of a TP group of `tp` ranks and its collectives, in order.
    `sharded_inputs`: activations entering the graph already sharded; `overrides`:
    op name -> split for ops placed by the caller (network.sharding.plan)."""
    if tp == 1:
        return graph, []
    splits, sharded = plan(graph, sharded_inputs, overrides)
    kv_frac = kv_fraction(model, tp)
    ops = list(graph.ops())
    out = graph.with_ops(_shard_op(op, split, sharded, tp, kv_frac, model.kv_dim) for op, split in zip(ops, splits))
    colls = [Collective(f"{op.name}.{split.collective}", split.collective, op.name,
                        sum(t.bytes for t in op.writes if t.role == "activation"))
             for op, split in zip(ops, splits) if split.collective is not None]
    return out, colls


def weight_fraction(model: ModelConfig, tp: int) -> float:
    """Share of the dense weights one rank holds (the K/V projections replicate past KV heads)."""
    h, L = model.hidden_size, model.num_layers
    kv = 2 * h * model.kv_dim * L
    total = model.params()
    return ((total - kv) / tp + kv * kv_fraction(model, tp)) / total

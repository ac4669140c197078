"""Operators, tensors and the operator DAG.

The graph knows nothing of hardware: an op carries its FLOPs and the tensors it
reads and writes, each with a role and its bytes in its number format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Iterator

from sim.core.frozen import frozen

ROLES = ("weight", "kv", "activation")

# Op kinds. Mappers decide placement from these, never from names.
GEMM = "gemm"                  # activations x weight matrix
ATTN_SCORE = "attn_score"      # Q K^T against the KV cache
ATTN_CONTEXT = "attn_context"  # softmax(QK^T) V
ATTENTION = "attention"        # fused (flash) attention: score, softmax and context
SOFTMAX = "softmax"
NORM = "norm"
ELEMENTWISE = "elementwise"    # residual add, activation functions
ROPE = "rope"
KV_APPEND = "kv_append"
EMBED = "embed"
OP_KINDS = (GEMM, ATTN_SCORE, ATTN_CONTEXT, ATTENTION, SOFTMAX, NORM, ELEMENTWISE, ROPE, KV_APPEND, EMBED)


@frozen
class TensorUse:
    """One tensor read or written by an op. `name` is a stable identity
    ("L3.wq", "L3.k_cache", "L3.q") shared by every op that touches it."""

    name: str
    role: str
    shape: tuple[int, ...]
    fmt: str
    bytes: int

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


@frozen
class Op:
    name: str                       # "L12.q_proj"
    kind: str
    flops: float
    reads: tuple[TensorUse, ...]
    writes: tuple[TensorUse, ...]
    shape: tuple[tuple[str, int], ...] = ()  # named dims, e.g. (("m", 1), ("n", 4096), ("k", 4096))
    compute_format: str = "fp16"    # format the arithmetic is specified in (activations)
    layer: int | None = None

    # dims and bytes are read several times per op by every mapper: computed once (the op is frozen).
    # dims is shared by its readers, which only read it.
    @cached_property
    def dims(self) -> dict[str, int]:
        return dict(self.shape)

    @property
    def base_name(self) -> str:
        """Name without the layer prefix: "L12.q_proj" -> "q_proj"."""
        return self.name.split(".", 1)[1] if self.layer is not None else self.name

    @cached_property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.reads) + sum(t.bytes for t in self.writes)

    def bytes_by_role(self) -> dict[str, int]:
        out = dict.fromkeys(ROLES, 0)
        for t in (*self.reads, *self.writes):
            out[t.role] += t.bytes
        return out

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else math.inf


def column_share(op: Op, n_cols: int, name: str) -> Op:
    """The part of a GEMM that computes `n_cols` of its `n` output columns: the
    same input rows, that share of the weight rows (and bias) and of the output.
    Used to split one GEMM between two devices that each hold the weights."""
    if op.kind != GEMM:
        raise ValueError(f"{op.name}: column_share needs a GEMM, not {op.kind}")
    n = op.dims["n"]
    if not 0 < n_cols <= n:
        raise ValueError(f"{op.name}: {n_cols} of {n} columns")

    def share(t: TensorUse, axis: int) -> TensorUse:
        shape = t.shape[:axis] + (n_cols,) + t.shape[axis + 1:]
        return TensorUse(t.name, t.role, shape, t.fmt, round(t.bytes * n_cols / n))

    # Weights are (n, k) matrices or (n,) biases; outputs are (m, n).
    reads = tuple(share(t, 0) if t.role == "weight" else t for t in op.reads)
    writes = tuple(share(t, len(t.shape) - 1) for t in op.writes)
    shape = tuple((k, n_cols if k == "n" else v) for k, v in op.shape)
    return Op(name, op.kind, op.flops * n_cols / n, reads, writes, shape, op.compute_format, op.layer)


def batch_share(op: Op, n_seqs: int, name: str) -> Op:
    """The part of an attention op (dims `batch`) over `n_seqs` of its sequences: that share of its FLOPs and
    of every tensor (queries, KV cache, scores, context), as if its sequences were alike. Used to run some
    sequences' attention where their KV cache lies."""
    batch = op.dims.get("batch")
    if batch is None:
        raise ValueError(f"{op.name}: batch_share needs an op with a batch dimension, not {op.kind}")
    if not 0 < n_seqs <= batch:
        raise ValueError(f"{op.name}: {n_seqs} of {batch} sequences")
    f = n_seqs / batch

    def share(t: TensorUse) -> TensorUse:
        return TensorUse(t.name, t.role, t.shape, t.fmt, round(t.bytes * f))

    shape = tuple((k, n_seqs if k == "batch" else v) for k, v in op.shape)
    return Op(name, op.kind, op.flops * f, tuple(map(share, op.reads)), tuple(map(share, op.writes)), shape,
              op.compute_format, op.layer)


class Dag:
    """The few networkx.DiGraph operations an OpGraph uses (nodes with attributes in insertion order,
    predecessors in edge order), without importing networkx: its import was most of `sim`'s start-up
    (issue 30). to_networkx() gives the full graph for analysis."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict] = {}
        self._preds: dict[str, dict[str, None]] = {}

    def add_node(self, name: str, **attrs) -> None:
        self.nodes.setdefault(name, {}).update(attrs)
        self._preds.setdefault(name, {})

    def add_edge(self, u: str, v: str) -> None:
        for n in (u, v):
            if n not in self._preds:
                self.add_node(n)
        self._preds[v][u] = None

    def with_attr(self, key: str, values: Iterable) -> Dag:
        """The same nodes and edges, node i's `key` set to the i-th of `values` (one per node, in order)."""
        out = Dag()
        out.nodes = {n: {**attrs, key: v} for (n, attrs), v in zip(self.nodes.items(), values, strict=True)}
        out._preds = {n: dict(ps) for n, ps in self._preds.items()}
        return out

    def predecessors(self, name: str) -> Iterator[str]:
        return iter(self._preds[name])

    def number_of_nodes(self) -> int:
        return len(self.nodes)

    def to_networkx(self):
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(self.nodes.items())
        g.add_edges_from((u, v) for v, ps in self._preds.items() for u in ps)
        return g


@dataclass
class OpGraph:
    """A DAG of ops with data-dependency edges, in insertion order, which is a topological order."""

    phase: str                 # "prefill" or "decode"
    batch: int
    q_len: int
    kv_len: int
    dag: Dag = field(default_factory=Dag)

    def add(self, op: Op, deps: list[str]) -> None:
        self.dag.add_node(op.name, op=op)
        for d in deps:
            self.dag.add_edge(d, op.name)

    def with_ops(self, ops: Iterable[Op]) -> OpGraph:
        """This graph's DAG with its ops replaced, one per op in order, each keeping its name and deps (a rank's
        share of every op, say): the edges are copied, not re-added, which a multi-GPU step does for every op of
        every grid point."""
        return OpGraph(self.phase, self.batch, self.q_len, self.kv_len, self.dag.with_attr("op", ops))

    def ops(self) -> Iterator[Op]:
        for name in self.dag.nodes:
            yield self.dag.nodes[name]["op"]

    def op(self, name: str) -> Op:
        return self.dag.nodes[name]["op"]

    def deps(self, name: str) -> list[str]:
        return list(self.dag.predecessors(name))

    def __len__(self) -> int:
        return self.dag.number_of_nodes()

    @property
    def flops(self) -> float:
        return sum(o.flops for o in self.ops())

    def bytes_by_role(self) -> dict[str, int]:
        out = dict.fromkeys(ROLES, 0)
        for o in self.ops():
            for role, b in o.bytes_by_role().items():
                out[role] += b
        return out

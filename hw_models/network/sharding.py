"""Tensor-parallel splitting of an op graph across the t devices of a group,
Megatron-style: generic, used by every kind that splits layers (the gpu kind's
tensor and expert parallelism, the spatial kind's chip groups, whose collective
timing is hw_models.spatial.tp).

Which ops are split and where collectives go follows from the op kinds and from
which activations are sharded across the group, never from op names:

* EMBED: the table is split by vocabulary rows (each device holds 1/t of it); the
  device that owns a token's row looks it up (the whole op's time), the others
  contribute zeros, and an all-reduce leaves the row on every device.
* GEMM reading a replicated activation: column-parallel, split by output
  columns (q/k/v, gate/up, the LM head by vocabulary columns); its output is
  sharded. A sharded output that nothing reads (the logits) is all-gathered.
* GEMM reading a sharded activation: row-parallel, split by K (o_proj,
  down_proj, fc2: the GEMMs that feed a residual add); its partial sums are
  all-reduced, so its output is replicated. Where its output's only readers are
  elementwise ops that reduce it (write fewer bytes than they read: the MoE combine,
  a gate-weighted sum over each token's k experts), the sum is linear in the partial
  sums: every device combines its own, and the all-reduce moves the combined T x h
  after the combine, not the k times larger T x k x h before it (vLLM's FusedMoE
  all-reduces its final hidden states after moe_sum; an expert-parallel plan's
  combine does the same).
* Any other op reading a sharded activation or the KV cache (RoPE, KV append,
  attention, softmax, the MLP activation function) is split by heads or
  columns with its inputs: 1/t each, output sharded.
* Everything else (norms, residual adds) is replicated: every device does the
  whole op and keeps its whole (1-D) weights.

Every device of a group does identical work, so the group's stage time is one
device's time for its share plus its collectives, which run in the instruction
stream between the ops (serial: the next op waits for them).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.core import graph as g
from sim.core.graph import OpGraph

REPLICATED, COLUMN, ROW, SPLIT, EMBED_VOCAB = "replicated", "column", "row", "split", "embed"
ALL_REDUCE, ALL_GATHER = "all_reduce", "all_gather"


@dataclass(frozen=True)
class OpSplit:
    """How one op runs on the t devices of a group."""

    mode: str                    # one of REPLICATED, COLUMN, ROW, SPLIT, EMBED_VOCAB
    collective: str | None       # ALL_REDUCE / ALL_GATHER of its output after it, or None
    sharded_output: bool         # its activation outputs are split across the group

    def work_fraction(self, t: int) -> float:
        """Share of the op's work (FLOPs, bytes) each device does."""
        return 1.0 if self.mode in (REPLICATED, EMBED_VOCAB) else 1.0 / t

    def k_fraction(self, t: int) -> float:
        """Share of the GEMM reduction dimension each device holds (row-parallel)."""
        return 1.0 / t if self.mode == ROW else 1.0

    def copies(self, t: int) -> int:
        """How many copies of the op's resident bytes a group keeps."""
        return t if self.mode == REPLICATED else 1


@dataclass(frozen=True)
class CollectiveCost:
    """A collective in a group's stage: the tag of its engine task (op_records
    reads kind, bytes, bound, path, energy_j)."""

    name: str
    kind: str
    bytes: float
    duration_s: float
    bound: str = "link"
    path: str = "intra-group"
    energy_j: float = 0.0


def plan(graph: OpGraph, sharded_inputs: frozenset[str] = frozenset(),
         overrides: dict[str, OpSplit] | None = None) -> tuple[list[OpSplit], set[str]]:
    """Per op in graph order, how it splits; and the names of the sharded
    activation tensors. `sharded_inputs`: activations that enter the graph from
    outside it already sharded (a partial graph, e.g. one that leaves attention out).
    `overrides`: op name -> split, for ops a caller places itself (an MoE router kept whole)."""
    ops = list(graph.ops())
    read = {t.name for op in ops for t in op.reads if t.role == "activation"}
    readers: dict[str, list] = {}
    for op in ops:
        for t in op.reads:
            readers.setdefault(t.name, []).append(op)
    sharded: set[str] = set(sharded_inputs)
    partial: set[str] = set()   # row-parallel partial sums whose all-reduce waits for the op that reduces them
    out: list[OpSplit] = []
    for op in ops:
        acts = [t for t in op.reads if t.role == "activation"]
        in_sharded = any(t.name in sharded for t in acts)
        outs = [t.name for t in op.writes if t.role == "activation"]
        if overrides and op.name in overrides:
            s = overrides[op.name]
        elif op.kind == g.EMBED:
            s = OpSplit(EMBED_VOCAB, ALL_REDUCE, False)
        elif any(t.name in partial for t in acts):   # each device reduces its partial sums, then one all-reduce
            s = OpSplit(REPLICATED, ALL_REDUCE, False)
        elif op.kind == g.GEMM and in_sharded and _reduced_later(op, readers):
            s = OpSplit(ROW, None, False)
            partial.update(outs)
        elif op.kind == g.GEMM and in_sharded:
            s = OpSplit(ROW, ALL_REDUCE, False)
        elif op.kind == g.GEMM:
            # A sharded result nobody reads inside the step (the logits) is gathered for sampling.
            gather = ALL_GATHER if outs and not any(n in read for n in outs) else None
            s = OpSplit(COLUMN, gather, gather is None)
        elif in_sharded or any(t.role == "kv" for t in op.reads):
            s = OpSplit(SPLIT, None, True)
        else:
            s = OpSplit(REPLICATED, None, False)
        if s.sharded_output:
            sharded.update(outs)
        out.append(s)
    return _reduce_sums_once(ops, out, readers), sharded


def _reduce_sums_once(ops: list, splits: list[OpSplit], readers: dict[str, list]) -> list[OpSplit]:
    """Branches of one layer that one elementwise op sums (a MoE's routed and shared experts into the residual) are
    reduced once, after the sum, not each on its own: vLLM's FusedMoE under tensor parallelism reduces the shared
    experts' output with the routed ones' (vllm/model_executor/layers/fused_moe/layer.py
    must_reduce_shared_expert_outputs: "it is not required to reduce the shared_experts results immediately. Instead
    we reduce at the once at the end of the MoE op"); a parallelism trial found DeepSeek-V2-Lite paying a third
    all-reduce a layer. The one all-reduce is of the sum's size, each branch's. `readers`: plan's, tensor -> its ops."""
    by_output = {t.name: k for k, op in enumerate(ops) for t in op.writes if t.role == "activation"}
    out = list(splits)
    for k, op in enumerate(ops):
        if op.kind != g.ELEMENTWISE:
            continue
        # branches only this sum reads: the residual stream (read by the next norm too) is not one of them
        reduced = [j for j in (by_output.get(t.name) for t in op.reads if t.role == "activation")
                   if j is not None and out[j].collective == ALL_REDUCE and ops[j].layer == op.layer
                   and all(len(readers.get(t.name, ())) == 1 for t in ops[j].writes if t.role == "activation")]
        if len(reduced) > 1 and out[k].collective is None:
            for j in reduced:
                out[j] = OpSplit(out[j].mode, None, out[j].sharded_output)
            out[k] = OpSplit(out[k].mode, ALL_REDUCE, out[k].sharded_output)
    return out


def _reduced_later(op, readers: dict[str, list]) -> bool:
    """Whether every activation `op` writes is read only by elementwise ops that write fewer bytes than it holds
    (a weighted sum over its rows, as the MoE combine): its all-reduce can wait for theirs (module doc)."""
    outs = [t for t in op.writes if t.role == "activation"]
    return bool(outs) and all(
        readers.get(t.name) and all(r.kind == g.ELEMENTWISE and sum(w.bytes for w in r.writes) < t.bytes
                                    for r in readers[t.name]) for t in outs)

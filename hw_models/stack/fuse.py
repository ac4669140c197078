"""GEMMs a software stack runs as one kernel (hw_models.stack.spec `fuse`).

vLLM and TensorRT-LLM load q/k/v (and gate/up) weights as one matrix and run one
GEMM whose N is the members' widths summed (vLLM QKVParallelLinear and
MergedColumnParallelLinear; TensorRT-LLM's fused QKV). The lowering keeps the
members apart (sim.core.lowering); under such a stack the GPU stream costs the
group's first member as that one GEMM (one floor, one launch, the larger N on the
wave and efficiency curves) and the other members as fused into it (no time).
"""

from __future__ import annotations

from hw_models.op_cost import OpCost
from sim.core import graph as g
from sim.core.errors import ConfigError
from sim.core.graph import Op, OpGraph, TensorUse


def _merge(name: str, role: str, parts: list[TensorUse], shape: tuple[int, ...]) -> TensorUse:
    return TensorUse(name, role, shape, parts[0].fmt, sum(t.bytes for t in parts))


def fused_gemm(ops: list[Op], name: str) -> Op:
    """One GEMM computing `ops`' output columns side by side: they read the same input
    (M x K), so it is read once; weights, biases and outputs are concatenated along N."""
    first = ops[0]
    m, k = first.dims["m"], first.dims["k"]
    for op in ops:
        if op.kind != g.GEMM or op.dims.get("m") != m or op.dims.get("k") != k or op.reads[0] != first.reads[0]:
            raise ConfigError(f"fuse {name}: {op.name} is not a GEMM over {first.name}'s input (M {m}, K {k})")
    n = sum(op.dims["n"] for op in ops)
    weights = [t for op in ops for t in op.reads[1:] if t.role == "weight" and len(t.shape) > 1]
    biases = [t for op in ops for t in op.reads[1:] if t.role == "weight" and len(t.shape) == 1]
    reads = [first.reads[0], _merge(f"{name}.w", "weight", weights, (n, k))]
    if biases:
        reads.append(_merge(f"{name}.b", "weight", biases, (n,)))
    out = _merge(f"{name}.out", first.writes[0].role, [op.writes[0] for op in ops], (m, n))
    return Op(name, g.GEMM, sum(op.flops for op in ops), tuple(reads), (out,), (("m", m), ("n", n), ("k", k)),
              first.compute_format, first.layer)


def fuse_groups(graph: OpGraph, fuse: dict[str, list[str]]) -> dict[str, Op | str]:
    """Member op name -> the fused GEMM (for a group's first member) or the name of the
    fused GEMM it joins (the others). Members are matched on the last part of an op's
    base name ("L3.k_proj", "L3.e2.k_proj"), grouped by what precedes it; a group with a
    member missing from the graph is left unfused."""
    out: dict[str, Op | str] = {}
    if not fuse:
        return out
    by_prefix: dict[tuple[str, str], dict[str, Op]] = {}
    member_of = {m: group for group, members in fuse.items() for m in members}
    for op in graph.ops():
        prefix, _, last = op.name.rpartition(".")
        if op.kind == g.GEMM and last in member_of:
            by_prefix.setdefault((prefix, member_of[last]), {})[last] = op
    for (prefix, group), found in by_prefix.items():
        if len(found) != len(fuse[group]):
            continue
        ops = [found[m] for m in fuse[group]]
        name = f"{prefix}.{group}" if prefix else group
        out[ops[0].name] = fused_gemm(ops, name)
        out.update({op.name: name for op in ops[1:]})
    return out


def fused_away(op: Op, unit_name: str, into: str) -> OpCost:
    """The cost of a member another member's fused GEMM computes: nothing of its own."""
    return OpCost(op, unit_name, 0.0, 0.0, 0.0, 0.0, "overhead", f"fused into {into}", 0.0)


def fused_aliases(fused: dict[str, Op | str]) -> dict[str, str]:
    """Leading member's name -> its fused GEMM's name (the task that runs it)."""
    return {name: hit.name for name, hit in fused.items() if isinstance(hit, Op)}

"""Decode schedules that overlap the host GPU with the PIM stacks, written as
rewrites of the step's op graph that the PIM mapper then plans on the engine.

Head-group pipelining (AttAcc's `--pipeopt`, scale-snu/attacc_simulator
src/system.py `_pipeline`): each layer's attention block (Q/K/V projections,
RoPE, KV append, attention, output projection) runs as `groups` slices of
heads. The host projects head group g+1 while PIM runs the attention of group
g, and projects group g's output while PIM runs g+1. The engine finds the
overlap; no formula does. The slices are the lowering of the same model with
1/groups of the heads (same head_dim), so bytes and FLOPs are exact. The output
projection of a group is a K-slice of W_o whose partial result accumulates
into the layer output.

Launches: the block runs as resident kernels that take the head groups in turn
(group-major: q, k, v, RoPE, KV append of group 0, then of group 1, ...), each
publishing a group's output as it finishes, like a persistent fused kernel; the
PIM attention likewise takes its groups in turn. Each op type pays its launch
and its DRAM/tile ramp once, at group 0; the slices of later groups are returned
as `continuations` and pay neither (the pipes stay full). A single fused kernel
for the whole block would pay one launch instead of five: this is the
conservative side. AttAcc's simulator charges no launches at all.

GEMM sharing (AttAcc's `--ffopt`, `_ff_parallel`, which shares the FFN only):
every decode GEMM is split by output columns between the host and the PIM
stacks, which hold the same weights, in proportion to their predicted speeds,
where the split beats the op placed whole. PIM re-reads the weights once per
input row and needs the input in every pseudo-channel, so its share shrinks
with batch. A GEMM slice of a pipelined head group may also be split; its PIM
part then queues behind attention on the stacks, which the engine resolves.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from sim.core import graph as g
from sim.core.graph import Op, OpGraph

ATTENTION_FAMILY = (g.ATTN_SCORE, g.ATTN_CONTEXT, g.ATTENTION, g.SOFTMAX)
# Suffixes of a shared GEMM's two parts. Not "@...": reports merge "@stackN" pieces of one
# task into one record, but the two parts are separate tasks on separate resources.
HOST, PIM = "~host", "~pim"


def attention_blocks(graph: OpGraph) -> dict[int, list[Op]]:
    """Per layer, the ops between its first norm and its first elementwise op
    (the attention residual): the projections, RoPE, KV append, attention, o_proj."""
    by_layer: dict[int, list[Op]] = {}
    for op in graph.ops():
        if op.layer is not None:
            by_layer.setdefault(op.layer, []).append(op)
    blocks = {}
    for layer, ops in by_layer.items():
        kinds = [o.kind for o in ops]
        start = kinds.index(g.NORM) + 1
        end = kinds.index(g.ELEMENTWISE, start)
        blocks[layer] = ops[start:end]
    return blocks


def pipeline_heads(full: OpGraph, head_slice: OpGraph, groups: int) -> tuple[OpGraph, dict[str, int]]:
    """`full` with each layer's attention block replaced by `groups` head slices
    taken from `head_slice` (the same step lowered with 1/groups of the heads).

    Insertion order is the host's program order: every group's projections,
    then the attention of every group, then every group's output projection.
    Returns the graph and the head group of every slice (0 for the first)."""
    full_blocks, slice_blocks = attention_blocks(full), attention_blocks(head_slice)
    first = {ops[0].name for ops in full_blocks.values()}
    in_block = {o.name for ops in full_blocks.values() for o in ops}
    names: dict[str, list[str]] = {}            # op of `full` -> its ops in the new graph
    out = OpGraph(full.phase, full.batch, full.q_len, full.kv_len)
    group_of: dict[str, int] = {}
    for op in full.ops():
        if op.name not in in_block:
            out.add(op, [n for d in full.deps(op.name) for n in names[d]])
            names[op.name] = [op.name]
            continue
        if op.name not in first:
            continue                            # emitted with its block
        block = slice_blocks[op.layer]
        local = {o.name for o in block}
        attn = [i for i, o in enumerate(block) if o.kind in ATTENTION_FAMILY]
        stages = (block[:attn[0]], block[attn[0]:attn[-1] + 1], block[attn[-1] + 1:])
        for stage in stages:
            for k in range(groups):
                for o in stage:
                    name = f"{o.name}.h{k}"
                    deps = [n for d in head_slice.deps(o.name)
                            for n in ([f"{d}.h{k}"] if d in local else names[d])]
                    out.add(replace(o, name=name), deps)
                    names.setdefault(o.name, []).append(name)
                    group_of[name] = k
    return out, group_of


# How an op splits between host and PIM: along which dimension, by which cut.
CUTS = {g.GEMM: ("n", g.column_share), **{k: ("batch", g.batch_share) for k in ATTENTION_FAMILY if k != g.SOFTMAX}}


def split_units(op: Op) -> int:
    """What `op` splits into between host and PIM: a GEMM's output columns, an attention op's sequences (0: none)."""
    return op.dims.get(CUTS[op.kind][0], 0) if op.kind in CUTS else 0


def share_ops(graph: OpGraph, pim_units: Callable[[Op], int], kinds: tuple[str, ...] = (g.GEMM,)
              ) -> tuple[OpGraph, dict[str, str]]:
    """`graph` with every op of `kinds` split into a host part and a PIM part: a GEMM by output columns, an
    attention op by sequences; `pim_units(op)` says how many go to PIM (0: no split).
    Returns the graph and the forced placement of each part."""
    out = OpGraph(graph.phase, graph.batch, graph.q_len, graph.kv_len)
    names: dict[str, list[str]] = {}
    forced: dict[str, str] = {}
    for op in graph.ops():
        deps = [n for d in graph.deps(op.name) for n in names[d]]
        n_pim = pim_units(op) if op.kind in kinds else 0
        if not n_pim:
            out.add(op, deps)
            names[op.name] = [op.name]
            continue
        total, cut = split_units(op), CUTS[op.kind][1]
        parts = [(PIM, n_pim)] + ([(HOST, total - n_pim)] if n_pim < total else [])
        names[op.name] = []
        for suffix, units in parts:
            part = cut(op, units, op.name + suffix)
            out.add(part, deps)
            names[op.name].append(part.name)
            forced[part.name] = "pim" if suffix == PIM else "host"
    return out, forced

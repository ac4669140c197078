"""Which data the PIM units reach: an HBM-PIM stack mixes dies with PIM units and dies without (Aquabolt-XL:
four 4 Gb PIM dies beside four 8 Gb plain ones, `pim.pim_capacity_bytes_per_stack`), and a PIM unit computes
only on the banks of its own die. When the ops a step places on PIM read more weights and KV cache than the PIM
dies hold, the rest lies in plain dies and runs on the host, which reads every die through the pins.

The placement is the one that saves a step the most time: the data whose ops gain the most time per byte on PIM
(host time - PIM time, over the op's weight or KV bytes) first, whole ops. The first op that no longer fits whole
is split: a GEMM by output columns (the part whose weight rows fit runs on PIM, the rest on the host, as AttAcc's
GEMM sharing splits a GEMM), an attention op by sequences (those whose KV fits run on PIM, as if every sequence's
KV were alike); every op after it runs on the host. The placement is the same in every layer, so a step's layers
stay alike (the engine folds identical layers): a layer op counts its bytes once per layer of the model. It is
decided for each step, as if a runtime re-placed the weights and KV cache between steps: the best a placement can
do, an upper bound on a runtime that places weights at load time and a request's KV when it is admitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from hw_models.pim.pipeline import CUTS, share_ops, split_units
from hw_models.pim.plan import Allocation, Decision, Schedule
from sim.core.graph import Op

# Why an op runs on the host although PIM would run it: the decision's `why`.
BEYOND_REACH = "data in dies without PIM units (pim.pim_capacity_bytes_per_stack)"
SPLIT = {"pim": "PIM reach: the part whose data lies in PIM dies",
         "host": "PIM reach: the part whose data lies in dies without PIM units"}


def data_bytes(op: Op) -> int:
    """The bytes a PIM unit must find in its own die: the op's weights and KV cache (inputs are written in)."""
    return sum(t.bytes for t in op.reads if t.role in ("weight", "kv"))


@dataclass
class _Item:
    """One op of the model (a layer op stands for that op in every layer): its bytes and gain on PIM."""
    key: str
    kind: str
    bytes_by_chain: dict[int, float] = field(default_factory=dict)   # over the whole model, per sub-batch chain
    saved_s: float = 0.0        # host - PIM time, over the whole model and every chain
    units: int = 0              # a GEMM's output columns, an attention op's sequences, over the chains (0: whole)
    units_by_chain: dict[int, int] = field(default_factory=dict)
    weights: bool = False       # reads weights, which the chains share: counted once, not per chain
    whole: bool = False         # a part GEMM sharing cut already: placed whole or not at all

    @property
    def bytes(self) -> float:
        per = self.bytes_by_chain.values()
        return max(per) if self.weights else sum(per)


def _layers(ops: list[Op]) -> int:
    return len({op.layer for op in ops if op.layer is not None})


def allocate(chains: list[list[tuple[Decision, str]]], reach_bytes: float, num_layers: int,
             parts: frozenset[str] = frozenset()) -> Allocation:
    """Fill `reach_bytes` from the PIM-placed decisions of each op chain (one per sub-batch; each decision with its
    op's key), greedily by time saved per byte. A layer op's bytes and time count once per layer of the model: the
    layers in the step's graph stand for all `num_layers` (exact where the layers are alike; a model whose layers
    differ, a window on some or dense MLPs before MoE ones, is counted by the layers the folded graph holds). The
    chains share the weights and each holds its own sequences' KV. `parts`: ops GEMM sharing cut already, placed
    whole or not at all."""
    items: dict[str, _Item] = {}
    for c, decisions in enumerate(chains):
        scale = num_layers / max(_layers([d.op for d, _ in decisions]), 1)
        for d, key in decisions:
            b = data_bytes(d.op)
            if d.where != "pim" or not b:
                continue
            it = items.setdefault(key, _Item(key, d.op.kind))
            per = scale if d.op.layer is not None else 1.0
            it.bytes_by_chain[c] = it.bytes_by_chain.get(c, 0.0) + b * per
            it.saved_s += (d.host.duration_s - (d.pim_s or 0.0)) * per
            it.weights |= any(t.role == "weight" for t in d.op.reads)
            it.whole |= d.op.name in parts
            it.units_by_chain.setdefault(c, split_units(d.op))   # the first layer's op of the key (head slices alike)
    for it in items.values():
        it.units = 0 if it.whole or 0 in it.units_by_chain.values() else (
            max(it.units_by_chain.values()) if it.weights else sum(it.units_by_chain.values()))
    placed = sum(it.bytes for it in items.values())
    if placed <= reach_bytes:
        return Allocation(reach_bytes, placed)
    order = sorted(items.values(), key=lambda it: -it.saved_s / it.bytes)   # stable: graph order on ties
    left, host, split = reach_bytes, set(), None
    for it in order:
        if it.bytes <= left:
            left -= it.bytes
            continue
        n_pim = int(left / it.bytes * it.units)
        if split is None and n_pim >= 1:   # the marginal op: the part that fits, and the reach is full
            split, left = (it.key, n_pim, it.units), 0.0
        else:                              # whole or too small a part: the host, and the next may still fit
            host.add(it.key)
    moved = sum(items[k].bytes for k in host) + (items[split[0]].bytes * (1 - split[1] / split[2]) if split else 0.0)
    return Allocation(reach_bytes, placed, frozenset(host), split, moved)


def apply(s: Schedule, alloc: Allocation, key: Callable[[Op], str]) -> Schedule:
    """`s` with `alloc` in force: the split GEMM's parts and the ops beyond reach placed (`Schedule.forced`)."""
    if alloc.fits:
        return replace(s, reach=alloc)
    graph, forced, why, continuations = s.graph, dict(s.forced), dict(s.why), s.continuations
    if alloc.split:
        k, n_pim, n_units = alloc.split

        def pim_units(op: Op) -> int:   # this op's share of the split's units (a chain holds some sequences)
            if key(op) != k or op.name in s.forced:
                return 0
            return min(split_units(op), max(1, round(n_pim * split_units(op) / n_units)))
        graph, parts = share_ops(graph, pim_units, tuple(CUTS))
        forced |= parts
        why |= {name: SPLIT[where] for name, where in parts.items()}
        # both parts of a later head group's slice continue their side's kernel (as GEMM sharing's do)
        continuations |= {n for n in parts if n.rsplit("~", 1)[0] in continuations}
    for op in graph.ops():
        if forced.get(op.name, "pim") == "pim" and key(op) in alloc.host:
            forced[op.name], why[op.name] = "host", BEYOND_REACH
    return Schedule(graph, forced, continuations, s.head_group, why, alloc)

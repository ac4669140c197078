"""Mixture-of-Experts layers over several GPUs: expert parallelism (EP) and tensor
parallelism (TP) of the expert FFNs. One rank's graph plus its collectives.

Plans (`parallel: {tp, ep}`, ep a multiple of tp; g = ep / tp attention groups):

* ep = 1, tp = n: every expert's FFN is split n ways as a dense MLP is (gate/up by
  columns, down by rows, then an all-reduce); the router and top-k are kept whole on
  every rank (replicated), so every rank routes every token the same way.
* tp = ep = n (g = 1): attention TP as for a dense model, so the hidden states are on
  every rank and need no dispatch; each rank runs its E/n experts over the tokens
  routed to them and an all-reduce after the combine sums the ranks' partial outputs
  (vLLM's TP with expert parallelism, all-reduce backend).
* ep = g x tp, g > 1: data-parallel attention (DeepSpeed-MoE, SGLang's DP attention,
  vLLM's `--data-parallel-size g --tensor-parallel-size tp --enable-expert-parallel`):
  g groups of tp ranks, each running the attention and dense ops of its own sequences
  (its own KV cache) tensor-parallel over its tp ranks. At each MoE layer the group's
  hidden states are on all its tp ranks; each rank takes 1/tp of the group's tokens
  (vLLM's sequence-parallel MoE: `sequence_parallel_chunk` before the experts, no
  communication), routes them, and an all-to-all *dispatch* over the ep ranks sends
  each kept token-expert assignment's hidden vector to the rank that holds the expert
  (E/ep experts per rank, contiguous); the rank runs its experts over the tokens the
  whole EP group routed to them, an all-to-all *combine* returns the outputs, and an
  all-gather over the tp ranks of the group (`tensor_model_parallel_all_gather`)
  rebuilds the group's hidden states for the next layer. tp = 1 has no chunk and no
  all-gather. A copy per assignment (Megatron's all-to-all token dispatcher; no
  de-duplication of a token sent to two experts on the same rank).

The simulated rank is the busiest one (most kept assignments under the workload's
load model, sim.core.moe): every rank waits for it at the combine. Under uniform
routing all ranks are equal.

All-to-all bytes. hw_models.network.collectives prices an all-to-all of S bytes per
rank as (n-1) alpha + (n-1)/n S / B: a rank keeps 1/n of its buffer and exchanges the
rest. The dispatch sends A_local = (tokens of the rank's chunk) x k assignments (after
capacity) and the busiest rank receives A_r = its experts' kept assignments from the
whole group, of which (n-1)/n come from peers; the time is set by the larger, so
S = max(A_local, A_r) x (bytes of one hidden vector). Uniform: A_local = A_r = T k / ep
(T the EP group's tokens). A group with more tokens than the others (a serving
iteration's straggler) sends more: A_local of its chunk sets S.

The MoE ops are recognised by the names sim.core.lowering gives them (ROUTER,
EXPERT_OPS, COMBINE below); tests/test_expert_parallel.py fails if those change.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from hw_models.gpu.tensor_parallel import Collective, shard
from hw_models.network.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL
from hw_models.network.sharding import REPLICATED, OpSplit
from sim.core.formats import get_format
from sim.core.graph import Op, OpGraph, TensorUse
from sim.core.lowering import EXPERT_GEMMS, FormatPolicy
from sim.core.model import ModelConfig
from sim.core.moe import ExpertLoad, Routing, route

ROUTER, TOPK, COMBINE = "router", "topk", "moe_combine"
EXPERT_OPS = (*EXPERT_GEMMS, "expert_act")   # the grouped GEMMs and the activation between them
_KEEP = OpSplit(REPLICATED, None, False)


def busiest_rank(model: ModelConfig, tokens: float, ep: int) -> Routing:
    """The expected routing of `tokens` tokens restricted to the EP rank with the most
    kept assignments (experts placed contiguously, E / ep per rank)."""
    return _busiest(model.num_experts, model.experts_per_token, model.expert_load, round(tokens), ep)


@lru_cache(maxsize=1024)
def _busiest(num_experts: int, top_k: int, load: ExpertLoad, tokens: int, ep: int) -> Routing:
    """busiest_rank by the hashable figures it depends on: a serving run asks it of every grid point's layers."""
    return max(route(num_experts, top_k, load, tokens).ranks(ep), key=lambda x: x.assignments)


def _resize(t: TensorUse, frac: float, axis: int) -> TensorUse:
    shape = list(t.shape)
    shape[axis] = max(1, round(shape[axis] * frac))
    return TensorUse(t.name, t.role, tuple(shape), t.fmt, round(t.bytes * frac))


def _rank_expert_op(op: Op, w_frac: float, a_frac: float) -> Op:
    """An expert op restricted to one rank's experts: weights scale with the experts it
    touches, activations and FLOPs with the assignments it runs."""
    down = op.base_name == "expert_down"

    def scaled(t: TensorUse) -> TensorUse:
        if t.role == "weight":
            return _resize(t, w_frac, 1 if down else 0)
        return _resize(t, a_frac, 0)

    dims = dict(op.shape)
    if "n" in dims:
        dims["n"] = max(1, round(dims["n"] * w_frac))
        dims["m"] = max(1, round(dims["m"] * a_frac / w_frac)) if w_frac else dims["m"]
    if "tokens" in dims:
        dims["tokens"] = max(1, round(dims["tokens"] * a_frac))
    return replace(op, flops=op.flops * a_frac, reads=tuple(map(scaled, op.reads)),
                   writes=tuple(map(scaled, op.writes)), shape=tuple(dims.items()))


def restrict_experts(graph: OpGraph, model: ModelConfig, ep: int, total: int) -> OpGraph:
    """`graph` with each MoE layer's expert ops cut to the busiest rank's experts, over
    the `total` tokens the whole EP group routes per layer."""
    mine = busiest_rank(model, total, ep)
    touched, assignments = mine.experts_touched, mine.assignments

    def restricted(op: Op) -> Op:
        if op.base_name not in EXPERT_OPS:
            return op
        here = route(model.num_experts, model.experts_per_token, model.expert_load, _tokens(graph, op))
        return _rank_expert_op(op, touched / here.experts_touched, assignments / here.assignments)

    return graph.with_ops(map(restricted, graph.ops()))


def _tokens(graph: OpGraph, op: Op) -> int:
    """Tokens the layer of `op` routes (its top-k op's `tokens`)."""
    return graph.op(f"L{op.layer}.{TOPK}").dims["tokens"]


def _moe_layers(graph: OpGraph) -> list[int]:
    return sorted({op.layer for op in graph.ops() if op.base_name == TOPK})


def _row_bytes(graph: OpGraph, layer: int) -> float:
    """Bytes of one token's hidden vector as the expert GEMMs read it."""
    x = next(t for t in graph.op(f"L{layer}.expert_gate").reads if t.role == "activation")
    return x.bytes / x.shape[0]


def all_to_all_bytes(graph: OpGraph, model: ModelConfig, ep: int, layer: int, total: int, tp: int = 1) -> float:
    """S of the dispatch (and the combine) of `layer`: the larger of what the rank
    sends (its 1/tp chunk of the group's tokens) and what the busiest rank receives
    of the EP group's `total` tokens (module doc)."""
    T = graph.op(f"L{layer}.{TOPK}").dims["tokens"]
    sent = route(model.num_experts, model.experts_per_token, model.expert_load, -(-T // tp)).assignments
    received = busiest_rank(model, total, ep).assignments
    return max(sent, received) * _row_bytes(graph, layer)


def _chunk(graph: OpGraph, names: set[str], frac: float) -> OpGraph:
    """`graph` with the ops `names` over `frac` of their tokens (a rank's sequence-parallel chunk);
    weights whole (the router), rows and FLOPs scaled."""
    return graph.with_ops(_rank_expert_op(op, 1.0, frac) if op.name in names else op for op in graph.ops())


def moe_rank(graph: OpGraph, model: ModelConfig, tp: int, ep: int,
             total: int | None = None) -> tuple[OpGraph, list[Collective]]:
    """One rank's graph of an MoE model under (tp, ep), with its collectives in order.
    `graph` is the rank's attention group's own sequences: the whole batch when
    tp = ep, B / (ep / tp) when ep > tp. `total`: tokens the whole EP group routes per
    MoE layer (default: the group's own times ep / tp, every group alike)."""
    layers = _moe_layers(graph)
    keep_router = {f"L{i}.{ROUTER}": _KEEP for i in layers}
    if ep == 1:
        return shard(graph, model, tp, overrides=keep_router)
    groups = ep // tp
    own = _tokens(graph, graph.op(f"L{layers[0]}.{TOPK}")) if layers else 0
    total = own * groups if total is None else total
    local = restrict_experts(graph, model, ep, total)
    keep = dict(keep_router)
    for i in layers:
        keep.update({f"L{i}.{name}": _KEEP for name in (TOPK, *EXPERT_OPS)})
        keep[f"L{i}.{COMBINE}"] = OpSplit(REPLICATED, ALL_REDUCE if groups == 1 else None, False)
    if groups == 1:   # tp == ep: experts local, tokens replicated; all-reduce the combined output
        return shard(local, model, tp, overrides=keep)
    if tp > 1:   # the busiest rank's chunk: ceil(own / tp) of the group's tokens
        local = _chunk(local, {f"L{i}.{name}" for i in layers for name in (ROUTER, TOPK, COMBINE)},
                       -(-own // tp) / own)
    rank, colls = shard(local, model, tp, overrides=keep)
    for i in layers:
        S = all_to_all_bytes(graph, model, ep, i, total, tp)
        colls.append(Collective(f"L{i}.dispatch", ALL_TO_ALL, f"L{i}.{TOPK}", S, ep,
                                (f"L{i}.expert_gate", f"L{i}.expert_up")))
        colls.append(Collective(f"L{i}.combine", ALL_TO_ALL, f"L{i}.expert_down", S, ep))
        if tp > 1:   # the group's tokens back on each of its ranks
            colls.append(Collective(f"L{i}.gather", ALL_GATHER, f"L{i}.{COMBINE}", own * _row_bytes(graph, i), tp))
    return rank, colls


def expert_weight_bytes(model: ModelConfig, formats: FormatPolicy) -> float:
    """Bytes of every routed expert's gate, up and down matrices over the MoE layers, each in its
    layer's format (formats.overrides may name some layers' experts)."""
    if not model.is_moe:
        return 0.0
    rows, h = model.num_experts * model.expert_intermediate, model.hidden_size
    shapes = (("expert_gate", (rows, h)), ("expert_up", (rows, h)), ("expert_down", (h, rows)))
    return float(sum(get_format(formats.weight_format(f"L{i}.{name}")).storage_bytes(shape)
                     for i in range(model.first_dense_layers, model.num_layers) for name, shape in shapes))

"""Tensor-parallel splitting of layers across the chips of a pipeline group
(spatial.tensor_parallel = t > 1), Megatron-style.

Chips form groups of t; the layer pipeline runs over the groups. Which ops are
split and where collectives go follows from the op kinds and from which
activations are sharded across the group, never from op names:

* EMBED: the table is split by vocabulary rows (each chip holds 1/t of it); the
  chip that owns a token's row looks it up (the whole op's time), the others
  contribute zeros, and an all-reduce leaves the row on every chip.
* GEMM reading a replicated activation: column-parallel, split by output
  columns (q/k/v, gate/up, the LM head by vocabulary columns); its output is
  sharded. A sharded output that nothing reads (the logits) is all-gathered.
* GEMM reading a sharded activation: row-parallel, split by K (o_proj,
  down_proj, fc2: the GEMMs that feed a residual add); its partial sums are
  all-reduced, so its output is replicated.
* Any other op reading a sharded activation or the KV cache (RoPE, KV append,
  attention, softmax, the MLP activation function) is split by heads or
  columns with its inputs: 1/t each, output sharded.
* Everything else (norms, residual adds) is replicated: every chip does the
  whole op and keeps its whole (1-D) weights.

Every chip of a group does identical work, so the group's stage time is one
chip's time for its share plus its collectives, which run in the instruction
stream between the ops (serial: the next op waits for them).

Collectives, in an all-to-all group where a chip bonds `links_per_peer` links
to each of its t - 1 peers and all peers exchange at once:
* all-gather of B bytes: each chip sends its B/t to every peer:
  latency + (B/t) / (links_per_peer x link bandwidth);
* all-reduce of B bytes: the cheaper of a direct reduce-scatter then an
  all-gather, 2 x (latency + (B/t) / (links_per_peer x link bandwidth)), and a
  one-hop exchange, every chip sending its whole partial B to each peer and
  reducing locally, latency + B / (links_per_peer x link bandwidth). The one-hop
  form is how ISCA 2022 (Abts et al., section on all-reduce) counts a fully
  connected node's level of its hierarchical all-reduce: one hop per level,
  3 x 722 ns across a 256-TSP Dragonfly. It wins when B is small (always at t = 2).
Link bandwidth here is payload bandwidth (links.payload_fraction).
"""

from __future__ import annotations

from dataclasses import dataclass

from hw_models.spatial.config import SpatialConfig
from sim.core import graph as g
from sim.core.errors import ConfigError
from sim.core.graph import OpGraph
from sim.core.model import ModelConfig

REPLICATED, COLUMN, ROW, SPLIT, EMBED_VOCAB = "replicated", "column", "row", "split", "embed"
ALL_REDUCE, ALL_GATHER = "all_reduce", "all_gather"


@dataclass(frozen=True)
class OpSplit:
    """How one op runs on the t chips of a group."""

    mode: str                    # one of REPLICATED, COLUMN, ROW, SPLIT, EMBED_VOCAB
    collective: str | None       # ALL_REDUCE / ALL_GATHER of its output after it, or None
    sharded_output: bool         # its activation outputs are split across the group

    def work_fraction(self, t: int) -> float:
        """Share of the op's work (FLOPs, bytes) each chip does."""
        return 1.0 if self.mode in (REPLICATED, EMBED_VOCAB) else 1.0 / t

    def k_fraction(self, t: int) -> float:
        """Share of the GEMM reduction dimension each chip holds (row-parallel)."""
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
    sharded: set[str] = set(sharded_inputs)
    out: list[OpSplit] = []
    for op in ops:
        acts = [t for t in op.reads if t.role == "activation"]
        in_sharded = any(t.name in sharded for t in acts)
        outs = [t.name for t in op.writes if t.role == "activation"]
        if overrides and op.name in overrides:
            s = overrides[op.name]
        elif op.kind == g.EMBED:
            s = OpSplit(EMBED_VOCAB, ALL_REDUCE, False)
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
    return out, sharded


def check_model(model: ModelConfig, cfg: SpatialConfig, src: str) -> None:
    """Attention splits by heads: t must divide the query and the KV heads
    (KV heads are not replicated across a group in this model)."""
    t = cfg.tensor_parallel
    if t > 1 and (model.num_heads % t or model.num_kv_heads % t):
        raise ConfigError(f"{src}: spatial.tensor_parallel: {t} does not divide {model.name}'s "
                          f"{model.num_heads} attention heads and {model.num_kv_heads} KV heads")


def _peer_exchange_s(cfg: SpatialConfig, nbytes_per_peer: float) -> float:
    """Every chip sends `nbytes_per_peer` to each of its t - 1 peers at once."""
    bw = cfg.tensor_parallel_links_per_peer * cfg.link_payload_bytes_per_s
    return cfg.links.latency_s + nbytes_per_peer / bw


def all_gather_s(cfg: SpatialConfig, nbytes: float) -> float:
    return _peer_exchange_s(cfg, nbytes / cfg.tensor_parallel)


def all_reduce_s(cfg: SpatialConfig, nbytes: float) -> float:
    """In an all-to-all group: reduce-scatter + all-gather (two hops of B/t),
    or one hop of the whole B, whichever is sooner (a static schedule picks it)."""
    return min(2 * all_gather_s(cfg, nbytes), _peer_exchange_s(cfg, nbytes))


def collective_s(cfg: SpatialConfig, kind: str, nbytes: float) -> float:
    return all_reduce_s(cfg, nbytes) if kind == ALL_REDUCE else all_gather_s(cfg, nbytes)

"""Tensor parallelism on a spatial machine (spatial.tensor_parallel = t > 1): the
chips of a pipeline group split each op as hw_models.network.sharding.plan says;
this module checks the model divides and times the group's collectives.

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

from hw_models.network.sharding import ALL_REDUCE
from hw_models.spatial.config import SpatialConfig
from sim.core.errors import ConfigError
from sim.core.model import ModelConfig


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


def collective_wire_bytes(cfg: SpatialConfig, kind: str, nbytes: float) -> float:
    """Payload bytes the whole group puts on its links for the collective, in the form all_reduce_s picks: an
    all-gather sends B/t from each of t chips to t - 1 peers, (t - 1) B; the two-hop all-reduce twice that; the
    one-hop all-reduce the whole B from each chip to each peer, t (t - 1) B."""
    t = cfg.tensor_parallel
    if kind != ALL_REDUCE:
        return (t - 1) * nbytes
    return 2 * (t - 1) * nbytes if 2 * all_gather_s(cfg, nbytes) <= _peer_exchange_s(cfg, nbytes) else t * (t - 1) * nbytes

"""Bytes a generation keeps in memory: weights, KV cache, activations."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sim.core.formats import get_format
from sim.core.graph import OpGraph
from sim.core.lowering import FormatPolicy, lower, repeating_from
from sim.core.model import ModelConfig
from sim.core.units import fmt_bytes


def weight_bytes(model: ModelConfig, formats: FormatPolicy) -> int:
    """Every weight tensor once, in its format (a tied LM head counts once), all
    experts included (a step's graph reads only the routed ones)."""
    outside, layers = layer_weight_bytes(model, formats)
    return outside + sum(layers)


def layer_weight_bytes(model: ModelConfig, formats: FormatPolicy) -> tuple[int, list[int]]:
    """The weight bytes outside the layers (embedding, final norm, LM head) and each layer's."""
    # Lower each layer unlike the ones after it (an MoE model's leading dense layers, layers whose
    # formats an override sets), then one period of layers for all the rest.
    first, period = repeating_from(model, formats), model.layer_period
    lowered = min(model.num_layers, first + period)
    graph = lower(model, "decode", 1, 1, 1, formats, num_layers=lowered)
    seen: dict[str, tuple[int | None, int]] = {}
    for op in graph.ops():
        for t in op.reads:
            if t.role == "weight":
                layer = _LAYER.match(t.name)
                size = get_format(t.fmt).storage_bytes(_resident_shape(model, t.name, t.shape))
                seen[t.name] = (int(layer.group(1)) if layer else None, max(seen.get(t.name, (0, 0))[1], size))
    per_layer = [0] * lowered
    for layer, size in seen.values():
        if layer is not None:
            per_layer[layer] += size
    layers = [per_layer[i if i < first else first + (i - first) % period] for i in range(model.num_layers)]
    return sum(size for layer, size in seen.values() if layer is None), layers


_LAYER = re.compile(r"^L(\d+)\.")


def _resident_shape(model: ModelConfig, name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The whole tensor of which a step reads `shape`: the embedding table, not the
    looked-up rows; all experts, not the routed ones."""
    if name == "embed_tokens":
        return (model.vocab_size, shape[1])
    if name == "embed_positions":
        return (model.max_position_embeddings + 2, shape[1])
    if ".expert_" in name:
        rows = model.num_experts * model.expert_intermediate
        return (model.hidden_size, rows) if ".expert_down." in name else (rows, model.hidden_size)
    return shape


def kv_bytes(model: ModelConfig, formats: FormatPolicy, batch: int, tokens: int) -> int:
    """K and V of `tokens` positions for `batch` sequences, over all layers."""
    per_layer = get_format(formats.kv_cache).storage_bytes((batch * tokens, model.kv_dim))
    return 2 * model.num_layers * per_layer


def activation_peak_bytes(graph: OpGraph) -> int:
    """Largest working set of activations of any one op (inputs + outputs live
    together), plus the residual stream it does not touch."""
    peak = 0
    for op in graph.ops():
        live = sum(t.bytes for t in (*op.reads, *op.writes) if t.role == "activation")
        peak = max(peak, live)
    return peak


@dataclass
class Footprint:
    """Peak bytes per memory tier, split by role."""

    tiers: dict[str, dict[str, float]] = field(default_factory=dict)
    # Whose bytes these are where a machine spans several devices ("" where the tiers are the machine's).
    scope: str = ""

    def add(self, tier: str, role: str, nbytes: float) -> None:
        roles = self.tiers.setdefault(tier, {"weights": 0.0, "kv_cache": 0.0, "activations": 0.0})
        roles[role] = roles.get(role, 0.0) + nbytes

    def total(self, tier: str) -> float:
        return sum(self.tiers.get(tier, {}).values())

    def describe(self, tier: str) -> str:
        parts = self.tiers.get(tier, {})
        return " + ".join(f"{role.replace('_', ' ')} {fmt_bytes(b)}" for role, b in parts.items() if b)

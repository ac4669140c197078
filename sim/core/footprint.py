"""Bytes a generation keeps in memory: weights, KV cache, activations."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.core.formats import get_format
from sim.core.graph import OpGraph
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import ModelConfig
from sim.core.units import fmt_bytes


def weight_bytes(model: ModelConfig, formats: FormatPolicy) -> int:
    """Every weight tensor once, in its format (a tied LM head counts once)."""
    graph = lower(model, "decode", 1, 1, 1, formats, num_layers=1)
    full_rows = {"embed_tokens": model.vocab_size, "embed_positions": model.max_position_embeddings + 2}
    seen: dict[str, int] = {}
    for op in graph.ops():
        for t in op.reads:
            if t.role != "weight":
                continue
            shape = (full_rows[t.name], t.shape[1]) if t.name in full_rows else t.shape
            size = get_format(t.fmt).storage_bytes(shape)
            per_layer = model.num_layers if t.name.startswith("L0.") else 1
            seen[t.name] = max(seen.get(t.name, 0), size * per_layer)
    return sum(seen.values())


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

    def add(self, tier: str, role: str, nbytes: float) -> None:
        roles = self.tiers.setdefault(tier, {"weights": 0.0, "kv_cache": 0.0, "activations": 0.0})
        roles[role] = roles.get(role, 0.0) + nbytes

    def total(self, tier: str) -> float:
        return sum(self.tiers.get(tier, {}).values())

    def describe(self, tier: str) -> str:
        parts = self.tiers.get(tier, {})
        return " + ".join(f"{role.replace('_', ' ')} {fmt_bytes(b)}" for role, b in parts.items() if b)

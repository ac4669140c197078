"""The PIM stacks' roof: all stacks' MAC lanes under their internal (bank to unit)
bandwidth, which is several times the pins' bandwidth the host GPU sees."""

from __future__ import annotations

from hw_models.base import Roof
from hw_models.machine import Machine
from hw_models.pim.config import Geometry, load_pim_config
from sim.core.units import fmt_si

# The mapper names its stacks pim.stack0, pim.stack1, ... (hw_models.pim.mapper).
STACK_PREFIX = "pim.stack"


def roofs(machine: Machine, fmt: str) -> list[Roof]:
    """One roof for the stacks together: an op's per-stack pieces are plotted as one
    point (the whole op over the span of its pieces), so its roof is the sum.
    `fmt` is ignored: the units compute in their own formats (pim.formats)."""
    cfg = load_pim_config(machine.section("pim"), machine.source or machine.name)
    tier = machine.memory[cfg.tier]
    geo = Geometry(cfg, tier.bandwidth_bytes_per_s / cfg.stacks)
    peak, bw = cfg.stacks * geo.flops_per_s, cfg.stacks * geo.internal_bytes_per_s
    label = (f"PIM, {cfg.stacks} stacks: {fmt_si(peak, 'FLOP/s')} {'/'.join(cfg.formats)}, "
             f"{fmt_si(bw, 'B/s')} inside the banks")
    return [Roof(STACK_PREFIX, label, peak, bw)]

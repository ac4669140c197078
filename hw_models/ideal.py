"""The pure-roofline version of a machine: efficiencies 1, overheads and latencies 0."""

from __future__ import annotations

from hw_models.machine import Efficiency, Machine


def ideal(machine: Machine) -> Machine:
    units = {n: u.model_copy(update=dict(efficiency=Efficiency(), launch_overhead_s=0.0))
             for n, u in machine.units.items()}
    tiers = {n: t.model_copy(update=dict(latency_s=0.0)) for n, t in machine.memory.items()}
    links = {n: l.model_copy(update=dict(latency_s=0.0)) for n, l in machine.links.items()}
    return machine.model_copy(update=dict(units=units, memory=tiers, links=links))

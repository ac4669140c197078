"""Roofs for a roofline plot: one per compute unit of the Machine, plus what a kind
adds from its own section (PIM's internal bandwidth, a spatial group's or weight
installation's rates). Each kind's `roofs(machine, fmt)` lives in its folder (the
kind face, hw_models.registry) and returns plain Roof data, so a plot needs no
knowledge of kinds."""

from __future__ import annotations

from hw_models.base import Roof
from hw_models.machine import Machine
from hw_models.registry import kind_module
from sim.core.units import fmt_si


def unit_peak(machine: Machine, unit: str, fmt: str) -> tuple[float, str]:
    """The unit's matrix rate in `fmt`, or its best rate where it has none in `fmt`."""
    rates = machine.units[unit].peak_flops_per_s
    best = fmt if fmt in rates else max(rates, key=rates.get)
    return rates[best], best


def unit_roofs(machine: Machine, fmt: str) -> list[Roof]:
    """Each unit's peak in `fmt` under the bandwidth of the tier it streams from."""
    out = []
    for name, unit in machine.units.items():
        peak, used = unit_peak(machine, name, fmt)
        bw = machine.memory[unit.memory].bandwidth_bytes_per_s
        out.append(Roof(name, f"{name}: {fmt_si(peak, 'FLOP/s')} {used}, {fmt_si(bw, 'B/s')} {unit.memory}", peak, bw))
    return out


def roofs(machine: Machine, fmt: str) -> list[Roof]:
    """Every roof of `machine` for ops computing in `fmt`: the units', then the kind's."""
    extra = kind_module(machine.kind).roofs
    return unit_roofs(machine, fmt) + (extra(machine, fmt) if extra else [])

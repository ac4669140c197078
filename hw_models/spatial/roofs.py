"""Roofs of a spatial machine's pipeline stages: a stage is one chip (resources
chip0, chip1, ...) or, with tensor parallelism t, a group of t chips (group0, ...)
that splits each op, so its roof is t chips' peak and SRAM bandwidth. Where the
preset bounds weight installation into the PE arrays, that rate is a second,
lower roof for weight-streaming GEMMs (decode at small batch)."""

from __future__ import annotations

from hw_models.base import Roof
from hw_models.machine import Machine
from hw_models.spatial.config import spatial_config
from hw_models.spatial.partition import stage_name
from sim.core.units import fmt_si


def roofs(machine: Machine, fmt: str) -> list[Roof]:
    cfg = spatial_config(machine)
    t = cfg.tensor_parallel
    family = stage_name(0, t).removesuffix("0")
    unit = machine.units[machine.main_unit]
    rates = unit.peak_flops_per_s
    used = fmt if fmt in rates else max(rates, key=rates.get)
    peak = t * rates[used]
    who = f"{family} ({t} chips)" if t > 1 else family
    out = []
    if family != machine.main_unit:   # else the unit's own roof (hw_models.roofs.unit_roofs) is this one
        bw = t * machine.memory[unit.memory].bandwidth_bytes_per_s
        out.append(Roof(family, f"{who}: {fmt_si(peak, 'FLOP/s')} {used}, {fmt_si(bw, 'B/s')} {unit.memory}",
                        peak, bw))
    install = cfg.pe_array.weight_install_bytes_per_cycle
    if install is not None:
        bw = t * install * cfg.pe_array.clock_hz
        out.append(Roof(family, f"{who}: weight install into the PE arrays, {fmt_si(bw, 'B/s')}", peak, bw))
    if cfg.kv_cache == "dram" and cfg.dram_tier:
        bw = t * machine.memory[cfg.dram_tier].bandwidth_bytes_per_s
        out.append(Roof(family, f"{who}: KV cache in {cfg.dram_tier}, {fmt_si(bw, 'B/s')}", peak, bw))
    return out

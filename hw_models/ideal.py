"""The pure-roofline version of a machine: efficiencies 1, overheads and latencies 0, and no board power cap
(a cap lowers the clock: a throttle, not the roofline; a numerics researcher's trial found `--ideal` prefill 41-55%
over `sim roofline` where the cap bound, and format speedups that depended on the power model)."""

from __future__ import annotations

from hw_models.machine import Efficiency, Machine


def ideal(machine: Machine) -> Machine:
    # a board-power unit's power_w is its default limit only (its energy is idle + activity + dynamic): both go, and
    # so does an SM clock lock (the roofline runs at full clock)
    uncapped = dict(power_limit_w=None, power_w=None, sm_clock_fraction=1.0)
    units = {n: u.model_copy(update=dict(efficiency=Efficiency(), launch_overhead_s=0.0,
                                         **(uncapped if u.idle_power_w is not None else {})))
             for n, u in machine.units.items()}
    tiers = {n: t.model_copy(update=dict(latency_s=0.0)) for n, t in machine.memory.items()}
    links = {n: l.model_copy(update=dict(latency_s=0.0)) for n, l in machine.links.items()}
    return machine.model_copy(update=dict(units=units, memory=tiers, links=links))

"""The cost of one op on one unit (OpCost) and what bounds it (bound_of): the record
every cost model returns (hw_models.cost, hw_models.stack, the kinds' mappers) and
base.Mapper's timelines carry as task tags. It sits below all of them, so the stack
model takes it without importing base.py (which imports the stack model)."""

from __future__ import annotations


from sim.core.frozen import frozen
from sim.core.graph import Op


@frozen
class OpCost:
    """How one op runs: where, how long, and what bounds it."""

    op: Op
    unit: str
    duration_s: float
    compute_s: float
    memory_s: float
    overhead_s: float
    bound: str          # "compute", "memory", "link" or "overhead"; a spatial chip's "dram", "weight install", "dequant"
    path: str = ""      # e.g. "fp16 tensor", "int4 weights -> fp16 (dequant)", "PIM"
    energy_j: float = 0.0


def bound_of(compute_s: float, memory_s: float, overhead_s: float, link_s: float = 0.0) -> str:
    times = {"compute": compute_s, "memory": memory_s, "link": link_s, "overhead": overhead_s}
    return max(times, key=times.__getitem__)

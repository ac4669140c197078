"""GPU (and CPU socket) model: one compute unit streaming from one memory tier.

Kernels run one after another on a stream (the engine resource named after the
unit); each takes launch overhead + max(compute, memory) time, a roofline with
the preset's efficiency curves.
"""

from __future__ import annotations

from hw_models import compute_path
from hw_models.base import Mapper, OpCost, bound_of
from hw_models.machine import Tier, Unit
from sim import graph as g
from sim.engine import Task
from sim.graph import Op, OpGraph

MATRIX_KINDS = (g.GEMM, g.ATTN_SCORE, g.ATTN_CONTEXT, g.ATTENTION)


def weight_format(op: Op) -> str | None:
    return next((t.fmt for t in op.reads if t.role == "weight" and len(t.shape) > 1), None)


def roofline_cost(op: Op, unit: Unit, unit_name: str, tier: Tier, mode: str = "auto") -> OpCost:
    """Time of `op` on `unit` reading and writing `tier`."""
    eff = unit.efficiency
    dequant_s = 0.0
    if op.kind in MATRIX_KINDS:
        wfmt = weight_format(op) if op.kind == g.GEMM else None
        path = compute_path.choose(unit, unit_name, wfmt, op.compute_format, mode)
        rate, label = path.rate_flops_per_s, path.label
        if path.dequant:
            elements = sum(t.elements for t in op.reads if t.role == "weight" and len(t.shape) > 1)
            dq = elements * compute_path.DEQUANT_FLOPS_PER_ELEMENT
            dequant_s = dq / (unit.vector_flops_per_s * eff.compute(dq))
    else:
        rate, label = unit.vector_flops_per_s, "vector"
    compute_s = (op.flops / (rate * eff.compute(op.flops)) if op.flops else 0.0) + dequant_s
    nbytes = op.bytes
    memory_s = nbytes / (tier.bandwidth_bytes_per_s * eff.memory(nbytes)) if nbytes else 0.0
    overhead_s = unit.launch_overhead_s
    duration = overhead_s + max(compute_s, memory_s)
    energy = nbytes * (tier.energy_j_per_byte or 0.0)
    return OpCost(op, unit_name, duration, compute_s, memory_s, overhead_s,
                  bound_of(compute_s, memory_s, overhead_s), label, energy)


class GpuMapper(Mapper):
    kind = "gpu"

    def __init__(self, machine, workload, model):
        super().__init__(machine, workload, model)
        self.unit_name = machine.main_unit
        self.unit = machine.units[self.unit_name]
        self.tier = machine.memory[self.unit.memory]

    def cost(self, op: Op) -> OpCost:
        return roofline_cost(op, self.unit, self.unit_name, self.tier, self.workload.compute)

    def plan_step(self, graph: OpGraph) -> list[Task]:
        tasks = []
        for op in graph.ops():
            c = self.cost(op)
            tasks.append(Task(op.name, self.unit_name, c.duration_s, tuple(graph.deps(op.name)), tag=c))
        return tasks


MAPPER = GpuMapper

"""GPU (and CPU socket) model: one compute unit streaming from one memory tier.

Kernels run one after another on a stream (the engine resource named after the
unit); each takes launch overhead + max(compute, memory) time, a roofline with
the preset's efficiency curves (hw_models.cost). Under a software stack
(workload `stack:`, hw_models.stack.spec) ops cost as the kernels the stack launches,
and where the stack pays host launches (no CUDA graphs) each op's launch is a
task on an in-order `host` resource that its kernels wait for: a launch-bound
step runs at the host's pace, while each op's device time stays what it is.
"""

from __future__ import annotations

from hw_models.base import Mapper
from hw_models.op_cost import OpCost
from hw_models.cost import gemm_dims, roofline_cost, weight_format
from hw_models.stack.spec import stack_for
from hw_models.stack.fuse import fuse_groups, fused_aliases, fused_away
from hw_models.stack.step_overhead import HOST
from sim.core.engine import Task
from sim.core.graph import Op, OpGraph


class GpuMapper(Mapper):
    kind = "gpu"
    in_order = True   # kernels on one stream run in issue order

    def __init__(self, machine, workload, model):
        super().__init__(machine, workload, model)
        self.unit_name = machine.main_unit
        self.unit = machine.units[self.unit_name]
        self.tier = machine.memory[self.unit.memory]
        self.stack = stack_for(workload.stack, machine)
        if self.stack is not None and self.stack.runs_fused_attention and "flash_attention" not in workload.model_fields_set:
            # The engine's attention is one fused kernel (FlashAttention, FlashInfer, XQA: its family prices it); the
            # unfused qk, softmax and av of the field's default are not what it launches. Set false explicitly, the
            # workload keeps them (sim.apps.checks warns).
            self.workload = workload.model_copy(update={"flash_attention": True})
        self.step_overhead = self.stack.step_overhead if self.stack is not None else None
        self._costs: dict[tuple, OpCost] = {}

    def cost(self, op: Op) -> OpCost:
        # Every layer repeats the same shapes, and steps repeat all but attention:
        # cost each distinct (kind, FLOPs, bytes, formats) once.
        # GEMM dims join the key: M x N x K and M x K x N have equal FLOPs and bytes but
        # not equal tile/wave utilization. Under a stack the op's name can select its kernels,
        # and its input's row shape sets a serial kernel's walk (hw_models.stack.row_kernels).
        # KV heads and the reads' formats too: a decode attention with 8 KV heads of FP8 cache has the FLOPs,
        # bytes and query shape of one with 4 KV heads of bf16, not its kernel (per-op tables cost both).
        key = (op.kind, op.flops, op.bytes, op.compute_format, weight_format(op), gemm_dims(op),
               (op.base_name, op.reads[0].shape if op.reads else ()) if self.stack is not None else None,
               op.dims.get("q_len"), op.dims.get("kv_heads"), op.dims.get("context"), tuple(t.fmt for t in op.reads))
        hit = self._costs.get(key)
        if hit is None:
            hit = self._costs[key] = roofline_cost(op, self.unit, self.unit_name, self.tier, self.workload.compute,
                                                   stack=self.stack)
        if hit.op is op:
            return hit
        return OpCost(op, hit.unit, hit.duration_s, hit.compute_s, hit.memory_s, hit.overhead_s,
                      hit.bound, hit.path, hit.energy_j)

    @property
    def host_launches(self) -> bool:
        """Whether each kernel waits for its launch on the in-order host (a stack without CUDA graphs)."""
        return self.stack is not None and not self.stack.graphs and self.stack.host_launch_s > 0

    def launched(self, tasks: list[Task], name: str, host_s: float, deps: tuple[str, ...]) -> tuple[str, ...]:
        """Append `name`'s host launch to `tasks` (when the stack launches from the host) and
        return `deps` with it: the kernel cannot start before the host has issued it."""
        if not self.host_launches:
            return deps
        tasks.append(Task(f"{name}.launch", HOST, host_s, ()))
        return (*deps, f"{name}.launch")

    def launch_s(self, op: Op, fused: dict) -> float:
        """Host seconds to launch `op`'s kernels: none for a member fused into another's GEMM."""
        if self.stack is None or isinstance(fused.get(op.name), str):
            return 0.0
        return self.stack.host_s(op)

    def fused(self, graph: OpGraph) -> dict:
        """The stack's fused GEMMs in `graph` (hw_models.stack.fuse); {} without a stack."""
        return fuse_groups(graph, self.stack.fuse) if self.stack is not None else {}

    def stream_cost(self, op: Op, fused: dict) -> OpCost:
        """`op` on the stream: as the fused GEMM it leads, as nothing if another member leads."""
        hit = fused.get(op.name)
        if hit is None:
            return self.cost(op)
        return fused_away(op, self.unit_name, hit) if isinstance(hit, str) else self.cost(hit)

    def plan_step(self, graph: OpGraph) -> list[Task]:
        tasks = []
        fused = self.fused(graph)
        alias = fused_aliases(fused)   # the leading member's task carries the fused GEMM's name
        for op in graph.ops():
            c = self.stream_cost(op, fused)
            name = alias.get(op.name, op.name)
            deps = tuple(alias.get(d, d) for d in graph.deps(op.name))
            deps = self.launched(tasks, name, self.launch_s(op, fused), deps)
            tasks.append(Task(name, self.unit_name, c.duration_s, deps, tag=c))
        return tasks

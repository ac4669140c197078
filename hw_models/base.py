"""What every hardware model provides: a Mapper turns a step's op graph into
engine tasks on the machine's resources, and checks that the run fits.

A mapper is chosen by the machine's `kind`. The generation loop (prefill, then
decode steps over a growing KV cache, with the shortcuts for identical layers
and steps) lives in sim.core.generation and works for any mapper; a kind whose
schedule crosses steps (offload's block schedule, a spatial pipeline) overrides
`simulate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hw_models.machine import Machine
from sim.core.engine import Task
from sim.core.errors import CapacityError
from sim.core.footprint import Footprint, activation_peak_bytes, kv_bytes, weight_bytes
from sim.core.graph import Op, OpGraph
from sim.core.lowering import lower
from sim.core.model import ModelConfig
from sim.core.units import fmt_bytes

if TYPE_CHECKING:
    from sim.core.results import RunResult
    from sim.core.workload import Workload


@dataclass(frozen=True)
class OpCost:
    """How one op runs: where, how long, and what bounds it."""

    op: Op
    unit: str
    duration_s: float
    compute_s: float
    memory_s: float
    overhead_s: float
    bound: str          # "compute", "memory", "link" or "overhead"
    path: str = ""      # e.g. "fp16 tensor", "int4 weights -> fp16 (dequant)", "PIM"
    energy_j: float = 0.0


@dataclass(frozen=True)
class Roof:
    """One roof of a roofline plot: the peak a unit computes at and the bandwidth it
    streams operands at. `unit` names an engine resource or a numbered family of them
    ("pim.stack" stands for pim.stack0, pim.stack1, ...; "chip" for chip0, chip1, ...)."""

    unit: str
    label: str
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float

    def covers(self, resource: str) -> bool:
        tail = resource[len(self.unit):]
        return resource.startswith(self.unit) and (tail == "" or tail.isdigit())

    @property
    def knee_flop_per_byte(self) -> float:
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s


def bound_of(compute_s: float, memory_s: float, overhead_s: float, link_s: float = 0.0) -> str:
    times = {"compute": compute_s, "memory": memory_s, "link": link_s, "overhead": overhead_s}
    return max(times, key=times.__getitem__)


class Mapper:
    kind = "base"
    # Whether each engine resource runs its tasks in the order planned (a CUDA
    # stream, a DMA queue) rather than in whatever order they become ready.
    in_order = False

    def __init__(self, machine: Machine, workload: "Workload", model: ModelConfig):
        self.machine = machine
        self.workload = workload
        self.model = model
        self.formats = workload.formats.policy()

    # -- what a hardware model must provide -------------------------------
    def plan_step(self, graph: OpGraph) -> list[Task]:
        raise NotImplementedError

    def resources(self) -> dict[str, int]:
        """Parallel slots per engine resource (default one)."""
        return {}

    def containers(self) -> dict[str, float]:
        return {}

    # -- shared behaviour ---------------------------------------------------
    def footprint(self) -> Footprint:
        """Everything on the main unit's memory tier; raises CapacityError if it does not fit."""
        w = self.workload
        fp = Footprint()
        tier = self.machine.device_tier
        fp.add(tier, "weights", weight_bytes(self.model, self.formats))
        fp.add(tier, "kv_cache", kv_bytes(self.model, self.formats, w.batch, w.prompt_len + w.gen_len))
        prefill = lower(self.model, "prefill", w.batch, w.prompt_len, w.prompt_len, self.formats,
                        w.flash_attention, num_layers=1)
        fp.add(tier, "activations", activation_peak_bytes(prefill))
        self.check_fits(fp)
        return fp

    def check_fits(self, fp: Footprint, hint: str | None = None) -> None:
        for tier, roles in fp.tiers.items():
            need, have = fp.total(tier), self.machine.memory[tier].capacity_bytes
            if need > have:
                hint = hint or self.capacity_hint()
                raise CapacityError(
                    f"{self.model.name} ({self.workload.formats.weights} weights, batch {self.workload.batch}, "
                    f"{self.workload.prompt_len}+{self.workload.gen_len} tokens) needs {fmt_bytes(need)} in "
                    f"{self.machine.name}.{tier} ({fp.describe(tier)}) but it holds {fmt_bytes(have)}: "
                    f"short by {fmt_bytes(need - have)}. {hint}")

    def capacity_hint(self) -> str:
        return ("Try an offload preset that spills to CPU memory and disk (e.g. --hw a6000_offload), "
                "a narrower weight format (--set formats.weights=int4), or a smaller batch.")

    def simulate(self, exhaustive: bool = False, detail: bool = True) -> "RunResult":
        from sim.core.generation import simulate_generation

        return simulate_generation(self, exhaustive=exhaustive, detail=detail)


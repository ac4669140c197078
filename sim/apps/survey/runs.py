"""One simulated point of the survey: a workload on a machine, through the
public API only (hw_models.registry.simulate, load_machine, workload_from_dict),
as the pure roofline (`ideal`) and as the preset's own model."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from hw_models.ideal import ideal
from hw_models.machine import Machine, load_machine
from hw_models.registry import simulate
from sim.core.errors import CapacityError
from sim.core.results import RunResult
from sim.core.workload import workload_from_dict

MODEL = "llama2-7b"
PROMPT = 1024
# The survey's configurations (its quantization discussion): label -> (weights, activations, kv_cache).
QUANT = {
    "W16A16": ("fp16", "fp16", "fp16"), "W8A8": ("int8", "int8", "fp16"), "W4A16": ("int4", "fp16", "fp16"),
    "W4A4": ("int4", "int4", "fp16"), "W16A16 KV8": ("fp16", "fp16", "int8"),
    "W16A16 KV4": ("fp16", "fp16", "int4"), "W4A16 KV4": ("int4", "fp16", "int4"),
}


@dataclass(frozen=True)
class Setup:
    """What one `sim survey` covers: the machines and the sweep points (--quick thins them)."""

    machines: tuple[str, ...] = ("a6000", "h200")
    quick: bool = False
    contexts: tuple[int, ...] = (256, 512, 1024, 2048, 4096)
    batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    bandwidth_factors: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    offload_models: tuple[str, ...] = ("llama2-7b", "llama2-13b", "llama2-70b")
    offload_batches: tuple[int, ...] = (1, 16, 64)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def make(cls, machines: tuple[str, ...], quick: bool) -> "Setup":
        if not quick:
            return cls(machines=machines)
        return cls(machines=machines, quick=True, contexts=(512, 2048), batches=(1, 16, 64),
                   bandwidth_factors=(1.0, 2.0), offload_models=("llama2-7b", "llama2-70b"), offload_batches=(1, 16))


@lru_cache(maxsize=64)
def machine(name: str, bandwidth_factor: float = 1.0, flat: bool = False) -> Machine:
    """A preset, its device tier's bandwidth scaled (the survey's "what if memory were
    faster"), optionally as the pure roofline (efficiencies 1, no overheads)."""
    m = load_machine(name)
    if bandwidth_factor != 1.0:
        bw = m.memory[m.device_tier].bandwidth_bytes_per_s * bandwidth_factor
        m = load_machine(name, {f"memory.{m.device_tier}.bandwidth_bytes_per_s": bw})
    return ideal(m) if flat else m


def workload(**fields: Any):
    base: dict[str, Any] = dict(name="survey", model=MODEL, batch=1, prompt_len=PROMPT, gen_len=2)
    base.update(fields)
    return workload_from_dict(base, "sim survey")


# The sections share points (the batch-1 and batch-16 pairs appear in four of them): one simulation
# each per process. A RunResult is only read by the sections, never changed.
_RUNS: dict[tuple, RunResult | None] = {}


def _key(value: Any) -> Any:
    """`value` made hashable: a mapping (formats=...) as its sorted items."""
    return tuple(sorted((k, _key(v)) for k, v in value.items())) if isinstance(value, dict) else value


def run(hw: str, flat: bool = False, bandwidth_factor: float = 1.0, detail: bool = False,
        **fields: Any) -> RunResult | None:
    """Simulate; None where the workload does not fit the machine (a CapacityError)."""
    key = (hw, flat, bandwidth_factor, detail, _key(fields))
    if key not in _RUNS:
        _RUNS[key] = _simulate(hw, flat, bandwidth_factor, detail, fields)
    return _RUNS[key]


def _simulate(hw: str, flat: bool, bandwidth_factor: float, detail: bool, fields: dict[str, Any]) -> RunResult | None:
    w = workload(**fields)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # context beyond the model's trained length etc.: the doc says so
        try:
            return simulate(w, machine(hw, bandwidth_factor, flat), detail=detail)
        except CapacityError:
            return None


def quant_formats(label: str) -> dict[str, str]:
    w, a, kv = QUANT[label]
    return dict(weights=w, activations=a, kv_cache=kv)


def pair(hw: str, **fields: Any) -> tuple[RunResult | None, RunResult | None]:
    """(pure roofline, the preset's model) of one point."""
    return run(hw, flat=True, **fields), run(hw, **fields)

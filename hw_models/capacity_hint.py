"""What to try when a run does not fit a device's memory: the hint of a CapacityError, from the
part that is largest (weights, KV cache, activations) and what the workload already uses, so it
never suggests the format the weights have or an offload preset built on another GPU."""

from __future__ import annotations

from hw_models.machine import Machine, preset_names
from sim.core.formats import get_format
from sim.core.workload import Workload

NARROW_BITS = 4    # weights at 4 bits or fewer: no narrower format to suggest


def capacity_hint(machine: Machine, workload: Workload, roles: dict[str, float]) -> str:
    """One sentence of things to try, the largest part's remedy first."""
    f, tries = workload.formats, []
    largest = max(roles, key=roles.get) if roles else "weights"
    if largest == "kv_cache":
        tries.append("a smaller batch or a shorter context (the KV cache is the largest part)")
        if get_format(f.kv_cache).bits > 8:
            tries.append("an 8-bit KV cache (--set formats.kv_cache=fp8_e4m3)")
    if largest == "activations":
        if not workload.flash_attention:
            tries.append("fused attention, which keeps no score matrix (--set flash_attention=true)")
        tries.append("a smaller batch or a shorter prompt (the prefill's activations are the largest part)")
    if get_format(f.weights).bits > NARROW_BITS:
        tries.append(f"a narrower weight format than {f.weights} (--set formats.weights=int4)")
    if machine.kind == "gpu":
        if largest == "weights" and workload.section("parallel") is None:
            tries.append("several GPUs (a parallel: section, docs/parallelism.md)")
        tries.append(_offload_preset(machine.name))
    return "Try " + ", ".join(tries[:-1]) + (" or " if len(tries) > 1 else "") + tries[-1] + "."


def _offload_preset(name: str) -> str:
    """An offload preset built on this GPU (h100_sxm: h100_offload) where one exists, else the list."""
    offload = [p for p in preset_names() if p.endswith("_offload")]
    same = [p for p in offload if p.split("_")[0] == name.split("_")[0]]
    if same:
        return f"the offload preset of this GPU, which spills to CPU memory and disk (--hw {same[0]})"
    return f"an offload preset that spills to CPU memory and disk ({', '.join(offload)}: sim hw list)"

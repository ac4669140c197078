"""The registry of hardware kinds: one line per kind.

A kind is a folder under hw_models/ whose `__init__` gives the same face
(hw_models.registry.FACE): `KIND`, `MAPPER`, the preset section it owns
and its schema, the workload sections it owns and their schemas, an optional
CLI `register(subparsers)`, and `report_sections(result)`. This table names
the module of each kind and the top-level keys it owns in preset and workload
files, so that files can be validated before any kind is imported (the
modules load on first use, keeping `sim --help` fast).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from sim.core.sections import register_sections


@dataclass(frozen=True)
class KindEntry:
    module: str | ModuleType                  # the kind's folder (a module path, or the module itself)
    preset_sections: tuple[str, ...] = ()     # top-level preset keys it owns
    workload_sections: tuple[str, ...] = ()   # top-level workload keys it owns
    cli: str | None = None                    # the module of its `register(subparsers)`, loaded at start-up:
                                              # outside the folder, or the folder's __init__ loads too
    moe_refusal: str | None = None            # why the kind cannot run Mixture-of-Experts models (None: it can)
    runs_stack: bool = False                  # whether it costs ops under the workload's software stack


# Why three kinds refuse MoE models. The lowering (sim.core.moe) gives a step's expert ops the
# *expected* routed experts' weights (fractional experts), which the gpu kind streams as such; these
# kinds instead lay a layer's weights out whole, so they would mis-count MoE weights rather than fail.
MOE_OFFLOAD = ("offload streams one layer's weights through fixed GPU buffers sized by a layer's whole "
               "weight set (FlexGen's zig-zag schedule); per-step routed experts (a changing, fractional "
               "subset) are not modelled")
MOE_PIM = ("PIM maps each GEMM's whole weight matrix onto the banks (hw_models/pim/layout.py); the routed "
           "expert GEMMs read an expected, fractional set of experts per step, which has no bank layout")
MOE_SPATIAL = ("spatial keeps every op's weights resident on chip, counted from the step's reads; an MoE "
               "step reads only its routed experts, so residency would omit the experts chips must still hold")

KINDS: dict[str, KindEntry] = {
    "gpu": KindEntry("hw_models.gpu", (), ("parallel",), runs_stack=True),
    "cpu": KindEntry("hw_models.gpu", (), ("parallel",), runs_stack=True),
    "offload": KindEntry("hw_models.offload", ("host",), ("policy",), cli="hw_models.offload_cli",
                         moe_refusal=MOE_OFFLOAD),
    "pim": KindEntry("hw_models.pim", ("pim",), ("pim_policy",), moe_refusal=MOE_PIM),
    "spatial": KindEntry("hw_models.spatial", ("spatial",), moe_refusal=MOE_SPATIAL),
}


def register_kind(name: str, entry: KindEntry) -> None:
    """Add a kind (a plug-in, or a toy kind in a test)."""
    KINDS[name] = entry
    register_sections(entry.workload_sections)


def preset_sections() -> set[str]:
    return {s for e in KINDS.values() for s in e.preset_sections}


def section_owners(key: str, where: str) -> list[str]:
    """The kinds that own a top-level `key` of a preset (`where="preset"`) or workload file."""
    return [k for k, e in KINDS.items() if key in (e.preset_sections if where == "preset" else e.workload_sections)]


register_sections({s for e in KINDS.values() for s in e.workload_sections})


def cli_registrars() -> list:
    """Each kind's `register(subparsers)` (its face's `register`), from the CLI module the
    registry line names, so that start-up does not load every kind's models."""
    modules = dict.fromkeys(e.cli for e in KINDS.values() if e.cli)
    return [importlib.import_module(m).register for m in modules]

"""The kind's mapper for a serving file, and what a kind refuses to serve: the one way serving reaches the hardware
(sim.apps.serve.stepcost costs iterations through it)."""

from __future__ import annotations

from hw_models.base import Mapper
from hw_models.kinds import KINDS
from hw_models.machine import Machine
from hw_models.registry import kind_module, mapper_for
from hw_models.stack.engine_overheads import EngineOverheads
from hw_models.stack.spec import stack_for
from sim.apps.serve.spec import ServeFile
from sim.core.errors import ConfigError
from sim.core.model import ModelConfig


def check_kind(machine: Machine, file: ServeFile) -> None:
    """Refuse, in one line at the serving file's key, a scheduler kind that cannot drive the machine's kind
    (Mapper.serving_schedulers: offload serves whole FlexGen blocks, under `static` only)."""
    mapper = kind_module(machine.kind).MAPPER   # a class, or a factory without the attributes
    allowed, scheduler = getattr(mapper, "serving_schedulers", None), file.serving.scheduler.kind
    if allowed is not None and scheduler not in allowed:
        raise ConfigError(f"{file.source or file.name}: serving.scheduler.kind: {scheduler}: {machine.name} is kind "
                          f"{machine.kind}, which serves under {' | '.join(allowed)} only: {mapper.serving_schedulers_why}")


def check_speculative(machine: Machine, file: ServeFile) -> None:
    """Refuse, in one line, speculative decoding on a kind that cannot place a draft (Mapper.serving_speculative_why)."""
    why = getattr(kind_module(machine.kind).MAPPER, "serving_speculative_why", "")
    if file.serving.speculative is not None and why:
        raise ConfigError(f"{file.source or 'workload'}: serving.speculative: not modelled on {machine.name} "
                          f"(kind {machine.kind}): {why}")


def serving_mapper(machine: Machine, workload: ServeFile, model: ModelConfig) -> Mapper:
    """The kind's mapper for the serving file `workload`, refused in one line where its scheduler cannot drive
    the kind. Serving reads the hardware only through it: iteration, expert_part, device_share, serving_pool,
    rank_activation_bytes, swap_bytes_per_s, engine_host_s, power_j, gap_j (hw_models.base.Mapper)."""
    check_kind(machine, workload)
    return mapper_for(machine, workload, model)


def engine_terms(file: ServeFile, machine: Machine) -> EngineOverheads | None:
    """The stack's engine terms where the machine's kind runs the stack (hw_models.kinds runs_stack, as the
    step costs' mappers do); none on spatial, PIM and offload presets, where the stack is ignored whole
    (sim.apps.checks warns so), its per-request delay and front end, fitted on GPU engines, included."""
    if file.stack is None:
        return None
    entry = KINDS.get(machine.kind)
    stack = stack_for(file.stack, machine) if entry is not None and entry.runs_stack else None
    return stack.engine_overheads if stack is not None else None

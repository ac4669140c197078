"""The rows of `sim roofline`: per op of one layer (and the embedding and head), its FLOPs,
bytes, pure roofline time and simulated time, with the number of layers it stands for."""

from __future__ import annotations

from hw_models.cost import roofline_cost
from hw_models.ideal import ideal
from hw_models.registry import mapper_for
from sim.core.lowering import lower, repeating_from


def roofline_rows(workload, machine, phase: str, q: int, kv: int) -> list[dict]:
    """One row per op of a layer, `count` the layers it stands for. Layers unlike the rest (an MoE
    model's leading dense layers, formats.overrides on some layers) are lowered each; one layer
    stands for the rest. Ops alike in every figure merge, their layers named where not all."""
    model = workload.model_config_()
    mapper = mapper_for(machine, workload, model)
    L, period, first = model.num_layers, model.layer_period, repeating_from(model, mapper.formats)
    lowered = min(L, first + period)
    graph = lower(model, phase, workload.batch, q, kv, mapper.formats, mapper.workload.flash_attention, num_layers=lowered)
    flat, unit = ideal(machine), machine.main_unit
    rows: dict[tuple, dict] = {}
    for op in graph.ops():
        pure = roofline_cost(op, flat.units[unit], unit, flat.memory[flat.device_tier], workload.compute)
        real = roofline_cost(op, machine.units[unit], unit, machine.memory[machine.device_tier], workload.compute)
        layers = [] if op.layer is None else [op.layer] if op.layer < first else list(range(op.layer, L, period))
        row = dict(op=op.base_name, kind=op.kind, count=max(1, len(layers)), flops=op.flops, bytes=op.bytes,
                   intensity=op.flops / op.bytes if op.bytes else 0.0, bound=pure.bound,
                   roofline_s=pure.duration_s, simulated_s=real.duration_s, layers=layers)
        key = (op.base_name, op.flops, op.bytes, real.duration_s)
        if key in rows and layers:
            rows[key]["layers"] += layers
            rows[key]["count"] += len(layers)
        else:
            rows[key] = row
    for row in rows.values():
        layers = row.pop("layers")
        if layers and len(layers) < L:
            row["op"] += f" ({_spans(layers)})"
    return list(rows.values())


def _spans(layers: list[int]) -> str:
    """Layer indices as ranges: [0, 1, 2, 31] -> 'L0-2, L31'; [0, 2, ..., 40] -> 'L0-40 every 2'
    (Gemma-2's local-attention layers)."""
    steps = {b - a for a, b in zip(layers, layers[1:])}
    if len(layers) > 2 and len(steps) == 1 and (step := steps.pop()) > 1:
        return f"L{layers[0]}-{layers[-1]} every {step}"
    out: list[list[int]] = []
    for i in sorted(layers):
        if out and i == out[-1][1] + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return ", ".join(f"L{a}" if a == b else f"L{a}-{b}" for a, b in out)

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
    stands for the rest. Ops alike in every figure merge, their layers named where not all. Under a
    tensor- or expert-parallel plan the ops are one rank's share and its collectives are rows of their own
    (pure: the bytes over the link's datasheet bandwidth; simulated: the plan's collective)."""
    model = workload.model_config_()
    mapper = mapper_for(machine, workload, model)
    L, period, first = model.num_layers, model.layer_period, repeating_from(model, mapper.formats)
    lowered = min(L, first + period)
    graph = lower(model, phase, workload.batch, q, kv, mapper.formats, mapper.workload.flash_attention, num_layers=lowered)
    collectives = []
    if getattr(getattr(mapper, "plan", None), "stage_width", 1) > 1:   # one rank of the group, and its collectives
        graph, collectives = mapper.rank_graph(graph)
    flat, unit = ideal(machine), machine.main_unit
    rows: dict[tuple, dict] = {}

    def add(name: str, layer: int | None, row: dict, key: tuple) -> None:
        layers = [] if layer is None else [layer] if layer < first else list(range(layer, L, period))
        if key in rows and layers:
            rows[key]["layers"] += layers
            rows[key]["count"] += len(layers)
        else:
            rows[key] = dict(op=name, count=max(1, len(layers)), layers=layers, **row)

    for op in graph.ops():
        pure = roofline_cost(op, flat.units[unit], unit, flat.memory[flat.device_tier], workload.compute)
        real = roofline_cost(op, machine.units[unit], unit, machine.memory[machine.device_tier], workload.compute)
        add(op.base_name, op.layer, dict(kind=op.kind, flops=op.flops, bytes=op.bytes,
                                         intensity=op.flops / op.bytes if op.bytes else 0.0, bound=pure.bound,
                                         roofline_s=pure.duration_s, simulated_s=real.duration_s),
            (op.base_name, op.flops, op.bytes, real.duration_s))
    for c in collectives:
        layer = graph.op(c.after).layer
        name = f"{c.kind} after {graph.op(c.after).base_name}"
        real = mapper.collective_time_s(c)
        add(name, layer, dict(kind=c.kind, flops=0.0, bytes=c.bytes, intensity=0.0, bound="link",
                              roofline_s=mapper.collective_roofline_s(c), simulated_s=real), (name, c.bytes, real))
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

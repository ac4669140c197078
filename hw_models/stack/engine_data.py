"""What a run's engine does beyond its device step, as plain data for RunResult.extra["engine_host"] and the
report (hw_models.gpu.report.engine_section): the host work per step of the stack's step_overhead, and the
fitted engine terms of its engine_overheads that `sim serve` charges on top of the step (per iteration, per
request, the API front end) and `sim run` does not, so a reader comparing the two sees where they part."""

from __future__ import annotations

from typing import Any

from sim.core.generation import Generation


def engine_data(mapper: Any, gen: Generation) -> dict[str, Any] | None:
    """The engine figures of `mapper`'s run `gen` (a hw_models.base.Mapper); None under no stack with either."""
    so, b = mapper.step_overhead, mapper.workload.batch
    eo = getattr(getattr(mapper, "stack", None), "engine_overheads", None)
    if so is None and eo is None:
        return None
    out: dict[str, Any] = dict(stack=mapper.workload.stack, sequences=b, devices=mapper.devices,
                               prefill_step_s=gen.prefill.time_s, decode_step_mean_s=gen.tpot("mean"))
    if so is not None:
        host = mapper.engine_host_s(b)
        hidden = [s.time_s for s in gen.sampled if s.time_s <= host] if so.overlap else []
        out.update(overlap=so.overlap, mode=so.mode, host_s=host, cite=so.cite,
                   host_bound_decode_steps=len(hidden) / len(gen.sampled) if gen.sampled else 0.0)
    if eo is not None:
        out.update(eo.serving_terms(b, mapper.collectives_per_iteration(), mapper.devices), serve_cite=eo.cite)
    return out

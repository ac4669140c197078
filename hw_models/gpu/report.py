"""The parallel plan's figures of a run (plain data in RunResult.extra["parallel"], so
`--json` carries them) and the report sections made from them: the plan, the time
each device spends in collectives per step and its share of the step, the pipeline
bubble (the stages' idle fraction as the step's schedule leaves it), and the memory
of one device against its capacity. Also the trace's lane layout (hw_models.gpu.schedule)."""

from __future__ import annotations

from typing import Any

from hw_models.base import Section
from hw_models.gpu.plan import is_pipelined
from hw_models.gpu.schedule import collective_seconds, lane_layout, stage_idle
from sim.core.engine import Timeline
from sim.core.results import RunResult
from sim.core.units import fmt_bytes, fmt_time


def step_data(tl: Timeline, kv_len: int, unit: str, pp: int, pipelined: bool, span_s: float | None = None
              ) -> dict[str, Any]:
    """One step in full: its time (`span_s`, default the timeline's makespan), the busiest device's seconds in
    collectives and their share of the step, and (pipelined plans) each stage's idle fraction and their mean."""
    span = tl.makespan_s if span_s is None else span_s
    coll = collective_seconds(tl, unit, pp)
    idle = stage_idle(tl, unit, pp, span) if pipelined else None
    return dict(kv_len=kv_len, step_s=span, collective_s=max(coll), collective_share=max(coll) / span if span else 0.0,
                collective_s_per_stage=coll, stage_idle=idle, bubble=sum(idle) / len(idle) if idle else None)


def parallel_data(mapper, steps: dict[str, tuple[int, Timeline]]) -> dict[str, Any]:
    """The plan of a hw_models.gpu.parallel.ParallelGpuMapper, its memory per device, its
    trace lanes and, for each phase in `steps` ((kv_len, full step timeline)), step_data."""
    p, unit = mapper.plan, mapper.unit_name
    width = p.stage_width
    tier = mapper.machine.device_tier
    fp = mapper.footprint()
    roles = fp.tiers.get(tier, {})
    memory = dict(tier=tier, weights=roles.get("weights", 0.0), kv_cache=roles.get("kv_cache", 0.0),
                  activations=roles.get("activations", 0.0), total=fp.total(tier),
                  capacity=mapper.machine.memory[tier].capacity_bytes)
    plan = dict(tp=p.tp, pp=p.pp, dp=p.dp, ep=p.ep, micro_batches=p.micro_batches, algorithm=mapper.algorithm,
                topology=mapper.topo.name if mapper.topo else None, devices_per_replica=p.instance_devices,
                devices=p.devices, stage_layers=mapper.stage_layers())
    lanes = lane_layout(unit, width, p.pp) if p.instance_devices > 1 else {}
    return dict(plan=plan, memory_per_device=memory, lanes=lanes,
                steps={ph: step_data(tl, kv, unit, p.pp, p.pipelined, mapper.step_span_s(ph, tl) if p.pipelined else None)
                       for ph, (kv, tl) in steps.items()})


def _plan_rows(plan: dict[str, Any]) -> list[tuple[str, str]]:
    alg = plan["algorithm"]   # an engine's custom kernel is an all-reduce: its other collectives are NCCL's (a trial)
    alg = f"{alg} all-reduce, nccl otherwise" if alg and alg.endswith("_custom") else alg
    where = f" on {plan['topology']} (collectives: {alg})" if plan["topology"] else ""
    return [
        ("tp / pp / ep / dp", f"{plan['tp']} / {plan['pp']} / {plan['ep']} / {plan['dp']}"),
        ("micro-batches", str(plan["micro_batches"])),
        ("devices", f"{plan['devices_per_replica']} per replica x {plan['dp']} replica(s) = {plan['devices']}{where}"),
        ("layers per stage", ", ".join(map(str, plan["stage_layers"]))),
    ]


def _step_row(phase: str, s: dict[str, Any]) -> tuple[str, ...]:
    bubble = "-" if s["bubble"] is None else f"{100 * s['bubble']:.1f}%"
    stages = "-" if s["stage_idle"] is None else ", ".join(f"{100 * x:.0f}%" for x in s["stage_idle"])
    label = phase if phase == "prefill" else f"{phase} (kv_len {s['kv_len']})"
    return (label, fmt_time(s["step_s"]), fmt_time(s["collective_s"]), f"{100 * s['collective_share']:.1f}%",
            bubble, stages)


def engine_section(e: dict[str, Any]) -> Section:
    """The engine's host work per step (hw_models.stack.step_overhead) and the fitted terms sim serve adds
    (hw_models.stack.engine_overheads), from RunResult.extra["engine_host"] (hw_models.stack.engine_data)."""
    rows = [("stack", e["stack"])]
    if "host_s" in e:
        rows += [("host work per step", f"{fmt_time(e['host_s'])} at {e['sequences']} sequence(s)"
                                        f"{', ' + str(e['devices']) + ' devices' if e['devices'] > 1 else ''}"),
                 ("with the GPU step", e["mode"])]
    rows.append(("prefill step / decode step (mean)", f"{fmt_time(e['prefill_step_s'])} / {fmt_time(e['decode_step_mean_s'])}"))
    if e.get("overlap"):
        rows.append(("decode steps bound by the host", f"{100 * e['host_bound_decode_steps']:.0f}% of those simulated"))
    if "serve_iteration_s" in e:   # the stack's fitted engine terms: sim serve charges them, not sim run
        token = e["serve_output_token_s"]
        rows.append(("sim serve adds (fitted)", f"{fmt_time(e['serve_iteration_s'])} per iteration, "
                     f"{fmt_time(e['serve_request_s'])} per request"
                     + (f", {fmt_time(token)} per streamed token in the API front end" if token else "")
                     + " (hw_models/stack/engine_overheads.py; not in this run's times)"))
    return Section("Engine host work (schedule, inputs, sampling, outputs)", rows, caption=e.get("cite") or e["serve_cite"])


def report_sections(result: RunResult) -> list[Section]:
    """The engine's host work under a serving stack; the parallel plan's sections, for a plan of
    more than one device."""
    out = [engine_section(result.extra["engine_host"])] if "engine_host" in result.extra else []
    par = result.extra.get("parallel")
    if not par or par["plan"]["devices"] <= 1:
        return out
    out.append(Section("Parallel plan", _plan_rows(par["plan"])))
    if par["steps"]:
        rows = [_step_row(ph, s) for ph, s in par["steps"].items()]
        out.append(Section("Collectives and pipeline bubble, one step in full", rows,
                           ("step", "time", "in collectives", "share", "bubble", "idle per stage"),
                           "per device: the busiest stage's collectives (TP/EP collectives, activation "
                           "send/recv); bubble: the stages' mean idle fraction of the step (a decode step in "
                           "steady state: its micro-batches stay in flight from step to step)"
                           # a kernel trial read 516 ms here against a 563 ms TTFT: the cap's stretch
                           + ("; times at full clock: the binding power cap's stretch (its warning) is on the "
                              "whole step, in TTFT and TPOT" if result.extra.get("power_cap")
                              and is_pipelined(par["plan"]["pp"], par["plan"]["micro_batches"]) else "")))
    m = par["memory_per_device"]
    out.append(Section("Memory per device", [(m["tier"], fmt_bytes(m["weights"]), fmt_bytes(m["kv_cache"]),
                                              fmt_bytes(m["activations"]), fmt_bytes(m["total"]),
                                              fmt_bytes(m["capacity"]), f"{100 * m['total'] / m['capacity']:.0f}%")],
                       ("tier", "weights", "KV cache", "activations", "total", "capacity", "used")))
    return out

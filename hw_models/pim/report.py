"""The PIM sections of a run's report: where each op ran and why, what PIM
saved against the same GPU without it, utilisation, mode-switch overhead and
DRAM-side energy per token (internal against external)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from hw_models.pim.pipeline import PIM as PIM_PART
from sim.core.engine import Timeline
from sim.core.lowering import lower
from sim.apps.report import _kv_table
from sim.core.units import fmt_time

if TYPE_CHECKING:
    from hw_models.pim.mapper import Decision, PimMapper
    from sim.core.results import RunResult


def step_breakdown(tl: Timeline) -> dict[str, float]:
    """Per decode step: PIM busy seconds, mode-switch seconds, streamed bytes, DRAM energy split."""
    out = dict(pim_busy_s=0.0, mode_switch_s=0.0, stream_bytes=0.0, e_int_j=0.0, e_ext_j=0.0)
    for i in tl.intervals:
        c = i.tag
        if hasattr(c, "stream_bytes"):
            out["pim_busy_s"] += i.duration_s
            out["mode_switch_s"] += c.mode_switch_s
            out["stream_bytes"] += c.stream_bytes
            out["e_int_j"] += c.energy_internal_j
            out["e_ext_j"] += c.energy_external_j
        else:
            out["e_ext_j"] += getattr(c, "energy_j", 0.0)
    return out


def decisions_for(mapper: "PimMapper", kv_len: int) -> list["Decision"]:
    """Placement of every op of a one-layer decode step as scheduled (every layer is placed
    alike); of a pipelined attention block only the first head group (the others alike)."""
    w = mapper.workload
    graph = mapper.schedule(lower(mapper.model, "decode", w.batch, 1, kv_len, mapper.formats,
                                  w.flash_attention, num_layers=1))
    return [mapper.decide(op) for op in graph.ops() if op.name not in mapper.continuations]


def schedule_line(cfg, decisions: list["Decision"]) -> str:
    parts = []
    if cfg.head_groups > 1:
        parts.append(f"attention blocks pipelined in {cfg.head_groups} head groups (AttAcc --pipeopt)")
    if cfg.gemm_sharing:
        split = [d.op for d in decisions if d.op.name.endswith(PIM_PART)]
        per_layer = sum(op.layer is not None for op in split)
        others = ", ".join(op.name.removesuffix(PIM_PART) for op in split if op.layer is None)
        parts.append(f"GEMM sharing (AttAcc --ffopt): {per_layer} GEMM(s) per layer split by columns host/PIM"
                     + (f", and {others}" if others else ""))
    if cfg.sub_batches > 1:
        parts.append(f"{cfg.sub_batches} interleaved sub-batches (NeuPIMs)")
    return "; ".join(parts) or "serial (one op chain, no overlap schedule)"


def placement_table(decisions: list["Decision"], kv_len: int, layers: int) -> Table:
    t = Table(title=f"PIM placement, one decode step (kv_len {kv_len}); layer ops repeat x{layers}",
              title_justify="left")
    for col in ("op", "kind", "ran on", "host (pred.)", "PIM (pred.)", "why"):
        t.add_column(col, justify="right" if "pred" in col else "left")
    for d in decisions:
        where = f"PIM x{len(d.pieces)} stacks" if d.where == "pim" else "host"
        t.add_row(d.op.base_name, d.op.kind, where, fmt_time(d.host.duration_s),
                  fmt_time(d.pim_s) if d.pim_s is not None else "-", d.why)
    return t


def attach_report(mapper: "PimMapper", result: "RunResult", baseline: "RunResult") -> None:
    geo, cfg = mapper.geo, mapper.cfg
    tl = result.decode_timeline
    span = tl.makespan_s
    b = step_breakdown(tl)
    b0 = step_breakdown(baseline.decode_timeline)
    S = cfg.stacks
    util = b["pim_busy_s"] / (S * span) if span else 0.0
    bw_util = b["stream_bytes"] / (S * geo.internal_bytes_per_s * span) if span else 0.0
    batch = result.batch
    speedup = baseline.tpot_s / result.tpot_s if result.tpot_s else 0.0
    decisions = decisions_for(mapper, result.decode_kv_len)
    metrics = {
        "pim.tpot_no_pim_s": baseline.tpot_s,
        "pim.speedup_tpot": speedup,
        "pim.e2e_saved_s": baseline.e2e_s - result.e2e_s,
        "pim.utilization": util,
        "pim.internal_bw_utilization": bw_util,
        "pim.mode_switch_s_per_step": b["mode_switch_s"] / S,
        "pim.dram_energy_internal_j_per_token": b["e_int_j"] / batch,
        "pim.dram_energy_external_j_per_token": b["e_ext_j"] / batch,
        "pim.dram_energy_no_pim_j_per_token": (b0["e_int_j"] + b0["e_ext_j"]) / batch,
        "pim.ops_on_pim_per_layer": float(sum(d.where == "pim" and d.op.layer is not None for d in decisions)),
    }
    ext = geo.stack_external_bytes_per_s
    summary = _kv_table("PIM", [
        ("geometry", f"{S} stacks x {cfg.pseudo_channels_per_stack} pseudo-channels x "
                     f"{cfg.units_per_pseudo_channel} units ({cfg.placement}), {cfg.simd_lanes} lanes @ "
                     f"{cfg.clock_hz / 1e6:.0f} MHz; {'dual row buffer' if cfg.dual_row_buffer else 'blocked mode'}"),
        ("bandwidth per stack", f"internal {geo.internal_bytes_per_s / 1e9:.0f} GB/s vs pins {ext / 1e9:.0f} GB/s "
                                f"({geo.internal_bytes_per_s / ext:.2f}x); row open exposed "
                                f"{geo.exposed_row_open_s * 1e9:.1f} ns per {cfg.row_bytes:.0f} B row"),
        ("policy", mapper.policy),
        ("decode schedule", schedule_line(cfg, decisions)),
        ("TPOT with / without PIM", f"{fmt_time(result.tpot_s)} / {fmt_time(baseline.tpot_s)} "
                                    f"({speedup:.2f}x, saves {fmt_time(baseline.tpot_s - result.tpot_s)} per token step)"),
        ("end-to-end with / without", f"{fmt_time(result.e2e_s)} / {fmt_time(baseline.e2e_s)}"),
        ("PIM utilisation (decode step)", f"stacks busy {100 * util:.0f}%, internal bandwidth {100 * bw_util:.0f}%"),
        ("mode switches per step", f"{fmt_time(metrics['pim.mode_switch_s_per_step'])} per stack "
                                   f"({100 * metrics['pim.mode_switch_s_per_step'] / span:.1f}% of the step)" if span else "-"),
        ("DRAM energy per token", f"internal {metrics['pim.dram_energy_internal_j_per_token'] * 1e3:.1f} mJ + "
                                  f"external {metrics['pim.dram_energy_external_j_per_token'] * 1e3:.1f} mJ; "
                                  f"without PIM {metrics['pim.dram_energy_no_pim_j_per_token'] * 1e3:.1f} mJ "
                                  f"({cfg.energy_internal_j_per_byte * 1e12 / 8:.2f} vs "
                                  f"{mapper.tier.energy_j_per_byte * 1e12 / 8:.2f} pJ/bit)"),
    ])
    result.extra.setdefault("report", []).extend([placement_table(decisions, result.decode_kv_len,
                                                                  result.model["num_layers"]), summary])
    result.extra.setdefault("metrics", {}).update(metrics)
    result.extra["pim"] = dict(metrics=metrics, placement={d.op.base_name: dict(where=d.where, why=d.why)
                                                           for d in decisions})

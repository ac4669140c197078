"""The PIM figures and report sections of a run: where each op ran and why, what
PIM saved against the same GPU without it, utilisation, mode-switch overhead and
DRAM-side energy per token (internal against external). Figures are data in
`RunResult.extra["pim"]`; `report_sections` turns them into sections."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hw_models.base import Section
from hw_models.pim.config import Geometry, PimConfig
from hw_models.pim.pipeline import PIM as PIM_PART
from hw_models.pim.plan import Allocation, Decision
from sim.core.engine import Timeline
from sim.core.generation import Generation
from sim.core.results import RunResult
from sim.core.units import fmt_bytes, fmt_time


def step_breakdown(tl: Timeline, j_per_byte: float) -> dict[str, float]:
    """Per decode step: PIM busy seconds, mode-switch seconds, streamed bytes, DRAM energy split (a host op's
    bytes over the pins at `j_per_byte`, the tier's; its FLOPs' energy is the host's, not the DRAM's)."""
    out = dict(pim_busy_s=0.0, mode_switch_s=0.0, stream_bytes=0.0, e_int_j=0.0, e_ext_j=0.0, e_mac_j=0.0)
    for i in tl.intervals:
        c = i.tag
        if hasattr(c, "stream_bytes"):
            out["pim_busy_s"] += i.duration_s
            out["mode_switch_s"] += c.mode_switch_s
            out["stream_bytes"] += c.stream_bytes
            out["e_int_j"] += c.energy_internal_j
            out["e_ext_j"] += c.energy_external_j
            out["e_mac_j"] += c.energy_mac_j
        elif (op := getattr(c, "op", None)) is not None:
            out["e_ext_j"] += op.bytes * j_per_byte
    return out


def schedule_line(cfg, decisions: list["Decision"], batch: int) -> str:
    parts = []
    if cfg.head_groups > 1:
        parts.append(f"attention blocks pipelined in {cfg.head_groups} head groups (AttAcc --pipeopt)")
    if cfg.gemm_sharing:
        split = [d.op for d in decisions if d.op.name.endswith(PIM_PART)]
        per_layer = sum(op.layer is not None for op in split)
        others = ", ".join(op.name.removesuffix(PIM_PART) for op in split if op.layer is None)
        parts.append(f"GEMM sharing (AttAcc --ffopt): {per_layer} GEMM(s) per layer split by columns host/PIM"
                     + (f", and {others}" if others else ""))
    if cfg.sub_batches > 1:   # a decode batch splits into at most one sequence each (PimMapper.sub_batch_sizes)
        n = min(cfg.sub_batches, batch)
        parts.append(f"{n} interleaved sub-batches (NeuPIMs)" if n > 1 else
                     f"sub_batches {cfg.sub_batches}: a batch of 1 does not split, so nothing interleaves")
    return "; ".join(parts) or "serial (one op chain, no overlap schedule)"


def placement(decisions: list[Decision]) -> dict[str, dict[str, Any]]:
    """Where each op of one layer's decode step ran, with both predictions."""
    return {d.op.base_name: dict(kind=d.op.kind, where=d.where, stacks=len(d.pieces), why=d.why,
                                 host_s=d.host.duration_s, pim_s=d.pim_s) for d in decisions}


def pim_metrics(tl: Timeline, decisions: list[Decision], cfg: PimConfig, geo: Geometry, batch: int,
                j_per_byte: float) -> dict[str, float]:
    """Figures of the representative decode step with PIM."""
    span = tl.makespan_s
    b = step_breakdown(tl, j_per_byte)
    S = cfg.stacks
    return {
        "pim.utilization": b["pim_busy_s"] / (S * span) if span else 0.0,
        "pim.internal_bw_utilization": b["stream_bytes"] / (S * geo.internal_bytes_per_s * span) if span else 0.0,
        "pim.mode_switch_s_per_step": b["mode_switch_s"] / S,
        "pim.dram_energy_internal_j_per_token": b["e_int_j"] / batch,
        "pim.dram_energy_external_j_per_token": b["e_ext_j"] / batch,
        "pim.mac_energy_j_per_token": b["e_mac_j"] / batch,
        "pim.ops_on_pim_per_layer": float(sum(d.where == "pim" and d.op.layer is not None for d in decisions)),
    }


def baseline_metrics(gen: Generation, base: Generation, base_tl: Timeline, batch: int, j_per_byte: float
                     ) -> dict[str, float]:
    """What PIM saved against the same GPU without it (policy none)."""
    tpot, tpot0 = gen.tpot(), base.tpot()
    b0 = step_breakdown(base_tl, j_per_byte)
    return {"pim.tpot_no_pim_s": tpot0, "pim.speedup_tpot": tpot0 / tpot if tpot else 0.0,
            "pim.e2e_saved_s": base.e2e_s - gen.e2e_s, "pim.ttft_no_pim_s": base.prefill.time_s,
            "pim.dram_energy_no_pim_j_per_token": (b0["e_int_j"] + b0["e_ext_j"]) / batch}


def summary(cfg: PimConfig, geo: Geometry, policy: str, schedule: str, tier_energy_j_per_byte: float) -> dict:
    """The machine's side of the summary (what the report says about PIM whatever the run)."""
    ext = geo.stack_external_bytes_per_s
    return dict(
        geometry=(f"{cfg.stacks} stacks x {cfg.pseudo_channels_per_stack} pseudo-channels x "
                  f"{cfg.units_per_pseudo_channel} units ({cfg.placement}), {cfg.simd_lanes} lanes @ "
                  f"{cfg.clock_hz / 1e6:.0f} MHz; {'dual row buffer' if cfg.dual_row_buffer else 'blocked mode'}"),
        bandwidth=(f"internal {geo.internal_bytes_per_s / 1e9:.0f} GB/s vs pins {ext / 1e9:.0f} GB/s "
                   f"({geo.internal_bytes_per_s / ext:.2f}x); row open exposed "
                   f"{geo.exposed_row_open_s * 1e9:.1f} ns per {cfg.row_bytes:.0f} B row"),
        policy=policy, schedule=schedule,
        energy_per_bit=(f"{cfg.energy_internal_j_per_byte * 1e12 / 8:.2f} vs "
                        f"{tier_energy_j_per_byte * 1e12 / 8:.2f} pJ/bit"),
        mac_energy=f"{cfg.energy_j_per_flop * 1e12:.2f} pJ/FLOP, Horowitz ISSCC 2014 45 nm fp16 MAC")


def report_sections(result: RunResult) -> list[Section]:
    pim = result.extra.get("pim")
    if not pim:
        return []
    layers = result.model["num_layers"]
    rows = [(op, p["kind"], f"PIM x{p['stacks']} stacks" if p["where"] == "pim" else "host", fmt_time(p["host_s"]),
             fmt_time(p["pim_s"]) if p["pim_s"] is not None else "-", p["why"]) for op, p in pim["placement"].items()]
    placement_section = Section(
        f"PIM placement, one decode step (kv_len {result.decode_kv_len}); layer ops repeat x{layers}", rows,
        ("op", "kind", "ran on", "host (pred.)", "PIM (pred.)", "why"))
    summary = _summary_rows(result, pim["metrics"], pim["summary"])
    if not any(p["where"] == "pim" for p in pim["placement"].values()):   # say why once, not only per op above
        whys = Counter(p["why"] for p in pim["placement"].values())
        summary.insert(0, ("PIM unused", "no op of the step ran on the PIM units: " + "; ".join(
            f"{why} ({n} op{'s' if n > 1 else ''})" for why, n in whys.most_common(3))))
    return [placement_section, Section("PIM", summary)]


def _summary_rows(result: RunResult, x: dict[str, float], s: dict[str, str]) -> list[tuple[str, str]]:
    span = result.decode_timeline.makespan_s
    rows = [("geometry", s["geometry"]), ("bandwidth per stack", s["bandwidth"]), ("policy", s["policy"]),
            ("decode schedule", s["schedule"])]
    if "pim.tpot_no_pim_s" in x:
        t0 = x["pim.tpot_no_pim_s"]
        # gen_len 1 has no decode step: its TPOT is nan (an architecture trial read "nan us / 0.00 us")
        rows += [("TPOT with / without PIM", f"{fmt_time(result.tpot_s)} / {fmt_time(t0)} "
                  f"({x['pim.speedup_tpot']:.2f}x, saves {fmt_time(t0 - result.tpot_s)} per token step)"
                  if result.tpot_s == result.tpot_s else "- (no decode step: gen_len 1)"),
                 # prefill too runs a step's PIM-eligible ops there (the residual adds, lm_head's GEMV at batch 1:
                 # each step is placed apart, docs/pim.md), which an architecture trial found nowhere in the report
                 *([("TTFT with / without PIM", f"{fmt_time(result.ttft_s)} / {fmt_time(x['pim.ttft_no_pim_s'])} "
                     "(the prefill step placed apart: its small-M ops may run on PIM)")] if "pim.ttft_no_pim_s" in x
                   else []),
                 ("end-to-end with / without", f"{fmt_time(result.e2e_s)} / "
                  f"{fmt_time(result.e2e_s + x['pim.e2e_saved_s'])}")]
    rows += [("PIM utilisation (decode step)", f"stacks busy {100 * x['pim.utilization']:.0f}%, internal bandwidth "
              f"{100 * x['pim.internal_bw_utilization']:.0f}%"),
             ("mode switches per step", f"{fmt_time(x['pim.mode_switch_s_per_step'])} per stack "
              f"({100 * x['pim.mode_switch_s_per_step'] / span:.1f}% of the step)" if span else "-")]
    energy = (f"internal {x['pim.dram_energy_internal_j_per_token'] * 1e3:.1f} mJ + "
              f"external {x['pim.dram_energy_external_j_per_token'] * 1e3:.1f} mJ")
    if "pim.dram_energy_no_pim_j_per_token" in x:
        energy += f"; without PIM {x['pim.dram_energy_no_pim_j_per_token'] * 1e3:.1f} mJ"
    # The PIM units' arithmetic (issue 33): no measurement is published; PimConfig.energy_j_per_flop is a
    # logic-process figure (lower bound), 3x it the upper bound we print beside it.
    mac = x.get("pim.mac_energy_j_per_token", 0.0)
    return rows + [("DRAM energy per token", f"{energy} ({s['energy_per_bit']})"),
                   ("PIM arithmetic energy", f"{mac * 1e3:.2f} mJ per token ({s['mac_energy']}; up to "
                                             f"{3 * mac * 1e3:.2f} mJ at 3x for DRAM-process logic)"),
                   # an energy trial read most of PIM's J/token saving as the host's activity power going away
                   ("PIM units' own power", "not modelled: they draw their per-byte and per-FLOP energy alone, no "
                                            "static or activity power, while the host's board draws its activity "
                                            "power only while busy (docs/pim.md)")]


def reach_note(alloc: "Allocation | None") -> str | None:
    """The note of a run whose PIM-placed weights and KV cache outgrow the bytes its PIM units reach
    (pim.pim_capacity_bytes_per_stack x stacks), or None: what moved to the host (hw_models.pim.reach)."""
    if alloc is None or alloc.fits:
        return None
    moved = sorted(alloc.host)
    if alloc.split:
        moved.append(f"{1 - alloc.split[1] / alloc.split[2]:.0%} of {alloc.split[0]}")
    return (f"pim: the ops placed on PIM read {fmt_bytes(alloc.placed_bytes)} of weights and KV cache, but the PIM "
            f"units reach {fmt_bytes(alloc.reach_bytes)} (pim.pim_capacity_bytes_per_stack x stacks; the rest of "
            f"each stack is dies without PIM units): {fmt_bytes(alloc.moved_bytes)} runs on the host from those "
            f"dies ({', '.join(moved)}; the PIM dies hold the data that gains most per byte)")

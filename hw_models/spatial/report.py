"""The spatial figures and report sections of a run: chips used and needed, the
pipeline's decode period and bubble, utilisation per chip (or tensor-parallel
group), collectives and energy. Built as data at run time (RunResult.extra
["spatial"]); `report_sections` turns them into sections."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hw_models.base import Section
from hw_models.spatial.partition import PhaseCosts, stage_name
from sim.core.results import RunResult
from sim.core.units import fmt_bytes, fmt_rate, fmt_time

if TYPE_CHECKING:   # annotations only: the mapper imports this module
    from hw_models.spatial.mapper import SpatialMapper


def metrics(mapper: "SpatialMapper", part, dec: PhaseCosts, util: dict, tok_user: float) -> dict[str, float]:
    w = mapper.workload
    return {
        "spatial.chips": float(part.chips), "spatial.chips_needed": float(part.needed),
        "spatial.layers_per_chip": mapper.model.num_layers / part.chips,
        "spatial.bubble_fraction": util["bubble"],
        "spatial.tok_s_per_user": tok_user, "spatial.tok_s_aggregate": w.batch * tok_user,
        "spatial.decode_latency_s": dec.latency_s,
        "spatial.util.compute_mean": util["compute_mean"], "spatial.util.sram_bw_mean": util["sram_mean"],
        "spatial.util.link_mean": util["link_mean"], "spatial.util.compute_max": util["compute_max"],
        "spatial.util.sram_bw_max": util["sram_max"], "spatial.util.link_max": util["link_max"],
        "spatial.tensor_parallel": float(part.tensor_parallel), "spatial.groups": float(part.stages),
        "spatial.stage_s_mean": sum(dec.stage_s) / part.stages,
        "spatial.collective_s_per_token": sum(dec.collective_s),
    }


def summary_rows(mapper: "SpatialMapper", dec: PhaseCosts, period: float, util: dict, tok_user: float,
                 power: float | None, energy_per_token: float) -> list[tuple[str, str]]:
    w, cfg, part = mapper.workload, mapper.cfg, mapper.partition
    t, n = part.tensor_parallel, part.stages
    slow = max(range(n), key=lambda j: dec.stage_s[j])
    per = "chip" if t == 1 else "group"
    kv_where = "SRAM" if cfg.kv_cache == "sram" else f"{cfg.dram_tier} (spilled, read at its bandwidth)"
    layers = mapper.model.num_layers / n
    return [
        ("chips used / needed", f"{part.chips} / {part.needed} "
         f"({fmt_bytes(part.capacity_per_chip_bytes)} usable SRAM each, activation buffer "
         f"{fmt_bytes(part.activation_buffer_bytes)})"),
        ("resident bytes", f"weights {fmt_bytes(sum(part.weight_bytes))}, KV cache "
         f"{fmt_bytes(sum(part.kv_sram_bytes) + sum(part.kv_dram_bytes))} in {kv_where}"),
        (f"layers per {per}", f"{layers:.3g} on average ({1 / max(part.layer_equivalents):.2f} {per}s per layer)"
         if max(part.layer_equivalents) < 1 else f"{layers:.3g} on average"),
        *tp_rows(mapper, dec),
        ("links per hop", f"{cfg.links_per_hop} x {cfg.links.bandwidth_bytes_per_s / 1e9:.1f} GB/s, "
         f"{fmt_time(cfg.links.latency_s)} per hop"),
        ("micro-batches", f"{mapper.microbatches} of {mapper.mb_size} sequence(s) in decode; prefill chunks of "
         f"{mapper.chunk} tokens"),
        ("decode token latency", f"{fmt_time(dec.latency_s)} = stages {fmt_time(sum(dec.stage_s))} + "
         f"{len(dec.hop_s)} hops {fmt_time(sum(dec.hop_s))} + return {fmt_time(dec.return_s)}"),
        ("decode period", f"{fmt_time(period)} (slowest stage {stage_name(slow, t)}: {fmt_time(dec.stage_s[slow])})"),
        ("decode tokens/s per user / aggregate", f"{fmt_rate(tok_user)} / {fmt_rate(w.batch * tok_user)} (1 / the "
         "decode period, prefill not included)"),
        ("pipeline bubble fraction", f"{100 * util['bubble']:.1f}%"),
        ("utilization (mean / max chip)",
         f"compute ({mapper.matmul_path().fmt} peak) {100 * util['compute_mean']:.2f}% / "
         f"{100 * util['compute_max']:.2f}%, SRAM bandwidth {100 * util['sram_mean']:.2f}% / "
         f"{100 * util['sram_max']:.2f}%, links {100 * util['link_mean']:.2f}% / {100 * util['link_max']:.2f}%"),
        ("energy per token", f"{energy_per_token:.3f} J ({part.chips} chips x {power:.0f} W)" if power
         else "n/a (no power figure in the preset)"),
    ]


def stage_rows(mapper: "SpatialMapper", dec: PhaseCosts, util: dict) -> list[tuple[str, ...]]:
    """A sample of chips (or groups): the first two, the middle, the slowest, the last two."""
    part = mapper.partition
    t, n = part.tensor_parallel, part.stages
    slow = max(range(n), key=lambda j: dec.stage_s[j])
    rows = []
    for j in sorted({0, 1, n // 2, slow, n - 2, n - 1} & set(range(n))):
        row = part.slices[j]
        holds = row[0].op_name if len(row) == 1 else f"{row[0].op_name} .. {row[-1].op_name}"
        u = util["per_chip"][j]
        rows.append((f"{j}", holds, f"{part.layer_equivalents[j]:.2f}",
                     fmt_bytes((part.weight_bytes[j] + part.kv_sram_bytes[j]) / t), fmt_time(dec.stage_s[j]),
                     fmt_time(dec.hop_s[j]) if j < len(dec.hop_s) else "-", f"{100 * u['busy']:.1f}%",
                     f"{100 * u['compute']:.1f}%", f"{100 * u['sram']:.1f}%", f"{100 * u['link']:.2f}%"))
    return rows


def tp_rows(mapper: "SpatialMapper", dec: PhaseCosts) -> list[tuple[str, str]]:
    """Report rows of tensor parallelism (none at t = 1)."""
    cfg, part = mapper.cfg, mapper.partition
    t, n = part.tensor_parallel, part.stages
    if t == 1:
        return []
    kinds: dict[str, int] = {}
    for row in dec.collectives:
        for _, c in row:
            kinds[c.kind] = kinds.get(c.kind, 0) + 1
    counts = ", ".join(f"{v} {k.replace('_', '-')}s" for k, v in sorted(kinds.items()))
    return [
        ("tensor parallel", f"degree {t}: {n} groups of {t} chips, the pipeline runs over the groups; "
         f"{cfg.tensor_parallel_links_per_peer} link(s) to each peer in a group"),
        ("per-group stage time", f"mean {fmt_time(sum(dec.stage_s) / n)}, max {fmt_time(max(dec.stage_s))} "
         f"(collectives included)"),
        ("collectives per token", f"{fmt_time(sum(dec.collective_s))} ({counts}) of the stages' "
         f"{fmt_time(sum(dec.stage_s))}"),
    ]


def report_sections(result: RunResult) -> list[Section]:
    sp = result.extra.get("spatial")
    if not sp:
        return []
    t = sp["tensor_parallel"]
    per = "chip" if t == 1 else "group"
    title = ("Per chip (decode steady state; a sample of chips)" if t == 1 else
             f"Per group of {t} chips (decode steady state; per-chip figures; a sample of groups)")
    return [Section(f"Spatial pipeline ({result.hardware})", sp["summary"]),
            Section(title, sp["stages"], (per, "holds", "layers", "SRAM used", "stage", "hop out", "busy",
                                          "compute", "SRAM BW", "link"))]

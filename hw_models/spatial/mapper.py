"""Spatial dataflow machines (Groq LPU, Graphcore IPU): weights resident in
on-chip SRAM across many chips, layers pipelined from chip to chip.

* Mapping (hw_models.spatial.mapping): the op stream is cut into contiguous,
  equal-byte pieces, one per chip; too few chips is a CapacityError naming the
  count needed.
* Timing: static. An op slice takes max(PE-array tiling time, SRAM time) on its
  chip; a chip's stage time is the sum of its slices (one instruction stream);
  a hop moves the live activations over the bonded C2C links.
* Tensor parallelism (hw_models.spatial.tp, spatial.tensor_parallel = t):
  chips form groups of t that split each layer Megatron-style; the pipeline
  runs over the groups and a group's stage time includes its collectives.
* Engine (hw_models.spatial.pipeline): chips and hops are resources, prefill
  chunks and decode micro-batches flow through them; decode is a closed loop
  (a sequence's next token waits for its previous one).

The preset's top-level `memory` tier is ONE chip's SRAM and its unit is ONE
chip; the `spatial:` section (hw_models.spatial.config) adds the chip count,
PE array, links and topology.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cached_property

import numpy as np
from rich.table import Table

from hw_models.base import Mapper
from hw_models.spatial.config import SpatialConfig, spatial_config
from hw_models.spatial.mapping import (ChipModel, Partition, PhaseCosts, activation_buffer, partition,
                                   phase_costs, stage_name)
from hw_models.spatial.tp import check_model
from hw_models.spatial.pipeline import StationTag, decode_period_s, prefill_makespan_s
from sim.core import engine
from sim.core.engine import Task, Timeline
from sim.core.errors import CapacityError
from sim.core.footprint import Footprint
from sim.core.lowering import lower
from sim.core.results import RunResult, op_records
from sim.core.generation import DECODE_SAMPLES, decode_kv_lens, sample_indices
from sim.core.units import fmt_bytes, fmt_time
from sim.core.workload import check_context


class SpatialMapper(Mapper):
    kind = "spatial"

    def __init__(self, machine, workload, model):
        super().__init__(machine, workload, model)
        self.cfg: SpatialConfig = spatial_config(machine)
        check_model(model, self.cfg, machine.source or machine.name)
        self.chip = ChipModel(machine, self.cfg, workload.compute)
        w = workload
        self.mb_size = min(self.cfg.microbatch_size, w.batch)
        self.microbatches = math.ceil(w.batch / self.mb_size)   # a partial one is padded (static schedule)
        self.chunk = min(self.cfg.prefill_chunk_tokens, w.prompt_len)
        self.chunks_per_seq = math.ceil(w.prompt_len / self.chunk)
        self.context = w.prompt_len + w.gen_len

    # -- graphs --------------------------------------------------------------
    def decode_graph(self, kv_len: int):
        return lower(self.model, "decode", self.mb_size, 1, kv_len, self.formats, self.workload.flash_attention)

    def prefill_graph(self):
        # Chunk j of n attends to (j + 1) * chunk keys; every chunk is costed at
        # the mean, chunk * (n + 1) / 2, so total attention work is exact and all
        # chunks are alike (a static schedule compiles one chunk shape).
        kv = min(self.context, round(self.chunk * (self.chunks_per_seq + 1) / 2))
        return lower(self.model, "prefill", 1, self.chunk, kv, self.formats, self.workload.flash_attention)

    # -- mapping -------------------------------------------------------------
    @cached_property
    def partition(self) -> Partition:
        w, cfg = self.workload, self.cfg
        act = max(activation_buffer(self.decode_graph(self.context)), activation_buffer(self.prefill_graph()))
        chips = None if cfg.chips == "auto" else cfg.chips
        part = partition(self.model, self.formats, self.machine, cfg, w.batch, self.context, act, chips,
                         w.flash_attention)
        src = self.machine.source or self.machine.name
        what = (f"{self.model.name} ({w.formats.weights} weights, KV {w.formats.kv_cache} in {cfg.kv_cache}, "
                f"batch {w.batch}, {w.prompt_len}+{w.gen_len} tokens)")
        if part.needed == math.inf:
            raise CapacityError(
                f"{src}: spatial: {what}: the activation buffer ({fmt_bytes(act)}) fills a chip's usable SRAM "
                f"({fmt_bytes(part.capacity_per_chip_bytes)}); lower spatial.prefill_chunk_tokens or microbatch_size")
        if chips is not None and chips < part.needed:
            t = cfg.tensor_parallel
            groups = f" in groups of {t} (spatial.tensor_parallel)" if t > 1 else ""
            raise CapacityError(
                f"{src}: spatial.chips: {what} needs {part.needed} chips of {fmt_bytes(part.capacity_per_chip_bytes)} "
                f"usable SRAM{groups} but spatial.chips is {chips}; set --set hw.spatial.chips={part.needed} "
                f"(or auto)")
        if cfg.kv_cache == "dram":
            need = max(part.kv_dram_bytes)
            have = self.machine.memory[cfg.dram_tier].capacity_bytes
            if need > have:
                raise CapacityError(f"{src}: memory.{cfg.dram_tier}: {what} spills {fmt_bytes(need)} of KV cache "
                                    f"per chip but each chip's {cfg.dram_tier} holds {fmt_bytes(have)}")
        return part

    def footprint(self) -> Footprint:
        """Bytes on the fullest chip (every chip holds about the same; the
        chips of a tensor-parallel group hold 1/t of its stage each)."""
        p = self.partition
        t = p.tensor_parallel
        j = max(range(p.stages), key=lambda c: p.weight_bytes[c] + p.kv_sram_bytes[c])
        fp = Footprint()
        tier = self.machine.device_tier
        fp.add(tier, "weights", p.weight_bytes[j] / t)
        fp.add(tier, "kv_cache", p.kv_sram_bytes[j] / t)
        fp.add(tier, "activations", p.activation_buffer_bytes)
        if self.cfg.kv_cache == "dram":
            fp.add(self.cfg.dram_tier, "kv_cache", max(p.kv_dram_bytes) / t)
        return fp

    def plan_step(self, graph) -> list[Task]:
        """The static schedule of one micro-batch of `graph` (lowered with all
        layers) through the pipeline, op slice by op slice."""
        if graph.dag.number_of_nodes() != self._ops_in_model:
            raise ValueError("a spatial mapper schedules whole-model graphs only (no layer folding): "
                             "its chips hold fixed slices of the full op stream")
        return self.schedule_tasks(phase_costs(graph, self.partition, self.chip, 0))

    @cached_property
    def _ops_in_model(self) -> int:
        return len(self.decode_graph(1))

    def schedule_tasks(self, costs: PhaseCosts) -> list[Task]:
        tasks: list[Task] = []
        prev: str | None = None

        def add(tid: str, res: str, duration: float, tag) -> None:
            nonlocal prev
            tasks.append(Task(tid, res, duration, (prev,) if prev else (), tag=tag))
            prev = tid

        for j, row in enumerate(costs.slice_costs):
            res = stage_name(j, costs.tensor_parallel)
            colls = costs.collectives[j] if costs.collectives else []
            for _, c in (x for x in colls if x[0] < 0):
                add(f"{c.name}@{res}", res, c.duration_s, c)
            for i, c in enumerate(row):
                add(f"{c.op.name}@{res}", res, c.duration_s, c)
                for _, cc in (x for x in colls if x[0] == i):
                    add(f"{cc.name}@{res}", res, cc.duration_s, cc)
            if j < len(costs.hop_s):
                add(f"c2c{j}", f"c2c{j}", costs.hop_s[j], StationTag("transfer", costs.hop_bytes[j]))
        return tasks

    def _schedule(self, costs: PhaseCosts) -> Timeline:
        return engine.run(self.schedule_tasks(costs))

    # -- simulation ----------------------------------------------------------
    def decode_costs(self, kv_len: int) -> PhaseCosts:
        return phase_costs(self.decode_graph(kv_len), self.partition, self.chip, self.mb_size)

    def prefill_costs(self) -> PhaseCosts:
        return phase_costs(self.prefill_graph(), self.partition, self.chip, 0)

    def decode_step_s(self, kv_len: int, exhaustive: bool = False) -> float:
        return decode_period_s(self.decode_costs(kv_len).stations(), self.microbatches, exhaustive)

    def simulate(self, exhaustive: bool = False, detail: bool = True) -> RunResult:
        """`detail=False` (sweeps) skips the op-level schedules of the report."""
        w, m, machine = self.workload, self.model, self.machine
        notes = check_context(w, m)
        fp = self.footprint()
        part = self.partition

        pre = self.prefill_costs()
        ttft = prefill_makespan_s(pre.stations(), w.batch * self.chunks_per_seq, exhaustive)
        kv = decode_kv_lens(w.prompt_len, w.gen_len)
        idx = np.arange(len(kv)) if exhaustive else sample_indices(len(kv), DECODE_SAMPLES)
        sampled = [self.decode_step_s(int(kv[i]), exhaustive) for i in idx]
        times = np.interp(np.arange(len(kv)), idx, sampled) if len(kv) else np.zeros(0)
        e2e = ttft + float(times.sum())

        rep_kv = int(kv[len(kv) // 2]) if len(kv) else w.prompt_len
        dec = self.decode_costs(rep_kv)
        period = self.decode_step_s(rep_kv, exhaustive)
        decode_tl = self._schedule(dec) if detail else Timeline()
        prefill_tl = self._schedule(pre) if detail else Timeline()
        util = self._utilization(dec, period)

        tokens = w.batch * w.gen_len
        power = machine.units[machine.main_unit].power_w
        static_j = (power or 0.0) * part.chips * e2e
        # SRAM/DRAM energy per byte, where the preset gives it: prefill once, decode per step and micro-batch;
        # slice costs are one chip's, and each of a group's t chips spends it.
        dyn_j = (sum(c.energy_j for row in pre.slice_costs for c in row) * w.batch * self.chunks_per_seq
                 + sum(c.energy_j for row in dec.slice_costs for c in row) * self.microbatches * len(kv)
                 ) * part.tensor_parallel
        energy_per_token = (static_j + dyn_j) / tokens
        tok_user = 1.0 / period if period else 0.0
        metrics = {
            "spatial.chips": float(part.chips), "spatial.chips_needed": float(part.needed),
            "spatial.layers_per_chip": m.num_layers / part.chips,
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
        if power:
            metrics["spatial.energy_per_token_j"] = energy_per_token
        result = RunResult(
            workload=w.name, hardware=machine.name, model=m.to_dict(), params=m.params(),
            batch=w.batch, prompt_len=w.prompt_len, gen_len=w.gen_len, formats=w.formats.model_dump(),
            ttft_s=ttft, tpot_s=float(times.mean()) if len(times) else 0.0,
            tpot_first_s=float(times[0]) if len(times) else 0.0,
            tpot_last_s=float(times[-1]) if len(times) else 0.0,
            e2e_s=e2e, throughput_tok_s=tokens / e2e if e2e else 0.0,
            peak_memory_bytes={t: fp.total(t) for t in fp.tiers}, memory_by_role=fp.tiers,
            # Decode steady state, means over chips (per chip: extra["spatial"]["utilization"]).
            utilization={"chips.busy": 1 - util["bubble"], "chips.compute": util["compute_mean"],
                         "chips.sram_bw": util["sram_mean"], "c2c": util["link_mean"]},
            energy_per_token_j=energy_per_token,
            prefill_ops=_records(prefill_tl), decode_ops=_records(decode_tl), decode_kv_len=rep_kv,
            prefill_timeline=prefill_tl, decode_timeline=decode_tl, notes=notes,
            simulated_steps=1 + len(idx), exhaustive=exhaustive)
        result.extra["spatial"] = dict(
            chips=part.chips, chips_needed=part.needed, layers_per_chip=part.layer_equivalents,
            stage_s=dec.stage_s, hop_s=dec.hop_s, return_s=dec.return_s, decode_period_s=period,
            tensor_parallel=part.tensor_parallel, groups=part.stages, collective_s=dec.collective_s,
            microbatches=self.microbatches, microbatch_size=self.mb_size, utilization=util["per_chip"])
        result.extra["metrics"] = metrics
        result.extra["report"] = self._report(part, dec, period, util, tok_user, power, energy_per_token)
        return result

    def matmul_path(self):
        """How the workload's weight GEMMs run on a chip (format, rate, dequantization)."""
        return self.chip.gemm_path(self.formats.weights, self.formats.activations)

    def _utilization(self, dec: PhaseCosts, period: float) -> dict:
        """Decode steady state: each chip works m times per period (m micro-batches).
        Compute is against the peak of the format the matmuls run in (fp16 mode for
        int8 weights x fp16 activations), not the array's native format. Per
        pipeline stage: with tensor parallelism the t chips of a group are alike."""
        mb, n = self.microbatches, self.partition.stages
        peak = self.matmul_path().rate_flops_per_s
        bw = self.chip.sram.bandwidth_bytes_per_s
        per_chip = []
        for j in range(n):
            per_chip.append(dict(
                busy=mb * dec.stage_s[j] / period,
                compute=mb * dec.flops[j] / (peak * period),
                sram=mb * dec.sram_bytes[j] / (bw * period),
                link=mb * dec.hop_s[j] / period if j < len(dec.hop_s) else 0.0))
        mean = lambda key: sum(c[key] for c in per_chip) / n  # noqa: E731
        links = [c["link"] for c in per_chip[:-1]] or [0.0]
        return dict(per_chip=per_chip, bubble=1 - mean("busy"), compute_mean=mean("compute"),
                    sram_mean=mean("sram"), link_mean=sum(links) / len(links),
                    compute_max=max(c["compute"] for c in per_chip), sram_max=max(c["sram"] for c in per_chip),
                    link_max=max(links))

    def _report(self, part: Partition, dec: PhaseCosts, period: float, util: dict, tok_user: float,
                power: float | None, energy_per_token: float) -> list:
        w, cfg = self.workload, self.cfg
        t, n = part.tensor_parallel, part.stages
        slow = max(range(n), key=lambda j: dec.stage_s[j])
        per = "chip" if t == 1 else "group"
        summary = Table(title=f"Spatial pipeline ({self.machine.name}, {cfg.topology})", show_header=False,
                        title_justify="left", box=None, padding=(0, 2))
        summary.add_column(style="bold")
        summary.add_column()
        kv_where = "SRAM" if cfg.kv_cache == "sram" else f"{cfg.dram_tier} (spilled, read at its bandwidth)"
        for k, v in [
            ("chips used / needed", f"{part.chips} / {part.needed} "
             f"({fmt_bytes(part.capacity_per_chip_bytes)} usable SRAM each, activation buffer "
             f"{fmt_bytes(part.activation_buffer_bytes)})"),
            ("resident bytes", f"weights {fmt_bytes(sum(part.weight_bytes))}, KV cache {fmt_bytes(sum(part.kv_sram_bytes) + sum(part.kv_dram_bytes))} in {kv_where}"),
            (f"layers per {per}", f"{self.model.num_layers / n:.3g} on average "
             f"({1 / max(part.layer_equivalents):.2f} {per}s per layer)" if max(part.layer_equivalents) < 1
             else f"{self.model.num_layers / n:.3g} on average"),
            *self._tp_rows(dec),
            ("links per hop", f"{cfg.links_per_hop} x {cfg.links.bandwidth_bytes_per_s / 1e9:.1f} GB/s, "
             f"{fmt_time(cfg.links.latency_s)} per hop"),
            ("micro-batches", f"{self.microbatches} of {self.mb_size} sequence(s) in decode; prefill chunks of "
             f"{self.chunk} tokens"),
            ("decode token latency", f"{fmt_time(dec.latency_s)} = stages {fmt_time(sum(dec.stage_s))} + "
             f"{len(dec.hop_s)} hops {fmt_time(sum(dec.hop_s))} + return {fmt_time(dec.return_s)}"),
            ("decode period", f"{fmt_time(period)} (slowest stage {stage_name(slow, t)}: "
             f"{fmt_time(dec.stage_s[slow])})"),
            ("tokens/s per user / aggregate", f"{tok_user:,.1f} / {w.batch * tok_user:,.1f}"),
            ("pipeline bubble fraction", f"{100 * util['bubble']:.1f}%"),
            ("utilization (mean / max chip)",
             f"compute ({self.matmul_path().fmt} peak) {100 * util['compute_mean']:.2f}% / "
             f"{100 * util['compute_max']:.2f}%, SRAM bandwidth "
             f"{100 * util['sram_mean']:.2f}% / {100 * util['sram_max']:.2f}%, links {100 * util['link_mean']:.2f}% / "
             f"{100 * util['link_max']:.2f}%"),
            ("energy per token", f"{energy_per_token:.3f} J ({part.chips} chips x {power:.0f} W)" if power
             else "n/a (no power figure in the preset)"),
        ]:
            summary.add_row(k, v)
        title = ("Per chip (decode steady state; a sample of chips)" if t == 1 else
                 f"Per group of {t} chips (decode steady state; per-chip figures; a sample of groups)")
        chips = Table(title=title, title_justify="left")
        for col in (per, "holds", "layers", "SRAM used", "stage", "hop out", "busy", "compute", "SRAM BW", "link"):
            chips.add_column(col, justify="left" if col in (per, "holds") else "right")
        shown = sorted({0, 1, n // 2, slow, n - 2, n - 1} & set(range(n)))
        for j in shown:
            row = part.slices[j]
            holds = row[0].op_name if len(row) == 1 else f"{row[0].op_name} .. {row[-1].op_name}"
            u = util["per_chip"][j]
            chips.add_row(f"{j}", holds, f"{part.layer_equivalents[j]:.2f}",
                          fmt_bytes((part.weight_bytes[j] + part.kv_sram_bytes[j]) / t), fmt_time(dec.stage_s[j]),
                          fmt_time(dec.hop_s[j]) if j < len(dec.hop_s) else "-", f"{100 * u['busy']:.1f}%",
                          f"{100 * u['compute']:.1f}%", f"{100 * u['sram']:.1f}%", f"{100 * u['link']:.2f}%")
        return [summary, chips]

    def _tp_rows(self, dec: PhaseCosts) -> list[tuple[str, str]]:
        """Report rows of tensor parallelism (none at t = 1)."""
        cfg, part = self.cfg, self.partition
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


def _records(tl: Timeline):
    """Op records with the '@chipN' suffix dropped, so split ops aggregate by name."""
    return [replace(r, name=r.name.split("@", 1)[0]) for r in op_records(tl)]


MAPPER = SpatialMapper

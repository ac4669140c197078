"""Spatial dataflow machines (Groq LPU, Graphcore IPU): weights resident in
on-chip SRAM across many chips, layers pipelined from chip to chip.

* Partition (hw_models.spatial.partition): the op stream is cut into contiguous,
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
from functools import cached_property

from hw_models.base import DeviceShare, Mapper
from hw_models.power import Board, busy_time_note
from hw_models.spatial.config import SpatialConfig, spatial_config
from hw_models.spatial.partition import (ChipModel, Partition, PhaseCosts, activation_buffer,
                                         partition, phase_costs, stage_name)
from hw_models.spatial import report
from hw_models.spatial.tp import check_model
from hw_models.pipeline_period import iteration_period_s
from hw_models.spatial.pipeline import StationTag, decode_period_s, prefill_makespan_s
from sim.core import engine
from sim.core.engine import Task, Timeline
from sim.core.errors import CapacityError, ConfigError
from sim.core.footprint import Footprint
from sim.core.lowering import lower
from sim.core.generation import Generation, RunFigures
from sim.core.results import StepResult
from sim.core.units import fmt_bytes


def chunk_context(prefix: int, chunk: int, chunks: int, cap: int) -> int:
    """The keys each of a prompt's `chunks` compiled chunks is costed at: chunk j of n after `prefix`
    cached tokens attends to prefix + (j + 1) x chunk keys; every chunk at the mean, prefix + chunk x
    (n + 1) / 2 (at most `cap`), so the total attention work is exact and the chunks are alike (a static
    schedule compiles one chunk shape)."""
    return min(cap, round(prefix + chunk * (chunks + 1) / 2))


class SpatialMapper(Mapper):
    kind = "spatial"
    caps_whole_steps = False   # no board power limit on a chip pipeline's iteration
    serving_speculative_why = ("a draft model would need chips of its own (its weights resident in SRAM beside the "
                               "target's, its own pipeline), and the spatial kind places one model over its chips; "
                               "serve the draft and target as separate runs to compare them")

    def __init__(self, machine, workload, model):
        super().__init__(machine, workload, model)
        self.cfg: SpatialConfig = spatial_config(machine)
        check_model(model, self.cfg, machine.source or machine.name)
        _no_board_limits(machine)
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
        kv = chunk_context(0, self.chunk, self.chunks_per_seq, self.context)
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
        fp.scope = (f"one chip, the fullest ({stage_name(j, t)} of {p.chips}); all chips together hold weights "
                    f"{fmt_bytes(sum(p.weight_bytes))}, KV cache {fmt_bytes(sum(p.kv_sram_bytes))} in SRAM")
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

        def add(tid: str, res: str, duration: float, tag, group: str = "") -> None:
            nonlocal prev
            tasks.append(Task(tid, res, duration, (prev,) if prev else (), tag=tag, group=group))
            prev = tid

        for j, row in enumerate(costs.slice_costs):
            res = stage_name(j, costs.tensor_parallel)
            colls = costs.collectives[j] if costs.collectives else []
            for _, c in (x for x in colls if x[0] < 0):
                add(f"{c.name}@{res}", res, c.duration_s, c, c.name)
            for i, c in enumerate(row):
                add(f"{c.op.name}@{res}", res, c.duration_s, c, c.op.name)
                for _, cc in (x for x in colls if x[0] == i):
                    add(f"{cc.name}@{res}", res, cc.duration_s, cc, cc.name)
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

    # -- the generation loop's hooks ------------------------------------------
    def step(self, phase: str, q_len: int, kv_len: int, exhaustive: bool = False) -> StepResult:
        """Prefill: every sequence's chunks through the pipeline; decode: the pipeline's
        period with its micro-batches in flight (a token of each sequence per period)."""
        if phase == "prefill":
            t = prefill_makespan_s(self.prefill_costs().stations(), self.workload.batch * self.chunks_per_seq,
                                   exhaustive)
        else:
            t = self.decode_step_s(kv_len, exhaustive)
        return StepResult(phase, kv_len, t, {})

    def step_timeline(self, phase: str, q_len: int, kv_len: int) -> Timeline:
        """One micro-batch (decode) or prefill chunk through the pipeline, op slice by op slice."""
        return self._schedule(self.prefill_costs() if phase == "prefill" else self.decode_costs(kv_len))

    def figures(self, gen: Generation, decode_tl: Timeline | None) -> RunFigures:
        """Chips are busy (and draw power) for the whole run; SRAM/DRAM energy per byte,
        where the preset gives it, is spent per prefill chunk and per decode step and micro-batch."""
        w, part = self.workload, self.partition
        dec = self.decode_costs(gen.rep_kv)
        period = self.decode_step_s(gen.rep_kv, gen.exhaustive)
        util = self._utilization(dec, period)
        unit = self.machine.units[self.machine.main_unit]
        power = unit.power_w
        # A chip is active for the share of the decode period it is not in the pipeline's bubble.
        static_j = _static_w(unit, 1 - util["bubble"]) * part.chips * gen.e2e_s
        # Slice costs are one chip's, and each of a group's t chips spends it; the links' energy is every chip's.
        pre = self.prefill_costs()
        dyn_j = ((_chip_j(pre) * part.tensor_parallel + pre.link_energy_j) * w.batch * self.chunks_per_seq
                 + (_chip_j(dec) * part.tensor_parallel + dec.link_energy_j) * self.microbatches * len(gen.kv_lens))
        tokens = w.batch * w.gen_len
        energy_per_token = (static_j + dyn_j) / tokens
        tok_user = 1.0 / period if period else 0.0
        metrics = report.metrics(self, part, dec, util, tok_user)
        if power:
            metrics["spatial.energy_per_token_j"] = energy_per_token
        extra = dict(metrics=metrics, spatial=dict(
            chips=part.chips, chips_needed=part.needed, layers_per_chip=part.layer_equivalents,
            stage_s=dec.stage_s, hop_s=dec.hop_s, return_s=dec.return_s, decode_period_s=period,
            tensor_parallel=part.tensor_parallel, groups=part.stages, collective_s=dec.collective_s,
            microbatches=self.microbatches, microbatch_size=self.mb_size, utilization=util["per_chip"],
            summary=report.summary_rows(self, dec, period, util, tok_user, power, energy_per_token),
            stages=report.stage_rows(self, dec, util)))
        # Decode steady state, means over chips (per chip: extra["spatial"]["utilization"]).
        utilization = {"chips.busy": 1 - util["bubble"], "chips.compute": util["compute_mean"],
                       "chips.sram_bw": util["sram_mean"], "c2c": util["link_mean"]}
        fig = RunFigures(w.batch, utilization, static_j + dyn_j, extra=extra)
        if note := busy_time_note(self.machine, static_j + dyn_j, gen.e2e_s, part.chips, whole_run=True):
            fig.notes.append(note)
        return fig

    # -- the serving hooks (hw_models.base.Mapper; sim.apps.serve reads only these) ----------
    def device_share(self) -> DeviceShare:
        """The fullest chip's share of the weights and of each token's KV (its layers' share), in the usable share of
        its SRAM (spatial.usable_fraction, in place of an allocator's gpu_memory_utilization); no runtime reserve (a
        chip runs a compiled static schedule, no allocator or CUDA context).
        KV in DRAM is refused: the pipeline's KV then lives outside the tier serving sizes its pool in."""
        p, src = self.partition, self.machine.source or self.machine.name
        if self.cfg.kv_cache != "sram":
            raise ConfigError(f"{src}: spatial.kv_cache: {self.cfg.kv_cache}: sim serve sizes the KV pool in the "
                              "chips' SRAM; serving with the KV cache in DRAM is not modelled")
        if self.cfg.chips == "auto":
            raise ConfigError(f"{src}: spatial.chips: auto sizes the pipeline to just hold one batch's KV ({p.needed} "
                              f"chips for {self.model.name}), leaving no KV pool to serve from; set a count, e.g. "
                              f"--set hw.spatial.chips={2 * p.needed}")
        t, kv_all = p.tensor_parallel, sum(p.kv_sram_bytes)
        # The chip that holds the fewest tokens sets the pool (every block lives on every chip, each with its
        # layers' share); chips without layers (the embedding, the LM head) hold no KV and set nothing.
        room = [p.capacity_per_chip_bytes * t - p.activation_buffer_bytes * t - p.weight_bytes[c]
                for c in range(p.stages)]
        j = min((c for c in range(p.stages) if p.kv_sram_bytes[c] > 0), default=0,
                key=lambda c: room[c] / p.kv_sram_bytes[c])
        kv = p.kv_sram_bytes[j] / kv_all if kv_all else 1.0 / p.stages
        return DeviceShare(devices=p.chips, weights=p.weight_bytes[j] / sum(p.weight_bytes) / t, kv=kv / t,
                           tp=t, reserved_bytes=0.0, usable_bytes=p.capacity_per_chip_bytes)

    @property
    def devices(self) -> int:
        """The chips one instance spans (the serving energy's per-device figures divide by it)."""
        return self.partition.chips

    def rank_activation_bytes(self, graph) -> float:
        """A chip's activation buffer (the partition's, sized for the largest chunk it compiles)."""
        return self.partition.activation_buffer_bytes

    def swap_bytes_per_s(self) -> float | None:
        return None   # weights and KV in SRAM: no host tier to swap KV blocks to

    def iteration(self, seqs, logits=None, exhaustive=False, busy=None, device_only=False,
                  experts=True) -> StepResult:
        """One serving iteration through the pipeline: its decode sequences in micro-batches of
        spatial.microbatch_size (each at its sequences' mean kv_len: attention work is linear in it),
        each prefill chunk a micro-batch of its own, all in flight at once. The cost is what the
        pipeline is occupied for before the iteration's sequences can enter again, their sampled
        tokens having come back (iteration_period_s): max(one micro-batch's fill latency, the
        busiest station's total). It is not m fills: several micro-batches (the serving engine's
        iterations of other systems) are in the pipeline together. Energy: the slices' dynamic
        energy plus every chip's power over the period (as figures() charges a run)."""
        src = self.machine.source or self.machine.name
        if logits is not None or not experts:
            raise ConfigError(f"{src}: kind spatial: speculative decoding and data-parallel attention are not "
                              "modelled on a chip pipeline")
        mbs = self._microbatches(seqs)
        costs = [self._serving_costs(*mb[:4]) for mb in mbs]
        copies = [mb[4] for mb in mbs]
        period = iteration_period_s([c.stations() for c in costs], copies)
        part = self.partition
        dyn = sum(k * (_chip_j(c) * part.tensor_parallel + c.link_energy_j) for c, k in zip(costs, copies))
        chip_s = sum(k * sum(c.stage_s) for c, k in zip(costs, copies)) / part.stages
        link_s = sum(k * (sum(c.hop_s) + c.return_s) for c, k in zip(costs, copies)) / max(part.stages, 1)
        # As figures() charges a run: a chip is active for its busy share of the period (it had charged power_w over
        # the period, 10x a run's 20 W idle + 30 W activity chip: a code review)
        busy = min(1.0, chip_s / period) if period else 0.0
        static_w = _static_w(self.machine.units[self.machine.main_unit], busy)
        return StepResult("iteration", 0, period, {"chips": chip_s, "c2c": link_s},
                          dyn + static_w * part.chips * period)

    def power_j(self, busy_s, wall_s=None) -> float:
        return 0.0   # iteration() charges the chips' power over its period already

    def serving_board(self) -> Board:
        """Without the board-power model the chips draw power_w whether they compute or not, as `sim run` charges
        them (figures): between iterations too (it read 0 W there, so serving and run disagreed)."""
        unit = self.machine.units[self.machine.main_unit]
        if unit.idle_power_w is None:
            return Board(unit.power_w or 0.0, self.devices, None)
        return super().serving_board()

    def _microbatches(self, seqs) -> list[tuple[str, int, int, int, int]]:
        """(phase, sequences, q_len, kv_len, copies) of each micro-batch of an iteration. A prompt chunk
        the scheduler hands over runs as the pipeline's compiled prefill chunks (spatial.
        prefill_chunk_tokens, the last one padded, as `sim run` prefills), `copies` alike ones at the
        chunk's mean context (chunk_context, as prefill_graph), pipelined one behind the other."""
        dec = [kv for q, kv in seqs if q == 1]
        mb = self.cfg.microbatch_size
        out = [("decode", len(g), 1, round(sum(g) / len(g)), 1)
               for g in (dec[i:i + mb] for i in range(0, len(dec), mb))]
        for q, kv in seqs:
            if q > 1:
                c = min(self.cfg.prefill_chunk_tokens, q)
                n = math.ceil(q / c)
                out.append(("prefill", 1, c, chunk_context(kv - q, c, n, kv), n))
        return out

    def _serving_costs(self, phase: str, n: int, q: int, kv: int) -> PhaseCosts:
        key = (phase, n, q, kv)
        c = self._cost_cache.get(key)
        if c is None:
            g = lower(self.model, phase, n, q, kv, self.formats, self.workload.flash_attention)
            c = self._cost_cache[key] = phase_costs(g, self.partition, self.chip, n if phase == "decode" else 1)
        return c

    @cached_property
    def _cost_cache(self) -> dict:
        return {}

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


def _no_board_limits(machine) -> None:
    """A board power limit or an SM clock lock on a spatial preset would be ignored: its chips run at
    spatial.pe_array.clock_hz, one clock for the whole static schedule, and no step is capped (caps_whole_steps)."""
    name, unit = machine.main_unit, machine.units[machine.main_unit]
    for key, value, default in (("power_limit_w", unit.power_limit_w, None), ("sm_clock_fraction", unit.sm_clock_fraction, 1.0)):
        if value != default:
            raise ConfigError(f"{machine.source or machine.name}: units.{name}.{key} {value:g}: the spatial kind models "
                              "no board power limit or clock lock (its chips run the static schedule at "
                              "spatial.pe_array.clock_hz: set that for a slower clock)")


def _static_w(unit, busy_share: float) -> float:
    """A chip's power beside its dynamic energy: the board-power model's idle + activity at `busy_share`
    (hw_models.power.BoardPower.static_w), else power_w throughout (the old model)."""
    bp = unit.board_power()
    return bp.static_w(busy_share) if bp is not None else unit.power_w or 0.0


def _chip_j(costs: PhaseCosts) -> float:
    """One chip's share of a micro-batch's slices' dynamic energy, over the pipeline's stages."""
    return sum(c.energy_j for row in costs.slice_costs for c in row)


MAPPER = SpatialMapper

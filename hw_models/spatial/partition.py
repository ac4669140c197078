"""Partitioning a model across a pipeline of spatial chips (which chip holds which
op slices), and the static cost of every op slice on its chip.

The model is a stream of ops in graph order (embed, L0.attn_norm, ..., lm_head),
each holding resident bytes: its weights and, when the KV cache lives in SRAM,
the full-context KV cache it reads. The stream is cut into `chips` contiguous
pieces of equal bytes, so each chip holds a contiguous range of layers (a
fraction of a layer when a layer is larger than a chip: a 70B layer at int8 is
856 MB, four GroqChips). An op cut by a boundary is split by output columns
(GEMMs) or by heads (attention); its slices run one after another as pipeline
stages. Cuts are at byte granularity; a real compiler cuts on tile boundaries,
which costs at most one tile per cut.

Chip count = ceil(resident bytes / (SRAM x usable_fraction - activation buffer)).
The activation buffer each chip keeps is the largest live activation set of
any op, in decode (one micro-batch) or prefill (one chunk).

With spatial.tensor_parallel = t > 1 the same cut runs over groups of t chips
instead of chips (hw_models.network.sharding splits each op within its group): the
stream's bytes count replicated ops t times, a group holds t x (usable SRAM -
activation buffer), and the chip count is t x the groups needed.

Op time is static and deterministic (hw_models.spatial.chip): max(PE-array time from the GEMM's tiling,
SRAM bytes / SRAM bandwidth, KV bytes / DRAM bandwidth when the KV cache is
spilled), where non-GEMM ops run at the matrix (attention) or vector rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from hw_models.machine import Machine
from hw_models.network.sharding import ALL_GATHER, CollectiveCost
from hw_models.network.sharding import plan as tp_plan
from hw_models.spatial.chip import ChipModel, SliceCost
from hw_models.spatial.config import SpatialConfig
from hw_models.spatial.tp import collective_s, collective_wire_bytes
from sim.core import graph as g
from sim.core.formats import get_format
from sim.core.graph import Op, OpGraph
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import ModelConfig

TOKEN_ID_BYTES = 4  # a sampled token id travelling back to the first chip


def _eps(x: float) -> float:
    return 1e-9 * max(1.0, abs(x))


@dataclass(frozen=True)
class Slice:
    op_index: int
    op_name: str
    start: float   # fraction of the op's resident bytes where this slice begins
    end: float

    @property
    def fraction(self) -> float:
        return self.end - self.start


@dataclass
class Partition:
    """Which slices of which ops each pipeline stage holds, and the bytes it
    keeps. A stage is one chip, or with tensor_parallel t a group of t chips
    that split its slices (the per-stage lists are group totals; each chip
    holds 1/t of them)."""

    chips: int                          # all chips: stages x tensor_parallel
    needed: int
    capacity_per_chip_bytes: float      # SRAM x usable fraction
    activation_buffer_bytes: float
    slices: list[list[Slice]]           # per stage, in op order
    weight_bytes: list[float]           # per stage
    kv_sram_bytes: list[float]          # per stage
    kv_dram_bytes: list[float]          # per stage (spilled KV, read at DRAM bandwidth)
    layer_bytes: float                  # resident bytes of one transformer layer (weights + KV in SRAM)
    layer_equivalents: list[float] = field(default_factory=list)  # transformer layers held, per stage
    tensor_parallel: int = 1

    @property
    def stages(self) -> int:
        return self.chips // self.tensor_parallel

    @property
    def total_resident_bytes(self) -> float:
        return sum(self.weight_bytes) + sum(self.kv_sram_bytes)


def resident_bytes(graph: OpGraph, model: ModelConfig, formats: FormatPolicy, batch: int,
                   context: int) -> tuple[list[float], list[float]]:
    """(weight bytes, full-context KV bytes) each op keeps, in graph order. The
    embedding table counts whole (the lowering reads one row per token); a tied
    LM head keeps its own copy at the far end of the pipeline."""
    kv_fmt = get_format(formats.kv_cache)
    w_out, kv_out, seen_kv = [], [], set()
    for op in graph.ops():
        w = 0.0
        for t in op.reads:
            if t.role != "weight":
                continue
            shape = (model.vocab_size, t.shape[1]) if t.name == "embed_tokens" and op.kind == g.EMBED else t.shape
            if t.name == "embed_positions":
                shape = (model.max_position_embeddings + 2, t.shape[1])
            w += get_format(t.fmt).storage_bytes(shape)
        kv = 0.0
        for t in op.reads:
            if t.role == "kv" and t.name not in seen_kv:
                seen_kv.add(t.name)
                kv += kv_fmt.storage_bytes((batch, context, model.kv_dim))
        w_out.append(float(w))
        kv_out.append(float(kv))
    return w_out, kv_out


def live_activation_bytes(graph: OpGraph, include: Callable[[str], bool] | None = None
                          ) -> tuple[list[float], list[float]]:
    """For each op index k: bytes of activations produced before k and read at
    or after k (what crosses a cut just before op k), and k's output bytes;
    only the tensors whose name passes `include`, where given."""
    ops = list(graph.ops())
    last_read: dict[str, int] = {}
    for k, op in enumerate(ops):
        for t in op.reads:
            if t.role == "activation" and (include is None or include(t.name)):
                last_read[t.name] = k
    before, outputs = [], []
    live, expire = 0.0, [0.0] * (len(ops) + 1)   # running sum; bytes that die after their last reader
    for k, op in enumerate(ops):
        live -= expire[k]
        before.append(live)
        out = [t for t in op.writes if t.role == "activation" and (include is None or include(t.name))]
        outputs.append(float(sum(t.bytes for t in out)))
        for t in out:
            last = last_read.get(t.name, -1)
            if last > k:
                live += t.bytes
                expire[last + 1] += t.bytes
    return before, outputs


def activation_buffer(graph: OpGraph) -> float:
    """Largest set of activations live at once around any op: what crosses into
    it plus what it writes."""
    before, outputs = live_activation_bytes(graph)
    return max((b + o for b, o in zip(before, outputs)), default=0.0)


def partition(model: ModelConfig, formats: FormatPolicy, machine: Machine, cfg: SpatialConfig,
              batch: int, context: int, act_buffer: float, chips: int | None, flash: bool = False) -> Partition:
    """Cut the op stream into `chips` equal-byte pieces (None: as few as fit),
    or into chips / t groups with tensor_parallel t."""
    graph = lower(model, "decode", 1, 1, 1, formats, flash)
    names = [op.name for op in graph.ops()]
    weights, kv = resident_bytes(graph, model, formats, batch, context)
    t = cfg.tensor_parallel
    if t > 1:
        # A group keeps t copies of a replicated op's bytes (norm vectors), one of a split op's.
        copies = [s.copies(t) for s in tp_plan(graph)[0]]
        weights = [w * c for w, c in zip(weights, copies)]
        kv = [x * c for x, c in zip(kv, copies)]
        chips = None if chips is None else chips // t
    kv_sram = kv if cfg.kv_cache == "sram" else [0.0] * len(kv)
    resident = [w + k for w, k in zip(weights, kv_sram)]
    total = sum(resident)
    cap = machine.memory[machine.device_tier].capacity_bytes * cfg.usable_fraction
    room = (cap - act_buffer) * t   # per stage (a chip, or a group of t)
    # At least one chip: a capacity of 1e300 B made total / room ~ 0 and the ceil 0 stages.
    needed = max(1, math.ceil(total / room - 1e-12)) if room > 0 else math.inf
    n = needed if chips is None else chips
    layer_bytes = sum(r for op, r in zip(graph.ops(), resident) if op.layer == 0)

    slices: list[list[Slice]] = [[] for _ in range(max(n, 1))] if n != math.inf else []
    per_chip = [[0.0, 0.0, 0.0, 0.0] for _ in slices]   # weights, kv sram, kv dram, layer bytes
    if n == math.inf or (chips is not None and chips < needed):
        return Partition(n * t, needed * t, cap, act_buffer, slices, [], [], [], layer_bytes, tensor_parallel=t)
    # The cut is placed for the largest batch these n stages hold: the KV share is scaled up
    # until the stages are exactly full, so the cut depends on n alone and every smaller batch
    # fits it (each stage's real bytes are at most its scaled bytes). A larger batch on the same
    # chips therefore runs the same plan with more KV, never a differently cut (and by chance
    # faster) one; only a batch that needs another chip gets a new cut.
    placed = _placement_bytes(weights, kv_sram, room * n)
    target = sum(placed) / n
    chip, pos = 0, 0.0
    for k, (name, r) in enumerate(zip(names, placed)):
        if r > 0:
            while chip < n - 1 and pos >= (chip + 1) * target - _eps(target):
                chip += 1
        start = 0.0
        while r > 0 and chip < n - 1 and pos + r * (1 - start) > (chip + 1) * target + _eps(target):
            end = start + ((chip + 1) * target - pos) / r
            slices[chip].append(Slice(k, name, start, end))
            _account(per_chip[chip], weights[k], kv_sram[k], kv[k] - kv_sram[k], graph.op(name), end - start)
            pos = (chip + 1) * target
            start = end
            chip += 1
        slices[chip].append(Slice(k, name, start, 1.0))
        _account(per_chip[chip], weights[k], kv_sram[k], kv[k] - kv_sram[k], graph.op(name), 1.0 - start)
        pos += r * (1.0 - start)
    part = Partition(n * t, needed * t, cap, act_buffer, slices, [c[0] for c in per_chip],
                     [c[1] for c in per_chip], [c[2] for c in per_chip], layer_bytes, tensor_parallel=t)
    part.layer_equivalents = [c[3] / layer_bytes if layer_bytes else 0.0 for c in per_chip]
    return part


def _placement_bytes(weights: list[float], kv: list[float], capacity: float) -> list[float]:
    """Bytes per op that the cut divides equally: weights plus the KV cache scaled to fill
    `capacity` (the largest batch the stages hold), or the real KV where it cannot grow."""
    w, k = sum(weights), sum(kv)
    scale = max(1.0, (capacity - w) / k) if k > 0 else 1.0
    return [a + scale * b for a, b in zip(weights, kv)]


def _account(acc: list[float], w: float, kv_s: float, kv_d: float, op: Op, f: float) -> None:
    acc[0] += w * f
    acc[1] += kv_s * f
    acc[2] += kv_d * f
    if op.layer is not None:
        acc[3] += (w + kv_s) * f


def stage_name(j: int, tensor_parallel: int) -> str:
    """Engine resource of pipeline stage j: a chip, or a tensor-parallel group."""
    return f"chip{j}" if tensor_parallel == 1 else f"group{j}"


@dataclass
class PhaseCosts:
    """Per-micro-batch station times of one step on the pipeline. A stage is a
    chip, or a group of t chips (slice costs, FLOPs and bytes are then one
    chip's share; stage times include the group's collectives)."""

    slice_costs: list[list[SliceCost]]   # per stage
    stage_s: list[float]                 # per stage
    hop_s: list[float]                   # stage j -> j+1
    hop_bytes: list[float]               # the whole cut (each of t chips sends 1/t of it)
    return_s: float                      # last stage -> first (the sampled token); 0 in prefill
    flops: list[float]                   # per stage, one chip's
    sram_bytes: list[float]
    tensor_parallel: int = 1
    # Per stage: (position, collective) pairs, the collective running after
    # slice `position` of the stage's row (-1: before the first slice).
    collectives: list[list[tuple[int, CollectiveCost]]] = field(default_factory=list)

    # The C2C links' energy of the micro-batch's hops and sampled-token return (links.energy_j_per_byte on the
    # wire bytes, payload over payload_fraction); the collectives carry theirs (CollectiveCost.energy_j).
    hop_energy_j: float = 0.0

    @property
    def link_energy_j(self) -> float:
        """Every chip's link energy for one micro-batch: its hops, its return and its group's collectives."""
        return self.hop_energy_j + sum(c.energy_j for row in self.collectives for _, c in row)

    @property
    def collective_s(self) -> list[float]:
        """Time each stage spends in collectives (0 without tensor parallelism)."""
        return [sum(c.duration_s for _, c in row) for row in self.collectives] or [0.0] * len(self.stage_s)

    def stations(self) -> list[tuple[str, float]]:
        """Resources a micro-batch visits, in order, with its time on each."""
        out = []
        for j, s in enumerate(self.stage_s):
            out.append((stage_name(j, self.tensor_parallel), s))
            if j < len(self.hop_s):
                out.append((f"c2c{j}", self.hop_s[j]))
        if self.return_s > 0:
            out.append(("c2c.return", self.return_s))
        return out

    @property
    def latency_s(self) -> float:
        return sum(self.stage_s) + sum(self.hop_s) + self.return_s


def hop_time_s(cfg: SpatialConfig, nbytes: float) -> float:
    return nbytes / cfg.hop_bandwidth_bytes_per_s + cfg.links.latency_s


def return_time_s(cfg: SpatialConfig, chips: int, tokens: int) -> float:
    """The sampled token ids go back to the first chip (stage): one hop on a
    ring or all-to-all, back down the whole chain otherwise. With tensor
    parallelism every chip of the last group has the logits (all-gathered) and
    samples, and sends the ids to its counterpart in the first group."""
    if chips <= 1:
        return 0.0
    return TOKEN_ID_BYTES * tokens / cfg.hop_bandwidth_bytes_per_s + return_hops(cfg, chips) * cfg.links.latency_s


def return_hops(cfg: SpatialConfig, chips: int) -> int:
    """The links the sampled ids cross back to the first stage: one on a ring or all-to-all, the whole chain else."""
    return chips - 1 if cfg.topology == "chain" else 1


def wire_j(cfg: SpatialConfig, payload_bytes: float) -> float:
    """Link energy of `payload_bytes` sent (0 where the preset gives no links.energy_j_per_byte)."""
    return payload_bytes / cfg.links.payload_fraction * (cfg.links.energy_j_per_byte or 0.0)


def hop_energy_j(cfg: SpatialConfig, hop_bytes: list[float], chips: int, feedback_tokens: int, t: int = 1) -> float:
    """The hops' cuts (whole, however many chips send them) and the sampled ids back to the first stage, on every
    link they cross (return_time_s's hops), from each of the last group's t chips."""
    hops = return_hops(cfg, chips) if chips > 1 and feedback_tokens else 0
    return wire_j(cfg, sum(hop_bytes) + TOKEN_ID_BYTES * feedback_tokens * hops * t)


def phase_costs(graph: OpGraph, part: Partition, chip: ChipModel, feedback_tokens: int) -> PhaseCosts:
    """Station times for one micro-batch of `graph` (lowered with all layers);
    `feedback_tokens` > 0 adds the return of the sampled tokens (decode)."""
    if part.tensor_parallel > 1:
        return _tp_phase_costs(graph, part, chip, feedback_tokens)
    ops = list(graph.ops())
    before, outputs = live_activation_bytes(graph)
    cfg = chip.cfg
    costs, stage, flops, sram = [], [], [], []
    for j, chip_slices in enumerate(part.slices):
        row = [chip.cost(ops[s.op_index], s.fraction, f"chip{j}") for s in chip_slices]
        costs.append(row)
        stage.append(sum(c.duration_s for c in row))
        flops.append(sum(c.flops for c in row))
        sram.append(sum(c.sram_bytes for c in row))
    hop_bytes = []
    for j in range(part.stages - 1):
        s = part.slices[j + 1][0]
        # Cut just before op s.op_index, or inside it after s.start of its outputs.
        hop_bytes.append(before[s.op_index] + s.start * outputs[s.op_index])
    hop = [hop_time_s(cfg, b) for b in hop_bytes]
    ret = return_time_s(cfg, part.stages, feedback_tokens) if feedback_tokens else 0.0
    return PhaseCosts(costs, stage, hop, hop_bytes, ret, flops, sram,
                      hop_energy_j=hop_energy_j(cfg, hop_bytes, part.stages, feedback_tokens))


def _tp_phase_costs(graph: OpGraph, part: Partition, chip: ChipModel, feedback_tokens: int) -> PhaseCosts:
    """phase_costs over groups of t chips (hw_models.spatial.tp). A stage is one
    chip's share of each slice (split ops 1/t, replicated ones whole) plus the
    collectives after the slices that need them. A hop: each chip of group j
    sends 1/t of the cut to its counterpart in group j+1 (t hops at once over
    the links left by the group); the receiving group then all-gathers the
    replicated part of the cut (each chip needs it whole; sharded tensors
    already sit on the chip that uses them), at the start of its stage."""
    ops = list(graph.ops())
    cfg, t = chip.cfg, part.tensor_parallel
    splits, sharded = tp_plan(graph)
    before, outputs = live_activation_bytes(graph)
    before_rep, outputs_rep = live_activation_bytes(graph, lambda name: name not in sharded)
    costs, stage, flops, sram, colls = [], [], [], [], []
    hop_bytes, rep_bytes = [], []
    for j in range(1, part.stages):
        s = part.slices[j][0]
        hop_bytes.append(before[s.op_index] + s.start * outputs[s.op_index])
        rep_bytes.append(before_rep[s.op_index] + s.start * outputs_rep[s.op_index])
    for j, stage_slices in enumerate(part.slices):
        name = stage_name(j, t)
        row: list[SliceCost] = []
        col: list[tuple[int, CollectiveCost]] = []
        if j > 0 and rep_bytes[j - 1] > 0:
            # Named after the op it precedes, so reports keep the cuts apart.
            first = ops[stage_slices[0].op_index].name
            col.append((-1, _collective(f"{first}.cut_all_gather", ALL_GATHER, rep_bytes[j - 1], cfg)))
        for s in stage_slices:
            op, sp = ops[s.op_index], splits[s.op_index]
            row.append(chip.cost(op, s.fraction * sp.work_fraction(t), name, sp.k_fraction(t)))
            if sp.collective:
                col.append((len(row) - 1, _collective(f"{op.name}.{sp.collective}", sp.collective,
                                                      s.fraction * outputs[s.op_index], cfg)))
        costs.append(row)
        colls.append(col)
        stage.append(sum(c.duration_s for c in row) + sum(c.duration_s for _, c in col))
        flops.append(sum(c.flops for c in row))
        sram.append(sum(c.sram_bytes for c in row))
    hop = [hop_time_s(cfg, b / t) for b in hop_bytes]
    ret = return_time_s(cfg, part.stages, feedback_tokens) if feedback_tokens else 0.0
    return PhaseCosts(costs, stage, hop, hop_bytes, ret, flops, sram, t, colls,
                      hop_energy_j=hop_energy_j(cfg, hop_bytes, part.stages, feedback_tokens, t))


def _collective(name: str, kind: str, nbytes: float, cfg: SpatialConfig) -> CollectiveCost:
    return CollectiveCost(name, kind, nbytes, collective_s(cfg, kind, nbytes),
                          energy_j=wire_j(cfg, collective_wire_bytes(cfg, kind, nbytes)))

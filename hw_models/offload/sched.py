"""FlexGen's zig-zag block schedule as engine tasks.

A step (prefill, or one decode token) walks the model's slots in order:
`embed`, layers L0..L{n-1}, `head` (final norm + LM head). Within a slot the
GPU computes the block's `num_gpu_batches` GPU batches one after another, so a
slot's weights cross PCIe once per block, not once per GPU batch. Around the
GPU compute chain (resource `gpu`) the I/O runs on its own resources:

  pcie_h2d, pcie_d2h   the two directions of the full-duplex PCIe link
  disk                 the NVMe drive: reads and writes share it
  cpu                  attention over CPU-resident KV cache (policy.cpu_attention, decode only)

Prefetch follows FlexGen's Algorithm 1: the next slot's weights load while the
current slot computes, and the next GPU batch's KV cache and activations load
while the current batch computes; new KV and activations are written back
after each batch, overlapping the next batch's compute. A load may start at
most one compute ahead (two for weights, which must be in place before the
slot's first batch), and it takes space from a GPU buffer container before it
starts, giving it back when the compute that used it ends, so prefetch waits
for free GPU memory. Weights and KV/activations have separate buffer
containers (`gpu.weights`, `gpu.kv`): each one's queue then holds requests in
the order the computes need them, which rules out the deadlock of one shared
FIFO where a far prefetch blocks a near one.

Data from disk goes disk -> CPU memory -> PCIe: two chained transfers.

Energy: each compute task carries its ops' dynamic energy (FLOPs x J/FLOP, bytes x the tier's J/byte), on
top of which the machine's units draw their static power (hw_models.base.Mapper.power_j), as on the gpu kind.
Each transfer carries what moving its bytes costs where the preset gives the figure (Rates): a PCIe copy its
link's J/byte (`host.pcie.energy_j_per_byte`, both ends' PHYs), one host-DRAM access (the CPU tier's J/byte)
and one GPU-memory access (the GPU tier's, booked on the GPU: its board draws it, so its power limit counts it);
a disk transfer the drive's J/byte and one host-DRAM access (data from disk lands in CPU memory first). A figure
the preset leaves out costs nothing (docs/offload.md names what each preset prices).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from hw_models.cost import roofline_cost
from hw_models.offload.rates import Rates
from hw_models.offload.spec import Policy
from sim.core import engine
from sim.core import graph as g
from sim.core.engine import Task, Timeline
from sim.core.formats import get_format
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import ModelConfig

ATTENTION_KINDS = (g.ATTN_SCORE, g.SOFTMAX, g.ATTN_CONTEXT, g.ATTENTION, g.KV_APPEND)
LINKS = ("pcie_h2d", "pcie_d2h", "disk")
GPU, CPU = "gpu", "cpu"   # the compute resources; the mapper reports them under the preset's unit names
W_BUF, KV_BUF = "gpu.weights", "gpu.kv"
TRANSFER_J = "transfer_j."   # a step's counter of a link's transfer energy, both sides (beside its bytes)


@dataclass(frozen=True)
class SlotWork:
    """What one slot costs for one GPU batch."""

    name: str
    weight_bytes: float        # every weight tensor the slot needs on the GPU, whole
    pre_s: float               # GPU time of the ops before attention
    attn_gpu_s: float          # GPU time of the attention ops (with the KV append)
    post_s: float              # GPU time of the ops after attention
    attn_cpu_s: float = 0.0    # the attention ops on the host CPU instead
    attn_cpu_bytes: float = 0.0    # the DRAM bytes they move there (18 B a cached element: flexgen_cpu_attention)
    kv_read_bytes: float = 0.0     # the existing KV cache of the GPU batch, read by attention
    kv_write_bytes: float = 0.0    # the new KV of the GPU batch
    hidden_bytes: float = 0.0      # the activation the slot hands to the next slot
    qkv_bytes: float = 0.0         # q, new k, new v: GPU -> CPU for CPU attention
    ctx_bytes: float = 0.0         # attention output: CPU -> GPU
    # The same ops' dynamic energy (FLOPs x J/FLOP + bytes x their tier's J/byte, OpCost.energy_j): the board's
    # idle and activity power come on top (hw_models.base.Mapper.power_j), as on the gpu kind.
    pre_j: float = 0.0
    attn_gpu_j: float = 0.0
    post_j: float = 0.0
    attn_cpu_j: float = 0.0
    # The same ops' FLOPs and bytes (pre, attention, post), for the step's op records
    work: tuple[tuple[float, float], ...] = ((0.0, 0.0), (0.0, 0.0), (0.0, 0.0))
    # What bounds most of the slot's time on each side (OpCost.bound over its ops' seconds): its records' `bound`
    # (an architecture trial read a memory-bound decode's one GPU row as "compute"); the GPU's without attention
    # too, for a layer whose attention the CPU runs (a review: the CPU's memory-bound attention had labelled it)
    gpu_bound: str = "compute"
    gpu_bound_without_attention: str = "compute"
    cpu_bound: str = "compute"

    @property
    def gpu_s(self) -> float:
        return self.pre_s + self.attn_gpu_s + self.post_s

    @property
    def gpu_j(self) -> float:
        return self.pre_j + self.attn_gpu_j + self.post_j

    @property
    def is_layer(self) -> bool:
        return self.name.startswith("L")


def _full_weight_bytes(model: ModelConfig, t) -> float:
    """Lowering reads only the embedding rows a step uses; the tier holds the table."""
    rows = {"embed_tokens": model.vocab_size, "embed_positions": model.max_position_embeddings + 2}.get(t.name)
    return get_format(t.fmt).storage_bytes((rows, t.shape[1])) if rows else t.bytes


NO_WORK = ((0.0, 0.0), (0.0, 0.0))


def dominant(*by_bound: dict[str, float]) -> str:
    """The bound of most of the seconds of `by_bound` (bound -> seconds each), "compute" where there are none."""
    total: dict[str, float] = {}
    for by in by_bound:
        for b, t in by.items():
            total[b] = total.get(b, 0.0) + t
    return max(total, key=total.__getitem__) if total else "compute"


def flops_and_bytes(ops) -> tuple[float, float]:
    """The FLOPs and bytes of `ops` (SlotWork.work)."""
    return float(sum(o.flops for o in ops)), float(sum(o.bytes for o in ops))


def slot_works(model: ModelConfig, formats: FormatPolicy, flash: bool, phase: str, gbs: int, q_len: int,
               kv_len: int, gpu_cost, cpu_cost) -> tuple[SlotWork, SlotWork, SlotWork]:
    """(embed, one layer, head) for one GPU batch of `gbs` sequences.
    `gpu_cost(op)` / `cpu_cost(op)` give an op's OpCost on the GPU / host CPU."""
    graph = lower(model, phase, gbs, q_len, kv_len, formats, flash, num_layers=1)
    groups: dict[str, list] = {"embed": [], "L": [], "head": []}
    for op in graph.ops():
        key = "L" if op.layer is not None else ("embed" if not groups["L"] else "head")
        groups[key].append(op)

    def weights(ops) -> float:
        seen = {t.name: _full_weight_bytes(model, t) for op in ops for t in op.reads if t.role == "weight"}
        return float(sum(seen.values()))

    def cost(ops, on=gpu_cost) -> tuple[float, float, dict[str, float]]:
        """Seconds, dynamic joules and seconds by bound (OpCost.bound) of `ops` on one side."""
        costs = [on(o) for o in ops]
        by: dict[str, float] = {}
        for c in costs:
            by[c.bound] = by.get(c.bound, 0.0) + c.duration_s
        return sum(c.duration_s for c in costs), sum(c.energy_j for c in costs), by

    def simple(name: str, ops, hidden: float) -> SlotWork:
        s, j, by = cost(ops)
        return SlotWork(name, weights(ops), s, 0.0, 0.0, hidden_bytes=hidden, pre_j=j, work=(flops_and_bytes(ops), *NO_WORK),
                        gpu_bound=dominant(by))

    layer_ops = groups["L"]
    first_attn = next(i for i, o in enumerate(layer_ops) if o.kind in ATTENTION_KINDS)
    last_attn = max(i for i, o in enumerate(layer_ops) if o.kind in ATTENTION_KINDS)
    pre, attn, post = layer_ops[:first_attn], layer_ops[first_attn:last_attn + 1], layer_ops[last_attn + 1:]
    kv_new = sum(t.bytes for o in attn if o.kind == g.KV_APPEND for t in o.writes)
    kv_new_per_token = kv_new / q_len
    hidden = next(t.bytes for t in layer_ops[-1].writes)          # L1.in
    qkv = sum(t.bytes for o in attn if o.kind == g.KV_APPEND for t in o.reads)
    q = next(t.bytes for o in attn for t in o.reads if t.role == "activation" and o.kind != g.KV_APPEND)
    ctx = next(t.bytes for t in attn[-1].writes)
    (pre_s, pre_j, pre_by), (attn_s, attn_j, attn_by), (post_s, post_j, post_by) = cost(pre), cost(attn), cost(post)
    cpu_s, cpu_j, cpu_by = cost(cpu_attn := flexgen_cpu_attention(attn), cpu_cost)
    layer = SlotWork(
        "L", weights(layer_ops), pre_s, attn_s, post_s, attn_cpu_s=cpu_s, attn_cpu_bytes=flops_and_bytes(cpu_attn)[1],
        kv_read_bytes=kv_new_per_token * (kv_len - q_len), kv_write_bytes=kv_new, hidden_bytes=hidden,
        qkv_bytes=qkv + q, ctx_bytes=ctx, pre_j=pre_j, attn_gpu_j=attn_j, post_j=post_j, attn_cpu_j=cpu_j,
        work=(flops_and_bytes(pre), flops_and_bytes(attn), flops_and_bytes(post)),
        gpu_bound=dominant(pre_by, attn_by, post_by), gpu_bound_without_attention=dominant(pre_by, post_by),
        cpu_bound=dominant(cpu_by))
    return (simple("embed", groups["embed"], hidden), layer, simple("head", groups["head"], 0.0))


CPU_ATTENTION_FORMAT = "fp32"


def flexgen_cpu_attention(attn: list[g.Op]) -> list[g.Op]:
    """The attention ops as FlexGen's CPU path runs them, for the host CPU's roofline.

    FlexGen (FMInference/FlexLLMGen; same code in its forks, e.g. Relaxed-System-Lab/FlexGen
    flexgen/flex_opt.py and pytorch_backend.py) computes decode attention over a CPU-resident
    fp16 KV cache (cpu_cache_compute) in three passes over every cached element:
      1. SelfAttention.load_cache, "path 1": general_copy of the fp16 cache home into the fp32
         `attention_compute_workspace` (TorchDevice.init_attention_compute_workspace allocates it
         as np.float32): read 2 B, write 4 B per element;
      2. TorchDevice.mha_gen: `k.permute(1, 2, 0).reshape(b * n_head, head_dim, src_s)` and
         `v.permute(1, 0, 2).reshape(...)` of the non-contiguous workspace views copy them:
         read 4 B, write 4 B;
      3. `_attention_value`: torch.bmm in fp32 (q.float().cpu()): read 4 B.
    So each cached element moves 18 B through DRAM where an fp16 kernel would move 2 B; the
    CPU has no native fp16 arithmetic either (AVX-512 Skylake, hardware.md). Write-allocate
    (read-for-ownership) traffic of the copies is not added: the preset's STREAM-derived memory
    efficiency already reflects it in part."""
    wide_fmt = get_format(CPU_ATTENTION_FORMAT)
    out: list[g.Op] = []
    for op in attn:
        reads = []
        for t in op.reads:
            if t.role == "kv" and len(t.shape) > 1:
                wide = replace(t, name=f"{t.name}.{CPU_ATTENTION_FORMAT}", fmt=CPU_ATTENTION_FORMAT,
                               bytes=int(wide_fmt.storage_bytes(t.shape)))
                out.append(g.Op(f"{wide.name}.convert", g.ELEMENTWISE, 0.0, (t,), (wide,),
                                compute_format=CPU_ATTENTION_FORMAT, layer=op.layer))
                out.append(g.Op(f"{wide.name}.permute", g.ELEMENTWISE, 0.0, (wide,), (wide,),
                                compute_format=CPU_ATTENTION_FORMAT, layer=op.layer))
                reads.append(wide)
            else:
                reads.append(t)
        out.append(replace(op, reads=tuple(reads), compute_format=CPU_ATTENTION_FORMAT))
    return out


def cost_functions(mapper):
    """Per-op costs (duration and dynamic energy) on the mapper's GPU and host CPU, with the core's roofline."""
    gpu_unit, gpu_tier = mapper.machine.units[mapper.unit_name], mapper.machine.memory[mapper.machine.device_tier]
    host, mode = mapper.host, mapper.workload.compute
    return (lambda op: roofline_cost(op, gpu_unit, mapper.unit_name, gpu_tier, mode),
            lambda op: roofline_cost(op, host.cpu, host.cpu_name, host.cpu_memory, mode))


@dataclass(frozen=True)
class Tag:
    """Timeline tag of a schedule task (read by sim.core.results.op_records)."""

    kind: str                  # "compute" or "transfer"
    bytes: float = 0.0
    bound: str = "link"
    path: str = ""
    energy_j: float = 0.0      # a compute's dynamic energy (SlotWork), a transfer's (module doc)
    flops: float = 0.0         # a compute's FLOPs (its bytes: `bytes`, its ops' tensors)
    gpu_j: float = 0.0         # the part of a transfer's energy_j on the GPU's memory, which its board draws


@dataclass
class StepSim:
    time_s: float
    busy_s: dict[str, float]
    bytes: dict[str, float]              # link -> bytes moved in the step
    timeline: Timeline | None = None
    peak_buffer_bytes: dict[str, float] = field(default_factory=dict)
    energy_j: dict[str, float] = field(default_factory=dict)   # resource -> its tasks' dynamic energy (a transfer's
                                                               # GPU-memory side under GPU)
    transfer_j: dict[str, float] = field(default_factory=dict)   # link -> its transfers' joules, both sides

    def counters(self) -> dict[str, float]:
        """The step's extensive counters: each link's bytes, and its transfer joules under TRANSFER_J + link."""
        return {**self.bytes, **{TRANSFER_J + link: j for link, j in self.transfer_j.items()}}


def whole(nbytes: float) -> float:
    """Container amounts in whole bytes: sums of integer-valued floats are exact,
    so a release never overfills a container by a rounding error (a simpy
    Container put beyond capacity would wait forever)."""
    return float(math.ceil(nbytes))


def build_tasks(slots: list[SlotWork], p: Policy, rates: Rates, phase: str) -> list[Task]:
    """The task list of one step of the block schedule (see module docstring)."""
    b = _StepBuilder(p, rates, phase)
    for s, work in enumerate(slots):
        b.slot(s, work, slots[s - 1] if s > 0 else None, s < len(slots) - 1)
    return b.tasks


class _StepBuilder:
    """Appends one step's tasks slot by slot, GPU batch by GPU batch, in the order the
    schedule issues them (the engine breaks ties by that order)."""

    def __init__(self, p: Policy, rates: Rates, phase: str):
        self.p, self.rates = p, rates
        self.nb = p.num_gpu_batches
        cc, cd = p.kv_cache[1], p.kv_cache[2]
        self.cpu_attn = p.cpu_attention and phase == "decode" and cc + cd > 0
        self.w_h2d = rates.h2d * (1.0 if p.pinned else rates.pageable_factor)
        self.tasks: list[Task] = []
        self.computes: list[str] = []     # the GPU chain, in order: the last task of each (slot, batch)
        self.hidden_store: dict[int, list[str]] = {}

    def xfer(self, tid: str, res: str, nbytes: float, deps: list[str], kind: str, acquire=(), release=()
             ) -> str | None:
        if nbytes <= 0:
            return None
        r = self.rates
        rate, lat = {"pcie_h2d": (self.w_h2d if kind == "weights" else r.h2d, r.pcie_latency_s),
                     "pcie_d2h": (r.d2h, r.pcie_latency_s),
                     "disk_r": (r.disk_read, r.disk_latency_s),
                     "disk_w": (r.disk_write, r.disk_latency_s)}[res]
        resource = "disk" if res.startswith("disk") else res
        host_j, gpu_j = r.transfer_j(res, nbytes, pageable=res == "pcie_h2d" and kind == "weights" and not self.p.pinned)
        self.tasks.append(Task(tid, resource, lat + nbytes / rate, tuple(d for d in deps if d), tuple(acquire),
                               tuple(release), Tag("transfer", nbytes, path=f"{kind} {res}",
                                                   energy_j=host_j + gpu_j, gpu_j=gpu_j)))
        return tid

    def chain(self, prefix: str, nbytes: float, disk_frac: float, off_frac: float, deps: list[str], kind: str,
              buf: str | None) -> list[str]:
        """Load `off_frac` of `nbytes` to the GPU, the `disk_frac` part first from disk."""
        d = self.xfer(f"{prefix}.disk", "disk_r", disk_frac * nbytes, deps, kind)
        acq = ((buf, whole(off_frac * nbytes)),) if buf else ()
        h = self.xfer(f"{prefix}.h2d", "pcie_h2d", off_frac * nbytes, deps + [d], kind, acquire=acq)
        return [h or d] if (h or d) else []

    def store(self, prefix: str, nbytes: float, disk_frac: float, off_frac: float, deps: list[str], kind: str,
              over_pcie: bool = True) -> list[str]:
        h = self.xfer(f"{prefix}.d2h", "pcie_d2h", off_frac * nbytes, deps, kind) if over_pcie else None
        d = self.xfer(f"{prefix}.disk", "disk_w", disk_frac * nbytes, deps + [h], kind)
        return [x for x in (h, d) if x]

    def slot(self, s: int, work: SlotWork, prev: SlotWork | None, has_next: bool) -> None:
        """A slot's weight load, then each GPU batch's inputs, compute and write-backs."""
        wc, wd = self.p.weights[1], self.p.weights[2]
        n0 = len(self.computes)
        gate_w = self.computes[n0 - self.nb - 1] if n0 - self.nb - 1 >= 0 else None  # the slot before last
        w_deps = self.chain(f"{work.name}.w", work.weight_bytes, wd, wc + wd, [gate_w], "weights", W_BUF)
        for k in range(self.nb):
            first = len(self.tasks)
            tag = f"{work.name}.b{k}" if self.nb > 1 else work.name
            self.gpu_batch(k, tag, work, prev, has_next, w_deps, (wc + wd) * work.weight_bytes)
            # This GPU batch's tasks work for the slot's ops, whichever batch: reports sum them.
            self.tasks[first:] = [replace(t, op=work.name + t.id.removeprefix(tag)) for t in self.tasks[first:]]

    def gpu_batch(self, k: int, tag: str, work: SlotWork, prev: SlotWork | None, has_next: bool,
                  w_deps: list[str], w_off: float) -> None:
        cc, cd = self.p.kv_cache[1], self.p.kv_cache[2]
        hc, hd = self.p.activations[1], self.p.activations[2]
        n = len(self.computes)
        gate = self.computes[n - 2] if n >= 2 else None
        deps = ([self.computes[-1]] if self.computes else []) + w_deps
        kv_held = 0.0
        if work.is_layer and work.kv_read_bytes:
            if self.cpu_attn:   # the CPU reads its own part; the disk part comes to CPU memory first
                deps += self.chain(f"{tag}.kv", work.kv_read_bytes, cd, 0.0, [gate], "kv_cache", None)
            else:
                kv_held = whole((cc + cd) * work.kv_read_bytes)
                deps += self.chain(f"{tag}.kv", work.kv_read_bytes, cd, cc + cd, [gate], "kv_cache", KV_BUF)
        if prev is not None and (hc + hd) > 0:
            deps += self.chain(f"{tag}.h", prev.hidden_bytes, hd, hc + hd,
                               [gate] + self.hidden_store.pop(k, []), "activations", None)
        release = [(KV_BUF, kv_held)] if kv_held else []
        if k == self.nb - 1 and w_off:
            release.append((W_BUF, whole(w_off)))
        cid = self.compute(tag, work, deps, release)
        if has_next and (hc + hd) > 0:
            self.hidden_store[k] = self.store(f"{tag}.hw", work.hidden_bytes, hd, hc + hd, [cid], "activations")
        self.computes.append(cid)

    def compute(self, tag: str, work: SlotWork, deps: list[str], release: list) -> str:
        """The GPU batch's compute (split around CPU attention where the policy asks for it)
        and its KV write-back, which later work overlaps: nothing in the step waits on it."""
        cg, cc, cd = self.p.kv_cache

        (pre_f, pre_b), (attn_f, attn_b), (post_f, post_b) = work.work

        def gpu(joules: float, flops: float, nbytes: float, bound: str = work.gpu_bound) -> Tag:
            return Tag("compute", nbytes, bound=bound, path="gpu", energy_j=joules, flops=flops)
        if self.cpu_attn and work.is_layer:
            a = f"{tag}.pre"
            self.tasks.append(Task(a, GPU, work.pre_s + cg * work.attn_gpu_s, tuple(d for d in deps if d),
                                   tag=gpu(work.pre_j + cg * work.attn_gpu_j, pre_f + cg * attn_f, pre_b + cg * attn_b,
                                           work.gpu_bound_without_attention)))
            q = self.xfer(f"{tag}.qkv.d2h", "pcie_d2h", work.qkv_bytes, [a], "activations")
            c = f"{tag}.cpu_attn"
            self.tasks.append(Task(c, CPU, (cc + cd) * work.attn_cpu_s, tuple(x for x in (a, q) if x),
                                   tag=Tag("compute", (cc + cd) * work.attn_cpu_bytes, bound=work.cpu_bound, path="cpu attention",
                                           energy_j=(cc + cd) * work.attn_cpu_j, flops=(cc + cd) * attn_f)))
            r = self.xfer(f"{tag}.ctx.h2d", "pcie_h2d", work.ctx_bytes, [c], "activations")
            cid = f"{tag}.post"
            self.tasks.append(Task(cid, GPU, work.post_s, tuple(x for x in (c, r) if x), release=tuple(release),
                                   tag=gpu(work.post_j, post_f, post_b, work.gpu_bound_without_attention)))
            self.store(f"{tag}.kvw", work.kv_write_bytes, cd, 0.0, [c], "kv_cache", over_pcie=False)
            return cid
        cid = f"{tag}.compute"
        self.tasks.append(Task(cid, GPU, work.gpu_s, tuple(d for d in deps if d), release=tuple(release),
                               tag=gpu(work.gpu_j, pre_f + attn_f + post_f, pre_b + attn_b + post_b)))
        if work.is_layer:
            self.store(f"{tag}.kvw", work.kv_write_bytes, cd, cc + cd, [cid], "kv_cache")
        return cid


def full_slots(embed: SlotWork, layer: SlotWork, head: SlotWork, num_layers: int) -> list[SlotWork]:
    return [embed] + [replace(layer, name=f"L{i}") for i in range(num_layers)] + [head]


def run_step(slots: list[SlotWork], p: Policy, rates: Rates, phase: str, buffers: dict[str, float],
             keep_timeline: bool = False) -> StepSim:
    tl = engine.run(build_tasks(slots, p, rates, phase), {}, buffers)
    moved: dict[str, float] = dict.fromkeys(LINKS, 0.0)
    joules: dict[str, float] = {}
    transfer_j: dict[str, float] = {}
    for i in tl.intervals:
        if i.resource in moved:
            moved[i.resource] += i.tag.bytes
            transfer_j[i.resource] = transfer_j.get(i.resource, 0.0) + i.tag.energy_j
        if i.tag.energy_j:   # a transfer's GPU-memory side on the GPU (its board's limit counts it)
            joules[i.resource] = joules.get(i.resource, 0.0) + i.tag.energy_j - i.tag.gpu_j
            joules[GPU] = joules.get(GPU, 0.0) + i.tag.gpu_j
    return StepSim(tl.makespan_s, tl.busy_s(), moved, tl if keep_timeline else None, dict(tl.peak_used), joules,
                   transfer_j)

"""Offload machines (kind `offload`): one GPU plus CPU DRAM and a disk, as in FlexGen.

The policy (hw_models.offload.spec) places fractions of the weights, KV cache
and activations on each tier; the block schedule (hw_models.offload.sched)
runs in the event engine with the core's per-op roofline times on the GPU;
without a complete policy the search (hw_models.offload.search) chooses one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

from hw_models.base import Mapper, OwnPool
from hw_models.offload import report, sched
from hw_models.offload.advice import placement_advice
from hw_models.offload.search import search
from hw_models.offload.spec import Host, Policy, PolicySpec, host_spec, parse_policy
from sim.core.engine import Timeline
from sim.core.errors import CapacityError, ConfigError
from sim.core.footprint import Footprint, activation_peak_bytes, kv_bytes, weight_bytes
from sim.core.formats import get_format
from sim.core.generation import DECODE_SAMPLES, Generation, RunFigures, fold_layers, run_generation
from sim.core.lowering import lower, per_layer_overrides
from sim.core.results import StepResult
from sim.core.units import fmt_bytes


TIMELINE_MAX_COMPUTES = 2000


@dataclass(frozen=True)
class Placement:
    """Bytes per tier of a policy, and the GPU buffer containers it leaves."""

    footprint: Footprint
    buffers: dict[str, float]       # container -> bytes
    short: str | None               # why it does not fit and what helps (offload.advice), or None


class OffloadMapper(Mapper):
    kind = "offload"
    caps_whole_steps = False   # its block schedule caps the GPU's part of each step itself (policy_step)
    records_at_capped_clock = False   # its step timeline is the block schedule at full clock (step_timeline)
    caps_by_bound = False             # its block schedule keeps no op-by-op split: the GPU's part stretches whole
    # Identical layers fold as in the core loop, exact once the schedule is periodic
    # within F layers; the block schedule looks back at most two computes, so F = 3
    # (tests/test_offload.py checks it against the exhaustive run).
    fold_layers = 3
    # FlexGen generates a whole block at once: every prompt padded to one length, the block's sequence count
    # fixed by the policy (FMInference/FlexLLMGen flexllmgen/flex_opt.py, OptLM.generate: `prompt_len =
    # len(inputs[0])`, `assert num_prompts % (gpu_batch_size * num_gpu_batches) == 0`), every sequence run to
    # the block's gen_len (`assert stop is None`). A served stream is that: static batching, one block at a time.
    serving_schedulers = ("static",)
    serving_schedulers_why = ("a FlexGen block streams every layer's weights once per step for a fixed block of "
                              "sequences padded to one prompt length, run to its longest output; continuous batching "
                              "admits and retires sequences between steps, which a block cannot")
    serving_exact = True   # its steps are whole padded blocks, not the surrogate's mixed batches

    def __init__(self, machine, workload, model):
        super().__init__(machine, workload, model)
        self.unit_name = machine.main_unit
        self.host: Host = host_spec(machine)
        # What the run's energy counts beside the GPU's board: the host CPU where the preset gives it a power figure
        # (units.<cpu>.power_w: over its busy time), and the host's memory, link and disk traffic where the preset
        # prices it (a trial read "with the host CPU and disk" on flexgen_t4, whose CPU has none: 0 W).
        cpu = self.host.cpu
        # Without an idle figure the CPU draws power_w over its busy time alone (Mapper.power_j): said so, since a
        # trial read "with the host CPU" as the host's whole draw and PCIe-bound runs as near-free on the host.
        self.rates = sched.Rates.of(self.host, machine.memory[machine.device_tier])
        traffic = self.rates.host_priced()
        self.power_includes = ", ".join(x for x in ("host CPU" if cpu.idle_power_w is not None else
                                                    "host CPU's busy time" if cpu.power_w else "", traffic) if x)
        self.spec: PolicySpec = parse_policy(workload.section("policy"), workload.batch,
                                             workload.source or workload.name)
        self.gpu_cost, self.cpu_cost = sched.cost_functions(self)
        self._works = lru_cache(maxsize=None)(self._works_uncached)
        self.search_result = None
        self.gpu_capacity_limit: float | None = None   # `sim offload search --max-gpu-mem`
        if per_layer := per_layer_overrides(model, self.formats):
            raise ConfigError(f"{workload.source or workload.name}: formats.overrides.{per_layer[0]}: the offload kind "
                              "streams every layer as the first (FlexGen's block schedule repeats one layer's "
                              "transfers), so formats for some layers only are not modelled; name every layer's op "
                              f"({per_layer[0].split('.', 1)[-1]}) or use a gpu preset")

    # -- per-GPU-batch work ----------------------------------------------
    def _works_uncached(self, phase: str, gbs: int, q_len: int, kv_len: int):
        w = self.workload
        return sched.slot_works(self.model, self.formats, w.flash_attention, phase, gbs, q_len, kv_len,
                                self.gpu_cost, self.cpu_cost)

    def works(self, phase: str, gbs: int, q_len: int, kv_len: int):
        return self._works(phase, gbs, q_len, kv_len)

    # -- memory -----------------------------------------------------------
    @cached_property
    def _weight_bytes(self) -> float:
        return float(weight_bytes(self.model, self.formats))

    @lru_cache(maxsize=None)
    def _working_bytes(self, gbs: int) -> float:
        w = self.workload
        return float(activation_peak_bytes(lower(self.model, "prefill", gbs, w.prompt_len, w.prompt_len,
                                                 self.formats, w.flash_attention, num_layers=1)))

    def sizes(self, bls: int, gbs: int) -> dict[str, float]:
        """Home sizes of the three roles for a block of `bls` sequences, and the
        GPU working set of one GPU batch (the largest op of a prefill layer)."""
        w = self.workload
        hidden = get_format(self.formats.activations).storage_bytes((bls * w.prompt_len, self.model.hidden_size))
        return dict(weights=self._weight_bytes,
                    kv_cache=float(kv_bytes(self.model, self.formats, bls, w.prompt_len + w.gen_len)),
                    activations=float(hidden), working=self._working_bytes(gbs))

    def placement(self, p: Policy) -> Placement:
        w = self.workload
        s = self.sizes(p.block_size, p.gpu_batch_size)
        fp = Footprint()
        tiers = (self.machine.device_tier, self.host.cpu_memory_name, self.host.disk_name)
        for role in ("weights", "kv_cache", "activations"):
            for tier, frac in zip(tiers, getattr(p, role)):
                if frac > 0:
                    fp.add(tier, role, frac * s[role])
        gpu = self.machine.device_tier
        fp.add(gpu, "activations", s["working"])
        # Buffers for what streams in: one slot's off-GPU weights, one GPU batch's off-GPU KV.
        embed, layer, head = self.works("decode", p.gpu_batch_size, 1, w.prompt_len + w.gen_len - 1)
        w_buf = (p.weights[1] + p.weights[2]) * max(x.weight_bytes for x in (embed, layer, head))
        kv_off = 0.0 if p.cpu_attention else p.kv_off_gpu
        kv_buf = kv_off * layer.kv_read_bytes
        gpu_cap = min(self.machine.memory[gpu].capacity_bytes, self.gpu_capacity_limit or float("inf"))
        free = gpu_cap - fp.total(gpu)
        # The least the schedule streams through (the run's buffers take whatever else is free, below).
        fp.add(gpu, "streaming_buffers", w_buf + kv_buf)
        short = None
        caps = (gpu_cap, *(self.machine.memory[t].capacity_bytes for t in tiers[1:]))
        for i, (tier, cap) in enumerate(zip(tiers, caps)):
            if fp.total(tier) > cap * (1 + 1e-9):
                short = (f"needs {fmt_bytes(fp.total(tier))} in {self.machine.name}.{tier} ({fp.describe(tier)}) "
                         f"but it holds {fmt_bytes(cap)}: short by {fmt_bytes(fp.total(tier) - cap)}. "
                         + placement_advice(self.machine, tiers, caps, fp, i, p, self.gpu_capacity_limit))
                break
        # Whole-byte chunks, as the schedule acquires them: whole(2 x chunk) is a byte short of two whole chunks
        # whenever a chunk is fractional, and the next slot's weights then never load during this slot's compute.
        w_chunk = sched.whole(w_buf)
        w_cap = min(2 * w_chunk, max(free - kv_buf, w_chunk))
        buffers = {sched.W_BUF: sched.whole(max(w_cap, 1.0)), sched.KV_BUF: sched.whole(max(free - w_cap, kv_buf, 1.0))}
        return Placement(fp, buffers, short)

    def footprint(self) -> Footprint:
        pl = self.placement(self.policy())
        if pl.short:
            src = f"{self.workload.source}: " if self.workload.source else ""   # the file first (an offload trial)
            raise CapacityError(f"{src}{self.model.name} on {self.machine.name} with policy [{self.policy().describe()}]: "
                                f"{pl.short}")
        return pl.footprint

    def capacity_hint(self, roles: dict[str, float]) -> str:
        return "Move more of the weights or KV cache to CPU or disk (policy), or use a smaller batch."

    # -- policy -----------------------------------------------------------
    def policy(self) -> Policy:
        if self.spec.complete():
            return self.spec.policy()
        if self.search_result is None:
            self.search_result = search(self, self.spec)
        return self.search_result.best.policy

    # -- simulation: the generation loop's hooks --------------------------------
    @cached_property
    def _run_policy(self) -> tuple[Policy, dict[str, float]]:
        """The policy the run uses and the GPU buffers its placement leaves."""
        p = self.policy()
        return p, self.placement(p).buffers

    def policy_step(self, p: Policy, phase: str, q_len: int, kv_len: int, buffers: dict[str, float],
                    exhaustive: bool = False) -> StepResult:
        """One step of the block schedule under policy `p`, identical layers folded;
        counters are the bytes moved over each link (and the power cap's stretch, where it binds)."""
        embed, layer, head = self.works(phase, p.gpu_batch_size, q_len, kv_len)

        # The schedule's compute resources by the units' own names, which Mapper.power_j reads (a preset whose
        # units were t4 and xeon read 0 J/token: the busy time was booked under "gpu" and "cpu").
        names = {sched.GPU: self.unit_name, sched.CPU: self.host.cpu_name}

        def run(n: int) -> StepResult:
            s = sched.run_step(sched.full_slots(embed, layer, head, n), p, self.rates, phase, buffers)
            busy = {names.get(r, r): t for r, t in s.busy_s.items()}
            # The GPU board's power limit (Mapper.capped) on the GPU's side alone: the host CPU's busy time and
            # its attention's energy are not the board's. Capped before the fold, which is the same where every
            # folded run binds: a capped step's time is then linear in its clocked energy.
            gpu = self.capped(StepResult(phase, kv_len, s.time_s, {self.unit_name: busy.get(self.unit_name, 0.0)},
                                         s.energy_j.get(sched.GPU, 0.0)))
            return StepResult(phase, kv_len, gpu.time_s, busy, sum(s.energy_j.values()), {**s.counters(), **gpu.counters})

        return fold_layers(run, self.model.num_layers, self.fold_layers, exhaustive)

    def step(self, phase: str, q_len: int, kv_len: int, exhaustive: bool = False) -> StepResult:
        p, buffers = self._run_policy
        return self.policy_step(p, phase, q_len, kv_len, buffers, exhaustive)

    def step_timeline(self, phase: str, q_len: int, kv_len: int) -> Timeline:
        """One step in full for the report, Gantt chart and trace; a step of more
        than TIMELINE_MAX_COMPUTES GPU computes shows only its first layers."""
        p, buffers = self._run_policy
        embed, layer, head = self.works(phase, p.gpu_batch_size, q_len, kv_len)
        layers = max(self.fold_layers + 1, min(self.model.num_layers, TIMELINE_MAX_COMPUTES // p.num_gpu_batches))
        slots = sched.full_slots(embed, layer, head, min(layers, self.model.num_layers))
        return sched.run_step(slots, p, self.rates, phase, buffers, keep_timeline=True).timeline

    def generation(self, p: Policy, buffers: dict[str, float], samples: int = DECODE_SAMPLES,
                   exhaustive: bool = False) -> Generation:
        """A whole generation under policy `p` (the search confirms candidates with it)."""
        w = self.workload
        return run_generation(lambda ph, q, kv: self.policy_step(p, ph, q, kv, buffers, exhaustive),
                              w.prompt_len, w.gen_len, samples, exhaustive)

    # -- the serving hooks (hw_models.base.Mapper; sim serve under scheduler.kind: static) ---------
    def serving_pool(self) -> OwnPool:
        """The block the policy places: its sequences, each with up to the workload's prompt_len + gen_len tokens
        of KV where the policy puts them (GPU, CPU or disk), its prompts up to prompt_len (the activations and
        the GPU working set are placed for that). A placement that does not fit is a CapacityError."""
        self.footprint()
        w, p = self.workload, self.policy()
        how = f"FlexGen block of {p.block_size} ({p.describe()}{'; chosen by the policy search' if self.search_result else ''})"
        return OwnPool(p.block_size, w.prompt_len, w.prompt_len + w.gen_len, how)

    def unpriced_transfers(self) -> dict[str, str]:
        """The transfer energies the preset leaves out (sched.Rates: what moving a byte costs): key -> what."""
        h = self.host
        gpu = self.machine.device_tier
        keys = {f"memory.{gpu}.energy_j_per_byte": (self.machine.memory[gpu].energy_j_per_byte, "the GPU's memory"),
                "host.pcie.energy_j_per_byte": (h.pcie.energy_j_per_byte, "the link"),
                f"memory.{h.cpu_memory_name}.energy_j_per_byte": (h.cpu_memory.energy_j_per_byte, "host DRAM"),
                f"memory.{h.disk_name}.energy_j_per_byte": (h.disk.energy_j_per_byte, "the disk")}
        return {k: what for k, (v, what) in keys.items() if v is None}

    def serving_board(self):
        """The GPU's board, its energy and power per device with the host's CPU beside it where it has a figure."""
        return replace(super().serving_board(), with_host=self.power_includes)

    def iteration(self, seqs, logits=None, exhaustive=False, busy=None, device_only=False,
                  experts=True) -> StepResult:
        """One step of a served block: the static scheduler's padded sequences, all one prompt (P, P) or all
        decoding at one kv_len (1, kv). FlexGen computes the whole block whatever part of it is still live
        (class comment), so the step is the policy's block step (policy_step) for any count up to the block.
        No engine host work: the step times are the block schedule's."""
        p, buffers = self._run_policy
        q, kv = seqs[0]   # no draft logits or attention groups reach it: only the static scheduler drives it
        if len(seqs) > p.block_size or any(s != (q, kv) for s in seqs):
            raise ValueError(f"an offload step runs one padded block of <= {p.block_size} alike sequences, "
                             f"not {len(seqs)} of {sorted(set(seqs))[:4]}")
        key = (q, kv, exhaustive)
        step = self._served.get(key)
        if step is None:
            step = self._served[key] = self.policy_step(p, "prefill" if q == kv else "decode", q, kv, buffers,
                                                        exhaustive)
        return step

    @cached_property
    def _served(self) -> dict[tuple[int, int, bool], StepResult]:
        return {}   # a served stream repeats its blocks' shapes

    def figures(self, gen: Generation, decode_tl: Timeline | None) -> RunFigures:
        p, buffers = self._run_policy
        fig = super().figures(gen, decode_tl)
        fig.batch = p.block_size
        mid = self.policy_step(p, "decode", 1, gen.rep_kv, buffers)
        moved = {link: mid.counters.get(link, 0.0) for link in sched.LINKS}
        metrics = {f"bytes_per_decode_step.{link}": b for link, b in moved.items()}
        metrics.update({f"link_utilization.{link}": fig.utilization.get(link, 0.0) for link in sched.LINKS})
        metrics.update({f"policy.{k}": float(v) for k, v in p.to_dict().items()})
        if self.search_result is not None:
            metrics["search.candidates"] = float(self.search_result.candidates)
            metrics["search.lp_throughput_tok_s"] = self.search_result.best.lp_throughput
        w = self.workload
        if w.batch != p.block_size:
            fig.notes.append(f"the policy search chose an effective batch of {p.block_size} "
                             f"(GPU batch {p.gpu_batch_size} x {p.num_gpu_batches}); the workload's batch "
                             f"{w.batch} is its upper bound")
        if not self.host.cpu.power_w:   # a trial read the power line as the host's too
            fig.notes.append(f"energy: {self.machine.name}'s host CPU (units.{self.host.cpu_name}) has no power_w: "
                             "the energy and power count the GPU and the bytes' J/byte (the transfers', and host "
                             "DRAM's under CPU attention) alone")
        elif self.host.cpu.idle_power_w is None:
            fig.notes.append(f"energy: the host CPU (units.{self.host.cpu_name}) draws its power_w "
                             f"{self.host.cpu.power_w:g} W over its busy time alone, nothing while it waits, and the "
                             "DIMMs' and the disk's idle draw is not modelled: a link-bound step's host energy is a "
                             "lower bound (docs/offload.md)")
        if unpriced := self.unpriced_transfers():   # whatever the CPU's figures (a review: it had hung on them)
            fig.notes.append(f"energy: {', '.join(unpriced)} not given: the bytes through "
                             f"{' and '.join(unpriced.values())} cost nothing (docs/offload.md)")
        fig.extra |= dict(metrics=metrics, policy=p.to_dict(), bytes_per_decode_step=moved,
                          offload=report.offload_data(p, mid, fig.utilization, self.rates, self.search_result,
                                                     self.unit_name))
        if self.search_result is not None:
            # Without the search's wall time: the same run must give byte-identical results.
            fig.extra["search"] = {k: v for k, v in self.search_result.summary().items() if k != "elapsed_s"}
        return fig


MAPPER = OffloadMapper

"""Offload machines (kind `offload`): one GPU plus CPU DRAM and a disk, as in FlexGen.

The policy (hw_models.offload.spec) places fractions of the weights, KV cache
and activations on each tier; the block schedule (hw_models.offload.sched)
runs in the event engine with the core's per-op roofline times on the GPU;
without a complete policy the search (hw_models.offload.search) chooses one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np
from rich.table import Table

from hw_models.offload import sched as sched
from hw_models.base import Mapper
from hw_models.offload.spec import Host, Policy, PolicySpec, host_spec, parse_policy
from sim.core.engine import Timeline
from sim.core.errors import CapacityError
from sim.core.formats import get_format
from sim.core.footprint import Footprint, activation_peak_bytes, kv_bytes, weight_bytes
from sim.core.lowering import lower
from sim.core.results import RunResult, op_records
from sim.core.generation import DECODE_SAMPLES, decode_kv_lens, sample_indices
from sim.core.units import fmt_bytes, fmt_time
from sim.core.workload import check_context


TIMELINE_MAX_COMPUTES = 2000


@dataclass(frozen=True)
class Placement:
    """Bytes per tier of a policy, and the GPU buffer containers it leaves."""

    footprint: Footprint
    buffers: dict[str, float]       # container -> bytes
    short: str | None               # why it does not fit, or None


class OffloadMapper(Mapper):
    kind = "offload"

    def __init__(self, machine, workload, model):
        super().__init__(machine, workload, model)
        self.unit_name = machine.main_unit
        self.host: Host = host_spec(machine)
        self.rates = sched.Rates.of(self.host)
        self.spec: PolicySpec = parse_policy(workload.policy, workload.batch, workload.source or workload.name)
        self.gpu_cost, self.cpu_cost = sched.cost_functions(self)
        self._works = lru_cache(maxsize=None)(self._works_uncached)
        self.search_result = None
        self.gpu_capacity_limit: float | None = None   # `sim offload search --max-gpu-mem`

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
        kv_off = 0.0 if p.cpu_attention else p.kv_cache[1] + p.kv_cache[2]
        kv_buf = kv_off * layer.kv_read_bytes
        gpu_cap = min(self.machine.memory[gpu].capacity_bytes, self.gpu_capacity_limit or float("inf"))
        free = gpu_cap - fp.total(gpu)
        short = None
        for tier in tiers:
            cap = gpu_cap if tier == gpu else self.machine.memory[tier].capacity_bytes
            need = fp.total(tier) + (w_buf + kv_buf if tier == gpu else 0.0)
            if need > cap * (1 + 1e-9):
                what = fp.describe(tier) + (f" + streaming buffers {fmt_bytes(w_buf + kv_buf)}" if tier == gpu else "")
                short = f"needs {fmt_bytes(need)} in {self.machine.name}.{tier} ({what}) but it holds {fmt_bytes(cap)}"
                break
        w_cap = min(2 * w_buf, max(free - kv_buf, w_buf))
        buffers = {sched.W_BUF: sched.whole(max(w_cap, w_buf, 1.0)), sched.KV_BUF: sched.whole(max(free - w_cap, kv_buf, 1.0))}
        return Placement(fp, buffers, short)

    def footprint(self) -> Footprint:
        pl = self.placement(self.policy())
        if pl.short:
            raise CapacityError(f"{self.model.name} on {self.machine.name} with policy [{self.policy().describe()}]: "
                                f"{pl.short}. Lower gpu_batch_size or move more to CPU/disk.")
        return pl.footprint

    def capacity_hint(self) -> str:
        return "Move more of the weights or KV cache to CPU or disk (policy), or use a smaller batch."

    # -- policy -----------------------------------------------------------
    def policy(self) -> Policy:
        if self.spec.complete():
            return self.spec.policy()
        if self.search_result is None:
            from hw_models.offload.search import search

            self.search_result = search(self, self.spec)
        return self.search_result.best.policy

    # -- simulation ---------------------------------------------------------
    def step(self, p: Policy, phase: str, q_len: int, kv_len: int, buffers: dict[str, float],
             exhaustive: bool = False) -> sched.StepSim:
        embed, layer, head = self.works(phase, p.gpu_batch_size, q_len, kv_len)
        return sched.step(embed, layer, head, self.model.num_layers, p, self.rates, phase, buffers, exhaustive)

    def timeline(self, p: Policy, phase: str, q_len: int, kv_len: int, buffers: dict[str, float]):
        """One step in full for the report, Gantt chart and trace; a step of more
        than TIMELINE_MAX_COMPUTES GPU computes shows only its first layers."""
        embed, layer, head = self.works(phase, p.gpu_batch_size, q_len, kv_len)
        layers = max(sched.FOLD_LAYERS + 1, min(self.model.num_layers, TIMELINE_MAX_COMPUTES // p.num_gpu_batches))
        slots = sched.full_slots(embed, layer, head, min(layers, self.model.num_layers))
        return sched.run_step(slots, p, self.rates, phase, buffers, keep_timeline=True)

    def generation(self, p: Policy, buffers: dict[str, float], samples: int = DECODE_SAMPLES,
                   exhaustive: bool = False) -> dict:
        """Prefill and decode times of a whole generation (decode steps sampled
        and interpolated exactly as the core's loop does)."""
        w = self.workload
        prefill = self.step(p, "prefill", w.prompt_len, w.prompt_len, buffers, exhaustive)
        kv = decode_kv_lens(w.prompt_len, w.gen_len)
        idx = np.arange(len(kv)) if exhaustive else sample_indices(len(kv), samples)
        sampled = [self.step(p, "decode", 1, int(kv[i]), buffers, exhaustive) for i in idx]
        times = np.interp(np.arange(len(kv)), idx, [s.time_s for s in sampled]) if len(kv) else np.zeros(0)
        share = len(kv) / len(idx) if len(idx) else 0.0
        busy = dict(prefill.busy_s)
        moved = {link: 0.0 for link in sched.LINKS}
        for s in sampled:
            for r, b in s.busy_s.items():
                busy[r] = busy.get(r, 0.0) + share * b
        for link in moved:
            moved[link] = prefill.bytes.get(link, 0.0) + share * sum(s.bytes.get(link, 0.0) for s in sampled)
        e2e = prefill.time_s + float(times.sum())
        return dict(prefill=prefill, sampled=sampled, idx=idx, times=times, busy=busy, bytes=moved, e2e=e2e,
                    steps=1 + len(idx), throughput=p.block_size * w.gen_len / e2e if e2e else 0.0)

    def simulate(self, exhaustive: bool = False, detail: bool = True) -> RunResult:
        w, m, machine = self.workload, self.model, self.machine
        notes = check_context(w, m)
        p = self.policy()
        fp = self.footprint()
        buffers = self.placement(p).buffers
        gen = self.generation(p, buffers, exhaustive=exhaustive)
        kv = decode_kv_lens(w.prompt_len, w.gen_len)
        rep_kv = int(kv[len(kv) // 2]) if len(kv) else w.prompt_len
        # Sweeps pass detail=False: metrics only, no per-op timelines.
        decode_tl = self.timeline(p, "decode", 1, rep_kv, buffers).timeline if detail else Timeline()
        prefill_tl = self.timeline(p, "prefill", w.prompt_len, w.prompt_len, buffers).timeline if detail else Timeline()
        e2e, times = gen["e2e"], gen["times"]
        tokens = p.block_size * w.gen_len
        power = sum((u.power_w or 0.0) * gen["busy"].get(name, 0.0) for name, u in machine.units.items())
        mid = self.step(p, "decode", 1, rep_kv, buffers)
        util = {r: b / e2e for r, b in gen["busy"].items()} if e2e else {}
        metrics = {f"bytes_per_decode_step.{link}": b for link, b in mid.bytes.items()}
        metrics.update({f"link_utilization.{link}": util.get(link, 0.0) for link in sched.LINKS})
        metrics.update({f"policy.{k}": float(v) for k, v in p.to_dict().items()})
        if self.search_result is not None:
            metrics["search.candidates"] = float(self.search_result.candidates)
            metrics["search.lp_throughput_tok_s"] = self.search_result.best.lp_throughput
        if w.batch != p.block_size:
            notes.append(f"the policy search chose an effective batch of {p.block_size} "
                         f"(GPU batch {p.gpu_batch_size} x {p.num_gpu_batches}); the workload's batch "
                         f"{w.batch} is its upper bound")
        result = RunResult(
            workload=w.name, hardware=machine.name, model=m.to_dict(), params=m.params(),
            batch=p.block_size, prompt_len=w.prompt_len, gen_len=w.gen_len, formats=w.formats.model_dump(),
            ttft_s=gen["prefill"].time_s, tpot_s=float(times.mean()) if len(times) else 0.0,
            tpot_first_s=float(times[0]) if len(times) else 0.0, tpot_last_s=float(times[-1]) if len(times) else 0.0,
            e2e_s=e2e, throughput_tok_s=gen["throughput"],
            peak_memory_bytes={t: fp.total(t) for t in fp.tiers}, memory_by_role=fp.tiers,
            utilization=util, energy_per_token_j=power / tokens if tokens else 0.0,
            prefill_ops=op_records(prefill_tl), decode_ops=op_records(decode_tl), decode_kv_len=rep_kv,
            prefill_timeline=prefill_tl, decode_timeline=decode_tl, notes=notes,
            simulated_steps=gen["steps"], exhaustive=exhaustive)
        result.extra["policy"] = p.to_dict()
        result.extra["bytes_per_decode_step"] = dict(mid.bytes)
        result.extra["metrics"] = metrics
        result.extra["report"] = self.report(p, mid, util)
        if self.search_result is not None:
            # Without the search's wall time: the same run must give byte-identical results.
            result.extra["search"] = {k: v for k, v in self.search_result.summary().items() if k != "elapsed_s"}
        return result

    def report(self, p: Policy, mid: sched.StepSim, util: dict[str, float]) -> list:
        t = Table(title=f"Offload policy{' (searched)' if self.search_result else ''}", title_justify="left")
        for col in ("role", "GPU", "CPU", "disk"):
            t.add_column(col, justify="left" if col == "role" else "right")
        for role in ("weights", "kv_cache", "activations"):
            t.add_row(role, *(f"{100 * x:.1f}%" for x in getattr(p, role)))
        t.caption = (f"GPU batch {p.gpu_batch_size} x {p.num_gpu_batches} GPU batches = block of {p.block_size}; "
                     f"attention over CPU KV on {'CPU' if p.cpu_attention else 'GPU'}; "
                     f"host weights {'pinned' if p.pinned else 'pageable'}")
        links = Table(title=f"Links, one decode step (kv_len mid-generation, {fmt_time(mid.time_s)})",
                      title_justify="left")
        for col in ("link", "bytes per step", "busy per step", "rate", "utilisation (whole run)"):
            links.add_column(col, justify="left" if col == "link" else "right")
        rate = {"pcie_h2d": self.rates.h2d, "pcie_d2h": self.rates.d2h,
                "disk": self.rates.disk_read}
        for link in sched.LINKS:
            links.add_row(link, fmt_bytes(mid.bytes.get(link, 0.0)), fmt_time(mid.busy_s.get(link, 0.0)),
                          f"{rate[link] / 1e9:.2f} GB/s", f"{100 * util.get(link, 0.0):.0f}%")
        links.add_row("gpu (compute)", "", fmt_time(mid.busy_s.get("gpu", 0.0)), "",
                      f"{100 * util.get('gpu', 0.0):.0f}%")
        out = [t, links]
        if self.search_result is not None:
            out.append(self.search_result.table())
        return out


MAPPER = OffloadMapper

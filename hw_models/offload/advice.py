"""What helps when an offload placement does not fit: the advice at the end of the kind's CapacityError.

A placement fills three tiers in order, GPU -> CPU memory -> disk, and what can help depends on which one
overflows: a policy share can move to the next tier only where the tier holds one and the next has room
(a GPU that holds only its working set and streaming buffers gains nothing from "move more to CPU/disk");
a smaller batch helps only where the KV cache or activations are on the tier (weights do not shrink with
it) and the block is more than one sequence; a larger tier always helps, and `--set` names the figure.
"""

from __future__ import annotations

import math

from hw_models.machine import Machine
from hw_models.offload.spec import TRIPLES, Policy, PolicySpec
from sim.core.errors import CapacityError
from sim.core.footprint import Footprint
from sim.core.units import fmt_bytes

LABELS = ("GPU memory", "CPU memory", "disk")
SCALES_WITH_BATCH = {"kv_cache": "KV cache", "activations": "activations"}   # role: its name in a message


def set_value(nbytes: float) -> str:
    """`nbytes` rounded up, as `--set` reads it ("52.35GB"): at least the figure named, never a byte short."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if nbytes >= size:
            return f"{math.ceil(nbytes / size * 100) / 100:g}{unit}"
    return f"{math.ceil(nbytes):.0f}"


def keys(roles: list[str], tier: int) -> str:
    """The policy keys of `roles` on tier `tier` (0 GPU, 1 CPU, 2 disk): `policy.wc/cc`."""
    return "policy." + "/".join(TRIPLES[r][tier] for r in roles)


def larger(machine: Machine, tier: str, need: float, limit: float | None = None) -> str:
    """The lever every tier has: more of it. Under `--max-gpu-mem` the cap is the flag, not the device."""
    device = machine.memory[tier].capacity_bytes
    if limit is not None and limit < device:
        return f"a higher --max-gpu-mem (now {fmt_bytes(limit)}; {machine.name}.{tier} holds {fmt_bytes(device)})"
    return f"a larger {tier}: --set hw.memory.{tier}.capacity_bytes={set_value(need)}"


def joined(helps: list[str]) -> str:
    return "What helps: " + "; ".join(helps[:-1]) + ("; or " if len(helps) > 1 else "") + helps[-1] + "."


def placement_advice(machine: Machine, tiers: tuple[str, str, str], caps: tuple[float, float, float],
                     fp: Footprint, i: int, p: Policy, limit: float | None = None) -> str:
    """The levers for tier `tiers[i]` overflowing under policy `p` (fp: the placement's bytes per tier and role)."""
    held = fp.tiers.get(tiers[i], {})
    shares = [r for r in TRIPLES if held.get(r) and getattr(p, r)[i] > 0]   # what the policy put there
    short = fp.total(tiers[i]) - caps[i]

    def room(j: int) -> str:
        free = caps[j] - fp.total(tiers[j])
        return f"{machine.name}.{tiers[j]} has {'only ' if free < short else ''}{fmt_bytes(free)} free"
    helps = []
    if i < 2 and shares and caps[i + 1] > fp.total(tiers[i + 1]):
        helps.append(f"more on {LABELS[i + 1]}: lower {keys(shares, i)}, raise {keys(shares, i + 1)} ({room(i + 1)})")
    if i == 2 and shares and caps[1] > fp.total(tiers[1]):   # no tier after the disk: back to CPU memory
        helps.append(f"less on disk: raise {keys(shares, 1)}, lower {keys(shares, 2)} ({room(1)})")
    if i == 0 and not p.cpu_attention and p.kv_off_gpu > 0:
        helps.append("policy.cpu_attention: true (attention reads the off-GPU KV cache on the CPU, so the GPU "
                     "keeps no buffer for it)")
    # The homes of the KV cache and activations grow with the block; the GPU's working set with the GPU batch.
    grows = [SCALES_WITH_BATCH[r] for r in SCALES_WITH_BATCH if r in shares and p.block_size > 1]
    grows += ["working set"] if i == 0 and p.gpu_batch_size > 1 else []
    if grows:
        helps.append(f"a smaller batch (the block of {p.block_size} = gpu_batch_size {p.gpu_batch_size} x "
                     f"num_gpu_batches {p.num_gpu_batches}; the {' and '.join(grows)} here "
                     f"grow{'' if len(grows) > 1 else 's'} with it)")
    helps.append(larger(machine, tiers[i], fp.total(tiers[i]), limit if i == 0 else None))
    return joined(helps)


def no_fit(mapper, spec: PolicySpec, pairs: list[tuple[int, int]], gpu_capacity: float) -> CapacityError:
    """Why the search found no placement, at the smallest block it tried, and what helps: the tiers together
    too small; else the tier that the GPU's working set and buffers, or the policy keys the workload fixed,
    overflow; else the tiers' room left for what the search places."""
    w, m, machine, host = mapper.workload, mapper.model, mapper.machine, mapper.host
    gbs, bls = min(g for g, _ in pairs), min(g * n for g, n in pairs)
    size = mapper.sizes(bls, gbs)
    tiers = (machine.device_tier, host.cpu_memory_name, host.disk_name)
    caps = (gpu_capacity, host.cpu_memory.capacity_bytes, host.disk.capacity_bytes)
    what = f"{m.name} ({w.formats.weights} weights, {w.prompt_len}+{w.gen_len} tokens, batch {bls})"
    src = f"{w.source}: " if w.source else ""   # the file first, as sim run's capacity errors (an offload trial)
    need = size["weights"] + size["kv_cache"]
    if need > sum(caps):
        helps = ["a smaller batch (the KV cache grows with it)"] if bls > 1 else []
        helps.append(f"a larger disk, with room for all that CPU memory cannot hold: "
                     f"--set hw.memory.{tiers[2]}.capacity_bytes={set_value(need - caps[1])}")
        return CapacityError(
            f"{src}{what} needs {fmt_bytes(need)} (weights {fmt_bytes(size['weights'])} + KV cache "
            f"{fmt_bytes(size['kv_cache'])}) but {machine.name} holds {fmt_bytes(sum(caps))} across GPU, CPU and "
            f"disk: short by {fmt_bytes(need - sum(caps))}. {joined(helps)}")
    fp, p = fixed_footprint(mapper, spec, tiers, gbs, bls)
    for i, (tier, cap) in enumerate(zip(tiers, caps)):
        if fp.total(tier) > cap * (1 - 1e-6):
            return CapacityError(
                f"{src}no placement of {what} fits {machine.name}: it needs {fmt_bytes(fp.total(tier))} in "
                f"{machine.name}.{tier} ({fp.describe(tier)}) but it holds {fmt_bytes(cap)}: short by "
                f"{fmt_bytes(fp.total(tier) - cap)}. " + placement_advice(machine, tiers, caps, fp, i, p, gpu_capacity))
    rest = sum(size[r] for r in TRIPLES if TRIPLES[r][0] not in spec.fractions)
    room = sum(caps) - sum(fp.total(t) for t in tiers)
    if rest <= room:   # the tiers' sums leave room: the LP's per-tier rows, not the totals, ruled every split out
        return CapacityError(f"{src}no placement of {what} fits {machine.name}: no split of the weights, KV cache and "
                             f"activations keeps every tier within its capacity ({fmt_bytes(room)} left in all for "
                             f"{fmt_bytes(rest)}); raise the GPU's memory or give the policy keys yourself")
    return CapacityError(
        f"{src}no placement of {what} fits {machine.name}: what the search places ({fmt_bytes(rest)}) needs more than the "
        f"{fmt_bytes(room)} that the GPU's working set and buffers and the workload's policy keys leave across GPU, "
        f"CPU and disk. {joined([larger(machine, tiers[2], caps[2] + rest - room)])}")


def fixed_footprint(mapper, spec: PolicySpec, tiers: tuple[str, str, str], gbs: int, bls: int
                    ) -> tuple[Footprint, Policy]:
    """What every candidate must place, as the search's LP counts it (search._memory_rows): on the GPU, one
    prefill layer's working set and one slot's streamed weights and KV, and on each tier the shares of the roles
    whose fractions the workload fixed; with the policy as the advice reads it (a role the search places counts
    as on CPU memory, so off the GPU)."""
    w = mapper.workload
    size = mapper.sizes(bls, gbs)
    pe, pl, ph = mapper.works("prefill", gbs, w.prompt_len, w.prompt_len)
    w_slot = max(pe.weight_bytes, pl.weight_bytes, ph.weight_bytes)
    kv_buf = 0.0
    if spec.cpu_attention is False:   # the search may otherwise attend on the CPU, which needs no KV buffer
        kv_buf = mapper.works("decode", gbs, 1, w.prompt_len + w.gen_len - 1)[1].kv_read_bytes
    fp = Footprint()
    fp.add(tiers[0], "activations", size["working"])
    fp.add(tiers[0], "streaming_buffers", w_slot + kv_buf)
    triples = {}
    for role, keys in TRIPLES.items():
        fixed = keys[0] in spec.fractions   # parse_policy completes a triple: all three keys fixed, or none
        triples[role] = tuple(spec.fractions[k] for k in keys) if fixed else (0.0, 1.0, 0.0)
        for tier, frac in zip(tiers, triples[role] if fixed else ()):
            if frac > 0:   # the LP's GPU row counts the streamed slot and KV buffer once, in the buffers
                buffered = {"weights": w_slot, "kv_cache": kv_buf}.get(role, 0.0) if tier == tiers[0] else 0.0
                fp.add(tier, role, frac * (size[role] - buffered))
    # Where the search may choose CPU attention it has tried it: the advice then does not offer it.
    p = Policy(triples["weights"], triples["kv_cache"], triples["activations"], gbs, bls // gbs,
               cpu_attention=spec.cpu_attention is not False)
    return fp, p

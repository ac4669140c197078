"""Policy search: FlexGen's LP for the placement fractions, an outer search
over GPU batch size, number of GPU batches and CPU attention, and the event
simulation to confirm the best candidates.

The LP (scipy HiGHS) has the nine fractions and the step times T_prefill and
T_decode. It ranks the candidates with room for one slot's streamed weights, the least the schedule runs
with; each of its favourites is simulated with its twin that leaves room for two (the next slot's weights
prefetched while this one computes), which the perfect-overlap LP cannot tell apart from one (an offload
trial: OPT-30B's favourites filled the GPU to the byte and ran their loads and compute in turn, ~20% below a
neighbour). Each step time is at least each resource's busy time in that step
(GPU compute, PCIe each way, the disk): the perfect-overlap max() form of the
FlexGen paper. Every busy time is linear in the fractions; so are the memory
constraints per tier (GPU: resident parts + working activations + the
streaming buffers). The objective is the generation time per block, or for
`latency` the decode step time. The max() form ignores pipeline fill, the
disk->CPU->GPU chaining and serial dependencies between a GPU batch's loads
and its compute; the DES has them, and the report shows both numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
from rich.table import Table

from hw_models.offload.advice import no_fit
from hw_models.offload.spec import TRIPLES, Policy, PolicySpec
from sim.core.units import fmt_time

GPU_BATCH_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
NUM_GPU_BATCHES = (*range(1, 17), 20, 24, 28, 32, 48, 64)
CONFIRM_TOP = 3          # candidates the DES re-runs
WEIGHT_STEP = 0.1        # the refinement's step in the weights' GPU share (_refine)
MAX_REFINE = 24          # event simulations the refinement may add
CONFIRM_SAMPLES = 3      # decode steps the DES samples while confirming (first, middle, last)
_KEYS = tuple(k for t in TRIPLES.values() for k in t)   # wg wc wd cg cc cd hg hc hd


@dataclass
class Candidate:
    policy: Policy
    lp_prefill_s: float
    lp_decode_s: float
    lp_throughput: float
    des_throughput: float | None = None
    des_tpot_s: float | None = None


def search_title(objective: str, candidates: int, feasible: int, simulated: int, took: str = "") -> str:
    """The search table's title: the LP's count, and the rows, which the local search may add to (a newcomer read
    "2 candidates, 2 feasible" over 3 rows)."""
    def count(k: int, one: str, many: str) -> str:   # "1 LP candidate", not "1 candidates" (a trial)
        return f"{k} {one if k == 1 else many}"

    return (f"Policy search ({objective}): {count(candidates, 'LP candidate', 'LP candidates')} ({feasible} feasible)"
            f"{took}; {count(simulated, 'policy', 'policies')} event-simulated (the LP's best, their twins with room "
            "to prefetch the next layer's weights, the local search's neighbours): LP (perfect overlap) vs event "
            "simulation")


def _figures(c: Candidate) -> dict[str, float | None]:
    """A candidate's LP and event-simulated figures, as the search's JSON gives them."""
    return dict(lp_throughput_tok_s=c.lp_throughput, lp_tpot_s=c.lp_decode_s, des_throughput_tok_s=c.des_throughput,
                des_tpot_s=c.des_tpot_s)


@dataclass
class SearchResult:
    best: Candidate
    top: list[Candidate]
    candidates: int
    feasible: int
    objective: str
    elapsed_s: float

    def summary(self) -> dict:
        # the best policy's figures beside it, as each row of `top` has them (a trial had to look them up there)
        return dict(objective=self.objective, candidates=self.candidates, feasible=self.feasible,
                    elapsed_s=self.elapsed_s, best=self.best.policy.to_dict(),
                    **{f"best_{k}": v for k, v in _figures(self.best).items()},
                    top=[dict(policy=c.policy.to_dict(), describe=c.policy.describe(), **_figures(c)) for c in self.top])

    def table(self) -> Table:
        t = Table(title=search_title(self.objective, self.candidates, self.feasible, len(self.top),
                                     f", {self.elapsed_s:.1f} s"), title_justify="left")
        for col in ("policy", "LP tok/s", "DES tok/s", "LP TPOT", "DES TPOT"):
            t.add_column(col, justify="left" if col == "policy" else "right")
        for c in self.top:
            t.add_row(c.policy.describe(), f"{c.lp_throughput:.3g}",
                      f"{c.des_throughput:.3g}" if c.des_throughput else "-", fmt_time(c.lp_decode_s),
                      fmt_time(c.des_tpot_s) if c.des_tpot_s else "-",
                      style="bold" if c is self.best else None)
        return t


def _batch_pairs(spec: PolicySpec, batch: int, objective: str) -> list[tuple[int, int]]:
    if spec.gpu_batch_size and spec.num_gpu_batches:
        return [(spec.gpu_batch_size, spec.num_gpu_batches)]
    pairs = []
    for gbs in GPU_BATCH_SIZES:
        if gbs > batch:
            break
        if objective == "latency":
            if batch % gbs == 0:
                pairs.append((gbs, batch // gbs))
            continue
        nbs = [nb for nb in NUM_GPU_BATCHES if nb * gbs <= batch]
        pairs += [(gbs, nb) for nb in nbs]
    return pairs


class _Rows:
    """The LP's inequality rows over x = (wg..hd, Tp, Tg)."""

    TP, TG = 9, 10

    def __init__(self) -> None:
        self.ix = {k: i for i, k in enumerate(_KEYS)}
        self.A: list[np.ndarray] = []
        self.b: list[float] = []

    def row(self, **coef: float) -> np.ndarray:
        v = np.zeros(11)
        for k, c in coef.items():
            v[self.ix[k] if k in self.ix else {"Tp": self.TP, "Tg": self.TG}[k]] += c
        return v

    def at_least(self, T: str, const: float, **coef: float) -> None:
        """T >= const + sum(coef * x)  ->  sum(coef * x) - T <= -const"""
        self.A.append(self.row(**coef) - self.row(**{T: 1.0}))
        self.b.append(-const)

    def at_most(self, cap: float, **coef: float) -> None:
        self.A.append(self.row(**coef))
        self.b.append(cap)


def _time_rows(rows: _Rows, mapper, gbs: int, nb: int, cpu_attention: bool, pinned: bool) -> None:
    """Each step's time bounds: GPU (and CPU attention) compute, PCIe each way, disk."""
    w, m, r = mapper.workload, mapper.model, mapper.rates
    L, n = m.num_layers, w.gen_len
    pe, pl, ph = mapper.works("prefill", gbs, w.prompt_len, w.prompt_len)
    de, dl, dh = mapper.works("decode", gbs, 1, w.prompt_len + max(1, n // 2))
    w_step = pe.weight_bytes + L * pl.weight_bytes + ph.weight_bytes
    bw_w = r.h2d * (1.0 if pinned else r.pageable_factor)
    for T, e, lay, h in (("Tp", pe, pl, ph), ("Tg", de, dl, dh)):
        hid = nb * (L + 1) * lay.hidden_bytes           # activations handed between slots
        kvr, kvw = nb * L * lay.kv_read_bytes, nb * L * lay.kv_write_bytes
        cpu_attn = cpu_attention and T == "Tg"
        gpu_const = nb * (e.gpu_s + h.gpu_s + L * (lay.pre_s + lay.post_s))
        # compute: GPU attention over the cg part, CPU attention (serial with the GPU) over the rest
        if cpu_attn:
            rows.at_least(T, gpu_const + nb * L * lay.attn_gpu_s,
                          cc=nb * L * (lay.attn_cpu_s - lay.attn_gpu_s), cd=nb * L * (lay.attn_cpu_s - lay.attn_gpu_s))
        else:
            rows.at_least(T, gpu_const + nb * L * lay.attn_gpu_s)
        kv_h2d = 0.0 if cpu_attn else kvr / r.h2d
        rows.at_least(T, 0.0, wc=w_step / bw_w, wd=w_step / bw_w, cc=kv_h2d, cd=kv_h2d, hc=hid / r.h2d,
                      hd=hid / r.h2d)
        kv_d2h = 0.0 if cpu_attn else kvw / r.d2h
        rows.at_least(T, 0.0, cc=kv_d2h, cd=kv_d2h, hc=hid / r.d2h, hd=hid / r.d2h)
        rows.at_least(T, 0.0, wd=w_step / r.disk_read, cd=kvr / r.disk_read + kvw / r.disk_write,
                      hd=hid / r.disk_read + hid / r.disk_write)


def _memory_rows(rows: _Rows, mapper, gbs: int, nb: int, cpu_attention: bool, gpu_capacity: float,
                 slots: int = 1) -> None:
    """Bytes per tier within its capacity; the GPU also holds the streamed weights of `slots` slots and one GPU
    batch's streamed KV: the buffers are slots x (1 - wg) x one slot's weights and (1 - cg) x one GPU batch's KV
    read, constant terms on the right and the GPU shares' coefficients less what each buffer holds. 1: the least
    the schedule runs with (a fixed policy that fills the GPU, FlexGen's own OPT-30B one, runs its loads and compute
    in turn); 2: room to prefetch the next slot's weights while this one computes (Algorithm 1; OffloadMapper.
    placement gives the schedule two where they fit). With one only, the LP's favourites filled the GPU to the byte
    and the best OPT-30B policy was ~20% slower than its neighbours (an offload trial): search() tries both."""
    w = mapper.workload
    pe, pl, ph = mapper.works("prefill", gbs, w.prompt_len, w.prompt_len)
    _, dl_max, _ = mapper.works("decode", gbs, 1, w.prompt_len + w.gen_len - 1)
    size = mapper.sizes(gbs * nb, gbs)
    w_slot = max(pe.weight_bytes, pl.weight_bytes, ph.weight_bytes)
    kv_buf = 0.0 if cpu_attention else dl_max.kv_read_bytes
    rows.at_most(gpu_capacity * (1 - 1e-6) - size["working"] - slots * w_slot - kv_buf,
                 wg=size["weights"] - slots * w_slot, cg=size["kv_cache"] - kv_buf, hg=size["activations"])
    host = mapper.host
    for keys, cap in ((("wc", "cc", "hc"), host.cpu_memory.capacity_bytes), (("wd", "cd", "hd"), host.disk.capacity_bytes)):
        rows.at_most(cap * (1 - 1e-6), **{k: size[role] for k, role in zip(keys, ("weights", "kv_cache", "activations"))})


def _objective(rows: _Rows, mapper, gbs: int, nb: int, objective: str) -> np.ndarray:
    w, L, n = mapper.workload, mapper.model.num_layers, mapper.workload.gen_len
    c = np.zeros(11)
    if objective == "latency":
        c[rows.TG], c[rows.TP] = 1.0, 1e-6
    else:
        c[rows.TP], c[rows.TG] = 1.0, max(n - 1, 0)
    # Tie-break where the max() leaves the fractions free (a link that is not the
    # bottleneck): prefer the faster tier, by a cost far below any real time.
    _, pl, _ = mapper.works("prefill", gbs, w.prompt_len, w.prompt_len)
    _, dl, _ = mapper.works("decode", gbs, 1, w.prompt_len + max(1, n // 2))
    size = mapper.sizes(gbs * nb, gbs)
    eps = 1e-4 * (pl.gpu_s + dl.gpu_s) * L / max(size["weights"] + size["kv_cache"] + size["activations"], 1.0)
    for keys, role in zip(TRIPLES.values(), ("weights", "kv_cache", "activations")):
        c[rows.ix[keys[1]]] += eps * size[role]
        c[rows.ix[keys[2]]] += 2 * eps * size[role]
    return c


def solve_lp(mapper, gbs: int, nb: int, cpu_attention: bool, pinned: bool, spec: PolicySpec,
             objective: str, gpu_capacity: float, slots: int = 1) -> Candidate | None:
    """Best fractions for one (GPU batch size, GPU batches, CPU attention) choice, with room on the GPU for the
    streamed weights of `slots` slots (_memory_rows), or None if infeasible."""
    from scipy.optimize import linprog   # third-party and slow to import (0.4 s): only when searching

    rows = _Rows()
    _time_rows(rows, mapper, gbs, nb, cpu_attention, pinned)
    _memory_rows(rows, mapper, gbs, nb, cpu_attention, gpu_capacity, slots)
    A_eq = [rows.row(**{k: 1.0 for k in keys}) for keys in TRIPLES.values()]
    bounds = [(spec.fractions[k], spec.fractions[k]) if k in spec.fractions else (0.0, 1.0) for k in _KEYS]
    bounds += [(0, None), (0, None)]
    res = linprog(_objective(rows, mapper, gbs, nb, objective), A_ub=np.array(rows.A), b_ub=np.array(rows.b),
                  A_eq=np.array(A_eq), b_eq=np.ones(3), bounds=bounds, method="highs")
    if res.status != 0:
        return None
    x = np.clip(res.x[:9], 0.0, 1.0)
    trip = [tuple(float(v) for v in x[i:i + 3] / x[i:i + 3].sum()) for i in (0, 3, 6)]
    p = Policy(*trip, gpu_batch_size=gbs, num_gpu_batches=nb, cpu_attention=cpu_attention, pinned=pinned)
    if p.cpu_attention and not p.kv_off_gpu > 0:
        # CPU attention reads the off-GPU KV cache; with none, the policy is the same as attending on the GPU (the
        # mapper's buffer and schedule agree), so it is not reported as CPU attention
        p = replace(p, cpu_attention=False)
    tp, tg = float(res.x[rows.TP]), float(res.x[rows.TG])
    n = mapper.workload.gen_len
    total = tp + max(n - 1, 0) * tg
    return Candidate(p, tp, tg, gbs * nb * n / total if total else 0.0)


def search(mapper, spec: PolicySpec, objective: str = "throughput", gpu_capacity: float | None = None,
           confirm: int = CONFIRM_TOP) -> SearchResult:
    """Enumerate the candidates, solve each LP, confirm the best with the DES."""
    t0 = time.perf_counter()
    w = mapper.workload
    device = mapper.machine.memory[mapper.machine.device_tier].capacity_bytes
    cap = min(gpu_capacity, device) if gpu_capacity else device   # a cap lowers the GPU's memory, never raises it
    pairs = _batch_pairs(spec, w.batch, objective)
    attn = [spec.cpu_attention] if spec.cpu_attention is not None else [False, True]
    pinned = spec.pinned if spec.pinned is not None else True
    found, tried = [], 0
    for gbs, nb in pairs:
        for ca in attn:
            tried += 1
            c = solve_lp(mapper, gbs, nb, ca, pinned, spec, objective, cap)
            if c is not None:
                found.append(c)
    if not found:
        raise no_fit(mapper, spec, pairs, cap)
    key = (lambda c: c.lp_decode_s) if objective == "latency" else (lambda c: -c.lp_throughput)
    found.sort(key=key)
    seen: set[Policy] = set()   # with no KV off the GPU both attention options are one policy (solve_lp): once
    top = [c for c in found if not (c.policy in seen or seen.add(c.policy))][:confirm]
    # Each favourite's twin with room to prefetch the next slot's weights: the LP ranks by perfect overlap, which
    # the one-slot placement it prefers cannot give (loads and compute in turn), nor always the twin (module doc)
    top += [t for c in top if (t := solve_lp(mapper, c.policy.gpu_batch_size, c.policy.num_gpu_batches,
                                             c.policy.cpu_attention, pinned, spec, objective, cap, slots=2))
            and not (t.policy in seen or seen.add(t.policy))]
    for c in top:
        _confirm(mapper, c)
    rank = (lambda c: c.des_tpot_s) if objective == "latency" else (lambda c: -c.des_throughput)
    top += _refine(mapper, spec, set(pairs), objective, cap, min(top, key=rank), {c.policy for c in top}, rank)
    best = min(top, key=rank)
    return SearchResult(best, top, tried, len(found), objective, time.perf_counter() - t0)


def _confirm(mapper, c: Candidate) -> Candidate:
    """The event simulation's throughput and TPOT of candidate `c`, filled in."""
    pl = mapper.placement(c.policy)
    gen = mapper.generation(c.policy, pl.buffers, samples=CONFIRM_SAMPLES)
    c.des_throughput = c.policy.block_size * mapper.workload.gen_len / gen.e2e_s if gen.e2e_s else 0.0
    c.des_tpot_s = gen.tpot()
    return c


def _refine(mapper, spec: PolicySpec, pairs: set[tuple[int, int]], objective: str, cap: float, best: Candidate,
            seen: set[Policy], rank) -> list[Candidate]:
    """The event simulation's local search around its best confirmed candidate. The LP's perfect overlap prices a
    weight streamed over PCIe as free when the link has slack and a larger block as no gain once the link is
    covered, so it can rank the simulated best low (a trial: OPT-30B on flexgen_t4, the LP's pick 7.65 tok/s in
    the event simulation against 8.49 for FlexGen's own 20% of the weights on the GPU at 48 x 3). A neighbour moves
    the weights' GPU share by WEIGHT_STEP or the number of GPU batches by one (the LP places the rest with
    the same attention); the search moves to the best neighbour that the event simulation rates better, and
    stops where none is (at most MAX_REFINE simulations)."""
    out: list[Candidate] = []
    current = best   # `pairs`: the (GPU batch size, GPU batches) the search enumerated
    while len(out) < MAX_REFINE:
        p = current.policy
        moves = [(p.gpu_batch_size, p.num_gpu_batches + d, p.weights[0]) for d in (1, -1)]
        if "wg" not in spec.fractions:
            moves += [(p.gpu_batch_size, p.num_gpu_batches, round(p.weights[0] + d, 6))
                      for d in (WEIGHT_STEP, -WEIGHT_STEP)]
        step = []
        for gbs, nb, wg in moves:
            if (gbs, nb) not in pairs or not 0.0 <= wg <= 1.0 or len(out) >= MAX_REFINE:
                continue
            fixed = replace(spec, fractions={**spec.fractions, "wg": wg})
            for slots in (1, 2):   # the move's placement with room for one slot's weights, and its twin
                c = solve_lp(mapper, gbs, nb, p.cpu_attention, p.pinned, fixed, objective, cap, slots)
                if c is None or c.policy in seen or len(out) >= MAX_REFINE:
                    continue
                seen.add(c.policy)
                out.append(_confirm(mapper, c))
                step.append(c)
        better = [c for c in step if rank(c) < rank(current)]
        if not better:
            return out
        current = min(better, key=rank)
    return out

"""What one serving iteration costs on the machine: the one adapter between the request-level engine and the
op-level hardware models.

Exact: the iteration's op graph (sim.core.mixed) at 2 and 3 layers through the mapper and the engine, extrapolated
to L layers as sim.core.generation.fold_layers does (exact once the schedule is periodic after one layer).

Surrogate: exact costs at grid points, interpolated. An iteration is described by T (tokens), n_d (decode
sequences, each q_len `decode_q`), S_d (their summed kv_len) and A (attended query-key pairs per head of the other
sequences, the prefill chunks). The canonical iteration at (T, n_d) holds n_d decode sequences at kv_len `decode_q`
and one fresh prefill chunk of the remaining tokens; its cost F(T, n_d) is tabulated on a grid dense in T (where
GEMMs change from memory- to compute-bound) and interpolated bilinearly. Attention adds terms linear in S_d and A
(a roofline op costs (work + half) / rate: linear in its work), with slopes per n_d and per prefill size measured by
exact runs as well. Queries outside the grid are costed exactly (tests/test_serve.py: against the exact path).

The engine's host work per iteration (the stack's step_overhead) is not interpolated: the tables hold device costs
(Mapper.iteration with device_only) and ExactCost.engine adds the host work of the iteration's sequence count to
either path's device cost, as Mapper.with_engine does (a max() with the host time is not linear).

A cost is a vector: (seconds, joules, then each resource's busy seconds in the order of ExactCost.keys). Busy time
is the engine's per resource (the unit ran an op) and, from each op's OpCost, `<resource>.compute` / `.memory`: the
time its compute pipes and its memory stream were needed (compute_s, memory_s; an op takes the larger plus its
overhead). Every term of the surrogate is linear in the cost, so the busy times interpolate with the time. A vector
made before a resource was first seen is shorter; the missing entries are zero.
"""

from __future__ import annotations

from itertools import zip_longest
from typing import Callable, Protocol

from hw_models.base import Mapper
from hw_models.op_cost import OpCost
from hw_models.stack.engine_overheads import EngineOverheads
from hw_models.machine import Machine
from hw_models.clock import CLOCK_COUNTERS, ClockWork
from hw_models.power import CAP_ADDED, CAP_CLOCK, CAP_CLOCKED, CAP_COUNTERS
from hw_models.stack.sampler import SAMPLER
from hw_models.stack.step_overhead import HOST
from sim.apps.serve.costvec import Cost, add, add_busy, interp, lerp, rows_around, scaled, within_step
from sim.apps.serve.decodecost import DecodeCosts
from sim.apps.serve.iteration import Iteration, features, verify_logits
from sim.apps.serve.lazytable import LazyRow, Remembered, book
from sim.apps.serve.mixedcost import MixedCosts
from sim.apps.serve.serving_mapper import serving_mapper
from sim.apps.serve.spec import ServeFile
from sim.apps.serve.tablecache import Point, TableStore, seqs_key
from sim.core.engine import Timeline
from sim.core.model import ModelConfig

CHUNKS = [1, 2, 4, 8, 16, 32]
KV_POINTS = [64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
class StepCost(Protocol):
    """What the serving engine reads of a step cost (ExactCost, Surrogate, attention_dp.GroupedCost):
    one iteration's cost vector (GroupedCost: of its attention groups' iterations together), the
    resources of the vector's busy entries, and whether the costs are op-level rather than
    interpolated. Serving reaches the hardware only through these objects and serving_mapper."""

    @property
    def keys(self) -> list[str]: ...

    op_level: bool

    def __call__(self, it) -> Cost: ...


def resource_busy_s(tl: Timeline) -> dict[str, float]:
    """Each engine resource's busy time, and per resource the time its ops needed its compute and its
    memory stream (module doc)."""
    out = tl.busy_s()
    for i in tl.intervals:
        c = i.tag   # an OpCost (pim's PimOpCost too); launch tasks on the host carry none
        if isinstance(c, OpCost):
            out[i.resource + ".compute"] = out.get(i.resource + ".compute", 0.0) + c.compute_s
            out[i.resource + ".memory"] = out.get(i.resource + ".memory", 0.0) + c.memory_s
    return out


class ExactCost:
    """Op-level cost of an iteration: (seconds, joules, busy seconds per resource of `keys`).
    `experts=False`: one attention group's own ops, the routed experts left out (their part is the
    mapper's expert_part; sim.apps.serve.attention_dp)."""

    op_level = True

    def __init__(self, machine: Machine, workload: ServeFile, model: ModelConfig, host: bool = True,
                 experts: bool = True):
        self.mapper: Mapper = serving_mapper(machine, workload, model)
        self.host = host     # add the engine's host work (not for a draft model's steps: the iteration pays it once)
        self.experts = experts
        stack = getattr(self.mapper, "stack", None)   # GPU mappers run a stack; other kinds have none
        self.overheads: EngineOverheads | None = stack.engine_overheads if stack is not None else None
        g = stack.graph_max_tokens if stack is not None else None   # past it a family's eager time binds: a jump
        self.kinks = (g, g + 1) if g else ()                         # (hw_models.stack.cost.eager_call)
        self.model = model
        self.calls = 0
        self.keys: list[str] = []      # the resources of the busy entries, in order of first appearance
        self._host: dict[int, tuple[float, float, float, float]] = {}   # sequences -> (engine host s, overhead s, sampler s, J)
        # The board power limit the iteration's cost is stretched under (capped), None where the mapper caps
        # otherwise (a pipeline's stages, an offload block) or no limit binds anything
        board = self.mapper.machine.board_power() if self.mapper.caps_whole_steps else None
        self.board = board if board is not None and board.acts else None

    def __call__(self, it: Iteration) -> Cost:
        return self.engine(self.device(it), it)

    def device(self, it: Iteration) -> Cost:
        """The mapper's own iteration hook (Mapper.iteration) without the engine's host work,
        plus the units' power while busy."""
        return self.vector(self.point(it))

    def point(self, it: Iteration) -> Point:
        """The mapper's device cost of `it` as plain data: (seconds, joules, busy seconds per resource
        in the mapper's order), what sim.apps.serve.tablecache keeps on disk. At full clock (Mapper.iteration's
        device_only): the cost is capped afterwards (`board`, capped), so that the surrogate interpolates uncapped
        costs and caps the result as the exact step is capped: interpolating capped costs across the limit's kink
        read a stream's mean TTFT 1-3% off the exact run on an a6000 (stop 67)."""
        step = self.mapper.iteration(tuple(it.seqs), it.logits, busy=resource_busy_s, device_only=True, experts=self.experts)
        # the ops' split by what the SM clock paces (hw_models.clock) rides beside the busy times: it interpolates
        # with them, and the cap (capped) reads it
        busy, t = [*step.busy_s.items(), *((k, step.counters[k]) for k in CLOCK_COUNTERS if k in step.counters)], step.time_s
        if step.counters.get(CAP_COUNTERS[2], 0.0) > 0.0:   # a mapper that caps its parts itself (a pipeline) bound
            window, clock_s = step.counters[CAP_COUNTERS[2]], step.counters[CAP_COUNTERS[3]]
            busy += [(CAP_ADDED, step.counters[CAP_COUNTERS[0]]), (CAP_CLOCKED, t), (CAP_CLOCK, t * clock_s / window)]
        return t, step.energy_j + self.mapper.power_j(step.busy_s, t), busy

    def capped(self, c: Cost) -> Cost:
        """Device cost `c` under the board power limit, as Mapper.capped caps an iteration: where a device's power
        over the step would exceed the limit, the SM clock drops until it does not and the step slows as that clock
        paces its ops (hw_models.clock); the busy times stay those at full clock, the idle power runs over the added
        time, booked as CAP_ADDED, the lowered clock's seconds as CAP_CLOCKED and CAP_CLOCK."""
        b = self.board
        # c[1] is every device's whole draw over c[0] (point): at or under the limit, and no lock, nothing to do
        # (the engine asks every iteration; most draw less, and the split below costs a dict and a solve)
        if b is None or (b.clock >= 1.0 and c[1] <= b.limit_w * c[0] * self.mapper.devices):   # acts: a limit
            return c
        busy = dict(zip(self.keys, c[2:]))
        added, saved_j, clock = self.cap(c[0], c[1], busy)
        if clock == 1.0:
            return c
        out = list(c)
        # the units' static power over the stretched wall, as point() charges an exact capped step (a mapper may
        # clamp busy time at the wall: ParallelGpuMapper.power_j), less the activity the lower clock saves
        out[0], out[1] = c[0] + added, c[1] + self.mapper.power_j(busy, c[0] + added) - self.mapper.power_j(busy, c[0]) - saved_j
        add_busy(out, self.keys, CAP_ADDED, added)
        add_busy(out, self.keys, CAP_CLOCKED, out[0])   # bound, whether or not it added time
        add_busy(out, self.keys, CAP_CLOCK, out[0] * clock)
        return tuple(out)

    def cap(self, t: float, e: float, busy: dict[str, float]) -> tuple[float, float, float]:
        """What the board limit does to a device step of `t` seconds and `e` joules (the units' idle and activity
        power over t included, as point() gives them) and `busy` entries (the resources' busy seconds, and the ops'
        split by bound, CLOCK_COUNTERS: Mapper.capped's reads): the seconds it adds, the activity joules the
        lower clock saves, all devices', and that clock's ratio (BoardPower.under_cap); (0, 0, 1) where it does not
        bind."""
        if self.board is None:
            return 0.0, 0.0, 1.0
        n, static_j = self.mapper.devices, self.mapper.power_j(busy, t)
        added, saved_j, clock = self.board.under_cap(t, (static_j - self.mapper.power_j({}, t)) / n, (e - static_j) / n,
                                                     ClockWork.read(busy))
        return added, n * saved_j, clock

    def vector(self, p: Point) -> Cost:
        """A point as a cost vector in the order of `keys` (a resource first seen here joins them)."""
        self.calls += 1
        t, e, busy = p
        names = [k for k, _ in busy]
        self.keys += [k for k in names if k not in self.keys]
        d = dict(busy)
        return (t, e, *(d.get(k, 0.0) for k in self.keys))

    def engine(self, c: Cost, it: Iteration) -> Cost:
        """Device cost `c` of `it` with the engine's host work (Mapper.with_engine) and its fitted
        iteration terms (hw_models.stack.engine_overheads: serial, the GPU runs no kernel through them): the
        longer wall time's board power added at boost clock (Mapper.gap_j), the host's busy time grown."""
        return self.engine_n(c, len(it.seqs))

    def engine_n(self, c: Cost, n: int) -> Cost:
        """engine() of a step of n sequences: all it reads of the step; the device cost capped first, as
        Mapper.iteration caps the device step before its engine work."""
        c = self.capped(c)
        host, extra, sample_s, sample_j = self._host.get(n) or self._host.setdefault(n, (
            self.mapper.engine_host_s(n) if self.host else 0.0,
            self.overheads.iteration_s(n, self.mapper.collectives_per_iteration(), self.mapper.devices) if self.host and self.overheads else 0.0,
            *(self.mapper.sampler(n) if self.host else (0.0, 0.0))))   # per count, once
        if not host and not extra and not sample_s:
            return c
        out = list(c)
        if sample_s:   # device work after the step's kernels (Mapper.with_engine), busy as `sampler`; idle power over it too
            out[0] += sample_s
            out[1] += sample_j + self.mapper.power_j({}, sample_s)
            add_busy(out, self.keys, SAMPLER, sample_s)
        if host or extra:
            t = (self.mapper.step_overhead.step_s(out[0], host) if host else out[0]) + extra
            out[0], out[1] = t, out[1] + self.mapper.gap_j(t - out[0])
            add_busy(out, self.keys, HOST, host)
        return tuple(out)


def _grid(top: int, fine: bool = True, kinks: tuple[int, ...] = ()) -> list[int]:
    """Counts from 0 to `top`; `fine`: dense where GEMMs cross from memory- to compute-bound (tens to hundreds of
    rows); `kinks`: both sides of a jump (ExactCost.kinks; a 513-token step read 30% low interpolated across it)."""
    pts = [0, 1, 2, 4, 8, 16, 32, 48] + (list(range(64, 512, 16)) + list(range(512, 1024, 64)) if fine
                                          else [64, 96, 128, 192, 256, 384, 512, 768])
    v = 1024
    while v < top:
        pts.append(v)
        v = int(v * (1.25 if fine else 1.6))
    return sorted({p for p in (*pts, *kinks) if p < top} | {top})


class Surrogate:
    """Interpolated exact costs; `max_tokens`, `max_decode` and `max_kv` bound the grid. Tables: D(n) pure
    decode (n sequences at kv_len decode_q), P(T) one fresh prefill chunk, M(rest, n) both together; slopes
    per decode KV token and per attended prefill pair. Each is made on first use (a vLLM run without chunking
    never mixes, so never builds M), its entries computed as interpolations first read them (lazytable)."""

    op_level = False

    def __init__(self, exact: ExactCost, max_tokens: int, max_decode: int, max_kv: int, decode_q: int = 1,
                 store: TableStore | None = None, dense_decodes: int = 0, dense_kv: bool = False):
        self.exact, self.q = exact, decode_q
        self.kinks: tuple[int, ...] = getattr(exact, "kinks", ())   # ExactCost.kinks (a stand-in cost has none)
        self.dense_decodes, self.dense_kv = dense_decodes, dense_kv   # every decode count up to this is a grid
        # point (_decodes); KV lengths every 25% too (Mapper.serving_dense_kv)
        self.store = store          # the tables' exact points on disk (sim.apps.serve.tablecache), or None
        self.book = book(store) if store is not None else None
        self._table = ""            # the table whose entry is being computed (its points' row in `store`)
        self.kv0, self.kv1 = decode_q, max(max_kv, decode_q + 1)
        self.max_tokens = max(max_tokens, max_decode * decode_q, 2)
        self.max_decode = max(max_decode, 1)
        self._tables: dict[str, tuple[list[int], list]] = {}
        # costs by the features they read: device costs keyed (n, rest, decode_kv, pairs, chunks) here, whole
        # pure decode steps (n, decode_kv, len(keys)) by sim.apps.serve.runahead; one bound for both
        self.exact_fallbacks, self.memo = 0, Remembered()
        self._decode, self._mixed = DecodeCosts(self.table, interp), MixedCosts(self.table)

    def cap(self, t: float, e: float, busy: dict[str, float]) -> tuple[float, float, float]:
        """ExactCost.cap: the board limit on an interpolated step (attention_dp caps its groups)."""
        return self.exact.cap(t, e, busy)

    @property
    def keys(self) -> list[str]:
        return self.exact.keys

    def _cost(self, n: int, kv: int, chunk: int, prefix: int = 0) -> Cost:
        return self._grid_point([(self.q, kv)] * n + ([(chunk, chunk + prefix)] if chunk else []))

    def _grid_point(self, seqs: list[tuple[int, int]]) -> Cost:
        """The exact device cost of a grid point: read from the store when it has it, else computed
        (and remembered for it). Both go through ExactCost.vector, so the vectors are the same."""
        if self.book is None:
            return self.exact.device(features(seqs, self.q))
        return self.exact.vector(self.book.get(self._table, seqs_key(seqs),
                                               lambda: self.exact.point(features(seqs, self.q))))

    def table(self, name: str) -> tuple[list[int], list]:
        t = self._tables.get(name)
        if t is None:
            if self.book is not None:
                self.book.open(name)
            t = self._tables[name] = self._build(name)
        return t

    def _row(self, name: str, f, xs: list[int]) -> LazyRow:
        """Table `name`'s entries f(x) over `xs`, each computed on first read."""
        def at(x):
            self._table = name
            return f(x)
        return LazyRow(at, xs)

    def _build(self, name: str):
        R = self.max_tokens
        if name == "D":
            xs = self._decodes(fine=True)
            return xs, self._row(name, lambda n: self._cost(n, self.kv0, 0), xs)
        if name == "P":
            xs = [t for t in _grid(R, kinks=self.kinks) if t > 1]
            return xs, self._row(name, lambda t: self._cost(0, 0, t), xs)
        if name == "kv":   # n decodes at mean kv_len k minus n at kv_len decode_q: linear in k on a GPU,
            # not where attention moves between host and PIM as it grows, hence several k.
            ns = self._decodes(fine=False)
            dense = [round(64 * 1.25 ** i) for i in range(64)] if self.dense_kv else []
            ks = sorted({k for k in KV_POINTS + dense if self.kv0 < k < self.kv1} | {self.kv0, self.kv1})
            return (ns, ks), [self._row(name, lambda k, n=n: self._slope(self._cost(n, self.kv0, 0),
                                                                         self._cost(n, k, 0), 1.0), ks) for n in ns]
        if name == "pairs":   # per attended pair more than one fresh chunk of `rest` tokens: after a prefix
            xs = [t for t in _grid(R, fine=False) if t > 1]
            return xs, self._row(name, lambda t: self._slope(self._cost(0, 0, t), self._cost(0, 0, t, self.kv1),
                                                             t * self.kv1), xs)
        if name == "C":   # c equal fresh chunks minus one chunk of the same tokens (vLLM's prefill iterations)
            rs = [t for t in _grid(R, fine=False) if t > 1]
            return (CHUNKS, rs), [self._row(name, lambda r, c=c: self._slope(self._cost(0, 0, r), self._chunks(r, c),
                                                                             1.0), rs) for c in CHUNKS]
        if name == "split":   # per attended pair fewer: the tokens as two fresh chunks. Kept apart from
            # "pairs" because attention of short fresh chunks is often memory-bound, after a prefix compute-bound.
            xs = [t for t in _grid(R, fine=False) if t > 3]
            return xs, self._row(name, lambda t: self._slope(self._cost(0, 0, t), self._split(t),
                                                             -self._split_pairs(t)), xs)
        # M: a mixed iteration minus one fresh chunk of the same tokens. The GEMMs' kinks in T
        # cancel, so what is left (decode attention, the chunk's smaller attention, LM-head rows)
        # is smooth and a coarse grid holds it; P(T) on its fine grid adds the GEMMs back.
        ns = self._decodes(fine=False)
        rs = [t for t in _grid(R, fine=False) if t > 1]
        return (ns, rs), [self._row(name, lambda r, n=n: self._slope(self._cost(0, 0, r + n * self.q),
                                                                     self._cost(n, self.kv0, r), 1.0), rs) for n in ns]

    def _decodes(self, fine: bool) -> list[int]:
        """The grid of decode counts, with every count up to `dense_decodes` (a mapper's serving_dense_decodes:
        where a kind moves ops between its units as the batch grows, as PIM moves a GEMV out of the banks past a
        few rows, the energy jumps several-fold at that count, and an interpolation across it read 21-38% low)."""
        dense = min(self.dense_decodes, self.max_decode)
        return sorted({n for n in _grid(self.max_decode, fine, self.kinks) if n} | set(range(1, dense + 1)))

    def _chunks(self, r: int, c: int) -> Cost:
        c = min(c, r)
        sizes = [r // c + (i < r % c) for i in range(c)]
        return self._grid_point([(a, a) for a in sizes])

    def _split(self, t: int) -> Cost:
        a = t // 2
        return self._grid_point([(a, a), (t - a, t - a)])

    @staticmethod
    def _split_pairs(t: int) -> float:
        """Attended pairs one fresh chunk of t tokens has more than two fresh halves."""
        a, b = t // 2, t - t // 2
        return t * (t + 1) / 2 - a * (a + 1) / 2 - b * (b + 1) / 2

    @staticmethod
    def _slope(a: Cost, b: Cost, d: float) -> Cost:
        return tuple((y - x) / d for x, y in zip_longest(a, b, fillvalue=0.0))

    def __call__(self, it: Iteration) -> Cost:
        return self.exact.engine(self.device(it), it)

    def decode_step(self, n: int, decode_kv: int, it: Callable[[], Iteration]) -> Cost:
        """__call__ of a pure decode step, n sequences of one token summing decode_kv, the step `it()`
        builds (issue 30: the engine's usual step), without building it where its cost is interpolated:
        run-ahead's whole step if it read this one ahead (sim.apps.serve.runahead._timed keeps them by
        (n, decode_kv, len(keys))), else the one-pass decode cost (DecodeCosts) with the engine's host
        work, the vector device() and engine() give. Not remembered: at 80% load 0.6% of them recur (64
        of 11,140 steps, 10,000 requests), so they would only crowd the mixed steps' memo. Elsewhere
        (beyond the grid, a case DecodeCosts leaves to the general path) __call__."""
        if n > self.max_decode or n > self.max_tokens or self.q != 1:
            return self(it())
        c = self.memo.get((n, decode_kv, len(self.exact.keys)))
        if c is not None:
            return c
        d = self._decode(n, decode_kv)
        if d is None:
            return self(it())
        return self.exact.engine_n(within_step(d), n)

    def device(self, it: Iteration) -> Cost:
        """The device cost of `it` without the engine's host work (as ExactCost.device)."""
        n, rest = it.n_decode, it.tokens - it.n_decode * self.q
        if (it.tokens > self.max_tokens or n > self.max_decode or rest == 1
                or it.logits != verify_logits(n, it.chunks, self.q)):   # the grid's LM-head rows, or exact
            self.exact_fallbacks += 1
            return self.exact.device(it)
        c = self.memo.get(key := (n, rest, it.decode_kv, it.pairs, it.chunks))   # all a cost below reads
        if c is None:
            d = self._mixed(it, n, rest) if rest else self._decode(n, it.decode_kv) if n else None   # one pass
            c = self.memo.put(key, within_step(d if d is not None else self._interpolated(it, n, rest)))
        return c

    def _interpolated(self, it: Iteration, n: int, rest: int) -> Cost:
        """The interpolated device cost of `it` (n decode sequences, `rest` other tokens)."""
        c: Cost = (0.0, 0.0)
        if n:
            if rest:
                (ns, rs), M = self.table("M")
                c = add(self._bilinear(ns, rs, M, n, rest), interp(*self.table("P"), it.tokens))
            else:
                c = interp(*self.table("D"), n)
            (ns, ks), K = self.table("kv")
            kbar = it.decode_kv / n
            if kbar > ks[-1]:   # beyond the grid: extend the last segment linearly
                lo, hi = self._bilinear(ns, ks, K, n, ks[-2]), self._bilinear(ns, ks, K, n, ks[-1])
                c = add(c, lerp(lo, hi, 1.0 + (kbar - ks[-1]) / (ks[-1] - ks[-2])))
            else:
                c = add(c, self._bilinear(ns, ks, K, n, kbar))
        elif rest:
            c = interp(*self.table("P"), rest)
        canon = rest * (rest + 1) / 2
        if it.chunks > 1 and rest > 1:
            (cs, rs), C = self.table("C")
            k = min(it.chunks, cs[-1], rest)
            c = add(c, self._bilinear(cs, rs, C, k, rest))
            a = rest / k
            canon = k * a * (a + 1) / 2
        if rest:
            dp = it.pairs - canon
            c = add(c, scaled(interp(*self.table("pairs" if dp >= 0 or rest < 4 else "split"), rest), dp))
        return c

    @staticmethod
    def _bilinear(ns: list[int], rs: list[int], M: list[list], n: int, r: int) -> Cost:
        lo_row, hi_row, w = rows_around(ns, M, n)
        return lerp(interp(rs, lo_row, r), interp(rs, hi_row, r), w)

"""The running requests of a vLLM engine in their decode phase, kept so that a step costs work in
proportion to what changed, not to the batch (issue 30; V0: schedulers/vllm_v0.py, V1, SGLang and
TensorRT-LLM: schedulers/vllm_cohort.py, whose V1 steps may carry admitted prompts after the members).

In a step where every running request decodes one token (the usual step) every member's counters
grow by one, so a member's counters are kept as offsets from the cohort's step count (`tick`):
computed = base + tick, generated = computed - lag. What happens to a member at a known step is
booked under that step when it joins: the step its next token needs one more KV block (every
block_size steps after the first), the step it finishes (output - generated steps on), and under
V1 prefix caching the steps its token fills a cache unit. A step then touches only the members
booked under it; the batch's sequences for the cost are the one O(batch) piece, built in C.
Token gaps: the members present at the last hand-out share its time, so each step's gap is one
number; a member's largest gap is the largest of the gaps since it joined, read at the end from a
suffix-maximum stack (_Peaks), and its first gap in the cohort (from its own previous token) apart.

While a request is a member its counters live here, not on its Request object: `computed`,
`generated`, `last_at` and `max_tbt` on the object are stale until `sync` writes them back (the
engine does before anything that reads them: a finish, the debug checks, the result), and
`dissolve` hands them back for good (the scheduler does before any other kind of step: a
preemption, a swap). KV blocks are booked by phase: once a member has had its first block here
it needs one more every block_size steps, at the steps congruent to its phase ((-lookahead - base)
mod block_size), so the members of a phase grow together, one allocation of their count, and a
member's `blocks` is brought up to date (its phase's grows since it joined the phase) by `sync`, at
its finish and on dissolve; the pool's own accounting is never stale. Members are always the head
of the scheduler's running list, in its order (join order), so the batch's entries come out in the
order the per-request path would give them; members booked under one step are handled in that
order (their join number, `seq`).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from itertools import repeat

from sim.apps.serve.kvpool import BlockPool
from sim.apps.serve.schedulers.base import Request
from sim.apps.serve.iteration import Iteration, entry_features


class _Member:
    """A member's offsets and what it carried in: computed = base + tick, generated = computed - lag;
    held: blocks it holds (its own and its share of cached units); mt, la: its largest gap and its
    previous token's time when it joined (mt then includes its first gap in the cohort); since: the
    first step whose shared gap is its own (-1 before its first hand-out here); live: still a member;
    ph: its KV phase once it grows one block every block_size steps (-1 before its first grow here), g0:
    its phase's grows already on `held` and the object's `blocks`."""
    __slots__ = ("req", "seq", "base", "lag", "held", "mt", "la", "since", "live", "ph", "g0")

    def __init__(self, req: Request, seq: int, base: int, lag: int, held: int):
        self.req, self.seq, self.base, self.lag, self.held = req, seq, base, lag, held
        self.mt, self.la, self.since, self.live, self.ph, self.g0 = req.max_tbt, req.last_at, -1, True, -1, 0


class _Peaks:
    """The largest of the gaps pushed at steps >= i, for any i: a stack of (step, gap) whose gaps fall
    strictly (a gap hides every earlier one no larger), so the answer is its first entry at or after i."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.gaps: list[float] = []

    def push(self, step: int, gap: float) -> None:
        steps, gaps = self.steps, self.gaps
        while gaps and gaps[-1] <= gap:
            gaps.pop()
            steps.pop()
        steps.append(step)
        gaps.append(gap)

    def since(self, step: int) -> float | None:
        k = bisect_left(self.steps, step)
        return self.gaps[k] if k < len(self.gaps) else None


class DecodeSeqs(Sequence):
    """A cohort step's sequences, (1, base + k) per member then `rest`, as a tuple equal to the one
    iteration.features is given, built on first use: an interpolated cost reads only how many there are."""
    __slots__ = ("_bases", "_k", "_rest", "_seqs")

    def __init__(self, bases: tuple[int, ...], k: int, rest: tuple[tuple[int, int], ...] = ()):
        self._bases, self._k, self._rest = bases, k, rest
        self._seqs: tuple[tuple[int, int], ...] | None = None

    def seqs(self) -> tuple[tuple[int, int], ...]:
        if self._seqs is None:
            self._seqs = tuple(zip(repeat(1, len(self._bases)), map(self._k.__add__, self._bases))) + self._rest
        return self._seqs

    def __len__(self) -> int:
        return len(self._bases) + len(self._rest)

    def __getitem__(self, i):
        return self.seqs()[i]

    def __iter__(self):
        return iter(self.seqs())

    def __eq__(self, other) -> bool:
        return self.seqs() == (other.seqs() if isinstance(other, DecodeSeqs) else other)

    def __hash__(self) -> int:
        return hash(self.seqs())

    def __repr__(self) -> str:
        return repr(self.seqs())


def _fmax(a: float, b: float | None) -> float:
    """np.fmax for a largest gap `a` (NaN: none yet) and a gap `b` (None: none): NaN gives way."""
    return a if b is None or a >= b else b


class DecodeCohort:
    def __init__(self, block_size: int = 1, lookahead: int = 0) -> None:
        self.block_size, self.lookahead = block_size, lookahead
        self.reqs: list[Request] = []
        self.entries: list[tuple[Request, int]] = []   # (member, 1): a decode step's batch entries
        self.base: list[int] = []                      # each member's base, in member order
        self.seqs: list[int] = []                      # each member's join number, in member order
        self.members: list[_Member] = []               # in member order
        self.tick = 0          # hand-outs so far
        self.joined = 0        # join numbers handed out
        self.kv = 0            # the members' summed computed tokens
        self.last = math.nan   # the last hand-out's time
        self.old = 0           # members at the last hand-out: the head; those after it joined since
        self.peaks = _Peaks()  # the shared gap of each hand-out
        # step -> the members whose token then needs their first block here, is their last, fills a cache unit
        self.grows: defaultdict[int, list[_Member]] = defaultdict(list)
        self.count = [0] * block_size   # per KV phase: its live members, each a block every block_size steps
        self.grown = [0] * block_size   # per KV phase: its grows so far
        self.ends: defaultdict[int, list[_Member]] = defaultdict(list)
        self.fills: defaultdict[int, list[_Member]] | None = None
        self.unit = 0

    def __len__(self) -> int:
        return len(self.reqs)

    def join(self, new: list[Request], unit_blocks: int) -> None:
        """Running requests past their prefill (one token pending) become members, at the tail."""
        if not new:
            return
        t, bs, look = self.tick, self.block_size, self.lookahead
        for r in new:
            held = r.blocks + len(r.shared) * unit_blocks
            base = r.computed - t
            m = _Member(r, self.joined, base, r.computed - r.generated, held)
            self.joined += 1
            self.members.append(m)
            self.seqs.append(m.seq)
            self.base.append(base)
            self.kv += r.computed
            self.grows[max(held * bs - look - base, t)].append(m)   # due once computed reaches its room
            self.ends[t + max(r.output - r.generated, 1)].append(m)
            if self.fills is not None:
                self.fills[t + (-(r.computed + 1)) % self.unit].append(m)
        self.reqs += new
        self.entries += [(r, 1) for r in new]

    def _due(self, book: dict[int, list[_Member]], ordered: bool = True) -> list[_Member]:
        """The members booked under this step, in member order when `ordered` (finished ones' bookings
        are dropped)."""
        due = book.pop(self.tick, None)
        if not due:
            return []
        due = [m for m in due if m.live]
        if ordered and len(due) > 1:
            due.sort(key=_seq)
        return due

    def sync(self) -> None:
        """Write the members' counters back to their Request objects."""
        t, peaks, grown = self.tick, self.peaks, self.grown
        for m in self.members:
            r = m.req
            if m.ph >= 0:
                _catch_up(m, grown[m.ph])
            r.computed = c = m.base + t
            r.generated = c - m.lag
            if m.since < 0:
                r.last_at, r.max_tbt = m.la, m.mt
            else:
                r.last_at, r.max_tbt = self.last, _fmax(m.mt, peaks.since(m.since))

    def dissolve(self) -> None:
        """Every member back to its Request object; the cohort empty."""
        self.sync()
        self.__init__(self.block_size, self.lookahead)

    def grows_at(self, tick: int) -> bool:
        """Whether some member is booked a block at `tick` (its first here, or its phase's)."""
        return tick in self.grows or self.count[tick % self.block_size] > 0

    def grow(self, pool: BlockPool) -> bool:
        """Each member's block for its next token, in one allocation; False (nothing taken) when the
        pool cannot hold them all (the per-request path then preempts). The members of this step's
        phase need one each; members due their first block here need what Scheduler._grow says, then
        join their phase."""
        t, bs = self.tick, self.block_size
        p = t % bs
        k = self.count[p]
        due = self.grows.pop(t, None)   # _due unordered (one allocation: the order changes nothing), inline
        if due:
            due = [m for m in due if m.live]
        if not due:
            if not k:
                return True
            if not pool.allocate(k):
                return False
            self.grown[p] += 1
            return True
        look = self.lookahead
        need = [(m.base + t + look) // bs + 1 - m.held for m in due]   # Scheduler._grow
        if not pool.allocate(sum(need) + k):
            self.grows[t] = due
            return False
        if k:
            self.grown[p] += 1
        count, grown = self.count, self.grown
        for m, n in zip(due, need):
            m.held += n
            m.req.blocks += n
            m.ph = ph = (-look - m.base) % bs   # next due at held * bs - look - base, then every bs steps
            m.g0 = grown[ph]
            count[ph] += 1
        return True

    def filling(self, unit: int) -> list[tuple[Request, int, int]]:
        """(member, computed, generated) of the members whose token this step fills a unit of `unit`
        tokens ((computed + 1) % unit == 0), in member order. The first call books every member."""
        if self.fills is None:
            self.fills, self.unit = defaultdict(list), unit
            for m in self.members:
                self.fills[self.tick + (-(m.base + self.tick + 1)) % unit].append(m)
        out = []
        for m in self._due(self.fills):
            c = m.base + self.tick
            out.append((m.req, c, c - m.lag))
            self.fills[self.tick + unit].append(m)
        return out

    def features(self, rest: list[tuple[Request, int]] | None = None) -> Iteration:
        """The decode step's features (iteration.features of its (1, computed + 1) sequences), then those
        of `rest`, entries after the members (stepcost.entry_features): the same sums in the same order,
        as the members add nothing to `pairs`."""
        n = len(self.base)
        kv = self.kv + n
        if not rest:
            return Iteration(DecodeSeqs(tuple(self.base), self.tick + 1), n, n, kv, 0.0, 0)
        it = entry_features(rest)
        return Iteration(DecodeSeqs(tuple(self.base), self.tick + 1, it.seqs), n + it.tokens, n + it.n_decode,
                         kv + it.decode_kv, it.pairs, it.chunks)

    def advance(self, times: list[float]) -> None:
        """Hand-outs at `times` at which no member finishes, every member present at the previous one
        (sim.apps.serve.runahead: the engine records the gaps): each step's one gap to the peak stack."""
        t, last, push = self.tick, self.last, self.peaks.push
        for now in times:
            t += 1
            push(t, now - last)
            last = now
        self.kv += len(self.reqs) * (t - self.tick)
        self.tick, self.last = t, last

    def hand_out(self, now: float, gaps: dict[float, int]) -> list[Request]:
        """Every member's token emitted at `now`: counts, gaps (by the previous token's time, in the
        order the members first show one) and largest gaps. Returns the members that finished, in
        batch order, synced and no longer members."""
        n = len(self.reqs)
        self.tick = t = self.tick + 1
        self.kv += n
        if self.old:   # the head emitted together at the last hand-out: one gap
            gaps[self.last] = gaps.get(self.last, 0) + self.old
            self.peaks.push(t, now - self.last)
        for m in self.members[self.old:]:   # joined since: each its own previous time, its first gap here
            gaps[m.la] = gaps.get(m.la, 0) + 1
            m.mt = _fmax(m.mt, now - m.la)
            m.since = t + 1
        self.last, self.old = now, n
        done = self._due(self.ends)
        out = []
        for m in done:
            r = m.req
            if m.ph >= 0:
                _catch_up(m, self.grown[m.ph])
                self.count[m.ph] -= 1
            r.computed = c = m.base + t
            r.generated, r.last_at, r.max_tbt = c - m.lag, now, _fmax(m.mt, self.peaks.since(m.since))
            self.kv -= c
            m.live = False
            j = bisect_left(self.seqs, m.seq)
            del self.reqs[j], self.entries[j], self.base[j], self.seqs[j], self.members[j]
            out.append(r)
        self.old -= len(done)
        return out


def _catch_up(m: _Member, grown: int) -> None:
    """Its phase's grows since `m` last caught up, on `held` and its object's `blocks`."""
    d = grown - m.g0
    if d:
        m.held += d
        m.req.blocks += d
        m.g0 = grown


def _seq(m: _Member) -> int:
    return m.seq


def finite(now: float) -> bool:
    """A step that ends at a finite time (a cost out of any range leaves the cohort to the per-request path)."""
    return math.isfinite(now)

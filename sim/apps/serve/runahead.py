"""Decode run-ahead (issue 30): a run of pure decode steps taken in one simpy timeout.

Between two events that can change a batch, the steps of a batch in which every running request
decodes one token are determined: the batch stays the same and each context grows by one a step. So
the engine (sim.apps.serve.simulator), having scheduled and costed such a step, costs the next ones in
a row, books the KV blocks (and, V1 with prefix caching, the filled units) the scheduler would book at
each, waits their summed time at once, and writes what the step-by-step path writes: every member's
counters and largest gap, the gap samples, the iteration records, energy and busy time in step order;
the run's last step is handed out by the engine itself (its finishes, its records). The run ends
before the first step that
  - would end at or after the next event in the simulation's queue (an arrival, another engine's step,
    a timer): nothing else runs inside a run, so every step is scheduled on the state the first saw,
  - needs more blocks than the pool has (the scheduler would preempt there),
  - follows a member's last token or an iteration count that progress and watch look at (every 64),
or after MAX_STEPS; none starts with fewer than MIN_STEPS in reach (a shorter one costs more to plan
than the steps it saves: at 80% load, 1,000,000 requests took 11% more CPU with runs from 2 steps). Requests decoding on their own objects get their blocks at the steps
Scheduler.decode_event names (Scheduler.regrow); a cohort (sim.apps.serve.cohort) keeps its members'
counters and advances its tick (DecodeCohort.advance), its bookings replayed at their ticks
(Scheduler.cohort_regrow). A run is taken only where the scheduler would give every later step the
same entries: nothing waiting, swapped out or held (async scheduling), every running request in the
batch with one token pending and one previous token time (a cohort: every member was in its last
hand-out), an interpolated cost (op-level costs and steps beyond the surrogate's grid opt out), no
speculative decoding, no attention groups. Under debug checks (sim.apps.serve.debug_checks) the first
step's batch is checked as usual and the pool's books before the last. A step cost read ahead but not
taken is the one the engine's next step reads.

SIM_NO_RUNAHEAD=1 turns it off (ServeSim.ahead): tests/test_serve_runahead.py runs random streams both
ways and requires every output equal, not close.
"""

from __future__ import annotations

import heapq
import os
from itertools import chain
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sim.apps.serve import debug_checks
from sim.apps.serve.cohort import DecodeCohort, DecodeSeqs
from sim.apps.serve.lazytable import Remembered
from sim.apps.serve.schedulers import Batch, Request, Scheduler
from sim.apps.serve.iteration import Iteration

if TYPE_CHECKING:
    from sim.apps.serve.simulator import ServeSim

ENV = "SIM_NO_RUNAHEAD"
MAX_STEPS = 4096    # steps in one run: its lists stay small
MAX_SEQS = 1 << 30
MIN_STEPS = 4       # shorter runs are not taken (module doc)
WATCH_EVERY = 64    # the engine calls progress and watch every this many iterations


def enabled() -> bool:
    return os.environ.get(ENV, "") in ("", "0")


def allowed(sim: ServeSim) -> int:
    """The most decode sequences `sim` may take runs of (0: none; module doc): where its step cost is
    interpolated, as many as the cost's grid holds."""
    cost = sim.setup.target_cost
    if not (enabled() and sim.sched.runs_ahead() and not sim.spec and sim.setup.groups <= 1) \
            or getattr(cost, "op_level", True) is not False:
        return 0
    return min(getattr(cost, "max_decode", MAX_SEQS), getattr(cost, "max_tokens", MAX_SEQS), MAX_SEQS)


@dataclass
class Run:
    """Steps 1..k of a pure decode batch: times[j] is step j's end (times[0] the first's start)."""
    batch: Batch
    kv0: int                       # the members' summed computed tokens before the first step
    last_at: float                 # the members' previous token
    times: list[float]
    energy: list[float]            # joules of each step
    used: Any                      # the pool's used blocks after each step's allocations
    dts: list[float]               # each step's duration as the engine waits it
    computed: list[int] = field(default_factory=list)   # per request (no cohort): before the first step
    generated: list[int] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.energy)

    def waits(self) -> list[float]:
        """The timeouts that end at times[-1] to the bit: one, or each step's where the sum's rounding differs."""
        total = self.times[-1] - self.times[0]
        return [total] if self.times[0] + total == self.times[-1] else self.dts


def _steps_left(sched: Scheduler, entries: list[tuple[Request, int]]) -> int:
    """Steps until the first member finishes, when every running request decodes one token in `entries`
    from one previous token time; else 0."""
    caching, la, left = sched.pool.caching, entries[0][0].last_at, MAX_STEPS
    for (r, q), s in zip(entries, sched.running):
        if (r is not s or q != 1 or not r.generated or r.computed != r.prompt + r.generated - 1
                or r.last_at != la or (caching and not r.published)):
            return 0
        left = min(left, r.output - r.generated)
    return left if la >= 0 else 0


def _cohort_left(c: DecodeCohort, n: int) -> int:
    """Steps until the first member finishes, when the batch is the whole cohort and every member took
    part in its last hand-out (one previous token time); else 0."""
    return min(min(c.ends) - c.tick, MAX_STEPS) if len(c) == n == c.old else 0


def plan(sim: ServeSim, batch: Batch, dt: float, energy: float) -> Run | None:
    """The run that `batch`, scheduled now and costing (dt, energy), starts; None: one step as usual."""
    sched, entries, c = sim.sched, batch.entries, batch.cohort
    n = len(entries)
    # the cheap refusals first: the engine asks at every step
    if (not n or n > sim.ahead or entries[0][1] != 1 or n != len(sched.running) or sched.waiting or sched.swapped
            or sim.held or batch.padded is not None or batch.swap_blocks or batch.preempted):
        return None
    now, bound = sim.env.now, sim.env.peek()
    if not now + MIN_STEPS * dt < bound:
        return None
    cap = _cohort_left(c, n) if c is not None else _steps_left(sched, entries)
    if sim.progress is not None or sim.watch is not None:
        cap = min(cap, WATCH_EVERY - sim.iterations % WATCH_EVERY)
    if cap < MIN_STEPS:
        return None
    if c is not None:
        run = Run(batch, c.kv, c.last, [now, now + dt], [energy], [sched.pool.used], [dt])
    else:
        reqs = [r for r, _ in entries]
        c0 = [r.computed for r in reqs]
        run = Run(batch, sum(c0), reqs[0].last_at, [now, now + dt], [energy], [sched.pool.used], [dt], c0,
                  [r.generated for r in reqs])
    _extend(sim, run, cap, bound)
    return run if run.steps > 1 else None


def _timed(sim: ServeSim, run: Run, cap: int, bound: float) -> list[tuple]:
    """Cost vectors of steps 2.. in a row while each ends before `bound` (at most cap - 1, all of one
    length), their end times appended to run.times as the engine's clock adds them. A pure decode step's
    interpolated cost reads only its features, so vectors are kept by (n, KV, the cost's resources)."""
    b, c, cost = run.batch, run.batch.cohort, sim.setup.target_cost
    n, kv0, times = len(b.entries), run.kv0, run.times
    bases, tick = (tuple(c.base), c.tick) if c is not None else (tuple(run.computed), 0)
    memo = getattr(cost, "memo", None)   # the surrogate's (Surrogate.memo; its device costs' keys are longer)
    if memo is None:                    # a cost without one: remembered for this run only
        memo = Remembered()
    t, width, out = times[-1], len(cost.keys), []
    for j in range(2, cap + 1):
        kv = kv0 + n * j
        v = memo.get((n, kv, width))
        if v is None:
            v = memo.put((n, kv, width), cost(Iteration(DecodeSeqs(bases, tick + j), n, n, kv, 0.0, 0)))
            width = len(cost.keys)
        t += v[0]
        if not t < bound or (out and len(v) != len(out[0])):
            break
        times.append(t)
        out.append(v)
    return out


def _regrow_requests(sched: Scheduler, run: Run, last: int, used: list[tuple[int, int]]) -> int:
    """The scheduler's block (and cache) work of steps 2..last for members on their requests, at the
    steps decode_event names; the last step the pool allows."""
    reqs, c0, g0, pool = [r for r, _ in run.batch.entries], run.computed, run.generated, sched.pool
    # (step, member): the first step's scheduling left each one no work before step 2
    events = [(max(sched.decode_event(r) - c0[p] + 1, 2), p) for p, r in enumerate(reqs)]
    heapq.heapify(events)
    while events and events[0][0] <= last:
        j, due = events[0][0], []
        while events and events[0][0] == j:
            due.append(heapq.heappop(events)[1])
        due.sort()
        needs = [sched.decode_need(reqs[p], c0[p] + j - 1) for p in due]
        if sum(x for x in needs if x > 0) > pool.available:
            return j - 1          # the scheduler would preempt at step j
        for p in due:   # the counters regrow reads, as they stand when step j is scheduled
            reqs[p].computed, reqs[p].generated = c0[p] + j - 1, g0[p] + j - 1
        sched.regrow([(reqs[p], x) for p, x in zip(due, needs)])
        for p in due:
            heapq.heappush(events, (sched.decode_event(reqs[p]) - c0[p] + 1, p))
        used.append((j, pool.used))
    return last


def _regrow_cohort(sched: Scheduler, c: DecodeCohort, last: int, used: list[tuple[int, int]]) -> int:
    """The same for a cohort: its steps 2..last scheduled at the ticks it booked work under."""
    t0, fills = c.tick, c.fills if c.fills is not None else {}
    try:
        for j in range(2, last + 1):
            c.tick = t0 + j - 1   # step j is scheduled after j - 1 hand-outs
            if c.grows_at(c.tick) or c.tick in fills:
                if not sched.cohort_regrow(c):
                    return j - 1
                used.append((j, sched.pool.used))
        return last
    finally:
        c.tick = t0               # the hand-outs themselves are landed at the end (land)


def _extend(sim: ServeSim, run: Run, cap: int, bound: float) -> None:
    """Steps 2..cap while each ends before `bound` and the pool holds its blocks (module doc)."""
    sched, c = sim.sched, run.batch.cohort
    vs = _timed(sim, run, cap, bound)
    used = [(1, sched.pool.used)]       # (from step, the pool's used blocks)
    if c is not None:
        last = _regrow_cohort(sched, c, len(vs) + 1, used)
    else:
        last = _regrow_requests(sched, run, len(vs) + 1, used)
    del vs[last - 1:], run.times[last + 1:]
    busy = sim.busy
    for k, col in zip(sim.setup.target_cost.keys, list(zip(*vs))[2:]):   # one step at a time, as the engine
        b = busy.get(k, 0.0)
        for v in col:
            b += v
        busy[k] = b
    run.dts += [v[0] for v in vs]
    run.energy += [v[1] for v in vs]
    run.used = [u for (j, u), (nxt, _) in zip(used, used[1:] + [(last + 1, 0)]) for _ in range(nxt - j)]


def land(sim: ServeSim, run: Run) -> None:
    """At the run's end: steps 1..k-1 written as the engine's hand-out and records would hold them (no
    member finishes in them), then step k handed out by the engine itself (its finishes, its records)."""
    k, n, b, times, sched = run.steps, len(run.batch.entries), run.batch, run.times, sim.sched
    durations = [y - x for x, y in zip(times[:k - 1], times[1:k])]
    gaps = [times[1] - run.last_at] + durations[1:]   # the first step's gap is from the members' previous token
    if b.cohort is not None:
        b.cohort.advance(times[1:k])
    else:
        peak, now = max(gaps), times[k - 1]
        for (r, _), c, g in zip(b.entries, run.computed, run.generated):
            r.computed, r.generated, r.last_at = c + k - 1, g + k - 1, now
            if not peak <= r.max_tbt:
                r.max_tbt = peak
    sim.tbt.extend(gaps)
    full, zero = [float(n)] * (k - 1), [0.0] * (k - 1)
    sim.tbt_w.extend(full)
    sim.tokens += n * (k - 1)
    e = sim.energy
    for x in run.energy[:k - 1]:
        e += x
    sim.energy = e
    sim.add_row(chain.from_iterable(zip(times[:k - 1], durations, run.energy[:k - 1], full, full, zero,   # ITER_COLUMNS
                                        run.used[:k - 1], zero, full, zero)))
    sim.iterations += k - 1
    sim.last_start = times[k - 1]
    if sim.checks:   # debug mode: the pool's books as the last step starts (its batch was checked at the first)
        sim._sync()
        debug_checks.check_blocks(sched)
    sim._apply(b, times[k - 1], times[k], run.energy[k - 1])

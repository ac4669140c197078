"""Decode run-ahead (issue 30): a run of pure decode steps taken in one simpy timeout.

Between two events that can change a batch, the steps of a batch in which every running request
decodes one token are determined: the batch stays the same and each context grows by one a step, so
the engine (sim.apps.serve.simulator) can cost those steps in a row, book each member's KV blocks at
the step the scheduler would (Scheduler.regrow, at the steps Scheduler.decode_event names), wait
their summed time at once, and then write what the step-by-step path writes: every member's counters
and largest gap, the gap samples, the iteration records, energy and busy time in step order, the
finishes. The run ends with the first step that
  - finishes a member (that step is the last one taken),
  - would end at or after the next event in the simulation's queue (an arrival, another engine's step,
    a timer): nothing else runs inside a run, so every step is scheduled on the state the first saw,
  - needs more blocks than the pool has (the scheduler would preempt there),
  - reaches an iteration count the progress and watch callbacks look at (every 64),
or after MAX_STEPS. The first step is scheduled and costed by the engine as usual; a run is taken only
where the scheduler would give every later step the same entries: nothing waiting, swapped out or held
(async scheduling), every running request in the batch with one token pending and the same previous
token time, no cohort step (sim.apps.serve.cohort) and none about to form, an interpolated cost
(op-level costs, and steps beyond the surrogate's grid, opt out), no speculative decoding, no attention
groups, no debug checks. A step cost read ahead but not taken is the one the engine's next step reads.

SIM_NO_RUNAHEAD=1 turns it off (ServeSim.ahead): tests/test_serve_runahead.py runs random streams both
ways and requires every output equal, not close.
"""

from __future__ import annotations

import heapq
import os
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from sim.apps.serve.cohort import DecodeSeqs
from sim.apps.serve.lazytable import Remembered
from sim.apps.serve.schedulers import Batch, Request, Scheduler
from sim.apps.serve.stepcost import Iteration

if TYPE_CHECKING:
    from sim.apps.serve.simulator import ServeSim

ENV = "SIM_NO_RUNAHEAD"
MAX_STEPS = 4096    # steps in one run: its lists stay small
WATCH_EVERY = 64    # the engine calls progress and watch every this many iterations
_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # step cost -> its pure decode vectors


def enabled() -> bool:
    return os.environ.get(ENV, "") in ("", "0")


@dataclass
class Run:
    """Steps 1..k of a pure decode batch: times[j] is step j's end (times[0] the first's start)."""
    reqs: list[Request]
    computed: list[int]            # each member's computed tokens before the first step
    generated: list[int]
    last_at: float                 # the members' previous token
    times: list[float]
    energy: list[float]            # joules of each step
    used: list[int]                # the pool's used blocks after each step's allocations
    dts: list[float] = field(default_factory=list)   # each step's duration as the engine waits it

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


def _fits(cost, n: int) -> bool:
    """The cost interpolates n decode sequences (no exact fallback, whose count a read-ahead would move)."""
    return getattr(cost, "op_level", True) is False and n <= getattr(cost, "max_decode", n) \
        and n <= getattr(cost, "max_tokens", n)


def plan(sim: ServeSim, batch: Batch, dt: float, energy: float) -> Run | None:
    """The run that `batch`, scheduled now and costing (dt, energy), starts; None: one step as usual."""
    sched, entries = sim.sched, batch.entries
    n = len(entries)
    if (not n or n != len(sched.running) or sched.waiting or sched.swapped or sim.held or batch.cohort is not None
            or batch.padded is not None or batch.swap_blocks or batch.preempted
            or (sched.cohort is not None and n >= sched.cohort_min) or not _fits(sim.setup.target_cost, n)):
        return None
    cap = _steps_left(sched, entries)
    if sim.progress is not None or sim.watch is not None:
        cap = min(cap, WATCH_EVERY - sim.iterations % WATCH_EVERY)
    now, bound = sim.env.now, sim.env.peek()
    if cap < 2 or not now + dt < bound:
        return None
    reqs = [r for r, _ in entries]
    run = Run(reqs, [r.computed for r in reqs], [r.generated for r in reqs], reqs[0].last_at,
              [now, now + dt], [energy], [sched.pool.used], [dt])
    _extend(sim, run, cap, bound)
    return run if run.steps > 1 else None


def _vectors(cost, n: int, kv0: int, bases: tuple[int, ...], first: int, last: int) -> list[tuple]:
    """The cost vectors of steps first..last (their decode KV kv0 + n * step). A pure decode step's
    interpolated cost reads only its features, so they are kept by (n, KV, the cost's resources)."""
    memo = _MEMO.get(cost)
    if memo is None:
        memo = _MEMO[cost] = Remembered()
    width, out = len(cost.keys), []
    for j in range(first, last + 1):
        kv = kv0 + n * j
        c = memo.get((n, kv, width))
        if c is None:
            c = memo.put((n, kv, width), cost(Iteration(DecodeSeqs(bases, j), n, n, kv, 0.0, 0)))
            width = len(cost.keys)
        out.append(c)
    return out


def _timed(sim: ServeSim, run: Run, cap: int, bound: float) -> np.ndarray:
    """Cost vectors of steps 2.. in a row while each ends before `bound` (read a chunk at a time, sized
    by the first step's duration), at most cap - 1, all of one length."""
    n, c0 = len(run.reqs), run.computed
    kv0, bases, t, dt = sum(c0), tuple(c0), run.times[-1], run.dts[0]
    rows: list[np.ndarray] = []
    j = 2
    while j <= cap:
        guess = int(min((bound - t) / dt, cap)) if dt > 0 else cap
        m = min(cap, j + max(guess, 8) - 1)
        vs = _vectors(sim.setup.target_cost, n, kv0, bases, j, m)
        width = len(rows[0][0]) if rows else len(vs[0])
        same = next((i for i, v in enumerate(vs) if len(v) != width), len(vs))
        block = np.array(vs[:same], dtype=float).reshape(same, width)
        ends = np.add.accumulate(np.concatenate(([t], block[:, 0])))[1:]   # as the engine's clock adds them
        fit = int(np.argmin(ends < bound)) if not (ends < bound).all() else same
        rows.append(block[:fit])
        if fit < len(vs):
            break
        t, j = ends[-1], m + 1
    return np.concatenate(rows) if rows else np.zeros((0, 2))


def _extend(sim: ServeSim, run: Run, cap: int, bound: float) -> None:
    """Steps 2..cap while each ends before `bound` and the pool holds its blocks (module doc)."""
    sched = sim.sched
    pool, reqs, c0, g0 = sched.pool, run.reqs, run.computed, run.generated
    vs = _timed(sim, run, cap, bound)
    last = len(vs) + 1            # the last step the costs allow
    events: list[tuple[int, int]] = [(sched.decode_event(r) - c0[p] + 1, p) for p, r in enumerate(reqs)]
    heapq.heapify(events)
    used = [(1, pool.used)]       # (from step, the pool's used blocks)
    while events and events[0][0] <= last:
        j, due = events[0][0], []
        while events and events[0][0] == j:
            due.append(heapq.heappop(events)[1])
        due.sort()
        needs = [sched.decode_need(reqs[p], c0[p] + j - 1) for p in due]
        if sum(x for x in needs if x > 0) > pool.available:
            last = j - 1          # the scheduler would preempt at step j
            break
        for p in due:   # the counters regrow reads, as they stand when step j is scheduled
            reqs[p].computed, reqs[p].generated = c0[p] + j - 1, g0[p] + j - 1
        sched.regrow([(reqs[p], x) for p, x in zip(due, needs)])
        for p in due:
            heapq.heappush(events, (sched.decode_event(reqs[p]) - c0[p] + 1, p))
        used.append((j, pool.used))
    vs = vs[:last - 1]
    _commit_busy(sim, vs)
    t = np.add.accumulate(np.concatenate(([run.times[-1]], vs[:, 0])))[1:]
    run.times += t.tolist()
    run.dts += vs[:, 0].tolist()
    run.energy += vs[:, 1].tolist()
    u = np.empty(last, dtype=float)
    for j, v in used:
        u[j - 1:] = v
    run.used = u


def _commit_busy(sim: ServeSim, vs: np.ndarray) -> None:
    """Each resource's busy seconds of the steps `vs`, added one step at a time as the engine adds them."""
    busy = sim.busy
    if not len(vs):
        return
    for i, k in enumerate(sim.setup.target_cost.keys[:vs.shape[1] - 2]):
        busy[k] = _seq_sum(busy.get(k, 0.0), vs[:, 2 + i])


def _seq_sum(start: float, xs: np.ndarray) -> float:
    """start + xs[0] + xs[1] + ..., added in order (as the engine adds them one step at a time)."""
    return float(np.add.accumulate(np.concatenate(([start], xs)))[-1])


def land(sim: ServeSim, run: Run) -> None:
    """At the run's end: what the engine's hand-out and records would hold after its k steps."""
    sched, k, n = sim.sched, run.steps, len(run.reqs)
    times = np.array(run.times)
    now = run.times[-1]
    durations = np.diff(times)
    gaps = durations.copy()
    gaps[0] = run.times[1] - run.last_at     # the first step's gap is from the members' previous token
    peak = float(gaps.max())
    done = []
    for r, c, g in zip(run.reqs, run.computed, run.generated):
        r.computed, r.generated, r.last_at = c + k, g + k, now
        if not peak <= r.max_tbt:
            r.max_tbt = peak
        if g + k >= r.output:
            done.append(r)
    for r in done:
        sim._finish(r, now)
    sim.tbt.frombytes(gaps.tobytes())
    sim.tbt_w.frombytes(np.full(k, float(n)).tobytes())
    sim.tokens += n * k
    energy = np.array(run.energy)
    sim.energy = _seq_sum(sim.energy, energy)
    run.used[-1] = sched.pool.used
    running = np.full(k, float(n))
    running[-1] = len(sched.running)
    full, zero = np.full(k, float(n)), np.zeros(k)
    for col, v in zip(sim.it.values(), (times[:-1], durations, energy, full, full, zero, np.array(run.used, dtype=float),
                                        zero, running, zero)):
        col.frombytes(v.tobytes())
    sim.iterations += k
    sim.last_start = run.times[-2]
    if sim.iterations % WATCH_EVERY == 0:
        if sim.progress is not None:
            sim.progress(sim.done, len(sim.reqs))
        if sim.watch is not None:
            sim.watch(sim)

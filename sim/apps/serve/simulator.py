"""The request-level discrete-event simulation (simpy): an arrival process puts
requests in the scheduler's queue; one engine process runs iterations one at a
time: ask the scheduler for a batch, cost it (sim.apps.serve.stepcost), wait that
long, hand out the tokens, retire finished requests. Token times are kept per
request (first, last, largest gap) and per iteration, not per token, so memory
grows with requests and iterations only. Busy time is summed per resource over the
run (the step costs' resources, sim.apps.serve.stepcost; `host_link` for swaps).

The stack's engine_overheads (hw_models.stack.engine_overheads) add three things here: a pure delay
(a request reaches the engine `request_delay_s` of its deployment after it arrives; latencies count from
its arrival), the API front end as a resource when it has service times (sim.apps.serve.frontend; no
run-ahead then) and async scheduling (the step that runs next was scheduled when the previous one started, so a request
that reaches a busy engine is held until the scheduling after the step it arrived during).
"""

from __future__ import annotations

import random
from array import array
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import simpy

from hw_models.clock import CLOCK_COUNTERS
from hw_models.power import Board
from sim.apps.serve import debug_checks, frontend, handout_ref, runahead, speculative
from sim.apps.serve.schedulers import Batch, Request, Scheduler
from sim.apps.serve.serving_mapper import engine_terms
from sim.apps.serve.attention_dp import split
from sim.apps.serve.cohort import DecodeCohort, finite
from sim.apps.serve.instance import Setup
from sim.apps.serve.iteration import Iteration, entry_features, features
from sim.apps.serve.traces import Requests

REQUEST_COLUMNS = ("arrival_s", "scheduled_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens",
                   "requested_output_tokens", "preemptions", "prefix_hit_tokens", "max_tbt_s", "status")
ITER_COLUMNS = ("start_s", "duration_s", "energy_j", "seqs", "tokens", "prefill_seqs", "kv_blocks_used",
                "swap_blocks", "running", "waiting")   # running/waiting: queue lengths after the iteration
DONE, REJECTED = 1.0, 2.0

CLOCK_SPLIT = frozenset(CLOCK_COUNTERS)   # cost-vector entries for the cap alone, no resource (_booked)


@dataclass
class ServeResult:
    requests: dict[str, np.ndarray]
    iterations: dict[str, np.ndarray]
    tbt_s: np.ndarray              # gaps between a request's successive token emissions ...
    tbt_weight: np.ndarray         # ... each with the number of times it occurred
    preemptions: int
    swapped_out_blocks: int
    swapped_in_blocks: int
    total_blocks: int
    peak_blocks: int
    makespan_s: float
    tokens_out: int
    energy_j: float
    swap_log: list[tuple[int, int, int]] = field(default_factory=list)   # (request, blocks, tokens) per swap-out
    spec_steps: int = 0
    spec_tokens: int = 0
    busy_s: dict[str, float] = field(default_factory=dict)   # per resource, summed over the instances
    instances: int = 1
    rejected_reasons: dict[str, int] = field(default_factory=dict)   # why requests were refused: reason -> count
    board: Board = Board()   # idle power per device and devices per instance (sim.apps.serve.energy)
    instance_names: list[str] = field(default_factory=list)   # per iterations["instance"] of a merged run, if named
    kv_block_tokens: int = 16   # tokens per KV block: 1 where the pool is not paged (orca, static); 0 mixed sizes
    preempt_log: list[tuple[float, int]] = field(default_factory=list)   # (iteration start, request) per preemption


class ServeSim:
    def __init__(self, setup: Setup, reqs: Requests, progress: Callable[[int, int], None] | None = None,
                 watch: Callable[["ServeSim"], None] | None = None):
        self.setup, self.reqs, self.progress = setup, reqs, progress
        self.watch = watch   # looks at the run every 64 iterations; may stop it by raising (sim.apps.serve.early_stop)
        self.sched: Scheduler = setup.scheduler(reqs)
        n = len(reqs)
        self.rec = {c: np.full(n, np.nan) for c in REQUEST_COLUMNS}
        self.rec["arrival_s"][:] = reqs.arrival_s
        self.rec["prompt_tokens"][:] = reqs.prompt_len
        self.rec["requested_output_tokens"][:] = reqs.output_len   # kept where none were generated (a rejection)
        for c in ("output_tokens", "preemptions", "prefix_hit_tokens", "status"):
            self.rec[c][:] = 0
        # One row of ITER_COLUMNS per iteration, flat: one extend a step rather than one append per column
        # (issue 30: the 1M-request case runs ~1.8 iterations a request); columns are cut out in result().
        self.it_rows = array("d")
        self.add_row = self.it_rows.extend
        self.tbt, self.tbt_w = array("d"), array("d")
        self.spec = setup.file.serving.speculative
        self.rng = random.Random(setup.file.serving.arrivals.__dict__.get("seed", 0))
        self.done = self.iterations = self.arrived = 0
        self.wake: simpy.Event | None = None
        self.tokens = 0
        self.energy = 0.0
        self.swap_log: list[tuple[int, int, int]] = []
        self.preempt_log: list[tuple[float, int]] = []
        self.spec_steps = self.spec_tokens = 0
        self.busy: dict[str, float] = {}
        self.rejections: dict[str, int] = {}
        self.eo = eo = engine_terms(setup.file, setup.machine)
        self.front_end_s = eo.request_delay_s(setup.file.serving.deployment) if eo else 0.0
        self.front: frontend.FrontEnd | None = None   # built by start(), in the environment the engine runs in
        self.async_scheduling = bool(eo and eo.async_scheduling)
        self.held: list[tuple[float, int]] = []   # (when it reached the engine, request) awaiting a scheduling
        self.stepping = False                     # a step is running
        self.last_start = float("-inf")           # when the last step started: the next one was scheduled then
        self.checks = debug_checks.enabled()   # run-wide invariants each iteration (debug mode)
        sched = self.sched
        if (sched.decode_cohort and not sched.reference and not self.spec and setup.groups <= 1
                and type(sched)._grow is Scheduler._grow):
            # decode steps as array operations (sim.apps.serve.cohort)
            sched.cohort = DecodeCohort(sched.pool.block_size, sched.lookahead)
        self.ahead = runahead.allowed(self)   # runs of pure decode steps in one timeout
        # the cost's pure decode step (Surrogate.decode_step), for a cohort's steps
        self.decode_step = getattr(setup.target_cost, "decode_step", None)

    def start(self, env: simpy.Environment) -> None:
        """Join `env` (a router's or a pool's, shared with other engines) with this engine's API front end: an
        engine behind a router is an engine with its own server, so it takes requests in and streams tokens out
        through it as one alone does."""
        self.env = env
        self.front = frontend.make(self, self.eo)
        if self.front is not None:
            self.ahead = 0   # the front end takes each step's tokens as the step ends

    def run(self) -> ServeResult:
        env = simpy.Environment()
        self.start(env)
        env.process(self._arrivals(env))
        env.process(self._engine(env))
        env.run()
        if self.checks:
            debug_checks.check_costs(self.setup)
        return self.result(env.now)

    def result(self, makespan_s: float) -> ServeResult:
        """What the run recorded (a router running several engines in one environment calls it)."""
        s = self.sched
        self._sync()
        if self.front is not None:
            self.front.to_client(self.rec)
        for r in (*s.running, *s.waiting, *s.swapped):   # unfinished: their gaps so far (finished ones at _finish)
            self.rec["max_tbt_s"][r.idx] = r.max_tbt
        return ServeResult(self.rec, self.iteration_columns(),
                           np.asarray(self.tbt), np.asarray(self.tbt_w), s.preemptions, s.swapped_out_blocks,
                           s.swapped_in_blocks, s.pool.total, s.pool.peak_used, makespan_s, self.tokens, self.energy,
                           self.swap_log, self.spec_steps, self.spec_tokens, dict(self.busy),
                           rejected_reasons=dict(self.rejections), kv_block_tokens=s.pool.block_size,
                           preempt_log=self.preempt_log)

    def iteration_columns(self) -> dict[str, np.ndarray]:
        """The per-iteration records by column (ITER_COLUMNS), each contiguous."""
        cols = np.frombuffer(self.it_rows, dtype=float).reshape(-1, len(ITER_COLUMNS)).T.copy() \
            if len(self.it_rows) else np.zeros((len(ITER_COLUMNS), 0))
        return dict(zip(ITER_COLUMNS, cols))

    def _arrivals(self, env: simpy.Environment):
        for i, at in enumerate(self.reqs.arrivals()):
            dt = at + self.front_end_s - env.now
            if dt > 0:
                yield env.timeout(dt)
            self.enter(i)

    def enter(self, i: int) -> None:
        """Request `i` reaches the server: its front end, or the engine when there is none."""
        (self.front.send if self.front is not None else self.arrive)(i)

    def delivered(self, i: int) -> None:
        """The front end has streamed request `i`'s last token (a closed loop's client replies then)."""

    def arrive(self, i: int) -> None:
        """Request `i` of the stream reaches this engine now (a router calls it too)."""
        self.arrived += 1
        if self.async_scheduling and self.stepping:
            self.held.append((self.env.now, i))
        else:
            self._admit(i)

    def _release(self, cutoff: float) -> None:
        """Held requests that reached the engine by `cutoff` go to the scheduler."""
        keep = []
        for t, i in self.held:
            if t <= cutoff:
                self._admit(i)
            else:
                keep.append((t, i))
        self.held = keep

    def _admit(self, i: int) -> None:
        r, hashes = self.reqs, self.reqs.hash_ids
        req = Request(i, float(r.arrival_s[i]), int(r.prompt_len[i]), int(r.output_len[i]),
                      hashes[i] if hashes else ())
        self.admit_or_reject(req)
        self.poke()

    def refusal(self, req: Request) -> str | None:
        """Why `req` can never run here (sim.apps.serve.schedulers.Scheduler.refusal)."""
        return self.sched.refusal(req)

    def admit_or_reject(self, req: Request) -> None:
        """Queue `req`, or reject it now, with its reason, when it can never be scheduled: a
        request left waiting forever blocked the queue behind it and the run ended with both unfinished."""
        why = self.refusal(req)
        if why is None and self.sched.add(req):
            return
        why = why or "refused by the scheduler"
        self.rejections[why] = self.rejections.get(why, 0) + 1
        self.rec["status"][req.idx] = REJECTED
        self.done += 1

    def poke(self) -> None:
        """Wake an idle engine to look at its queue again."""
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    def _engine(self, env: simpy.Environment):
        total = len(self.reqs)
        sched = self.sched
        while self.done < total:
            if self.held:   # async scheduling: those that arrived before the last step began
                self._release(self.last_start)
            more = self.arrived < total or bool(self.held)
            batch = sched.schedule(env.now, more) if sched.busy() else None
            if batch is None and self.held:   # the step scheduled then was empty: schedule again at once
                self._release(env.now)
                continue
            if batch is None:
                self.wake = env.event()
                t = sched.timer(env.now, more)
                yield self.wake if t is None or t <= env.now else env.any_of([self.wake, env.timeout(t - env.now)])
                continue
            start = self.last_start = env.now
            if batch.evicted:   # preempted to make room for this iteration (the Chrome trace marks them)
                self.preempt_log.extend((start, i) for i in batch.evicted)
            if self.checks:
                self._sync()
                debug_checks.check_batch(sched, batch)
            dt, energy = self._cost(batch)
            # plan's own first refusal where most steps meet it (the next event comes within MIN_STEPS
            # steps), asked here without the call: at 80% load nearly every step stops there
            run = runahead.plan(self, batch, dt, energy) \
                if self.ahead and env.now + runahead.MIN_STEPS * dt < env.peek() else None
            self.stepping = True
            for wait in run.waits() if run else (dt,):
                yield env.timeout(wait)
            self.stepping = False
            runahead.land(self, run) if run else self._apply(batch, start, env.now, energy)
            if self.front is not None:
                self.front.step(env.now)

    def _cost(self, batch: Batch) -> tuple[float, float]:
        s = self.setup
        swap_s = batch.swap_blocks * s.block_bytes / s.swap_bytes_per_s if batch.swap_blocks else 0.0
        if swap_s:
            self.busy["host_link"] = self.busy.get("host_link", 0.0) + swap_s
        if batch.preempted:
            self.swap_log.extend(batch.preempted)
        if batch.cohort is not None:
            c = batch.cohort
            n = len(c)
            if self.decode_step is not None and len(batch.entries) == n:   # a pure decode step
                t, e = self._booked(s.target_cost.keys, self.decode_step(n, c.kv + n, c.features))
            else:
                t, e = self._costed(s.target_cost, c.features(batch.entries[n:]))
            return t + swap_s, e
        if batch.padded is not None:
            t, e = self._costed(s.target_cost, features(batch.padded))
            return t + swap_s, e
        if s.groups > 1:   # data-parallel attention: the batch split over its groups
            t, e = self._costed(s.target_cost, split(batch.entries, s.groups))
            return t + swap_s, e
        if not self.spec:
            t, e = self._costed(s.target_cost, entry_features(batch.entries))
            return t + swap_s, e
        return speculative.step_cost(self, batch, swap_s)

    def _costed(self, cost, it: Iteration) -> tuple[float, float]:
        """(seconds, joules) of `it`; its resources' busy times go to the run's totals."""
        return self._booked(cost.keys, cost(it))

    def _booked(self, keys: list[str], c: tuple[float, ...]) -> tuple[float, float]:
        """(seconds, joules) of a step's cost vector `c`; its resources' busy times go to the run's totals (not the ops'
        split by what the SM clock paces, which rides beside them for the cap alone: hw_models.clock)."""
        busy = self.busy
        for k, v in zip(keys, c[2:]):
            if k not in CLOCK_SPLIT:
                busy[k] = busy.get(k, 0.0) + v
        return c[0], c[1]

    def _apply(self, batch: Batch, start: float, now: float, energy: float) -> None:
        # Gaps by the time of the previous token: requests that emitted together share one sample
        # (weighted), so memory grows with iterations, not with tokens.
        gaps: dict[float, int] = {}
        if batch.cohort is not None and finite(now):
            tokens, prefill = self._hand_out_cohort(batch, start, now, gaps)
        elif self.spec or self.sched.reference:
            tokens, prefill = handout_ref.hand_out(self, batch, start, now, gaps)
        else:
            if batch.cohort is not None:   # a step that ends at no finite time: counted per request
                batch.cohort.dissolve()
            tokens, prefill = self._hand_out(batch, start, now, gaps)
        for t0, count in gaps.items():
            self.tbt.append(now - t0)
            self.tbt_w.append(float(count))
        self.energy += energy
        sched = self.sched
        self.add_row((start, now - start, energy, len(batch.padded or batch.entries), tokens, prefill, sched.pool.used,
                      batch.swap_blocks, len(sched.running), len(sched.waiting) + len(sched.swapped)))
        self.iterations = n = self.iterations + 1
        if self.checks and n % debug_checks.BLOCKS_EVERY == 1:
            self._sync()
            debug_checks.check_blocks(sched)
        if self.progress is not None and n % 64 == 0:
            self.progress(self.done, len(self.reqs))
        if self.watch is not None and n % 64 == 0:
            self.watch(self)

    def _sync(self) -> None:
        """The cohort's counters back on its members' Request objects (before anything reads them)."""
        if self.sched.cohort is not None:
            self.sched.cohort.sync()

    def _hand_out_cohort(self, batch: Batch, start: float, now: float, gaps: dict[float, int]) -> tuple[int, int]:
        """A cohort step's hand-out: one token to every member (no prefill, nothing to publish), then the
        entries after the members (prompts a V1 step admitted, schedulers/vllm_cohort.py) per request."""
        n, rest = len(batch.cohort), batch.entries[len(batch.cohort):]
        for r in batch.cohort.hand_out(now, gaps):
            self._finish(r, now)
        self.tokens += n
        tokens, prefill = self._hand_out(Batch(rest), start, now, gaps) if rest else (0, 0)
        return n + tokens, prefill

    def _hand_out(self, batch: Batch, start: float, now: float, gaps: dict[float, int]) -> tuple[int, int]:
        """Each scheduled request's tokens computed and its token (if any) emitted; (tokens, prefill
        sequences). The same decisions as handout_ref.hand_out in one pass with the per-request work
        a decode needs kept to attribute arithmetic (issue 30): no speculative decoding here."""
        sched = self.sched
        caching = sched.pool.caching
        scheduled, first = self.rec["scheduled_s"], self.rec["first_token_s"]
        tokens = prefill = emitted = run = 0
        run_at = None   # the previous-token time of the current run of emitters (a decode batch shares one)
        for r, q in batch.entries:
            if r.sched_at < 0:
                r.sched_at = scheduled[r.idx] = start
            tokens += q
            g = r.generated
            if q != 1 or not g:
                prefill += 1
            c = r.computed = r.computed + q
            if c < r.prompt + g:
                continue        # a prefill chunk that emits nothing yet
            g = r.generated = g + 1
            emitted += 1
            if caching and not r.published:
                sched.publish(r)
            la = r.last_at
            if r.first_at < 0:
                r.first_at = first[r.idx] = now
            elif la == run_at:
                run += 1
            else:   # counted a run at a time: the keys enter `gaps` in the order they first appear
                if run:
                    gaps[run_at] = gaps.get(run_at, 0) + run
                run_at, run = la, 1
            if la >= 0 and not now - la <= r.max_tbt:
                r.max_tbt = now - la
            r.last_at = now
            if g >= r.output:
                self._finish(r, now)
        if run:
            gaps[run_at] = gaps.get(run_at, 0) + run
        self.tokens += emitted
        return tokens, prefill

    def _finish(self, r: Request, now: float) -> None:
        rec = self.rec
        i = r.idx
        rec["finish_s"][i] = now
        rec["max_tbt_s"][i] = r.max_tbt
        rec["output_tokens"][i] = r.generated
        rec["preemptions"][i] = r.preemptions
        rec["prefix_hit_tokens"][i] = r.prefix_hit
        rec["status"][i] = DONE
        self.done += 1
        if self.front is not None:
            self.front.finished.append(i)
        if self.checks:
            debug_checks.check_finished(r)
        self.sched.finish(r)

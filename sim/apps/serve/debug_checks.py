"""Run-wide invariants of the serving engine, checked iteration by iteration in debug mode
(SIM_SERVE_CHECKS=1 in the environment; the test suite sets it, tests/conftest.py), so that a
broken scheduler, KV pool or token accounting fails the test that ran it rather than shifting
a figure no test pins (issue 32). Checked at every iteration:

- the tokens scheduled fit the iteration's token budget (swapped-in requests' tokens included);
- every scheduled request gets at least one token, appears once, is not finished, and never
  computes past its own tokens (prompt + generated);
- KV blocks: what the requests hold plus the cached units held plus what is free or evictable
  is the pool, to the block (every BLOCKS_EVERY-th iteration in a run: the count walks every
  request; a leaked block stays leaked, so the sample finds it), and every running request
  holds blocks for the tokens it has computed;
- a prefix-cache hit is shorter than the prompt (at least one token computes).

At every finish: the request emitted exactly its output length, and arrival <= scheduled <=
first token <= finish (TTFT <= E2E). `surrogate_at_grid` checks a surrogate step cost against
the exact cost at its grid points (interpolation adds nothing there). A violation is a bug in
sim, not in the input: ServeInvariantError keeps its traceback.
"""

from __future__ import annotations

import math
import os

from sim.apps.serve.instance import Setup
from sim.apps.serve.schedulers import Batch, Request, Scheduler
from sim.apps.serve.schedulers.static import Static
from sim.apps.serve.iteration import features
from sim.apps.serve.stepcost import Surrogate

ENV = "SIM_SERVE_CHECKS"
# The surrogate returns the exact cost at a grid point; only float rounding of the lerp remains.
GRID_RTOL = 1e-9
TIME_RTOL = 1e-12
BLOCKS_EVERY = 16


class ServeInvariantError(AssertionError):
    """A serving run broke a run-wide invariant (a bug in the simulator)."""


def enabled() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def _fail(msg: str) -> None:
    raise ServeInvariantError(msg)


def held_blocks(sched: Scheduler) -> int:
    """Blocks the requests hold: their own, and each cached unit some request holds (once)."""
    reqs = (*sched.running, *sched.waiting, *sched.swapped, *getattr(sched, "in_transfer", {}).values())
    units = set().union(*(r.shared for r in reqs)) if reqs else set()
    return sum(r.blocks for r in reqs) + len(units) * sched.pool.unit_blocks


def check_blocks(sched: Scheduler) -> None:
    pool = sched.pool
    if isinstance(sched, Static):
        return   # a static batch sizes its KV by shape and takes nothing from the pool
    held, avail, usable = held_blocks(sched), pool.available, pool.total - pool.null_blocks
    if held + avail != usable:
        _fail(f"KV blocks: requests hold {held}, {avail} free or evictable, but the pool has {usable}")
    if avail < 0 or pool.free < 0:
        _fail(f"KV blocks: negative free count (available {avail}, free {pool.free})")
    for r in sched.running:
        have = r.blocks + len(r.shared) * pool.unit_blocks
        if have < pool.blocks_for(r.computed):
            _fail(f"request {r.idx} holds {have} KV blocks for {r.computed} computed tokens "
                  f"({pool.blocks_for(r.computed)} needed)")


def check_batch(sched: Scheduler, batch: Batch) -> None:
    """Before the engine applies `batch`."""
    seen: set[int] = set()
    tokens = 0
    for r, q in batch.entries:
        if r.idx in seen:
            _fail(f"request {r.idx} scheduled twice in one iteration")
        seen.add(r.idx)
        if q < 1:
            _fail(f"request {r.idx} scheduled with {q} tokens (every scheduled request computes at least one)")
        if r.generated >= r.output:
            _fail(f"request {r.idx} scheduled after it finished ({r.generated} of {r.output} tokens)")
        if r.computed + q > r.prompt + r.generated:
            _fail(f"request {r.idx}: {r.computed} computed + {q} scheduled exceeds its {r.prompt + r.generated} tokens")
        if r.prefix_hit >= r.prompt:
            _fail(f"request {r.idx}: prefix-cache hit of {r.prefix_hit} tokens for a {r.prompt}-token prompt")
        tokens += q
    if batch.padded is None and tokens > sched.max_tokens:
        _fail(f"{tokens} tokens scheduled in one iteration, over the budget of {sched.max_tokens}")


def check_finished(r: Request) -> None:
    if r.generated != r.output:
        _fail(f"request {r.idx} finished with {r.generated} tokens out of an output length of {r.output}")
    # simpy's clock sums the arrival gaps: the arrival time it reaches may differ in the last bits.
    slack = TIME_RTOL * max(1.0, abs(r.arrival))
    if not math.isfinite(r.last_at):
        return   # a cost out of any physical range: the run's output check says so in one line
    if not (r.arrival - slack <= r.sched_at <= r.first_at <= r.last_at):
        _fail(f"request {r.idx}: arrival {r.arrival}, scheduled {r.sched_at}, first token {r.first_at}, "
              f"finish {r.last_at} out of order (TTFT <= E2E)")


def surrogate_at_grid(sur: Surrogate, points: int = 3) -> None:
    """The surrogate's pure-decode and pure-prefill costs at (up to `points` of) their grid points
    equal the exact cost to GRID_RTOL, for each table the run built."""
    for name, make in (("D", lambda x: [(sur.q, sur.kv0)] * x), ("P", lambda x: [(x, x)])):
        if name not in sur._tables:
            continue
        xs = sur._tables[name][0]
        picks = sorted({xs[0], xs[len(xs) // 2], xs[-1]})[:points]
        for x in picks:
            it = features(make(x), sur.q)
            got, want = sur.device(it), sur.exact.device(it)
            for g, w in zip(got, want):
                if abs(g - w) > GRID_RTOL * max(abs(w), 1e-30):
                    _fail(f"surrogate table {name} at its grid point {x}: {got[:2]} against exact {want[:2]}")


def check_costs(setup: Setup) -> None:
    """The run's surrogate step costs (target and draft) at their grid points."""
    for cost in (setup.target_cost, setup.draft_cost):
        if isinstance(cost, Surrogate):
            surrogate_at_grid(cost)

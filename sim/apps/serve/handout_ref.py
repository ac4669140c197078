"""The per-request hand-out as written before issue 30: speculative decoding runs it, and
`reference` schedulers (the property test compares schedules against it, tests/test_serve_fastpath.py).
ServeSim._hand_out makes the same decisions in one pass with less work per request; kept apart so
the engine module stays small."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.apps.serve import speculative
from sim.apps.serve.schedulers import Batch

if TYPE_CHECKING:
    from sim.apps.serve.simulator import ServeSim


def hand_out(sim: ServeSim, batch: Batch, start: float, now: float, gaps: dict[float, int]) -> tuple[int, int]:
    """The hand-out as written before issue 30 (speculative decoding runs it; the property test
    compares schedules against it, tests/test_serve_fastpath.py)."""
    rec, sched, spec = sim.rec, sim.sched, sim.spec
    tokens = prefill = 0
    for r, q in batch.entries:
        if r.sched_at < 0:
            r.sched_at = rec["scheduled_s"][r.idx] = start
        tokens += q
        decoding = q == 1 and r.generated > 0
        if spec and decoding:
            n_tok = speculative.accepted(sim, r)
            r.generated += n_tok
            r.computed = r.prompt + r.generated - 1
        else:
            prefill += not decoding
            r.computed += q
            if r.computed < r.prompt + r.generated:
                continue        # a prefill chunk that emits nothing yet
            r.generated += 1
            n_tok = 1
            if sched.pool.caching and not r.published:
                sched.publish(r)
        sim.tokens += n_tok
        if r.first_at < 0:
            r.first_at = rec["first_token_s"][r.idx] = now
        else:
            gaps[r.last_at] = gaps.get(r.last_at, 0) + 1
        if r.last_at >= 0:
            gap = now - r.last_at
            if not gap <= r.max_tbt:
                r.max_tbt = gap
        r.last_at = now
        if r.generated >= r.output:
            sim._finish(r, now)
    return tokens, prefill

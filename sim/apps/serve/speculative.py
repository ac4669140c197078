"""Speculative decoding's step (sim.apps.serve.simulator, docs/serving.md): k draft decode steps and one
target step verifying k + 1 positions, and how many tokens a verify step yields."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.apps.serve.schedulers import Batch, Request
from sim.apps.serve.iteration import Iteration, features

if TYPE_CHECKING:
    from sim.apps.serve.simulator import ServeSim


def step_cost(sim: "ServeSim", batch: Batch, swap_s: float) -> tuple[float, float]:
    """k draft decode steps (the first also runs the prefill chunks through the draft), then one
    target step verifying k + 1 positions per decoding sequence."""
    k, s = sim.spec.k, sim.setup
    dec = [r for r, q in batch.entries if q == 1 and r.generated]
    pre = [(q, r.computed + q) for r, q in batch.entries if not (q == 1 and r.generated)]
    verify = [(k + 1, r.computed + k + 1) for r in dec]
    it = features(verify + pre, k + 1)
    t, e = sim._costed(s.target_cost, Iteration(it.seqs, it.tokens, it.n_decode, it.decode_kv, it.pairs,
                                                 it.chunks, len(verify) * (k + 1) + len(pre)))
    for j in range(k if dec else 1):
        seqs = [(1, r.computed + 1 + j) for r in dec] + (pre if j == 0 else [])
        dt, de = sim._costed(s.draft_cost, features(seqs))
        t, e = t + dt, e + de
    return t + swap_s, e


def accepted(sim: "ServeSim", r: Request) -> int:
    """Tokens one verify step yields: accepted drafts (each with probability alpha, stopping at the
    first rejection) plus the target's own token."""
    a, k, alpha, rnd = 0, sim.spec.k, sim.spec.alpha, sim.rng.random
    while a < k and rnd() < alpha:
        a += 1
    sim.spec_steps += 1
    sim.spec_tokens += min(a + 1, r.output - r.generated)
    return min(a + 1, r.output - r.generated)

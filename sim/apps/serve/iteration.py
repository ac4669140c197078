"""One serving iteration as the step cost reads it: its sequences, each (q_len, kv_len), and the
surrogate's features of them (sim.apps.serve.stepcost's module doc names them: T, n_d, S_d, A)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Iteration:
    """One iteration's sequences, each (q_len, kv_len), with the surrogate's features."""
    seqs: tuple[tuple[int, int], ...]
    tokens: int
    n_decode: int
    decode_kv: int        # summed kv_len of the decode sequences
    pairs: float          # summed q_len * (kv_len - (q_len - 1) / 2) of the others
    chunks: int = 0       # the others: prefill chunks
    logits: int | None = None


def features(seqs: list[tuple[int, int]], decode_q: int = 1) -> Iteration:
    """The surrogate's features of `seqs`. Decode rows of decode_q > 1 tokens are a speculative verify
    step's: each of their positions reaches the LM head (sim.apps.serve.speculative), every other
    sequence's last token only."""
    T = nd = sd = 0
    pairs = 0.0
    for q, kv in seqs:
        T += q
        if q == decode_q:
            nd += 1
            sd += kv
        else:
            pairs += q * (kv - (q - 1) / 2)
    return Iteration(tuple(seqs), T, nd, sd, pairs, len(seqs) - nd, verify_logits(nd, len(seqs) - nd, decode_q))


def verify_logits(n_decode: int, others: int, decode_q: int) -> int | None:
    """LM-head rows of an iteration whose decode rows verify decode_q positions each (None: one per
    sequence, the plain step)."""
    return None if decode_q == 1 else n_decode * decode_q + others


def entry_features(entries) -> Iteration:
    """features() of a batch's (request, new tokens) entries, each sequence (q, computed + q), in one
    pass (the engine calls it every iteration)."""
    seqs: list[tuple[int, int]] = []
    add_seq = seqs.append
    T = nd = sd = 0
    pairs = 0.0
    for r, q in entries:
        kv = r.computed + q
        add_seq((q, kv))
        T += q
        if q == 1:
            nd += 1
            sd += kv
        else:
            pairs += q * (kv - (q - 1) / 2)
    return Iteration(tuple(seqs), T, nd, sd, pairs, len(seqs) - nd)

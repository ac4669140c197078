"""The running requests of a vLLM engine in their decode phase as a struct of numpy arrays (issue
30; V0: schedulers/vllm_v0.py, V1: schedulers/vllm_cohort.py, whose steps may carry admitted prompts
after the members): in a step where every running request decodes one token (the usual step), handing
out the tokens, finding who finished, growing KV blocks and costing the step are array operations
over the cohort, and per-request Python work is left to what changed (a request joining after its
prefill, one that finished, one that crossed into a new KV block).

While a request is a member its counters live here, not on its Request object: `computed`,
`generated`, `last_at` and `max_tbt` on the object are stale until `sync` writes them back (the
engine does before anything that reads them: a finish, the debug checks, the result), and
`dissolve` hands them back for good (the scheduler does before any other kind of step: a
preemption, a swap). KV blocks are written through to the object (`blocks`) as they grow, so the
pool's accounting never goes stale. Members are always the head of the scheduler's running list, in
its order, so the batch's entries come out in the order the per-request path would give them.
"""

from __future__ import annotations

import math
from itertools import repeat

import numpy as np

from sim.apps.serve.kvpool import BlockPool
from sim.apps.serve.schedulers.base import Request
from sim.apps.serve.stepcost import Iteration, entry_features

# held: blocks a member holds (its own and its share of cached units); room: the computed count from
# which its next token needs one more block, held * block_size - lookahead.
_COLUMNS = (("computed", np.int64), ("generated", np.int64), ("held", np.int64), ("room", np.int64),
            ("output", np.int64), ("last_at", float), ("max_tbt", float))


class DecodeCohort:
    def __init__(self, block_size: int = 1, lookahead: int = 0) -> None:
        self.block_size, self.lookahead = block_size, lookahead
        self.mixed = False   # members' previous token times may differ (some joined since the last step)
        self.reqs: list[Request] = []
        self.entries: list[tuple[Request, int]] = []   # (member, 1): a decode step's batch entries
        for name, dtype in _COLUMNS:
            setattr(self, name, np.zeros(0, dtype))

    def __len__(self) -> int:
        return len(self.reqs)

    def join(self, new: list[Request], unit_blocks: int) -> None:
        """Running requests past their prefill (one token pending) become members, at the tail."""
        if not new:
            return
        self.reqs += new
        self.entries += [(r, 1) for r in new]
        self.mixed = True
        held = [r.blocks + len(r.shared) * unit_blocks for r in new]
        cols = (("computed", [r.computed for r in new]), ("generated", [r.generated for r in new]), ("held", held),
                ("room", [h * self.block_size - self.lookahead for h in held]), ("output", [r.output for r in new]),
                ("last_at", [r.last_at for r in new]), ("max_tbt", [r.max_tbt for r in new]))
        for name, values in cols:
            a = getattr(self, name)
            setattr(self, name, np.concatenate((a, np.asarray(values, dtype=a.dtype))))

    def sync(self) -> None:
        """Write the members' counters back to their Request objects."""
        for r, c, g, la, mt in zip(self.reqs, self.computed.tolist(), self.generated.tolist(),
                                   self.last_at.tolist(), self.max_tbt.tolist()):
            r.computed, r.generated, r.last_at, r.max_tbt = c, g, la, mt

    def dissolve(self) -> None:
        """Every member back to its Request object; the cohort empty."""
        self.sync()
        self.__init__(self.block_size, self.lookahead)

    def grow(self, pool: BlockPool) -> bool:
        """Each member's block for its next token, in one allocation; False (nothing taken) when the
        pool cannot hold them all (the per-request path then preempts)."""
        full = self.computed >= self.room
        if not full.any():
            return True
        grow = np.flatnonzero(full)
        n = (self.computed[grow] + self.lookahead) // self.block_size + 1 - self.held[grow]   # Scheduler._grow
        if not pool.allocate(int(n.sum())):
            return False
        self.held[grow] += n
        self.room[grow] = self.held[grow] * self.block_size - self.lookahead
        reqs = self.reqs
        for j, k in zip(grow.tolist(), n.tolist()):
            reqs[j].blocks += k
        return True

    def features(self, rest: list[tuple[Request, int]] | None = None) -> Iteration:
        """The decode step's features (stepcost.features of its (1, computed + 1) sequences), then those
        of `rest`, entries after the members (stepcost.entry_features): the same sums in the same order,
        as the members add nothing to `pairs`."""
        kv = self.computed + 1
        n = len(kv)
        seqs = tuple(zip(repeat(1, n), kv.tolist()))
        if not rest:
            return Iteration(seqs, n, n, int(kv.sum()), 0.0, 0)
        it = entry_features(rest)
        return Iteration(seqs + it.seqs, n + it.tokens, n + it.n_decode, int(kv.sum()) + it.decode_kv, it.pairs,
                         it.chunks)

    def hand_out(self, now: float, gaps: dict[float, int]) -> list[Request]:
        """Every member's token emitted at `now`: counts, gaps (by the previous token's time, in the
        order the members first show one) and largest gaps. Returns the members that finished, in
        batch order, synced and no longer members."""
        self.computed += 1
        self.generated += 1
        la = self.last_at
        if not self.mixed:   # every member emitted at the last step: one gap
            t = float(la[0])
            gaps[t] = gaps.get(t, 0) + len(la)
            np.fmax(self.max_tbt, now - t, out=self.max_tbt)
        else:   # members that joined since the last step carry their own previous times, in runs
            starts = [0, *(np.flatnonzero(la[1:] != la[:-1]) + 1).tolist(), len(la)]
            times = la[starts[:-1]].tolist()
            for t, a, b in zip(times, starts, starts[1:]):
                gaps[t] = gaps.get(t, 0) + b - a
            # fmax: NaN (no gap yet) gives way, as `not gap <= max_tbt` does per request (gaps are finite)
            np.fmax(self.max_tbt, now - la, out=self.max_tbt)
        la[:] = now
        self.mixed = False
        finished = self.generated >= self.output
        if not finished.any():
            return []
        done = np.flatnonzero(finished).tolist()
        out = [self.reqs[j] for j in done]
        for r, j in zip(out, done):
            r.computed, r.generated, r.last_at, r.max_tbt = (int(self.computed[j]), int(self.generated[j]), now,
                                                             float(self.max_tbt[j]))
        for j in reversed(done):
            del self.reqs[j]
            del self.entries[j]
        keep = ~finished
        for name, _ in _COLUMNS:
            setattr(self, name, getattr(self, name)[keep])
        return out


def finite(now: float) -> bool:
    """A step that ends at a finite time (a cost out of any range leaves the cohort to the per-request path)."""
    return math.isfinite(now)

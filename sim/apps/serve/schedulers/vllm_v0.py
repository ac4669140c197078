"""vLLM V0's default scheduler (`kind: vllm-v0`): paged KV blocks allocated on demand; prefill
iterations first, then decodes; when a decode needs a block and none is free, the most recently
arrived running request is preempted (recompute: its blocks freed, it waits again at the front;
swap: its blocks moved to host memory over the link, swapped back in when room returns). Without
chunked prefill a prompt must fit one iteration's token budget.
"""

from __future__ import annotations

from collections import deque

from sim.apps.serve.schedulers.base import Batch, Scheduler


class VllmV0(Scheduler):
    whole_prompts = True
    decode_cohort = True
    run_ahead = True
    cohort_min = 8   # running requests from which decode steps run as a cohort (_cohort_step; measured)

    def schedule(self, now: float, more_coming: bool) -> Batch | None:
        batch = Batch([])
        if not self.swapped:
            self._prefills(batch, self.max_tokens)
            if batch.entries:
                return batch
        if self.cohort is not None:
            step = self._cohort_step()
            if step is not None:
                return step
        queue = deque(self.running)
        self.running = []
        # vLLM refuses a budget below max_num_seqs; here it is allowed (with a warning), and the budget
        # caps a decode step as it does Sarathi's: the decodes over it wait, running, for the next step.
        if not self._decodes(batch, queue, limit=self.max_tokens):
            self._swap_in(batch, self.max_tokens - len(batch.entries))
        return batch if batch.entries or batch.swap_blocks else None

    def _prefills(self, batch: Batch, budget: int, chunked: bool = False) -> int:
        """Admit waiting requests first come, first served, while tokens, sequences and blocks last."""
        while self.waiting and len(self.running) < self.max_seqs and budget > 0:
            r = self.waiting[0]
            fresh = r.blocks == 0
            if fresh and not self._admit(r):
                break
            q = r.pending if not chunked else min(r.pending, budget)
            if q > budget:
                if fresh:
                    self.free(r)
                break
            self.waiting.popleft()
            self.running.append(r)
            batch.entries.append((r, q))
            budget -= q
        return budget

    def _cohort_step(self) -> Batch | None:
        """The decode step over the cohort (sim.apps.serve.cohort): every running
        request one token, when none waits to swap in, each is past its prefill and the pool holds
        their new blocks. Else None, the cohort dissolved, and the per-request path decides."""
        c, running = self.cohort, len(self.running)
        # Small batches: the cohort's fixed cost per step outweighs a Python loop over a few requests;
        # a cohort forms from cohort_min running requests and dissolves below half of it. A cohort step
        # runs every member, so it cannot run more requests than the token budget.
        if running < (self.cohort_min // 2 if len(c) else self.cohort_min) or running > self.max_tokens:
            if len(c):
                c.dissolve()
            return None
        new = self.running[len(c):]
        caching = self.pool.caching
        if not self.swapped and (not new or all(
                r.generated and r.computed == r.prompt + r.generated - 1 and (r.published or not caching) for r in new)):
            c.join(new, self.pool.unit_blocks)
            if c.grow(self.pool):
                return Batch(list(c.entries), cohort=c)
        if len(c):
            c.dissolve()
        return None

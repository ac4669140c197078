"""vLLM V0's chunked-prefill scheduler (`kind: sarathi`; Sarathi-Serve, OSDI 2024): decodes
first, then prefill chunks, within a token budget per iteration.
"""

from __future__ import annotations

from collections import deque

from sim.apps.serve.schedulers.base import Batch
from sim.apps.serve.schedulers.vllm_v0 import VllmV0


class Sarathi(VllmV0):
    decode_cohort = False   # decodes share steps with prefill chunks
    whole_prompts = False   # prompts run in chunks

    def schedule(self, now: float, more_coming: bool) -> Batch | None:
        batch = Batch([])
        budget = self.max_tokens
        decoding = deque(r for r in self.running if r.pending == 1 and r.generated)
        prefilling = [r for r in self.running if not (r.pending == 1 and r.generated)]
        self.running = []
        # Decodes first, one token each, as many as the budget takes (vLLM V0's chunked scheduler stops
        # its running queue when the budget is spent; the rest wait, still running, for the next step).
        preempted = self._decodes(batch, decoding, limit=budget)
        budget -= len(batch.entries)
        for r in prefilling:   # partial prefills continue, oldest first
            q = min(r.pending, budget)
            self.running.append(r)
            if q > 0:
                batch.entries.append((r, q))
                budget -= q
        if not preempted:
            budget = self._swap_in(batch, budget)
        if not self.swapped:
            self._prefills(batch, budget, chunked=True)
        return batch if batch.entries or batch.swap_blocks else None

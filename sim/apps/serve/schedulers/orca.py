"""Iteration-level scheduling (`kind: orca`; Orca, OSDI 2022): new prompts join running decodes
every iteration; each request reserves KV for max_model_len tokens.
"""

from __future__ import annotations

from sim.apps.serve.schedulers.base import Batch, Request
from sim.apps.serve.schedulers.vllm_v0 import VllmV0


class Orca(VllmV0):
    """Iteration-level batching without paging: the pool's blocks are single tokens and a
    request reserves max_model_len of them when admitted (a longer request is refused by `add`)."""

    decode_cohort = False   # its own schedule: no cohort steps
    run_ahead = False       # nor decode run-ahead

    def _admit(self, r: Request) -> bool:
        need = self.max_model_len
        if not self.pool.allocate(need):
            return False
        r.blocks = need
        return True

    def fits_ever(self, r: Request) -> bool:
        # A reservation of max_model_len tokens, and (Orca does not chunk) the whole prompt in one
        # iteration's budget: a longer prompt was left waiting forever, and every request behind it.
        return self.max_model_len <= self.pool.total and (self.prompt_limit is None or r.prompt <= self.prompt_limit)

    def refusal(self, r: Request) -> str | None:
        if super().refusal(r) is None:
            return None
        if self.max_model_len > self.pool.total:
            return "max_model_len tokens of KV (Orca reserves them per request) over the pool"
        if self.prompt_limit is not None and r.prompt > self.prompt_limit:
            return "prompt longer than max_num_batched_tokens (Orca does not chunk)"
        return f"prompt + output longer than max_model_len {self.max_model_len}"

    def _grow(self, r: Request, tokens: int) -> int:
        return 0

    def schedule(self, now: float, more_coming: bool) -> Batch | None:
        batch = Batch([(r, r.pending) for r in self.running])
        # the running decodes' tokens count against the iteration's token budget, as in vLLM:
        # joining prompts get what is left (a full budget let a big batch run over it)
        self._prefills(batch, self.max_tokens - sum(q for _, q in batch.entries))
        return batch if batch.entries else None

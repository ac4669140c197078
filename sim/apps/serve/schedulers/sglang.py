"""SGLang's scheduler (`kind: sglang`), as sgl-project/sglang schedules by default
(python/sglang/srt/managers/scheduler.py `get_next_batch_to_run`, `get_new_batch_prefill`;
managers/schedule_policy.py `PrefillAdder`; server_args.py `enable_mixed_chunk` False):

- A step is EITHER a prefill (extend) batch OR a decode batch, never both: mixing running decodes into
  a prefill batch (`mix_with_running`) happens only with --enable-mixed-chunk, off by default.
- Prefill first: `get_next_batch_to_run` builds a new prefill batch whenever one can be formed (the
  chunked request continues first, then waiting requests in order while `chunked_prefill_size` tokens
  last, the last one cut into a chunk); only when none can be formed does the running batch decode.
  So a burst of arrivals stalls every running request's decode until the burst is prefilled, and the
  requests of one burst start decoding, and finish, together.
- KV per token on demand, preemption by recompute: the V1 block mechanics (schedulers/vllm.py) stand in
  for SGLang's token pool and `retract_decode`.

Modelled away: the admission reserve of `new_token_ratio` x the running requests' remaining outputs
(it matters when the KV pool is nearly full), radix-tree prefix matching (prefix caching works as in
`kind: vllm`), schedule policies other than first come first served (`lpm` reorders by prefix hits only).
"""

from __future__ import annotations

from sim.apps.serve.schedulers.base import Batch
from sim.apps.serve.schedulers.vllm import VllmV1
from sim.apps.serve.schedulers.vllm_cohort import cohort_step


class Sglang(VllmV1):
    # Decode steps as V1's cohort pass without its waiting pass (schedulers/vllm_cohort.py). The members
    # are the running list's head, one token pending each, so the prefill pass, which passes over such
    # requests, starts after them: they are never preempted by it either, as its preemptions pop the
    # running list's tail no further than the prefill asking for blocks, which comes after them.
    decode_cohort = True

    def schedule(self, now: float, more_coming: bool) -> Batch | None:
        c = self.cohort
        prefill = Batch([])
        budget, preempted = self._running(prefill, prefills_only=True,   # the chunked request first
                                          start=len(c) if c is not None else 0)
        if not preempted:
            self._waiting(prefill, budget)
        if prefill.entries:
            return prefill
        if c is not None:
            step = cohort_step(self, waiting=False)
            if step is not None:
                return step
        decode = Batch([])
        self._running(decode)
        return decode if decode.entries else None

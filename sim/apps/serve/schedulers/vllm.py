"""vLLM V1's scheduler (`kind: vllm`), as vLLM 0.19 schedules (vllm/v1/core/sched/scheduler.py,
Scheduler.schedule; vllm/v1/core/kv_cache_manager.py, allocate_slots and free; vllm/config/scheduler.py):

- No prefill or decode phase: every request has computed tokens catching up with its tokens
  (prompt + generated). One token budget (max_num_batched_tokens) per step.
- RUNNING first, in running-queue order: each gets min(its pending tokens, the budget left); a
  partial prefill continues in chunks (long_prefill_token_threshold is 0 by default: no cap). Under
  speculative decoding a decode spends 1 + k of the budget (its spec tokens, cut to what is left).
  KV blocks are allocated for the tokens scheduled this step only (allocate_slots(request,
  num_new_tokens)), not for the whole prompt.
- When a running request cannot get its blocks, the LAST request of the running queue is preempted
  (FCFS: `self.running.pop()`), repeatedly, until the blocks come or the request itself was the
  one popped (then the running pass stops). A preempted request frees its blocks (in reverse
  order, so its tail is evicted first), gets num_computed_tokens = 0 and goes to the FRONT of the
  waiting queue (`prepend_request`). There is no swapping in V1.
- WAITING only if nothing was preempted this step, first come first served, while the budget
  lasts and running < max_num_seqs. A request with nothing computed first looks up its longest
  prefix-cache hit (at most num_tokens - 1 tokens). Admission gate (scheduler_reserve_full_isl,
  default True in 0.19): the WHOLE current sequence (prompt + generated so far, less the hit) must
  fit the free blocks, though only this step's chunk is allocated. When it does not, the waiting
  pass stops; waiting requests never preempt anyone. 0.19 has no watermark.
- Prefix caching: a block is cached (hashed) as soon as it is full, at the step that fills it,
  prompt or generated tokens alike; a freed cached block stays in the free queue, evictable, and
  is hit by the next request with that prefix, the preempted request itself included.

Here the prompt's hash units come from the trace (sim.apps.serve.traces); units past them (the
prompt's tail and generated tokens) get keys private to the request. Modelled away: async
scheduling (a step scheduled while the previous one runs), encoder inputs, KV connectors, the
priority policy.
"""

from __future__ import annotations

from sim.apps.serve.kvpool import BlockPool, LruBlockPool
from sim.apps.serve.schedulers.base import Batch, Request, Scheduler
from sim.apps.serve.schedulers.vllm_cohort import cohort_step, grow_members
from sim.apps.serve.spec import SchedulerConfig


class VllmV1(Scheduler):
    pool_class = LruBlockPool   # freed cached blocks evicted least recently used first, as vLLM's free queue
    decode_cohort = True
    run_ahead = True
    cohort_min = 8   # running requests from which pure decode steps run as a cohort (vllm_cohort.py; measured)

    def __init__(self, cfg: SchedulerConfig, pool: BlockPool, lookahead: int = 0, prompt_limit: int | None = None):
        super().__init__(cfg, pool, lookahead, None)    # chunked prefill: no prompt limit per step
        self.watermark = 0
        self.unit_tokens = pool.unit_blocks * pool.block_size
        self.cached: dict[int, int] = {}                 # request -> leading units already cached

    def fits_ever(self, r: Request) -> bool:
        capacity = self.pool.total - self.pool.null_blocks
        return self.pool.blocks_for(r.prompt + r.output + self.lookahead) <= capacity

    def schedule(self, now: float, more_coming: bool) -> Batch | None:
        if self.cohort is not None:
            step = cohort_step(self)
            if step is not None:
                return step
        batch = Batch([])
        budget, preempted = self._running(batch)
        if not preempted:
            self._waiting(batch, budget)
        return batch if batch.entries else None

    def _running(self, batch: Batch, prefills_only: bool = False, start: int = 0) -> tuple[int, bool]:
        """`prefills_only`: pass over decoding requests (one token pending), for a scheduler that runs
        prefill batches apart from decodes (schedulers/sglang.py), from running[start] (those before
        it are known to decode)."""
        budget, running, preempted = self.max_tokens, self.running, False
        pool, entries, cached, unit_tokens = self.pool, batch.entries, self.cached, self.unit_tokens
        bs, ub, look, caching = pool.block_size, pool.unit_blocks, self.lookahead, pool.caching
        i = start
        while i < len(running) and budget > 0:
            r = running[i]
            q = r.prompt + r.generated - r.computed
            if prefills_only and q <= 1:
                i += 1
                continue
            if q > budget:
                q = budget
            end = r.computed + q
            need = -(-(end + look) // bs) - r.blocks - len(r.shared) * ub    # allocate_slots(r, q)
            if need > 0:
                while not pool.allocate(need):
                    victim = running.pop()                 # FCFS: the last of the running queue
                    self._preempt(victim, batch)
                    preempted = True
                    if victim is r:
                        return budget, preempted           # no request left to preempt: stop
                r.blocks += need
            if caching and end // unit_tokens > cached[r.idx]:
                self._cache(r, end)
            entries.append((r, q))
            # V1 schedules a decode's spec tokens with it, against the same budget (num_tokens_with_spec -
            # num_computed_tokens, cut to the budget left): 1 + k under speculative decoding
            budget -= min(budget, q + look) if look and q == 1 and r.generated else q
            i += 1
        return budget, preempted

    def _waiting(self, batch: Batch, budget: int) -> None:
        pool, unit = self.pool, self.pool.unit_blocks
        while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            r = self.waiting[0]
            tokens = r.prompt + r.generated
            hits = self._hits(r, tokens) if r.computed == 0 else ()
            computed = max(r.computed, len(hits) * self.unit_tokens)
            q = min(tokens - computed, budget)
            if q < tokens - computed and not self._splits(r):
                return                                   # the prompt runs whole or waits (schedulers/trtllm.py)
            # allocate_slots(..., full_sequence_must_fit=True): the whole sequence must fit what is free
            # (hit blocks no one holds are in the free queue, so they count against it too).
            full = pool.blocks_for(tokens) - len(hits) * unit
            need = pool.blocks_for(computed + q + (self.lookahead if r.computed else 0)) - len(hits) * unit
            if max(full, need) + (pool.idle_blocks(hits) if hits else 0) > pool.available or not self._admits(r):
                return
            pool.hold(hits)
            pool.allocate(need)
            self.waiting.popleft()
            r.shared, r.blocks, r.computed = list(hits), need, computed
            self.cached[r.idx] = len(hits)
            if hits and not r.preemptions:
                r.prefix_hit = computed                  # num_cached_tokens: the first admission's hit
            self.running.append(r)
            self._cache(r, computed + q)
            batch.entries.append((r, q))
            budget -= q

    def _admits(self, r: Request) -> bool:
        """A further admission rule of a subclass (schedulers/trtllm.py); V1 has none."""
        return True

    def _splits(self, r: Request) -> bool:
        """Whether r's prompt may be cut to the budget left (chunked prefill); V1 always chunks."""
        return True

    def _key(self, r: Request, j: int) -> object:
        """Unit j's cache key: the trace's hash over the prompt, then a key of r's own."""
        return r.hashes[j] if j < len(r.hashes) and (j + 1) * self.unit_tokens <= r.prompt else (r.idx, j)

    def _hits(self, r: Request, tokens: int) -> tuple:
        if not self.pool.caching:
            return ()
        refs, out = self.pool.refs, []
        for j in range((tokens - 1) // self.unit_tokens):
            k = self._key(r, j)
            if k not in refs:
                break
            out.append(k)
        return tuple(out)

    def _cache(self, r: Request, tokens: int) -> None:
        """Units that `tokens` fills become cached blocks r holds (kv_cache_manager.cache_blocks)."""
        if not self.pool.caching:
            return
        full = min(tokens, r.prompt + r.generated) // self.unit_tokens
        done = self.cached.get(r.idx, 0)
        for j in range(done, full):
            k = self._key(r, j)
            if self.pool.publish(k):       # already cached by another request: r keeps its own copy
                r.shared.append(k)
                r.blocks -= self.pool.unit_blocks
        if full > done:
            self.cached[r.idx] = full

    def decode_event(self, r: Request) -> int:
        at = super().decode_event(r)   # or, with prefix caching, the token that fills its next unit
        return min(at, (self.cached[r.idx] + 1) * self.unit_tokens - 1) if self.pool.caching else at

    def regrow(self, due: list[tuple[Request, int]]) -> None:
        """_running's pure decode step for `due`: each its block, then the unit its token fills cached."""
        pool, cached = self.pool, self.cached
        for r, need in due:
            if need > 0:
                pool.allocate(need)
                r.blocks += need
            end = r.computed + 1
            if pool.caching and end // self.unit_tokens > cached[r.idx]:
                self._cache(r, end)

    def cohort_regrow(self, cohort) -> bool:
        return grow_members(self, cohort)

    def publish(self, r: Request) -> None:
        r.published = True                  # cached as blocks fill, in _cache

    def free(self, r: Request) -> None:
        # kv_cache_manager.free: blocks in reverse order, so the request's tail is evicted first.
        self.pool.release(r.blocks)
        self.pool.drop(reversed(r.shared))
        r.blocks, r.shared = 0, []
        self.cached.pop(r.idx, None)

    def _preempt(self, victim: Request, batch: Batch) -> None:
        self.preemptions += 1
        victim.preemptions += 1
        batch.evicted.append(victim.idx)   # the Chrome trace's mark (a serving trial: none under V1 or SGLang)
        self.free(victim)
        victim.computed = 0
        self.waiting.appendleft(victim)

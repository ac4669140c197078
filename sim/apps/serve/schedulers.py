"""Iteration schedulers: which sequences run in the next engine iteration, and how
many new tokens of each.

  static   FasterTransformer-style: a fixed batch, padded to its longest prompt, runs
           until its longest output is done; the next batch waits.
  orca     iteration-level scheduling (Orca, OSDI 2022): new prompts join running
           decodes every iteration; each request reserves KV for max_model_len tokens.
  vllm-v0  vLLM V0's default scheduler: paged KV blocks allocated on demand; prefill
           iterations first, then decodes; when a decode needs a block and none is
           free, the most recently arrived running request is preempted (recompute:
           its blocks freed, it waits again at the front; swap: its blocks moved to
           host memory over the link, swapped back in when room returns).
  sarathi  vLLM V0's chunked-prefill scheduler (Sarathi-Serve, OSDI 2024): decodes
           first, then prefill chunks, within a token budget per iteration.

vLLM V1's scheduler (`vllm`, the default) is sim.apps.serve.schedulers_v1.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sim.apps.serve.kvpool import BlockPool


class Request:
    __slots__ = ("idx", "arrival", "prompt", "output", "hashes", "computed", "generated", "blocks", "shared",
                 "preemptions", "prefix_hit", "sched_at", "first_at", "last_at", "swapped", "published")

    def __init__(self, idx: int, arrival: float, prompt: int, output: int, hashes: tuple[int, ...] = ()):
        self.idx, self.arrival, self.prompt, self.output, self.hashes = idx, arrival, prompt, output, hashes
        self.computed = self.generated = self.blocks = self.preemptions = self.prefix_hit = self.swapped = 0
        self.shared: tuple[int, ...] = ()
        self.sched_at = self.first_at = self.last_at = -1.0
        self.published = False

    @property
    def pending(self) -> int:
        """Tokens whose KV is still to compute before the next token comes out."""
        return self.prompt + self.generated - self.computed


@dataclass
class Batch:
    entries: list[tuple[Request, int]]                     # (request, new tokens this iteration)
    padded: list[tuple[int, int]] | None = None           # static batches: the sequences actually run
    swap_blocks: int = 0                                  # blocks moved over the host link
    preempted: list[tuple[int, int, int]] = field(default_factory=list)   # swapped out: (request, blocks, tokens)


class Scheduler:
    """Shared state: the waiting queue, the running list, the KV pool."""

    def __init__(self, cfg, pool: BlockPool, lookahead: int = 0, prompt_limit: int | None = None):
        self.cfg, self.pool, self.lookahead = cfg, pool, lookahead
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self.max_seqs = getattr(cfg, "max_num_seqs", 1 << 30)
        self.max_tokens = getattr(cfg, "max_num_batched_tokens", None) or (1 << 62)
        self.watermark = int(getattr(cfg, "watermark", 0.0) * pool.total)
        self.prompt_limit = prompt_limit
        self.max_model_len: int | None = None   # set by the engine: longer requests are refused, as vLLM does
        self.preemptions = 0
        self.swapped_out_blocks = self.swapped_in_blocks = 0

    def busy(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def fits_ever(self, r: Request) -> bool:
        # Without chunking a prompt (and, after a recompute preemption, prompt + output so far)
        # must fit one iteration's token budget.
        if self.prompt_limit is not None and r.prompt + r.output > self.prompt_limit:
            return False
        return self.pool.blocks_for(r.prompt + r.output + self.lookahead) <= self.pool.total - self.watermark

    def add(self, r: Request) -> bool:
        if self.refusal(r) is not None:
            return False
        self.waiting.append(r)
        return True

    def refusal(self, r: Request) -> str | None:
        """Why r can never be scheduled (it is rejected on arrival, never left waiting), or None."""
        if self.max_model_len is not None and r.prompt + r.output > self.max_model_len:
            return "longer than max_model_len"   # vLLM answers "maximum context length is ..."
        if self.fits_ever(r):
            return None
        if self.prompt_limit is not None and r.prompt + r.output > self.prompt_limit:
            return "longer than max_num_batched_tokens (no chunked prefill)"
        return "its KV cache never fits the pool"

    def timer(self, now: float, more_coming: bool) -> float | None:
        return None

    # -- KV accounting -----------------------------------------------------------
    def _admit(self, r: Request) -> bool:
        """Blocks for the whole of r's pending prefill (and its prefix-cache hits), if the watermark allows."""
        pool = self.pool
        unit_tokens = pool.unit_blocks * pool.block_size
        usable = (r.prompt - 1) // unit_tokens if r.computed == 0 else 0   # at least one token computes
        hits = pool.match(r.hashes[:usable]) if usable else 0
        need = pool.blocks_for(r.prompt + r.generated + self.lookahead) - hits * pool.unit_blocks
        # Hold the hits before allocating: an allocation evicts idle cached units, and must not evict these.
        pool.hold(r.hashes[:hits])
        if pool.available - need < self.watermark or not pool.allocate(need):
            pool.drop(r.hashes[:hits])
            return False
        if hits:
            r.shared, r.computed = r.hashes[:hits], hits * unit_tokens
            r.prefix_hit = max(r.prefix_hit, r.computed)
        r.blocks = need
        return True

    def publish(self, r: Request) -> None:
        """r's prompt is computed: its whole prefix units become cached prefixes."""
        r.published = True
        unit = self.pool.unit_blocks * self.pool.block_size
        for h in r.hashes[len(r.shared): r.prompt // unit]:
            if self.pool.publish(h):
                r.shared += (h,)
                r.blocks -= self.pool.unit_blocks

    def _grow(self, r: Request, tokens: int) -> int:
        """Blocks r still needs to hold `tokens` tokens (plus lookahead slots)."""
        return self.pool.blocks_for(tokens + self.lookahead) - r.blocks - len(r.shared) * self.pool.unit_blocks

    def free(self, r: Request) -> None:
        self.pool.release(r.blocks)
        self.pool.drop(r.shared)
        r.blocks, r.shared = 0, ()

    def finish(self, r: Request) -> None:
        self.running.remove(r)
        self.free(r)

    def _preempt(self, victim: Request, batch: Batch) -> None:
        self.preemptions += 1
        victim.preemptions += 1
        if getattr(self.cfg, "preemption", "recompute") == "swap":
            n = victim.blocks + len(victim.shared) * self.pool.unit_blocks
            self.free(victim)
            victim.swapped = n
            self.swapped_out_blocks += n
            batch.swap_blocks += n
            batch.preempted.append((victim.idx, n, victim.computed))
            self.swapped.append(victim)
        else:
            self.free(victim)
            victim.computed, victim.published = 0, False
            self.waiting.appendleft(victim)

    def _decodes(self, batch: Batch, queue: deque[Request]) -> bool:
        """Each running decode gets its next block, preempting from the back when none is free.
        Returns whether anything was preempted."""
        preempted = False
        while queue:
            r = queue.popleft()
            need = self._grow(r, r.computed + 1)
            while need > 0 and not self.pool.allocate(need):
                preempted = True
                if queue:
                    self._preempt(queue.pop(), batch)
                else:
                    self._preempt(r, batch)
                    break
            else:
                r.blocks += max(need, 0)
                self.running.append(r)
                batch.entries.append((r, 1))
        return preempted

    def _swap_in(self, batch: Batch) -> None:
        while self.swapped and len(self.running) < self.max_seqs:
            r = self.swapped[0]
            if self.pool.available - r.swapped < self.watermark or not self.pool.allocate(r.swapped):
                return
            self.swapped.popleft()
            r.blocks, r.swapped = r.swapped, 0
            self.swapped_in_blocks += r.blocks
            batch.swap_blocks += r.blocks
            self.running.append(r)
            batch.entries.append((r, r.pending))


class Vllm(Scheduler):
    def schedule(self, now: float, more_coming: bool) -> Batch | None:
        batch = Batch([])
        if not self.swapped:
            self._prefills(batch, self.max_tokens)
            if batch.entries:
                return batch
        queue = deque(self.running)
        self.running = []
        if not self._decodes(batch, queue):
            self._swap_in(batch)
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


class Sarathi(Vllm):
    def schedule(self, now: float, more_coming: bool) -> Batch | None:
        batch = Batch([])
        budget = self.max_tokens
        decoding = deque(r for r in self.running if r.pending == 1 and r.generated)
        prefilling = [r for r in self.running if not (r.pending == 1 and r.generated)]
        self.running = []
        preempted = self._decodes(batch, decoding)
        budget -= len(batch.entries)
        for r in prefilling:   # partial prefills continue, oldest first
            q = min(r.pending, budget)
            self.running.append(r)
            if q > 0:
                batch.entries.append((r, q))
                budget -= q
        if not preempted:
            self._swap_in(batch)
        if not self.swapped:
            self._prefills(batch, budget, chunked=True)
        return batch if batch.entries or batch.swap_blocks else None


class Orca(Vllm):
    """Iteration-level batching without paging: the pool's blocks are single tokens and a
    request reserves max_model_len of them when admitted (a longer request is refused by `add`)."""

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
        return "longer than max_model_len"

    def _grow(self, r: Request, tokens: int) -> int:
        return 0

    def schedule(self, now: float, more_coming: bool) -> Batch | None:
        batch = Batch([(r, r.pending) for r in self.running])
        self._prefills(batch, self.max_tokens)
        return batch if batch.entries else None


class Static(Scheduler):
    """A batch holds its KV for its longest prompt + longest output for its whole run."""

    def __init__(self, cfg, pool: BlockPool, lookahead: int = 0, prompt_limit: int | None = None):
        super().__init__(cfg, pool, lookahead, prompt_limit)
        self.step = 0
        self.shape = (0, 0)

    def timer(self, now: float, more_coming: bool) -> float | None:
        if self.waiting and not self.running and more_coming:
            return self.waiting[0].arrival + self.cfg.max_wait_s
        return None

    def schedule(self, now: float, more_coming: bool) -> Batch | None:
        if not self.running:
            full = len(self.waiting) >= self.cfg.batch_size
            late = self.waiting and now >= self.waiting[0].arrival + self.cfg.max_wait_s
            if not (full or late or (self.waiting and not more_coming)):
                return None
            self._form()
            if not self.running:
                return None
        P, O = self.shape
        b = len(self.running)
        live = [r for r in self.running if r.generated < r.output]
        if self.step == 0:
            self.step = 1
            return Batch([(r, r.pending) for r in live], padded=[(P, P)] * b)
        kv = P + self.step
        self.step += 1
        return Batch([(r, 1) for r in live], padded=[(1, kv)] * b)

    def _form(self) -> None:
        take: list[Request] = []
        P = O = 0
        while self.waiting and len(take) < self.cfg.batch_size:
            r = self.waiting[0]
            p, o = max(P, r.prompt), max(O, r.output)
            if self.pool.blocks_for(p + o) * (len(take) + 1) > self.pool.total:
                break
            take.append(self.waiting.popleft())
            P, O = p, o
        self.running, self.shape, self.step = take, (P, O), 0

    def finish(self, r: Request) -> None:
        if all(x.generated >= x.output for x in self.running):
            self.running = []


SCHEDULERS = {"vllm-v0": Vllm, "sarathi": Sarathi, "orca": Orca, "static": Static}

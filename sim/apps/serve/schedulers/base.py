"""What every iteration scheduler shares: the request, the batch it returns, and the
scheduler's state (the waiting queue, the running list, the KV pool) with the KV accounting
the paged schedulers build on. Each scheduler is a module of its own beside this one,
found by its settings' class (sim.apps.serve.schedulers.SCHEDULERS):

  static   (static.py)  FasterTransformer-style fixed batches
  orca     (orca.py)    iteration-level scheduling (Orca, OSDI 2022)
  vllm-v0  (vllm_v0.py) vLLM V0's default scheduler
  sarathi  (sarathi.py) vLLM V0's chunked-prefill scheduler (Sarathi-Serve, OSDI 2024)
  vllm     (vllm.py)    vLLM V1's scheduler, the default
  sglang   (sglang.py)  SGLang's: prefill batches first, apart from decodes
  trtllm   (trtllm.py)  TensorRT-LLM's GUARANTEED_NO_EVICT admission over vllm.py's batching
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from dataclasses import dataclass, field
from typing import Any

from sim.apps.serve.kvpool import BlockPool
from sim.apps.serve.spec import SchedulerConfig


class Request:
    __slots__ = ("idx", "arrival", "prompt", "output", "hashes", "computed", "generated", "blocks", "shared",
                 "preemptions", "prefix_hit", "sched_at", "first_at", "last_at", "swapped", "published", "max_tbt")

    def __init__(self, idx: int, arrival: float, prompt: int, output: int, hashes: tuple[int, ...] = ()):
        self.idx, self.arrival, self.prompt, self.output, self.hashes = idx, arrival, prompt, output, hashes
        self.computed = self.generated = self.blocks = self.preemptions = self.prefix_hit = self.swapped = 0
        self.shared: tuple[int, ...] = ()
        self.sched_at = self.first_at = self.last_at = -1.0
        self.max_tbt = float("nan")   # largest gap between its tokens so far (the engine records it at the end)
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
    evicted: list[int] = field(default_factory=list)      # requests preempted for this iteration, either way
    cohort: Any = None   # a decode step of a sim.apps.serve.cohort.DecodeCohort: its members, one token each


class Scheduler:
    """Shared state: the waiting queue, the running list, the KV pool."""

    # The pool it keeps its KV in, and whether a prompt must fit one iteration's token budget (no
    # chunked prefill: the engine passes that budget as `prompt_limit`).
    pool_class: type[BlockPool] = BlockPool
    whole_prompts = False
    # True runs the per-request paths written before issue 30 (scheduler and engine hand-out), which
    # tests/test_serve_fastpath.py compares the fast paths against on random streams.
    reference = False
    # Whether this scheduler's decode steps may run as a DecodeCohort (sim.apps.serve.cohort), which the
    # engine then sets in `cohort`; only a scheduler that builds cohort steps says so (vllm_v0.py, vllm.py,
    # and sglang.py and trtllm.py through V1's pass).
    decode_cohort = False
    cohort: Any = None
    # Whether a run of pure decode steps may be taken at once (sim.apps.serve.runahead): a scheduler whose
    # step, when every running request decodes and nothing waits, only grows blocks (`regrow`) says so.
    run_ahead = False

    def __init__(self, cfg: SchedulerConfig, pool: BlockPool, lookahead: int = 0, prompt_limit: int | None = None):
        self.cfg, self.pool, self.lookahead = cfg, pool, lookahead
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self.max_seqs = cfg.max_seqs
        self.max_tokens = cfg.token_budget or (1 << 62)
        self.watermark = int(cfg.reserve_share * pool.total)
        self.prompt_limit = prompt_limit
        self.max_model_len: int | None = None   # set by the engine: longer requests are refused, as vLLM does
        self.max_prompt: int | None = None      # set by the engine where the kind placed a block for its prompts
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
        placed = self.max_prompt is not None   # a block the kind placed (offload): its prompt_len and gen_len
        if placed and r.prompt > self.max_prompt:
            return "prompt longer than the placed block's prompt_len"
        if self.max_model_len is not None and r.prompt + r.output > self.max_model_len:
            # vLLM answers "maximum context length is ..."
            # the limit named (a serving trial read "longer than max_model_len" without it)
            return ("longer than the placed block's prompt_len + gen_len" if placed
                    else f"prompt + output longer than max_model_len {self.max_model_len}")
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

    def runs_ahead(self) -> bool:
        return self.run_ahead and not self.reference and type(self)._grow is Scheduler._grow

    def decode_event(self, r: Request) -> int:
        """r's computed tokens at which its next decode step makes the scheduler act on it: a new block."""
        return (r.blocks + len(r.shared) * self.pool.unit_blocks) * self.pool.block_size - self.lookahead

    def decode_need(self, r: Request, computed: int) -> int:
        """Blocks r lacks to decode the token after `computed` (_decodes; VllmV1._running's is the same)."""
        pool = self.pool
        return (computed + self.lookahead) // pool.block_size + 1 - r.blocks - len(r.shared) * pool.unit_blocks

    def regrow(self, due: list[tuple[Request, int]]) -> None:
        """A pure decode step's blocks for the running requests `due` (each with its decode_need; the
        others need none), the pool holding them all: _decodes' one allocation."""
        self.pool.allocate(sum(n for _, n in due if n > 0))
        for r, n in due:
            if n > 0:
                r.blocks += n

    def cohort_regrow(self, cohort: Any) -> bool:
        """A decode cohort step's scheduling at the cohort's tick (vllm_v0.py's _cohort_step): the members
        due a block get it, in one allocation; False (nothing taken) when the pool cannot hold them."""
        return cohort.grow(self.pool)

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
        batch.evicted.append(victim.idx)
        if self.cfg.swaps:
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

    def _decodes(self, batch: Batch, queue: deque[Request], limit: int | None = None) -> bool:
        """Each running decode gets its next block, preempting from the back when none is free.
        Returns whether anything was preempted. At most `limit` decodes are scheduled (the token
        budget left, one token each); the rest stay running, unscheduled this iteration, as vLLM V0's
        _schedule_running stops when the budget is spent (and preempts from the back of the whole
        running queue, the unscheduled first). When the pool holds every block the scheduled decodes
        need (the usual step) they are taken in one allocation: the same blocks, evictions and peak as
        one by one (allocations only shrink what is available), without the preemption walk."""
        if not self.reference and type(self)._grow is Scheduler._grow:
            head = queue if limit is None or limit >= len(queue) else list(islice(queue, limit))
            bs, ub, look = self.pool.block_size, self.pool.unit_blocks, self.lookahead
            needs = [(r.computed + look) // bs + 1 - r.blocks - len(r.shared) * ub for r in head]
            total = sum(n for n in needs if n > 0)
            if self.pool.allocate(total):
                for r, n in zip(head, needs):
                    if n > 0:
                        r.blocks += n
                self.running.extend(queue)
                batch.entries.extend([(r, 1) for r in head])
                queue.clear()
                return False
        return self._decodes_reference(batch, queue, limit)

    def _decodes_reference(self, batch: Batch, queue: deque[Request], limit: int | None = None) -> bool:
        """_decodes one request at a time, preempting as it goes (as written before issue 30)."""
        preempted, scheduled = False, 0
        while queue and (limit is None or scheduled < limit):
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
                scheduled += 1
        self.running.extend(queue)   # over the budget: running, not scheduled this iteration
        queue.clear()
        return preempted

    def _swap_in(self, batch: Batch, budget: int) -> int:
        """Swapped requests back in, oldest first, while sequences, blocks and the token budget last;
        the budget left. vLLM V0's _schedule_swapped stops at the first that the budget cannot take
        (budget.can_schedule), in the default scheduler and the chunked one alike."""
        while self.swapped and len(self.running) < self.max_seqs and self.swapped[0].pending <= budget:
            r = self.swapped[0]
            # The blocks swapped out come back, and the token it computes now may open one more
            # (vLLM V0's _schedule_swapped: _swap_in, then _append_slots).
            grow = max(self.pool.blocks_for(r.computed + r.pending + self.lookahead) - r.swapped, 0)
            need = r.swapped + grow
            if self.pool.available - need < self.watermark or not self.pool.allocate(need):
                break
            self.swapped.popleft()
            self.swapped_in_blocks += r.swapped
            batch.swap_blocks += r.swapped
            r.blocks, r.swapped = need, 0
            self.running.append(r)
            batch.entries.append((r, r.pending))
            budget -= r.pending
        return budget

"""FasterTransformer-style static batching (`kind: static`): a fixed batch, padded to its longest
prompt, runs until its longest output is done; the next batch waits. Its size is `batch_size`, or on a
kind that places its own KV (offload: FlexGen's block) that block (sim.apps.serve.instance).
"""

from __future__ import annotations

from sim.apps.serve.kvpool import BlockPool
from sim.apps.serve.schedulers.base import Batch, Request, Scheduler
from sim.apps.serve.spec import SchedulerConfig


class Static(Scheduler):
    """A batch holds its KV for its longest prompt + longest output for its whole run."""

    def __init__(self, cfg: SchedulerConfig, pool: BlockPool, lookahead: int = 0, prompt_limit: int | None = None):
        super().__init__(cfg, pool, lookahead, prompt_limit)
        self.step = 0
        self.shape = (0, 0)

    def timer(self, now: float, more_coming: bool) -> float | None:
        if self.waiting and not self.running and more_coming:
            return self.waiting[0].arrival + self.cfg.max_wait_s
        return None

    def schedule(self, now: float, more_coming: bool) -> Batch | None:
        if not self.running:
            full = len(self.waiting) >= self.max_seqs
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
        while self.waiting and len(take) < self.max_seqs:
            r = self.waiting[0]
            p, o = max(P, r.prompt), max(O, r.output)
            if self.pool.blocks_for(p + o) * (len(take) + 1) > self.pool.total:
                break
            take.append(self.waiting.popleft())
            P, O = p, o
        per = self.pool.blocks_for(P + O)
        if take and self.pool.allocate(per * len(take)):   # checked above: it fits
            for r in take:
                r.blocks = per
        self.running, self.shape, self.step = take, (P, O), 0

    def finish(self, r: Request) -> None:
        if all(x.generated >= x.output for x in self.running):
            for x in self.running:
                self.free(x)
            self.running = []

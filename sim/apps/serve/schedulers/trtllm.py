"""TensorRT-LLM's scheduler (`kind: trtllm`) as its PyTorch backend schedules by default
(tensorrt_llm/_torch/pyexecutor/scheduler.py: BindCapacityScheduler / GuaranteedNoEvictScheduler,
`capacity_scheduler_policy` GUARANTEED_NO_EVICT in tensorrt_llm/llmapi/llm_args.py SchedulerConfig;
the micro-batch scheduler then fills max_num_tokens with generation and context requests together):

- Admission reserves a request's whole life: a waiting request starts only if the KV blocks of its
  prompt plus all its output tokens fit beside what every running request will still need to
  finish. So the running requests never run out of blocks and nothing is ever preempted; under a
  full pool new requests wait instead of thrashing (vLLM V1 admits on the current sequence and
  preempts by recompute).
- Batches mix decodes and context chunks within the token budget, as `kind: vllm` (schedulers/vllm.py,
  whose block mechanics this reuses).

Modelled away: chunked context is off by default in TensorRT-LLM (a context runs whole or waits for
a step with room; here the last one of a step may be split as in vLLM), MAX_UTILIZATION, the
KV-cache reuse of its block manager.
"""

from __future__ import annotations

from sim.apps.serve.kvpool import BlockPool
from sim.apps.serve.schedulers.base import Request
from sim.apps.serve.schedulers.vllm import VllmV1
from sim.apps.serve.spec import SchedulerConfig


class Trtllm(VllmV1):
    decode_cohort = True   # V1's steps, so V1's cohort pass (vllm_cohort.py), whose waiting pass asks _admits
    def __init__(self, cfg: SchedulerConfig, pool: BlockPool, lookahead: int = 0, prompt_limit: int | None = None):
        super().__init__(cfg, pool, lookahead, prompt_limit)
        self.reserved: dict[int, int] = {}      # request -> blocks its whole life takes

    def _admits(self, r: Request) -> bool:
        life = self.pool.blocks_for(r.prompt + r.output + self.lookahead)
        if sum(self.reserved.values()) + life > self.pool.total - self.pool.null_blocks:
            return False
        self.reserved[r.idx] = life
        return True

    def free(self, r: Request) -> None:
        super().free(r)
        self.reserved.pop(r.idx, None)

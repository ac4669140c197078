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

- Chunked context is off by default (llm_args.py `enable_chunked_prefill` False): the micro-batch
  scheduler then schedules a context whole, and the first one that does not fit the token budget left
  ends the step's context pass (tensorrt_llm/_torch/pyexecutor/scheduler.py, PyMicroBatchScheduler:
  "No Chunking: Schedule full context", `batch_num_tokens + req_num_tokens > max_num_tokens: break`).
  A prompt longer than the whole budget can never run and is refused on arrival. With
  `enable_chunked_prefill: true` the last prompt of a step is cut to the budget as in vLLM.

Modelled away: MAX_UTILIZATION. The KV-cache reuse of its block manager is the prefix cache every paged
scheduler here shares (serving.prefix_caching), at the pool's block granularity.
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
        self.chunked = bool(getattr(cfg, "enable_chunked_prefill", False))
        if not self.chunked:
            self.prompt_limit = self.max_tokens

    def fits_ever(self, r: Request) -> bool:
        if self.prompt_limit is not None and r.prompt > self.prompt_limit:
            return False
        return super().fits_ever(r)

    def _splits(self, r: Request) -> bool:
        return self.chunked

    def _admits(self, r: Request) -> bool:
        life = self.pool.blocks_for(r.prompt + r.output + self.lookahead)
        if sum(self.reserved.values()) + life > self.pool.total - self.pool.null_blocks:
            return False
        self.reserved[r.idx] = life
        return True

    def free(self, r: Request) -> None:
        super().free(r)
        self.reserved.pop(r.idx, None)

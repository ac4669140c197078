"""A serving engine's own costs beyond the model's kernels and its per-iteration host curve
(a software stack's `engine_overheads`; hw_models.stack.step_overhead has the curve).

Physically named terms, each in seconds, fitted once per engine family by
scripts/fit_engine_overheads.py (NNLS on the H100 silicon-sample runs; the fit's provenance
is stored beside them) and never refitted per case:

* `step_s`: the GPU's idle time per iteration that the engine does not hide (graph launch,
  the device-host synchronisation that reads the sampled ids, bookkeeping between steps);
* `per_seq_s`: the same per scheduled sequence (sampler, logits processing, per-request
  state updates and input preparation that grow with the batch);
* `per_collective_s`: the same per tensor-parallel collective of the iteration (two all-reduces
  a layer, the embedding's and the logits' gather; none on one GPU): a collective is a barrier,
  so each one waits for the slowest rank (launch and kernel jitter, the host syncs of a
  multi-process engine), which the isolated all-reduce measurement (aiconfigurator's tables:
  every rank in step, graph-replayed) that prices the kernel does not see;
* `per_extra_rank_s`: the same per executor rank beyond the first (an instance of TP x PP devices runs
  one worker process per device): a multi-GPU engine hands every step's batch to each worker process
  and collects the result, where a one-GPU engine calls its worker in process. vLLM V1:
  vllm/v1/executor/multiproc_executor.py MultiprocExecutor.collective_rpc writes the pickled
  SchedulerOutput once into a shared-memory ring (distributed/device_communicators/shm_broadcast.py
  MessageQueue(n_reader = world_size)) that every worker polls and unpickles, and a slot is reused only
  after all n readers have flagged it read; one rank's ModelRunnerOutput comes back through its response
  queue. world_size 1 runs vllm/v1/executor/uniproc_executor.py UniProcExecutor (no queue, no other
  process: config/parallel.py picks "uni" for one device, "mp" on one node otherwise). TensorRT-LLM's
  PyTorch executor and SGLang run one scheduler per rank in lock-step and broadcast the new requests
  from rank 0 every iteration (py_executor.py _fetch_new_requests over the MPI/torch dist group;
  SGLang managers/scheduler.py recv_requests -> broadcast_pyobj), the same per-step shape;
* `per_request_s`: a pure delay once per request before the engine sees it, counted from the
  client's send: it adds to TTFT and E2E and occupies nothing (no queue forms behind it). It is the
  path in front of the engine, so it depends on how the engine is deployed (a workload's
  `serving.deployment`): `per_request_s` for the engine's own API server (`vllm serve`,
  `trtllm-serve`, SGLang's launch_server), `dynamo_per_request_s` behind NVIDIA Dynamo's HTTP
  frontend and the engine's Dynamo worker (None: the same figure). Where an engine's training runs
  came through one deployment only, the fit cannot tell them apart and both carry its figure;
* `front_end_*`: the API front end as a resource (sim/apps/serve/frontend.py cites which work runs in
  the API process of each engine): `front_end_servers` processes, each serving one job at a time from
  one queue; a request in takes `front_end_request_s` + `front_end_prompt_token_s` x its prompt, an
  engine step's tokens out `front_end_output_token_s` each. Requests queue behind streaming work, so
  TTFT, E2E and a closed loop's sends move with the token rate; all zero builds no front end.

The step terms add to the iteration's wall time serially: they are what the fit found the
GPU waiting for, over and above the overlapped host curve.

`async_scheduling` is the engine's documented design, not a fitted figure: the engine
schedules iteration n+1 while iteration n runs, so a request arriving during iteration n
is first scheduled into n+2 (vLLM V1: vllm/v1/engine/core.py EngineCore.step_with_batch_queue
with vllm/v1/core/sched/async_scheduler.py AsyncScheduler, default since vLLM 0.14;
SGLang: managers/scheduler.py event_loop_overlap; TensorRT-LLM's PyTorch backend:
py_executor.py _executor_loop_overlap, on unless disable_overlap_scheduler).
"""

from __future__ import annotations

from pydantic import Field, StrictBool

from sim.core.schema import Quantity, Strict


class EngineOverheads(Strict):
    cite: str                                        # where async_scheduling comes from
    async_scheduling: StrictBool = False             # see the module doc
    step_s: Quantity = Field(default=0.0, ge=0)      # exposed GPU idle per iteration
    per_seq_s: Quantity = Field(default=0.0, ge=0)   # ... per scheduled sequence
    per_collective_s: Quantity = Field(default=0.0, ge=0)   # ... per TP collective of the iteration
    per_extra_rank_s: Quantity = Field(default=0.0, ge=0)   # ... per executor rank beyond the first
    per_request_s: Quantity = Field(default=0.0, ge=0)   # pure delay per request (occupies nothing)
    dynamo_per_request_s: Quantity | None = Field(default=None, ge=0)   # ... behind a Dynamo frontend
    # the API front end as a resource (sim/apps/serve/frontend.py): its processes and service times
    front_end_servers: int = Field(default=1, ge=1)
    front_end_request_s: Quantity = Field(default=0.0, ge=0)        # per request taken in (HTTP, hand-off)
    front_end_prompt_token_s: Quantity = Field(default=0.0, ge=0)   # ... per prompt token (tokenize)
    front_end_output_token_s: Quantity = Field(default=0.0, ge=0)   # per streamed token (detokenize, SSE)
    fit: str = ""                                    # the fit's provenance (script, training set, date)

    def request_delay_s(self, deployment: str = "direct") -> float:
        """The pure delay per request in front of the engine as `deployment` serves it (the module doc)."""
        if deployment == "dynamo" and self.dynamo_per_request_s is not None:
            return self.dynamo_per_request_s
        return self.per_request_s

    def iteration_s(self, seqs: int, collectives: int = 0, ranks: int = 1) -> float:
        """Seconds an iteration of `seqs` sequences and `collectives` TP collectives, on an instance of
        `ranks` devices, adds to its wall time."""
        return (self.step_s + self.per_seq_s * seqs + self.per_collective_s * collectives
                + self.per_extra_rank_s * (ranks - 1))

    def serving_terms(self, seqs: int, collectives: int, ranks: int) -> dict[str, float]:
        """What `sim serve` adds to `sim run`'s step under this stack (plain data for the run's report, which
        prices the device step and the host work only): the fitted seconds per iteration of `seqs` sequences,
        the pure delay per request, and the API front end's service per streamed token."""
        return dict(serve_iteration_s=self.iteration_s(seqs, collectives, ranks),
                    serve_request_s=self.request_delay_s(), serve_output_token_s=self.front_end_output_token_s)

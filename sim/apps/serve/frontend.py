"""The engine's API front end as a resource (issue 29): `servers` processes that take requests in and stream
tokens out, one job at a time each, first come first served from one queue.

What runs in the API process, from each engine's source:

* TensorRT-LLM `trtllm-serve` (tensorrt_llm/serve/openai_server.py OpenAIServer, one uvicorn process): the
  handler tokenizes the prompt (`LLM.generate_async`, llmapi/llm.py, its input processor) and hands the
  request to the executor's worker processes over IPC; every response the engine returns is detokenized
  incrementally in the same process (executor/result.py DetokenizedGenerationResultBase._handle_response,
  unless `num_postprocess_workers` > 0, default 0) and written as one SSE chunk
  (serve/postprocess_handlers.py chat_stream_post_processor).
* vLLM V1 (vllm/entrypoints/openai/api_server.py with vllm/v1/engine/async_llm.py AsyncLLM): the API
  process tokenizes (`add_request` -> the input processor) and runs the output handler loop, which
  detokenizes each step's outputs (v1/engine/output_processor.py OutputProcessor.process_outputs, with
  v1/engine/detokenizer.py) and feeds the streams; the engine core is another process.
  `--api-server-count k` runs k such processes (`servers`).
* SGLang (python/sglang/srt/managers/tokenizer_manager.py TokenizerManager in the HTTP server's process;
  detokenizer_manager.py DetokenizerManager in its own): the main process tokenizes and writes each
  detokenized chunk out to its stream; the detokenizer process is a second stage, not modelled apart.

So one job per request on the way in (`request_s` + `prompt_token_s` x prompt tokens; the engine sees the
request when it is done) and one per engine step on the way out (`output_token_s` x the tokens the step
emitted: the engine hands a step's responses over together); the client sees a step's tokens when its job is
done. In and out share the queue, as they share the process: at a high token rate requests wait behind
the streaming work and the closed loop's clients send later. The queueing is simpy's (a Store the servers
take jobs from), not a formula. The engine itself is not slowed: it runs in other processes.

The engine's token times (TBT, the engine-side records) stay the engine's; TTFT, E2E and a closed loop's
replies count the client's times (`to_client`). A stack with no front-end service time builds none, and the
run is the one without this module.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

import numpy as np
import simpy

from hw_models.stack.engine_overheads import EngineOverheads

if TYPE_CHECKING:
    from sim.apps.serve.simulator import ServeSim


class FrontEnd:
    def __init__(self, sim: "ServeSim", eo: EngineOverheads):
        self.sim, env = sim, sim.env
        self.request_s, self.prompt_token_s = eo.front_end_request_s, eo.front_end_prompt_token_s
        self.token_s = eo.front_end_output_token_s
        self.jobs = simpy.Store(env)
        self.step_end, self.delivered = array("d"), array("d")   # an engine step's end -> its tokens' delivery
        self.finished: list[int] = []   # requests whose last token the current step emitted
        self.tokens = 0                 # the engine's emitted tokens handed over so far
        self.busy_s = 0.0
        for _ in range(eo.front_end_servers):
            env.process(self._server(env))

    def send(self, i: int) -> None:
        """Request `i` reaches the front end now."""
        self.jobs.put((self.request_s + self.prompt_token_s * float(self.sim.reqs.prompt_len[i]), i, None))

    def step(self, now: float) -> None:
        """The engine ended a step at `now`: hand over the tokens it emitted (and the requests it finished)."""
        n, self.tokens = self.sim.tokens - self.tokens, self.sim.tokens
        if n or self.finished:
            self.jobs.put((self.token_s * n, -1, (now, self.finished)))
            self.finished = []

    def _server(self, env: simpy.Environment):
        while True:
            service, i, out = yield self.jobs.get()
            if service > 0:
                yield env.timeout(service)
                self.busy_s += service
            if out is None:
                self.sim.arrive(i)
                continue
            self.step_end.append(out[0])
            self.delivered.append(env.now)
            for j in out[1]:
                self.sim.delivered(j)

    def to_client(self, rec: dict[str, np.ndarray]) -> None:
        """First-token and finish times from the engine's step ends to when the client got them."""
        keys, vals = np.frombuffer(self.step_end), np.frombuffer(self.delivered)
        order = np.argsort(keys, kind="stable")
        keys, vals = keys[order], vals[order]
        for col in ("first_token_s", "finish_s"):
            t = rec[col]
            at = np.minimum(np.searchsorted(keys, t), max(len(keys) - 1, 0))
            hit = np.isfinite(t) & (len(keys) > 0)
            hit[hit] = keys[at[hit]] == t[hit]
            t[hit] = vals[at[hit]]


def make(sim: "ServeSim", eo: EngineOverheads | None) -> FrontEnd | None:
    """The front end of `sim`'s stack, or None when it has no service time (a pure delay at most)."""
    if eo is None or not (eo.front_end_request_s or eo.front_end_prompt_token_s or eo.front_end_output_token_s):
        return None
    return FrontEnd(sim, eo)

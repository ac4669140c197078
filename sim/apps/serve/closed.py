"""Closed-loop load: N clients, each sending its next request when its previous one
returns (after an optional think time), as every public serving benchmark drives a
server:

* vLLM `benchmarks/benchmark_serving.py --max-concurrency N` (vllm-project/vllm,
  `benchmark()`): with the default request rate (inf) every request task starts at
  once and `limited_request_func` waits on `asyncio.Semaphore(max_concurrency)`, so
  the first N requests go out at t = 0 and each completion lets the next one in; all
  requests count in the means (no warm-up is excluded) and the duration runs from the
  start to the last completion;
* NVIDIA genai-perf / aiperf `--concurrency N` (the aiconfigurator silicon samples)
  keep N requests in flight the same way. Their `--warmup-request-count` is a phase of its
  own: every warm-up request returns before profiling starts its N clients at once
  (genai-perf's perf_analyzer: src/concurrency_manager.cc `PerformWarmup` joins the warm-up
  threads in LoadManager::WaitForWarmupAndCleanup; aiperf: aiperf/timing/
  credit_issuing_strategy.py `_execute_phases`, "Wait for the credits to be returned before
  continuing to the next phase"), so the measured requests are a fresh closed loop from an
  idle engine, ramp included: replayed with no `warmup_requests`.

Requests are sent in stream order (the i-th send takes request i's lengths). A request
reaches the server `front_end_s` after its client sent it (the stack's pure delay
`engine_overheads.request_delay_s` of the deployment), then the API front end when the stack has one
(sim.apps.serve.frontend: queued behind its streaming work), then the engine; a client
times its request from the send, as the tools do, and sends its next one when the front
end has streamed the last token.

A client's connection pool (`max_connections`) caps the requests at the server below the
clients: a send beyond it waits in the client until a reply frees a connection, and its
clock runs while it waits, since the clients time a request from before the call that
waits for the connection (vLLM's backend_request_func takes `st = time.perf_counter()`
before `session.post`). aiohttp's TCPConnector holds at most 100 connections unless told
otherwise (`limit=100`, docs.aiohttp.org client reference; a known cause of TTFT growing
past 100 clients, gpustack/gpustack#2324), so a client that shares one ClientSession with
the default connector serves at most 100 requests at a time whatever its concurrency.

Warm-up and cool-down: as benchmark_serving, every request counts by default, the
ramp (all N prefills queued at t = 0) and the tail (the last requests running with
fewer than N in flight) included; `warmup_requests` drops the first sends of the same
loop from the statistics, for a tool that keeps measuring across its warm-up (not
genai-perf's or aiperf's: above). The silicon samples were measured with the former.

The means the tools report (`benchmark_figures`): TTFT, TPOT = (e2e - ttft) /
(output - 1) per request (vLLM's `calculate_metrics`), ITL over every gap between
two streamed chunks, E2E, requests/s and output tokens/s over the duration, and output
tokens/s per GPU. A chunk is a step's tokens for the request: one token, or under
speculative decoding the step's accepted tokens, which vLLM's client times as one gap
(backend_request_func: `output.itl.append(timestamp - most_recent_timestamp)` per chunk;
a trial read ITL = TPOT 5.1 ms against a 14 ms mean gap).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import simpy

from sim.apps.serve.simulator import DONE, REJECTED, ServeResult, ServeSim
from sim.apps.serve.metrics import per_request
from sim.apps.serve.instance import Setup
from sim.apps.serve.spec import Closed
from sim.apps.serve.serving_mapper import serving_mapper


class ClosedLoopSim(ServeSim):
    """The engine of sim.apps.serve.simulator driven by `concurrency` clients instead of a
    precomputed arrival stream (the stream's arrival times are overwritten by the sends)."""

    def __init__(self, setup: Setup, reqs, progress=None, front_end_s: float | None = None, watch=None):
        super().__init__(setup, reqs, progress, watch)
        self.loop: Closed = setup.file.serving.arrivals
        if front_end_s is not None:   # else the stack's (simulator.ServeSim)
            self.front_end_s = front_end_s
        self.next = 0
        self.pool: simpy.Resource | None = None   # the client's connection pool, in the run's environment
        self.pool_waits: list[float] = []         # each send's wait for a connection (pool_figures)
        self.replied: dict[int, simpy.Event] = {}
        self.last_reply_s = 0.0

    def result(self, makespan_s: float) -> ServeResult:
        # The run ends at the last reply: a client still thinking then sends nothing more, and its think time
        # had stretched the wall time that utilisation, idle energy and J/token are taken over (a serving trial:
        # 1 client, 3 requests, 10 s think: engine_busy 0.087 for 0.124, J/token 12.4 for 9.4).
        return super().result(min(makespan_s, self.last_reply_s) if self.last_reply_s else makespan_s)

    def _reply(self, i: int) -> None:
        self.last_reply_s = self.env.now
        self.replied[i].succeed()

    def _arrivals(self, env: simpy.Environment):
        if self.loop.max_connections:
            self.pool = simpy.Resource(env, self.loop.max_connections)
        for _ in range(min(self.loop.concurrency, len(self.reqs))):
            env.process(self._client(env))
        return
        yield  # a generator, as the base process is

    def _client(self, env: simpy.Environment):
        while self.next < len(self.reqs):
            i, self.next = self.next, self.next + 1
            self.reqs.arrival_s[i] = self.rec["arrival_s"][i] = env.now
            done = self.replied[i] = env.event()
            connection = self.pool.request() if self.pool else None
            if connection is not None:
                yield connection   # the client's clock has started (module doc)
                self.pool_waits.append(env.now - self.rec["arrival_s"][i])
            if self.front_end_s:
                yield env.timeout(self.front_end_s)
            self.enter(i)
            yield done
            if connection is not None:
                self.pool.release(connection)
            if self.loop.think_time_s and self.next < len(self.reqs):   # nothing left to send: no think
                yield env.timeout(self.loop.think_time_s)

    def admit_or_reject(self, req) -> None:
        super().admit_or_reject(req)
        if self.rec["status"][req.idx] == REJECTED:   # refused (also after a front end or an async hold)
            self._reply(req.idx)

    def _finish(self, r, now: float) -> None:
        super()._finish(r, now)
        if self.front is None:
            self._reply(r.idx)

    def delivered(self, i: int) -> None:
        self._reply(i)   # the client has the last token: it sends its next request


def pool_figures(sim: ClosedLoopSim) -> dict[str, float]:
    """A client pool's share of the latencies: its connections, how many sends waited for one and their mean wait
    over every send (inside each TTFT and E2E); empty without a pool."""
    waits = sim.pool_waits
    if sim.loop.max_connections is None or not waits:
        return {}
    return dict(connections=sim.loop.max_connections, waited=int(sum(w > 0 for w in waits)),
                wait_s=float(np.mean(waits)))


def in_flight_max(res: ServeResult) -> int:
    """The most requests sent and not yet answered at any instant (a send at the instant of a
    reply counts after it, as a client sends its next request once the previous returned)."""
    r = res.requests
    ok = r["status"] == DONE
    events = sorted([(t, 1) for t in r["arrival_s"][ok]] + [(t, -1) for t in r["finish_s"][ok]])
    n = peak = 0
    for _, d in events:   # at equal times -1 sorts first
        n += d
        peak = max(peak, n)
    return peak


def benchmark_figures(res: ServeResult, devices: int, warmup: int = 0) -> dict[str, float]:
    """The means a benchmark client reports (module doc), over the completed requests after
    the first `warmup` sends; seconds, requests/s, tokens/s."""
    r = res.requests
    order = np.argsort(r["arrival_s"], kind="stable")
    keep = np.ones(len(order), dtype=bool)
    keep[order[:warmup]] = False
    sub = replace(res, requests={k: v[keep] for k, v in r.items()})
    lat = per_request(sub)
    ok = sub.requests["status"] == DONE
    first, fin, out = (sub.requests[c][ok] for c in ("first_token_s", "finish_s", "output_tokens"))
    start = float(np.min(sub.requests["arrival_s"][ok])) if ok.any() else 0.0
    span = float(np.max(fin)) - start if ok.any() else 0.0
    gaps = float(np.sum(np.maximum(out - 1, 0)))
    return dict(ttft_s=float(np.mean(lat["ttft"])) if ok.any() else float("nan"),
                tpot_s=float(np.nanmean(lat["tpot"])) if (out > 1).any() else float("nan"),
                itl_s=_itl_s(res, float(np.sum(fin - first)), gaps),
                e2e_s=float(np.mean(lat["e2e"])) if ok.any() else float("nan"),
                req_s=int(ok.sum()) / span if span else 0.0,
                out_tok_s=float(out.sum()) / span if span else 0.0,
                out_tok_s_per_gpu=float(out.sum()) / span / devices if span else 0.0,
                completed=int(ok.sum()))


def _itl_s(res: ServeResult, span_s: float, gaps: float) -> float:
    """Mean gap between streamed chunks: the measured requests' decode span over their gaps, one per output token
    after the first; where a step hands a request several tokens (speculative decoding: the run's chunk gaps,
    res.tbt_weight, fall short of its tokens' gaps), the run's mean chunk gap, warm-up sends included."""
    r = res.requests
    ok = r["status"] == DONE
    token_gaps = float(np.sum(np.maximum(r["output_tokens"][ok] - 1, 0)))
    chunks = float(np.sum(res.tbt_weight))
    if 0 < chunks < token_gaps:
        return float(np.sum(res.tbt_s * res.tbt_weight) / chunks)
    return span_s / gaps if gaps else float("nan")


def instance_devices(setup: Setup) -> int:
    """Devices of one instance (tp x pp, max(tp, ep) x pp for MoE): what output tok/s/GPU divides by."""
    return serving_mapper(setup.machine, setup.file, setup.model).device_share().devices

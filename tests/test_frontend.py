"""The API front end as a resource (sim/apps/serve/frontend.py) on tiny hand-worked cases: one request pays
its way in and its tokens' way out once; requests sent together are taken in one service time apart; a
front end slower than the engine's steps sets the client's token rate; k servers take k at once; a
stack without service times runs as before."""

from __future__ import annotations

import numpy as np
import pytest

from hw_models.machine import load_machine
from sim.apps.serve import overhead_fit as F
from sim.apps.serve.arrivals import make_requests
from sim.apps.serve.closed import ClosedLoopSim, in_flight_max
from sim.apps.serve.instance import prepare
from sim.apps.serve.simulator import ServeSim
from sim.apps.serve.spec import serve_file_from_dict

BASE = {"model": "tinyllama-1.1b", "formats": {"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"},
        "flash_attention": True, "stack": "vllm"}
ZERO = dict(step_s=0.0, per_seq_s=0.0, per_collective_s=0.0, per_extra_rank_s=0.0, per_request_s=0.0,
            async_scheduling=False)


def h100(**front):
    return load_machine("h100_sxm", {"stacks": {"vllm": {"engine_overheads": {**ZERO, **front}}}})


def serve_file(arrivals: dict, prompt: int = 200, output: int = 40):
    return serve_file_from_dict({**BASE, "serving": {
        "arrivals": arrivals, "lengths": {"prompt": {"dist": "fixed", "value": prompt},
                                          "output": {"dist": "fixed", "value": output}}}}, "t.yaml")


class Logged(ServeSim):
    """Records when each request reached the engine."""

    def arrive(self, i: int) -> None:
        self.seen = {**getattr(self, "seen", {}), i: self.env.now}
        super().arrive(i)


def run(f, sim=ServeSim, **front):
    s = sim(prepare(f, h100(**front)), make_requests(f))
    return s, s.run()


def test_one_request_pays_front_end_in_and_one_token_out():
    # Alone: in = 3 ms + 200 prompt tokens x 10 us = 5 ms before the engine sees it; its first token reaches
    # the client one job (1 token x 50 us) after the step that emitted it, as does its last (the engine's
    # steps are longer than 50 us, so no job waits). TTFT and E2E: the engine's + 5 ms + 50 us.
    f = serve_file({"process": "constant", "rate": 1, "num_requests": 1})
    _, plain = run(f)
    sim, fe = run(f, Logged, front_end_request_s=3e-3, front_end_prompt_token_s=10e-6, front_end_output_token_s=50e-6)
    assert sim.seen[0] == pytest.approx(5e-3, rel=1e-12)
    a, b = plain.requests, fe.requests
    assert b["first_token_s"][0] - a["first_token_s"][0] == pytest.approx(5e-3 + 50e-6, rel=1e-9)
    assert b["finish_s"][0] - a["finish_s"][0] == pytest.approx(5e-3 + 50e-6, rel=1e-9)
    steps = plain.iterations["duration_s"]
    assert steps.min() > 50e-6


def test_requests_sent_together_are_taken_in_one_service_time_apart():
    # A burst of 4 at t = 0, 7 ms each to take in, one server: the k-th (k = 1..4) reaches the engine at k x 7 ms.
    f = serve_file({"process": "burst", "size": 4, "interval_s": 100.0, "num_requests": 4})
    sim, _ = run(f, Logged, front_end_request_s=7e-3)
    assert [sim.seen[i] for i in range(4)] == pytest.approx([7e-3, 14e-3, 21e-3, 28e-3], rel=1e-12)


def test_k_servers_take_k_requests_at_once():
    f = serve_file({"process": "burst", "size": 4, "interval_s": 100.0, "num_requests": 4})
    sim, _ = run(f, Logged, front_end_request_s=7e-3, front_end_servers=2)
    assert sorted(sim.seen.values()) == pytest.approx([7e-3, 7e-3, 14e-3, 14e-3], rel=1e-12)


def test_a_front_end_slower_than_the_steps_sets_the_clients_token_rate():
    # One request decoding alone emits one token a step; its steps take well under 5 ms, so each 5 ms job
    # starts when the previous one ends: the client gets token j at (first step's end) + j x 5 ms, so its
    # TPOT is 5 ms exactly, whatever the engine's step.
    f = serve_file({"process": "constant", "rate": 1, "num_requests": 1}, output=20)
    _, plain = run(f)
    _, fe = run(f, front_end_output_token_s=5e-3)
    assert plain.iterations["duration_s"].max() < 5e-3
    r = fe.requests
    assert r["first_token_s"][0] == pytest.approx(plain.requests["first_token_s"][0] + 5e-3, rel=1e-9)
    assert (r["finish_s"][0] - r["first_token_s"][0]) / 19 == pytest.approx(5e-3, rel=1e-9)


def test_closed_loop_clients_wait_for_the_streamed_reply():
    # Two clients, 6 requests; the front end streams each token in 5 ms, so a client's next send waits for
    # the delivery of its last token, and never more than 2 requests are in flight.
    f = serve_file({"process": "closed", "concurrency": 2, "num_requests": 6}, output=10)
    sim = ClosedLoopSim(prepare(f, h100(front_end_output_token_s=5e-3)), make_requests(f))
    res = sim.run()
    r = res.requests
    assert in_flight_max(res) <= 2
    order = np.argsort(r["arrival_s"])
    sends, ends = r["arrival_s"][order], np.sort(r["finish_s"])
    assert sends[2:] == pytest.approx(ends[:4], rel=1e-12)   # each later send is a delivered last token


def test_no_service_time_builds_no_front_end():
    f = serve_file({"process": "poisson", "rate": 20, "num_requests": 30})
    sim, a = run(f)
    assert sim.front is None
    _, b = run(f, front_end_servers=3)
    for c in ("first_token_s", "finish_s"):
        np.testing.assert_array_equal(a.requests[c], b.requests[c])


def test_the_fit_keeps_the_per_token_time_its_rows_were_replayed_under():
    # overhead_fit step 3: the front end's time per token is no NNLS column; the rows carry the value they were
    # replayed under and the fit writes it into the stack block beside the NNLS terms (70 us -> "70 us").
    rows = [{"id": str(i), "engine": "trtllm", "sim_ttft_s": 0.1, "sim_tpot_s": 0.01, "ttft_steps": 3.0 + i,
             "ttft_seqs": 20.0 * i, "tpot_steps": 1.0, "tpot_seqs": 8.0 + i, "collectives": 0.0, "ranks": 1.0,
             F.FRONT: 70e-6} for i in range(6)]
    measured = {r["id"]: {"ttft_s": 0.15, "tpot_s": 0.011} for r in rows}
    (fit,) = F.fit(rows, measured)
    assert fit.terms[F.FRONT] == 70e-6
    assert "  front_end_output_token_s: 70 us" in F.block(fit, "x.csv").splitlines()


def test_a_stack_ignored_on_a_kind_adds_none_of_its_engine_terms():
    """A new user's trial: `stack: trtllm` on hbm_pim warned "ignored" yet added TensorRT-LLM's GPU-fitted 81 ms
    per-request delay to TTFT (Groq: 14.7 -> 95.8 ms). A kind that runs no stack takes none of its terms."""
    from sim.apps.serve.run import serve

    f = serve_file({"process": "constant", "rate": 1, "num_requests": 2}, prompt=128, output=8)
    pim = load_machine("hbm_pim")
    _, plain = serve(f.model_copy(update={"stack": None}), pim)
    for stack in ("vllm", "trtllm", "sglang"):
        _, with_stack = serve(f.model_copy(update={"stack": stack}), pim)
        assert with_stack["latency"]["ttft"]["mean"] == plain["latency"]["ttft"]["mean"]
        assert with_stack["request_delay_s"] == 0.0
    # on a GPU the same stack does add its delay (the fitted per-request term, docs/serving.md)
    _, gpu_plain = serve(f.model_copy(update={"stack": None}), load_machine("h100_sxm"))
    _, gpu_trt = serve(f.model_copy(update={"stack": "trtllm"}), load_machine("h100_sxm"))
    delay = gpu_trt["request_delay_s"]
    assert delay > 0.01 and gpu_plain["request_delay_s"] == 0.0
    assert gpu_trt["latency"]["queue"]["mean"] == pytest.approx(delay, abs=1e-6)   # an idle engine: the delay alone


def test_rejected_requests_miss_the_slo():
    """An architect's trial: --find-capacity reported a capacity where 21% of the stream was rejected (its KV
    never fits), the SLO read over the completed requests only. A rejected request is never served: it counts
    at an unbounded latency against every per-request SLO. 10 requests, 2 of them 400-token prompts a 160-token
    pool never holds: 20% rejected, so p90 is unbounded while p50 (and the latency table) are the others'."""
    from sim.apps.serve.run import serve

    f = serve_file_from_dict({**BASE, "serving": {
        "arrivals": {"process": "constant", "rate": 1, "num_requests": 10},
        "lengths": {"prompt": {"dist": "sequence", "values": [100] * 4 + [400] + [100] * 4 + [400]},
                    "output": {"dist": "fixed", "value": 4}},
        "scheduler": {"kind": "vllm", "num_gpu_blocks_override": 10},
        "slo": {"ttft_p90": 10.0, "ttft_p50": 10.0}}}, "t.yaml")
    _, s = serve(f, load_machine("h100_sxm"))
    assert (s["completed"], s["rejected"]) == (8, 2)
    assert s["slo_met"]["ttft_p90"] == float("inf") and s["slo_met"]["ttft_p50"] < 1.0
    assert np.isfinite(s["latency"]["ttft"]["p90"])   # the table stays the served requests'


def test_a_capacity_search_that_rejects_says_so():
    """Every step rejects the same 2 of 10 requests (rate-independent), so p90 is never met: the search fails
    saying how many were turned away and why, instead of reporting a rate the machine cannot serve."""
    from sim.apps.serve.capacity import find_capacity
    from sim.core.errors import ConfigError

    f = serve_file_from_dict({**BASE, "serving": {
        "arrivals": {"process": "poisson", "rate": 1, "num_requests": 10, "seed": 1},
        "lengths": {"prompt": {"dist": "sequence", "values": [100] * 4 + [400] + [100] * 4 + [400]},
                    "output": {"dist": "fixed", "value": 4}},
        "scheduler": {"kind": "vllm", "num_gpu_blocks_override": 10}}}, "t.yaml")
    with pytest.raises(ConfigError, match=r"2 of 10 requests were rejected \(2: its KV cache never fits the pool\)"):
        find_capacity(f, load_machine("h100_sxm"), {"ttft_p90": 10.0})

"""Issue 34, item 6: random *valid* serving files (every scheduler, arrival process and length
distribution, request traces, prefix caching, speculative decoding, replicas behind a router,
disaggregated pools) run to the end and obey the invariants of sim.apps.serve.invariants, which
sim.apps.serve.run.serve checks on every run: each request completed or rejected (with a
reason), TTFT <= E2E, output tokens conserved, no busy share above 1. A refusal of the input
(a SimError: one line in the CLI) is allowed; anything else fails. A tiny model keeps each run
to a fraction of a second: a few dozen examples, derandomized, in CI."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hw_models.machine import load_machine
from sim.apps.serve.simulator import DONE, REJECTED
from sim.apps.serve.run import serve
from sim.apps.serve.spec import serve_file_from_dict
from sim.core.errors import SimError
from tests.test_sweep_serving import TINY_MODEL

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LONGEST = 200   # prompt + output stay within the tiny model's 512 positions
MACHINES = ("a6000", "h100_sxm")


@st.composite
def lengths(draw, hi: int) -> dict:
    kind = draw(st.sampled_from(["fixed", "uniform", "lognormal", "zipf", "histogram"]))
    if kind == "fixed":
        return dict(dist="fixed", value=draw(st.integers(1, hi)))
    if kind == "uniform":
        low = draw(st.integers(1, hi))
        return dict(dist="uniform", low=low, high=draw(st.integers(low, hi)))
    if kind == "lognormal":
        return dict(dist="lognormal", mean=draw(st.floats(2, hi / 2)), cv=draw(st.floats(0.01, 3)), max=hi)
    if kind == "zipf":
        return dict(dist="zipf", a=draw(st.floats(1.1, 3)), max=hi)
    return dict(dist="histogram", path="hist.csv", max=hi)


@st.composite
def schedulers(draw) -> dict:
    kind = draw(st.sampled_from(["static", "orca", "vllm", "vllm-v0", "sarathi", "sglang", "trtllm"]))
    out: dict = dict(kind=kind)
    if kind == "static":
        out["batch_size"] = draw(st.integers(1, 16))
        return out
    out["max_num_seqs"] = draw(st.integers(1, 32))
    # Budgets below a prompt's length are valid: vllm-v0 and orca reject such requests, the others chunk.
    out["max_num_batched_tokens"] = draw(st.integers(16, 4 * LONGEST))
    if kind == "orca":
        out["max_model_len"] = draw(st.integers(LONGEST, 512))
    if kind in ("vllm-v0", "sarathi"):
        out["preemption"] = draw(st.sampled_from(["recompute", "swap"]))
        if out["preemption"] == "swap":
            out["swap_bandwidth_bytes_per_s"] = draw(st.sampled_from([1e9, 25e9]))
    if kind in ("vllm", "vllm-v0", "sarathi", "sglang", "trtllm") and draw(st.booleans()):
        out["num_gpu_blocks_override"] = draw(st.integers(8, 400))   # a small pool: preemptions, rejections
    return out


@st.composite
def serving_files(draw) -> tuple[dict, str]:
    n = draw(st.integers(1, 40))
    process = draw(st.sampled_from(["poisson", "gamma", "constant", "burst", "trace"]))
    srv: dict = dict(scheduler=draw(schedulers()))
    if process == "trace":
        srv["arrivals"] = dict(process="trace")
        srv["trace"] = dict(path="trace.jsonl", format="plain", time_scale=draw(st.sampled_from([0.1, 1.0])))
    else:
        rate = draw(st.sampled_from([1.0, 50.0, 1000.0]))
        srv["arrivals"] = dict(process=process, rate=rate, num_requests=n, seed=draw(st.integers(0, 2**31)))
        if process == "gamma":
            srv["arrivals"]["cv"] = draw(st.floats(0.1, 4))
        if process == "burst":
            srv["arrivals"] = dict(process="burst", size=draw(st.integers(1, 8)), interval_s=draw(st.sampled_from([0.0, 0.01])),
                                   num_requests=n, seed=0)
        srv["lengths"] = dict(prompt=draw(lengths(LONGEST // 2)), output=draw(lengths(LONGEST // 2)))
    paged = srv["scheduler"]["kind"] in ("vllm", "vllm-v0", "sarathi")
    if paged and draw(st.booleans()):
        srv["prefix_caching"] = dict(enabled=True)
    if srv["scheduler"]["kind"] != "static" and draw(st.integers(0, 4)) == 0:
        srv["speculative"] = dict(draft=TINY_MODEL, k=draw(st.integers(1, 4)), alpha=draw(st.floats(0, 0.95)))
    layout = draw(st.sampled_from(["one", "one", "replicas", "disaggregated"]))
    if layout == "replicas":
        srv["router"] = dict(replicas=draw(st.integers(2, 3)),
                             policy=draw(st.sampled_from(["round_robin", "least_outstanding", "cache_aware"])))
    elif layout == "disaggregated" and "speculative" not in srv and srv["scheduler"]["kind"] != "static":
        srv["disaggregated"] = dict(prefill=dict(hw=draw(st.sampled_from(MACHINES)), replicas=draw(st.integers(1, 2))),
                                    decode=dict(hw=draw(st.sampled_from(MACHINES)), replicas=draw(st.integers(1, 2))),
                                    transfer=dict(bandwidth_bytes_per_s=draw(st.sampled_from([1e9, 1e11]))))
    rows = [dict(arrival_s=float(t), prompt_len=p, output_len=o, hash_ids=h) for t, p, o, h in zip(
        np.cumsum(draw(st.lists(st.floats(0, 0.05), min_size=n, max_size=n))),
        draw(st.lists(st.integers(1, LONGEST // 2), min_size=n, max_size=n)),
        draw(st.lists(st.integers(1, LONGEST // 2), min_size=n, max_size=n)),
        draw(st.lists(st.lists(st.integers(0, 3), max_size=3), min_size=n, max_size=n)))]
    return dict(name="fuzz", model=TINY_MODEL, flash_attention=True, serving=srv), \
        "\n".join(json.dumps(r) for r in rows) + "\n"


@FUZZ
@given(serving_files(), st.sampled_from(MACHINES))
def test_random_valid_serving_files_keep_the_invariants(case, hw):
    raw, trace = case
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "trace.jsonl").write_text(trace)
        (folder / "hist.csv").write_text("length,count\n1,1\n20,5\n90,2\n")
        try:
            file = serve_file_from_dict(raw, str(folder / "s.yaml"))
            res, s = serve(file, load_machine(hw))   # raises InvariantError on a broken invariant
        except SimError as exc:
            event(f"refused: {str(exc).split(': ', 2)[-1][:60]}")
            return   # the input refused in one line (a pool too small for the model, ...): allowed
    event("ran")
    status = res.requests["status"]
    assert s["completed"] + s["rejected"] == s["requests"] == len(status)
    assert s["completed"] == int((status == DONE).sum()) and s["rejected"] == int((status == REJECTED).sum())
    assert sum(s["rejected_reasons"].values()) == s["rejected"]   # every rejection has its reason
    assert 0 <= s["engine_busy"] <= 1 + 1e-9
    if s["completed"]:
        assert s["latency"]["ttft"]["max"] <= s["latency"]["e2e"]["max"] + 1e-12
        assert s["throughput_tok_s"] > 0

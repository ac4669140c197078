"""What `sim serve --chrome-trace` draws beyond iterations and request phases (sim/apps/serve/output.py
chrome_trace): a mark where a request was preempted, and between disaggregated pools the KV transfer's wait and
time, read from the run itself (per-request table, preemption log)."""

from __future__ import annotations

import numpy as np
import pytest

from hw_models.machine import load_machine
from sim.apps.serve.arrivals import make_requests
from sim.apps.serve.instance import prepare
from sim.apps.serve.output import chrome_trace, request_table
from sim.apps.serve.run import serve
from sim.apps.serve.simulator import ServeSim
from tests.test_serve import CACHE, file, stream
from tests.test_serve_disagg import CACHE as DCACHE, _file as disagg_file


@pytest.mark.parametrize("kind, preemption", [("vllm-v0", "recompute"), ("vllm-v0", "swap"), ("vllm", "recompute"),
                                              ("sglang", "recompute")])
def test_every_preemption_is_marked_on_its_requests_lane(kind, preemption):
    """A pool a third of the A6000's memory under 50 requests/s preempts: each preemption is one instant mark
    on the victim's lane, at the start of the iteration it made room for (between the request's arrival and its
    finish), with the mode; the marks count the run's preemptions and each request's own count, and the lane's
    span through each mark is labelled with it. V1 and SGLang had counted their preemptions but marked none (a
    serving trial)."""
    sched = dict(kind=kind, gpu_memory_utilization=0.34, max_num_batched_tokens=4096,
                 **({"preemption": preemption} if kind == "vllm-v0" else {}),
                 **({"swap_bandwidth_bytes_per_s": 25e9} if preemption == "swap" else {}))
    f = file(stream(50.0, n=40, prompt=(64, 128), output=(100, 200), sched=sched))
    res = ServeSim(prepare(f, load_machine("a6000"), cache=CACHE), make_requests(f)).run()
    assert res.preemptions > 0
    marks = [e for e in chrome_trace(res)["traceEvents"] if e["name"] == "preempted"]
    assert len(marks) == res.preemptions
    starts = set(np.round(res.iterations["start_s"] * 1e6, 6))
    per_request = np.zeros(len(res.requests["status"]))
    for m in marks:
        i = m["args"]["request"]
        per_request[i] += 1
        assert m["ph"] == "i" and m["pid"] == 2 and m["tid"] == i + 1 and m["args"]["mode"] == preemption
        assert res.requests["arrival_s"][i] * 1e6 <= m["ts"] <= res.requests["finish_s"][i] * 1e6
        assert round(m["ts"], 6) in starts
    np.testing.assert_array_equal(per_request, res.requests["preemptions"])
    spans = [e for e in chrome_trace(res)["traceEvents"] if e.get("pid") == 2 and e["ph"] == "X"]
    assert sum(e["args"].get("preempted", 0) for e in spans) == res.preemptions
    assert all(("(preempted x" in e["name"]) == ("preempted" in e["args"]) for e in spans)


def test_disaggregated_requests_show_the_kv_transfer_between_prefill_and_decode():
    """Two requests 10 ms apart through an H100 prefill pool and an A6000 decode pool over a 50 GB/s link: each
    lane runs prefill, then the KV transfer (its wait for the link, then 512 x 524,288 B / 50 GB/s + 10 us = 5.38
    ms), then decode from the transfer's end, as the per-request table records them."""
    res, _ = serve(disagg_file(n=2, rate=100.0), load_machine("h100_sxm"), cache=DCACHE)
    table = request_table(res)
    ev = [e for e in chrome_trace(res)["traceEvents"] if e.get("pid") == 2 and e["ph"] == "X"]
    for i, row in table.iterrows():
        lane = {e["name"]: e for e in ev if e["tid"] == i + 1}
        move = lane["KV transfer"]
        assert move["dur"] == pytest.approx(row["kv_transfer_s"] * 1e6)
        assert row["kv_transfer_s"] == pytest.approx(512 * 524_288 / 50e9 + 10e-6, rel=1e-9)
        prefill_end = lane["prefill"]["ts"] + lane["prefill"]["dur"]
        assert move["ts"] == pytest.approx(prefill_end + row["kv_transfer_wait_s"] * 1e6)
        assert lane["decode"]["ts"] == pytest.approx(move["ts"] + move["dur"])
        assert lane["decode"]["ts"] + lane["decode"]["dur"] == pytest.approx(row["finish_s"] * 1e6)

"""`sim run` under a serving stack prices the device step and the host work; `sim serve` adds the stack's fitted
engine terms (hw_models.stack.engine_overheads). The run's report names them, and they are exactly the gap: one
request served alone has the run's TPOT plus the per-iteration term, and its TTFT plus the per-request delay too."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from hw_models.registry import simulate
from hw_models.stack.spec import stack_for
from sim.apps.serve.run import serve
from sim.apps.serve.spec import serve_file_from_dict
from sim.core.workload import Workload

H100 = load_machine("h100_sxm")
PROMPT, OUT = 512, 32


@pytest.mark.parametrize("stack", ["vllm", "trtllm"])
def test_one_served_request_is_the_run_plus_the_named_terms(stack):
    base = dict(model="llama3-8b", formats={"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"},
                flash_attention=True, stack=stack)
    run = simulate(Workload(**base, batch=1, prompt_len=PROMPT, gen_len=OUT), H100)
    e = run.extra["engine_host"]
    lengths = {"prompt": {"dist": "fixed", "value": PROMPT}, "output": {"dist": "fixed", "value": OUT}}
    f = serve_file_from_dict({**base, "serving": {"arrivals": {"process": "constant", "rate": 0.1, "num_requests": 1},
                                                  "lengths": lengths, "scheduler": {"kind": "vllm"}}}, "one.yaml")
    lat = serve(f, H100, exact=True)[1]["latency"]
    step = e["serve_iteration_s"]
    assert step > 0 and e["serve_request_s"] > 0
    # by hand: one sequence on one GPU runs no collective and no extra rank, so the term is step_s + per_seq_s
    eo = stack_for(stack, H100).engine_overheads
    assert step == pytest.approx(eo.step_s + eo.per_seq_s, rel=1e-12)
    # the API front end's service per streamed token, as the stack file gives it (trtllm 70 us, vllm none)
    assert e["serve_output_token_s"] == pytest.approx({"trtllm": 70e-6, "vllm": 0.0}[stack], abs=1e-12)
    assert lat["tpot"]["mean"] == pytest.approx(run.tpot_s + step, rel=2e-3)
    assert lat["ttft"]["mean"] == pytest.approx(run.ttft_s + step + e["serve_request_s"], rel=2e-3)


def test_a_lone_request_queues_exactly_the_stack_s_request_delay_and_the_summary_names_it():
    """trtllm's fitted per-request delay (hw_models/stack/presets/trtllm.yaml) is a pure delay before the engine sees
    a request: an idle engine schedules a lone request as it arrives, so its queueing is that delay alone, and the
    summary says how much of every latency it is."""
    lengths = {"prompt": {"dist": "fixed", "value": PROMPT}, "output": {"dist": "fixed", "value": OUT}}
    f = serve_file_from_dict({"model": "llama3-8b", "flash_attention": True, "stack": "trtllm",
                              "serving": {"arrivals": {"process": "constant", "rate": 0.1, "num_requests": 1},
                                          "lengths": lengths, "scheduler": {"kind": "vllm"}}}, "one.yaml")
    s = serve(f, H100)[1]
    delay = stack_for("trtllm", H100).engine_overheads.per_request_s
    # its own server's: its Dynamo delay less the Dynamo path's cost vLLM's runs show (overhead_fit.unseen_deployments)
    trt, v = (stack_for(x, H100).engine_overheads for x in ("trtllm", "vllm"))
    by_rule = trt.dynamo_per_request_s - (v.dynamo_per_request_s - v.per_request_s)
    assert s["request_delay_s"] == delay == pytest.approx(by_rule, abs=1e-5) and delay > 0
    assert s["latency"]["queue"]["mean"] == pytest.approx(delay, abs=1e-6)

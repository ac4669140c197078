"""Serving on the offload kind (issue 29 item 6): FlexGen as a throughput-oriented batch server. A served
stream is static batching of whole FlexGen blocks: the block is the workload's batch and policy (as `sim run`
reads them), every step computes the whole block whatever part of it is still live, prompts padded to the
block's longest, the block run to its longest output."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hw_models.machine import load_machine
from hw_models.registry import mapper_for, simulate
from sim.apps.serve.run import serve
from sim.apps.serve.simulator import DONE, REJECTED
from sim.apps.serve.spec import serve_file_from_dict
from sim.core.errors import CapacityError, ConfigError
from sim.core.workload import load_workload
from tests.conftest import write_serving_file
from tests.robust_helpers import refused

# FlexGen's OPT-30B policy on its T4 machine (workloads/opt30b_flexgen.yaml): a block of 48 x 3 = 144.
POLICY = dict(wg=20, wc=80, cg=0, cc=100, hg=0, hc=100, gpu_batch_size=48, num_gpu_batches=3, cpu_attention=True)
BLOCK = 144
ROOT = Path(__file__).resolve().parents[1]


def _file(prompt: int = 512, output: int = 4, arrivals: dict | None = None, **extra):
    raw = dict(name="flexgen_serve", model="opt-30b", batch=BLOCK, prompt_len=512, gen_len=32, policy=POLICY,
               serving=dict(arrivals=arrivals or dict(process="burst", size=BLOCK, num_requests=BLOCK),
                            lengths=dict(prompt=dict(dist="fixed", value=prompt), output=dict(dist="fixed", value=output)),
                            scheduler=dict(kind="static", **extra)))
    return serve_file_from_dict(raw, "flexgen_serve.yaml")


def _mapper(f):
    return mapper_for(load_machine("flexgen_t4"), f, f.model_config_())


def _block_step(mapper, q: int, kv: int) -> float:
    """The policy's block step of `sim run` (OffloadMapper.policy_step), what a served step must cost."""
    p, buffers = mapper._run_policy
    return mapper.policy_step(p, "prefill" if q == kv else "decode", q, kv, buffers).time_s


def test_a_full_block_is_one_flexgen_generation():
    """144 requests of 512 + 4 tokens at once: one block, one prefill and three decode steps (the fourth token
    is the prefill's). Every request's first token is the block's prefill step, its last the prefill plus the
    decode steps at KV 513, 514, 515: the block schedule's own step times, summed by hand."""
    f = _file()
    res, summary = serve(f, load_machine("flexgen_t4"))
    m = _mapper(f)
    prefill = _block_step(m, 512, 512)
    decode = [_block_step(m, 1, 512 + i) for i in (1, 2, 3)]
    r = res.requests
    assert (r["status"] == DONE).all() and summary["iterations"] == 4
    assert r["first_token_s"] == pytest.approx(prefill, rel=1e-12)
    assert r["finish_s"] == pytest.approx(prefill + sum(decode), rel=1e-12)
    # The step costs are FlexGen-sized: tens of seconds for a 144 x 512 prefill of OPT-30B over PCIe 3.0, and
    # a decode step that streams the CPU-resident 80% of 60 GB of weights (48 GB at 12.6 GB/s, 3.8 s) at least.
    assert 10 < prefill < 300 and decode[0] > 48e9 / 12.6e9
    assert summary["placed"].startswith("FlexGen block of 144 (weights 20/80/0") and "search" not in summary["placed"]


def test_without_a_policy_the_search_places_the_block():
    """No policy figures: sim run's search chooses one, at most the workload's batch, and the served batches are
    its block (the report says so)."""
    raw = _file(output=2, arrivals=dict(process="burst", size=8, num_requests=8)).model_dump(exclude={"source"},
                                                                                         exclude_unset=True)
    raw["policy"] = {}
    res, summary = serve(serve_file_from_dict(raw, "flexgen_serve.yaml"), load_machine("flexgen_t4"))
    block = int(summary["placed"].split()[3])
    assert "chosen by the policy search" in summary["placed"] and 1 <= block <= BLOCK
    assert summary["kv_blocks_total"] == block * 544 and (res.requests["status"] == DONE).all()


def test_a_served_block_is_sim_runs_generation():
    """workloads/opt30b_flexgen.yaml as `sim run` costs it (FlexGen's OPT-30B benchmark: 144 x 512 prompts, 32 new
    tokens) and the same block served (144 requests at once, 512 / 32 tokens each): one generation, so the served
    run lasts sim run's end-to-end and delivers its tokens/s (sim run interpolates decode steps linearly in KV,
    exact for this block's steps; 1e-6)."""
    machine = load_machine("flexgen_t4")
    run = simulate(load_workload(ROOT / "workloads" / "opt30b_flexgen.yaml"), machine).metrics()
    raw = yaml.safe_load((ROOT / "workloads" / "opt30b_flexgen.yaml").read_text())
    raw["serving"] = dict(arrivals=dict(process="burst", size=BLOCK, num_requests=BLOCK),
                          lengths=dict(prompt=dict(dist="fixed", value=512), output=dict(dist="fixed", value=32)),
                          scheduler=dict(kind="static"))
    _, summary = serve(serve_file_from_dict(raw, "opt30b_flexgen_served.yaml"), machine)
    assert summary["duration_s"] == pytest.approx(run["e2e_s"], rel=1e-6)
    assert summary["throughput_tok_s"] == pytest.approx(run["throughput_tok_s"], rel=1e-6)
    assert summary["latency"]["ttft"]["mean"] == pytest.approx(run["ttft_s"], rel=1e-6)


def test_a_lone_request_pays_the_whole_block():
    """FlexGen computes a whole block (its generate() asserts the prompt count is a multiple of the block):
    one request alone costs what 144 do, so its TTFT is the full block's prefill at its own prompt length."""
    f = _file(prompt=100, output=2, arrivals=dict(process="burst", size=1, num_requests=1))
    res, _ = serve(f, load_machine("flexgen_t4"))
    m = _mapper(f)
    assert res.requests["first_token_s"][0] == pytest.approx(_block_step(m, 100, 100), rel=1e-12)
    assert res.requests["finish_s"][0] == pytest.approx(_block_step(m, 100, 100) + _block_step(m, 1, 101), rel=1e-12)


def test_a_saturated_stream_reaches_the_block_rate():
    """Three blocks' worth arriving at once: blocks run back to back, each one prefill and 3 decode steps,
    so the run lasts three generations and serves 3 x 144 requests in it: block / generation time."""
    f = _file(arrivals=dict(process="burst", size=3 * BLOCK, num_requests=3 * BLOCK))
    res, summary = serve(f, load_machine("flexgen_t4"))
    m = _mapper(f)
    generation = _block_step(m, 512, 512) + sum(_block_step(m, 1, 512 + i) for i in (1, 2, 3))
    assert summary["duration_s"] == pytest.approx(3 * generation, rel=1e-12)
    assert summary["throughput_req_s"] == pytest.approx(BLOCK / generation, rel=1e-12)
    # The batches hold the whole pool: 144 x (512 + 32) token slots, 144 x (512 + 4) of them in use.
    assert summary["kv_blocks_total"] == BLOCK * 544


def test_requests_the_block_was_not_placed_for_are_rejected():
    """The policy places a block of 512-token prompts and 32 outputs: a 600-token prompt, or 512 + 33, is
    refused on arrival and counted, never scheduled."""
    for prompt, output, why in ((600, 4, "prompt longer than the placed block's prompt_len"),
                                (512, 33, "longer than the placed block's prompt_len + gen_len")):
        f = _file(prompt=prompt, output=output, arrivals=dict(process="burst", size=2, num_requests=2))
        res, summary = serve(f, load_machine("flexgen_t4"))
        assert (res.requests["status"] == REJECTED).all()
        assert res.rejected_reasons == {why: 2}


def test_a_batch_size_other_than_the_block_is_refused():
    with pytest.raises(ConfigError, match=r"serving.scheduler.batch_size: 8, but kind offload runs blocks of 144"):
        serve(_file(batch_size=8), load_machine("flexgen_t4"))
    serve(_file(batch_size=BLOCK, output=1, arrivals=dict(process="burst", size=1, num_requests=1)),
          load_machine("flexgen_t4"))   # the block's own size is accepted


def test_a_block_that_does_not_fit_is_a_capacity_error():
    """The whole block's KV on the 16 GB GPU (cg 100) cannot be placed: the placement's one line, before any event."""
    f = _file()
    raw = f.model_dump(exclude={"source"})
    raw["policy"] = dict(POLICY, cg=100, cc=0)
    with pytest.raises(CapacityError, match="needs .* in flexgen_t4.gddr"):
        serve(serve_file_from_dict(raw, "flexgen_serve.yaml"), load_machine("flexgen_t4"))


def test_speculative_decoding_is_refused_under_static_batching(tmp_path, capsys):
    """A static batch (any kind's, the offload block's too) runs whole padded steps: a draft's proposals have no
    iteration to be verified in, so the file is refused in one line naming the key (it was silently ignored)."""
    raw = _file().model_dump(mode="json", exclude={"source"}, exclude_unset=True)
    raw["serving"]["speculative"] = dict(draft="opt-6.7b", k=2)
    path = write_serving_file(tmp_path, raw)
    line = refused(capsys, ["serve", str(path), "--hw", "flexgen_t4"], tmp_path)
    assert line.startswith("error: ") and "speculative: a static batch runs whole padded steps" in line


def test_a_block_placed_for_defaults_is_named():
    """An architect's trial: an offload serving file without prompt_len / gen_len had its FlexGen block placed for
    the defaults (512 + 128) and 42% of its stream rejected, with no word of them. The defaults it was placed for
    are named; a file that sets them gets no note, and kinds without a block none either."""
    from sim.apps.checks import unused_in_serving
    from sim.core.workload import workload_from_dict

    bare = workload_from_dict(dict(name="w", model="opt-30b", batch=16), "w.yaml")
    (note,) = unused_in_serving(bare, load_machine("a6000_offload"))
    assert "placed for prompt_len 512, gen_len 128" in note and "batch" not in note
    full = workload_from_dict(dict(name="w", model="opt-30b", batch=16, prompt_len=2048, gen_len=512), "w.yaml")
    assert unused_in_serving(full, load_machine("a6000_offload")) == []


def test_power_per_device_says_it_holds_the_host(tmp_path):
    """An energy researcher's trial: h100_offload's 'power per device' peaked at 839 W beside a report that its
    700 W board limit binds: the device's energy holds the host CPU's (the cap binds the GPU alone).
    The figures now say what they hold; a GPU preset's do not."""
    from rich.console import Console

    from sim.apps.serve.report import print_report

    _, s = serve(_file(), load_machine("a6000_offload"))   # its host CPU has a power figure (270 W)
    assert s["energy"]["power_includes"] == "host CPU's busy time, host DRAM, link and disk J/byte"
    con = Console(record=True, width=240)
    print_report(s, "t", con)
    text = con.export_text()
    assert "power per device (with the host CPU's busy time, host DRAM, link and disk J/byte)" in text
    # token times are the block's, not what a client of FlexGen's generate() sees (an offload trial)
    assert "FlexGen's generate() returns every output at the block's end, so its clients see E2E only" in text
    # flexgen_t4's CPU has none: its figures hold the GPU and the host's priced traffic (its disk is not priced)
    assert serve(_file(), load_machine("flexgen_t4"))[1]["energy"]["power_includes"] == "host DRAM and link J/byte"
    f = write_serving_file(tmp_path, dict(name="t", model="tinyllama-1.1b", serving=dict(
        arrivals=dict(process="burst", size=2, num_requests=2), lengths=dict(prompt=dict(dist="fixed", value=16),
                                                                             output=dict(dist="fixed", value=2)))))
    assert "power_includes" not in serve(serve_file_from_dict(yaml.safe_load(f.read_text()), str(f)),
                                         load_machine("h100_sxm"))[1]["energy"]

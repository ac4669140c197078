"""Issue 17 carried over to the commands it does not name: `sim serve` (serving files, request
traces, --slo, --find-capacity, hardware out of any physical range), serving sweeps, and
inputs that are devices or FIFOs. Each refusal is one line naming the file and key, exit
status 2, nothing written (tests/robust_helpers.refused)."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from sim.apps.cli import main
from sim.apps.serve.spec import load_serve_file
from tests.conftest import ROOT, write_serving_file
from tests.robust_helpers import TINY_WORKLOAD, refused
from tests.test_robust_sweep import _threads
from tests.test_sweep import make_spec

SERVE = dict(name="s", model="tinyllama-1.1b", serving=dict(
    arrivals=dict(process="poisson", rate=10, num_requests=20, seed=0),
    lengths=dict(prompt=dict(dist="fixed", value=64), output=dict(dist="fixed", value=8)),
    scheduler=dict(kind="vllm")))


def _serve_file(tmp_path, edit=None, name="s.yaml"):
    return write_serving_file(tmp_path, SERVE, edit, name)


def _trace(name, text):
    def edit(s):
        s.update(arrivals=dict(process="trace"), trace=dict(path=name))
        del s["lengths"]
    return edit, text


# ---------------------------------------------------------------- serving files

NO_CACHE = ("keeps no cached blocks (Orca reserves max_model_len tokens per request, a static batch runs padded "
            "prompts); prefix caching is modelled under vllm, vllm-v0, sarathi, sglang and trtllm")
BAD_FILES = {
    # prefix caching was silently ignored under these two (no hit, the same latencies as without it)
    "orca-prefix-caching": (lambda s: s.update(scheduler=dict(kind="orca"), prefix_caching=dict(enabled=True)),
                            "serving: prefix_caching: kind orca " + NO_CACHE),
    "static-prefix-caching": (lambda s: s.update(scheduler=dict(kind="static"), prefix_caching=dict(enabled=True)),
                              "serving: prefix_caching: kind static " + NO_CACHE),
    "vllm-swap": (lambda s: s["scheduler"].update(preemption="swap"),
                  "serving.scheduler.preemption: swap: vLLM V1 (kind: vllm) has no swap preemption, only recompute; "
                  "kind: vllm-v0 (or sarathi) supports swap"),
    "other-scheduler-option": (lambda s: s["scheduler"].update(watermark=0.1),
                               "serving.scheduler.watermark: an option of the vllm-v0/sarathi scheduler, not of vllm"),
    # a typo of a scheduler option had read "unknown key for kind: vllm" with no suggestion (a serving trial)
    "scheduler-option-typo": (lambda s: s["scheduler"].update(max_num_seq=8),
                              "serving.scheduler.max_num_seq: unknown key for kind: vllm (did you mean max_num_seqs?)"),
    "negative-rate": (lambda s: s["arrivals"].update(rate=-3),
                      "serving.arrivals.rate: Input should be greater than 0"),
    "nan-rate": (lambda s: s["arrivals"].update(rate=float("nan")),
                 "serving.arrivals.rate: Input should be a finite number"),
    "bool-count": (lambda s: s["arrivals"].update(num_requests=True),   # ran as 1 request
                   "serving.arrivals.num_requests: Input should be a valid integer"),
    "billion-requests": (lambda s: s["arrivals"].update(num_requests=10**9),   # 8 GB of arrays, then hours
                         "serving.arrivals.num_requests: 1,000,000,000 requests, over max_requests 1,000,000 "
                         "(raise serving.arrivals.max_requests to run it)"),
    "endless-duration": (lambda s: s.update(arrivals=dict(process="poisson", rate=1e12, duration_s=1e6)),
                         "serving.arrivals.duration_s: the stream holds about 1,000,000,000,000,000,000 requests "
                         "(rate x duration), over max_requests 1,000,000; shorten duration_s, lower the rate or "
                         "raise serving.arrivals.max_requests"),
    "zero-max-requests": (lambda s: s["arrivals"].update(max_requests=0),
                          "serving.arrivals.max_requests: Input should be greater than 0"),
    "subnormal-rate": (lambda s: s["arrivals"].update(rate=1e-320),
                       "serving.arrivals: arrival times overflow to infinity; the rate or interval is out of any "
                       "physical range"),
    "gamma-cv": (lambda s: s.update(arrivals=dict(process="gamma", rate=10, cv=1e300, num_requests=5)),
                 "serving.arrivals.cv: Input should be less than or equal to 1000"),   # OverflowError
    "lognormal-cv": (lambda s: s["lengths"].update(prompt=dict(dist="lognormal", mean=100, cv=1e300)),
                     "serving.lengths.prompt.cv: Input should be less than or equal to 1000"),
    "newline-in-a-tag": (lambda s: s["arrivals"].update(process="a\nb"),   # was printed on two lines
                         "serving.arrivals: Input tag 'a\\nb' found using 'process' does not match any of the "
                         "expected tags: 'poisson', 'gamma', 'constant', 'burst', 'trace', 'closed'"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_serving_files(tmp_path, capsys, case):
    edit, message = BAD_FILES[case]
    f = _serve_file(tmp_path, edit)
    line = refused(capsys, ["serve", str(f), "--hw", "a6000", "-q", "--json", str(tmp_path / "o.json")], tmp_path)
    assert line == f"error: {f}: {message}"


def test_histogram_of_words(tmp_path, capsys):
    (tmp_path / "h.csv").write_text("length,count\nabc,1\n")   # was a pandas TypeError traceback
    f = _serve_file(tmp_path, lambda s: s["lengths"].update(prompt=dict(dist="histogram", path="h.csv")))
    line = refused(capsys, ["serve", str(f), "--hw", "a6000", "-q"], tmp_path)
    assert line == f"error: {f}: serving.lengths.prompt.path: {tmp_path / 'h.csv'}: length and count must be finite numbers"


@pytest.mark.parametrize("edit, text, message", [
    (*_trace("t.csv", "arrival_s,prompt_len,output_len\n0.5,10,5\n0.1,10,5\n"),
     "arrival_s: timestamps not sorted (row 2 comes before the row above it)"),
    (*_trace("t.csv", "arrival_s,prompt_len,output_len\ninf,10,5\n"), "arrival_s: row 1 is not a finite number"),
    (*_trace("t.csv", "arrival_s,prompt_len,output_len\n0,1e30,5\n"),   # wrapped around int64 to a negative length
     "prompt_len: row 1 has 1e+30; token counts must be whole numbers from 1 to 1,000,000"),
    (*_trace("t.csv", "arrival_s,prompt_len,output_len\n0,10,5\n1,10\n"),   # read "has nan" (a trial)
     "output_len: row 2 has no number; token counts must be whole numbers from 1 to 1,000,000"),
    (*_trace("t.jsonl", '{"timestamp": 1, "input_length": 3, "output_length": 2, "hash_ids": ["a"]}\n'),
     "hash_ids: row 1 is \"['a']\"; expected a list of integers"),
    (*_trace("t.jsonl", '{"arrival_time_ns": 1, "input_toks": 3, "output_toks": 2, "input_tok_ids": [[1], 2]}\n'),
     "input_tok_ids: row 1 is '[[1], 2]'; expected a list of integers"),
    # a serving researcher's trial: 5 ids for 1,024 tokens (2 blocks) ran silently, with made-up hits
    (*_trace("t.jsonl", '{"timestamp": 1, "input_length": 1024, "output_length": 2, "hash_ids": [1, 2]}\n'
                        '{"timestamp": 2, "input_length": 1024, "output_length": 2, "hash_ids": [1, 2, 7, 8, 9]}\n'),
     "hash_ids: row 2 has 5 id(s) for input_length 1024; the mooncake layout gives one per 512-token block "
     "(trace.hash_block_tokens), 2 here"),
], ids=["unsorted", "infinite-time", "huge-prompt", "missing-output", "hash-words", "nested-token-ids",
        "hash-ids-per-block"])
def test_bad_request_traces(tmp_path, capsys, edit, text, message):
    f = _serve_file(tmp_path, edit)
    name = yaml.safe_load(f.read_text())["serving"]["trace"]["path"]
    (tmp_path / name).write_text(text)
    line = refused(capsys, ["serve", str(f), "--hw", "a6000", "-q"], tmp_path)
    assert line == f"error: {tmp_path / name}: {message}"


@pytest.mark.parametrize("slo, message", [
    ("ttft_p90=.nan", "--slo 'ttft_p90=.nan': expected METRIC=SECONDS with a positive, finite number, e.g. ttft_p90=0.2"),
    ("ttft_p90=.inf", "--slo 'ttft_p90=.inf': expected METRIC=SECONDS with a positive, finite number, e.g. ttft_p90=0.2"),
    ("power_p90=1", "--slo: power_p90: unknown SLO metric; use <metric>_<stat> with metric in ttft, tpot, tbt, e2e, "
                    "queue and stat in mean, p50, p90, p99, max (e.g. ttft_p90)"),
], ids=["nan", "inf", "unknown-metric"])
def test_find_capacity_with_a_bad_slo(tmp_path, capsys, slo, message):
    f = _serve_file(tmp_path)
    assert refused(capsys, ["serve", str(f), "--hw", "a6000", "-q", "--find-capacity", "--slo", slo], tmp_path) == \
        f"error: {message}"


def test_set_adds_a_section_the_file_lacks_and_still_names_unknown_keys(tmp_path, capsys):
    f = _serve_file(tmp_path)
    spec = load_serve_file(f, {"serving.slo.ttft_p90": 0.2, "serving.prefix_caching.enabled": True})
    assert spec.serving.slo == {"ttft_p90": 0.2} and spec.serving.prefix_caching.enabled
    assert refused(capsys, ["serve", str(f), "--hw", "a6000", "-q", "--set", "serving.bogus.x=1"], tmp_path) == \
        f"error: {f} (with serving.bogus.x overridden): serving.bogus: unknown key; keys here: arrivals, lengths, trace, " \
        "scheduler, prefix_caching, " \
        "speculative, slo, router, disaggregated, deployment"


@pytest.mark.parametrize("edit, setting, message", [
    (None, "hw.units.gpu.efficiency.compute_ramp_s=1e300", "the simulated iteration time is nan s: a rate or size in "
     "the hardware ({hw}) is out of any physical range"),
    (lambda s: s.update(disaggregated=dict(prefill=dict(hw="a6000"), decode=dict(hw="a6000"),
                                           transfer=dict(bandwidth_bytes_per_s=1e6, latency_s=1e306))), None,
     "the simulated finish time is 2e+307 s: a rate or size in the hardware (serving.disaggregated: its presets "
     "or transfer link) is out of any physical range"),
    # below a megabyte a second the schema refuses the link itself, naming the key (a unit left out)
    (lambda s: s.update(disaggregated=dict(prefill=dict(hw="a6000"), decode=dict(hw="a6000"),
                                           transfer=dict(bandwidth_bytes_per_s=1, latency_s=1e-6))), None,
     "serving.disaggregated.transfer.bandwidth_bytes_per_s: 1 is below 1 MB/s: out of any physical range: a bare "
     "number is in B/s; give the unit, e.g. '1 GB/s' or '1 TB/s'"),
], ids=["bandwidth", "disaggregated-transfer", "disaggregated-transfer-unit"])
def test_serving_on_hardware_out_of_any_physical_range(tmp_path, capsys, edit, setting, message):
    # Ran to exit 0 with NaN latencies (null in the JSON) and throughputs of 1e-306 tokens/s.
    from hw_models.machine import resolve_path

    f = _serve_file(tmp_path, edit)
    hw = [] if edit else ["--hw", "a6000"]   # disaggregated pools name their own presets (--hw is reported unused)
    line = refused(capsys, ["serve", str(f), *hw, "-q", "--json", str(tmp_path / "o.json")]
                   + (["--set", setting] if setting else []), tmp_path)
    assert line == f"error: {f}: " + message.format(hw=resolve_path("a6000"))


def test_a_serving_sweep_with_a_swap_point_is_refused_before_anything_is_written(tmp_path, capsys):
    _serve_file(tmp_path, name="serve.yaml")
    spec = tmp_path / "sweep.yaml"
    spec.write_text(yaml.safe_dump(dict(name="s", workload="serve.yaml", hw="a6000",
                                        axes={"workload.serving.scheduler.preemption": ["recompute", "swap"]})))
    line = refused(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out"), "-q"], tmp_path)
    assert line.startswith(f"error: {spec}: point (workload.serving.scheduler.preemption=swap): ")
    assert line.endswith("vLLM V1 (kind: vllm) has no swap preemption, only recompute; kind: vllm-v0 (or sarathi) "
                         "supports swap")


def test_a_sweep_metric_no_point_reports_is_warned_and_names_print_literally(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sim.apps.sweep.run.make_executor", _threads)
    # a run metric the l40s does not record (no board-power model); an unknown name is refused up front now
    spec = make_spec(tmp_path, {"workload.batch": [1]}, metrics=["tpot_s", "decode_energy_per_token_j"])
    spec.write_text(spec.read_text().replace("name: t\n", "name: '[/b]x'\n").replace("hw: a6000", "hw: l40s"))
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--no-plots", "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("warning")] == [
        f"warning: {spec}: metrics[1]: 'decode_energy_per_token_j' is not a column of the results; left out"]
    assert "[/b]x: best points" in err


def test_a_serving_report_prints_names_literally(tmp_path, capsys):
    f = _serve_file(tmp_path)
    assert main(["serve", str(f), "--hw", "a6000", "--set", "name=[/b]x[red]"]) == 0   # was a rich MarkupError
    assert "[/b]x[red]: tinyllama-1.1b on a6000" in capsys.readouterr().out


# ---------------------------------------------------------------- devices, FIFOs and plans as inputs

@pytest.mark.parametrize("argv", [
    ["run", "{x}", "--hw", "a6000"],
    ["run", "{tiny}", "--hw", "{x}"],
    ["validate", "{x}", "--hw", "cpu_host"],
    ["serve", "{x}", "--hw", "a6000"],
], ids=["workload", "hardware", "trace", "serving-file"])
@pytest.mark.parametrize("kind", ["/dev/null", "fifo"])
def test_a_device_or_fifo_as_an_input_file(tmp_path, capsys, argv, kind):
    # Was "file not found" for a path that exists; /dev/zero would have been read forever.
    x = tmp_path / "pipe.yaml"
    if kind == "fifo":
        os.mkfifo(x)
    else:
        x = kind
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(TINY_WORKLOAD)
    line = refused(capsys, [a.format(x=x, tiny=tiny) for a in argv], tmp_path)
    assert line == f"error: {x}: not a regular file (a device, FIFO or socket)"


@pytest.mark.parametrize("plan, message", [
    ("{tp: true, topology: dgx_h100}", "parallel: tp: Input should be a valid integer"),   # ran as tp 1
    ("{tp: 3}", "parallel.tp: 3 does not divide tinyllama-1.1b's 32 heads and hidden size 2048"),
    ("{pp: 23}", "parallel.pp: 23 stages but tinyllama-1.1b has 22 layers"),
    ("{ep: 2}", "parallel.ep: 2, but tinyllama-1.1b is a dense model (no experts to place)"),
], ids=["bool-tp", "tp-3", "pp-23", "ep-dense"])
def test_parallel_plans_that_do_not_fit_the_model(tmp_path, capsys, plan, message):
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(TINY_WORKLOAD)
    line = refused(capsys, ["run", str(tiny), "--hw", "h100_sxm", "-q", "--set", f"parallel={plan}"], tmp_path)
    assert line == f"error: {tiny}: {message}"


def test_max_requests_raises_the_stream_limit():
    """The 1,000,000 default is a guard, not a ceiling: a file may raise it (issue 13 runs 1,000,000 requests)."""
    import numpy as np
    from sim.apps.serve import spec as s
    from sim.apps.serve.arrivals import arrival_times
    from sim.core.errors import ConfigError
    a = s.Constant(process="constant", rate=1.0, num_requests=5, max_requests=4)
    with pytest.raises(ConfigError, match="over max_requests 4"):
        arrival_times(a, np.random.default_rng(0))
    assert len(arrival_times(a.model_copy(update={"max_requests": 5}), np.random.default_rng(0))) == 5


def test_a_bursty_stream_runs_its_whole_duration():
    """A gamma stream of cv 10 at 10/s over 10 s holds more than 1.5 x its expected 100 + 64 = 214 arrivals in about
    a quarter of seeds (a renewal process of such gaps averages ~150); the stream was drawn 214 long and cut there,
    ending early without a word (a code review: one seed's last arrival at 2.2 s). Now every seed's stream runs to
    duration_s, and one whose count passes max_requests is refused."""
    import numpy as np
    from sim.apps.serve import spec as s
    from sim.apps.serve.arrivals import arrival_times
    from sim.core.errors import ConfigError
    a = s.Gamma(process="gamma", rate=10.0, cv=10.0, duration_s=10.0)
    counts = [len(t) for t in (arrival_times(a, np.random.default_rng(seed)) for seed in range(40))]
    assert max(counts) > 214 and all(c >= 1 for c in counts)
    assert 100 < np.mean(counts) < 220   # renewal theory: 1 + 100 + (cv^2 - 1) / 2 = 150.5, seeds scatter it
    both = s.Poisson(process="poisson", rate=1.0, num_requests=10, duration_s=100.0)   # whichever comes first
    assert len(arrival_times(both, np.random.default_rng(0))) == 10
    one_burst = s.Burst(process="burst", size=8, interval_s=0.0, duration_s=10.0)      # all at 0: the burst, whole
    assert len(arrival_times(one_burst, np.random.default_rng(0))) == 8
    small = a.model_copy(update={"max_requests": 120})   # expected 100 passes the first check; a burst does not
    with pytest.raises(ConfigError, match="more than max_requests 120 requests arrive within 10 s"):
        for seed in range(40):
            arrival_times(small, np.random.default_rng(seed))


@pytest.mark.parametrize("preset", ["a6000_offload", "flexgen_t4"])
def test_offload_refuses_continuous_batching_and_says_why(tmp_path, capsys, preset):
    """An offload preset serves FlexGen blocks under the static scheduler only (tests/test_offload_serve.py);
    the file's vllm scheduler is refused in one line at the file's key (it named the preset's file, which a serving
    trial read as the preset being wrong) that names the kind, the scheduler and the reason."""
    f = _serve_file(tmp_path)
    line = refused(capsys, ["serve", str(f), "--hw", preset], tmp_path)
    assert line.startswith(f"error: {f}: serving.scheduler.kind: vllm: {preset} is kind offload, which serves under "
                           "static only: a FlexGen block streams every layer's weights once per step")


@pytest.mark.parametrize("output, rejected", [(8, 0), (9, 20)])
def test_requests_longer_than_the_context_are_rejected_and_counted(tmp_path, output, rejected):
    """tinyllama-1.1b's context is 2048 tokens: 2040 + 8 fits, 2040 + 9 is refused (as vLLM answers
    "maximum context length"), counted, and never scheduled; a stream of them all fails (exit 2, nothing written)."""
    from sim.apps.serve.run import serve
    from sim.apps.serve.spec import load_serve_file
    from hw_models.machine import load_machine

    def edit(s):
        s["lengths"] = dict(prompt=dict(dist="fixed", value=2040), output=dict(dist="fixed", value=output))
    f, out = _serve_file(tmp_path, edit), tmp_path / "r.json"
    assert main(["serve", str(f), "--hw", "a6000", "--json", str(out)]) == (2 if rejected == 20 else 0)
    assert out.exists() == (rejected < 20)
    s = serve(load_serve_file(f), load_machine("a6000"))[1]
    assert (s["rejected"], s["completed"]) == (rejected, 20 - rejected)


def test_a_scheduler_without_kind_is_the_default_vllm():
    """`scheduler: {max_num_seqs: 4}` (or --set serving.scheduler.max_num_seqs=4 on a file without the section)
    said only "Unable to extract tag using discriminator 'kind'"; it is the default scheduler with that option."""
    from sim.apps.serve.spec import serve_file_from_dict
    raw = json.loads(json.dumps(SERVE))
    raw["serving"]["scheduler"] = {"max_num_seqs": 4}
    sched = serve_file_from_dict(raw, "s.yaml").serving.scheduler
    assert (sched.kind, sched.max_num_seqs) == ("vllm", 4)


def test_an_unknown_stack_is_told_at_the_workload_file(tmp_path, capsys):
    """A serving trial: `stack: vllm2` was refused without naming the file that set it."""
    f = _serve_file(tmp_path)
    line = refused(capsys, ["serve", str(f), "--hw", "h100_sxm", "--set", "stack=vllm2"], tmp_path)
    assert line.startswith(f"error: {f}: stack: unknown software stack 'vllm2'; stacks: ")


def test_a_closed_loop_key_of_another_process_names_the_process(capsys):
    """`rate` under `process: closed` read "unknown key" (an architect's trial): the line names the process."""
    w = ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml"
    closed = "serving.arrivals={process: closed, concurrency: 4, num_requests: 10, rate: 3}"
    assert main(["serve", str(w), "--hw", "h100_sxm", "-q", "--set", closed]) == 2
    # and, since the tag picks the union's member, the keys that member takes
    assert capsys.readouterr().err.strip() == (f"error: {w} (with serving.arrivals overridden): serving.arrivals.rate: "
                                               "unknown key for process: closed; "
                                               "keys here: process, concurrency, num_requests, think_time_s, "
                                               "warmup_requests, max_connections, seed, max_requests")


def test_more_clients_than_requests_is_warned(capsys):
    w = ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml"
    closed = "serving.arrivals={process: closed, concurrency: 100, num_requests: 10}"
    assert main(["serve", str(w), "--hw", "h100_sxm", "-q", "--set", closed]) == 0
    assert "serving.arrivals.concurrency 100 exceeds num_requests 10: only 10 clients ever send" in \
        capsys.readouterr().err


@pytest.mark.parametrize("prompt, message", [
    ("{dist: fixed, value: 100, min: 200}", "serving.lengths.prompt: value 100 is outside min 200 .. max 1000000"),
    ("{dist: lognormal, mean: 100, cv: 1, min: 300, max: 200}", "serving.lengths.prompt: min 300 is above max 200")])
def test_a_length_its_clip_contradicts_is_refused(capsys, prompt, message):
    """`value: 100, min: 200` ran every prompt at 200 (a serving engineer's trial)."""
    w = ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml"
    assert main(["serve", str(w), "--hw", "h100_sxm", "-q", "--set", f"serving.lengths.prompt={prompt}"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {w} (with serving.lengths.prompt overridden): {message}"


def test_a_closed_loop_search_whose_first_wave_decides_the_percentile_says_so():
    """All N clients send at t = 0: with 5 requests a client that wave is a fifth of the stream, more than p90's tail,
    and a trial's search read 18 clients against 247 at 25 a client. Twice the tail is the line: p90 needs 20."""
    from sim.apps.serve.capacity import first_wave

    slo = {"ttft_p90": 0.3, "tpot_mean": 0.05}
    assert "raise serving.arrivals.num_requests to 20 a client" in first_wave(slo, 5)
    assert "can decide ttft_p90" in first_wave(slo, 19)
    assert first_wave(slo, 20) is None
    assert "to 200 a client" in first_wave({"e2e_p99": 1.0}, 100)


def test_a_closed_loop_of_identical_requests_is_warned(capsys):
    w = ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml"
    sets = ["--set", "serving.arrivals={process: closed, concurrency: 4, num_requests: 8}",
            "--set", "serving.lengths={prompt: {dist: fixed, value: 512}, output: {dist: fixed, value: 16}}"]
    assert main(["serve", str(w), "--hw", "h100_sxm", "-q", *sets]) == 0
    assert "every request is the same length, so the 4 clients run in lock-step waves" in capsys.readouterr().err


def test_an_slo_below_the_stack_s_request_delay_says_why_no_load_meets_it(tmp_path, capsys):
    """sglang's fitted delay per request behind Dynamo is 109.7 ms (hw_models/stack/presets/sglang.yaml): a ttft_p90 of 0.1 s
    cannot be met at any load, and the search said only "not met even at 1 clients" (a serving engineer's trial)."""
    w = ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml"
    sets = ["--set", "stack=sglang", "--set", "serving.scheduler={kind: sglang}", "--set", "serving.deployment=dynamo",
            "--set", "serving.arrivals={process: closed, concurrency: 4, num_requests: 40}"]
    assert main(["serve", str(w), "--hw", "h100_sxm", "-q", *sets, "--find-capacity", "--slo", "ttft_p90=0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not met even at 1 client: ttft_p90 at " in err   # one client, not "1 clients"; and the SLO it misses
    assert err.endswith(
        "; ttft_p90 is below the 109.7 ms every request waits before the engine sees it (the stack's engine_overheads "
        "per_request_s for this deployment: docs/serving.md)")


@pytest.mark.parametrize("line, shown", [('{"timestamp": 0, "input_length": true, "output_length": 5}', "true, a boolean"),
                                         ('{"timestamp": 0, "input_length": "1954", "output_length": 5}',
                                          '"1954", a string')])
def test_a_json_trace_count_that_is_not_a_number_is_refused(tmp_path, line, shown):
    """A hostile-input trial: a mooncake line's `"input_length": true` ran as a 1-token request and "1954" as a
    number, where docs/errors.md says such counts are refused."""
    from sim.apps.serve.traces import read_trace
    from sim.core.errors import ConfigError

    path = tmp_path / "t.jsonl"
    path.write_text(line + '\n{"timestamp": 1, "input_length": 20, "output_length": 5}\n')
    with pytest.raises(ConfigError, match=f"input_length: row 1 has {shown}"):
        read_trace(path)

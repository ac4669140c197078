"""Issue 34, items 3-5: the serving and trace inputs that raised a traceback (or were accepted
with bad timestamps) now get one line naming the file and key (exit 2, nothing written), and
what a serving run reports obeys its invariants (every request completed or rejected,
utilisation at most 1, large timestamps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sim.apps.cli import main
from tests.conftest import write_serving_file
from tests.robust_helpers import refused
from tests.test_robust_serve import SERVE


def _serve_file(tmp_path, edit=None):
    return write_serving_file(tmp_path, SERVE, edit)


def _trace(name, fmt):
    def edit(s):
        s.update(arrivals=dict(process="trace"), trace=dict(path=name, format=fmt))
        del s["lengths"]
    return edit


# ---------------------------------------------------------------- tracebacks -> one line

_MC_ROW = '{"timestamp": 0, "input_length": 3, "output_length": 2}\n'

BAD = {   # case: (serving edit, trace file name and text or None, the message after "error: FILE: ")
    "negative seed": (lambda s: s["arrivals"].update(seed=-1), None,   # numpy ValueError
                      "{f}: serving.arrivals.seed: Input should be greater than or equal to 0"),
    "swap without a host link": (lambda s: s["scheduler"].update(kind="vllm-v0", preemption="swap"), None,
                                 # AttributeError: 'Machine' object has no attribute 'host'
                                 "{f}: serving.scheduler.preemption: swap needs a host link, and a6000 has none; set "
                                 "serving.scheduler.swap_bandwidth_bytes_per_s (e.g. 25 GB/s for PCIe 4.0 x16)"),
    "mooncake line that is an array": (_trace("t.jsonl", "mooncake"),   # TypeError in pandas
                                       ("t.jsonl", '{"timestamp": 0, "input_length": 3, "output_length": 2}\n[1, 2]\n'),
                                       "{t}: line 2 is an array; expected one JSON object per line, e.g. "
                                       '{{"timestamp": 0, "input_length": 100, "output_length": 20}}'),
    # json's "line 1" was the line within the one row parsed; a blank line made the count one short.
    # Columns: the 33-character cut row ends before column 34; column 17 is the quote where a comma belongs.
    "mooncake row cut short": (_trace("t.jsonl", "mooncake"),
                               ("t.jsonl", _MC_ROW * 2 + '{"timestamp": 2, "input_length": '),
                               "{t}: line 3, column 34: not valid JSON (Expecting value)"),
    "mooncake bad row after a blank line": (_trace("t.jsonl", "mooncake"),
                                            ("t.jsonl", _MC_ROW + "\n" + '{"timestamp": 1 "input_length": 3}\n'),
                                            "{t}: line 3, column 17: not valid JSON (Expecting ',' delimiter)"),
    "mooncake array after a blank line": (_trace("t.jsonl", "mooncake"),
                                          ("t.jsonl", _MC_ROW + "\n  \n[1, 2]\n" + _MC_ROW),
                                          "{t}: line 4 is an array; expected one JSON object per line, e.g. "
                                          '{{"timestamp": 0, "input_length": 100, "output_length": 20}}'),
    "azure offsets out of order": (_trace("t.csv", "azure"),   # 18:15:47+01:00 is 17:15:47 UTC: an hour earlier
                                   ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\n"
                                             "2023-11-16 18:15:47+01:00,10,2\n"),
                                   "{t}: TIMESTAMP: timestamps not sorted (row 2 comes before the row above it)"),
    "azure words": (_trace("t.csv", "azure"),
                    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\nyesterday,10,2\n"),
                    "{t}: TIMESTAMP: row 2 is not a date-time"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_serving_inputs_that_raised_a_traceback(tmp_path, capsys, case):
    edit, trace, message = BAD[case]
    f = _serve_file(tmp_path, edit)
    if trace:
        (tmp_path / trace[0]).write_text(trace[1])
    line = refused(capsys, ["serve", str(f), "--hw", "a6000", "-q", "--json", str(tmp_path / "o.json")], tmp_path)
    assert line == "error: " + message.format(f=f, t=tmp_path / (trace[0] if trace else ""))


def test_micro_batches_without_pipeline_stages_is_one_line(tmp_path, capsys):
    """Serving cuts an iteration into pp micro-batches, the batches vLLM keeps in flight
    (hw_models.gpu.parallel.pipelined_iteration); `sim run`'s micro_batches key is refused in one line, as speculative
    decoding under pp."""
    f = write_serving_file(tmp_path, {**SERVE, "parallel": {"tp": 2, "micro_batches": 2, "topology": "a6000_x8_pcie"}})
    line = refused(capsys, ["serve", str(f), "--hw", "a6000", "-q"], tmp_path)
    assert line == (f"error: {f}: parallel.micro_batches: 2: sim serve cuts each iteration into pp micro-batches, "
                    "the batches vLLM keeps in flight (docs/parallelism.md); leave micro_batches out")
    spec = {**SERVE, "parallel": {"pp": 2, "topology": "a6000_x8_pcie"},
            "serving": {**SERVE["serving"], "speculative": {"draft": "tinyllama-1.1b", "k": 2, "alpha": 0.7}}}
    f = write_serving_file(tmp_path, spec)
    line = refused(capsys, ["serve", str(f), "--hw", "a6000", "-q"], tmp_path)
    assert line == f"error: {f}: serving.speculative: not modelled with parallel.pp 2 (pipeline parallelism)"


def test_negative_sweep_seed_is_refused(tmp_path, capsys):
    from tests.test_sweep import make_spec

    spec = make_spec(tmp_path, {"workload.batch": {"min": 1, "max": 8}}, mode="random", samples=2, seed=-3)
    line = refused(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out"), "-q"], tmp_path)
    assert line == f"error: {spec}: seed: Input should be greater than or equal to 0"


def _run_json(tmp_path, f) -> dict:
    out = tmp_path / "o.json"
    assert main(["serve", str(f), "--hw", "a6000", "-q", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_azure_rows_with_different_offsets_are_one_timeline(tmp_path):
    # pandas refused mixed offsets with a ValueError traceback. 18:15:46.5 UTC and 19:15:47+01:00
    # (18:15:47 UTC) are 0.5 s apart: the second request arrives 0.5 s after the first.
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5+00:00,64,8\n"
                                    "2023-11-16 19:15:47+01:00,64,8\n")
    f = _serve_file(tmp_path, _trace("t.csv", "azure"))
    from sim.apps.serve.traces import read_trace

    assert read_trace(tmp_path / "t.csv", "azure").arrival_s.tolist() == [0.0, 0.5]
    s = _run_json(tmp_path, f)
    assert s["completed"] == 2 and s["duration_s"] > 0.5


def test_json_lines_are_split_on_newlines_only(tmp_path):
    # A raw U+2028 inside a JSON string is valid JSON; splitlines() broke the row there ("line 1 is not valid
    # JSON (Unterminated string ...)"). CRLF line ends and a blank line between rows are read as before.
    row = '{"timestamp": %d, "input_length": 3, "output_length": 2, "note": "a\u2028b"}\r\n'
    (tmp_path / "t.jsonl").write_text(row % 0 + "\r\n" + row % 1000, encoding="utf-8")
    from sim.apps.serve.traces import read_trace

    assert read_trace(tmp_path / "t.jsonl", "mooncake").arrival_s.tolist() == [0.0, 1.0]


def test_large_absolute_timestamps_keep_their_spacing(tmp_path):
    # Near 1e17 s a float's spacing is 16 s: every request's TTFT came out 0 and the throughput 0.
    # Relative to the first row, subtracted exactly, the arrivals are 0, 0.5 and 1 s.
    (tmp_path / "t.csv").write_text("arrival_s,prompt_len,output_len\n100000000000000000,64,8\n"
                                    "100000000000000000.5,64,8\n100000000000000001,64,8\n")
    from sim.apps.serve.traces import read_trace

    assert read_trace(tmp_path / "t.csv", "plain").arrival_s.tolist() == [0.0, 0.5, 1.0]
    small = tmp_path / "small.csv"
    small.write_text("arrival_s,prompt_len,output_len\n0,64,8\n0.5,64,8\n1,64,8\n")
    big = _run_json(tmp_path, _serve_file(tmp_path, _trace("t.csv", "plain")))
    same = _run_json(tmp_path, _serve_file(tmp_path, _trace("small.csv", "plain")))
    assert big["completed"] == 3 and big["latency"]["ttft"]["mean"] > 0 and big["throughput_tok_s"] > 0
    assert big["latency"] == same["latency"] and big["throughput_tok_s"] == same["throughput_tok_s"]


def test_epoch_nanoseconds_are_exact(tmp_path):
    # LLMServingSim's arrival_time_ns as epoch nanoseconds (1.7e18): 1 ms apart, exactly.
    (tmp_path / "t.jsonl").write_text('{"arrival_time_ns": 1700000000000000001, "input_toks": 3, "output_toks": 2}\n'
                                      '{"arrival_time_ns": 1700000000001000001, "input_toks": 3, "output_toks": 2}\n')
    from sim.apps.serve.traces import read_trace

    assert read_trace(tmp_path / "t.jsonl", "llmservingsim").arrival_s.tolist() == [0.0, 0.001]
    assert yaml  # (imported for the fuzz helpers below)


# ---------------------------------------------------------------- item 4: parquet, --find-capacity outputs

def test_requests_parquet_is_written_on_the_plain_install(tmp_path):
    import pandas as pd

    from tests.test_sweep_serving import SERVE as TINY_SERVE

    f = write_serving_file(tmp_path, TINY_SERVE)
    assert main(["serve", str(f), "--hw", "a6000", "-q", "--requests", str(tmp_path / "r.parquet")]) == 0
    df = pd.read_parquet(tmp_path / "r.parquet")
    assert len(df) == TINY_SERVE["serving"]["arrivals"]["num_requests"] and (df["status"] == "completed").all()


def test_parquet_without_pyarrow_is_one_line_before_the_run(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)   # import pyarrow -> ImportError, as on an install without it
    f = _serve_file(tmp_path)
    line = refused(capsys, ["serve", str(f), "--hw", "a6000", "-q", "--requests", str(tmp_path / "r.parquet")], tmp_path)
    assert line == (f"error: --requests {tmp_path / 'r.parquet'}: writing Parquet needs pyarrow, which this install "
                    "lacks (pip install pyarrow, or reinstall sim); or give a .csv name")


def test_find_capacity_writes_every_output_it_accepts(tmp_path):
    # --requests and --chrome-trace were accepted with --find-capacity and written nowhere.
    from tests.test_sweep_serving import SERVE as TINY_SERVE

    raw = json.loads(json.dumps(TINY_SERVE))
    raw["serving"]["slo"] = dict(ttft_p90=0.0004)   # the tiny model's first token takes about 0.25 ms unloaded
    raw["serving"]["arrivals"]["num_requests"] = 24
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(raw))
    out = {n: tmp_path / n for n in ("c.json", "r.csv", "t.json")}
    assert main(["serve", str(f), "--hw", "a6000", "-q", "--find-capacity", "--json", str(out["c.json"]),
                 "--requests", str(out["r.csv"]), "--chrome-trace", str(out["t.json"])]) == 0
    cap = json.loads(out["c.json"].read_text())
    assert cap["capacity_rate_req_s"] > 0
    rows = out["r.csv"].read_text().splitlines()
    assert len(rows) == 1 + 24                                   # header + one row per request of the capacity run
    assert json.loads(out["t.json"].read_text())["traceEvents"]


# ---------------------------------------------------------------- item 5: serving invariants

def _orca(tmp_path, n=40):
    # Prompts of 100-3,000 tokens under a 1,000-token budget: Orca does not chunk.
    def edit(s):
        s["arrivals"].update(num_requests=n)
        s["lengths"]["prompt"] = dict(dist="uniform", low=100, high=3000)
        s["scheduler"] = dict(kind="orca", max_num_batched_tokens=1000)
    return _serve_file(tmp_path, edit)


def test_orca_rejects_a_prompt_over_its_budget_with_the_reason(tmp_path):
    # Such a request waited forever and blocked every one behind it: 40 of 40 unfinished, exit 0.
    s = _run_json(tmp_path, _orca(tmp_path))
    long = sum(1 for p in _prompts(tmp_path) if p > 1000)
    assert long > 0 and s["completed"] + s["rejected"] == s["requests"] == 40
    assert s["rejected"] == long and s["completed"] == 40 - long
    assert s["rejected_reasons"] == {"prompt longer than max_num_batched_tokens (Orca does not chunk)": long}


def _prompts(tmp_path) -> list[int]:
    from sim.apps.serve.arrivals import make_requests
    from sim.apps.serve.spec import load_serve_file

    return make_requests(load_serve_file(tmp_path / "s.yaml")).prompt_len.tolist()


def test_a_request_left_unfinished_fails_loudly(tmp_path, monkeypatch):
    # The old Orca: never admitted, never rejected. The run must not exit 0 with it unfinished.
    from sim.apps.serve.schedulers import orca
    from sim.apps.serve.invariants import InvariantError

    monkeypatch.setattr(orca.Orca, "refusal", lambda self, r: None)
    monkeypatch.setattr(orca.Orca, "fits_ever", lambda self, r: True)
    with pytest.raises(InvariantError, match=r"of 40 requests neither completed nor were rejected"):
        main(["serve", str(_orca(tmp_path)), "--hw", "a6000", "-q"])


def test_busy_shares_stay_at_most_one_with_pools_and_replicas(tmp_path):
    # engine_busy summed every instance's iterations over one wall time: 3.5 with five instances.
    def disagg(s):
        s["arrivals"].update(rate=400, num_requests=60)
        s["disaggregated"] = dict(prefill=dict(hw="h100_sxm", replicas=2), decode=dict(hw="a6000", replicas=3),
                                  transfer=dict(bandwidth_bytes_per_s=25e9))

    def replicas(s):
        s["arrivals"].update(rate=400, num_requests=60)
        s["router"] = dict(replicas=3)
    for edit in (disagg, replicas):
        s = _run_json(tmp_path, _serve_file(tmp_path, edit))
        assert s["completed"] == 60
        shares = [s["engine_busy"], *s["utilization"].values()]
        for side in ("prefill", "decode"):
            for inst in s.get("disaggregated", {}).get(side, []):
                shares += [inst["busy"], *inst["utilization"].values()]
        shares += [x for r in s.get("replicas", []) for x in (r["busy"], *r["utilization"].values())]
        assert all(0 <= x <= 1 + 1e-9 for x in shares), shares
        assert s["engine_busy"] > 0.3     # busy, so a share summed over instances would have passed 1


def test_a_crawling_budget_is_warned_with_its_iteration_count(tmp_path, capsys):
    # 20 requests of 64 + 8 tokens under a budget of 1 token: 1,440 iterations at least; vLLM refuses it.
    f = _serve_file(tmp_path, lambda s: s["scheduler"].update(kind="sarathi", max_num_batched_tokens=1))
    assert main(["serve", str(f), "--hw", "a6000", "-q"]) == 0
    err = capsys.readouterr().err
    assert err.strip() == (f"warning: {f}: serving.scheduler.max_num_batched_tokens: 1 tokens per iteration: the "
                           "stream needs at least 1,440 iterations (1,440 tokens in the stream over 1 a step); vLLM "
                           "refuses a budget below max_num_seqs (256): \"max_num_batched_tokens must be greater than "
                           "or equal to max_num_seqs\"")


def test_the_crawl_warning_names_the_bound_it_counts():
    """82,654 tokens under a 512-token budget need 162 steps, but the longest output (942 tokens) needs 942: the
    warning said "82,654 tokens in the stream: at least 942 iterations" (a trial's finding)."""
    from types import SimpleNamespace

    import numpy as np

    from sim.apps.serve.invariants import budget_warning
    file = SimpleNamespace(source="s.yaml", serving=SimpleNamespace(scheduler=SimpleNamespace(
        kind="sarathi", max_num_batched_tokens=512, max_num_seqs=256)))
    class Reqs(SimpleNamespace):
        def __len__(self):
            return len(self.prompt_len)
    reqs = Reqs(prompt_len=np.array([80_000, 712]), output_len=np.array([1_000_000, 942]))
    assert budget_warning(file, reqs).endswith("needs at least 1,000,000 iterations (its longest output "
                                               "(1,000,000 tokens, one a step))")


# ---------------------------------------------------------------- Chrome traces with bad timestamps

@pytest.mark.parametrize("ts, message", [
    (1e300, "ends 1e+294 s after the trace's first event; a profiled run spans less than 24 hours (a corrupt ts or dur?)"),
    (True, "ts: expected a duration, got True"),
])
def test_a_chrome_trace_with_bad_timestamps_is_refused(tmp_path, capsys, ts, message):
    # Both were accepted for validation: a kernel is attributed by correlation id, not by time.
    import shutil

    from tests.conftest import ROOT

    src = ROOT / "tests" / "data" / "synthetic_cuda_L1"
    data = json.loads(Path(f"{src}.trace.json").read_text())
    data["traceEvents"][3]["ts"] = ts
    (tmp_path / "t.trace.json").write_text(json.dumps(data))
    shutil.copy(f"{src}.meta.json", tmp_path / "t.meta.json")
    line = refused(capsys, ["validate", str(tmp_path / "t.trace.json"), "--hw", "a6000"], tmp_path)
    assert line == f"error: {tmp_path / 't.trace.json'}: traceEvents[3] ('kernel_embed'): {message}"


def test_an_unknown_draft_names_its_own_key(capsys):
    """`--set serving.speculative.draft=nonexistent` read "model: unknown model", the target's key (a trial)."""
    from tests.conftest import ROOT
    spec = str(ROOT / "workloads" / "serve_llama2_7b_speculative.yaml")
    err = refused(capsys, ["serve", spec, "--hw", "a6000", "--set", "serving.speculative.draft=nonexistent"])
    assert err.startswith(f"error: {spec}: serving.speculative.draft: unknown model 'nonexistent'; presets: ")


def test_a_miss_that_rounds_to_the_limit_reads_as_a_miss():
    """A failing step's 1.000053 and a passing 0.9977 both read "1.00x of limit" (a trial's finding)."""
    from sim.apps.serve.report import of_limit
    assert of_limit(1.000053) == "1.000053x of limit (over)"
    assert of_limit(0.9977) == "1.00x of limit"
    assert of_limit(1.06) == "1.06x of limit"


def test_the_capacity_headline_is_the_rate_run_and_says_transient():
    """The headline printed 59.06 of the 59.0625 the search ran (a rerun at 59.06 missed the SLO), and a transient
    capacity was said only in a warning above the table (a trial's finding)."""
    from rich.console import Console

    from sim.apps.serve.report import print_capacity
    c = dict(knob="rate", rate=59.0625, goodput_req_s=29.03, goodput_tok_s=1e4, window_s=31.2, arrival_window_s=16.9,
             within_slo=0.9, limiting="ttft_p90", limit_ratio=1.06, points=[{}] * 9, summary={},
             transient="the run at capacity drained ...")
    con = Console(record=True, width=200)
    print_capacity(c, con)
    assert ("59.0625 requests/s (transient: the stream's start or end decides it; warning above)"
            in con.export_text())


def test_a_stream_past_the_clocks_resolution_is_refused(capsys):
    """A rate of 1e-12 ran on a 7.8 ms grid (float64 seconds at ~5e13 s) and reported 1020 W beside a 700 W limit
    (a trial's finding): a stream longer than 1e9 s is refused."""
    from tests.conftest import ROOT
    f = str(ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml")
    err = refused(capsys, ["serve", f, "--hw", "h100_sxm", "--set", "serving.arrivals.rate=1e-12"])
    assert err == (f"error: {f} (with serving.arrivals.rate overridden): serving.arrivals: the stream spans 1e+15 s, "
                   "past 1e+09 s (~32 years), where the "
                   "simulated clock loses its microsecond resolution; raise the rate or shorten the stream")


def test_a_misspelt_tag_key_or_serving_section_is_named(tmp_path, capsys):
    """`arrivals: {proces: poisson}` had read "Unable to extract tag using discriminator 'process'" and a top-level
    `servng:` only "serving: required key is missing" (a serving trial): each names the key written and the one meant."""
    arrivals = {k: v for k, v in SERVE["serving"]["arrivals"].items() if k != "process"}
    f = write_serving_file(tmp_path, {**SERVE, "serving": {**SERVE["serving"], "arrivals": {"proces": "poisson",
                                                                                             **arrivals}}})
    assert refused(capsys, ["serve", str(f), "--hw", "a6000", "-q"], tmp_path) == \
        f"error: {f}: serving.arrivals.proces: unknown key (did you mean process?)"
    f = write_serving_file(tmp_path, {**SERVE, "serving": {**SERVE["serving"], "arrivals": arrivals}})
    assert refused(capsys, ["serve", str(f), "--hw", "a6000", "-q"], tmp_path) == \
        f"error: {f}: serving.arrivals.process: required key is missing"
    f = write_serving_file(tmp_path, {"servng" if k == "serving" else k: v for k, v in SERVE.items()})
    assert refused(capsys, ["serve", str(f), "--hw", "a6000", "-q"], tmp_path) == \
        f"error: {f}: servng: unknown key (did you mean serving?)"

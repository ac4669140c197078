"""`sim validate-serving`: bad input is one line and exit 2; the silicon-sample reader keeps the
replayable rows and says why it skips the others."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from sim.apps.cli import main
from sim.apps.serve.validate_readers import read_silicon

ROW = dict(id="r1", backend="trtllm", model_path="Qwen/Qwen3-32B", system="h100_sxm", mode="agg", isl=1024, osl=128,
           gemm_quant_mode="fp8", batch_size=16, tp_size=2, pp_size=1, attention_dp_size=None,
           silicon_ttft_ms=150.0, silicon_tpot_ms=10.0)


def test_silicon_reader_keeps_replayable_rows_and_says_why_not(tmp_path):
    rows = [ROW, {**ROW, "id": "r2", "mode": "disagg"}, {**ROW, "id": "r3", "model_path": "deepseek-ai/DeepSeek-R1"},
            {**ROW, "id": "r4", "system": "b200_sxm"}]
    path = tmp_path / "s.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    runs, skipped = read_silicon(path, {"h100_sxm"})
    assert [r.name for r in runs] == ["r1"]
    r = runs[0]
    assert (r.engine, r.tp, r.concurrency, r.quant) == ("trtllm", 2, 16, "fp8")
    assert r.measured == {"ttft_s": 0.15, "tpot_s": 0.01, "e2e_s": 0.15 + 0.01 * 127}
    assert dict(skipped) == {"r2": "disaggregated serving (prefill and decode workers) is not replayed",
                             "r3": "model deepseek-ai/DeepSeek-R1 has no config here"}


def test_a_measurement_published_twice_counts_once_on_the_training_side(tmp_path):
    """Two ids, one setup, the same measured TTFT and TPOT to the last digit: one run, and the copy the overhead
    fit reads where the split parts them (the table carries 13 such vLLM gpt-oss-120b pairs, a trial)."""
    from sim.apps.serve.overhead_fit import in_training
    ids = [f"2026_04_06_x_{i}" for i in range(40)]
    train = next(i for i in ids if in_training(i))
    held = next(i for i in ids if not in_training(i))
    rows = [{**ROW, "id": held}, {**ROW, "id": train}, {**ROW, "id": "r3", "silicon_tpot_ms": 10.5}]
    path = tmp_path / "s.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    runs, skipped = read_silicon(path, {"h100_sxm"})
    assert [r.name for r in runs] == [train, "r3"]
    assert skipped == [(held, "a second publication of a kept row's measurement (the same setup, TTFT and TPOT to "
                              "the last digit)")]


def test_bad_inputs_are_one_line_and_exit_2(tmp_path, capsys):
    other = tmp_path / "x.csv"
    other.write_text("a,b\n1,2\n")
    bench = tmp_path / "b.json"
    bench.write_text("{}")
    for argv in ([str(tmp_path / "none.csv"), "--hw", "h100_sxm"], [str(other), "--hw", "h100_sxm"],
                 [str(bench), "--hw", "h100_sxm"]):
        assert main(["validate-serving", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err and "\n" not in err and "Traceback" not in err


def test_a_json_that_is_not_json_says_so_before_asking_what_served_it(tmp_path, capsys):
    """Issue 29: a binary file named .json was answered 'a benchmark JSON does not say what served it'."""
    binary = tmp_path / "random.json"
    binary.write_bytes(bytes(range(256)) * 4)       # 0x80 alone is no UTF-8 start byte
    text = tmp_path / "text.json"
    text.write_text("rows: [1, 2]\n")             # YAML, not JSON
    for path in (binary, text):
        for extra in ([], ["--engine", "vllm", "--model", "llama3-8b"]):
            assert main(["validate-serving", str(path), "--hw", "h100_sxm", *extra]) == 2
            err = capsys.readouterr().err.strip()
            assert "\n" not in err and "Traceback" not in err
            assert f"{path}: not JSON (" in err, err
    assert main(["validate-serving", str(tmp_path / "none.json"), "--hw", "h100_sxm"]) == 2
    assert capsys.readouterr().err.strip().endswith("none.json: not found")


def test_plots_folder_gets_the_scatter_and_the_error_plot(tmp_path, capsys):
    path = tmp_path / "s.csv"
    pd.DataFrame([{**ROW, "model_path": "meta-llama/Llama-3.1-8B-Instruct", "gemm_quant_mode": None, "tp_size": 1,
                   "batch_size": 2, "isl": 128, "osl": 8}]).to_csv(path, index=False)
    out = tmp_path / "plots"
    argv = ["validate-serving", str(path), "--hw", "h100_sxm", "--requests-per-client", "2", "--summary"]
    assert main([*argv, "--plots", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {"scatter.png", "errors_vs_concurrency.png"}
    assert all(p.stat().st_size > 1000 for p in out.iterdir())
    capsys.readouterr()
    assert main([*argv, "--plots", str(path)]) == 2      # a file, not a folder: one line, nothing run
    err = capsys.readouterr().err.strip()
    assert "is a file; expected a directory" in err and "\n" not in err


def test_every_output_is_checked_before_the_replays_and_written_together(tmp_path, capsys):
    """A --plot path matplotlib cannot write (s.xyz), or a folder, is one line and exit 2 with the --json not
    written; a plot in a folder that does not exist yet is written there (each had been a traceback after the
    replays, the JSON already written: a serving engineer's trial)."""
    path = tmp_path / "s.csv"
    pd.DataFrame([{**ROW, "model_path": "meta-llama/Llama-3.1-8B-Instruct", "gemm_quant_mode": None, "tp_size": 1,
                   "batch_size": 2, "isl": 128, "osl": 8}]).to_csv(path, index=False)
    argv = ["validate-serving", str(path), "--hw", "h100_sxm", "--requests-per-client", "2", "--summary", "-q"]
    out = tmp_path / "v.json"
    for plot, says in ((tmp_path / "s.xyz", "by the path's suffix"), (tmp_path, "is a directory")):
        assert main([*argv, "--json", str(out), "--plot", str(plot)]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and "\n" not in err and not out.exists()
    nested = tmp_path / "new" / "sub" / "s.svg"
    assert main([*argv, "--json", str(out), "--plot", str(nested)]) == 0
    assert out.exists() and nested.read_text().lstrip().startswith("<?xml")


def test_fp4_rows_on_hopper_are_skipped_with_the_reason(tmp_path):
    path = tmp_path / "s.csv"
    pd.DataFrame([{**ROW, "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4"}]).to_csv(path, index=False)
    runs, skipped = read_silicon(path, {"h100_sxm"})
    assert not runs and "nvfp4 weights on h100_sxm: no native FP4" in dict(skipped)["r1"]


def test_truncated_or_malformed_rows_are_skipped_with_the_reason(tmp_path):
    """A row cut short (a truncated file: its measured columns empty) or holding text where a number belongs is
    reported as not replayable, naming what is missing, instead of being simulated against NaN or raising."""
    row = dict(id="qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x128_c8_tp2_epnone_1", backend="vllm",
               model_path="Qwen/Qwen3-32B", system="h100_sxm", mode="agg", isl=1024, osl=128, gemm_quant_mode=None,
               batch_size=8, tp_size=2, pp_size=1, attention_dp_size=None, silicon_ttft_ms=120.0, silicon_tpot_ms=9.0)
    rows = [row, {**row, "id": "cut", "silicon_ttft_ms": None, "silicon_tpot_ms": None},
            {**row, "id": "text", "isl": "x"}, {**row, "id": "conc", "batch_size": "abc"}]
    path = tmp_path / "s.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    runs, skipped = read_silicon(path, {"h100_sxm"})
    assert [r.name for r in runs] == [row["id"]]
    why = dict(skipped)
    assert why["cut"] == "no positive silicon_ttft_ms, silicon_tpot_ms (a truncated or incomplete row)"
    assert why["text"] == "no positive isl (a truncated or incomplete row)"
    assert why["conc"] == "no TP size or concurrency"


def _cut_gzip(path, header: str, row: str, rows: int = 4000) -> None:
    """A gzip'd CSV cut at half its bytes: what a download or a copy that stopped early leaves."""
    import gzip
    data = gzip.compress((header + "\n" + "\n".join([row] * rows) + "\n").encode())
    path.write_bytes(data[: len(data) // 2])


def test_a_gzip_cut_short_is_one_line_naming_it(tmp_path, capsys):
    """A silicon table, an aiconfigurator op table and a serving trace whose .gz ends early: one line, exit 2,
    no EOFError traceback (pandas reads a gzip lazily, so even the header read can hit the cut)."""
    silicon = tmp_path / "silicon_sample_h100.csv.gz"
    _cut_gzip(silicon, "id,backend,model_path,system,mode,isl,osl,batch_size,tp_size,silicon_ttft_ms,silicon_tpot_ms",
              "r,vllm,Qwen/Qwen3-32B,h100_sxm,agg,1024,128,8,2,120.0,9.0")
    assert main(["validate-serving", str(silicon), "--hw", "h100_sxm"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "cannot read as CSV" in err and "truncated" in err
    table = tmp_path / "gemm_h100.csv.gz"
    _cut_gzip(table, "framework,version,kernel_source,m,n,k,gemm_dtype,latency_us", "vllm,0.14.0,x,1,4096,4096,bfloat16,10.0")
    assert main(["validate", "--input-format", "aic", str(table)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "cannot read as CSV" in err


def test_deployment_flag_moves_ttft_by_the_stacks_dynamo_delay(tmp_path, capsys):
    """--deployment dynamo serves every run behind Dynamo: a one-client run's TTFT moves by exactly the vllm
    stack's dynamo_per_request_s - per_request_s (a pure delay: no queue forms behind it); a case folder,
    which times TTFT from the engine's queue, refuses the flag in one line."""
    from hw_models.stack.spec import load_stack

    path = tmp_path / "s.csv"
    pd.DataFrame([{**ROW, "backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "gemm_quant_mode": None,
                   "tp_size": 1, "batch_size": 1, "isl": 128, "osl": 8}]).to_csv(path, index=False)
    argv = ["validate-serving", str(path), "--hw", "h100_sxm", "--requests-per-client", "2", "--workers", "1"]
    ttft = {}
    for dep in ("direct", "dynamo"):
        assert main([*argv, "--deployment", dep]) == 0
        (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| r1 |")]
        ttft[dep] = float(row.split("|")[8].split("/")[1])   # "TTFT ms meas/sim", printed to 0.1 ms
    eo = load_stack("vllm").engine_overheads
    assert eo.dynamo_per_request_s > eo.per_request_s
    assert ttft["dynamo"] - ttft["direct"] == pytest.approx((eo.dynamo_per_request_s - eo.per_request_s) * 1e3, abs=0.11)
    case = tmp_path / "case"
    case.mkdir()
    assert main(["validate-serving", str(case), "--hw", "h100_sxm", "--deployment", "dynamo"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--deployment" in err and "\n" not in err


def test_client_connections_flag_holds_the_excess_clients_in_a_pool(tmp_path, capsys):
    """--client-connections N: every closed-loop row is replayed with that client pool (serving.arrivals.
    max_connections). Two clients over one connection send one request at a time, so the second client's requests
    wait for a reply and the mean TTFT rises over the two-connection replay's; a case folder refuses the flag."""
    path = tmp_path / "s.csv"
    pd.DataFrame([{**ROW, "backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "gemm_quant_mode": None,
                   "tp_size": 1, "batch_size": 2, "isl": 128, "osl": 8}]).to_csv(path, index=False)
    argv = ["validate-serving", str(path), "--hw", "h100_sxm", "--requests-per-client", "2", "--workers", "1",
            "--json"]
    ttft = {}
    for pool in ("1", "2"):
        out = tmp_path / f"p{pool}.json"
        assert main([*argv, str(out), "--client-connections", pool]) == 0
        ttft[pool] = json.loads(out.read_text())["runs"][0]["sim"]["ttft_s"]
    assert ttft["1"] > ttft["2"] * 1.5
    case = tmp_path / "case"
    case.mkdir()
    capsys.readouterr()
    assert main(["validate-serving", str(case), "--hw", "h100_sxm", "--client-connections", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--client-connections" in err and "\n" not in err


def test_json_has_each_run_as_numbers_and_the_errors_reconcile(tmp_path):
    """--json: a run's measured and simulated means are numbers in seconds, its error is (sim - measured) /
    measured of them, the group's MAPE is the mean |error| of its runs, and a skipped row says why."""
    import json

    path = tmp_path / "s.csv"
    base = {**ROW, "model_path": "meta-llama/Llama-3.1-8B-Instruct", "gemm_quant_mode": None, "tp_size": 1,
            "batch_size": 2, "isl": 128, "osl": 8}
    pd.DataFrame([base, {**base, "id": "r2", "batch_size": 4, "silicon_ttft_ms": 40.0},
                  {**base, "id": "r3", "mode": "disagg"}]).to_csv(path, index=False)
    out = tmp_path / "v.json"
    assert main(["validate-serving", str(path), "--hw", "h100_sxm", "--requests-per-client", "2", "--summary",
                 "--workers", "1", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert [r["name"] for r in d["runs"]] == ["r1", "r2"] and d["runs"][1]["measured"]["ttft_s"] == 0.04
    for r in d["runs"]:
        for m, e in r["error"].items():
            assert e == pytest.approx(r["sim"][m] / r["measured"][m] - 1.0, rel=1e-9)
    (group,) = d["mape"]
    assert group["runs"] == 2 and group["ttft_s"] == pytest.approx(
        sum(abs(r["error"]["ttft_s"]) for r in d["runs"]) / 2, rel=1e-9)
    assert d["skipped"] == [{"run": "r3", "why": "disaggregated serving (prefill and decode workers) is not replayed"}]
    # a path under a file: refused in one line before any replay
    assert main(["validate-serving", str(path), "--hw", "h100_sxm", "--json", str(path / "v.json")]) == 2


def test_no_run_simulated_fails_and_hw_settings_reach_the_preset(tmp_path, capsys):
    """A new user's trial: on a preset none of the runs can be built, the table was empty and the exit 0, and the
    advice (--set hw.*) was a flag the command refused. Now exit 2 with the first reason; --set hw.* applies."""
    path = tmp_path / "s.csv"
    pd.DataFrame([{**ROW, "model_path": "meta-llama/Llama-3.1-8B-Instruct", "gemm_quant_mode": None, "tp_size": 1,
                   "batch_size": 2, "isl": 128, "osl": 8}]).to_csv(path, index=False)
    argv = ["validate-serving", str(path), "--hw", "h100_sxm", "--requests-per-client", "2", "--summary"]
    # 1 GB of HBM holds no 16 GB of weights: the one run fails, so the command does
    assert main([*argv, "--set", "hw.memory.@device.capacity_bytes=1e9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}: none of its 1 run(s) could be simulated on h100_sxm") and "\n" not in err
    with pytest.raises(SystemExit) as exit_:                       # argparse's check, before any replay
        main([*argv, "--requests-per-client", "0"])
    assert exit_.value.code == 2 and "--requests-per-client: '0': must be > 0" in capsys.readouterr().err
    assert main([*argv, "--set", "batch=4"]) == 2      # the run's clients and lengths are the measured run's
    assert "--set batch: the replay takes it from the measured run" in capsys.readouterr().err
    assert main(argv) == 0


VLLM = {"model_id": "meta-llama/Llama-3.1-8B", "max_concurrency": 2, "input_lens": [100, 200, 300],
        "output_lens": [10, 30, 50], "errors": ["", "", ""], "mean_ttft_ms": 20.0, "mean_tpot_ms": 5.0}


@pytest.mark.parametrize("spoil,message", [
    (dict(input_lens=[100, 200]), "one entry per request expected: input_lens 2, output_lens 3, errors 3"),
    (dict(errors=[""]), "one entry per request expected"),
    (dict(input_lens=["a", 200, 300]), "input_lens.0: Input should be a valid integer"),
    (dict(input_lens=[100.5, 200, 300]), "input_lens.0: Input should be a valid integer"),
    (dict(input_lens=[0, 200, 300]), "a completed request of 0 prompt tokens"),
    (dict(mean_ttft_ms="x"), "mean_ttft_ms: Input should be a valid number"),
    (dict(request_rate=float("nan"), max_concurrency=None), "request_rate: Input should be a finite number"),
    (dict(request_rate=0, max_concurrency=None), "request_rate: Input should be greater than 0"),
    (dict(request_rate=4, burstiness=0, max_concurrency=None), "burstiness: Input should be greater than 0"),
    (dict(max_concurrency="x"), "max_concurrency: Input should be a valid integer"),
    # a streamed first token takes time: a TTFT of 0 had dropped the run's TTFT error without a word
    (dict(mean_ttft_ms=0.0), "mean_ttft_ms: Input should be greater than 0"),
    # the model the file names, not a --model flag the user never gave
    (dict(model_id="acme/NotAModel-7B"), "r.json: its model acme/NotAModel-7B: not a model of the replayed tables"),
    # a serving trial: a count the per-request lists contradict was replayed as the lists said, without a word
    (dict(completed=2), "completed 2, but 3 of its 3 requests have no error"),
    (dict(input_lens=None, output_lens=None, errors=None, completed=0, total_input_tokens=0, total_output_tokens=0),
     "completed 0: no request completed"),
    # 0 output tokens over 160 requests had replayed one-token requests, the TPOT column reading nan
    (dict(input_lens=None, output_lens=None, errors=None, completed=160, total_input_tokens=1000,
          total_output_tokens=0), "total_output_tokens 0 over 160 completed requests: no tokens to replay"),
])
def test_a_malformed_vllm_result_is_one_line(tmp_path, capsys, spoil, message):
    """Hostile inputs to the benchmark readers: each was a traceback, or read wrong without a word (burstiness 0
    as 1, a short `errors` list dropping requests, lengths 100.5 truncated)."""
    import json

    path = tmp_path / "r.json"
    path.write_text(json.dumps({**VLLM, **spoil}))
    assert main(["validate-serving", str(path), "--hw", "h100_sxm", "--engine", "vllm"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize("spoil,message", [
    (lambda d: d["time_to_first_token"].update(avg="x"), "time_to_first_token.avg 'x': expected a finite number >= 0"),
    (lambda d: d["time_to_first_token"].update(avg=float("nan")), "time_to_first_token.avg nan"),
    (lambda d: d["input_config"]["loadgen"].update(concurrency=2.5), "concurrency 2.5: expected a whole number >= 1"),
    (lambda d: d["request_count"].update(avg="x"), "request_count.avg 'x': expected a whole number"),
    (lambda d: d["request_count"].update(avg=0), "request_count.avg 0: expected a whole number >= 1"),
    (lambda d: d["input_sequence_length"].update(avg=0), "input_sequence_length.avg 0: no tokens"),
    (lambda d: d["time_to_first_token"].update(avg=0), "time_to_first_token.avg 0: expected a positive time"),
    # present and 0 is a bad count, not a missing key
    (lambda d: d["input_config"]["loadgen"].update(concurrency=0), "concurrency 0: expected a whole number >= 1"),
])
def test_a_malformed_aiperf_export_is_one_line(tmp_path, capsys, spoil, message):
    import json
    from pathlib import Path

    d = json.loads((Path(__file__).parent / "data" / "genai_perf" / "profile_export_aiperf.json").read_text())
    spoil(d)
    path = tmp_path / "a.json"
    path.write_text(json.dumps(d))
    assert main(["validate-serving", str(path), "--hw", "h100_sxm", "--engine", "vllm"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_long_runs_are_served_at_their_length_and_none_completed_is_a_failure(tmp_path, capsys):
    """A trace workflow trial: a benchmark of 16,300-token prompts on Llama-3.1-8B was served at a fixed 16,384
    context, every request rejected, and the table showed NaN (req/s -100% into the MAPE), exit 0. The served
    context now holds the run (the power of two at or above its longest request, up to the model's 131,072), and
    a run no request of which completes is a failure with the reason, never a NaN row."""
    import json

    from sim.apps.serve.validate_models import served_model

    assert served_model("meta-llama/Llama-3.1-8B-Instruct", 9216)["max_position_embeddings"] == 16384
    assert served_model("meta-llama/Llama-3.1-8B-Instruct", 16300 + 256)["max_position_embeddings"] == 32768
    assert served_model("meta-llama/Llama-3.1-8B-Instruct", 10**6)["max_position_embeddings"] == 131072
    assert served_model("Qwen/Qwen3-32B", 10**6)["max_position_embeddings"] == 40960
    assert served_model("mistral-7b", 10**6) == "mistral-7b"
    path = tmp_path / "long.json"
    path.write_text(json.dumps({**VLLM, "input_lens": [1000] * 3, "output_lens": [200_000] * 3}))
    assert main(["validate-serving", str(path), "--hw", "h100_sxm", "--engine", "vllm"]) == 2
    err = capsys.readouterr().err
    assert "no request completed (3: prompt + output longer than max_model_len " in err


def test_a_case_folder_refuses_another_gpu_and_options_it_has_no_output_for(tmp_path, capsys):
    """A trace workflow trial: a case folder ignored --hw (any preset, even a missing one, gave the RTX 4090's
    replay), --json and --plots (nothing written, exit 0). The folder's GPU is the one measured: --hw must name it,
    and the options with no output here are refused in one line, before any replay."""
    folder = tmp_path / "RTX4090_Llama-3.1-8B"
    (folder / "vllm").mkdir(parents=True)
    for argv, message in ((["--hw", "h100_sxm"], "measured on rtx4090: --hw rtx4090"),
                          (["--hw", "rtx4090", "--json", str(tmp_path / "o.json")], "--json: not for an LLMServingSim"),
                          (["--hw", "rtx4090", "--summary"], "--summary: not for an LLMServingSim")):
        assert main(["validate-serving", str(folder), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err


def test_a_preset_file_replays_the_table_rows_of_its_gpu(tmp_path, capsys):
    """A trace workflow trial: the silicon sample refused every preset given as a file, so a calibrated H100
    preset could not be checked on serving runs. A file replays the rows of the GPU its name begins with (a
    calibrated preset's name, sim calibrate --name), on its node (dgx_h100 takes h100_cal); a copy of h100_sxm
    so named gives h100_sxm's figures, TP2 row included."""
    import json

    from tests.conftest import ROOT

    table = tmp_path / "s.csv"
    pd.DataFrame([{**ROW, "isl": 256, "osl": 8, "batch_size": 2}]).to_csv(table, index=False)
    preset = tmp_path / "mine.yaml"
    preset.write_text((ROOT / "hw_models/presets/h100_sxm.yaml").read_text().replace("\nname: h100_sxm", "\nname: h100_cal"))
    figures = []
    for hw in ("h100_sxm", str(preset)):
        out = tmp_path / "o.json"
        assert main(["validate-serving", str(table), "--hw", hw, "--requests-per-client", "2", "--summary",
                     "--json", str(out), "-q"]) == 0
        figures.append(json.loads(out.read_text())["runs"][0]["sim"])
    assert figures[0] == figures[1]
    other = tmp_path / "other.yaml"
    other.write_text(preset.read_text().replace("\nname: h100_cal", "\nname: zz_gpu"))
    assert main(["validate-serving", str(table), "--hw", str(other)]) == 2
    assert "names none of the table's GPUs" in capsys.readouterr().err


def test_a_benchmark_json_takes_the_servers_layout_from_tp_and_ep(tmp_path, capsys):
    """A vLLM result records no layout: --tp/--ep give it (default one GPU). Replayed with --json, the run carries
    them, and at TP 2 the same requests decode faster than on one GPU (each GPU streams half the weights)."""
    import json

    path = tmp_path / "r.json"
    path.write_text(json.dumps(VLLM))
    tpot = {}
    for extra in ([], ["--tp", "2"]):
        out = tmp_path / f"o{len(extra)}.json"
        assert main(["validate-serving", str(path), "--hw", "h100_sxm", "--engine", "vllm", "--json", str(out),
                     "--workers", "1", "-q", *extra]) == 0
        run = json.loads(out.read_text())["runs"][0]
        tpot[run["tp"]] = run["sim"]["tpot_s"]
        assert (run["tp"], run["ep"]) == ((2, 1) if extra else (1, 1))
    assert tpot[2] < tpot[1]
    capsys.readouterr()
    for bad, message in ((["--tp", "0"], "'0': must be > 0"), (["--tp", "x"], "'x': not a number")):
        with pytest.raises(SystemExit) as exc:
            main(["validate-serving", str(path), "--hw", "h100_sxm", "--engine", "vllm", *bad])
        assert exc.value.code == 2 and message in capsys.readouterr().err
    table = tmp_path / "s.csv"
    pd.DataFrame([ROW]).to_csv(table, index=False)
    assert main(["validate-serving", str(table), "--hw", "h100_sxm", "--tp", "2"]) == 2
    assert "--tp/--ep: for a benchmark JSON" in capsys.readouterr().err


def test_skip_reasons_past_the_first_four_say_how_many_more():
    """The summary line had shown the four commonest reasons and no word of the rest (11 rows, 7 accounted for)."""
    from sim.apps.serve.validate import reasons
    items = [(f"r{i}", why) for i, why in enumerate(["a", "a", "b", "c", "d", "e", "f", "f"])]
    assert reasons(items) == "2 x a; 2 x f; 1 x b; 1 x c; 2 more reasons (2 rows: --json lists them)"
    assert reasons(items[:3]) == "2 x a; 1 x b"


def test_a_log_of_identical_outputs_replays_as_its_summary_export_does(tmp_path):
    """A detailed benchmark_serving log whose outputs are all one length (--ignore-eos) replays its prompts as
    logged and its outputs spread by the engine's output_spread, as the same run's summary-only export does: as
    logged, its clients had run in lock-step waves and the two read TTFT 2.2x apart (a serving engineer's trial).
    The JSON's lengths_replayed says which."""
    import json
    base = dict(backend="vllm", model_id="meta-llama/Llama-3.1-8B-Instruct", max_concurrency=4, request_rate="inf",
                completed=8, duration=2.0, mean_ttft_ms=50.0, mean_tpot_ms=7.0, mean_itl_ms=7.0, mean_e2el_ms=155.0,
                request_throughput=4.0, output_throughput=64.0, total_input_tokens=8 * 300, total_output_tokens=128)
    prompts = [200, 400, 250, 350, 300, 300, 220, 380]
    detailed = dict(base, input_lens=prompts, output_lens=[16] * 8, errors=[""] * 8)
    from sim.apps.serve.bench_logs import read_vllm_bench
    from sim.apps.serve.validate import replayed_lengths, run_file
    path = tmp_path / "b.json"
    path.write_text(json.dumps(detailed))
    run = read_vllm_bench(path, "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B-Instruct")
    f = run_file(run)
    assert f.serving.lengths.prompt.values == prompts
    assert (f.serving.lengths.output.dist, f.serving.lengths.output.low, f.serving.lengths.output.high) == \
        ("uniform", 14, 18)   # 16 +- 10% (ENGINES["vllm"].output_spread), rounded
    assert replayed_lengths(run) == ("prompts as logged, outputs uniform within +-10% of 16 (the engine's "
                                     "output_spread): every logged output was 16 tokens")


def test_the_server_s_own_options_apply_to_every_replay(tmp_path, capsys):
    """A trial could not replay a vLLM server launched with non-default options (every non-hw --set was refused):
    serving.scheduler.* and formats.* now set every replayed run's server; what the replay takes from the
    measured run (arrivals, lengths, model, layout) is refused in one line, as is a key the schema lacks."""
    from sim.apps.serve.validate import Run, run_file
    run = Run("r", "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B", 512, 64, 8)
    f = run_file(run, settings={"serving.scheduler.max_num_batched_tokens": 512, "formats.kv_cache": "fp8"})
    assert f.serving.scheduler.max_num_batched_tokens == 512 and f.formats.kv_cache == "fp8_e4m3"   # fp8 resolved
    path = tmp_path / "s.csv"
    pd.DataFrame([{**ROW, "model_path": "meta-llama/Llama-3.1-8B-Instruct", "gemm_quant_mode": None, "tp_size": 1,
                   "batch_size": 2, "isl": 128, "osl": 8}]).to_csv(path, index=False)
    argv = ["validate-serving", str(path), "--hw", "h100_sxm", "--requests-per-client", "2", "-q"]
    for key, says in (("serving.arrivals.concurrency=4", "the replay takes it from the measured run"),
                      ("serving={scheduler: {kind: vllm}}", "--set serving: the replay takes it from the measured run"),
                      ("serving.scheduler.max_num_batchd_tokens=512", "--set: serving.scheduler.max_num_batchd_tokens: "
                                                                     "unknown key")):
        assert main([*argv, "--set", key]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and "\n" not in err
    assert main([*argv, "--set", "serving.scheduler.max_num_batched_tokens=512"]) == 0


def test_a_benchmark_log_replays_what_it_measured_and_names_what_it_lacks(tmp_path, capsys):
    """A serving trial's findings on the benchmark readers: aiperf's loadgen.request_count is the count it was told
    (its docs' export: 1,000,000,000), the request_count metric what it measured, and the replay sends the latter;
    a vLLM log that names the folder it served from is the tables' model of that name; --requests-per-client on a
    log that records its count had been ignored without a word; a result without one of the two means names it."""
    import json
    from pathlib import Path

    from sim.apps.serve.bench_logs import read_bench_json

    d = json.loads((Path(__file__).parent / "data" / "genai_perf" / "profile_export_aiperf.json").read_text())
    d["input_config"]["loadgen"]["request_count"] = 1_000_000_000
    (tmp_path / "a.json").write_text(json.dumps(d))
    assert read_bench_json(tmp_path / "a.json", "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B-Instruct").num_requests == 80
    # a request without an error but with an empty output counts in vLLM's `completed` (its calculate_metrics)
    (tmp_path / "e.json").write_text(json.dumps({**VLLM, "output_lens": [10, 0, 50], "completed": 3}))
    assert read_bench_json(tmp_path / "e.json", "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B").num_requests == 2
    (tmp_path / "p.json").write_text(json.dumps({**VLLM, "model_id": "/models/Llama-3.1-8B"}))
    assert read_bench_json(tmp_path / "p.json", "h100_sxm", "vllm", "/models/Llama-3.1-8B").model == "meta-llama/Llama-3.1-8B"
    assert main(["validate-serving", str(tmp_path / "p.json"), "--hw", "h100_sxm", "--engine", "vllm",
                 "--requests-per-client", "2"]) == 2
    assert "--requests-per-client 2: " in capsys.readouterr().err
    (tmp_path / "t.json").write_text(json.dumps({k: v for k, v in VLLM.items() if k != "mean_tpot_ms"}))
    assert main(["validate-serving", str(tmp_path / "t.json"), "--hw", "h100_sxm", "--engine", "vllm"]) == 2
    assert "a vLLM benchmark_serving result without mean_tpot_ms" in capsys.readouterr().err
    # the footer speaks of the silicon sample's derived E2E only where a row of it is in the table
    assert main(["validate-serving", str(tmp_path / "p.json"), "--hw", "h100_sxm", "--engine", "vllm"]) == 0
    out = capsys.readouterr().out
    assert "Errors are (simulated - measured) / measured." in out and "silicon sample" not in out


def test_plots_of_a_rate_driven_log_plot_its_errors_by_rate(tmp_path, capsys):
    """A `vllm bench serve --request-rate 6` log (no max_concurrency) had crashed --plots on the clients' log axis
    with a traceback, and the transaction then lost the --json too (a serving trial)."""
    log = dict(backend="vllm", model_id="meta-llama/Llama-3.1-8B-Instruct", num_prompts=8, request_rate=6.0,
               burstiness=1.0, max_concurrency=None, completed=8, mean_ttft_ms=60.0, mean_tpot_ms=9.0,
               mean_itl_ms=9.0, mean_e2el_ms=600.0, input_lens=[256] * 8, output_lens=[64] * 8)
    path = tmp_path / "rate.json"
    path.write_text(json.dumps(log))
    out = tmp_path / "plots"
    assert main(["validate-serving", str(path), "--hw", "h100_sxm", "--plots", str(out),
                 "--json", str(tmp_path / "v.json")]) == 0
    assert {p.name for p in out.iterdir()} == {"scatter.png", "errors_vs_rate.png"}
    assert json.loads((tmp_path / "v.json").read_text())["runs"][0]["rate"] == 6.0

"""`sim validate --input-format aic`: aiconfigurator's per-op tables (shared/validation/aic) costed by sim.

Runs on a small slice of the shared tables (skips without them); the per-family figures of the
whole tables are in docs/validation.md."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from sim.apps.cli import main
from sim.apps.trace.aic import HELD_OUT, AicValidation, _comm_rows, gemm_op, table_of


def _aic(shared_validation: Path) -> Path:
    folder = shared_validation / "aic"
    if not (folder / "gemm_h100.csv.gz").is_file():
        pytest.skip("shared/validation/aic is not present")
    return folder


def test_small_slice_prints_families_per_gpu(shared_validation, tmp_path, capsys):
    aic = _aic(shared_validation)
    out = tmp_path / "aic.json"
    tables = [aic / f"{t}_h100.csv.gz" for t in ("gemm", "gen_attn", "ctx_attn", "comm")]
    assert main(["validate", "--input-format", "aic", *map(str, tables), "--limit", "60", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "in-sample GPUs" in text and "held-out" not in text   # no held-out table given
    fams = {r["family"] for r in json.loads(out.read_text())["mape_by_family"]}
    assert {"gemm bfloat16 [trtllm]", "gemm bfloat16 [vllm]", "decode attention kv bfloat16 [trtllm]",
            "prefill attention kv bfloat16 [vllm]", "all_reduce nccl"} <= fams
    for r in json.loads(out.read_text())["mape_by_family"]:
        assert r["gpu"] == "h100" and not r["held_out"] and r["rows"] > 0 and r["mape"] >= 0


def test_stack_applies_to_every_row(shared_validation, tmp_path):
    aic = _aic(shared_validation)
    out = tmp_path / "aic.json"
    assert main(["validate", "--input-format", "aic", str(aic / "gemm_h100.csv.gz"), "--limit", "40",
                 "--stack", "torch-cudagraph", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["mape_by_family"]


def test_rows_reach_the_json_and_all(shared_validation, tmp_path, capsys):
    """A kernel trial: `--all` was silently ignored on op tables and `--json` held no rows, so which shapes miss
    could not be read from the CLI. The JSON now holds every row costed, whose errors give the family's MAPE, and
    `--all` prints them, the largest |error| first."""
    out = tmp_path / "aic.json"
    assert main(["validate", "--input-format", "aic", str(_aic(shared_validation) / "gemm_h100.csv.gz"),
                 "--limit", "12", "--all", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    for fam in data["mape_by_family"]:
        rows = [r for r in data["rows"] if r["family"] == fam["family"]]
        assert len(rows) == fam["rows"]
        assert fam["mape"] == pytest.approx(sum(abs(r["simulated_s"] / r["measured_s"] - 1) for r in rows) / len(rows))
    text = capsys.readouterr().out
    assert f"aiconfigurator rows ({len(data['rows'])})" in text and data["rows"][0]["shape"] in text


def test_bad_input_is_one_line(tmp_path, capsys):
    bad = tmp_path / "weights.csv.gz"
    bad.write_text("x")
    assert main(["validate", "--input-format", "aic", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "aiconfigurator table" in err[0]
    quant = tmp_path / "quant_h100.csv.gz"   # aiconfigurator's, not a table of ops: says which and why
    quant.write_text("x")
    assert main(["validate", "--input-format", "aic", str(quant)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "activation-quantization table" in err[0] and "fit_kernels.py" in err[0]
    assert main(["validate", "--input-format", "aic", str(tmp_path / "gemm_h100.csv.gz"), "--stack", "nope"]) == 2
    assert "unknown software stack" in capsys.readouterr().err
    cut = tmp_path / "gen_attn_a100.csv"     # a copy cut short in its third row
    cut.write_text("framework,version,kernel_source,batch,isl,step,heads,kv_heads,head_dim,attn_dtype,kv_dtype,"
                   "latency_us\nvllm,0.14.0,vllm_flash_attn,1,1,1,32,8,128,bfloat16,bfloat16,13.9\nvllm,0.14.0\n")
    assert main(["validate", "--input-format", "aic", str(cut)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 3 has no latency_us (a truncated table?)" in err[0]


def test_table_names_and_held_out():
    assert table_of(Path("gemm_sglang_rtx_pro_6000.csv.gz")) == ("gemm_sglang", "rtx_pro_6000")
    assert table_of(Path("gen_attn_h200.csv.gz")) == ("gen_attn", "h200")
    assert "h200" in HELD_OUT and "b200" in HELD_OUT and "h100" not in HELD_OUT


def test_gemm_op_is_the_lowering_gemm():
    """2 M N K FLOPs; bytes = x (M K x 2 B) + W (N K x stored bytes) + y (M N x 2 B)."""
    op = gemm_op(4, 1024, 512, "fp8_e4m3")
    assert op.flops == 2 * 4 * 1024 * 512
    assert op.bytes == 4 * 512 * 2 + 1024 * 512 * 1 + 4 * 1024 * 2


def test_stack_flag_on_trace_validate_and_replay(tmp_path, capsys):
    """--stack reaches the mapper: the torch-eager H200 per-op MAPE differs from the one-kernel-per-op one."""
    traces = sorted((Path(__file__).resolve().parent.parent / "traces" / "h200").glob("llama3-8b*.trace.json.gz"))
    if not traces:
        pytest.skip("no H200 traces")
    plain, eager = tmp_path / "plain.json", tmp_path / "eager.json"
    assert main(["validate", str(traces[0]), "--hw", "h200", "--json", str(plain)]) == 0
    assert main(["validate", str(traces[0]), "--hw", "h200", "--stack", "torch-eager", "--json", str(eager)]) == 0
    p, e = json.loads(plain.read_text()), json.loads(eager.read_text())
    assert p["stack"] is None and e["stack"] == "torch-eager" and p["mape"] != e["mape"]
    capsys.readouterr()
    assert main(["replay", str(traces[0]), "--hw", "h200", "--stack", "torch-eager", "--json", str(tmp_path / "r.json")]) == 0
    # the replay says the stack it moved the prediction by, in its title and JSON, as validate does (a trace trial)
    assert "under stack torch-eager" in " ".join(capsys.readouterr().out.split())
    assert json.loads((tmp_path / "r.json").read_text())["stack"] == "torch-eager"
    assert main(["replay", str(traces[0]), "--hw", "h200", "--stack", "nope"]) == 2


def test_custom_all_reduce_rows_are_reported_per_release_and_by_the_kernel_they_ran():
    """Each release of an engine's custom all-reduce is a family of its own (releases change the kernel and its
    NCCL fallback), NCCL's rows stay one family; a row whose kernel_source names TensorRT-LLM's kernel (SGLang
    0.5.6.post2 on H100) is costed as trtllm_custom, the others as their engine's algorithm."""
    rows = [("nccl", "2.29.2", "nccl", 4), ("sglang_custom_ar", "0.5.6.post2", "TRTLLM", 4),
            ("sglang_custom_ar", "0.5.9", "SGLang_CustomAllReduce_graph", 4),
            ("sglang_custom_ar", "0.5.9", "SGLang_CustomAllReduce_eager", 4)]
    df = pd.DataFrame([dict(source=s, version=v, op="all_reduce", kernel_source=k, dtype="bfloat16", num_gpus=n,
                            elements=32768, bytes=65536, latency_us=5.0) for s, v, k, n in rows])
    out = AicValidation()
    _comm_rows(df, "h100", out)
    got = sorted((r.family, r.stack) for r in out.rows)   # the eager row is dropped: the engines replay graphs
    assert got == [("all_reduce nccl", "nccl"), ("all_reduce sglang_custom_ar 0.5.6.post2", "trtllm_custom"),
                   ("all_reduce sglang_custom_ar 0.5.9", "vllm_custom")]


def test_another_gpus_preset_and_ignored_options_are_said(shared_validation, tmp_path, capsys):
    """A trace workflow trial: A100 rows costed on --hw h100_sxm were labelled a100, in-sample, with no word, and
    --hw had no effect on a comm table. The report and the JSON say both."""
    aic = _aic(shared_validation)
    out = tmp_path / "a.json"
    argv = ["validate", "--input-format", "aic", str(aic / "gemm_a100.csv.gz"), str(aic / "comm_a100.csv.gz"),
            "--hw", "h100_sxm", "--limit", "20", "--json", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "a100's measured rows costed on --hw h100_sxm, another GPU's preset" in text
    assert "--hw / --stack do not apply to collectives" in text
    assert len(json.loads(out.read_text())["notes"]) == 2


@pytest.mark.parametrize("name, text, message", [
    ("gemm_h100.csv", "framework,version,kernel,dtype,m,n\nvllm,0.14.0,k,bfloat16,8,4096\n",
     "missing column k, latency_us (a gemm table has framework, dtype, m, n, k, latency_us)"),
    ("gemm_h100.csv", "framework,version,kernel,dtype,m,n,k,latency_us\nvllm,0.14.0,k,bfloat16,8,4096,4096,abc\n",
     "line 2: latency_us: 'abc' is not a number"),
    ("gen_attn_h100.csv", "framework,version,kernel_source,batch,isl,heads,kv_heads,head_dim,kv_dtype,latency_us\n"
     "vllm,0.14.0,fa,1,1,32,8,128,bfloat16,13.9\n", "missing column step (a gen_attn table has"),
    ("comm_h100.csv", "source,version,op,num_gpus,bytes,latency_us\nnccl,2.21,all_reduce,2,4096,9.1\n",
     "missing column kernel_source (a comm table has")])
def test_a_table_without_its_columns_or_numbers_is_one_line(tmp_path, capsys, name, text, message):
    """A table with a column cut off or renamed, or a latency of `abc`, had died in pandas with a KeyError or
    TypeError traceback (a trace trial)."""
    path = tmp_path / name
    path.write_text(text)
    assert main(["validate", "--input-format", "aic", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_limit_on_a_trace_is_said_not_to_apply(capsys):
    """`sim validate TRACE --limit 5` still costed every op, without a word (a trace trial)."""
    traces = sorted((Path(__file__).resolve().parent.parent / "traces" / "h200").glob("llama3-8b*.trace.json.gz"))
    if not traces:
        pytest.skip("no H200 traces")
    assert main(["validate", str(traces[0]), "--hw", "h200", "--limit", "5", "-q"]) == 0
    assert "note: --limit applies to --input-format aic tables only" in capsys.readouterr().err


def test_a_source_hw_other_than_the_traces_device_is_said(capsys):
    """`--source-hw a6000` on an H200 capture read a 2.84x "like-for-like" speed-up without a word (a trace trial)."""
    trace = Path(__file__).resolve().parent.parent / "traces" / "h200" / "llama2-7b_L4_fp16_b1_p1024_d8_cuda.trace.json.gz"
    if not trace.is_file():
        pytest.skip("no H200 traces")
    assert main(["replay", str(trace), "--hw", "h100_sxm", "--source-hw", "a6000", "-q"]) == 0
    assert "measured on NVIDIA H200, but --source-hw a6000 is another device" in capsys.readouterr().err
    assert main(["replay", str(trace), "--hw", "h100_sxm", "--source-hw", "h200", "-q"]) == 0
    assert "warning" not in capsys.readouterr().err

"""A trace workflow trial's findings (stop 67): a cut ops table, misnamed meta files, empty and non-JSON inputs, the
profiler's dropped ops told from a cut file, a calibrated preset that passes `hw check --strict`, a quiet check that
still says why it failed, and a capture that never replaces another unasked."""

import importlib.util
import shutil
from pathlib import Path

import pytest

from sim.apps.cli import main
from tests.conftest import ROOT

CPU = ROOT / "traces" / "cpu" / "llama2-7b_L2_fp32_b1_p512_d16_cpu"


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def _copy(tmp_path: Path, name: str, lines: int | None = None, cut: int = 0) -> Path:
    """CPU's ops table (its first `lines` lines, the last one `cut` characters short) and its meta, as `name`."""
    shutil.copy(CPU.with_name(CPU.name + ".meta.json"), tmp_path / f"{name}.meta.json")
    text = CPU.with_name(CPU.name + ".ops.csv").read_text().splitlines(keepends=True)
    body = "".join(text[:lines])
    path = tmp_path / f"{name}.ops.csv"
    path.write_text(body[:len(body) - cut] if cut else body)
    return path


def test_a_row_cut_short_is_an_error_not_a_measurement(tmp_path, capsys):
    """The last row of a cut file ('2,decode,L0.down_proj,0,2018.') was validated as a 2.018 ms measurement."""
    path = _copy(tmp_path, "x", lines=67, cut=12)   # the last row loses its last three cells ('0.0,1,1,1088\n'...)
    assert main(["validate", str(path), "--hw", "cpu_host", "-q"]) == 2
    line = _err(capsys)
    assert line.startswith(f"error: {path}: line 67: ") and "cells where the header has 9 (a truncated file?)" in line
    extra = _copy(tmp_path, "y", lines=5)
    extra.write_text(extra.read_text() + "0,prefill,L0.q_proj,0,1,0,1,512,512,9\n")
    assert main(["validate", str(extra), "--hw", "cpu_host", "-q"]) == 2
    assert _err(capsys) == f"error: {extra}: line 6: 10 cells where the header has 9"


def test_a_cut_file_and_the_profilers_dropped_ops_are_told_apart(tmp_path, capsys):
    path = _copy(tmp_path, "x", lines=150)   # 149 rows of 37 a step: steps 0-3 whole, step 4 partial, 12 missing
    assert main(["validate", str(path), "--hw", "cpu_host", "-q"]) == 2   # a cut file is refused (stop 69)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "step(s) 4 partial; 12 step(s) missing: a truncated file" in err[0]
    h200 = ROOT / "traces/h200/llama3-8b_L4_bf16_b1_p128_d8_cuda.ops.csv"   # every step lacks the same ops
    assert main(["validate", str(h200), "--hw", "h200", "-q"]) == 0
    warn = [w for w in capsys.readouterr().err.splitlines() if "fewer ops" in w]
    assert len(warn) == 1 and "(ops the profiler did not record; traces/README.md)" in warn[0]
    assert "truncated" not in warn[0]


def test_a_missing_meta_is_named_whole(tmp_path, capsys):
    """'tinyllama-1.1b_x' wanted 'tinyllama-1.1b_x.meta.json' but the message named 'tinyllama-1.meta.json'."""
    trace = tmp_path / "tinyllama-1.1b_x.trace.json.gz"
    shutil.copy(CPU.with_name(CPU.name + ".trace.json.gz"), trace)
    assert main(["validate", str(trace), "--hw", "cpu_host", "-q"]) == 2
    assert "no tinyllama-1.1b_x.meta.json beside the trace" in _err(capsys)
    table = tmp_path / "qwen2.5-7b.ops.csv"
    shutil.copy(CPU.with_name(CPU.name + ".ops.csv"), table)
    assert main(["validate", str(table), "--hw", "cpu_host", "-q"]) == 2
    assert _err(capsys) == (f"error: {table}: ops table without its qwen2.5-7b.meta.json beside it "
                            "(scripts/capture_trace.py writes both)")


def test_empty_and_non_json_inputs_say_what_they_are(tmp_path, capsys):
    empty = tmp_path / "e.trace.json"
    empty.write_text("\n")
    assert main(["validate", str(empty), "--hw", "cpu_host", "-q"]) == 2
    assert _err(capsys) == f"error: {empty}: not a torch Chrome trace: the file is empty"
    yaml_file = tmp_path / "w.trace.json"
    yaml_file.write_text((ROOT / "workloads/llama13b_decode.yaml").read_text())
    assert main(["validate", str(yaml_file), "--hw", "cpu_host", "-q"]) == 2
    line = _err(capsys)
    assert "malformed JSON at line 1, column 1" in line and "truncated" not in line
    cut = tmp_path / "c.trace.json"
    cut.write_text('{"traceEvents": [{"name": "a", "ph": "X"')
    assert main(["validate", str(cut), "--hw", "cpu_host", "-q"]) == 2
    assert _err(capsys).endswith("; truncated?")


def test_a_calibrated_preset_passes_the_strict_check(tmp_path, capsys):
    """A calibrated preset copied its base's figures without their citation comments: `hw check --strict` failed on
    every one, and with -q said nothing at all."""
    out = tmp_path / "mine.yaml"
    traces = sorted(str(p) for p in (ROOT / "traces/cpu").glob("*fp32*p128*.ops.csv"))
    assert main(["calibrate", *traces, "--hw", "cpu_host", "-o", str(out), "-q"]) == 0
    text = out.read_text()
    assert "memory:  # as cpu_host.yaml (cited there)" in text and "efficiency:  # fitted by sim calibrate" in text
    [launch] = [line for line in text.splitlines() if line.strip().startswith("launch_overhead_s:")]
    assert launch.endswith("# fitted by sim calibrate (header)")
    capsys.readouterr()
    assert main(["hw", "check", "--strict", "-q", str(out)]) == 0
    shipped = ROOT / "hw_models/presets/a6000_calibrated.yaml"   # written before, by hand exempt (docs/presets.md)
    assert main(["hw", "check", "--strict", "-q", str(shipped)]) == 1
    line = _err(capsys)
    assert line.startswith(f"error: {shipped}: --strict: ") and "figure(s) without a source comment" in line


def test_a_capture_never_replaces_another_unasked(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("capture_trace", ROOT / "scripts/capture_trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    taken = tmp_path / "x.ops.csv"
    taken.write_text("step\n")
    with pytest.raises(SystemExit) as stop:
        mod.main(["--model", "tinyllama-1.1b", "--layers", "1", "--prompt", "2", "--decode-steps", "0",
                  "--out", str(tmp_path / "x")])
    assert stop.value.code == 2
    assert _err(capsys) == (f"capture_trace: error: {taken} exists (a capture of this shape): --force replaces it, "
                            "--out writes elsewhere")
    assert taken.read_text() == "step\n"


def test_validate_names_its_stack_and_says_a_gpu_stack_on_a_cpu(capsys):
    """--stack left no trace in the output, and a GPU engine's stack on a CPU trace said nothing (a trial read 88%)."""
    table = CPU.with_name(CPU.name + ".ops.csv")
    assert main(["validate", str(table), "--hw", "cpu_host", "--stack", "torch-eager"]) == 0
    out, err = capsys.readouterr()
    assert "measured vs simulated on cpu_host under stack torch-eager" in out
    assert "note: --stack torch-eager: cpu_host is kind cpu, and the stacks model GPU engines' kernels" in err
    assert main(["validate", str(table), "--hw", "cpu_host"]) == 0
    out, err = capsys.readouterr()
    assert "under stack" not in out and "note: --stack" not in err


def test_a_meta_without_batch_and_a_chrome_trace_missing_ops_are_said(tmp_path, capsys):
    """A trace trial: a .meta.json without `batch` read as batch 1 (exit 0, 52.8% where the capture's own gives
    25.5%), and a Chrome trace whose L0 MLP annotations were removed validated 612 of 639 ops without a word, where
    its ops table warns. The batch is required; the trace says what it lacks."""
    import gzip
    import json

    trace = CPU.with_name(CPU.name + ".trace.json.gz")
    meta = json.loads(CPU.with_name(CPU.name + ".meta.json").read_text())
    bare = tmp_path / "nobatch.trace.json.gz"
    shutil.copy(trace, bare)
    (tmp_path / "nobatch.meta.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "batch"}))
    assert main(["validate", str(bare), "--hw", "cpu_host", "-q"]) == 2
    line = _err(capsys)
    assert line.startswith(f"error: {tmp_path / 'nobatch.meta.json'}") and "batch" in line
    # a meta of another capture (batch 8 on this batch-1 one) against the tokens the embedding looked up
    other = tmp_path / "other.trace.json.gz"
    shutil.copy(trace, other)
    (tmp_path / "other.meta.json").write_text(json.dumps({**meta, "batch": 8}))
    assert main(["validate", str(other), "--hw", "cpu_host", "-q"]) == 2
    assert _err(capsys) == (f"error: {tmp_path / 'other.meta.json'}: batch 8, prompt 512, but the trace's embedding "
                            "looked up 512 tokens at the prefill and 1 a decode step: the meta describes another capture")
    d = json.loads(gzip.decompress(trace.read_bytes()))
    d["traceEvents"] = [e for e in d["traceEvents"] if e.get("name") not in ("L0.gate_proj", "L0.up_proj")]
    cut = tmp_path / "nomlp.trace.json.gz"
    cut.write_bytes(gzip.compress(json.dumps(d).encode()))
    (tmp_path / "nomlp.meta.json").write_text(json.dumps(meta))
    assert main(["validate", str(cut), "--hw", "cpu_host", "-q"]) == 0
    warn = [w for w in capsys.readouterr().err.splitlines() if "fewer ops than its capture wrote" in w]
    assert len(warn) == 1 and str(cut) in warn[0]


def test_several_traces_tables_name_each_row_s_trace(capsys):
    """A trace trial: `sim validate traces/h200/*.trace.json.gz` printed 8 rows of step0.prefill with nothing to tell
    which trace each was. With several traces both tables lead with a trace column; with one, none."""
    a = ROOT / "traces/h200/llama3-8b_L4_bf16_b1_p128_d8_cuda.trace.json.gz"
    b = ROOT / "traces/h200/llama2-70b_L4_bf16_b8_p1024_d8_cuda_flash.trace.json.gz"
    assert main(["validate", str(a), str(b), "--hw", "h200", "--format", "csv", "--all"]) == 0
    out = capsys.readouterr().out
    assert "trace,step,op,kind,measured,simulated,error" in out and "trace,step,measured,simulated,error" in out
    assert f"{b.name},step0.prefill," in out and f"{a.name},step0.prefill,embed," in out
    assert main(["validate", str(a), "--hw", "h200", "--format", "csv"]) == 0
    assert "\nstep,op,kind,measured" in capsys.readouterr().out
    # a review: vidur's tables are all mlp.csv, a folder per model; the column takes the parts that tell them apart
    from sim.apps.trace.validate_tables import short_names

    assert short_names(["/d/a40/Llama-2-7b-hf/mlp.csv#tp1", "/d/a40/Llama-2-70b-hf/mlp.csv#tp1",
                        "/d/a40/Llama-2-70b-hf/mlp.csv#tp2"]) == {
        "/d/a40/Llama-2-7b-hf/mlp.csv#tp1": "Llama-2-7b-hf/mlp.csv#tp1",
        "/d/a40/Llama-2-70b-hf/mlp.csv#tp1": "Llama-2-70b-hf/mlp.csv#tp1",
        "/d/a40/Llama-2-70b-hf/mlp.csv#tp2": "Llama-2-70b-hf/mlp.csv#tp2"}
    assert short_names(["/x/a.json", "/y/b.json", "/x/a.json"]) == {"/x/a.json": "a.json", "/y/b.json": "b.json"}


def test_another_gpu_s_figures_given_by_set_are_said(shared_validation, capsys):
    """A trace trial: docs/validation.md's A40 command (a6000 with the A40's bandwidth by --set) warned that the errors
    include the two GPUs' whole difference, which the user had just given. The warning names the --set items."""
    table = shared_validation / "vidur/a40/Llama-2-7b-hf/mlp.csv"
    assert main(["validate", str(table), "--hw", "a6000", "--set", "hw.memory.@device.bandwidth_bytes_per_s=696e9",
                 "-q"]) == 0
    err = capsys.readouterr().err
    assert ("compared with --hw a6000 as hw.memory.@device.bandwidth_bytes_per_s=696e9 changed it, another GPU: the "
            "errors include what those figures leave of the two devices' difference") in err


def test_a_meta_naming_a_model_of_another_width_is_refused(tmp_path, capsys):
    """A meta.json naming Llama-2-13B beside a 7B capture costed every projection +56% without a word (a trace
    trial): the first aten::linear's input width says which model ran. --model re-costs it on purpose, and says so."""
    import json
    import shutil

    from sim.apps.cli import main
    from sim.core.model import load_model
    from tests.conftest import ROOT
    src = ROOT / "traces" / "h200" / "llama2-7b_L4_fp16_b1_p1024_d8_cuda"
    if not src.with_suffix(".trace.json.gz").is_file():
        pytest.skip("no H200 traces")
    dst = tmp_path / "x_L4_fp16_b1_p1024_d8_cuda"
    shutil.copy(src.with_suffix(".trace.json.gz"), dst.with_suffix(".trace.json.gz"))
    meta = json.loads(src.with_suffix(".meta.json").read_text())
    meta["model"] = {**meta["model"], **load_model("llama2-13b").to_dict(), "name": "llama2-13b"}
    dst.with_suffix(".meta.json").write_text(json.dumps(meta))
    trace = str(dst.with_suffix(".trace.json.gz"))
    assert main(["validate", trace, "--hw", "h200", "-q"]) == 2
    assert "is 5120 wide, but the capture's first projection takes 4096-wide inputs" in capsys.readouterr().err
    assert main(["validate", trace, "--hw", "h200", "--model", "llama2-7b", "-q"]) == 0

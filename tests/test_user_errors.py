"""A user's mistakes, each answered by one line naming the file and key, exit status 2,
no traceback, and nothing half-written. Found by a QA pass over the whole command line."""

import os
import shutil

import pytest

from sim.apps.cli import main
from tests.conftest import ROOT

DATA = ROOT / "tests/data"


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err            # exactly one line, no traceback
    assert "Traceback" not in err[0]
    return err[0]


@pytest.fixture
def tiny(tmp_path):
    """A workload that simulates in well under a second."""
    p = tmp_path / "tiny.yaml"
    p.write_text("model: tinyllama-1.1b\nbatch: 1\nprompt_len: 16\ngen_len: 2\n")
    return p


@pytest.mark.parametrize("formats, key", [
    ("{weights: fp17}", "formats.weights"),
    ("{kv_cache: fp17}", "formats.kv_cache"),
    ("{overrides: {lm_head: bf17}}", "formats.overrides.lm_head"),
])
def test_unknown_format_names_its_key(tmp_path, capsys, formats, key):
    wl = tmp_path / "w.yaml"
    wl.write_text(f"model: tinyllama-1.1b\nformats: {formats}\n")
    assert main(["run", str(wl), "--hw", "a6000", "-q"]) == 2
    assert _err(capsys).startswith(f"error: {wl}: {key}: unknown number format")


def test_set_adds_a_format_override_the_file_lacks(tiny, capsys):
    # The file has no formats.overrides; --set must add one, not say "no such field".
    assert main(["run", str(tiny), "--hw", "a6000", "-q", "--set", "formats.overrides.lm_head=bf16"]) == 0
    assert main(["run", str(tiny), "--hw", "a6000", "-q", "--set", "formats.overrides.lm_head=bf17"]) == 2
    assert f"{tiny} (with formats.overrides.lm_head overridden): formats.overrides.lm_head: unknown number format 'bf17'" in _err(capsys)


def test_policy_of_the_wrong_type(tmp_path, capsys):
    wl = tmp_path / "w.yaml"
    wl.write_text("model: tinyllama-1.1b\npolicy: 7\n")
    assert main(["run", str(wl), "--hw", "flexgen_t4", "-q"]) == 2
    # not pydantic's "policy.dict[str,any]: Input should be a valid dictionary"
    assert _err(capsys) == (f"error: {wl}: policy: expected a mapping of placement fractions or 'search', got 7")


def test_unknown_peak_format_in_hardware_names_the_file(tiny, tmp_path, capsys):
    hw = tmp_path / "hw.yaml"
    hw.write_text((ROOT / "hw_models/presets/a6000.yaml").read_text().replace("      fp32: 38.7 TFLOP/s",
                                                                              "      fp17: 38.7 TFLOP/s"))
    assert main(["run", str(tiny), "--hw", str(hw), "-q"]) == 2
    assert _err(capsys).startswith(f"error: {hw}: units.gpu.peak_flops_per_s: fp17: unknown number format")


def test_a_directory_where_a_file_belongs(tiny, tmp_path, capsys):
    assert main(["run", str(tmp_path), "--hw", "a6000", "-q"]) == 2
    assert _err(capsys) == f"error: {tmp_path}: is a directory; expected a YAML file"
    assert main(["run", str(tiny), "--hw", str(tmp_path), "-q"]) == 2
    assert _err(capsys) == f"error: {tmp_path}: is a directory; expected a hardware YAML file"


def test_unwritable_outputs_fail_before_the_run_and_leave_nothing(tiny, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    outdir = tmp_path / "out"
    outdir.mkdir()
    cases = [(["--json", str(outdir)], f"{outdir}: is a directory; expected a file path"),
             (["--chrome-trace", str(afile / "t.json")], f"{afile / 't.json'}: cannot write: {afile} is not a directory"),
             (["--plots", str(afile)], f"{afile}: is a file; expected a directory")]
    for extra, msg in cases:
        assert main(["run", str(tiny), "--hw", "a6000", "-q", *extra]) == 2
        assert _err(capsys) == f"error: {msg}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "out", "tiny.yaml"]
    assert list(outdir.iterdir()) == [] and afile.read_text() == "x"


def test_roofline_json_into_a_directory(tiny, tmp_path, capsys):
    assert main(["roofline", str(tiny), "--hw", "a6000", "--json", str(tmp_path)]) == 2
    assert _err(capsys) == f"error: {tmp_path}: is a directory; expected a file path"


def test_output_files_are_readable_like_any_other(tiny, tmp_path):
    # mkstemp creates 0600; the renamed result must follow the umask (0644 under 022).
    old = os.umask(0o022)
    try:
        assert main(["run", str(tiny), "--hw", "a6000", "-q", "--json", str(tmp_path / "r.json")]) == 0
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("kv", ["0", "-5"])
def test_roofline_kv_len_must_be_positive(tiny, capsys, kv):
    assert main(["roofline", str(tiny), "--hw", "a6000", "--kv-len", kv]) == 2
    assert _err(capsys) == f"error: --kv-len {kv}: must be at least 1 (the decode token's own key)"


@pytest.mark.parametrize("argv", [["calibrate", "t.json", "--hw", "a6000", "-o", "c.yaml", "--min-traces", "0"],
                                  ["validate", "t.json", "--hw", "a6000", "--limit", "0"],
                                  ["validate", "t.json", "--hw", "a6000", "--tp", "-2"]])
def test_counts_on_the_command_line_must_be_positive(capsys, argv):
    """`--min-traces 0` was taken without a word (a trial): a count flag is argparse's usage error (--workers and
    --max-points have their own line: tests/test_robust_sweep.py)."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "must be > 0" in capsys.readouterr().err


def test_sweep_when_error_while_evaluating_names_the_file(tiny, tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: s\nworkload: {tiny}\nhw: a6000\naxes:\n  workload.batch: [1, 2]\n"
                    "when: workload.batch / 0 > 1\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "-q"]) == 2
    assert _err(capsys) == f"error: {spec}: when: division by zero in 'workload.batch / 0 > 1'"


def test_calibrate_output_is_a_directory(tmp_path, capsys):
    assert main(["calibrate", str(DATA / "trace_tinyllama_L1.ops.csv"), "--hw", "cpu_host", "-o", str(tmp_path)]) == 2
    assert _err(capsys) == f"error: {tmp_path}: is a directory; expected a file path"


def _trace_copy(tmp_path, meta_text: str):
    ops = tmp_path / "t.ops.csv"
    shutil.copy(DATA / "trace_tinyllama_L1.ops.csv", ops)
    (tmp_path / "t.meta.json").write_text(meta_text)
    return ops


def test_trace_meta_with_an_unknown_dtype_names_the_trace(tmp_path, capsys):
    meta = (DATA / "trace_tinyllama_L1.meta.json").read_text().replace('"dtype": "fp32"', '"dtype": "float99"')
    ops = _trace_copy(tmp_path, meta)
    assert main(["validate", str(ops), "--hw", "cpu_host"]) == 2
    assert _err(capsys).startswith(f"error: {ops}: dtype in its .meta.json: unknown number format 'float99'")


def test_truncated_trace_meta_is_not_called_a_chrome_trace(tmp_path, capsys):
    ops = _trace_copy(tmp_path, '{"dtype": ')
    assert main(["validate", str(ops), "--hw", "cpu_host"]) == 2
    assert _err(capsys).startswith(f"error: {tmp_path / 't.meta.json'}: not a capture_trace .meta.json: malformed JSON")


def test_hw_list_keeps_its_columns_in_an_80_column_terminal(capsys, monkeypatch):
    # rich squeezed kind/memory/bandwidth to zero width when the description did not fit.
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["hw", "list"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if " a6000 " in line)
    assert "gpu" in row and "51.54 GB" in row and "0.77 TB/s" in row


@pytest.mark.parametrize("hw, message", [(["--hw", "a6000", "--hw", "h100_sxm"], "--hw given twice (a6000, h100_sxm)"),
                                         (["--hw", ""], "--hw: empty; give a preset name or a YAML file")])
def test_hw_once_and_not_empty(capsys, hw, message):
    """`--hw a6000 --hw h100_sxm` ran h100_sxm without a word; `--hw ''` read '.: is a directory' (a trial)."""
    with pytest.raises(SystemExit) as exit_:
        main(["run", str(ROOT / "workloads" / "llama13b_decode.yaml"), *hw])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_missing_subcommand_names_the_choices(capsys):
    """A review: with the usage block gone, `sim hw` read "the following arguments are required: hw_cmd"."""
    with pytest.raises(SystemExit):
        main(["hw"])
    assert "sim hw: error: expected a subcommand: list, show, check" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["validate-energy", "x.csv", "--every", "0"], ["run", "w.yaml"], ["nope"],
                                  ["offload", "search", "--nope"], ["serve", "w.yaml", "--hw", "h100_sxm", "--seed", "x"]])
def test_a_usage_error_is_one_line(argv, capsys):
    """An energy trial: `sim validate-energy PATH --every 0` printed argparse's 7-line usage block before its error,
    where docs/cli.md promises one line and exit 2 for what the user typed. Every subcommand's parser now says it in
    one line, naming --help."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "error:" in err and "--help` lists the options" in err


def test_hostile_trial_messages_name_the_mistake(tmp_path, capsys):
    """A hostile-input trial's unclear lines, each now naming what is wrong: an empty model name had read "is a
    directory"; `-2x` "unknown unit 'x'"; `--source-hw groq_lpu` blamed --hw; a config.json giving a key twice ran
    with the last value; `sim survey --shared` on a missing folder ran without the measured rows."""
    from tests.robust_helpers import refused

    w = str(ROOT / "workloads" / "llama2_7b_decode.yaml")
    assert "the model name is empty" in refused(capsys, ["model", "show", ""])
    assert "a factor must be a finite number above 0" in refused(
        capsys, ["run", w, "--hw", "a6000", "--set", "hw.memory.@device.bandwidth_bytes_per_s=-2x"])
    trace = str(ROOT / "traces" / "h200" / "llama2-13b_L4_fp16_b1_p2048_d8_cuda.ops.csv")
    assert refused(capsys, ["replay", trace, "--hw", "a6000", "--source-hw", "groq_lpu"]).startswith(
        "error: --source-hw groq_lpu: kind 'spatial'")
    twice = tmp_path / "config.json"
    twice.write_text('{"hidden_size": 256, "hidden_size": 512, "num_hidden_layers": 2}')
    assert "duplicate key 'hidden_size'" in refused(capsys, ["model", "show", str(twice)])
    assert refused(capsys, ["survey", "--out", str(tmp_path / "sv"), "--shared", str(tmp_path / "nope"), "--quick"],
                   tmp_path).startswith(f"error: --shared {tmp_path / 'nope'}: no such folder")

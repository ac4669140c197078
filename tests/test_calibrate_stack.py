"""`sim calibrate --stack` and `--held-out`: the stack's kernel figures go into the preset's
`stacks:` section, and a calibration that makes held-out traces worse is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.apps.cli import main

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "traces" / "h200"
# The calibration set of h200_calibrated and of torch-eager's figures (scripts/fit_stack.py); the rest is held out.
FIT = ("llama2-7b_L4_fp16_b1_p1024", "llama2-13b_L4_fp16_b8_p1024", "llama2-7b_L4_bf16_b4_p4096",
       "llama3-8b_L4_bf16_b1_p128")


def _split() -> tuple[list[str], list[str]]:
    paths = sorted(H200.glob("*.trace.json.gz"))
    if not paths:
        pytest.skip("no H200 traces")
    return ([str(p) for p in paths if p.name.startswith(FIT)], [str(p) for p in paths if not p.name.startswith(FIT)])


# A bf16 batch-1 128-token capture refitted onto cpu_host_calibrated makes the fp32 batch-8 512-token one's error far
# worse (34.4% -> 96.9%): the held-out gate's case. (It was CPU traces fitted onto the h200, now refused outright:
# test_a_trace_from_another_kind_of_device_is_refused.)
FIT_CPU = str(ROOT / "traces/cpu/llama2-7b_L2_bf16_b1_p128_d16_cpu.ops.csv")
HELD_CPU = str(ROOT / "traces/cpu/llama2-7b_L2_fp32_b8_p512_d16_cpu.ops.csv")


def test_a_trace_from_another_kind_of_device_is_refused(tmp_path, capsys):
    """A trace workflow trial: a CPU capture calibrated into `h200` wrote a GPU preset 139x slower, exit 0; an H200
    capture into cpu_host pinned every efficiency at 1. A trace is compared with or fitted into its own kind only."""
    h200 = _split()[1][0]
    for argv in (["calibrate", FIT_CPU, "--hw", "h200", "-o", str(tmp_path / "x.yaml")],
                 ["calibrate", h200, "--hw", "cpu_host", "-o", str(tmp_path / "x.yaml")],
                 ["validate", FIT_CPU, "--hw", "h200"], ["validate", h200, "--hw", "cpu_host"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "measured on a" in err and "sim replay maps a trace onto other hardware" in err and "\n" not in err
    assert not (tmp_path / "x.yaml").exists()
    assert main(["validate", h200, "--hw", "h100_sxm", "-q"]) == 0   # another GPU: said, not refused
    assert "measured on NVIDIA H200, compared with --hw h100_sxm, another GPU" in capsys.readouterr().err
    # and a preset fitted on another GPU's captures says so in its header, where the warning had been said once only
    # (a trace trial's A6000 captures in h200 read a 42.9 ms TPOT against h200's 10.1, nothing in the file)
    assert main(["calibrate", h200, "--hw", "h100_sxm", "-o", str(tmp_path / "h.yaml")]) == 0
    assert ("# FITTED ON ANOTHER DEVICE'S TRACES (NVIDIA H200), not h100_sxm's: its efficiencies carry that device's "
            "difference from h100_sxm") in (tmp_path / "h.yaml").read_text()
    assert main(["calibrate", h200, "--hw", "h200", "-o", str(tmp_path / "own.yaml")]) == 0
    assert "ANOTHER DEVICE" not in (tmp_path / "own.yaml").read_text()


def test_worse_held_out_is_refused(tmp_path, capsys):
    """A refit that makes its held-out trace's error far worse: refused, one line naming --held-out, exit 2,
    nothing written."""
    out = tmp_path / "x.yaml"
    rc = main(["calibrate", FIT_CPU, "--hw", "cpu_host_calibrated", "--held-out", HELD_CPU, "-o", str(out)])
    # one error line (a warning may precede it: embed and kv_append, of too few shapes in one trace to get curves
    # of their own, MIN_KIND_SHAPES, fit worse on the all-ops curve)
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("warning:")]
    assert rc == 2 and len(err) == 1 and "--held-out" in err[0] and "worse" in err[0]
    assert not out.exists()


def test_report_shows_the_refused_comparison_and_force_writes_it(tmp_path, capsys):
    """The same refused calibration: --report prints the held-out MAPE before and after and writes
    nothing (exit 0); --force writes the preset and its header says it is worse on the held-out traces."""
    out = tmp_path / "x.yaml"
    argv = ["calibrate", FIT_CPU, "--hw", "cpu_host_calibrated", "--held-out", HELD_CPU, "-o", str(out)]
    assert main([*argv, "--report"]) == 0
    text = capsys.readouterr().out
    assert "held-out per-op MAPE" in text and "would refuse" in text and not out.exists()
    assert main([*argv[:-2], "--report"]) == 0   # a dry run needs no --out (a trace workflow trial)
    assert "would refuse" in capsys.readouterr().out
    assert main([*argv, "--force"]) == 0
    assert "WORSE on the held-out traces: written with --force" in out.read_text()


def test_report_without_held_out_is_one_line(tmp_path, capsys):
    cpu = str(ROOT / "traces/cpu/llama2-7b_L2_bf16_b1_p128_d16_cpu.ops.csv")
    assert main(["calibrate", cpu, "--hw", "h200", "-o", str(tmp_path / "x.yaml"), "--report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--held-out" in err[0]


def test_stack_calibration_writes_its_kernels_and_keeps_held_out_error(tmp_path, capsys):
    fit, test = _split()
    out = tmp_path / "h200_cal.yaml"
    assert main(["calibrate", *fit, "--hw", "h200", "--stack", "torch-eager", "--min-traces", "2", "--held-out", *test,
                 "-o", str(out)]) == 0
    text = out.read_text()
    assert "Held out (4 traces" in text
    # stdout shows the stack's fitted kernel figures too (a trace trial: only the roofline curves were printed)
    assert "Under stack torch-eager: the efficiency curves are fitted on the ops it leaves" in capsys.readouterr().out
    spec = yaml.safe_load(text)["stacks"]["torch-eager"]
    assert {"norm", "rope", "elementwise"} <= set(spec["ops"]) and "act" in spec["names"]
    # The fitted machine runs the stack with its own figures (hw_models.stack.spec.stack_for).
    from hw_models.machine import load_machine
    from hw_models.stack.spec import stack_for
    s = stack_for("torch-eager", load_machine(str(out)))
    assert s.ops["norm"].floor_s == pytest.approx(spec["ops"]["norm"]["floor_s"])
    # What the GPU is survives the fit: the stacks pick attention kernels by the compute capability (a preset that
    # lost it priced torch's SDPA decode by the roofline again: held-out attention 10.0% -> 20.5%).
    base, fitted = (load_machine(p).units["gpu"].efficiency for p in ("h200", str(out)))
    for k in ("parallel_units", "clock_hz", "compute_capability"):
        assert getattr(fitted, k) == getattr(base, k) is not None


def test_h200_calibrated_out_of_sample():
    """h200_calibrated (fitted on FIT) against h200 on the held-out traces, both under torch-eager:
    no worse, and within the issue's 8% (measured 8.1% -> 7.9%; 10.0% -> 9.95% before the serial row kernels)."""
    from hw_models.machine import load_machine
    from sim.apps.trace.parser import load_trace
    from sim.apps.trace.validate import validate
    test = [load_trace(p)[0] for p in _split()[1]]
    before = validate(test, load_machine("h200"), stack="torch-eager").mape
    after = validate(test, load_machine("h200_calibrated"), stack="torch-eager").mape
    assert after <= before <= 0.15 and after <= 0.08


def test_bad_stacks_section_is_one_line(tmp_path, capsys):
    hw = tmp_path / "hw.yaml"
    hw.write_text((ROOT / "hw_models/presets/h200.yaml").read_text()
                  + "stacks:\n  torch-eager:\n    ops: {normz: {floor_s: 1.0e-6}}\n")
    rc = main(["run", str(ROOT / "workloads/llama2_7b_decode.yaml"), "--hw", str(hw), "--set", "stack=torch-eager",
               "--set", "gen_len=2", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "stacks.torch-eager.ops.normz" in err[0] and str(hw) in err[0]


def test_gemv_max_m_from_the_command_line(tmp_path, capsys):
    """--gemv-max-m search fits docs/validation.md's CPU preset from the README's command (it reached only the
    one-curve fit, whose held-out MAPE is worse); none fits one GEMM curve; a bad value is one line, exit 2."""
    from hw_models.machine import load_machine

    fit = sorted(str(p) for p in (ROOT / "traces" / "cpu").glob("*fp32*p128*.ops.csv"))
    if not fit:
        pytest.skip("no CPU traces")
    out = tmp_path / "searched.yaml"
    assert main(["calibrate", *fit, "--hw", "cpu_host", "-o", str(out), "-q", "--gemv-max-m", "search"]) == 0
    # the fit's choice on these traces, as docs/validation.md's cpu_host_calibrated records it (M <= 1)
    assert load_machine(str(out)).units["cpu"].efficiency.gemv_max_m == \
        load_machine("cpu_host_calibrated").units["cpu"].efficiency.gemv_max_m == 1
    none = tmp_path / "none.yaml"
    assert main(["calibrate", *fit, "--hw", "cpu_host", "-o", str(none), "-q", "--gemv-max-m", "none"]) == 0
    assert load_machine(str(none)).units["cpu"].efficiency.gemv_max_m is None
    assert main(["calibrate", *fit, "--hw", "cpu_host", "-o", str(tmp_path / "x.yaml"), "--gemv-max-m", "0"]) == 2
    assert "--gemv-max-m '0': expected search, none or a positive whole number" in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()


def test_a_fit_its_own_traces_disagree_with_is_said(tmp_path, capsys):
    """A trace workflow trial: a fit on contended captures made its own training traces 79.8% -> 298.8% and was
    written without a word. One efficiency curve over bf16 and fp32 captures, on top of cpu_host_calibrated, makes
    those same traces worse (34.3% -> 64.8%): written (no held-out gate to refuse it), with a warning; a plain fit of
    one trace onto cpu_host gets none."""
    out = tmp_path / "x.yaml"
    mixed = [FIT_CPU, HELD_CPU]
    assert main(["calibrate", *mixed, "--hw", "cpu_host_calibrated", "--single-curve", "-o", str(out)]) == 0
    assert "the fit makes its own traces' per-op MAPE worse" in capsys.readouterr().err and out.exists()
    assert main(["calibrate", HELD_CPU, "--hw", "cpu_host", "-o", str(tmp_path / "y.yaml")]) == 0
    assert "makes its own traces" not in capsys.readouterr().err


def test_model_and_tokens_that_contradict_the_file_are_said(capsys):
    """A trace workflow trial: --model re-costed a capture as another model and --tokens a 512-token vidur trace as
    4096, silently (the help calls them fill-ins). Where the file says otherwise, the replacement is said; where a
    file's own model wins (an ops table), that --model does not apply is said."""
    trace = str(ROOT / "traces/cpu/llama2-7b_L2_fp32_b1_p128_d16_cpu.trace.json.gz")
    assert main(["validate", trace, "--hw", "cpu_host", "--model", "tinyllama-1.1b", "-q"]) == 0
    assert "--model tinyllama-1.1b replaces the capture's own llama2-7b" in capsys.readouterr().err
    assert main(["validate", HELD_CPU, "--hw", "cpu_host", "--model", "tinyllama-1.1b", "-q"]) == 0
    assert "--model tinyllama-1.1b does not apply: the file names its own model, llama2-7b" in capsys.readouterr().err
    assert main(["validate", HELD_CPU, "--hw", "cpu_host", "-q"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_one_capture_is_counted_once(tmp_path, capsys):
    """A capture given twice (one path twice, or its .ops.csv and its .trace.json.gz) was fitted as two and passed
    --min-traces 2; as --held-out, a fitted capture gave an in-sample figure labelled held out (a trial's
    findings). Both are refused before anything is written; sim validate says it counts the ops twice."""
    out = tmp_path / "x.yaml"
    twin = FIT_CPU.replace(".ops.csv", ".trace.json.gz")
    for traces in ([FIT_CPU, FIT_CPU], [FIT_CPU, twin]):
        assert main(["calibrate", *traces, "--hw", "cpu_host", "-o", str(out)]) == 2
        later = traces[1]
        assert capsys.readouterr().err.strip() == (f"error: {later}: the same capture as {FIT_CPU}; give each "
                                                   "capture once (a fit counts it once)")
    assert main(["calibrate", FIT_CPU, "--hw", "cpu_host", "-o", str(out), "--held-out", twin]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --held-out {twin}: the capture {FIT_CPU} is fitted on; a "
                                               "held-out figure needs another capture")
    # one held-out capture given twice is that, not a fitted one
    assert main(["calibrate", FIT_CPU, "--hw", "cpu_host", "-o", str(out), "--held-out", HELD_CPU, HELD_CPU]) == 2
    assert capsys.readouterr().err.strip() == (f"error: {HELD_CPU}: the same capture as {HELD_CPU}; give each "
                                               "capture once (a fit counts it once)")
    assert not out.exists()
    assert main(["validate", FIT_CPU, FIT_CPU, "--hw", "cpu_host", "-q"]) == 0
    assert f"warning: {FIT_CPU}: the same capture as {FIT_CPU}; its ops count twice" in capsys.readouterr().err


def test_replay_refuses_a_table_without_rows_as_validate_does(tmp_path, capsys):
    """An .ops.csv cut to its header (its .meta.json beside it) replayed to a table of "-" and exit 0 where sim
    validate refused it (a trial's finding)."""
    import shutil
    cut = tmp_path / "cut.ops.csv"
    cut.write_text(Path(FIT_CPU).read_text().splitlines()[0] + "\n")
    shutil.copy(FIT_CPU.replace(".ops.csv", ".meta.json"), tmp_path / "cut.meta.json")
    for cmd in ("replay", "validate"):   # since stop 69 as the cut file it is, in one line
        assert main([cmd, str(cut), "--hw", "cpu_host"]) == 2
        err = capsys.readouterr().err.strip()
        assert "a truncated file" in err and "\n" not in err


def test_a_capture_under_the_wrong_stack_says_so(capsys):
    """An eager CPU capture validated under --stack vllm read "op 'L0.q_proj' ... is not in the simulated graph"
    without saying why (a trial's finding)."""
    assert main(["validate", FIT_CPU, "--hw", "cpu_host", "--stack", "vllm"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "is not in the simulated graph; stack 'vllm' builds another op structure (its fused kernels) than the "
        "capture ran: give the stack the capture ran under, or none")

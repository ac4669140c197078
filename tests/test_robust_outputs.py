"""Issue 17, items 1, 5, 6, 7 and 13: where outputs land, what they hold, and hardware
values refused before they can produce nonsense."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading

import pytest

from sim.core import files
from sim.apps.cli import main
from sim.core.errors import ConfigError
from tests.conftest import ROOT
from tests.robust_helpers import TINY_WORKLOAD, refused


@pytest.fixture
def tiny(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY_WORKLOAD)
    return p


# ---------------------------------------------------------------- item 1: where a write lands

def test_json_to_dev_null_writes_through_and_keeps_the_device(tiny):
    # As root the old atomic replace turned /dev/null into a regular file.
    assert main(["run", str(tiny), "--hw", "a6000", "-q", "--json", "/dev/null"]) == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_json_to_a_fifo_is_written_through(tiny, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert main(["run", str(tiny), "--hw", "a6000", "-q", "--json", str(fifo)]) == 0
    reader.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(got[0])["batch"] == 1


def test_json_through_a_symlink_replaces_the_target_and_keeps_the_link(tiny, tmp_path):
    target = tmp_path / "real" / "r.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert main(["run", str(tiny), "--hw", "a6000", "-q", "--json", str(link)]) == 0
    assert link.is_symlink() and json.loads(target.read_text())["batch"] == 1
    assert sorted(p.name for p in target.parent.iterdir()) == ["r.json"]  # no temp file left


def test_a_read_only_output_is_refused_and_kept(tiny, tmp_path, capsys):
    ro = tmp_path / "ro.json"
    ro.write_text("keep")
    ro.chmod(0o444)
    line = refused(capsys, ["run", str(tiny), "--hw", "a6000", "-q", "--json", str(ro)], tmp_path)
    assert line == f"error: {ro}: cannot write: permission denied (read-only)"


# ---------------------------------------------------------------- item 5: all outputs or none

def test_a_failing_later_output_leaves_no_earlier_one(tiny, tmp_path, capsys, monkeypatch):
    from sim.apps import gantt as plots   # the last output written (sim run imports it when it writes plots)

    def full_disk(*a, **k):
        raise ConfigError(f"{tmp_path / 'plots'}: cannot write: No space left on device")

    monkeypatch.setattr(plots, "gantt", full_disk)
    refused(capsys, ["run", str(tiny), "--hw", "a6000", "-q", "--json", str(tmp_path / "ok.json"),
                     "--plots", str(tmp_path / "plots")], tmp_path)


def test_validate_checks_both_outputs_before_the_work(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    line = refused(capsys, ["validate", str(ROOT / "tests/data/trace_tinyllama_L1.ops.csv"), "--hw", "cpu_host",
                            "--json", str(tmp_path / "v.json"), "--plots", str(afile / "plots")], tmp_path)
    assert line == f"error: {afile / 'plots'}: cannot write: {afile} is not a directory"


def test_transaction_lands_everything_or_nothing(tmp_path):
    with files.transaction():
        files.write_json(tmp_path / "a.json", {"x": 1})
        assert not (tmp_path / "a.json").exists()  # staged, not landed
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}
    with pytest.raises(RuntimeError), files.transaction():
        files.write_json(tmp_path / "b.json", {"x": 2})
        raise RuntimeError("later failure")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


# ---------------------------------------------------------------- item 6: finite, positive, physical

@pytest.mark.parametrize("setting, message", [
    ("hw.units.gpu.peak_flops_per_s.fp16=.nan", "units.gpu.peak_flops_per_s.fp16: must be a finite number, got nan"),
    ("hw.memory.gddr.bandwidth_bytes_per_s=.inf", "memory.gddr.bandwidth_bytes_per_s: must be a finite number"),
    ("hw.units.gpu.efficiency.compute_ramp_s=.inf", "units.gpu.efficiency.compute_ramp_s: Input should be a finite number"),
    # finite, but ramp x peak overflows the curve's half size to infinity: was a ZeroDivisionError traceback
    ("hw.units.gpu.efficiency.compute_ramp_s=1e300", "the simulated ttft_s is nan: a rate or size in the hardware"),
    ("hw.units.gpu.peak_flops_per_s.fp16=0", "units.gpu.peak_flops_per_s: fp16: must be positive"),
    # below a megabyte / megaFLOP a second: the schema names the key (it read "ttft_s is nan" without it, a trial)
    ("hw.memory.gddr.bandwidth_bytes_per_s=1e-300",
     "memory.gddr.bandwidth_bytes_per_s: '1e-300' is below 1 MB/s: out of any physical range"),
    ("hw.units.gpu.peak_flops_per_s.fp16=1e-300",
     "units.gpu.peak_flops_per_s.fp16: '1e-300' is below 1 MFLOP/s: out of any physical range"),
    # a unit left out: an architecture trial's 3.35 (TB/s meant) ran at 3.35 B/s, TTFT 2.1e10 s, exit 0
    ("hw.memory.gddr.bandwidth_bytes_per_s=3.35", "memory.gddr.bandwidth_bytes_per_s: 3.35 is below 1 MB/s: out of "
     "any physical range: a bare number is in B/s; give the unit, e.g. '3.35 GB/s' or '3.35 TB/s'"),
    ("hw.memory.gddr.bandwidth_bytes_per_s=768", "768 is below 1 MB/s: out of any physical range: a bare number is in "
     "B/s; give the unit, e.g. '768 GB/s' or '768 TB/s'"),
    # a negative rate is the field's own error, not a unit left out (a review)
    ("hw.memory.gddr.bandwidth_bytes_per_s=-3.35", "memory.gddr.bandwidth_bytes_per_s: Input should be greater than 0"),
    ("hw.units.gpu.peak_flops_per_s.fp16=989.4 kFLOP/s", "'989.4 kFLOP/s' is below 1 MFLOP/s: out of any physical range"),
])
def test_non_physical_hardware_values_are_refused(tiny, tmp_path, capsys, setting, message):
    line = refused(capsys, ["run", str(tiny), "--hw", "a6000", "-q", "--set", setting,
                            "--json", str(tmp_path / "r.json")], tmp_path)
    assert "a6000.yaml" in line and message in line


@pytest.mark.parametrize("hw, setting, message", [
    ("a6000", "hw.units.gpu.efficiency.parallel_units=true", "units.gpu.efficiency.parallel_units: Input should be a valid integer"),
    ("groq_lpu", "hw.spatial.chips=true", "spatial.chips: must be a positive integer or auto, got True"),
    ("groq_lpu", "hw.spatial.pe_array.fold_overlap=2", "spatial.pe_array.fold_overlap: Input should be a valid boolean"),
    ("hbm_pim", "hw.pim.gemm_sharing=1", "pim.gemm_sharing: Input should be a valid boolean"),
])
def test_hardware_counts_and_switches_are_strict(tiny, tmp_path, capsys, hw, setting, message):
    """`true` was read as a count of 1 and `1` as a switch (item 8, on presets as on workloads)."""
    line = refused(capsys, ["run", str(tiny), "--hw", hw, "-q", "--set", setting], tmp_path)
    assert f"{hw}.yaml" in line and message in line


def test_a_spatial_sram_of_1e300_bytes_takes_one_chip(tiny, tmp_path):
    # total / capacity ~ 1e-290 made the cut 0 chips: a ZeroDivisionError traceback.
    out = tmp_path / "r.json"
    assert main(["run", str(tiny), "--hw", "groq_lpu", "-q", "--set", "hw.memory.sram.capacity_bytes=1e300",
                 "--json", str(out)]) == 0
    assert json.loads(out.read_text())["extra"]["spatial"]["chips"] == 1


def test_json_is_standard_and_sorted():
    text = files.dumps({"b": float("nan"), "a": [float("inf"), 1.5], "c": {"z": 1, "y": 2}})
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"a": [None, 1.5], "b": None, "c": {"y": 2, "z": 1}}
    assert text.index('"a"') < text.index('"b"') < text.index('"c"')


# ---------------------------------------------------------------- item 7: units have dimensions

@pytest.mark.parametrize("setting, message", [
    ("hw.memory.gddr.bandwidth_bytes_per_s=10 GB", "memory.gddr.bandwidth_bytes_per_s: '10 GB' is in bytes, expected bytes/s"),
    ("hw.memory.gddr.capacity_bytes=80 GB/s", "memory.gddr.capacity_bytes: '80 GB/s' is in bytes/s, expected bytes"),
    ("hw.units.gpu.peak_flops_per_s.fp16=300 GB", "units.gpu.peak_flops_per_s.fp16: '300 GB' is in bytes, expected flop/s"),
    ("hw.units.gpu.launch_overhead_s=4 GB", "units.gpu.launch_overhead_s: '4 GB' is in bytes, expected s"),
])
def test_quantities_in_the_wrong_dimension_are_refused(tiny, tmp_path, capsys, setting, message):
    line = refused(capsys, ["run", str(tiny), "--hw", "a6000", "-q", "--set", setting], tmp_path)
    assert line.endswith(message)


@pytest.mark.parametrize("value, message", [
    ("12 GB/s", "'12 GB/s' is in bytes/s, expected bytes"),
    ("1e400", "must be a positive, finite size"),
    ("0", "must be a positive, finite size"),
])
def test_max_gpu_mem_is_a_positive_finite_size(tiny, tmp_path, capsys, value, message):
    line = refused(capsys, ["offload", "search", str(tiny), "--hw", "flexgen_t4", "--max-gpu-mem", value], tmp_path)
    assert line.startswith(f"error: --max-gpu-mem {value!r}: ") and message in line


# ---------------------------------------------------------------- item 13: byte-identical outputs

_TWICE = """
import sys
from sim.apps.cli import main
for hw in ("flexgen_t4", "hbm_pim"):
    assert main(["run", sys.argv[1], "--hw", hw, "-q", "--json", f"{sys.argv[2]}/{hw}.json"]) == 0
out = sys.argv[2]
assert main(["serve", sys.argv[3], "--hw", "a6000", "-q", "--json", f"{out}/serve.json", "--requests",
             f"{out}/requests.csv", "--chrome-trace", f"{out}/serve_trace.json"]) == 0
"""
# A serving file with prefix caching (hash ids per request) and an SLO: every summary field in play.
_SERVE = """name: s
model: tinyllama-1.1b
serving:
  arrivals: {process: poisson, rate: 10, num_requests: 20, seed: 0}
  lengths: {prompt: {dist: fixed, value: 64}, output: {dist: fixed, value: 8}}
  prefix_caching: {enabled: true, shared_prefix: {tokens: 32, groups: 2}}
  slo: {ttft_p90: 0.05}
"""


def test_the_same_run_gives_the_same_bytes_under_any_hash_seed(tiny, tmp_path, monkeypatch):
    # One run in this process (its own hash seed: random, or PYTHONHASHSEED if set) and one in a fresh
    # process under a different fixed seed: two seeds, as two processes gave, for one interpreter start-up.
    serve = tmp_path / "serve.yaml"
    serve.write_text(_SERVE)
    child_seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    outs = []
    for where in ("here", "child"):
        out = tmp_path / where
        out.mkdir()
        argv = [str(tiny), str(out), str(serve)]
        if where == "here":
            monkeypatch.setattr(sys, "argv", ["-c", *argv])
            exec(_TWICE, {"__name__": "__main__"})
        else:
            subprocess.run([sys.executable, "-c", _TWICE, *argv], check=True, cwd=ROOT,
                           env={**os.environ, "PYTHONHASHSEED": child_seed})
        outs.append({p.name: p.read_bytes() for p in out.iterdir()})
    assert sorted(outs[0]) == ["flexgen_t4.json", "hbm_pim.json", "requests.csv", "serve.json", "serve_trace.json"]
    assert outs[0] == outs[1]


@pytest.mark.parametrize("argv, option", [
    (["run", "{tiny}", "--hw", "a6000", "--json", ""], "--json"),
    (["run", "{tiny}", "--hw", "a6000", "--plots", ""], "--plots"),
    (["serve", str(ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml"), "--hw", "h100_sxm", "--requests", ""],
     "--requests"),
    (["sweep", str(ROOT / "sweeps" / "bandwidth_x_batch.yaml"), "--out", ""], "--out"),
])
def test_an_empty_output_path_is_refused(tiny, tmp_path, capsys, argv, option):
    """`--json ''` ran and wrote nothing, silently."""
    line = refused(capsys, [str(tiny) if a == "{tiny}" else a for a in argv], tmp_path)
    assert line == f"error: {option}: an empty path; give a name"


def test_a_file_output_ending_in_a_separator_is_a_folder(tiny, tmp_path, capsys):
    """`--json out/` had written a file named `out` (Path drops the slash)."""
    out = tmp_path / "newdir"
    line = refused(capsys, ["run", str(tiny), "--hw", "a6000", "--json", f"{out}/"], tmp_path)
    assert line == f"error: {out}/: a folder path; expected a file path" and not out.exists()


def test_max_gpu_mem_over_the_gpu_is_the_gpus_capacity(tmp_path, capsys):
    # --max-gpu-mem '1 TB' on the 16 GB T4 placed all of OPT-30B's 164 GB on the GPU (41.1 tokens/s, a placement
    # sim run refuses); a cap above the device is now the device's own capacity, with a warning.
    wl = ROOT / "workloads" / "opt30b_flexgen.yaml"
    outs = []
    for extra in (["--max-gpu-mem", "1 TB"], []):
        out = tmp_path / f"o{len(outs)}.json"
        assert main(["offload", "search", str(wl), "--hw", "flexgen_t4", "--set", "policy=search", "-q",
                     "--json", str(out), *extra]) == 0
        outs.append({k: v for k, v in json.loads(out.read_text()).items() if k != "elapsed_s"})
    assert "more than flexgen_t4's 16.00 GB; the GPU's own capacity is the cap" in capsys.readouterr().err
    assert outs[0] == outs[1] and outs[0]["best"]["wg"] < 0.25


def test_a_folder_an_output_makes_is_named(tiny, tmp_path, capsys):
    """docs/errors.md: a missing folder is made, so a typo in its name writes somewhere new; a note names the folder
    it made (a docs trial found the promised line missing). Writing there again says nothing."""
    out = tmp_path / "new" / "deeper" / "run.json"
    for note in (True, False):
        assert main(["run", str(tiny), "--hw", "a6000", "-q", "--json", str(out)]) == 0
        err = capsys.readouterr().err
        assert (f"note: {out}: made the folder {out.parent} (and 1 above it, from {tmp_path / 'new'})" in err) is note
    assert out.is_file()


@pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_sigmask"), reason="no signal masks on this platform")
def test_an_interrupt_inside_a_deferred_block_lands_after_it():
    """files.deferred_interrupts holds a Ctrl-C back until the block ends (a temp file and its removal registered, a
    transaction's renames), so it never falls between two statements that must go together."""
    import signal

    reached = []
    with pytest.raises(KeyboardInterrupt):
        with files.deferred_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            reached.append("after the signal")   # still inside: the interrupt waits
    assert reached == ["after the signal"]


def test_an_interrupt_another_thread_receives_still_waits_for_the_block():
    """A process-directed Ctrl-C may reach any thread that does not block it (rich's progress refresh, a worker
    pool); Python then runs the handler in the main thread. A signal mask on the main thread had let it land inside
    the block (the full suite caught it, threads of earlier tests alive): the deferral holds it whichever thread the
    kernel picks, here another thread on purpose."""
    import signal
    import threading
    import time

    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    reached = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with files.deferred_interrupts():
                signal.pthread_kill(other.ident, signal.SIGINT)
                time.sleep(0.05)   # the main thread runs pending handlers between these statements
                reached.append("after the signal")
    finally:
        stop.set()
        other.join()
    assert reached == ["after the signal"]


def test_an_interrupt_during_a_transaction_s_write_leaves_no_temporary_file(tmp_path):
    """A Ctrl-C while a later output is written: the earlier output's temporary file goes too, nothing lands."""
    def interrupted(path):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with files.transaction():
            files.atomic_write(tmp_path / "a.json", lambda p: p.write_text("{}"))
            files.atomic_write(tmp_path / "b.json", interrupted)
    assert sorted(tmp_path.iterdir()) == []

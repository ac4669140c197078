"""Sweeps: expansion, the safe `when` language, executors (process pool, Dask),
the resumable store, failure isolation and plots. A tiny 2-layer model keeps
each point at a few milliseconds."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sim.core.errors import ConfigError
from sim.apps.sweep import load_results
from sim.apps.sweep.expand import expand
from sim.apps.sweep.expr import compile_expr, lookup_in
from sim.apps.sweep.plots import pareto_front
from sim.apps.sweep.run import run_sweep
from sim.apps.sweep.spec import spec_from_dict
from sim.apps.sweep.store import DB_NAME
from tests.robust_helpers import refused

ROOT = Path(__file__).resolve().parents[1]

TINY = dict(name="tiny", model=dict(name="tiny", hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                    max_position_embeddings=512),
            batch=1, prompt_len=16, gen_len=4)


def make_spec(tmp: Path, axes: dict, **extra) -> Path:
    (tmp / "wl.yaml").write_text(yaml.safe_dump(TINY))
    spec = dict(name="t", workload="wl.yaml", hw="a6000", axes=axes, **extra)
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def spec_of(tmp: Path, axes: dict, **extra):
    path = make_spec(tmp, axes, **extra)
    return spec_from_dict(yaml.safe_load(path.read_text()), str(path))


# ---------------------------------------------------------------- expansion

def test_grid_zip_random_and_when_counts(tmp_path):
    bw = "hw.memory.@device.bandwidth_bytes_per_s"
    # grid: 3 batches x 2 bandwidths = 6 points
    assert len(expand(spec_of(tmp_path, {"workload.batch": [1, 2, 4], bw: [0.5e12, 1e12]}))) == 6
    # a log range of num 4 from 1 to 8 is 1, 2, 4, 8 (whole numbers since min and max are)
    pts = expand(spec_of(tmp_path, {"workload.batch": {"min": 1, "max": 8, "num": 4, "log": True}}))
    assert [p.axes["workload.batch"] for p in pts] == [1, 2, 4, 8]
    # zip pairs the i-th values: 3 points
    pts = expand(spec_of(tmp_path, {"workload.batch": [1, 2, 4], "workload.gen_len": [4, 8, 16]}, mode="zip"))
    assert [(p.axes["workload.batch"], p.axes["workload.gen_len"]) for p in pts] == [(1, 4), (2, 8), (4, 16)]
    with pytest.raises(ConfigError, match="equal length"):
        expand(spec_of(tmp_path, {"workload.batch": [1, 2], "workload.gen_len": [4]}, mode="zip"))
    # random: 7 draws from a continuous log range never repeat, so 7 points, inside the range, reproducible
    spec = spec_of(tmp_path, {bw: {"min": 1e11, "max": 1e13, "log": True}, "workload.batch": [1, 2]},
                   mode="random", samples=7, seed=3)
    a, b = expand(spec), expand(spec)
    assert len(a) == 7 and [p.key for p in a] == [p.key for p in b]
    assert all(1e11 <= p.axes[bw] <= 1e13 for p in a)
    # when: prompt_len 16, so batch * 16 <= 32 keeps batches 1 and 2 of 1, 2, 4: 2 x 2 = 4 points
    spec = spec_of(tmp_path, {"workload.batch": [1, 2, 4], bw: [0.5e12, 1e12]},
                   when="workload.batch * workload.prompt_len <= 32")
    assert len(expand(spec)) == 4
    # the hw axis and a string comparison on it: 2 presets x 2 batches, minus h100 at batch 2
    spec = spec_of(tmp_path, {"hw": ["a6000", "h100_sxm"], "workload.batch": [1, 2]},
                   when="not (hw == 'h100_sxm' and workload.batch > 1)")
    pts = expand(spec)
    assert len(pts) == 3 and {p.columns["hw.name"] for p in pts} == {"a6000", "h100_sxm"}


def test_typo_in_a_dotted_path_fails_before_anything_runs(tmp_path, capsys):
    for axis, needle in [("hw.memory.@device.bandwith_bytes_per_s", "bandwith_bytes_per_s: unknown key"),
                         ("hw.memory.hbm.bandwidth_bytes_per_s", "memory.hbm: unknown key; keys here: gddr"),  # a6000 has gddr
                         ("workload.batchh", "workload.batchh: unknown workload field"),
                         ("workload.formats.weigths", "formats.weigths: unknown key"),
                         ("model.batch", "starts with 'workload.' or 'hw.'")]:
        path = make_spec(tmp_path, {axis: [1, 2]})
        out = tmp_path / "out"
        with pytest.raises(ConfigError) as exc:
            run_sweep(path, out, workers=1, progress=False)
        msg = str(exc.value)
        assert needle in msg and f"axes.{axis}" in msg and "\n" not in msg, msg
        assert not (out / DB_NAME).exists()  # nothing ran, nothing was stored
    # a bad value (an unknown format) also fails up front, naming the point
    with pytest.raises(ConfigError, match="formats.weights"):
        expand(spec_of(tmp_path, {"workload.formats.weights": ["fp16", "fp17"]}))
    # and through the CLI (in process, main()): exit 2, one line on stderr, nothing written
    path = make_spec(tmp_path, {"workload.batchh": [1]})
    assert "workload.batchh" in refused(capsys, ["sweep", str(path), "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- safe expressions

def test_safe_expression_language():
    look = lookup_in({"workload": {"batch": 8, "prompt_len": 1024}, "hw": {"price_usd": 4650.0}})
    assert compile_expr("workload.batch * workload.prompt_len <= 8192")(look) is True
    assert compile_expr("min(workload.batch, 4) * 2 ** 3 == 32 and not hw.price_usd > 5000")(look) is True
    assert compile_expr("workload.batch in [1, 2, 8] or workload.batch // 3 % 2 == 1")(look) is True
    assert compile_expr("workload.batch - 10 < -1")(look) is True
    bad = ["workload.batch.__class__",               # dunder via a dotted name
           "(1).real",                               # attribute access on an expression
           "'abc'.upper()",                          # a method call
           "__import__('os').system('true')",        # an import through a call
           "open('/etc/passwd')",                    # any other call
           "import os",                              # a statement (syntax error in eval mode)
           "workload['batch']",                      # subscripts
           "[x for x in [1]]",                       # comprehensions
           "(lambda: 1)()",
           "min(*[1, 2])"]
    for text in bad:
        with pytest.raises(ConfigError):
            compile_expr(text)
    with pytest.raises(ConfigError, match="no such field"):
        compile_expr("workload.bacth > 1")(look)
    with pytest.raises(ConfigError, match="exponent"):
        compile_expr("10 ** 10 ** 10 > 1")(look)
    with pytest.raises(ConfigError, match="needs numbers"):
        compile_expr("'a' * 1000000000 == 'a'")(look)


# ---------------------------------------------------------------- execution and store

def _metrics(df):
    cols = [c for c in ("tpot_s", "ttft_s", "e2e_s", "energy_per_token_j") if c in df.columns]
    return df.sort_values("key").set_index("key")[["status"] + cols]


def test_dask_local_cluster_matches_process_pool(tmp_path):
    distributed = pytest.importorskip("distributed")
    path = make_spec(tmp_path, {"workload.batch": [1, 2, 4], "hw.memory.@device.bandwidth_bytes_per_s": [0.5e12, 1e12]})
    run_sweep(path, tmp_path / "pool", workers=2, progress=False, plots=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp", host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        run_sweep(path, tmp_path / "dask", executor=client.get_executor(), progress=False, plots=False)
    pool, dask = _metrics(load_results(tmp_path / "pool")), _metrics(load_results(tmp_path / "dask"))
    assert len(pool) == 6 and (pool["status"] == "ok").all()
    assert pool.equals(dask)  # same keys, same metrics, bit for bit: the simulator is deterministic


def test_kill_and_resume_runs_every_point_exactly_once(tmp_path):
    # 48 points on one worker take a few seconds; the sweep is killed (SIGKILL, its
    # whole process group) as soon as 3 points are committed, then rerun.
    path = make_spec(tmp_path, {"workload.batch": [1, 2, 3, 4, 5, 6, 7, 8], "workload.gen_len": [4, 6, 8, 10, 12, 14]})
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "sim.apps.cli", "sweep", str(path), "--out", str(out), "--workers", "1",
                             "-q", "--no-plots"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = out / DB_NAME

    def count() -> int:
        try:
            with sqlite3.connect(db, timeout=5) as c:
                return c.execute("SELECT COUNT(*) FROM points").fetchone()[0]
        except sqlite3.OperationalError:  # not created yet
            return 0

    deadline = time.time() + 30
    while count() < 3 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = count()
    assert 3 <= before < 48, before
    with sqlite3.connect(db) as c:
        first = dict(c.execute("SELECT key, finished_at FROM points").fetchall())
    s = run_sweep(path, out, workers=1, progress=False, plots=False)
    assert (s.total, s.skipped, s.ran) == (48, before, 48 - before)
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT key, finished_at FROM points").fetchall()
    assert len(rows) == len({k for k, _ in rows}) == 48
    assert all(dict(rows)[k] == t for k, t in first.items())  # the early points were not redone
    # a third run has nothing left to do
    assert run_sweep(path, out, workers=1, progress=False, plots=False).ran == 0


def test_failing_points_leave_the_others_intact(tmp_path, monkeypatch):
    # 1 kB of device memory cannot hold the tiny model's ~250 kB of fp16 weights: CapacityError
    path = make_spec(tmp_path, {"hw.memory.@device.capacity_bytes": [1000, 48e9], "workload.batch": [1, 2]})
    run_sweep(path, tmp_path / "cap", workers=2, progress=False, plots=False)
    df = load_results(tmp_path / "cap")
    small = df["hw.memory.@device.capacity_bytes"] == 1000
    assert (df[small]["status"] == "error").all() and df[small]["error"].str.startswith("CapacityError").all()
    assert (df[~small]["status"] == "ok").all() and df[~small]["tpot_s"].gt(0).all()
    assert df[small]["tpot_s"].isna().all()

    # an unexpected exception (a bug) in one point: recorded with its message, the rest run
    import sim.apps.sweep.point as sweep_run   # where the worker looks simulate up

    real = sweep_run.simulate

    def flaky(workload, machine, **kw):
        if workload.batch == 2:
            raise RuntimeError("boom")
        return real(workload, machine, **kw)

    monkeypatch.setattr(sweep_run, "simulate", flaky)
    path = make_spec(tmp_path, {"workload.batch": [1, 2, 3]})
    with cf.ThreadPoolExecutor(2) as ex:  # threads share the patched module
        s = run_sweep(path, tmp_path / "bug", executor=ex, progress=False, plots=False)
    assert (s.ran, s.failed) == (3, 1)
    df = load_results(tmp_path / "bug").set_index("workload.batch")
    assert df.loc[2, "error"].startswith("RuntimeError: boom") and df.loc[[1, 3], "status"].eq("ok").all()


def test_plots_export_and_cli(tmp_path):
    plots = [dict(kind="line", x="workload.batch", y="tpot_s", lines="hw"),
             dict(kind="heatmap", x="workload.batch", y="hw", z="throughput_tok_s"),
             dict(kind="pareto", x="hw.price_usd", y="tpot_s", label="hw"),
             dict(kind="line", x="workload.batch", y="ttft_s", lines=["hw", "workload.gen_len"],
                  where="workload.gen_len == 4 and hw.name != 'x'")]
    path = make_spec(tmp_path, {"hw": ["a6000", "h100_sxm"], "workload.batch": [1, 4], "workload.gen_len": [4]},
                     plots=plots)
    out = tmp_path / "out"
    from sim.apps.cli import main

    assert main(["sweep", str(path), "--out", str(out), "--workers", "1", "-q"]) == 0
    pngs = sorted((out / "plots").glob("*.png"))
    assert len(pngs) == 4
    for png in pngs:
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, png
    assert main(["sweep", "export", str(out), "--csv", str(tmp_path / "r.csv"),
                 "--parquet", str(tmp_path / "r.parquet")]) == 0
    import pandas as pd

    csv, pq = pd.read_csv(tmp_path / "r.csv"), pd.read_parquet(tmp_path / "r.parquet")
    assert len(csv) == len(pq) == 4
    assert {"hw", "workload.batch", "hw.price_usd", "tpot_s", "ttft_s", "throughput_tok_s",
            "energy_per_token_j", "status"} <= set(csv.columns)


def test_pareto_front():
    # points (cost, time): (1, 9) (2, 5) (3, 6) (4, 2) (5, 2): (3, 6) is beaten by (2, 5); (5, 2) by (4, 2)
    import numpy as np

    x, y = np.array([1, 2, 3, 4, 5.0]), np.array([9, 5, 6, 2, 2.0])
    assert list(pareto_front(x, y)) == [0, 1, 3]
    assert list(pareto_front(x, y, "min", "max")) == [0]  # cheapest is also the largest y


def test_example_sweeps_expand():
    """Every sweep under sweeps/ expands (paths checked against the real presets);
    those needing presets that are not in the tree yet are skipped."""
    from hw_models.machine import preset_names
    from sim.apps.sweep.spec import load_spec

    for path in sorted((ROOT / "sweeps").glob("*.yaml")):
        spec = load_spec(path)
        needed = {spec.hw} | set(spec.axes.get("hw", []) if isinstance(spec.axes.get("hw"), list) else [])
        if not needed <= set(preset_names()):
            continue
        assert len(expand(spec)) > 0, path


def test_a_plot_naming_no_column_still_leaves_results_csv(tmp_path):
    """A config field's column exists only once the points ran: results.csv is written before the plots, and the
    error names the sweep file and says the finished points are reused on the rerun. A metric name no point
    records is refused before any point runs (a sweep trial's `y: tpot` was found after 1,400 points)."""
    path = make_spec(tmp_path, {"workload.batch": [1, 2]}, metrics=["tpot_s"],
                     plots=[{"kind": "line", "x": "workload.batch", "y": "tpot_ms"}])
    with pytest.raises(ConfigError, match=r"sweep\.yaml: plots\[0\]\.y: unknown metric 'tpot_ms' \(did you mean "
                                          r"'tpot_s'\?\)"):
        run_sweep(path, tmp_path / "early", workers=1, progress=False)
    assert not (tmp_path / "early").exists()
    path = make_spec(tmp_path, {"workload.batch": [1, 2]}, metrics=["tpot_s"],   # a stored row's own column
                     plots=[{"kind": "line", "x": "workload.batch", "y": "seconds"}])
    run_sweep(path, tmp_path / "own", workers=1, progress=False)
    assert any((tmp_path / "own" / "plots").iterdir())
    path = make_spec(tmp_path, {"workload.batch": [1, 2]}, metrics=["tpot_s"],
                     plots=[{"kind": "line", "x": "workload.batch", "y": "peak_memory_bytes.no_such_tier"}])
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=r"sweep\.yaml: .*no column 'peak_memory_bytes.no_such_tier'.*results\.csv is written"):
        run_sweep(path, out, workers=1, progress=False)
    assert (out / "results.csv").is_file() and len((out / "results.csv").read_text().splitlines()) == 3
    assert not (out / "plots").exists() or not any((out / "plots").iterdir())


def test_device_memory_is_one_column_over_presets_of_different_memories(tmp_path):
    """`peak_memory_bytes.@device` (as --set names the tier) is each point's device tier: gddr on an A6000, hbm on an
    H100, so a sweep over both has one column to plot (the shipped weight_formats sweep named gddr and left the H100
    rows empty)."""
    path = make_spec(tmp_path, {"hw": ["a6000", "h100_sxm"]}, metrics=["peak_memory_bytes.@device"])
    run_sweep(path, tmp_path / "out", workers=1, progress=False, plots=False)
    df = load_results(tmp_path / "out").set_index("hw")
    assert df.loc["a6000", "peak_memory_bytes.@device"] == df.loc["a6000", "peak_memory_bytes.gddr"] > 0
    assert df.loc["h100_sxm", "peak_memory_bytes.@device"] == df.loc["h100_sxm", "peak_memory_bytes.hbm"] > 0


def test_a_sweep_says_what_its_points_ignore(tmp_path, capsys):
    """Each point runs with warnings off, so a sweep over an H100 and a Groq LPU under `stack: vllm` priced the LPU
    rows without the stack and said nothing, where `sim run` warns. The sweep gathers the notes its points' runs would
    print and says each once, with how many points it holds for (the second run, all points stored, says it too)."""
    from sim.apps.cli import main

    path = make_spec(tmp_path, {"hw": ["h100_sxm", "groq_lpu"], "workload.stack": ["vllm"]})
    s = run_sweep(path, tmp_path / "out", workers=1, progress=False, plots=False)
    (note,) = [n for n in s.notes if "stack" in n]
    assert note.startswith("1 of 2 points: ") and "stack: 'vllm' is ignored" in note and "groq_lpu" in note
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    assert f"warning: {note}" in capsys.readouterr().err
    plain = make_spec(tmp_path, {"workload.batch": [1, 2]})
    assert run_sweep(plain, tmp_path / "plain", workers=1, progress=False, plots=False).notes == []


def test_when_and_where_read_machine_aliases(tmp_path):
    """An axis takes `hw.memory.@device.bandwidth_bytes_per_s`; `when:` refused the same name as a syntax error and a
    plot's `where:` the results column `peak_memory_bytes.@device`. Both now read them: `when` as each point's own
    tier (an A6000's GDDR6 768 GB/s, an H100's HBM3 3.35 TB/s), `where` as the column. `@` elsewhere stays refused."""
    e = compile_expr("hw.memory.@device.bandwidth_bytes_per_s > 1e12 and peak_memory_bytes.@device < 4e10")
    assert e.names == ("hw.memory.@device.bandwidth_bytes_per_s", "peak_memory_bytes.@device")
    for text in ("hw.memory.@ device > 1", "@device > 1", "a @ b"):
        with pytest.raises(ConfigError):
            compile_expr(text)
    path = make_spec(tmp_path, {"hw": ["a6000", "h100_sxm"], "workload.batch": [1, 2]},
                     when="hw.memory.@device.bandwidth_bytes_per_s > 1e12",
                     plots=[{"kind": "line", "x": "workload.batch", "y": "tpot_s", "lines": "hw",
                             "where": "peak_memory_bytes.@device < 1e15"}])
    points = expand(spec_of(tmp_path, {"hw": ["a6000", "h100_sxm"], "workload.batch": [1, 2]},
                            when="hw.memory.@device.bandwidth_bytes_per_s > 1e12"))
    assert [p.axes["hw"] for p in points] == ["h100_sxm", "h100_sxm"]
    run_sweep(path, tmp_path / "out", workers=1, progress=False)
    assert (tmp_path / "out" / "plots" / "line_tpot_s_vs_workload.batch_by_hw.png").is_file()


def test_stdout_holds_the_data_and_the_bar_goes_to_stderr(tmp_path):
    """The progress bar went to stdout, so `sim sweep ... > log` held only the bar and `--format csv` data came with
    it (a trial's finding): stdout is what --format asks for, the bar is on stderr as sim run's."""
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "sim.apps.cli", "sweep", str(root / "sweeps" / "weight_formats.yaml"),
                        "--out", str(tmp_path / "o"), "--format", "csv"], capture_output=True, text=True,
                       cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].startswith("metric,") and "points/s" not in r.stdout   # a title line, the CSV
    assert "points/s" in r.stderr


def test_a_scheduler_address_as_dask_prints_it_is_taken():
    """LocalCluster prints tcp://HOST:PORT; --executor refused it and asked for dask:// (a trial)."""
    from sim.apps.sweep.run import check_executor, is_remote

    assert is_remote("tcp://127.0.0.1:8786") and is_remote("dask://127.0.0.1:8786") and not is_remote("dask-local")
    check_executor("tcp://127.0.0.1:8786", None)
    with pytest.raises(ConfigError, match="tcp://HOST:PORT, as a Dask scheduler prints its address"):
        check_executor("tcp://", None)


def test_a_long_set_up_is_said_before_it_starts(tmp_path, capsys, monkeypatch):
    """A 90,000-point sweep resolved and validated its points for ~50 s before its progress bar, without a word (a
    sweep trial): past LONG_SETUP_POINTS the count is said first. Below it, and under -q (progress off), nothing."""
    from sim.apps.sweep import run as sweep_run
    monkeypatch.setattr(sweep_run, "LONG_SETUP_POINTS", 3)
    path = make_spec(tmp_path, {"workload.batch": [1, 2, 3]})
    capsys.readouterr()
    run_sweep(path, tmp_path / "a", workers=1, progress=True, plots=False)
    assert f"{path}: resolving and checking 3 points before any runs" in capsys.readouterr().err
    run_sweep(path, tmp_path / "b", workers=1, progress=False, plots=False)
    assert "resolving" not in capsys.readouterr().err


def test_axis_values_with_units_are_recorded_as_the_si_numbers_they_run_with(tmp_path):
    """["800 GB/s", "1.675 TB/s", ...] ran with the parsed figures but results.csv kept the text: the plot ordered
    "800 GB/s" last and read TPOT rising with bandwidth, a number beside a string crashed its sort, and a plot's
    `where` on the axis failed (an architecture trial). A key whose name gives no unit keeps its strings."""
    spec = spec_of(tmp_path, {"hw.memory.@device.bandwidth_bytes_per_s": ["800 GB/s", "1.675 TB/s", "3.2 Tb/s", 10e12],
                              "hw.units.@main.peak_flops_per_s.fp16": ["100 TFLOP/s"],
                              "workload.formats.weights": ["fp16", "int8"],
                              "hw.units.@main.energy_j_per_flop.fp16": ["0.5 pJ", 1e-12],
                              "hw.units.@main.launch_overhead_s": ["5 us"]})
    assert spec.axes["hw.memory.@device.bandwidth_bytes_per_s"] == [8e11, 1.675e12, 4e11, 1e13]
    assert spec.axes["hw.units.@main.peak_flops_per_s.fp16"] == [1e14]
    assert spec.axes["workload.formats.weights"] == ["fp16", "int8"]
    # a key whose name gives no unit takes any (a review: "0.5 pJ" stayed text and crashed the plot's sort); no
    # float noise ("5 us" had read 4.9999999999999996e-06); what parses as no quantity stays as written
    assert spec.axes["hw.units.@main.energy_j_per_flop.fp16"] == [5e-13, 1e-12]
    assert spec.axes["hw.units.@main.launch_overhead_s"] == [5e-6]
    from sim.apps.sweep.spec import _si
    assert _si("hw.units.@main.launch_overhead_s", "2x") == "2x" and _si("workload.stack", "vllm") == "vllm"
    points = expand(spec)
    assert sorted({p.axes["hw.memory.@device.bandwidth_bytes_per_s"] for p in points}) == [4e11, 8e11, 1.675e12, 1e13]

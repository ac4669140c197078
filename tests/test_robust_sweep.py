"""Issue 17, items 2-5, 10 and 11 for sweeps: one writer per folder, points keyed by
their resolved configuration, workers that die with the sweep, nothing created before
everything is checked, bounded expressions and expansions, and a broken store in one line."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml

from sim.apps.cli import main
from sim.apps.sweep.run import run_sweep
from sim.apps.sweep.store import Store
from tests.conftest import ROOT
from tests.robust_helpers import refused
from tests.test_sweep import TINY, make_spec


def _spec(tmp, axes, **extra):
    return make_spec(tmp, axes, **extra)


# ---------------------------------------------------------------- items 2-4

def test_a_second_writer_on_the_same_out_is_refused(tmp_path, capsys):
    spec = _spec(tmp_path, {"workload.batch": [1, 2]})
    out = tmp_path / "out"
    with Store(out, lock=True):  # a sweep in progress
        line = refused(capsys, ["sweep", str(spec), "--out", str(out), "-q"], tmp_path)
    assert line == f"error: {out}: another sweep is writing to this folder; wait for it to finish or give another --out"


def test_format_aliases_are_one_point(tmp_path):
    spec = _spec(tmp_path, {"workload.formats.weights": ["fp16", "half", "float16"]})
    with cf.ThreadPoolExecutor(1) as ex:
        s = run_sweep(spec, tmp_path / "out", executor=ex, progress=False, plots=False)
    assert (s.total, s.ran) == (1, 1)


def test_a_changed_spec_relabels_reused_rows(tmp_path):
    out = tmp_path / "out"
    with cf.ThreadPoolExecutor(1) as ex:
        run_sweep(_spec(tmp_path, {"workload.batch": [1, 2]}), out, executor=ex, progress=False, plots=False)
        # A new axis whose first value is the workload's own prompt_len: those points are stored already.
        s = run_sweep(_spec(tmp_path, {"workload.batch": [1, 2], "workload.prompt_len": [16, 32]}), out,
                      executor=ex, progress=False, plots=False)
    assert (s.total, s.skipped, s.ran, s.reused) == (4, 2, 2, [0, 2])
    df = pd.read_csv(out / "results.csv")   # --no-plots still writes it
    assert df["workload.prompt_len"].notna().all() and sorted(df["point"]) == [0, 1, 2, 3]
    assert sorted(zip(df["workload.batch"], df["workload.prompt_len"])) == [(1, 16), (1, 32), (2, 16), (2, 32)]


_ORPHAN = """
import concurrent.futures as cf, os, signal, sys
from sim.apps.workers import die_with_parent
pool = cf.ProcessPoolExecutor(1, initializer=die_with_parent, initargs=(os.getpid(),))
print(pool.submit(os.getpid).result(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_workers_die_with_a_killed_sweep():
    proc = subprocess.run([sys.executable, "-c", _ORPHAN], capture_output=True, text=True, cwd=ROOT)
    worker = int(proc.stdout.split()[0])
    for _ in range(100):
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(worker, signal.SIGKILL)
    pytest.fail(f"worker {worker} outlived its killed parent")


# ---------------------------------------------------------------- item 5: check before writing

@pytest.mark.parametrize("extra, message", [
    (["--executor", "spark"], "--executor 'spark': expected local, dask-local or dask://HOST:PORT (tcp://HOST:PORT, as "
                                  "a Dask scheduler prints its address, reads the same)"),
    (["--workers", "-1"], "--workers -1: must be at least 1"),
    (["--max-points", "0"], "--max-points 0: must be at least 1"),
])
def test_bad_options_create_nothing(tmp_path, capsys, extra, message):
    spec = _spec(tmp_path, {"workload.batch": [1]})
    assert refused(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out"), "-q", *extra], tmp_path) == \
        f"error: {message}"


@pytest.mark.parametrize("name", ["../../x", "/tmp/x", "sub/x", ".hidden"])
def test_plot_files_stay_under_out(tmp_path, capsys, name):
    spec = _spec(tmp_path, {"workload.batch": [1, 2]},
                 plots=[{"kind": "line", "x": "workload.batch", "y": "tpot_s", "file": name}])
    line = refused(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out"), "-q"], tmp_path)
    assert line == f"error: {spec}: plots.0.file: {name!r}: a plain file name (written under --out/plots/), not a path"


# ---------------------------------------------------------------- items 10-11: expressions, sizes, stores

@pytest.mark.parametrize("when, message", [
    ("((((((9**64)**64)**64)**64)**64)**64) > 0", "is too large (over 1e300)"),
    ("1e300 ** 2 > 0", "1e+300 ** 2 is too large (over 1e300)"),
    ("min() > 0", "min: min expected at least 1 argument, got 0"),
    ("max([]) > 0", "max: max() arg is an empty sequence"),
    ("-hw > 0", "unary - needs a number, got 'a6000'"),
    ("(-8) ** 0.5 > 1", "(-8) ** 0.5 is not a real number"),
])
def test_bad_when_expressions(tmp_path, capsys, when, message):
    spec = _spec(tmp_path, {"workload.batch": [1]}, when=when)
    t0 = time.perf_counter()
    line = refused(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out"), "-q"], tmp_path)
    assert line.startswith(f"error: {spec}: when: ") and message in line and repr(when) in line
    assert time.perf_counter() - t0 < 10


@pytest.mark.parametrize("axes, extra, count", [
    ({"workload.batch": {"min": 1, "max": 100_000_000, "step": 1}}, {}, 100_000_000),
    ({"workload.batch": {"min": 1, "max": 64}}, {"mode": "random", "samples": 1_000_000_000}, 1_000_000_000),
    ({"workload.batch": list(range(1, 401)), "workload.gen_len": list(range(1, 401))}, {}, 160_000),
])
def test_huge_expansions_are_refused_with_their_count(tmp_path, capsys, axes, extra, count):
    spec = _spec(tmp_path, axes, **extra)
    line = refused(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out"), "-q"], tmp_path)
    assert line == (f"error: {spec}: axes: the sweep expands to {count:,} points, over the limit of 100,000; "
                    "narrow the axes or raise --max-points")


def test_max_points_lowers_the_limit(tmp_path, capsys):
    spec = _spec(tmp_path, {"workload.batch": [1, 2, 3]})
    line = refused(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out"), "-q", "--max-points", "2"], tmp_path)
    assert "expands to 3 points, over the limit of 2" in line


def test_alias_bomb_is_refused(tmp_path, capsys):
    lines = ["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    spec = tmp_path / "bomb.yaml"
    spec.write_text("name: x\nworkload: wl.yaml\nhw: a6000\naxes: {workload.batch: [1]}\nlol:\n"
                    + "\n".join("  " + s for s in lines) + "\n")
    assert refused(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out"), "-q"], tmp_path) == \
        f"error: {spec}: YAML aliases expand to more than 1,000,000 values; refused"


def test_a_corrupt_store_is_one_line(tmp_path, capsys):
    spec = _spec(tmp_path, {"workload.batch": [1]})
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.sqlite").write_bytes(b"this is not a database" * 100)
    line = refused(capsys, ["sweep", str(spec), "--out", str(out), "-q"], tmp_path)
    assert line.startswith(f"error: {out / 'results.sqlite'}: sweep store unusable: file is not a database")
    line = refused(capsys, ["sweep", "export", str(out), "--csv", str(tmp_path / "r.csv")], tmp_path)
    assert "sweep store unusable" in line


def test_a_full_store_is_one_line(tmp_path, capsys, monkeypatch):
    spec = _spec(tmp_path, {"workload.batch": [1]})

    def full(self, point, outcome):
        from sim.apps.sweep.store import db_errors
        with db_errors(self.path):
            raise sqlite3.OperationalError("database or disk is full")
    monkeypatch.setattr(Store, "add", full)
    monkeypatch.setattr("sim.apps.sweep.run.make_executor", _threads)
    line = refused(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out"), "-q"])
    assert line.endswith("sweep store unusable: database or disk is full (read-only, full or not a sweep database?)")


class _threads:
    """A stand-in for make_executor: one thread, so the test needs no process pool."""

    def __init__(self, executor, workers):
        self.pool = cf.ThreadPoolExecutor(1)

    def __enter__(self):
        return self.pool

    def __exit__(self, *exc):
        self.pool.shutdown()


assert TINY and yaml  # the shared tiny workload of tests/test_sweep.py


def test_export_writes_all_outputs_or_none_and_reads_only_a_sweeps_store(tmp_path, capsys):
    """A hostile-input trial: `sweep export --csv e.csv --json /proc/x.json` wrote the CSV before the JSON failed;
    `--json - --csv -` ran both into one another on stdout, exit 0; an export of an empty results.sqlite turned it
    into a database and exited 0, and a sweep added its tables to a foreign SQLite file. Each is refused in one
    line, nothing written, the input unchanged."""
    path = make_spec(tmp_path, {"workload.batch": [1, 2]})
    with cf.ThreadPoolExecutor(1) as ex:
        run_sweep(path, tmp_path / "out", executor=ex, progress=False, plots=False)
    out = str(tmp_path / "out")
    exports = tmp_path / "exports"
    exports.mkdir()
    refused(capsys, ["sweep", "export", out, "--csv", str(exports / "e.csv"), "--json", "/proc/x.json"], exports)
    assert "both write to stdout" in refused(capsys, ["sweep", "export", out, "--json", "-", "--csv", "-"], exports)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "results.sqlite").write_bytes(b"")
    line = refused(capsys, ["sweep", "export", str(empty), "--csv", str(exports / "e.csv")], empty)
    assert "not a sweep's results store" in line and not (exports / "e.csv").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    with sqlite3.connect(foreign / "results.sqlite") as db:
        db.execute("CREATE TABLE foo (x)")
    assert "it holds foo" in refused(capsys, ["sweep", str(path), "--out", str(foreign), "--workers", "1"], foreign)
    assert main(["sweep", "export", out, "--csv", str(exports / "e.csv"), "--json", str(exports / "e.json")]) == 0
    assert (exports / "e.csv").is_file() and (exports / "e.json").is_file()


def test_a_store_on_read_only_media_reads(tmp_path, monkeypatch, capsys):
    """Results copied back from a cluster onto read-only media load and export: SQLite cannot make its WAL index
    there, and a sweep trial's load_results and `sim sweep export` had failed ("unable to open database file").
    The folder reads as not writable (this suite may run as root, whom chmod does not stop); the store is
    copied without its -wal/-shm files, as an archive holds it."""
    import shutil

    from sim.apps.sweep import load_results
    from sim.apps.sweep import store as store_mod
    path = _spec(tmp_path, {"workload.batch": [1, 2]})
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--workers", "1", "--no-plots", "-q"]) == 0
    want = load_results(str(out))
    archive = tmp_path / "archive"
    archive.mkdir()
    shutil.copy(out / "results.sqlite", archive / "results.sqlite")
    real = os.access
    monkeypatch.setattr(store_mod.os, "access", lambda p, mode: False if os.fspath(p) == str(archive) else real(p, mode))
    got = load_results(str(archive))
    pd.testing.assert_frame_equal(got, want)
    assert main(["sweep", "export", str(archive), "--csv", str(tmp_path / "e.csv")]) == 0
    assert sorted(os.listdir(archive)) == ["results.sqlite"]   # nothing written beside it
    # commits still in a -wal file would be missed by an immutable open: refused, not read short (a review)
    (archive / "results.sqlite-wal").write_bytes(b"x" * 100)
    line = refused(capsys, ["sweep", "export", str(archive), "--csv", str(tmp_path / "e2.csv")], archive)
    assert "read-only, and its last commits are still in results.sqlite-wal" in line


def test_a_sweep_whose_every_point_failed_exits_2(tmp_path, capsys):
    """Every point failing on a key no axis sets (parallel.topology, needed once tp > 1) had exited 0 with no
    metric column (a sweep trial). It exits 2 naming the commonest error, counted over the points whatever their
    labels; the error rows stay stored. One point that runs is a sweep that ran: exit 0."""
    from sim.apps.sweep import load_results
    path = _spec(tmp_path, {"workload.parallel.tp": [2], "workload.batch": [1, 2]})
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["sweep", str(path), "--out", str(out), "--workers", "1", "--no-plots", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}: all 2 points failed (error rows in {out}); the commonest, 2 of them: ")
    assert "parallel.topology: needed when a replica spans devices" in err and "\n" not in err
    assert (load_results(str(out))["status"] == "error").all()
    path = _spec(tmp_path, {"workload.parallel.tp": [1, 2], "workload.batch": [1, 2]})
    assert main(["sweep", str(path), "--out", str(tmp_path / "out2"), "--workers", "1", "--no-plots", "-q"]) == 0
    # with an hw axis each point is labelled "point (hw=..., ...)": counted together all the same (a review)
    path = _spec(tmp_path, {"hw": ["a6000", "h100_sxm"], "workload.parallel.tp": [2]})
    capsys.readouterr()
    assert main(["sweep", str(path), "--out", str(tmp_path / "out3"), "--workers", "1", "--no-plots", "-q"]) == 2
    assert "all 2 points failed" in (err := capsys.readouterr().err) and "the commonest, 2 of them" in err

"""Persistent step-cost tables (sim.apps.serve.tablecache, issue 30): a run with the cache is the run
without it, the key moves with every costing input, and concurrent writers never corrupt the file.
Every test uses a temporary cache directory (conftest points SIM_CACHE_DIR at one; here a fresh one each)."""

import json
import multiprocessing
import sqlite3

import pytest
from hw_models.machine import load_machine, resolve_path
from sim.apps.serve import tablecache
from sim.apps.serve.instance import prepare
from sim.apps.serve.lazytable import PointBook, flush_all
from sim.apps.serve.run import serve
from sim.apps.serve.spec import ServeFile
from sim.apps.serve.tablecache import TableStore
from sim.core.schema import validate_mapping

# A small grid (a 1.1B model, 256-token budget, 8 sequences) keeps the cold tables to a few seconds.
SERVING = dict(arrivals=dict(process="poisson", rate=20.0, num_requests=60, seed=5),
               lengths=dict(prompt=dict(dist="uniform", low=16, high=200), output=dict(dist="uniform", low=4, high=40)),
               scheduler=dict(kind="vllm", max_num_batched_tokens=256, max_num_seqs=8))


def small_file(**top) -> ServeFile:
    return validate_mapping(ServeFile, {"name": "t", "model": "tinyllama-1.1b", "serving": SERVING, **top}, "t.yaml",
                            "a serving file")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(tablecache.ENV_DIR, str(tmp_path / "cache"))
    monkeypatch.delenv(tablecache.ENV_OFF, raising=False)
    return tmp_path / "cache"


def _rows(folder) -> dict[tuple[str, str], dict]:
    con = sqlite3.connect(folder / tablecache.FILE)
    try:
        return {(k, n): json.loads(v) for k, n, v in con.execute("SELECT key, name, value FROM points")}
    finally:
        con.close()


def test_results_identical_without_cold_and_warm_cache(cache_dir, monkeypatch):
    f, m = small_file(), load_machine("a6000")
    monkeypatch.setenv(tablecache.ENV_OFF, "1")
    res0, off = serve(f, m)
    assert not cache_dir.exists()                       # off: nothing written
    monkeypatch.delenv(tablecache.ENV_OFF)
    res1, cold = serve(f, m)
    rows = _rows(cache_dir)
    assert rows and all(rows.values())
    setup = prepare(f, m)
    xs, ys = setup.target_cost.table("D")
    assert len(list(ys)) == setup.target_cost.exact.calls == len(xs)   # each entry read once, through vector
    res2, warm = serve(f, m)
    assert off == cold == warm                          # every figure, to the bit
    for a, b in ((res0, res1), (res0, res2)):
        for c in a.requests:
            assert a.requests[c].tobytes() == b.requests[c].tobytes(), c
    assert _rows(cache_dir) == rows                      # a warm run writes nothing new


def test_warm_tables_make_no_mapper_call(cache_dir, monkeypatch):
    """The cold run stored every table entry it read (sim.apps.serve.lazytable): the same run again
    reads them all from disk."""
    f, m = small_file(), load_machine("a6000")
    serve(f, m)
    computed = []      # a grid point not on disk is computed and marks its table for writing
    real = PointBook.get
    monkeypatch.setattr(PointBook, "get", lambda self, name, key, compute: real(
        self, name, key, lambda: computed.append(key) or compute()))
    serve(f, m)
    assert computed == []


def test_key_changes_with_a_preset_figure(cache_dir, tmp_path):
    """Edit one figure of a preset file: its tables are a miss, the original's still a hit."""
    text = resolve_path("a6000").read_text()
    assert "bandwidth_bytes_per_s: 768 GB/s" in text
    edited = tmp_path / "a6000_slow.yaml"
    edited.write_text(text.replace("bandwidth_bytes_per_s: 768 GB/s", "bandwidth_bytes_per_s: 700 GB/s"))
    f = small_file()
    a = prepare(f, load_machine("a6000")).target_cost
    b = prepare(f, load_machine(str(edited))).target_cost
    assert a.store.key != b.store.key
    list(a.table("D")[1])                                # every entry computed,
    flush_all()                                          # and written
    assert b.store.load("D") == {}                       # a miss
    assert a.store.load("D")                             # the original hits
    assert list(b.table("D")[1]) != list(a.table("D")[1]) # and its costs differ (slower memory)


@pytest.mark.parametrize("top", [dict(formats=dict(weights="int8")), dict(flash_attention=True),
                                 dict(model="llama2-7b")])
def test_key_changes_with_each_costing_input(cache_dir, top):
    m = load_machine("a6000")
    assert prepare(small_file(), m).target_cost.store.key != prepare(small_file(**top), m).target_cost.store.key


def test_key_ignores_the_stream(cache_dir):
    """Rate and request count change no step cost: a capacity search's steps share one key."""
    m = load_machine("a6000")
    srv = dict(SERVING, arrivals=dict(SERVING["arrivals"], rate=99.0, num_requests=7))
    other = validate_mapping(ServeFile, dict(name="u", model="tinyllama-1.1b", serving=srv), "u.yaml", "a serving file")
    assert prepare(small_file(), m).target_cost.store.key == prepare(other, m).target_cost.store.key


def _writer(folder: str, seed: int, n: int) -> None:
    store = TableStore("shared-key", __import__("pathlib").Path(folder))
    for i in range(n):
        name = f"t{(i + seed) % 3}"
        store.save(name, {f"[[{j},{j}]]": (j * 1e-3, j * 0.5, [("gpu", j * 1e-3)]) for j in range(200)})
        got = store.load(name)
        assert len(got) == 200 and got["[[7,7]]"] == (7e-3, 3.5, [("gpu", 7e-3)])


def test_two_processes_one_key_never_corrupt(cache_dir):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(cache_dir), s, 40)) for s in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    con = sqlite3.connect(cache_dir / tablecache.FILE)
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    con.close()
    rows = _rows(cache_dir)
    assert sorted(n for _, n in rows) == ["t0", "t1", "t2"] and all(len(v) == 200 for v in rows.values())
    # Every save counted in the write stamp, none lost to the other process: writer 0 saves t(i % 3) for
    # i < 40 (t0 14 times, t1 13, t2 13), writer 1 t((i + 1) % 3) (t1 14, t2 13, t0 13).
    store = TableStore("shared-key", cache_dir)
    assert [store.stamp(n) for n in ("t0", "t1", "t2")] == [27, 27, 26]


def test_a_lock_sqlite_did_not_wait_out_is_retried(cache_dir, monkeypatch):
    """SQLite can answer "database is locked" at once in WAL mode (a connection opening while the last one's close
    checkpoints): a save retries it instead of losing the write; other errors are not retried."""
    real, calls = TableStore._connect, []

    def flaky(self, message, fails):
        calls.append(message)
        if len(calls) <= fails:
            raise sqlite3.OperationalError(message)
        return real(self)

    monkeypatch.setattr(tablecache, "LOCK_PAUSE_S", 0.0)
    monkeypatch.setattr(TableStore, "_connect", lambda self: flaky(self, "database is locked", 2))
    store = TableStore("k")
    store.save("D", {"[[1,1]]": (1.0, 1.0, [])})
    assert len(calls) == 3 and store.stamp("D") == 1 and store.load("D") == {"[[1,1]]": (1.0, 1.0, [])}
    calls.clear()
    monkeypatch.setattr(TableStore, "_connect", lambda self: flaky(self, "disk I/O error", 1))
    store.save("D", {"[[2,2]]": (2.0, 2.0, [])})          # skipped, not retried: a broken cache costs speed only
    assert len(calls) == 1 and store.stamp("D") == 1 and len(calls) == 2
    calls.clear()
    monkeypatch.setattr(tablecache, "LOCK_RETRIES", 3)
    monkeypatch.setattr(TableStore, "_connect", lambda self: flaky(self, "database is locked", 99))
    store.save("D", {"[[3,3]]": (3.0, 3.0, [])})          # a lock that outlasts the retries: skipped after 1 + 3
    assert len(calls) == 4


def test_unreadable_cache_is_a_miss(cache_dir):
    cache_dir.mkdir(parents=True)
    (cache_dir / tablecache.FILE).write_bytes(b"not a database" * 100)
    store = TableStore("k")
    assert store.load("D") == {}
    store.save("D", {"[[1,1]]": (1.0, 1.0, [])})          # no exception: a broken cache costs speed only


def test_clear_and_cli(cache_dir, capsys):
    from sim.apps.cli import main

    TableStore("k").save("D", {"[[1,1]]": (1.0, 1.0, [])})
    assert main(["cache", "info"]) == 0 and str(cache_dir) in capsys.readouterr().out
    import json   # --format json, as every subcommand takes it (it printed the sentence)
    assert main(["cache", "info", "--format", "json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["path"] == str(cache_dir / tablecache.FILE) and info["size_bytes"] > 0 and info["enabled"]
    assert main(["cache", "clear"]) == 0
    assert not (cache_dir / tablecache.FILE).exists()


def test_a_cache_folder_that_is_a_file_costs_speed_not_the_run(tmp_path, monkeypatch, capsys):
    """SIM_CACHE_DIR naming a file (or a folder that cannot be made): every read a miss, every write skipped,
    the run the run without a cache (it raised FileExistsError from inside the engine); `sim cache info` says so."""
    from sim.apps.cli import main
    blocker = tmp_path / "a.json"
    blocker.write_text("{}")
    monkeypatch.setenv(tablecache.ENV_DIR, str(blocker))
    monkeypatch.delenv(tablecache.ENV_OFF, raising=False)
    store = TableStore("k")
    assert store.load("D") == {} and store.stamp("D") == -1
    store.save("D", {"[[1,1]]": (1.0, 2.0, [])})   # skipped, no exception
    f = small_file()
    m = load_machine("a6000")
    _, with_blocker = serve(f, m)
    tablecache.disable()
    try:
        _, without = serve(f, m)
    finally:
        monkeypatch.setattr(tablecache, "_disabled", False)
    assert with_blocker["latency"] == without["latency"]
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"cache unusable, runs go without it (SIM_CACHE_DIR {blocker}: File exists)" in out
    assert blocker.read_text() == "{}"


def test_a_corrupt_cache_is_said_unusable_and_the_run_says_it_goes_without(tmp_path, monkeypatch, capsys):
    """A step-cost cache file that is no database (a hostile-input trial): `sim cache info` said "on" and `sim serve`
    ran without it and said nothing."""
    from sim.apps.cli import main
    from sim.apps.serve import tablecache
    from tests.conftest import ROOT

    monkeypatch.setenv(tablecache.ENV_DIR, str(tmp_path))
    monkeypatch.delenv(tablecache.ENV_OFF, raising=False)   # the suite runs with the cache off (conftest)
    monkeypatch.setattr(tablecache, "_disabled", False)
    (tmp_path / tablecache.FILE).write_bytes(bytes(range(256)) * 20)
    assert main(["cache", "info"]) == 0
    assert "cache unusable, runs go without it" in capsys.readouterr().out
    assert main(["serve", str(ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml"), "--hw", "h100_sxm", "-q",
                 "--set", "serving.arrivals.num_requests=3"]) == 0
    assert "the step-cost cache is unusable, this run goes without it" in capsys.readouterr().err
    (tmp_path / tablecache.FILE).unlink()
    assert tablecache.unusable() == ""

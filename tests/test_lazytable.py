"""Lazy surrogate tables (sim.apps.serve.lazytable, issue 29's speed target): a run that computes only the
table entries it reads gives the same figures, to the bit, as one whose tables were all built first."""

import os
import subprocess
import sys

import pytest
from hw_models.machine import load_machine
from sim.apps.serve import debug_checks, tablecache
from sim.apps.serve.instance import prepare
from sim.apps.serve.lazytable import LazyRow, PointBook
from sim.apps.serve.run import serve
from sim.apps.serve.spec import ServeFile
from sim.apps.serve.stepcost import ExactCost
from sim.apps.serve.tablecache import TableStore
from sim.core.schema import validate_mapping
from tests.conftest import ROOT

# A closed loop at fixed lengths, chunked prefill mixing with decodes: it reads D, P, kv, pairs and M.
SERVING = dict(arrivals=dict(process="closed", concurrency=4, num_requests=16),
               lengths=dict(prompt=dict(dist="fixed", value=300), output=dict(dist="uniform", low=8, high=24)),
               scheduler=dict(kind="vllm", max_num_batched_tokens=512, max_num_seqs=16))
TABLES = ("D", "P", "kv", "pairs", "split", "C", "M")


def small_file(max_num_seqs: int = 16) -> ServeFile:
    srv = dict(SERVING, scheduler=dict(SERVING["scheduler"], max_num_seqs=max_num_seqs))
    return validate_mapping(ServeFile, {"name": "t", "model": "tinyllama-1.1b", "serving": srv}, "t.yaml",
                            "a serving file")


def _entries(sur) -> tuple[int, int]:
    """(entries computed, entries in all tables) over the tables the surrogate has made."""
    done = total = 0
    for _, ys in sur._tables.values():
        for row in (ys if isinstance(ys, list) else [ys]):
            done, total = done + row.computed(), total + len(row)
    return done, total


@pytest.fixture
def no_disk(monkeypatch):
    monkeypatch.setenv(tablecache.ENV_OFF, "1")   # every entry computed here, none read from a cache


def test_lazy_run_equals_the_full_table_run(no_disk):
    f, m = small_file(), load_machine("a6000")
    lazy_res, lazy = serve(f, m, cache=(c1 := {}))
    sur = next(iter(c1.values()))[0]
    done, total = _entries(sur)
    assert 0 < done < total                           # it read some entries, not all

    cache: dict = {}
    full_sur = prepare(f, m, cache=cache).target_cost
    for name in TABLES:                               # every entry of every table, before the run
        _, ys = full_sur.table(name)
        for row in (ys if isinstance(ys, list) else [ys]):
            list(row)
    assert _entries(full_sur)[0] == _entries(full_sur)[1]
    full_res, full = serve(f, m, cache=cache)
    assert lazy == full                               # every figure, to the bit
    for c in lazy_res.requests:
        assert lazy_res.requests[c].tobytes() == full_res.requests[c].tobytes(), c
    for c in lazy_res.iterations:
        assert lazy_res.iterations[c].tobytes() == full_res.iterations[c].tobytes(), c


def test_lazy_row_computes_each_entry_once():
    seen = []
    row = LazyRow(lambda x: seen.append(x) or x * x, [1, 2, 3, 4])
    assert (row[1], row[-1], row[1], row[1:3]) == (4, 16, 4, [4, 9])
    assert seen == [2, 4, 3] and row.computed() == 3 and len(row) == 4


def test_runs_sharing_a_key_share_points_exactly(tmp_path, monkeypatch):
    """Two runs whose files differ only in the engine's sequence limit (another grid end, one store key)
    share one book of points (lazytable.book); the second run's figures equal its run alone, uncached."""
    other = small_file(max_num_seqs=12)
    m = load_machine("a6000")
    monkeypatch.setenv(tablecache.ENV_OFF, "1")
    alone_res, alone = serve(other, m)
    monkeypatch.delenv(tablecache.ENV_OFF)
    monkeypatch.setenv(tablecache.ENV_DIR, str(tmp_path / "cache"))
    a = prepare(small_file(), m).target_cost
    b = prepare(other, m).target_cost
    assert a.store.key == b.store.key and a.book is b.book and a.max_decode != b.max_decode
    serve(small_file(), m)
    shared = sum(len(v) for v in a.book.points.values())
    res, summary = serve(other, m)
    assert summary == alone
    for c in res.requests:
        assert res.requests[c].tobytes() == alone_res.requests[c].tobytes(), c
    assert shared > 0


# The other sweep worker: a process of its own that stores one point of table D (its flush).
_WORKER = ("import sys; from pathlib import Path; from sim.apps.serve.tablecache import TableStore; "
           "TableStore('k', Path(sys.argv[1])).save('D', {'[[1,1]]': (1.5, 2.5, [('gpu', 1.5)])})")


def test_a_point_another_process_stored_is_read_not_computed(tmp_path):
    """Two sweep workers on a cold cache: once one has written a point, the other's miss on it re-reads
    the store and takes the stored point (no compute); a point nobody stored is still computed, and a
    miss with no write since the last read reads nothing.
    The other worker's write lands, as far as the file system shows, in the same tick of the kernel's
    coarse file clock: its file times are set back to what they were, and its row fits the page the
    table had, so the cache file's (mtime, size) are unchanged. The write is seen all the same: the
    store's write counter moved in the write's own transaction (a stamp of file times and sizes missed
    such a write, and the worker computed the point itself)."""
    TableStore("k", tmp_path).save("D", {"[[0,0]]": (0.5, 0.5, [])})   # table D as a first flush left it
    mine = PointBook(TableStore("k", tmp_path))
    mine.open("D")
    loads, load = [], mine.store.load
    mine.store.load = lambda name: loads.append(name) or load(name)
    computed = []

    def compute():
        computed.append(1)
        return (9.0, 9.0, [])

    assert mine.get("D", "[[3,3]]", compute) == (9.0, 9.0, []) and loads == []   # nobody wrote: no re-read
    files = [tmp_path / tablecache.FILE, tmp_path / (tablecache.FILE + "-wal")]
    before = {p: p.stat() for p in files if p.exists()}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", _WORKER, str(tmp_path)], check=True, env=env, timeout=60)
    for p, st in before.items():
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))   # the same clock tick
    assert {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in files if p.exists()} == \
        {p: (st.st_mtime_ns, st.st_size) for p, st in before.items()}   # the files look untouched
    assert mine.get("D", "[[1,1]]", compute) == (1.5, 2.5, [("gpu", 1.5)])
    assert computed == [1] and loads == ["D"]
    assert mine.get("D", "[[2,1]]", compute) == (9.0, 9.0, [])   # not on disk: computed, nothing re-read
    assert computed == [1, 1] and loads == ["D"]


def test_the_write_stamp_counts_every_write_of_a_table(tmp_path):
    """stamp(name) is the number of saves of that table under this key: 0 before any, one more per save,
    whoever made it; another table's or another key's saves leave it."""
    store, other_key = TableStore("k", tmp_path), TableStore("j", tmp_path)
    assert store.stamp("D") == 0
    store.save("D", {})
    TableStore("k", tmp_path).save("D", {"[[1,1]]": (1.0, 1.0, [])})   # another store object, same key
    store.save("P", {})
    other_key.save("D", {})
    assert (store.stamp("D"), store.stamp("P"), other_key.stamp("D")) == (2, 1, 1)


def test_with_the_cache_off_runs_of_one_key_share_points_in_memory(tmp_path, monkeypatch):
    """SIM_NO_CACHE keeps the disk out, not the sharing: a second run of one key in the process costs no grid
    point again (its book is the first run's; the mapper runs only for the iterations beyond the grid, which
    are costed exactly every time), writes nothing, and gives the first run's figures."""
    monkeypatch.setenv(tablecache.ENV_DIR, str(tmp_path / "cache"))
    monkeypatch.setenv(tablecache.ENV_OFF, "1")
    monkeypatch.delenv(debug_checks.ENV, raising=False)   # its check of the grid costs grid points exactly
    from sim.apps.serve import lazytable
    monkeypatch.setattr(lazytable, "_BOOKS", {})   # no book from an earlier run of this process (a test rerun)
    f, m = small_file(max_num_seqs=11), load_machine("a6000")
    costed: list[list] = []   # per run, every iteration the mapper costs
    real = ExactCost.point
    monkeypatch.setattr(ExactCost, "point", lambda self, it: costed[-1].append(it) or real(self, it))
    runs = []
    for _ in range(2):
        costed.append([])
        runs.append((*serve(f, m, cache=(c := {})), next(iter(c.values()))[0]))
    (first_res, first, _), (res, again, sur) = runs
    assert len(costed[1]) == sur.exact_fallbacks < len(costed[0])
    assert again == first and not (tmp_path / "cache").exists()
    for c in res.requests:
        assert res.requests[c].tobytes() == first_res.requests[c].tobytes(), c


def test_the_process_keeps_a_bounded_number_of_books(tmp_path, monkeypatch):
    """Past MAX_BOOKS keys the least recently used book is dropped, its new points written to its store first; a key
    used again since stays."""
    from sim.apps.serve import lazytable
    monkeypatch.setattr(lazytable, "_BOOKS", {})
    monkeypatch.setattr(lazytable, "MAX_BOOKS", 2)
    a, b, c = (TableStore(k, tmp_path) for k in "abc")
    first = lazytable.book(a)
    first.open("D")
    first.get("D", "[[1,1]]", lambda: (1.0, 2.0, []))      # a new point, not yet written
    lazytable.book(b)
    assert lazytable.book(a) is first                        # a used again: b is now the oldest
    lazytable.book(c)
    assert list(lazytable._BOOKS) == [("a", str(a.path)), ("c", str(c.path))]
    lazytable.book(TableStore("d", tmp_path))                # a goes, written on the way out
    assert ("a", str(a.path)) not in lazytable._BOOKS and a.load("D") == {"[[1,1]]": (1.0, 2.0, [])}

"""Surrogate tables filled on demand (issue 29's speed target).

A surrogate table (sim.apps.serve.stepcost.Surrogate) spans every iteration its engine limits allow,
but one run reaches few of them: a closed loop at fixed prompt and output lengths touches a handful of
(decode count, tokens) cells. Building every grid point up front was most of `sim validate-serving`'s
time. Here an entry is computed the first time an interpolation reads it; the grid, and so every
interpolated cost, is the one the full table gives, to the bit (tests/test_lazytable.py).

PointBook keeps a table's exact points from the persistent cache (sim.apps.serve.tablecache) and the new
ones computed, and writes a table back once it has new points: on `flush_all()` (serve calls it after a
run) or when the process ends. One book serves every surrogate of a store key in the process (`book`):
runs that differ only in what the key leaves out (the request stream, the engine's limits, which set the
grid's ends) share the points their grids have in common. A point is the mapper's cost of its sequences
alone (ExactCost.point), so sharing it is exact.
"""

from __future__ import annotations

import atexit
import weakref
from collections.abc import Sequence
from typing import Any, Callable

from sim.apps.serve.tablecache import Point, TableStore

_MISSING = object()


class LazyRow(Sequence):
    """`f(x)` for each x of `xs`, each computed on its first read and kept."""

    def __init__(self, f: Callable[[Any], Any], xs: Sequence):
        self._f, self._xs = f, xs
        self._ys: list[Any] = [_MISSING] * len(xs)

    def __len__(self) -> int:
        return len(self._xs)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        y = self._ys[i]
        if y is _MISSING:
            y = self._ys[i] = self._f(self._xs[i])
        return y

    def computed(self) -> int:
        """How many entries have been computed so far."""
        return sum(y is not _MISSING for y in self._ys)


class Remembered(dict):
    """Values by key, at most `limit` (cleared when full): the surrogate's costs by the features they read
    (Surrogate.memo: Surrogate.device's, and run-ahead's whole decode steps). Entries are fixed once read, so the same features give the same cost to
    the bit, and they recur: requests decoding nearly alone meet the kv_lens earlier ones decoded at (a
    sweep point at 0.5 requests/s: 7,916 distinct features in 139,650 iterations). The limit keeps a long
    stream's distinct mixed steps from growing it (65,536 costs: a few MB)."""

    def __init__(self, limit: int = 1 << 16):
        super().__init__()
        self.limit = limit

    def put(self, key: Any, value: Any) -> Any:
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value


_PENDING: weakref.WeakSet = weakref.WeakSet()   # the books with points not yet written


class PointBook:
    """The exact points of each table of one store: loaded on the table's first use, new ones added."""

    def __init__(self, store: TableStore):
        self.store = store
        self.points: dict[str, dict[str, Point]] = {}
        self.dirty: set[str] = set()
        self.seen: dict[str, Any] = {}     # per table, its write stamp when it was last read

    def _stamp(self, name: str) -> Any:
        """Table `name`'s write stamp in the store; None for a store without one (a stand-in): then no re-read."""
        stamp = getattr(self.store, "stamp", None)
        return stamp(name) if stamp else None

    def open(self, name: str) -> None:
        if name not in self.points:
            self.seen[name] = self._stamp(name)   # before the load: a write in between is re-read, not lost
            self.points[name] = self.store.load(name)

    def _reread(self, name: str, key: str) -> Point | None:
        """`key`'s point from the store if another process has written since this one read it: the
        workers of a sweep, started together on a cold cache, then compute each point once between
        them instead of once each (a point is ~20-40 ms; a re-read, two SELECTs)."""
        stamp = self._stamp(name)
        if stamp is None or stamp == self.seen.get(name):
            return None
        self.seen[name] = stamp
        for k, v in self.store.load(name).items():
            self.points[name].setdefault(k, v)
        return self.points[name].get(key)

    def get(self, name: str, key: str, compute: Callable[[], Point]) -> Point:
        """The point of table `name` at `key`: the stored one, else computed and remembered."""
        table = self.points[name]
        p = table.get(key)
        if p is None:
            p = self._reread(name, key)
        if p is None:
            p = table[key] = compute()
            self.dirty.add(name)
            _PENDING.add(self)
        return p

    def flush(self) -> None:
        """Write each table with new points, merged into what is on disk (another process on this key may
        have added points since it was read)."""
        for name in sorted(self.dirty):
            merged = self.store.load(name)
            merged.update(self.points[name])
            self.store.save(name, merged)
        self.dirty.clear()


_BOOKS: dict[tuple[str, str], PointBook] = {}
# Keys whose books the process keeps for later runs: a sweep of thousands of designs in one process (each its own
# key) would otherwise hold every design's points to the end. The least recently used book is dropped past this,
# its new points written first; a run still using it keeps it (only a later run of that key starts a new one).
MAX_BOOKS = 256


def book(store: TableStore) -> PointBook:
    """The process's one book of `store`'s key."""
    k = (getattr(store, "key", str(id(store))), str(getattr(store, "path", "")))   # a stand-in store: by identity
    b = _BOOKS.pop(k, None) or PointBook(store)
    _BOOKS[k] = b   # most recently used last
    while len(_BOOKS) > MAX_BOOKS:
        _BOOKS.pop(next(iter(_BOOKS))).flush()
    return b


def flush_all() -> None:
    """Write every table that has new points to the persistent cache."""
    for book in list(_PENDING):
        book.flush()
    _PENDING.clear()


atexit.register(flush_all)   # a process that ends outside serve() keeps what it computed

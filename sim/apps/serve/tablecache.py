"""Persistent step-cost tables (issue 30): the exact iteration costs the surrogate interpolates
(sim.apps.serve.stepcost.Surrogate), kept on disk so a second run, a sweep point or a capacity-search
step with the same costing inputs pays nothing for them.

Storage is SQLite (the standard library's sqlite3) in the user cache directory (platformdirs), one
row per (key, table): a JSON object from each grid point's sequences to its exact device cost
(seconds, joules, and the busy seconds per resource in the order the mapper reported them). JSON,
not pickle: a cache file is data, never code, and Python's float repr round-trips exactly, so a
cached cost is the computed one to the bit. The surrogate replays a cached point through the same
ExactCost.vector a computed one goes through, so a run with the cache is the run without it.

The key hashes everything a cost reads: the machine's content (a preset edited in place changes it),
the model's configuration, the workload's costing fields (formats, stack, parallel plan, ...), the
package version and a hash of the costing code itself (hw_models, sim.core, this package's stepcost).
Concurrent runs on one key are safe: each write is one INSERT OR REPLACE in SQLite's own transaction
(WAL journal, a busy timeout, retries of the locks SQLite does not wait out: TableStore._run), and both writers
store the same content. The same transaction bumps the table's write counter (`stamp`), by which a process sees
that another one has written since it read.

SIM_CACHE_DIR overrides the directory (tests point it at a temporary one); SIM_NO_CACHE=1 or
`--no-cache` (disable()) turns the persistent cache off: a key's points then live in this process only
(MemoryStore), shared by its runs of one key as they are with the cache on, never read from or written to
disk. `sim cache clear` empties it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from contextlib import closing
import time
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from sim import __version__

ENV_DIR = "SIM_CACHE_DIR"
ENV_OFF = "SIM_NO_CACHE"
FILE = "step_costs.sqlite"
SCHEMA = 1        # the row format; part of every key
LOCK_RETRIES = 40      # TableStore._run: ~2.5 s of retries on a lock SQLite did not wait out
LOCK_PAUSE_S = 0.025
_disabled = False

Point = tuple[float, float, list[tuple[str, float]]]   # (seconds, joules, busy seconds per resource, in order)


def disable() -> None:
    """Turn the cache off for this process (--no-cache)."""
    global _disabled
    _disabled = True


def enabled() -> bool:
    return not _disabled and os.environ.get(ENV_OFF, "") in ("", "0")


def cache_dir() -> Path:
    d = os.environ.get(ENV_DIR)
    if d:
        return Path(d)
    import platformdirs
    return Path(platformdirs.user_cache_dir("sim", appauthor=False))


@lru_cache(maxsize=1)
def code_hash() -> str:
    """A hash of the source a cost depends on: every .py and .yaml file of hw_models and sim.core,
    and the surrogate's own modules. An edit to any of them is a new key (a stale cost cannot survive
    a code change)."""
    root = Path(__file__).resolve().parents[3]
    h = hashlib.sha256()
    files = [p for d in ("hw_models", "sim/core") for p in (root / d).rglob("*") if p.suffix in (".py", ".yaml")]
    files += [root / "sim" / "apps" / "serve" / name for name in ("stepcost.py", "iteration.py",
                                                                          "serving_mapper.py")]
    for p in sorted(files):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _folder_problem(d: Path) -> str:
    """Why the cache directory cannot hold the cache ("" where it can): a file where the folder belongs, or
    a folder that cannot be made. Such a cache is a miss on every read and skips every write."""
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{ENV_DIR if os.environ.get(ENV_DIR) else 'cache directory'} {d}: {exc.strerror or exc}"
    return ""


def unusable(folder: Path | None = None) -> str:
    """Why the cache cannot be used ("" where it can): its folder (_folder_problem), or a file there that is no
    database (a hostile-input trial: `sim cache info` read "on" over random bytes). What `sim cache info` and
    `sim serve` say once; each connection checks the folder alone (a corrupt file fails there as a miss)."""
    d = folder or cache_dir()
    if why := _folder_problem(d):
        return why
    if (d / FILE).is_file() and (d / FILE).stat().st_size:
        try:
            with closing(sqlite3.connect(f"file:{d / FILE}?mode=ro", uri=True)) as con:
                con.execute("SELECT name FROM sqlite_master").fetchall()
        except sqlite3.DatabaseError as exc:
            return f"{d / FILE}: {exc} (`sim cache clear` removes it)"
    return ""


def _plain(x: Any) -> Any:
    return asdict(x) if is_dataclass(x) else x


def make_key(*parts: Any) -> str:
    """A key over `parts` (JSON-able values or dataclasses), the package version and the code hash."""
    blob = json.dumps([SCHEMA, __version__, code_hash(), *map(_plain, parts)], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class TableStore:
    """The cached points of one costing key; `load(name)` and `save(name, points)` per surrogate table."""

    def __init__(self, key: str, folder: Path | None = None):
        self.key = key
        self.path = (folder or cache_dir()) / FILE

    def _run(self, op: Callable[[sqlite3.Connection], Any]) -> Any:
        """op on a fresh connection, closed after. SQLite can answer "database is locked" at once, without
        waiting out the busy timeout (its WAL documentation lists cases where the busy handler is not called):
        two processes saving 40 tables each on one key, a fresh connection per save, lost a save in 9 of 20
        trials on this project's loaded 2-core machine. A lock error is retried LOCK_RETRIES times, pausing 1-4
        x LOCK_PAUSE_S between tries (~2.5 s in all; 0 of 20 trials lost then); any other error, or a lock
        that outlasts the retries, goes to the caller (a miss or a skipped save, as before)."""
        for attempt in range(LOCK_RETRIES + 1):
            try:
                con = self._connect()
                try:
                    return op(con)
                finally:
                    con.close()
            except sqlite3.OperationalError as exc:
                if attempt == LOCK_RETRIES or "locked" not in str(exc):   # SQLITE_BUSY and SQLITE_LOCKED say so
                    raise
                time.sleep(LOCK_PAUSE_S * (1 + attempt % 4))

    def _connect(self) -> sqlite3.Connection:
        why = _folder_problem(self.path.parent)
        if why:   # a miss or a skipped save, as an unreadable file is, not a failed run
            raise sqlite3.OperationalError(why)
        con = sqlite3.connect(self.path, timeout=60)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE IF NOT EXISTS points (key TEXT, name TEXT, value TEXT, PRIMARY KEY (key, name))")
        con.execute("CREATE TABLE IF NOT EXISTS writes (key TEXT, name TEXT, n INTEGER, PRIMARY KEY (key, name))")
        return con

    def stamp(self, name: str) -> int:
        """How many times table `name` of this key has been written, by any process: a write counter
        bumped in the transaction of each save, so a write cannot be missed (a file's (mtime, size) can:
        the kernel's coarse clock ticks every few ms, and an insert that fits its page keeps the size).
        Not SQLite's `PRAGMA data_version`: that compares states seen by one open connection, and a
        store opens one per operation. -1: unreadable (a miss, as in load)."""
        try:
            row = self._run(lambda con: con.execute("SELECT n FROM writes WHERE key = ? AND name = ?",
                                                    (self.key, name)).fetchone())
        except sqlite3.Error:
            return -1
        return 0 if row is None else row[0]

    def load(self, name: str) -> dict[str, Point]:
        try:
            row = self._run(lambda con: con.execute("SELECT value FROM points WHERE key = ? AND name = ?",
                                                    (self.key, name)).fetchone())
        except sqlite3.Error:
            return {}      # an unreadable cache is a miss, never a failed run
        if row is None:
            return {}
        return {k: (t, e, [tuple(b) for b in busy]) for k, (t, e, busy) in json.loads(row[0]).items()}

    def save(self, name: str, points: dict[str, Point]) -> None:
        blob = json.dumps(points)

        def write(con: sqlite3.Connection) -> None:
            with con:   # one transaction: a reader sees the new row and the new count, or neither
                con.execute("INSERT OR REPLACE INTO points VALUES (?, ?, ?)", (self.key, name, blob))
                con.execute("INSERT INTO writes VALUES (?, ?, 1) ON CONFLICT (key, name) DO UPDATE SET n = n + 1",
                            (self.key, name))
        try:
            self._run(write)
        except sqlite3.Error:
            pass           # a read-only or full cache directory costs speed, not the run


class MemoryStore:
    """A key's points in this process only (the persistent cache off): nothing loaded, nothing saved. The
    process's book of the key (sim.apps.serve.lazytable.book) still shares them between its runs of that key,
    as it does with the cache on: a `sim validate-serving` table's rows of one model and layout compute each
    common grid point once (a point is the mapper's cost of its sequences alone, so sharing it is exact)."""

    path = ""

    def __init__(self, key: str):
        self.key = key

    def load(self, name: str) -> dict[str, Point]:
        return {}

    def save(self, name: str, points: dict[str, Point]) -> None:
        pass


def seqs_key(seqs: tuple[tuple[int, int], ...] | list[tuple[int, int]]) -> str:
    return json.dumps([list(s) for s in seqs], separators=(",", ":"))


def clear(folder: Path | None = None) -> Path:
    """Delete the cache file (and SQLite's journal files); the path it was at."""
    path = (folder or cache_dir()) / FILE
    for p in (path, path.with_name(FILE + "-wal"), path.with_name(FILE + "-shm")):
        p.unlink(missing_ok=True)
    return path

"""The result store: an SQLite database in the sweep's output folder.

One row per point, keyed by the hash of its resolved config and the simulator
version, inserted and committed the moment the point finishes. A killed sweep
(Ctrl-C, SIGKILL, power cut short of the disk cache) loses at most the points
in flight; rerunning skips every key already present, and the primary key
makes a duplicate row impossible.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import sim
from sim.core.errors import ConfigError
from sim.apps.sweep.blame import relabelled
from sim.core.files import atomic_write, check_outputs, require_parquet, transaction, write_parquet

if TYPE_CHECKING:
    import pandas

    from sim.apps.sweep.expand import Point

DB_NAME = "results.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS points (
    key TEXT PRIMARY KEY,        -- hash of the resolved config + sim version
    idx INTEGER NOT NULL,        -- position in the expansion
    axes TEXT NOT NULL,          -- JSON: axis path -> value
    columns TEXT NOT NULL,       -- JSON: recorded config fields
    status TEXT NOT NULL,        -- ok | error
    error TEXT,                  -- one line, for failed points
    metrics TEXT,                -- JSON: RunResult.metrics()
    seconds REAL,                -- wall time of the point on its worker
    sim_version TEXT NOT NULL,
    finished_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS series (   -- a point's time series (a serving point's KV usage), not a column
    key TEXT PRIMARY KEY,
    data TEXT NOT NULL               -- JSON: name -> {t_s: [...], <value>: [...]}
);
"""


@contextmanager
def db_errors(path: Path) -> Iterator[None]:
    """SQLite and OS errors (a read-only, full or corrupt store) as one line naming the file."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{path}: sweep store unusable: {exc} (read-only, full or not a sweep database?)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: sweep store unusable: {exc.strerror or exc}") from None


class Store:
    """The store of `out_dir`. With `lock`, this process is the folder's only writer
    until close(): a second sweep on the same --out is refused, not interleaved."""

    def __init__(self, out_dir: str | Path, create: bool = True, lock: bool = False):
        self.dir = Path(out_dir)
        self.path = self.dir / DB_NAME
        self._lock: Any = None
        if not create and not self.path.is_file():
            raise ConfigError(f"{self.dir}: no sweep results here ({DB_NAME} not found)")
        with db_errors(self.path):
            self.dir.mkdir(parents=True, exist_ok=True)
            if lock:
                self._take_lock()
            try:
                self._open(create)
            except BaseException:
                if self._lock is not None:
                    os.close(self._lock)
                raise

    def _open(self, create: bool = True) -> None:
        if not create and not (os.access(self.dir, os.W_OK) and os.access(self.path, os.W_OK)):
            # A store on read-only media (an archive copied back from a cluster): SQLite cannot make the WAL index
            # there, so it is opened immutable (a sweep trial's load_results and export had failed). Immutable
            # ignores a -wal file, whose commits would then be missing: refused, not read short (a review).
            wal = Path(f"{self.path}-wal")
            if wal.is_file() and wal.stat().st_size > 0:
                raise ConfigError(f"{self.path}: read-only, and its last commits are still in {wal.name}: copy the "
                                  "folder somewhere writable and read it there")
            self.db = sqlite3.connect(f"{self.path.resolve().as_uri()}?immutable=1", uri=True, timeout=30)
            self._check_tables(create)
            return
        self.db = sqlite3.connect(self.path, timeout=30)
        # A file that is not a sweep's store is refused before anything is written to it (a hostile-input trial:
        # an export turned an empty results.sqlite into a database, and a sweep added its tables to a foreign one).
        self._check_tables(create)
        # WAL: each commit is one append, readers never block the writer.
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # durable across process kills
        self.db.executescript(_SCHEMA)
        self.db.commit()

    def _check_tables(self, create: bool) -> None:
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if ("points" not in tables) and (tables or not create):
            self.db.close()
            raise ConfigError(f"{self.path}: not a sweep's results store (no points table"
                              f"{': it holds ' + ', '.join(sorted(tables)) if tables else ''}); give another folder")

    def _take_lock(self) -> None:
        # A flock on the folder itself: no lock file to leave behind, and the kernel releases
        # it when the process dies, so a killed sweep leaves no stale lock.
        self._lock = os.open(self.dir, os.O_RDONLY)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            raise ConfigError(f"{self.dir}: another sweep is writing to this folder; wait for it to finish "
                              "or give another --out") from None

    def close(self) -> None:
        self.db.close()
        if self._lock is not None:
            os.close(self._lock)  # releases the flock

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def set_meta(self, **items: Any) -> None:
        with db_errors(self.path), self.db:
            self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                [(k, json.dumps(v)) for k, v in items.items()])

    def meta(self) -> dict[str, Any]:
        with db_errors(self.path):
            return {k: json.loads(v) for k, v in self.db.execute("SELECT k, v FROM meta")}

    def done_keys(self) -> set[str]:
        with db_errors(self.path):
            return {k for (k,) in self.db.execute("SELECT key FROM points")}

    def adopt(self, points: list["Point"]) -> list["Point"]:
        """The `points` already stored (same resolved config, so the same result), relabelled
        with this sweep's index, axes and columns: a changed spec shows its own axes on
        reused rows, not the old spec's (nor NaN for an axis the old one lacked)."""
        with db_errors(self.path):
            stored = {k: (json.loads(a), e) for k, a, e in self.db.execute("SELECT key, axes, error FROM points")}
        reused = [p for p in points if p.key in stored]
        with db_errors(self.path), self.db:   # an error row names its point: by the new axes too (blame)
            self.db.executemany("UPDATE points SET idx = ?, axes = ?, columns = ?, error = ? WHERE key = ?",
                                [(p.index, json.dumps(p.axes), json.dumps(p.columns, default=str),
                                  stored[p.key][1] and relabelled(stored[p.key][1], stored[p.key][0], p.axes), p.key)
                                 for p in reused])
        return reused

    def add(self, point: "Point", outcome: dict[str, Any]) -> None:
        """Record one finished point and commit at once. A second add of the same key is ignored."""
        with db_errors(self.path), self.db:
            self.db.execute(
                "INSERT OR IGNORE INTO points VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (point.key, point.index, json.dumps(point.axes), json.dumps(point.columns, default=str),
                 outcome["status"], outcome.get("error"), json.dumps(outcome.get("metrics") or {}),
                 outcome.get("seconds"), sim.__version__, time.time()))
            if outcome.get("series"):
                self.db.execute("INSERT OR IGNORE INTO series VALUES (?, ?)", (point.key, json.dumps(outcome["series"])))

    def series(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The stored time series of the points `keys` (those that have any)."""
        wanted = set(keys)
        with db_errors(self.path):
            stored = self.db.execute("SELECT key, data FROM series").fetchall()
        return {k: json.loads(d) for k, d in stored if k in wanted}

    def rows(self, keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
        wanted = set(keys) if keys is not None else None
        out = []
        with db_errors(self.path):
            stored = self.db.execute(
                "SELECT key, idx, axes, columns, status, error, metrics, seconds FROM points ORDER BY idx, key"
            ).fetchall()
        for key, idx, axes, columns, status, error, metrics, seconds in stored:
            if wanted is not None and key not in wanted:
                continue
            row: dict[str, Any] = {"point": idx, **json.loads(axes), **json.loads(columns)}
            row.update(json.loads(metrics))
            row.update(status=status, error=error, seconds=seconds, key=key)
            out.append(row)
        return out


def load_results(out_dir: str | Path, all_rows: bool = False) -> "pandas.DataFrame":
    """One row per point: every axis value, the recorded config columns, every
    metric, then status, error, seconds and key. Failed points have NaN metrics.
    Only the points of the latest sweep run in this folder unless `all_rows`."""
    import pandas as pd

    with Store(out_dir, create=False) as store:
        keys = None if all_rows else store.meta().get("keys")
        rows = store.rows(keys)
    df = pd.DataFrame(rows)
    for col in df.columns:  # JSON turns NaN/inf into null; keep metric columns numeric
        if df[col].dtype == object and all(v is None or isinstance(v, (int, float)) and not isinstance(v, bool)
                                           for v in df[col]):
            df[col] = pd.to_numeric(df[col])
    return df


def load_series(out_dir: str | Path, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
    with Store(out_dir, create=False) as store:
        return store.series(keys)


def export(out_dir: str | Path, csv: str | Path | None = None, parquet: str | Path | None = None,
           json_path: str | Path | None = None) -> list[Path]:
    if not csv and not parquet and not json_path:
        raise ConfigError("sweep export: give --csv PATH, --parquet PATH or --json PATH")
    # every output checked before any is written, and all landed in one transaction: all or none (a hostile-input
    # trial's CSV was written before its --json /proc/x.json failed; `--json - --csv -` ran into one another on stdout)
    check_outputs({flag: str(path) if path else None
                   for flag, path in {"--csv": csv, "--json": json_path, "--parquet": parquet}.items()})
    df = load_results(out_dir)
    with transaction():
        return _write_exports(df, csv, parquet, json_path)


def _write_exports(df, csv, parquet, json_path) -> list[Path]:
    written = []
    if csv:
        written.append(atomic_write(csv, lambda p: df.to_csv(p, index=False)))
    if json_path:   # one object per point, numbers as numbers (NaN as null), as a script reads them
        written.append(atomic_write(json_path, lambda p: df.to_json(p, orient="records", indent=1)))
    if parquet:
        require_parquet(f"sweep export --parquet {parquet}")
        # Mixed-type axis columns (e.g. numbers and strings) cannot go to parquet as objects.
        frame = df.copy()
        for col in frame.columns:
            if frame[col].dtype == object:
                frame[col] = frame[col].map(lambda v: v if v is None or isinstance(v, str) else json.dumps(v))
        written.append(write_parquet(parquet, frame, f"sweep export --parquet {parquet}"))
    return written



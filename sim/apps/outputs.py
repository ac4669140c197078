"""Files a run writes: JSON, Chrome trace, plots. Each is written to a temporary
file and renamed into place, so an interrupted run leaves nothing half-written."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from sim.apps.counters import Track, counter_events
from sim.core.engine import Timeline
from sim.core.errors import ConfigError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_output(path: str | Path, directory: bool = False) -> Path:
    """Fail before a long run, not after it, when `path` cannot be written: it is
    an existing directory (or, for `directory`, a file), or a parent is a file,
    or the nearest existing parent is not writable."""
    path = Path(path)
    if path.is_dir() != directory and path.exists():
        raise ConfigError(f"{path}: is {'a file' if directory else 'a directory'}; "
                          f"expected {'a directory' if directory else 'a file path'}")
    parent = path if directory else path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{path}: cannot write: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{path}: cannot write: {parent} is not writable")
    return path


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    path = check_output(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:  # a parent is a file, a read-only directory, a full disk
        raise ConfigError(f"{path}: cannot write: {exc.strerror or exc}") from None
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a result file is as readable as any other
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ConfigError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, data: Any) -> Path:
    return atomic_write(path, lambda p: p.write_text(json.dumps(data, indent=1, default=float)))


def chrome_trace(timelines: dict[str, Timeline], counters: dict[str, dict[str, Track]] | None = None) -> dict[str, Any]:
    """Chrome trace JSON (opens in Perfetto): one process per timeline, one
    thread (track) per resource, and the `counters` given for a timeline's label
    (sim.apps.counters) as counter tracks of its process; times in microseconds."""
    events: list[dict[str, Any]] = []
    for pid, (label, tl) in enumerate(timelines.items(), start=1):
        events.append(dict(ph="M", pid=pid, name="process_name", args=dict(name=label)))
        events += counter_events((counters or {}).get(label, {}), pid)
        tids: dict[str, int] = {}
        for i in tl.intervals:
            if i.resource not in tids:
                tids[i.resource] = len(tids) + 1
                events.append(dict(ph="M", pid=pid, tid=tids[i.resource], name="thread_name",
                                   args=dict(name=i.resource)))
            tag = i.tag
            op = getattr(tag, "op", None)
            args = dict(bound=getattr(tag, "bound", ""), path=getattr(tag, "path", ""))
            if op is not None:
                args.update(kind=op.kind, flops=op.flops, bytes=op.bytes)
            events.append(dict(ph="X", pid=pid, tid=tids[i.resource], name=i.task, cat=args.get("kind", "task"),
                               ts=i.start_s * 1e6, dur=i.duration_s * 1e6, args=args))
    return {"traceEvents": events, "displayTimeUnit": "ms"}

"""The Chrome trace (Perfetto) of a run: one lane per engine resource, op slices
with their FLOPs and bytes, and counter tracks (memory tiers, buffers, links).
Files are written through sim.core.files (atomic, all or none), re-exported here."""

from __future__ import annotations

from typing import Any

from sim.apps.counters import Track, counter_events
from sim.core.engine import Timeline
from sim.core.files import atomic_write, check_output, dumps, transaction, write_json  # noqa: F401 (re-exported)

__all__ = ["atomic_write", "check_output", "chrome_trace", "dumps", "transaction", "write_json"]


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

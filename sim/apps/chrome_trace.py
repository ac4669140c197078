"""The Chrome trace (Perfetto) of a run: one lane per engine resource, op slices
with their FLOPs and bytes, and counter tracks (memory tiers, buffers, links).
Write it with sim.core.files.write_json (atomic, all or none)."""

from __future__ import annotations

from typing import Any

from sim.apps.counters import Track, counter_events
from sim.core.engine import Timeline


def _lanes(pid: int, resources: list[str], lanes: dict[str, list[str]]) -> tuple[list[dict], dict[str, list[int]]]:
    """Thread metadata of one process and resource -> tids: a resource `lanes` maps
    (a parallel plan's stage or link) lands on each of its lanes, in the layout's order,
    any other on a lane of its own."""
    names: dict[str, int] = {}
    for r in [r for r in lanes if r in resources] + [r for r in resources if r not in lanes]:
        for name in lanes.get(r, [r]):
            names.setdefault(name, len(names) + 1)
    meta = [e for name, tid in names.items() for e in (
        dict(ph="M", pid=pid, tid=tid, name="thread_name", args=dict(name=name)),
        dict(ph="M", pid=pid, tid=tid, name="thread_sort_index", args=dict(sort_index=tid)))]
    return meta, {r: [names[n] for n in lanes.get(r, [r])] for r in resources}


def chrome_trace(timelines: dict[str, Timeline], counters: dict[str, dict[str, Track]] | None = None,
                 lanes: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Chrome trace JSON (opens in Perfetto): one process per timeline, one
    thread (track) per resource, and the `counters` given for a timeline's label
    (sim.apps.counters) as counter tracks of its process; times in microseconds.
    `lanes` (a parallel plan's, RunResult.extra["parallel"]["lanes"]) puts a resource's
    slices on several lanes: one per device of a pipeline stage, one per link."""
    events: list[dict[str, Any]] = []
    for pid, (label, tl) in enumerate(timelines.items(), start=1):
        events.append(dict(ph="M", pid=pid, name="process_name", args=dict(name=label)))
        events += counter_events((counters or {}).get(label, {}), pid)
        meta, tids = _lanes(pid, list(dict.fromkeys(i.resource for i in tl.intervals)), lanes or {})
        events += meta
        for i in tl.intervals:
            tag = i.tag
            op = getattr(tag, "op", None)
            args = dict(bound=getattr(tag, "bound", ""), path=getattr(tag, "path", ""))
            if op is not None:
                args.update(kind=op.kind, flops=op.flops, bytes=op.bytes)
            elif hasattr(tag, "kind"):   # a collective, a send or a whole pipeline stage
                args.update(kind=tag.kind, bytes=getattr(tag, "bytes", 0.0))
                if getattr(tag, "collective_s", 0.0):   # a stage's TP/EP collectives run inside its block
                    args["collective_us"] = tag.collective_s * 1e6
            events += [dict(ph="X", pid=pid, tid=tid, name=i.task, cat=args.get("kind", "task"),
                            ts=i.start_s * 1e6, dur=i.duration_s * 1e6, args=args) for tid in tids[i.resource]]
    return {"traceEvents": events, "displayTimeUnit": "ms"}

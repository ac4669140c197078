"""Counter tracks for a Chrome/Perfetto trace, derived from a step's timeline:

* memory-tier occupancy by role: weights (the footprint's, constant within a step),
  KV cache in use (the tokens cached before the step, plus each layer's new tokens
  once its KV append, or for schedules without one its last compute, is done), and
  the activations of the ops running (inputs and outputs, as the footprint counts them);
* the amount in use of each engine container (an offload schedule's GPU weight and
  KV buffers; PIM's bank locks), as the engine recorded it;
* the bandwidth each link family is moving (bytes / duration of the transfers running).

A track is a list of (time_s, {series: value}); values in GB and GB/s."""

from __future__ import annotations

import re
from typing import Any

from sim.core.engine import Timeline
from sim.core.results import RunResult, layer_of, whole_op

Track = list[tuple[float, dict[str, float]]]
GB = 1e9


def _steps(deltas: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A running sum of (time, change) events, one value per distinct time."""
    out: list[tuple[float, float]] = []
    total = 0.0
    for t, d in sorted(deltas):
        total += d
        if out and out[-1][0] == t:
            out[-1] = (t, total)
        else:
            out.append((t, total))
    return out


def _merge(series: dict[str, list[tuple[float, float]]]) -> Track:
    """Step series sampled at every time any of them changes, each carrying all values."""
    times = sorted({t for s in series.values() for t, _ in s})
    track, idx = [], dict.fromkeys(series, -1)
    for t in times:
        values = {}
        for name, s in series.items():
            while idx[name] + 1 < len(s) and s[idx[name] + 1][0] <= t:
                idx[name] += 1
            values[name] = s[idx[name]][1] if idx[name] >= 0 else 0.0
        track.append((t, values))
    return track


def kv_appended(tl: Timeline) -> list[float]:
    """Times at which a layer's new KV is in place: its KV append ends (all pieces), or
    where a schedule has no per-op tasks, its last compute ends."""
    done: dict[str | int, float] = {}   # per op (first pass) or per layer
    for i in tl.intervals:
        op = getattr(i.tag, "op", None)
        if op is not None and op.kind == "kv_append":
            key = whole_op(i.task)
            done[key] = max(done.get(key, 0.0), i.end_s)
    if not done:
        for i in tl.intervals:
            layer = layer_of(i.task)
            if layer is not None and getattr(i.tag, "kind", "") != "transfer":
                done[layer] = max(done.get(layer, 0.0), i.end_s)
    return sorted(done.values())


def activations_live(tl: Timeline) -> list[tuple[float, float]]:
    """Bytes of activations held by the ops running, over time (pieces of one op count once)."""
    spans: dict[str, list] = {}
    for i in tl.intervals:
        op = getattr(i.tag, "op", None)
        if op is None:
            continue
        s = spans.setdefault(op.name, [i.start_s, i.end_s, op])
        s[0], s[1] = min(s[0], i.start_s), max(s[1], i.end_s)
    deltas = []
    for start, end, op in spans.values():
        live = sum(t.bytes for t in (*op.reads, *op.writes) if t.role == "activation")
        deltas += [(start, live), (end, -live)]
    return _steps(deltas)


def memory_tracks(result: RunResult, tl: Timeline, tokens_before: float, new_tokens: float) -> dict[str, Track]:
    """Per memory tier, GB in use by weights, KV cache and activations over the step."""
    cached = result.prompt_len + result.gen_len
    appends = kv_appended(tl)
    live = activations_live(tl)
    tracks = {}
    for n, (tier, roles) in enumerate(result.memory_by_role.items()):
        per_token = roles.get("kv_cache", 0.0) / cached if cached else 0.0
        kv = [(0.0, per_token * tokens_before)]
        kv += [(t, per_token * new_tokens / len(appends)) for t in appends]
        series = {"weights": [(0.0, roles.get("weights", 0.0))], "kv_cache": _steps(kv)}
        if n == 0 and live:  # activations of the ops are on the first (device) tier
            series["activations"] = live
        track = _merge(series)
        tracks[f"{tier} occupancy (GB)"] = [(t, {k: v / GB for k, v in vals.items()}) for t, vals in track]
    return tracks


def container_tracks(tl: Timeline) -> dict[str, Track]:
    """Each container's amount in use: GB for buffers, a plain count for locks (< 1 MB)."""
    out = {}
    for name, levels in tl.levels.items():
        scale, unit = (1 / GB, " (GB)") if max(v for _, v in levels) >= 1e6 else (1.0, "")
        out[f"{name} in use{unit}"] = [(0.0, {"in use": 0.0})] + [(t, {"in use": v * scale}) for t, v in levels]
    return out


def _is_transfer(tag) -> bool:
    """A link's work: a transfer task, or an op the mapper bound to a link (a pipeline stage's send)."""
    if getattr(tag, "bound", "") == "link":
        return True
    return getattr(tag, "op", None) is None and getattr(tag, "kind", "transfer") == "transfer"


def link_tracks(tl: Timeline) -> dict[str, Track]:
    """GB/s in use per link family (c2c0, c2c1, ... together as c2c; a pipeline rank's link its own):
    transfers' bytes / duration."""
    deltas: dict[str, list] = {}
    for i in tl.intervals:
        tag = i.tag
        nbytes = getattr(tag, "bytes", 0.0)
        if not (nbytes and _is_transfer(tag)):
            continue
        if i.duration_s > 0:
            rate = nbytes / i.duration_s / GB
            # c2c0, c2c1, ... one family; a named link (a parallel plan's link.s0, after stage 0) its own
            family = i.resource if "." in i.resource else re.sub(r"\d+$", "", i.resource) or i.resource
            deltas.setdefault(family, []).extend([(i.start_s, rate), (i.end_s, -rate)])
    return {f"{link} in use (GB/s)": [(t, {"GB/s": max(v, 0.0)}) for t, v in _steps(d)] for link, d in deltas.items()}


def step_tracks(result: RunResult, phase: str) -> dict[str, Track]:
    """Every counter track of the run's prefill or representative decode step."""
    if phase == "prefill":
        tl, before, new = result.prefill_timeline, 0, result.prompt_len
    else:
        tl, before, new = result.decode_timeline, result.decode_kv_len - 1, 1
    return {**memory_tracks(result, tl, before, new), **container_tracks(tl), **link_tracks(tl)}


def counter_events(tracks: dict[str, Track], pid: int) -> list[dict[str, Any]]:
    """Chrome trace counter events ("ph": "C"), times in microseconds."""
    return [dict(ph="C", pid=pid, name=name, ts=t * 1e6, args=values)
            for name, track in tracks.items() for t, values in track]

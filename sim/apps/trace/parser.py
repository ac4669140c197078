"""Read measured runs into the simulator's own vocabulary.

Three inputs, one result (`Trace` of sim.apps.trace.records: a list of
`MeasuredOp` plus the shapes of each step, enough to rebuild the simulated op graph):

* torch Chrome traces (`.json` / `.json.gz`, from `torch.profiler`):
  sim.apps.trace.chrome;
* the project's normalized op tables (`PREFIX.ops.csv` of
  scripts/capture_trace.py, with `PREFIX.meta.json` beside it):
  sim.apps.trace.ops_table;
* vidur's profiled per-op tables (`mlp.csv`): sim.apps.trace.vidur.

The op labels understood are in sim.apps.trace.labels; sim.apps.trace.shapes
builds the graphs (vidur's fused shapes included).
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import os
from pathlib import Path

from sim.core.errors import ConfigError
from sim.core.files import capture_inputs, note_input
from sim.core.schema import require_file
from sim.apps.trace.chrome import load_chrome_trace
from sim.apps.trace.meta import meta_path_beside
from sim.apps.trace.ops_table import load_ops_table
from sim.apps.trace.records import Trace
from sim.apps.trace.vidur import load_vidur_table


def load_trace(path: str | Path, model: str | None = None, tokens: int | None = None) -> list[Trace]:
    """Any supported file. A vidur table gives one Trace per (model, TP) with one
    step per row; a Chrome trace or ops table gives one Trace. `model` and
    `tokens` fill in what a vidur Chrome trace does not record."""
    p = Path(path)
    require_file(p, "trace file not found", "a trace file")
    key = (os.path.realpath(p), model, tokens)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] == _stamps(p, hit[1]):
        note_input(*hit[1])  # a hit reads the same files as a load: none may be an output
        return [_copy(t) for t in hit[2]]
    try:
        with capture_inputs() as read:
            traces = _load_trace(p, model, tokens)
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a trace: binary data (not UTF-8 text)") from None
    if len(_CACHE) >= _CACHE_ENTRIES:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = (_stamps(p, read), tuple(read), traces)
    return [_copy(t) for t in traces]


# Parsing a Chrome trace costs ~0.35 s (JSON, then kernel attribution), and the survey,
# replay, stack and validation paths read the same few dozen traces again and again.
# An entry holds while every file the load read (the trace, its .meta.json sidecar, any
# model config) and the sidecar's absence are unchanged: (path, mtime, size) of each.
_CACHE_ENTRIES = 256
_Stamp = tuple[str, int, int] | tuple[str, None, None]
_CACHE: dict[tuple[str, str | None, int | None], tuple[tuple[_Stamp, ...], tuple[str, ...], list[Trace]]] = {}


def _stamps(p: Path, read: tuple[str, ...] | list[str]) -> tuple[_Stamp, ...]:
    sidecar = meta_path_beside(p)
    out: list[_Stamp] = []
    for name in dict.fromkeys([str(p), *([str(sidecar)] if sidecar else []), *read]):
        try:
            st = os.stat(name)
            out.append((name, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((name, None, None))
    return tuple(out)


def _copy(t: Trace) -> Trace:
    """A caller's own Trace: fresh lists and meta (ops, steps and the model are frozen dataclasses)."""
    return dataclasses.replace(t, steps=list(t.steps), ops=list(t.ops), meta=copy.deepcopy(t.meta))


def _load_trace(p: Path, model: str | None, tokens: int | None) -> list[Trace]:
    """By name and CSV header: a .csv is a vidur table or an ops table; anything else a Chrome trace."""
    if p.name.endswith(".csv"):
        with open(p, newline="") as fh:
            header = next(csv.reader(fh), [])
        if any(h.startswith("time_stats.") for h in header):
            return load_vidur_table(p)
        if "op" in header and "cpu_time_us" in header:
            return [load_ops_table(p)]
        raise ConfigError(f"{p}: CSV is neither a vidur profile (time_stats.<op>.median columns) "
                          "nor a capture_trace ops table (op, cpu_time_us columns)")
    return [load_chrome_trace(p, model, tokens)]

"""The project's normalized op tables: `PREFIX.ops.csv` of scripts/capture_trace.py
(one row per op per step: op, step, cpu_time_us, device_time_us), with
`PREFIX.meta.json` beside it giving the run's model and step shapes."""

from __future__ import annotations

import csv
from pathlib import Path

from sim.core.errors import ConfigError
from sim.apps.trace.labels import sim_label
from sim.apps.trace.meta import measured, meta_beside, meta_path_beside, sim_trace_shape
from sim.apps.trace.records import MeasuredOp, Trace


def load_ops_table(p: Path) -> Trace:
    """capture_trace's PREFIX.ops.csv (+ PREFIX.meta.json): one row per op per step.
    Ops run back to back: each starts where the one before ended."""
    meta = meta_beside(p)
    if not meta:
        where = meta_path_beside(p)
        raise ConfigError(f"{p}: ops table without its {where.name if where else 'PREFIX.meta.json'} beside it "
                          "(scripts/capture_trace.py writes both)")
    device = str(meta.get("device", "cpu"))
    trace = Trace(str(p), "sim", device)
    sim_trace_shape(trace, meta, None)
    seen: dict[tuple[int, str], int] = {}
    t = 0.0
    with open(p, newline="") as fh:
        reader = csv.DictReader(fh)
        width = len(reader.fieldnames or ())   # the header's cells (reading it)
        for row in reader:
            i = reader.line_num   # the file's line (a quoted cell may span lines)
            if None in row.values():   # a row cut short: the last line of a truncated file
                cells = width - sum(v is None for v in row.values())
                raise ConfigError(f"{p}: line {i}: {cells} cells where the header has {width} (a truncated file?)")
            if None in row:
                raise ConfigError(f"{p}: line {i}: {width + len(row[None])} cells where the header has {width}")
            try:
                name, step = row["op"], int(row["step"])
                if step < 0:
                    raise ValueError(f"step {step} is negative")
                us = measured(row["device_time_us"] if device == "cuda" else row["cpu_time_us"], f"{p}: line {i}")
                cpu_us = measured(row["cpu_time_us"], f"{p}: line {i}: cpu_time_us")
            except (KeyError, ValueError, TypeError) as exc:
                raise ConfigError(f"{p}: line {i}: bad ops-table row ({exc})") from None
            _same_shape(p, i, row, trace, step)
            label = sim_label(name)
            if label is None:   # every row of a capture's table is a sim op: another name is said, not dropped silently
                trace.unknown_ops.add(name)
                continue
            layer, kind = label
            repeat = seen.get((step, name), 0)
            seen[(step, name)] = repeat + 1
            trace.ops.append(MeasuredOp(name, kind, layer, step, us * 1e-6, device, t, cpu_us * 1e-6, 0, repeat))
            t += us * 1e-6
    return trace


SHAPE_COLUMNS = ("batch", "q_len", "kv_len")


def _same_shape(p: Path, line: int, row: dict, trace: Trace, step: int) -> None:
    """A row's batch, q_len and kv_len (capture_trace writes them beside each op) must be its step's in the
    .meta.json, which the shapes are read from: a row that says otherwise is refused, naming both (a trace trial:
    batch 0, batch 8, kv_len -5 or q_len abc gave results identical to the file's own, the columns unread)."""
    if step >= len(trace.steps):
        return
    shape = trace.steps[step]
    for col in SHAPE_COLUMNS:
        cell = row.get(col)
        if cell not in (None, "") and cell.strip() != str(getattr(shape, col)):
            raise ConfigError(f"{p}: line {line}: {col} {cell!r}, but its step {shape.label} has {col} "
                              f"{getattr(shape, col)} in the .meta.json the shapes are read from")

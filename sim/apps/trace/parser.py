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

import csv
from pathlib import Path

from sim.core.errors import ConfigError
from sim.core.schema import require_file
from sim.apps.trace.chrome import load_chrome_trace
from sim.apps.trace.ops_table import load_ops_table
from sim.apps.trace.records import Trace
from sim.apps.trace.vidur import load_vidur_table


def load_trace(path: str | Path, model: str | None = None, tokens: int | None = None) -> list[Trace]:
    """Any supported file. A vidur table gives one Trace per (model, TP) with one
    step per row; a Chrome trace or ops table gives one Trace. `model` and
    `tokens` fill in what a vidur Chrome trace does not record."""
    p = Path(path)
    require_file(p, "trace file not found", "a trace file")
    try:
        return _load_trace(p, model, tokens)
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a trace: binary data (not UTF-8 text)") from None


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

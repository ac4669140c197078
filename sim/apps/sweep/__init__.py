"""Architecture-exploration sweeps: one YAML file names a workload, a machine
and axes (dotted paths to vary); `sim sweep` expands the points, runs them on
any concurrent.futures executor (local processes or Dask), commits each result
to SQLite as it finishes, and draws the plots the file asks for.

    spec.py    the sweep file schema
    expand.py  axes -> points (grid, zip, random), validated before anything runs
    resolve.py a point's workload and machine from the base files and its axis values
    blame.py   which point and which axis a point's error row names
    energy.py  the two energy models across rows (ranking, the Pareto front) and a power cap past the model
    expr.py    the safe expression language of `when:`
    run.py     executing points, progress
    store.py   the resumable SQLite result store, export, load_results
    plots.py   line, heatmap and Pareto plots with the best point marked
    labels.py  a column's name and unit as plots and tables read them ("power limit (W)")
    names.py   the metric names each kind of point records (run, serve): `metrics:` is checked against them
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from sim.apps.sweep.store import load_results as _load

if TYPE_CHECKING:
    import pandas

__all__ = ["load_results", "DEFAULT_MAX_POINTS"]

# More points than this is almost always a typo (`step: 1` up to 1e8); `--max-points` raises it.
DEFAULT_MAX_POINTS = 100_000


def load_results(out_dir: str) -> "pandas.DataFrame":
    """The results of the sweep in `out_dir` as a DataFrame, one row per point."""

    return _load(out_dir)

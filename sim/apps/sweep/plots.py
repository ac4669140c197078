"""Sweep plots: a metric over one axis (one line per value of another), a
heatmap over two axes, and the Pareto front of two metrics. Every plot marks
its best point with a star: the best value of the plotted metric for line and
heatmap, and for a Pareto front the front point closest to the ideal corner
after scaling both metrics to [0, 1] (the knee of the trade-off).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sim.core.errors import ConfigError
from sim.apps.plots import _save, plt
from sim.apps.sweep.expr import compile_expr
from sim.apps.sweep.spec import Plot, SweepSpec, default_goal

if TYPE_CHECKING:
    import pandas as pd

_STAR = dict(marker="*", s=260, color="gold", edgecolor="black", linewidths=0.8, zorder=5)


def _label(col: str) -> str:
    return col.replace("hw.memory.@device.", "device memory ").replace("workload.", "")


def _ok(df: "pd.DataFrame", cols: list[str], where: str, p: Plot | None = None) -> "pd.DataFrame":
    """The finished rows with every column the plot needs, after its `where` filter."""
    for c in cols:
        if c not in df.columns:
            raise ConfigError(f"{where}: no column {c!r}; columns: {', '.join(map(str, df.columns))}")
    ok = df[df["status"] == "ok"] if "status" in df.columns else df
    if p is not None and p.where:
        expr = compile_expr(p.where, f"{where}: where")
        keep = [bool(expr(_row_lookup(row, where))) for row in ok.to_dict("records")]
        ok = ok[keep]
    return ok.dropna(subset=cols)


def _row_lookup(row: dict, where: str):
    """Names in a plot's `where` are whole column names (`workload.batch`, `hw`)."""
    def look(name: str):
        if name not in row:
            raise ConfigError(f"{where}: where: no column {name!r}")
        return row[name]
    return look


def _order(values: "pd.Series") -> list:
    """Numbers ascending; anything else (presets, formats) in the order the spec lists them."""
    uniq = list(dict.fromkeys(values))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in uniq):
        return sorted(uniq)
    return uniq


def _fmt(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _best_index(values: "pd.Series", goal: str):
    return values.idxmin() if goal == "min" else values.idxmax()


def line(df: "pd.DataFrame", p: Plot, title: str, path: Path) -> Path:
    goal = p.goal or default_goal(p.y)
    cols = p.line_columns
    data = _ok(df, [p.x, p.y] + cols, f"plots: {p.kind} {p.y}", p)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups = data.groupby(cols, sort=True) if cols else [((), data)]
    # With two line columns, color follows the last and the line style the first, so
    # e.g. PIM on/off at the same context length share a color.
    styles = ["-", "--", ":", "-."]
    first = sorted(data[cols[0]].unique(), key=str) if len(cols) > 1 else []
    last = sorted(data[cols[-1]].unique(), key=str) if len(cols) > 1 else []
    for i, (values, g) in enumerate(groups):
        g = g.sort_values(p.x)
        values = values if isinstance(values, tuple) else (values,)
        lbl = ", ".join(f"{_label(c)} = {_fmt(v)}" for c, v in zip(cols, values)) or None
        if len(cols) > 1:
            style = dict(color=f"C{last.index(values[-1]) % 10}", linestyle=styles[first.index(values[0]) % 4])
        else:
            style = dict(color=f"C{i % 10}")
        ax.plot(g[p.x], g[p.y], marker="o", ms=4, label=lbl, **style)
    if len(data):
        b = data.loc[_best_index(data[p.y], goal)]
        ax.scatter([b[p.x]], [b[p.y]], label=f"best ({goal} {p.y} = {b[p.y]:.4g})", **_STAR)
    return _finish_xy(fig, ax, p, title, path, ylabel=p.y)


def heatmap(df: "pd.DataFrame", p: Plot, title: str, path: Path) -> Path:
    goal = p.goal or default_goal(p.z)
    data = _ok(df, [p.x, p.y, p.z], f"plots: heatmap {p.z}", p)
    # Several points per cell (a third axis) are reduced to the best one.
    table = data.groupby([p.y, p.x])[p.z].agg(goal).unstack(p.x)
    table = table.reindex(index=_order(data[p.y]), columns=_order(data[p.x]))
    fig, ax = plt.subplots(figsize=(7, 5))
    im = ax.imshow(table.to_numpy(dtype=float), origin="lower", aspect="auto", cmap="viridis")
    fig.colorbar(im, ax=ax, label=p.z)
    ax.set_xticks(range(len(table.columns)), [_fmt(v) for v in table.columns], rotation=45, fontsize=7)
    ax.set_yticks(range(len(table.index)), [_fmt(v) for v in table.index], fontsize=7)
    arr = table.to_numpy(dtype=float)
    for (i, j), v in np.ndenumerate(arr):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=6,
                    color="black" if im.norm(v) > 0.6 else "white")  # readable on viridis' yellow end
    if np.isfinite(arr).any():
        flat = np.nanargmin(arr) if goal == "min" else np.nanargmax(arr)
        i, j = np.unravel_index(flat, arr.shape)
        # In the cell's corner, so the cell's value stays readable.
        ax.scatter([j - 0.32], [i + 0.3], **{**_STAR, "s": 160})
        # The legend would cover cells; the best point goes in the title.
        title += (f"\n★ best ({goal} {p.z} = {arr[i, j]:.4g}) at {_label(p.x)} = {_fmt(table.columns[j])}, "
                  f"{_label(p.y)} = {_fmt(table.index[i])}")
    ax.set_xlabel(_label(p.x))
    ax.set_ylabel(_label(p.y))
    ax.set_title(title, fontsize=10)
    return _save(fig, path)


def pareto_front(x: np.ndarray, y: np.ndarray, goal_x: str = "min", goal_y: str = "min") -> np.ndarray:
    """Indices of the points no other point beats in both (ties kept), sorted by x."""
    sx = x if goal_x == "min" else -x
    sy = y if goal_y == "min" else -y
    order = np.lexsort((sy, sx))
    front, best_y = [], np.inf
    for i in order:
        if sy[i] < best_y:
            front.append(i)
            best_y = sy[i]
    return np.array(front, dtype=int)


def pareto(df: "pd.DataFrame", p: Plot, title: str, path: Path) -> Path:
    gx, gy = p.goal_x or default_goal(p.x), p.goal or default_goal(p.y)
    data = _ok(df, [p.x, p.y] + ([p.label] if p.label else []), f"plots: pareto {p.y}", p)
    x, y = data[p.x].to_numpy(dtype=float), data[p.y].to_numpy(dtype=float)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter(x, y, s=14, alpha=0.4, color="tab:gray", label="points")
    if len(data):
        f = pareto_front(x, y, gx, gy)
        ax.plot(x[f], y[f], "o-", color="tab:red", ms=5, label="Pareto front")
        if p.label:
            for i in f:
                ax.annotate(str(data[p.label].iloc[i]), (x[i], y[i]), fontsize=7, xytext=(4, 4),
                            textcoords="offset points")
        # Knee: nearest to the ideal corner with both metrics scaled to [0, 1], better = 0.
        def scaled(v: np.ndarray, goal: str) -> np.ndarray:
            span = v.max() - v.min()
            s = (v - v.min()) / span if span else np.zeros_like(v)
            return s if goal == "min" else 1 - s
        dist = np.hypot(scaled(x, gx)[f], scaled(y, gy)[f])
        k = f[int(np.argmin(dist))]
        ax.scatter([x[k]], [y[k]], label=f"best trade-off ({p.x} {x[k]:.4g}, {p.y} {y[k]:.4g})", **_STAR)
    return _finish_xy(fig, ax, p, title, path, ylabel=_label(p.y))


def _finish_xy(fig, ax, p, title: str, path: Path, ylabel: str) -> Path:
    """Axes, scales, title, grid and legend shared by the line and Pareto plots."""
    ax.set_xlabel(_label(p.x))
    ax.set_ylabel(ylabel)
    ax.set_xscale("log" if p.logx else "linear")
    ax.set_yscale("log" if p.logy else "linear")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


_DRAW = {"line": line, "heatmap": heatmap, "pareto": pareto}


def default_plots(spec: SweepSpec, df: "pd.DataFrame") -> list[Plot]:
    """Without a `plots:` list: each metric over the first axis, one line per value of the second."""
    axes = [a for a in spec.axes if a in df.columns]
    if not axes:
        return []
    lines = axes[1] if len(axes) > 1 else None
    numeric = df[axes[0]].map(lambda v: isinstance(v, (int, float))).all()
    if not numeric:  # a categorical first axis (e.g. hw) reads better as the lines
        axes = axes[1:] + axes[:1] if len(axes) > 1 else axes
        lines = axes[1] if len(axes) > 1 else None
    return [Plot(kind="line", x=axes[0], y=m, lines=lines) for m in spec.metrics if m in df.columns]


def draw_all(spec: SweepSpec, df: "pd.DataFrame", out: Path) -> list[Path]:
    plot_dir = out / "plots"
    written = []
    for p in spec.plots or default_plots(spec, df):
        written.append(_DRAW[p.kind](df, p, f"{spec.name}: {p.metric}", plot_dir / p.filename()))
    return written

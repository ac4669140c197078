"""Sweep plots: a metric over one axis (one line per value of another), a
heatmap over two axes, and the Pareto front of two metrics. Every plot marks
its best point with a star: the best value of the plotted metric for line and
heatmap, and for a Pareto front the front point closest to the ideal corner
after scaling both metrics to [0, 1] (the knee of the trade-off).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sim.apps.axes import Axis, factor_axes, is_number, num
from sim.core.errors import ConfigError
from sim.apps.mpl import pyplot
from sim.apps.plots import _save, thin_labels
from sim.apps.sweep.energy import best_per, best_row, busy_rows, cell_tables
from sim.apps.sweep.expr import compile_expr
from sim.apps.sweep.labels import axis_for, fmt_value, label as _label
from sim.apps.sweep.legend import (MARKERS, axis_order, failure_kinds, line_groups, mark_failed, no_values, title_for,
                                   two_way_legend)
from sim.apps.sweep.names import missing_reason
from sim.apps.sweep.spec import Plot, SweepSpec, default_goal

if TYPE_CHECKING:
    import pandas as pd

_STAR = dict(marker="*", s=260, color="gold", edgecolor="black", linewidths=0.8, zorder=5)


def _axis(data: "pd.DataFrame", col: str) -> Axis:
    return axis_for(col, data[col].tolist())


def _scaled(ax: Axis, values: "pd.Series"):
    """Numbers in the axis' unit; anything else (presets, formats) as it is."""
    numeric = all(is_number(v) for v in values)
    return ax(values) if numeric else list(values)


# Series whose every point is within this fraction of another's draw on top of each other.
COINCIDENT_RTOL = 0.005


def _twin(drawn: list[tuple], x, y) -> str | None:
    """The name of an earlier series whose points this one would hide."""
    for px, py, name in drawn:
        if len(px) == len(x) and list(px) == list(x) and np.allclose(py, y, rtol=COINCIDENT_RTOL, atol=0.0):
            return name
    return None


def _ok(df: "pd.DataFrame", cols: list[str], where: str, p: Plot | None = None,
        may_lack: tuple[str, ...] = ()) -> "pd.DataFrame":
    """The finished rows with every column the plot needs, after its `where` filter; a row may lack a value
    (NaN) of the columns `may_lack` only."""
    for c in [*cols, *may_lack]:
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


def _failed(df: "pd.DataFrame", p: Plot, where: str) -> "pd.DataFrame":
    """The points that did not run (out of memory, an error), after the plot's `where`
    filter: a plot marks them instead of leaving a silent gap."""
    if "status" not in df.columns:
        return df.iloc[0:0]
    bad = df[df["status"] != "ok"]
    if p.where and len(bad):
        expr = compile_expr(p.where, f"{where}: where")
        bad = bad[[bool(expr(_row_lookup(row, where))) for row in bad.to_dict("records")]]
    return bad


# With two line columns, the first's values take these line styles (and MARKERS), the last's the colours.
STYLES = ["-", "--", ":", "-."]


def _style(i: int, values: tuple, first: list, last: list) -> dict:
    """Series `i`'s colour (and with two line columns, line style and marker: two_way_legend), so e.g. PIM on/off at
    the same context length share a colour; line style and marker together tell up to 32 values apart."""
    if not first:
        return dict(color=f"C{i % 10}")
    j = first.index(values[0])
    return dict(color=f"C{last.index(values[-1]) % 10}", linestyle=STYLES[j % 4], marker=MARKERS[j % len(MARKERS)])


def varying(data: "pd.DataFrame", axes: list[str], skip: tuple[str, ...] = ()) -> list[str]:
    """The sweep's `axes` with more than one value among `data`'s rows, `skip` left out: what a plot must name."""
    return [a for a in axes if a in data.columns and a not in skip and data[a].nunique() > 1]


def _best_at_each_x(g: "pd.DataFrame", p: Plot, goal: str, axes: list[str]) -> tuple["pd.DataFrame", str]:
    """An axis outside `lines` that varies too gives several points at one x: drawn in turn they zigzag, so the
    line keeps the best of them at each x, and its label says so, naming the axes it took the best over (`axes`:
    the sweep's; "" where there was one point at each x)."""
    if not g[p.x].duplicated().any():
        return g.sort_values(p.x), ""
    over = varying(g, axes, (p.x, *p.line_columns))
    first = ", board-power rows first" if busy_rows(g, [p.y]) is not None else ""   # sim.apps.sweep.energy.best_per
    g = best_per(g, [p.x], p.y, goal)
    return g.sort_values(p.x), f"{goal} over {', '.join(map(_label, over)) if over else 'the points'} at each x{first}"


def line(df: "pd.DataFrame", p: Plot, title: str, path: Path) -> Path:
    plt = pyplot()
    goal = p.goal or default_goal(p.y)
    cols = p.line_columns
    # every line's rows, with or without a value of y: a line with none is named, not dropped (no_values)
    rows = _ok(df, [p.x] + cols, f"plots: {p.kind} {p.y}", p, may_lack=(p.y,))
    data = rows.dropna(subset=[p.y])
    failed = _failed(df, p, f"plots: {p.kind} {p.y}")
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    groups = line_groups(rows, cols)
    busy = busy_rows(data, [p.y])   # an energy figure over rows of both energy models: the busy-time lines hollow
    first = axis_order(rows[cols[0]]) if len(cols) > 1 else []
    last = axis_order(rows[cols[-1]]) if len(cols) > 1 else []
    ax_x, ax_y = _axis(rows, p.x), _axis(data, p.y)
    drawn: list[tuple] = []
    colour_of: dict[tuple, str] = {}
    twins = False
    for i, (values, g) in enumerate(groups):
        values = values if isinstance(values, tuple) else (values,)
        lbl = ", ".join(f"{_label(c)} = {fmt_value(c, v)}" for c, v in zip(cols, values)) or None
        short = ", ".join(fmt_value(c, v) for c, v in zip(cols, values))
        style = _style(i, values, first, last)
        colour_of[values] = style["color"]   # the line's failed points take it, with or without values
        if g[p.y].isna().all():
            no_values(ax, lbl or "", _label(p.y), missing_reason(p.y, g), style)
            continue
        if busy is not None and bool(busy.reindex(g.index, fill_value=False).all()):   # an architecture trial
            style.update(markerfacecolor="none")
            lbl = f"{lbl or _label(p.y)} (hollow: busy-time power only, not comparable: docs/energy.md)"
        g, best = _best_at_each_x(g.dropna(subset=[p.y]), p, goal, df.attrs.get("axes", []))
        if best:
            lbl = f"{lbl or _label(p.y)}: {best}"
        x, y = _scaled(ax_x, g[p.x]), ax_y(g[p.y])
        twin = _twin(drawn, x, y)
        if twin is not None:  # dashed over the series it coincides with, so both stay visible
            style.update(linestyle=(0, (3, 3)), lw=2.2, marker="x")
            lbl = f"{lbl} (dashed: within {100 * COINCIDENT_RTOL:g}% of {twin})"
            twins = True
        style.setdefault("marker", "o")
        ax.plot(x, y, ms=4 if twin is None else 7, label=lbl if len(cols) < 2 else None, **style)
        drawn.append((x, y, short))
    if len(data):
        b, among = best_row(data, p.y, goal)
        ax.scatter(_scaled(ax_x, [b[p.x]]), ax_y([b[p.y]]),
                   label=f"best{among} ({goal} {ax_y.name} = {ax_y.show(b[p.y])})", **_STAR)
    if not failed.empty and p.x in failed.columns:
        mark_failed(ax, failed, _scaled(ax_x, failed[p.x]), cols, colour_of)
    if len(cols) > 1:
        two_way_legend(ax, cols, first, last, STYLES,
                       f"x, dashed: within {100 * COINCIDENT_RTOL:g}% of an earlier line" if twins else None)
    return _finish_xy(fig, ax, p, title, path, ax_x.label, ax_y.label, legend=len(cols) < 2)


def heatmap(df: "pd.DataFrame", p: Plot, title: str, path: Path) -> Path:
    plt = pyplot()
    goal = p.goal or default_goal(p.z)
    data = _ok(df, [p.x, p.y, p.z], f"plots: heatmap {p.z}", p)
    # Several points per cell (a third axis) are reduced to the best one, and the title says over which axes; the
    # star ranks the board-power cells where the rows mix the energy models (sim.apps.sweep.energy.cell_tables).
    table, ranked, among = cell_tables(data, p.y, p.x, p.z, goal)
    over = varying(data, df.attrs.get("axes", []), (p.x, p.y))
    if over:
        title += f"\neach cell the {goal} over {', '.join(_label(a) for a in over)}{among and ', board-power rows first'}"
    table = table.reindex(index=axis_order(data[p.y]), columns=axis_order(data[p.x]))
    ax_z = _axis(data, p.z)
    arr, arr_rank = (ax_z(t.to_numpy(dtype=float)) for t in (table, ranked.reindex_like(table)))
    fig, ax = plt.subplots(figsize=(7, 5))
    im = ax.imshow(arr, origin="lower", aspect="auto", cmap="viridis")
    fig.colorbar(im, ax=ax, label=ax_z.label)
    ax.set_xticks(range(len(table.columns)), [fmt_value(p.x, v) for v in table.columns], rotation=45, fontsize=7)
    ax.set_yticks(range(len(table.index)), [fmt_value(p.y, v) for v in table.index], fontsize=7)
    for (i, j), v in np.ndenumerate(arr):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=6,
                    color="black" if im.norm(v) > 0.6 else "white")  # readable on viridis' yellow end
    failed = _failed(df, p, f"plots: heatmap {p.z}")
    for r in failed.to_dict("records"):   # a cell with no value says why, instead of staying blank
        if r.get(p.x) in list(table.columns) and r.get(p.y) in list(table.index):
            i, j = list(table.index).index(r[p.y]), list(table.columns).index(r[p.x])
            if not np.isfinite(arr[i, j]):
                why = "out of\nmemory" if str(r.get("error", "")).startswith("CapacityError") else "failed"
                ax.text(j, i, why, ha="center", va="center", fontsize=6, color="dimgray")
    if np.isfinite(arr_rank).any():
        flat = np.nanargmin(arr_rank) if goal == "min" else np.nanargmax(arr_rank)
        i, j = np.unravel_index(flat, arr.shape)
        # In the cell's corner, so the cell's value stays readable.
        ax.scatter([j - 0.32], [i + 0.3], **{**_STAR, "s": 160})
        # The legend would cover cells; the best point goes in the title.
        title += (f"\n★ best{among} ({goal} {ax_z.name} = {num(arr[i, j])} {ax_z.unit}) at {_label(p.x)} = "
                  f"{fmt_value(p.x, table.columns[j])}, {_label(p.y)} = {fmt_value(p.y, table.index[i])}")
    ax.set_xlabel(_label(p.x))   # the tick labels carry the units
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
    """The points and their front; where the rows mix the two energy models and a metric is an energy or power
    figure, the busy-time rows are drawn hollow and left off the front, as the best-points table ranks them
    (sim.apps.sweep.energy)."""
    plt = pyplot()
    gx, gy = p.goal_x or default_goal(p.x), p.goal or default_goal(p.y)
    data = _ok(df, [p.x, p.y] + ([p.label] if p.label else []), f"plots: pareto {p.y}", p)
    ax_x, ax_y = _axis(data, p.x), _axis(data, p.y)
    x, y = ax_x(data[p.x]), ax_y(data[p.y])
    busy = busy_rows(data, [p.x, p.y])
    on = np.ones(len(data), dtype=bool) if busy is None else ~busy.to_numpy()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    _cloud(ax, data, x, y, p.label, on)
    f, labels = np.array([], dtype=int), []
    if on.any():
        f = np.flatnonzero(on)[pareto_front(x[on], y[on], gx, gy)]
        ax.plot(x[f], y[f], "o-", color="black", ms=4, lw=1.2, label="Pareto front")  # black: not a label colour
        # Knee: nearest to the ideal corner with both metrics scaled to [0, 1], better = 0.
        def scaled(v: np.ndarray, goal: str) -> np.ndarray:
            span = v[on].max() - v[on].min()
            s = (v - v[on].min()) / span if span else np.zeros_like(v)
            return s if goal == "min" else 1 - s
        dist = np.hypot(scaled(x, gx)[f], scaled(y, gy)[f])
        k = f[int(np.argmin(dist))]
        # the point's own axis values, where they vary: a hw label alone hid a scaled, int4 a6000 (a user trial)
        where = ", ".join(f"{_label(a)} {fmt_value(a, data[a].iloc[k])}" for a in varying(data, df.attrs.get("axes", [])))
        ax.scatter([x[k]], [y[k]], label=f"best trade-off ({ax_x.name} {num(x[k])} {ax_x.unit}, "
                                         f"{ax_y.name} {num(y[k])} {ax_y.unit})" + (f"\nat {where}" if where else ""),
                   **_STAR)
        labels = [str(data[p.label].iloc[i]) for i in f] if p.label else []
    failed = _failed(df, p, f"plots: pareto {p.y}")
    if len(failed):   # no metrics to place them by: the legend counts them
        ax.scatter([], [], marker="X", color="black", label=f"not run, not shown: {failure_kinds(failed)}")
    return _finish_xy(fig, ax, p, title, path, ax_x.label, ax_y.label, [(x[i], y[i]) for i in f], labels)


def _cloud(ax, data: "pd.DataFrame", x: np.ndarray, y: np.ndarray, label: str | None, on: np.ndarray) -> None:
    """A Pareto plot's points, coloured by the `label` column (so the cloud reads too, not only the front); those off
    the front's comparison (`on` false: busy-time power rows) hollow, with a legend entry saying why."""
    groups = [(f"{_label(label)} = {fmt_value(label, v)}", (data[label] == v).to_numpy())
              for v in axis_order(data[label])] if label else [("points", np.ones(len(data), dtype=bool))]
    for i, (name, sel) in enumerate(groups):
        colour = f"C{i % 10}" if label else "tab:gray"
        filled = (sel & on).any()   # the legend entry is the group's filled marker, hollow where it has none
        if filled:
            ax.scatter(x[sel & on], y[sel & on], s=14, alpha=0.5 if label else 0.4, color=colour, label=name)
        if (sel & ~on).any():
            ax.scatter(x[sel & ~on], y[sel & ~on], s=18, facecolors="none", edgecolors=colour, linewidths=1.0,
                       label=None if filled else name)
    if not on.all():
        ax.scatter([], [], s=18, facecolors="none", edgecolors="gray", linewidths=1.0,
                   label="hollow: busy-time power only (energy_board_model 0): off the front (docs/energy.md)")


def _finish_xy(fig, ax, p, title: str, path: Path, xlabel: str, ylabel: str,
               at: list[tuple] = (), labels: list[str] = (), legend: bool = True) -> Path:
    """Axes, scales, title, grid and legend shared by the line and Pareto plots."""
    from matplotlib import ticker
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    # Only a log scale is set: setting "linear" on a categorical axis (labelled mappings, presets)
    # would replace its category ticks with numbers.
    if p.logx:
        ax.set_xscale("log")
    if p.logy:
        ax.set_yscale("log")
    for axis, log in ((ax.xaxis, p.logx), (ax.yaxis, p.logy)):
        if log:  # "20", "30" rather than 2 x 10^1 on an axis spanning less than a decade
            axis.set_major_formatter(ticker.LogFormatter(labelOnlyBase=False))
            axis.set_minor_formatter(ticker.LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    if legend:
        ax.legend(fontsize=7, handlelength=3)
    # Point labels last, on the final axes: those that would overlap another are dropped.
    texts = [ax.annotate(t, xy, xytext=(4, 3), fontsize=7, textcoords="offset points") for t, xy in zip(labels, at)]
    thin_labels(fig, ax, texts, avoid=(ax.get_legend(),))
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


def _flat(value: dict, prefix: str = "") -> dict[str, object]:
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    out: dict[str, object] = {}
    for k, v in value.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def compact_labels(values: list) -> list:
    """Mapping values (a swept `serving.scheduler: [{kind: vllm, ...}, ...]`) as short labels: `key=value`
    of the keys whose values differ among them (all keys when none differs); lists as JSON; anything else
    as it is. Mappings and lists cannot be grouped, sorted or used as legend entries as they are."""
    flats = [_flat(v) if isinstance(v, dict) else None for v in values]
    keys = list(dict.fromkeys(k for f in flats if f is not None for k in f))
    seen = {k: {json.dumps(f.get(k), sort_keys=True, default=str) for f in flats if f is not None} for k in keys}
    varying = [k for k in keys if len(seen[k]) > 1] or keys
    out = []
    for v, f in zip(values, flats):
        if f is not None:
            out.append(", ".join(f"{k}={fmt_value(k, f[k])}" for k in varying if k in f) or "{}")
        else:
            out.append(json.dumps(v, default=str) if isinstance(v, list) else v)
    return out


def labelled(df: "pd.DataFrame") -> "pd.DataFrame":
    """`df` with every column holding mappings or lists turned into compact_labels."""
    df = df.copy()
    for col in df.columns:
        if df[col].dtype == object and df[col].map(lambda v: isinstance(v, (dict, list))).any():
            df[col] = compact_labels(list(df[col]))
    return df


def kv_usage_timeline(df: "pd.DataFrame", series: dict[str, dict], axes: list[str], title: str,
                      path: Path) -> Path | None:
    """Serving points: the share of the KV pool in use over time, one line per point, labelled by the
    axes that differ between points. None when no point stored a timeline."""
    rows = [r for r in df.to_dict("records") if r.get("status", "ok") == "ok" and "kv_usage" in
            series.get(r.get("key"), {})]
    if not rows:
        return None
    plt = pyplot()
    varying = [a for a in axes if a in df.columns and len({str(r[a]) for r in rows}) > 1]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, r in enumerate(rows):
        kv = series[r["key"]]["kv_usage"]
        label = ", ".join(f"{_label(a)} = {fmt_value(a, r[a])}" for a in varying) or f"point {r.get('point', i)}"
        ax.plot(kv["t_s"], 100 * np.asarray(kv["kv_share"]), color=f"C{i % 10}", lw=1.2,
                linestyle=("-", "--", ":", "-.")[i // 10 % 4], label=label)
    ax.set(xlabel="time (s)", ylabel="KV blocks in use (% of the pool)", title=title)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def draw_all(spec: SweepSpec, df: "pd.DataFrame", out: Path, series: dict[str, dict] | None = None) -> list[Path]:
    """The spec's plots (or the default ones) and, for serving points, the KV-usage timeline."""
    plot_dir = out / "plots"
    written = []
    df = labelled(df)
    df.attrs["axes"] = list(spec.axes)   # a line that keeps the best of several points at one x names them
    with factor_axes(spec.scaled_axes()):   # a scale: axis is labelled as factors, not in the field's unit
        for p in spec.plots or default_plots(spec, df):
            written.append(_DRAW[p.kind](df, p, title_for(spec.name, p, list(df.columns)), plot_dir / p.filename()))
    kv = kv_usage_timeline(df, series or {}, list(spec.axes), f"{spec.name}: KV-cache usage over time",
                           plot_dir / "kv_usage_timeline.png")
    return written + ([kv] if kv else [])

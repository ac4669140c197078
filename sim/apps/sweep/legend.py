"""What a sweep plot says besides its data: the title (both metrics and the `where` filter),
a legend that explains colour and line style at once, and the points that did not run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.apps.sweep.labels import fmt_value, label as _label

if TYPE_CHECKING:
    import pandas as pd

    from sim.apps.sweep.spec import Plot


def axis_order(values: "pd.Series") -> list:
    """Numbers ascending; anything else (presets, formats) in the order the spec lists them."""
    uniq = list(dict.fromkeys(values))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in uniq):
        return sorted(uniq)
    return uniq


def line_groups(rows: "pd.DataFrame", cols: list[str]) -> list[tuple]:
    """A line plot's (values, rows) per line, in axis_order of the line column, so a value keeps the colour the
    other plots of the sweep give it (an architecture trial: the line plot had sorted the formats by name, int4
    green there and purple in the Pareto plot); with two line columns the colours are the last column's own."""
    if not cols:
        return [((), rows)]
    groups = list(rows.groupby(cols, sort=True))
    rank = {v: i for i, v in enumerate(axis_order(rows[cols[0]]))}
    return sorted(groups, key=lambda vg: rank.get(vg[0][0] if isinstance(vg[0], tuple) else vg[0], len(rank)))


def failure_kinds(rows: "pd.DataFrame") -> str:
    """"3 out of memory (CapacityError), 1 ConfigError": why the points failed, counted."""
    kinds: dict[str, int] = {}
    for err in rows.get("error", []):
        name = str(err).split(":", 1)[0] if isinstance(err, str) and err else "error"
        kinds[name] = kinds.get(name, 0) + 1
    return ", ".join(f"{n} {'out of memory (CapacityError)' if k == 'CapacityError' else k}"
                     for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))


def title_for(name: str, p: Plot, columns: list[str]) -> str:
    """"sweep: TPOT vs batch", the kind's wording, and the `where` filter in the plot's own names."""
    if p.kind == "heatmap":
        head = f"{name}: {_label(p.metric)} over {_label(p.x)} and {_label(p.y)}"
    else:
        head = f"{name}: {_label(p.y)} vs {_label(p.x)}" + (" (Pareto front)" if p.kind == "pareto" else "")
    if p.where:
        where = p.where
        for col in sorted(columns, key=len, reverse=True):   # longest first: workload.batch before batch
            if isinstance(col, str) and "." in col and col in where:
                where = where.replace(col, _label(col))
        head += f"\nonly where {where}"
    return head


def mark_failed(ax, failed: "pd.DataFrame", x: list, cols: list[str], colour_of: dict) -> None:
    """A cross at the top edge, at each failed point's x (`x`, in the axis' unit), in its line's colour."""
    if failed.empty:
        return
    colours = [colour_of.get(tuple(r[c] for c in cols), "black") if cols else "black"
               for r in failed.to_dict("records")]
    seen: dict[str, int] = {}
    heights = []
    for v in x:   # several failed lines at one x stack downwards instead of hiding each other
        heights.append(0.97 - 0.045 * seen.get(str(v), 0))
        seen[str(v)] = seen.get(str(v), 0) + 1
    ax.scatter(x, heights, transform=ax.get_xaxis_transform(), marker="X", s=55,
               c=colours, edgecolors="black", linewidths=0.5, zorder=6, clip_on=False,
               label=f"not run: {failure_kinds(failed)} (at the top, its line's colour)")
    # The blended transform leaves the x-limits to the points that ran: failed batches past the last one sat off the
    # right edge, where the legend said they were drawn (a newcomer's trial). The limits take them in.
    numeric = [float(v) for v in x if isinstance(v, (int, float)) and v == v]
    if numeric:
        ax.update_datalim([(v, 0.0) for v in numeric], updatey=False)
        ax.autoscale_view(scaley=False)


def no_values(ax, line: str, metric: str, why: str, style: dict) -> None:
    """A legend entry, in its colour, for a line whose points ran but hold no value of the metric (a preset without
    the board-power model has no decode J/token): it was dropped without a word, while its failed points were drawn
    in a colour no legend entry had. `line` names it ("hardware = a6000"; "" for the plot's only line)."""
    ax.plot([], [], linestyle="none", marker=style.get("marker", "o"), mfc="none", color=style["color"],
            label=f"{line + ': ' if line else ''}no {metric} ({why})")


# The first line axis's values: a line style and a marker each (4 styles alone told 4 apart: a6000 and groq_lpu both
# solid in an architect's sweep over 7 presets)
MARKERS = ("o", "s", "^", "D", "v", "P", "*", "h")


def two_way_legend(ax, cols: list[str], first: list, last: list, styles: list[str], twins: str | None) -> None:
    """One legend that says what colour means and what line style means, then the markers."""
    from matplotlib.lines import Line2D

    def header(text: str):
        return Line2D([], [], linestyle="none", label=text)

    handles = [header(f"colour: {_label(cols[-1])}")]
    handles += [Line2D([], [], color=f"C{i % 10}", marker="o", ms=4, lw=2, label=fmt_value(cols[-1], v))
                for i, v in enumerate(last)]
    handles.append(header(f"line style: {_label(cols[0])}"))
    handles += [Line2D([], [], color="black", linestyle=styles[i % 4], marker=MARKERS[i % len(MARKERS)], ms=4, lw=1.5,
                       label=fmt_value(cols[0], v)) for i, v in enumerate(first)]
    if twins:   # the coincident-series note (`twins`: its wording)
        handles.append(Line2D([], [], color="gray", linestyle=(0, (3, 3)), marker="x", lw=2.2, label=twins))
    others, labels = ax.get_legend_handles_labels()
    handles += [h for h, lbl in zip(others, labels) if lbl and not lbl.startswith("_")]
    if len(handles) > 10:   # more than the plot can hold beside its lines: outside, to the right
        ax.legend(handles=handles, fontsize=7, handlelength=3.2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(handles=handles, fontsize=7, handlelength=3.2, loc="best")

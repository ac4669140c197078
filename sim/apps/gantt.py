"""Gantt timeline of one step: one row per resource, one bar per op or transfer.

A 40-layer step drawn whole is a barcode, so a second panel zooms on a few
layers (the first two unless `layers` says otherwise), where the overlap of host
and PIM, of PCIe and compute, or of chips in a pipeline can be seen. Time is shown
in s, ms or µs as the span suggests. Above MAX_ROWS resources, numbered ones
(chip0, chip1, ...) share one row per family."""

from __future__ import annotations

import re
from pathlib import Path

from hw_models.gpu.stage_ops import split_stage
from sim.apps.axes import time_axis
from sim.apps.mpl import pyplot
from sim.apps.plots import _save
from sim.core.errors import ConfigError
from sim.core.results import OpRecord, layer_of

KIND_COLORS = {"gemm": "tab:blue", "attn_score": "tab:orange", "attn_context": "tab:orange",
               "attention": "tab:orange", "softmax": "tab:red", "norm": "tab:green",
               "elementwise": "tab:olive", "rope": "tab:purple", "kv_append": "tab:brown",
               "embed": "tab:gray", "compute": "tab:blue", "transfer": "tab:cyan"}
OTHER_COLOR = "black"   # kinds without a colour of their own: collectives (all_to_all), a plugin's tags
MAX_ROWS = 24


def parse_layers(text: str | None, plots: str | None) -> tuple[int, int] | None:
    """`--gantt-layers 0-1` (or `3`): the first and last layer of the zoom panel (None: not given). The
    panel is a plot's that `--plots DIR` writes: without it the flag is refused, not ignored."""
    if not text:
        return None
    if plots is None:
        raise ConfigError("--gantt-layers chooses the layers of the Gantt plot that --plots DIR writes; "
                          "add --plots DIR")
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+))?\s*", text)
    if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
        raise ConfigError(f"--gantt-layers {text!r}: expected FIRST-LAST layer numbers, e.g. 0-1")
    first = int(m.group(1))
    return first, int(m.group(2)) if m.group(2) is not None else first


def layer_window(ops: list[OpRecord], layers: tuple[int, int]) -> tuple[float, float] | None:
    """The time span of the ops of layers first..last, or None where the step has none."""
    sel = [o for o in ops if (k := _zoom_layer(o.name)) is not None and layers[0] <= k <= layers[1]]
    return (min(o.start_s for o in sel), max(o.end_s for o in sel)) if sel else None


def _zoom_layer(name: str) -> int | None:
    """The layer of an op record (L3.q_proj), a pipelined step's only in its first micro-batch (mb0.stage0.L3.q_proj:
    the zoom shows that one's layers, not every micro-batch's, which spans the whole stage)."""
    mb, op = split_stage(name)
    return layer_of(op) if mb in (None, 0) else None


def rows(ops: list[OpRecord]) -> dict[str, str]:
    """Each resource's row label: itself, or above MAX_ROWS its family ("chip (139)")."""
    units = list(dict.fromkeys(o.unit for o in ops))
    if len(units) <= MAX_ROWS:
        return {u: u for u in units}
    family = {u: re.sub(r"\d+$", "", u) or u for u in units}
    size = {f: list(family.values()).count(f) for f in family.values()}
    return {u: f"{f} ({size[f]})" if size[f] > 1 else f for u, f in family.items()}


def _panel(ax, ops: list[OpRecord], span: tuple[float, float], subtitle: str) -> None:
    row_of = rows(ops)
    labels = list(dict.fromkeys(row_of.values()))
    t = time_axis("time from the step's start", [span[1]])
    for i, row in enumerate(labels):
        mine = [o for o in ops if row_of[o.unit] == row]
        ax.broken_barh([(o.start_s * t.scale, o.duration_s * t.scale) for o in mine], (i - 0.4, 0.8),
                       facecolors=[KIND_COLORS.get(o.kind, OTHER_COLOR) for o in mine], edgecolor="white", linewidth=0.2)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlim(span[0] * t.scale, span[1] * t.scale)
    ax.set_xlabel(t.label)
    ax.set_title(subtitle, fontsize=9, loc="left")


def gantt(ops: list[OpRecord], title: str, path: Path, layers: tuple[int, int] | None = None) -> Path:
    """The whole step, and below it a zoom on `layers` (default the first two, when
    the step has more than two). `layers` naming layers the step lacks is an error."""
    plt = pyplot()
    end = max((o.end_s for o in ops), default=0.0)
    window = layer_window(ops, layers or (0, 1))
    if layers is not None and window is None:
        raise ConfigError(f"--gantt-layers {layers[0]}-{layers[1]}: the step has no ops of those layers")
    zoom = window is not None and (layers is not None or window[1] - window[0] < 0.8 * end)
    panels = [(ops, (0.0, end), "whole step")]
    if zoom:
        a, b = layers or (0, 1)
        inside = [o for o in ops if o.end_s > window[0] and o.start_s < window[1]]
        panels.append((inside, window, f"zoom: layer{'s' if b > a else ''} {a}{f'-{b}' if b > a else ''}"))
    heights = [len(set(rows(p[0]).values())) * 0.32 + 0.9 for p in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, sum(heights) + 0.6), squeeze=False,
                             gridspec_kw=dict(height_ratios=heights))
    for ax, (sel, span, subtitle) in zip(axes[:, 0], panels):
        _panel(ax, sel, span, subtitle)
    fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    kinds = [k for k in KIND_COLORS if any(o.kind == k for o in ops)]
    # Kinds without a colour of their own (link transfers, collectives, a plugin's tags) are the
    # black bars: one legend entry that names them, so no bar goes unexplained.
    others = sorted({o.kind for o in ops if o.kind not in KIND_COLORS})
    handles = [plt.Rectangle((0, 0), 1, 1, color=KIND_COLORS[k]) for k in kinds]
    names = list(kinds)
    if others:
        handles.append(plt.Rectangle((0, 0), 1, 1, color=OTHER_COLOR))
        names.append(", ".join(others))
    if names:
        fig.legend(handles, names, fontsize=7, loc="upper right", ncol=min(5, len(names)),
                   bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return _save(fig, path)

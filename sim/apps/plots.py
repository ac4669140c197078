"""Plots of one run: a roofline with one roof per unit that ran ops and the ops placed
under them, and a Gantt timeline of a step (sim.apps.gantt).

The roofs come in as plain data (hw_models.base.Roof, from hw_models.roofs), so
nothing here knows a hardware kind. Each point is one op over the span of its
pieces (per PIM stack, per chip slice), coloured by the roof of the unit it ran
on; one op per name, kind and phase is labelled, labels that would overlap are
dropped, and every point (labelled or not) goes to a JSON file beside the PNG.
"""

from __future__ import annotations

from sim.apps.mpl import pyplot

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np  # noqa: E402

from hw_models.base import Roof  # noqa: E402
from sim.apps.axes import decimal_axis  # noqa: E402
from sim.core.files import atomic_write  # noqa: E402
from sim.core.results import OpRecord, RunResult, group_name, merge_pieces  # noqa: E402

_PHASES = (("decode", "o"), ("prefill", "^"))
# Label offsets tried in turn (points right/left of and above/below the point).
_OFFSETS = ((4, 3, "left", "bottom"), (4, -3, "left", "top"), (-4, 3, "right", "bottom"), (-4, -3, "right", "top"))


def _save(fig, path: Path) -> Path:
    plt = pyplot()
    atomic_write(path, lambda p: fig.savefig(p, dpi=110, format="png", bbox_inches="tight"))
    plt.close(fig)
    return path


@dataclass(frozen=True)
class Point:
    name: str               # the op's name shared across layers (q_proj, attn_residual)
    op: str                 # this instance (L3.q_proj)
    kind: str
    phase: str
    unit: str
    roof: int               # index into the roofs drawn
    intensity_flop_per_byte: float
    achieved_flops_per_s: float
    duration_s: float
    labelled: bool = False


def ran_ops(ops: list[OpRecord]) -> list[str]:
    """Units that ran an op (not a link transfer), in order of first use."""
    return list(dict.fromkeys(o.unit for o in ops if o.kind != "transfer"))


def drawn_roofs(result: RunResult, roofs: list[Roof]) -> list[Roof]:
    """The roofs of the units that ran ops in either step."""
    units = ran_ops(result.decode_ops + result.prefill_ops)
    return [r for r in roofs if any(r.covers(u) for u in units)]


def points(result: RunResult, roofs: list[Roof]) -> list[Point]:
    """One point per op (pieces merged) that has FLOPs, bytes and a roof."""
    out = []
    for phase, _ in _PHASES:
        for o in merge_pieces(getattr(result, f"{phase}_ops")):
            roof = next((i for i, r in enumerate(roofs) if r.covers(o.unit)), None)
            if roof is None or not o.flops or not o.bytes or o.duration_s <= 0:
                continue
            out.append(Point(group_name(o), o.name, o.kind, phase, o.unit, roof, o.flops / o.bytes,
                             o.flops / o.duration_s, o.duration_s))
    return out


def _representatives(pts: list[Point]) -> list[int]:
    """Indices of one point per (name, kind, phase, roof): the median-time instance,
    most time-consuming groups first (they keep their labels when space runs out)."""
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(pts):
        groups.setdefault((p.name, p.kind, p.phase, p.roof), []).append(i)
    ranked = sorted(groups.values(), key=lambda idx: -sum(pts[i].duration_s for i in idx))
    return [sorted(idx, key=lambda i: pts[i].duration_s)[len(idx) // 2] for idx in ranked]


def thin_labels(fig, ax, texts: list, avoid: tuple = ()) -> list[bool]:
    """Place each label (in priority order) at the first offset where it overlaps no
    placed label nor an `avoid` artist (a legend) and stays inside the axes; remove
    it where there is none."""
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    placed = [a.get_window_extent(renderer) for a in avoid if a is not None]
    kept = []
    for t in texts:
        for dx, dy, ha, va in _OFFSETS:
            t.xyann = (dx, dy)
            t.set_ha(ha)
            t.set_va(va)
            box = t.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(b) for b in placed):
                placed.append(box)
                kept.append(True)
                break
        else:
            t.remove()
            kept.append(False)
    return kept


def _draw_roofs(ax, roofs: list[Roof], x: np.ndarray, scale: float) -> list[str]:
    """Roof lines; a unit's further roofs are dashed in its colour. Returns each roof's colour."""
    colors, seen = [], {}
    for r in roofs:
        color = seen.setdefault(r.unit, f"C{len(seen) % 10}")
        first = sum(1 for c in colors if c == color) == 0
        colors.append(color)
        y = np.minimum(r.peak_flops_per_s, x * r.bandwidth_bytes_per_s) * scale
        ax.plot(x, y, color=color, lw=1.6 if first else 1.2, ls="-" if first else "--", label=r.label)
    return colors


def roofline(result: RunResult, roofs: list[Roof], path: Path) -> Path:
    """Achieved FLOP/s of each op of the representative decode step and the prefill
    against arithmetic intensity, under the roofs of the units that ran them."""
    plt = pyplot()
    roofs = drawn_roofs(result, roofs)
    pts = points(result, roofs)
    fig, ax = plt.subplots(figsize=(8, 5))
    knees = [r.knee_flop_per_byte for r in roofs]
    xs = [p.intensity_flop_per_byte for p in pts] + knees + [min(knees, default=1.0) / 30] or [1.0]
    x = np.logspace(np.log10(min(xs) / 4), np.log10(max(xs) * 4), 200)
    ys = [p.achieved_flops_per_s for p in pts] + [r.peak_flops_per_s for r in roofs] or [1.0]
    ys += [min(ys) if pts else min(ys) / 100]
    yax = decimal_axis("achieved", ys, "FLOP/s", floor=1e9)
    colors = _draw_roofs(ax, roofs, x, yax.scale)
    for phase, marker in _PHASES:
        sel = [p for p in pts if p.phase == phase]
        ax.scatter([p.intensity_flop_per_byte for p in sel], yax([p.achieved_flops_per_s for p in sel]),
                   marker=marker, s=22, c=[colors[p.roof] for p in sel], alpha=0.75, edgecolors="none")
        ax.scatter([], [], marker=marker, color="0.3", label=f"{phase} ops (colour: the unit's roof)")
    ax.set(xscale="log", yscale="log", xlim=(x[0], x[-1]), ylim=(min(ys) * yax.scale / 4, max(ys) * yax.scale * 3),
           xlabel="arithmetic intensity (FLOP/byte)", ylabel=yax.label)
    ax.set_title(f"{result.model['name']} on {result.hardware}: decode step (kv_len {result.decode_kv_len}) "
                 f"and prefill", fontsize=10)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.13), ncol=2, frameon=False)
    if not pts:
        ax.text(0.5, 0.5, "no op of these steps has a FLOP count\n(e.g. an offload schedule's whole-layer tasks)",
                transform=ax.transAxes, ha="center", fontsize=9, color="0.3")
    reps = _representatives(pts)
    texts = [ax.annotate(pts[i].name, (pts[i].intensity_flop_per_byte, pts[i].achieved_flops_per_s * yax.scale),
                         xytext=(4, 3), textcoords="offset points", fontsize=6.5, color="0.15") for i in reps]
    labelled = {i for i, kept in zip(reps, thin_labels(fig, ax, texts)) if kept}
    table = dict(roofs=[asdict(r) for r in roofs],
                 points=[{**asdict(p), "labelled": i in labelled} for i, p in enumerate(pts)])
    atomic_write(path.with_suffix(".json"), lambda p: p.write_text(json.dumps(table, indent=1)))
    return _save(fig, path)

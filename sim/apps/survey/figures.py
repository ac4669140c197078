"""The survey's pictures: a roofline with one layer's ops on it, and two generic
shapes (lines over a sweep, grouped bars over configurations), one panel each."""

from __future__ import annotations

from sim.apps.mpl import pyplot

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence


from sim.core.files import atomic_write  # noqa: E402

Series = dict[str, tuple[Sequence[float], Sequence[float | None]]]   # label -> (xs, ys)

# Resolution of the written PNGs. A module constant so tests that only check a picture is
# written and linked can draw it coarser (rasterizing is about half of the survey's save time).
PNG_DPI = 100


@dataclass(frozen=True)
class OpPoint:
    phase: str          # "prefill" or "decode"
    name: str
    intensity: float    # FLOP per byte
    roofline_flops_per_s: float
    simulated_flops_per_s: float


def _save(fig, path: Path) -> Path:
    plt = pyplot()
    atomic_write(path, lambda p: fig.savefig(p, dpi=PNG_DPI, format="png", bbox_inches="tight"))
    plt.close(fig)
    return path


def roofline(points: list[OpPoint], peak_flops_per_s: float, bandwidth_bytes_per_s: float,
             title: str, path: Path) -> Path:
    """Each op at its arithmetic intensity: filled where the pure roofline puts it
    (on the roof), hollow where the preset's model puts it (below)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    knee = peak_flops_per_s / bandwidth_bytes_per_s
    xs = [0.1, knee, 1e5]
    ax.plot(xs, [min(peak_flops_per_s, x * bandwidth_bytes_per_s) for x in xs], "k-", lw=1.2,
            label=f"roof: {bandwidth_bytes_per_s / 1e9:,.0f} GB/s, {peak_flops_per_s / 1e12:,.1f} TFLOP/s")
    ax.axvline(knee, color="0.6", ls=":", lw=1)
    for phase, color in (("prefill", "tab:blue"), ("decode", "tab:red")):
        pts = [p for p in points if p.phase == phase and p.intensity > 0]
        ax.scatter([p.intensity for p in pts], [p.roofline_flops_per_s for p in pts], color=color, s=26,
                   label=f"{phase}: pure roofline")
        ax.scatter([p.intensity for p in pts], [p.simulated_flops_per_s for p in pts], facecolors="none",
                   edgecolors=color, s=26, label=f"{phase}: sim (preset)")
        for p in pts:
            ax.annotate(p.name, (p.intensity, p.roofline_flops_per_s), fontsize=6, alpha=0.75,
                        xytext=(3, 2), textcoords="offset points")
    _label(ax, title, "arithmetic intensity (FLOP/byte)", "attained FLOP/s", logx=True, logy=True)
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, path)


def _label(ax, title: str, xlabel: str, ylabel: str, logx: bool = False, logy: bool = False) -> None:
    """Title, axis labels, log scales (base 2 on x for sweeps of powers of two), a light grid."""
    ax.set_title(title, fontsize=9)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    if logx:
        ax.set_xscale("log", base=2 if "FLOP" not in xlabel else 10)
    if logy:
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.2)


def _panels(n: int, width: float = 4.8):
    plt = pyplot()
    fig, axes = plt.subplots(1, n, figsize=(width * n, 3.6), squeeze=False)
    return fig, list(axes[0])


def lines(panels: dict[str, Series], xlabel: str, ylabel: str, path: Path,
          logx: bool = True, logy: bool = False) -> Path:
    """One panel per key; in each, one line per series (None = does not fit: gap)."""
    fig, axes = _panels(len(panels))
    for ax, (title, series) in zip(axes, panels.items()):
        for label, (xs, ys) in series.items():
            dashed = "roofline" in label
            ax.plot(xs, [math.nan if y is None else y for y in ys], ls="--" if dashed else "-", marker="o",
                    ms=3, lw=1.2, label=label)
        _label(ax, title, xlabel, ylabel, logx, logy)
        ax.legend(fontsize=6)
    return _save(fig, path)


def bars(panels: dict[str, dict[str, Sequence[float | None]]], categories: Sequence[str], ylabel: str,
         path: Path, logy: bool = False) -> Path:
    """One panel per key; categories along x, one bar per series in each group."""
    fig, axes = _panels(len(panels), width=max(4.8, 0.75 * len(categories)))
    for ax, (title, series) in zip(axes, panels.items()):
        width = 0.8 / max(len(series), 1)
        for i, (label, ys) in enumerate(series.items()):
            xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(categories))]
            ax.bar(xs, [0 if y is None else y for y in ys], width, label=label, hatch="//" if "roofline" in label else None,
                   alpha=0.85)
        ax.set_xticks(range(len(categories)), categories, rotation=30, ha="right", fontsize=7)
        _label(ax, title, "", ylabel, logy=logy)
        ax.legend(fontsize=6)
    return _save(fig, path)

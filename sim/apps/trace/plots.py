"""Log-log scatter of simulated vs measured op times."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from sim.apps.mpl import pyplot
from sim.apps.plots import _save
from sim.apps.trace.validate import OpRow


def scatter(rows: Sequence[OpRow], title: str, path: str | Path, extra: dict[str, Sequence[OpRow]] | None = None) -> Path:
    plt = pyplot()
    path = Path(path)
    series = {"": rows} if extra is None else extra
    fig, ax = plt.subplots(figsize=(5.5, 5))
    lo, hi = float("inf"), 0.0
    markers = "os^vD<>p*h"
    for si, (label, rs) in enumerate(series.items()):
        kinds = sorted({r.kind for r in rs})
        for ki, kind in enumerate(kinds):
            xs = [r.measured_s * 1e6 for r in rs if r.kind == kind]
            ys = [r.simulated_s * 1e6 for r in rs if r.kind == kind]
            ax.scatter(xs, ys, s=14, alpha=0.7, marker=markers[si % len(markers)],
                       color=f"C{ki}", label=f"{label} {kind}".strip())
            lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="y = x")
    ax.plot([lo, hi], [lo * 1.1, hi * 1.1], "k:", lw=0.6)
    ax.plot([lo, hi], [lo / 1.1, hi / 1.1], "k:", lw=0.6, label="±10%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured (µs)")
    ax.set_ylabel("simulated (µs)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return _save(fig, path)  # atomic, and staged inside an outputs transaction

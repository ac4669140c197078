"""The plots of `sim validate-serving` (--plot, --plots DIR): simulated against measured means, and the signed
errors by the runs' concurrency, written with the command's other outputs (sim.core.files.atomic_write)."""

from __future__ import annotations

from pathlib import Path

from sim.apps.mpl import pyplot
from sim.apps.serve.validate import Result
from sim.core.files import atomic_write


def scatter(results: list[Result], path) -> None:
    """Simulated against measured mean TTFT and TPOT, one colour per engine, log axes, y = x drawn."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ax, metric, label in zip(axes, ("ttft_s", "tpot_s"), ("TTFT", "TPOT")):
        for eng in sorted({r.run.engine for r in results}):
            rs = [r for r in results if r.run.engine == eng]
            ax.scatter([r.run.measured[metric] * 1e3 for r in rs], [r.sim[metric] * 1e3 for r in rs], s=10, label=eng)
        lo = min(min(r.run.measured[metric], r.sim[metric]) for r in results) * 1e3
        hi = max(max(r.run.measured[metric], r.sim[metric]) for r in results) * 1e3
        lo, hi = (lo / 1.5, hi * 1.5) if hi < 1.5 * lo else (lo, hi)   # one run: a span of 2.25x, not 9.1 to 9.12
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel=f"measured {label} (ms)", ylabel=f"simulated {label} (ms)")
        ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, format=Path(path).suffix.lstrip(".").lower() or "png"))
    plt.close(fig)


def error_plot(results: list[Result], path, by: str = "concurrency") -> None:
    """Signed TTFT and TPOT errors against the runs' load, one colour per engine: the closed-loop runs' clients
    (`by` "concurrency") or the open-loop runs' requests/s ("rate"); where a scheduling behaviour the model lacks
    shows (errors that grow with the load)."""
    closed = by == "concurrency"
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ax, metric, label in zip(axes, ("ttft_s", "tpot_s"), ("TTFT", "TPOT")):
        for eng in sorted({r.run.engine for r in results}):
            rs = [r for r in results if r.run.engine == eng and metric in r.error and (r.run.rate is None) == closed]
            ax.scatter([r.run.concurrency if closed else r.run.rate for r in rs], [r.error[metric] * 100 for r in rs],
                       s=10, label=eng)
        ax.axhline(0, color="k", lw=0.8)
        ax.set(xscale="log", xlabel="concurrency (clients)" if closed else "request rate (requests/s)",
               ylabel=f"{label} error (%)")
        ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, format=Path(path).suffix.lstrip(".").lower() or "png"))
    plt.close(fig)


def write_plots(results: list[Result], folder) -> list:
    """`sim validate-serving --plots DIR`: the scatter (scatter.png) and the errors by the closed-loop runs' clients
    (errors_vs_concurrency.png) and by the open-loop runs' rate (errors_vs_rate.png), each where such runs are, into
    `folder`, created if missing; the paths written. (A rate-driven vLLM log had crashed the clients' log axis.)"""
    folder = Path(folder)   # atomic_write creates it
    out = [folder / "scatter.png"]
    scatter(results, out[0])
    for by, name in (("concurrency", "errors_vs_concurrency.png"), ("rate", "errors_vs_rate.png")):
        if any((r.run.rate is None) == (by == "concurrency") and r.error for r in results):
            error_plot(results, folder / name, by)
            out.append(folder / name)
    return out

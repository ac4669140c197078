"""Plots: a roofline with the ops placed on it, and a Gantt timeline of a step."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from sim.apps.outputs import atomic_write  # noqa: E402
from sim.core.results import OpRecord, RunResult  # noqa: E402

_KIND_COLORS = {"gemm": "tab:blue", "attn_score": "tab:orange", "attn_context": "tab:orange",
                "attention": "tab:orange", "softmax": "tab:red", "norm": "tab:green",
                "elementwise": "tab:olive", "rope": "tab:purple", "kv_append": "tab:brown",
                "embed": "tab:gray", "transfer": "tab:cyan"}


def _save(fig, path: Path) -> Path:
    atomic_write(path, lambda p: fig.savefig(p, dpi=110, format="png", bbox_inches="tight"))
    plt.close(fig)
    return path


def roofline(result: RunResult, peak_flops_per_s: float, bandwidth_bytes_per_s: float, path: Path) -> Path:
    """Achieved FLOP/s of each op of the representative decode step and the
    prefill against arithmetic intensity, under the machine's roof."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    knee = peak_flops_per_s / bandwidth_bytes_per_s
    xs = [1e-2, knee, 1e5]
    ax.plot(xs, [min(peak_flops_per_s, x * bandwidth_bytes_per_s) for x in xs], "k-", lw=1.5, label="roofline")
    for label, ops, marker in (("decode", result.decode_ops, "o"), ("prefill", result.prefill_ops, "^")):
        seen = set()
        for o in ops:
            if not o.flops or not o.bytes or o.duration_s <= 0 or o.base_name in seen:
                continue
            seen.add(o.base_name)
            ax.scatter(o.flops / o.bytes, o.flops / o.duration_s, marker=marker, s=28,
                       color=_KIND_COLORS.get(o.kind, "k"), alpha=0.8)
            ax.annotate(o.base_name, (o.flops / o.bytes, o.flops / o.duration_s), fontsize=6, alpha=0.7)
        ax.scatter([], [], marker=marker, color="k", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(f"{result.model['name']} on {result.hardware}")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.2)
    return _save(fig, path)


def gantt(ops: list[OpRecord], title: str, path: Path) -> Path:
    """One row per resource, one bar per op."""
    resources = list(dict.fromkeys(o.unit for o in ops))
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.5 * len(resources)))
    for row, res in enumerate(resources):
        bars = [(o.start_s * 1e3, o.duration_s * 1e3) for o in ops if o.unit == res]
        colors = [_KIND_COLORS.get(o.kind, "k") for o in ops if o.unit == res]
        ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=colors, edgecolor="white", linewidth=0.2)
    ax.set_yticks(range(len(resources)), resources)
    ax.set_xlabel("time (ms)")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for k, c in _KIND_COLORS.items() if any(o.kind == k for o in ops)]
    labels = [k for k in _KIND_COLORS if any(o.kind == k for o in ops)]
    if labels:  # tasks of other kinds (a plugin's compute/transfer tags) get no legend entry
        ax.legend(handles, labels, fontsize=7, ncol=min(6, len(labels)), loc="upper right")
    return _save(fig, path)

"""What `sim serve` writes: the per-request table (CSV or Parquet), a Chrome trace
(one lane per request, one for the engine's iterations) and plots. Every file is
written to a temporary name and renamed (sim.core.files.atomic_write)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sim.apps.mpl import pyplot
from sim.core.files import atomic_write, write_json, write_parquet
from sim.apps.plots import _save
from sim.apps.serve.energy import power_trace
from sim.apps.serve.simulator import DONE, ServeResult
from sim.apps.serve.metrics import per_request
from sim.apps.serve.request_rows import STATUS, instance_name, request_table  # noqa: F401 (re-exported)
from sim.apps.serve.timeline import binned_mean, binned_range, running_steps, summed_over_instances
from sim.core.errors import ConfigError

def write_requests(path: str | Path, res: ServeResult) -> Path:
    df = request_table(res)
    if str(path) == "-" or Path(path).suffix == ".csv":   # `-`: CSV on stdout (sim.core.files.atomic_write)
        return atomic_write(path, lambda p: df.to_csv(p, index=False))
    if Path(path).suffix == ".parquet":
        return write_parquet(path, df, f"--requests {path}")
    raise ConfigError(f"--requests {path}: expected a .csv or .parquet file name")


def chrome_trace(res: ServeResult) -> dict[str, Any]:
    """Perfetto/Chrome JSON: pid 1 the engine's iterations, pid 2 one lane per request
    (queued, prefill until the first token, between pools the KV transfer's wait and time, decode until the
    last; a mark where it was preempted), pid 3 the power per device."""
    ev: list[dict[str, Any]] = [dict(ph="M", pid=1, name="process_name", args=dict(name="engine iterations")),
                                dict(ph="M", pid=2, name="process_name", args=dict(name="requests"))]
    it = res.iterations
    # Replicas and disaggregated pools run iterations at the same time: one track (tid) per instance.
    instance = it.get("instance", np.zeros(len(it["start_s"]), dtype=np.int64))
    for k in np.unique(instance) if "instance" in it else ():
        name = instance_name(res, int(k))
        ev.append(dict(ph="M", pid=1, tid=int(k) + 1, name="thread_name", args=dict(name=name)))
    for i in range(len(it["start_s"])):
        ev.append(dict(ph="X", pid=1, tid=int(instance[i]) + 1, name=f"iter {i}", ts=it["start_s"][i] * 1e6,
                       dur=it["duration_s"][i] * 1e6, args=dict(seqs=int(it["seqs"][i]), tokens=int(it["tokens"][i]),
                                                               kv_blocks=int(it["kv_blocks_used"][i]))))
    ev.append(dict(ph="M", pid=3, name="process_name", args=dict(name="power")))
    times, watts = power_trace(res)
    ev += [dict(ph="C", pid=3, name="power per device (W)", ts=t * 1e6, args=dict(W=round(float(w), 3)))
           for t, w in zip(times, watts)]
    r = res.requests
    marks: dict[int, list[float]] = {}
    for t, i in res.preempt_log:
        marks.setdefault(int(i), []).append(t)
    for i in np.flatnonzero(r["status"] == DONE):
        first = r["first_token_s"][i]
        # disaggregated pools: the KV waits for the link, crosses it, then the decode pool takes the request
        wait, move = (r["kv_transfer_wait_s"][i], r["kv_transfer_s"][i]) if "kv_transfer_s" in r else (0.0, 0.0)
        wait, move = (0.0 if np.isnan(wait) else wait), (0.0 if np.isnan(move) else move)
        spans = (("queued", r["arrival_s"][i], r["scheduled_s"][i]), ("prefill", r["scheduled_s"][i], first),
                 ("KV transfer wait", first, first + wait), ("KV transfer", first + wait, first + wait + move),
                 ("decode", first + wait + move, r["finish_s"][i]))
        for name, a, b in spans:
            if b > a:   # a span through an eviction says so: its wait and recompute are inside it (marks below)
                n = sum(a <= t < b for t in marks.get(int(i), ()))   # half-open: a mark at a boundary once
                ev.append(dict(ph="X", pid=2, tid=int(i) + 1, name=f"{name} (preempted x{n})" if n else name,
                               ts=a * 1e6, dur=(b - a) * 1e6, args=dict(request=int(i), **({"preempted": n} if n else {}))))
    swapped = {i for i, _, _ in res.swap_log}
    ev += [dict(ph="i", s="t", pid=2, tid=i + 1, name="preempted", ts=t * 1e6,
                args=dict(request=i, mode="swap" if i in swapped else "recompute")) for t, i in res.preempt_log]
    return {"traceEvents": ev, "displayTimeUnit": "ms"}


def write_chrome_trace(path: str | Path, res: ServeResult) -> Path:
    return write_json(path, chrome_trace(res))


def _nothing(ax, why: str) -> None:
    """An empty panel that says why it is empty."""
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, color="0.4")


def _kv_and_batch(res: ServeResult, path: Path, bins: int = 200) -> Path:
    """KV pool in use and batch size over time. Iterations alternate between a prefill of one or two
    sequences and a decode of many, so the raw step function fills the panel solid: each panel
    draws the time-weighted mean per span of makespan / bins, the range of the iterations in it shaded."""
    plt = pyplot()
    it = res.iterations
    fig, ax = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    if not len(it["start_s"]):   # nothing ran (every request rejected): no step function to draw
        for a in ax:
            _nothing(a, "no iteration ran")
        return _save(fig, path)
    several = "instance" in it   # replicas or pools: their counts summed, over their summed pools
    # KV held stays held between an instance's iterations; a batch is running only during one (0 when idle)
    panels = ((ax[0], (it["start_s"], 100 * summed_over_instances(it, it["kv_blocks_used"]) / max(res.total_blocks, 1)),
               "KV in use (% of pools)" if several else "KV in use (% of pool)"),
              (ax[1], running_steps(res, it["seqs"]),
               "batch (seqs, all instances)" if several else "batch (sequences)"))
    for a, (knots, values), label in panels:
        t, mean = binned_mean(res, values, bins, knots)
        lo, hi = binned_range(res, values, bins, knots)
        a.fill_between(t, lo, hi, step="mid", color="C0", alpha=0.25, lw=0,
                       label=f"least to largest in each {res.makespan_s / bins:.2g} s span")
        a.plot(t, mean, color="C0", lw=1.2, label="time-weighted mean")
        a.set(ylabel=label)
        a.set_ylim(bottom=0)
        a.grid(True, alpha=0.3)
    ax[0].legend(fontsize=7, loc="upper right")
    ax[1].set(xlabel="time (s)")
    ax[0].set_title(f"KV cache and batch over the run ({len(it['start_s']):,} iterations)", fontsize=10)
    return _save(fig, path)


def plots(res: ServeResult, out: Path, sweep: list[dict[str, Any]] | None = None) -> list[Path]:
    plt = pyplot()
    lat = per_request(res)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    drawn = 0
    for m in ("ttft", "tpot", "e2e"):
        x = np.sort(lat[m][~np.isnan(lat[m])])
        if len(x):
            ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=m.upper())
            drawn += 1
    ax.set(xscale="log", xlabel="seconds", ylabel="fraction of requests", title="latency CDFs")
    if drawn:
        ax.legend()
    else:   # every request rejected (or none finished): said on the plot, not a legend of nothing
        _nothing(ax, "no request finished")
    paths = [_save(fig, out / "latency_cdf.png")]
    paths.append(_kv_and_batch(res, out / "kv_and_batch.png"))
    times, watts = power_trace(res)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.step(times, watts, where="post")
    ax.set(xlabel="time (s)", ylabel="power per device (W)",
           title="power over the run (iterations; idle between)" if res.instances == 1
           else f"power over the run: the mean of its {res.board.devices * res.instances:g} devices")
    # from 0 W and without an offset: a flat 215 W drawn as "1e-9 + 2.15e2" made rounding look like swings
    ax.set_ylim(bottom=0, top=max(max(watts, default=0.0) * 1.05, 1.0))
    ax.ticklabel_format(axis="y", useOffset=False)
    paths.append(_save(fig, out / "power.png"))
    if sweep:   # named by what the search moved: a closed loop's clients, else the arrival rate (a serving trial)
        knob = "clients" if search_steps(sweep)[3] else "rate"
        paths.append(_capacity_search(sweep, out / f"latency_throughput_vs_{knob}.png"))
    return paths


def search_steps(sweep: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], np.ndarray, np.ndarray, bool]:
    """--find-capacity's steps by load: (the steps, their loads, which stopped early, whether the load is a closed
    loop's clients)."""
    pts = sorted(sweep, key=lambda p: p["rate"])
    return (pts, np.array([p["rate"] for p in pts], dtype=float),
            np.array([bool(p["summary"].get("settled")) for p in pts], dtype=bool),
            # a closed loop searches its clients: the search says so (a review: every step stopped early had left
            # no benchmark means to tell by), else a step's benchmark means
            any(p.get("knob") == "concurrency" or "benchmark" in p["summary"] for p in pts))


def slo_series(slo: dict[str, float] | None) -> list[tuple[str, str, float | None]]:
    """The latency figures a capacity plot draws: (metric, statistic, limit) of each SLO the search held the
    steps to (ttft_p99, e2e_p50, ...), or TTFT and TPOT p90 without limits where the steps carry none."""
    if not slo:
        return [("ttft", "p90", None), ("tpot", "p90", None)]
    return [(*key.partition("_")[::2], limit) for key, limit in sorted(slo.items())]


def _capacity_search(sweep: list[dict[str, Any]], path: Path) -> Path:
    """--find-capacity's steps by load (not in the order the search tried them). A step stopped early
    (sim.apps.serve.early_stop: it had already failed its SLO for certain) ran part of its stream: its
    figure of the SLO that settled it, of the part it ran, is drawn hollow (its SLO verdict is certain, not its figures);
    its other figures are not drawn."""
    plt = pyplot()
    pts, x, stopped, closed = search_steps(sweep)
    fig, ax = plt.subplots(1, 2, figsize=(10, 5.5))
    limits = slo_series(pts[0]["summary"].get("slo") if pts else None)
    series = [(ax[0], f"{metric} {stat}", [p["summary"]["latency"][metric][stat] for p in pts], f"C{i}",
               np.array([(p["summary"].get("settled") or {}).get("slo") == f"{metric}_{stat}" for p in pts]))
              for i, (metric, stat, _) in enumerate(limits)]
    series.append((ax[1], "throughput", [p["summary"]["throughput_tok_s"] for p in pts], f"C{len(limits)}",
                   np.zeros(len(pts), dtype=bool)))   # a part run's throughput is over its own span: not drawn
    for a, label, y, color, decided in series:
        y = np.asarray(y, dtype=float)
        a.plot(x[~stopped], y[~stopped], "o-", color=color, label=f"{label} (whole run)")
        # a stopped step's figure of the SLO that settled it only: the others, over its first requests (the first
        # wave's TTFT at 6x the full run's, a serving trial), read as a verdict they are not
        if (stopped & decided).any():
            a.plot(x[stopped & decided], y[stopped & decided], "o", mfc="none", color=color,
                   label=f"{label}, stopped early (over its SLO for certain): of the part it ran")
    for i, (metric, stat, limit) in enumerate(limits):   # the limits the search held the steps to
        if limit:
            ax[0].axhline(limit, color=f"C{i}", ls="--", lw=0.8, label=f"{metric}_{stat} SLO")
    ax[0].set(ylabel="seconds", yscale="log")
    ax[1].set(ylabel="throughput (tokens/s)", title="whole runs only" if stopped.any() else None)
    for a in ax:
        a.set(xlabel="clients" if closed else "rate (requests/s)")
        a.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15))   # below: the points fill the panel
    fig.suptitle("--find-capacity: each step tried, by load", fontsize=10)
    return _save(fig, path)

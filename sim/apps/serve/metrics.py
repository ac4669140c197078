"""Summary figures of a serving run: latency statistics, throughput, goodput under
the SLO, KV and batch statistics, utilisation per resource, energy per token."""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.apps.serve.energy import energy_summary
from sim.apps.serve.simulator import DONE, REJECTED, ServeResult
from sim.apps.serve.spec import METRICS
from sim.apps.utilization import utilization  # noqa: F401 (re-exported: serving's figures use it)

QUANTILES = {"p50": 50, "p90": 90, "p99": 99}


def per_request(res: ServeResult) -> dict[str, np.ndarray]:
    """Latencies of the completed requests (seconds)."""
    r = res.requests
    ok = r["status"] == DONE
    first, fin, arr = r["first_token_s"][ok], r["finish_s"][ok], r["arrival_s"][ok]
    out = r["output_tokens"][ok]
    tpot = np.where(out > 1, (fin - first) / np.maximum(out - 1, 1), np.nan)
    return dict(ttft=first - arr, tpot=tpot, e2e=fin - arr, queue=r["scheduled_s"][ok] - arr,
                tbt=r["max_tbt_s"][ok])


def stats(x: np.ndarray, w: np.ndarray | None = None) -> dict[str, float]:
    if w is None:
        x = x[~np.isnan(x)]
        w = np.ones_like(x)
    if len(x) == 0:
        return {k: float("nan") for k in ("mean", *QUANTILES, "max")}
    order = np.argsort(x, kind="stable")
    xs, cw = x[order], np.cumsum(w[order])
    out = {"mean": float(np.average(x, weights=w))}
    for name, q in QUANTILES.items():
        # The smallest value with at least q% of the weight at or below it (inverted CDF).
        out[name] = float(xs[min(np.searchsorted(cw, q / 100 * cw[-1]), len(xs) - 1)])
    out["max"] = float(xs[-1])
    return out


def meets(lat: dict[str, np.ndarray], slo: dict[str, float]) -> np.ndarray:
    """Per completed request: within every SLO threshold (a TBT threshold applies to the request's largest gap)."""
    ok = np.ones(len(lat["ttft"]), dtype=bool)
    for key, limit in slo.items():
        v = lat[key.partition("_")[0]]
        ok &= ~(v > limit)   # NaN (one-token outputs have no TPOT) counts as met
    return ok


def kv_usage_mean(res: ServeResult) -> float:
    """KV blocks in use over the iterations' time, as a share of the pool. Merged instances (replicas, pools):
    each instance's own mean, summed, over their summed pools (one average over every instance's iterations
    read a per-instance figure against all the pools: 1/N of the use)."""
    it = res.iterations
    used, dur = it["kv_blocks_used"], it["duration_s"]
    inst = it.get("instance", np.zeros(len(dur), dtype=np.int64))
    total = 0.0
    for k in np.unique(inst):
        mine = (inst == k) & (dur > 0)
        if mine.any():
            total += float(np.average(used[mine], weights=dur[mine]))
    return total / res.total_blocks


def summarize(res: ServeResult, slo: dict[str, float]) -> dict[str, Any]:
    r = res.requests
    lat = per_request(res)
    done = int((r["status"] == DONE).sum())
    span = float(np.nanmax(r["finish_s"]) - np.nanmin(r["arrival_s"])) if done else 0.0
    out_tokens = float(np.nansum(np.where(r["status"] == DONE, r["output_tokens"], 0)))
    good = meets(lat, slo)
    good_tokens = float(r["output_tokens"][r["status"] == DONE][good].sum())
    lat_stats = {m: stats(lat[m]) for m in METRICS if m != "tbt"}
    lat_stats["tbt"] = stats(res.tbt_s, res.tbt_weight) if len(res.tbt_s) else stats(np.zeros(0))
    it = res.iterations
    busy = float(it["duration_s"].sum()) if len(it["duration_s"]) else 0.0
    energy = energy_summary(res)
    return dict(
        requests=len(r["status"]), completed=done, rejected=int((r["status"] == REJECTED).sum()),
        rejected_reasons=dict(sorted(res.rejected_reasons.items())),
        duration_s=span, throughput_tok_s=out_tokens / span if span else 0.0,
        throughput_req_s=done / span if span else 0.0,
        goodput_req_s=int(good.sum()) / span if span else 0.0,
        goodput_tok_s=good_tokens / span if span else 0.0,
        latency=lat_stats, preemptions=res.preemptions, swapped_out_blocks=res.swapped_out_blocks,
        kv_blocks_total=res.total_blocks, kv_blocks_peak=res.peak_blocks, kv_block_tokens=res.kv_block_tokens,
        kv_usage_mean=kv_usage_mean(res) if busy else 0.0,
        iterations=len(it["duration_s"]),
        batch_size=stats(it["seqs"], it["duration_s"]) if busy else {},
        tokens_per_iteration=stats(it["tokens"], it["duration_s"]) if busy else {},
        # per instance: the iterations of every replica and pool instance over their count x the wall time
        engine_busy=busy / (res.makespan_s * res.instances) if res.makespan_s else 0.0,
        # the host's busy seconds per iteration: the stack's engine work (step_overhead) and any kernel launches
        host_per_iteration_s=res.busy_s.get("host", 0.0) / len(it["duration_s"]) if len(it["duration_s"]) else 0.0,
        utilization=utilization(res.busy_s, res.makespan_s, res.instances), instances=res.instances,
        energy_per_token_j=energy["per_output_token_j"], energy=energy,   # NaN where no token came out
        spec_tokens_per_step=res.spec_tokens / res.spec_steps if res.spec_steps else None,
        # prompt tokens the prefix cache served (not computed) over all prompt tokens of the completed requests
        prefix_hit_share=prefix_hit_share(r),
        slo=slo, slo_met=slo_check(slo_stats(lat, lat_stats, int((r["status"] == REJECTED).sum())), slo))


def slo_stats(lat: dict[str, np.ndarray], lat_stats: dict[str, dict[str, float]], rejected: int) -> dict[str, dict]:
    """The statistics an SLO is read against: the completed requests' (`lat_stats`), with each of the `rejected`
    requests counted at an unbounded latency: never served, it missed every per-request SLO (so a machine that
    turns a fifth of the stream away does not meet a p90 target over the rest)."""
    if not rejected:
        return lat_stats
    miss = np.full(rejected, np.inf)
    return {**lat_stats, **{m: stats(np.concatenate([lat[m], miss])) for m in ("ttft", "tpot", "e2e", "queue")}}


def prefix_hit_share(r: dict[str, np.ndarray]) -> float:
    """The completed requests' prompt tokens found in the prefix cache, over their prompt tokens (0: none)."""
    done = r["status"] == DONE
    prompt = float(r["prompt_tokens"][done].sum())
    return float(r["prefix_hit_tokens"][done].sum()) / prompt if prompt else 0.0


def slo_check(lat_stats: dict[str, dict[str, float]], slo: dict[str, float]) -> dict[str, float]:
    """Each SLO's measured value over its threshold (<= 1 is met)."""
    out = {}
    for key, limit in slo.items():
        metric, _, stat = key.partition("_")
        out[key] = lat_stats[metric][stat] / limit
    return out

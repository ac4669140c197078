"""Serving points of a sweep: a point whose workload is a serving file runs the
request-level simulation (sim.apps.serve.run.serve) and records its summary as
flat metrics: `<metric>_<stat>_s` for every latency (ttft_p90_s, tpot_mean_s,
tbt_p99_s, e2e_p50_s, queue_max_s), the throughputs and goodputs, `slo_<key>`
(the SLO's measured value over its threshold, <= 1 is met), KV and batch figures,
`utilization.<resource>` (busy share of the wall time: gpu, gpu.compute, gpu.memory, ...).
Each point also stores its KV-usage timeline (the store's `series` table), which the sweep
draws as plots/kv_usage_timeline.png, one line per point.

A worker process keeps each machine it builds and the surrogate step-cost tables
of that machine (setup.prepare's cache, keyed by the machine's and the model's
content): the points of a rate axis share one table build instead of each paying
for it.
"""

from __future__ import annotations

import json
from typing import Any

from hw_models.machine import Machine, machine_from_dict
from sim.apps.serve.timeline import kv_timeline
from sim.apps.serve.run import serve
from sim.apps.serve.spec import serve_file_from_dict

SCALARS = ("completed", "rejected", "throughput_tok_s", "throughput_req_s", "goodput_req_s", "goodput_tok_s",
           "preemptions", "kv_blocks_total", "kv_blocks_peak", "kv_usage_mean", "iterations", "engine_busy",
           "energy_per_token_j", "duration_s")
_MACHINES: dict[str, tuple[Machine, dict]] = {}


def _machine(config: dict[str, Any]) -> tuple[Machine, dict]:
    key = json.dumps(config["machine"], sort_keys=True, default=str)
    if key not in _MACHINES:
        _MACHINES[key] = (machine_from_dict(config["machine"], config["machine_source"]), {})
    return _MACHINES[key]


def serve_point(config: dict[str, Any]) -> tuple[dict[str, float], dict[str, list[float]]]:
    """The flat metrics of one serving point, and its KV-usage timeline (sim.apps.serve.timeline.kv_timeline)."""
    file = serve_file_from_dict(config["workload"], config["workload_source"])
    machine, cache = _machine(config)
    res, summary = serve(file, machine, cache=cache)
    return flat_metrics(summary), kv_timeline(res)


def flat_metrics(s: dict[str, Any]) -> dict[str, float]:
    out = {f"{metric}_{stat}_s": v for metric, stats in s["latency"].items() for stat, v in stats.items()}
    out.update({k: s[k] for k in SCALARS})
    out.update({f"slo_{k}": v for k, v in s["slo_met"].items()})
    out.update({f"utilization.{k}": v for k, v in s.get("utilization", {}).items()})
    out["batch_size_mean"] = s["batch_size"].get("mean", 0.0)
    out["tokens_per_iteration_mean"] = s["tokens_per_iteration"].get("mean", 0.0)
    return {k: float(v) for k, v in out.items()}

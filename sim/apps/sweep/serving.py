"""Serving points of a sweep: a point whose workload is a serving file runs the
request-level simulation (sim.apps.serve.run.serve) and records its summary as
flat metrics: `<metric>_<stat>_s` for every latency (ttft_p90_s, tpot_mean_s,
tbt_p99_s, e2e_p50_s, queue_max_s), the throughputs and goodputs, `slo_<key>`
(the SLO's measured value over its threshold, <= 1 is met), KV and batch figures,
`utilization.<resource>` (busy share of the wall time: gpu, gpu.compute, gpu.memory, ...), and the summary's
energy block with its units in the names (ENERGY: total and per-phase joules, average and peak power per device,
how far a binding board power limit stretched the run), so a power-cap study plots from results.csv.
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
from hw_models.power import limit_binds
from sim.apps.serve.timeline import kv_timeline
from sim.apps.serve.run import serve
from sim.apps.serve.spec import METRICS, STATS, serve_file_from_dict

SCALARS = ("completed", "rejected", "throughput_tok_s", "throughput_req_s", "goodput_req_s", "goodput_tok_s",
           "preemptions", "kv_blocks_total", "kv_blocks_peak", "kv_usage_mean", "iterations", "engine_busy",
           "energy_per_token_j", "duration_s")
LATENCY = tuple(f"{m}_{s}_s" for m in METRICS for s in STATS)
SLO = tuple(f"slo_{m}_{s}" for m in METRICS for s in STATS)   # the keys an SLO may name (serve.spec.check_slo)
# A binding board power limit, in both kinds of point (names.BOTH): whether it bound (1/0) and the seconds it added.
CAP = ("power_cap_binds", "power_cap_added_s")
# The summary's energy block (sim.apps.serve.energy.energy_summary) -> columns. Its J per output token is the
# row's energy_per_token_j already (SCALARS), as a run point names it; the phases are totals, not per token as a run
# point's prefill_/decode_energy_per_token_j, hence other names.
ENERGY = {"total_j": "total_energy_j", "per_request_j": "energy_per_request_j", "devices": "devices",
          "avg_power_per_device_w": "avg_power_per_device_w", "peak_power_per_device_w": "peak_power_per_device_w"}
PHASES = ("prefill", "decode", "idle")
NAMES = (*LATENCY, *SCALARS, *SLO, *ENERGY.values(), *(f"{p}_energy_j" for p in PHASES), *CAP,
         "power_cap_stretch", "batch_size_mean", "tokens_per_iteration_mean")
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
    out.update(energy_metrics(s["energy"]))
    return {k: float(v) for k, v in out.items()}


def energy_metrics(e: dict[str, Any]) -> dict[str, float]:
    """The energy block's figures as columns. A cap that never bound (None in the summary) is 0 added seconds and
    no stretch, so a power-limit axis plots as one line through the limits that bind and those that do not."""
    out = {col: float(e[key]) for key, col in ENERGY.items()}
    out.update({f"{phase}_energy_j": float(e["by_phase_j"][phase]) for phase in PHASES})
    cap = e.get("power_cap") or {}
    binds = bool(cap) and limit_binds([cap["clock"]], cap.get("clock_lock", 1.0))   # a lock alone: 0
    out.update(cap_columns(cap.get("added_s", 0.0), binds), power_cap_stretch=float(cap.get("stretch", 0.0)))
    return out


def cap_columns(added_s: float, binds: bool) -> dict[str, float]:
    """CAP, the same in a run and a serving point: whether the board power limit bound (lowered the clock: a
    memory-bound step meets it in the same time, hw_models.clock), and the seconds it added."""
    return {"power_cap_binds": float(binds), "power_cap_added_s": float(added_s)}

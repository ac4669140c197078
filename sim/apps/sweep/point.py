"""The work of one sweep point, `run_point(config)`, in a module of its own: a worker process (a
process pool's or a Dask worker's) unpickles the function by importing this module, and so loads only
what a point simulates with, not the sweep's store, plots and pandas (sim.apps.sweep.run)."""

from __future__ import annotations

import time
import traceback
import warnings
from pathlib import Path
from typing import Any

from hw_models.machine import Machine, machine_from_dict
from hw_models.power import board_columns, limit_binds
from hw_models.registry import simulate
from sim.apps.sweep.blame import attributed
from sim.apps.sweep.serving import cap_columns, serve_point
from sim.core.errors import SimError
from sim.core.results import check_finite
from sim.core.workload import workload_from_dict


def run_point(config: dict[str, Any]) -> dict[str, Any]:
    """Simulate one point. Never raises: a failure (the model does not fit, a
    bug) comes back as status `error` with a one-line message, so one bad point
    leaves the others intact."""

    t0 = time.perf_counter()
    if config.get("refused"):   # its machine refused the point's values (sim.apps.sweep.expand): nothing to run
        return dict(status="error", error=config["refused"], seconds=0.0)
    series: dict[str, Any] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # context-length notes; the row carries the numbers
            machine = machine_from_dict(config["machine"], config["machine_source"])
            if config.get("serving"):
                metrics, series["kv_usage"] = serve_point(config)
                metrics.update(board_columns(machine))   # a run's metrics hold them already (registry.simulate)
                metrics.update(plan_price(config, machine, metrics.get("devices", 0)))
            else:
                metrics = run_metrics(config, machine)
        return dict(status="ok", metrics={k: float(v) for k, v in metrics.items()},
                    seconds=time.perf_counter() - t0, **({"series": series} if series else {}))
    except SimError as exc:   # named by the point's own source and the axis whose field it is about (blame)
        msg = f"{type(exc).__name__}: {attributed(str(exc), config['machine_source'], config.get('fields') or {})}"
    except Exception as exc:  # a bug in one point must not stop the sweep; keep where it happened
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        msg = f"{type(exc).__name__}: {exc} (at {Path(tb.filename).name}:{tb.lineno})"
    return dict(status="error", error=" ".join(msg.split()), seconds=time.perf_counter() - t0)


def plan_price(config: dict[str, Any], machine: Machine, devices: float) -> dict[str, float]:
    """`plan_price_usd`: the list price of the devices the point spans (the preset's price_usd x its devices), what a
    cost axis compares across plans; hw.price_usd is one device's (a capacity planner's trial starred an 8-GPU a100
    plan at $15,000 beside a 2-GPU h100 one at $30,000). None where the preset lists no price or a disaggregated
    point's pools are other presets (sim serve --find-capacity prices those)."""
    pools = ((config.get("workload") or {}).get("serving") or {}).get("disaggregated")
    if machine.price_usd is None or pools or not devices:
        return {}
    return {"plan_price_usd": machine.price_usd * devices}


def run_metrics(config: dict[str, Any], machine: Machine) -> dict[str, float]:
    """A `sim run` point's metrics: RunResult.metrics(), the device tier's alias and a binding power cap's figures."""
    workload = workload_from_dict(config["workload"], config["workload_source"])
    # detail=False: metrics only, without the per-op timelines a report draws (half the time).
    result = check_finite(simulate(workload, machine, detail=False), machine.source)
    metrics = result.metrics()
    # the device tier under the alias a sweep over presets of different memories can name as one column
    # (hbm on an H100, gddr on an A6000), as --set names it (hw.memory.@device)
    if f"peak_memory_bytes.{machine.device_tier}" in metrics:
        metrics["peak_memory_bytes.@device"] = metrics[f"peak_memory_bytes.{machine.device_tier}"]
    # the run's cap figures are per phase (hw_models.power.cap_figures), a serving run's over its whole engine time
    cap = result.extra.get("power_cap") or {}
    binds = bool(cap) and limit_binds([cap[f"{p}_clock"] for p in ("prefill", "decode")], cap.get("clock_lock", 1.0))
    metrics.update(cap_columns(cap.get("prefill_s", 0.0) + cap.get("decode_s", 0.0), binds))
    metrics.update({f"{phase}_power_cap_{k}": cap.get(f"{phase}_{k}", v) for phase in ("prefill", "decode")
                    for k, v in (("stretch", 0.0), ("clock", 1.0))})
    return metrics | plan_price(config, machine, result.devices)


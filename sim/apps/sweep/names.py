"""The metric names a sweep's points record, by the kind of point: a `sim run` point (RunResult.metrics() and the
columns sim.apps.sweep.point adds) or a `sim serve` point (sim.apps.sweep.serving.flat_metrics). A sweep file's
`metrics:` is checked against them before any point runs (check_metrics): a name its points never record was
otherwise left out of the best-points table and the default plots with exit 0.

Some names are families whose members depend on the hardware (`utilization.<resource>`, `peak_memory_bytes.<tier>`,
a kind's own `<kind>.<figure>`): any member is accepted, since which ones a point records is known only once it ran.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from hw_models.kinds import KINDS
from sim.apps.sweep import serving
from sim.core.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

    from sim.apps.sweep.spec import SweepSpec

# Recorded by every point (hw_models.power.board_columns): the board power limit where the machine has the
# board-power model, which energy model the row's J/token is, and whether the limit bound (hw_models.power).
BOTH = ("energy_board_model", "power_cap_limit_w", *serving.CAP, "plan_price_usd")
# RunResult.metrics()'s fixed names (sim/core/results.py; tests/test_sweep_power.py checks them against a run),
# the device tier's alias (sim.apps.sweep.point) and the per-phase stretch of a binding power cap.
RUN = tuple(dict.fromkeys(("ttft_s", "tpot_s", "tpot_first_s", "tpot_last_s", "e2e_s", "throughput_tok_s", "energy_per_token_j",
       "avg_power_per_device_w", "params", "batch_simulated", "prefill_energy_per_token_j", "decode_energy_per_token_j",
       "peak_memory_bytes.@device", "prefill_power_cap_stretch", "decode_power_cap_stretch", "prefill_power_cap_clock",
       "decode_power_cap_clock", "throughput_all_replicas_tok_s",
       *BOTH)))
SERVE = tuple(dict.fromkeys((*serving.NAMES, *BOTH)))
# Families: the prefix, and what its member names (for the list an error prints).
RUN_FAMILIES = {"peak_memory_bytes.": "<tier>", "utilization.": "<resource>", "link_utilization.": "<link>",
                "bytes_per_decode_step.": "<link>", "policy.": "<field>", "search.": "<field>"}
SERVE_FAMILIES = {"utilization.": "<resource>"}
# Only a machine with the board-power model (idle + activity + dynamic; hw_models.power) records these.
BOARD_ONLY = ("prefill_energy_per_token_j", "decode_energy_per_token_j", "power_cap_limit_w")
# A serving sweep's metrics when its file names none: the spec's default names run metrics (tpot_s, ttft_s), which a
# serving point never records: each was left out with a warning about a list the file had not written.
SERVE_DEFAULT = ["ttft_p90_s", "tpot_p90_s", "throughput_tok_s", "energy_per_token_j"]


def families(serve: bool) -> dict[str, str]:
    """The families of a kind of point. A run point's hardware kind may add `<kind>.<figure>` (spatial.chips,
    pim.utilization); read when asked, so a kind registered later (hw_models.kinds.register_kind) counts too."""
    if serve:
        return SERVE_FAMILIES
    return {**RUN_FAMILIES, **{f"{k}.": "<figure>" for k in KINDS}}


def recorded(name: str, serve: bool) -> bool:
    """Whether points of the kind (`serve`: sim serve, else sim run) can record the metric `name`."""
    return name in (SERVE if serve else RUN) or any(
        name.startswith(prefix) and len(name) > len(prefix) for prefix in families(serve))


def known(serve: bool) -> str:
    """The names of a kind, for an error line: serving's latency and SLO names as patterns."""
    if serve:
        stats = f"<{'|'.join(serving.METRICS)}>_<{'|'.join(serving.STATS)}>"
        fixed = [n for n in SERVE if n not in serving.LATENCY and n not in serving.SLO]
        return ", ".join([f"{stats}_s", f"slo_{stats}", *fixed, *(p + m for p, m in families(True).items())])
    return ", ".join([*RUN, *(p + m for p, m in families(False).items())])


def _kind(serve: bool) -> str:
    return "`sim serve`" if serve else "`sim run`"


def refusal(name: str, serve: bool) -> str:
    """Why a sweep of this kind cannot plot or rank `name`: the other kind's metric, or no metric at all."""
    if recorded(name, not serve):
        why = "the workload is a serving file" if serve else "the workload is not a serving file"
        return (f"{name!r} is a metric of {_kind(not serve)} points only; this sweep's points run {_kind(serve)} "
                f"({why}); theirs: {known(serve)}")
    close = difflib.get_close_matches(name, SERVE if serve else RUN, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown metric {name!r}{hint}; known: {known(serve)}"


def check_metrics(spec: "SweepSpec", serve: bool) -> None:
    """Refuse a `metrics:` name the sweep's points never record, in one line naming the file and the entry. The
    default list (a file without `metrics:`) names run metrics and is not checked: the file did not ask for them."""
    if "metrics" not in spec.model_fields_set:
        return
    for i, name in enumerate(spec.metrics):
        if not recorded(name, serve):
            raise ConfigError(f"{spec.source or spec.name}: metrics[{i}]: {refusal(name, serve)}")


# Every stored row's own columns beside the axes and metrics (sim.apps.sweep.store rows): plottable too (a review:
# `y: seconds`, each point's time to simulate, had been refused)
STORE_COLUMNS = ("point", "seconds", "status", "key", "error")


def check_plot_metrics(spec: "SweepSpec", serve: bool) -> None:
    """A plot's x / y / z that is neither an axis nor a dotted config field must be a metric the points record:
    refused before any point runs (a sweep trial's `y: tpot` was found after 1,400 points had run). Dotted names
    (recorded config fields such as hw.price_usd) are checked against the results, after the run, as before."""
    for i, plot in enumerate(spec.plots):
        for key in ("x", "y", "z"):
            name = getattr(plot, key)
            if (name and "." not in name and name not in spec.axes and name not in STORE_COLUMNS
                    and not recorded(name, serve)):
                raise ConfigError(f"{spec.source or spec.name}: plots[{i}].{key}: {refusal(name, serve)}")


def for_kind(spec: "SweepSpec", serve: bool) -> "SweepSpec":
    """`spec` with the default metrics of its kind of point, where its file names none."""
    if serve and "metrics" not in spec.model_fields_set:
        return spec.model_copy(update={"metrics": list(SERVE_DEFAULT)})
    return spec


def missing_reason(metric: str, rows: "pd.DataFrame") -> str:
    """Why `rows` (one line of a plot) hold no value of `metric`: the board-power model they lack, or unsaid."""
    board = rows.get("energy_board_model")
    if metric in BOARD_ONLY and board is not None and len(rows) and (board == 0).all():
        return "no board-power model"
    if metric == "plan_price_usd":   # sim.apps.sweep.point.plan_price
        return "no price_usd in the preset, or pools of other presets"
    return "not recorded for these points"

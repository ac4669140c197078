"""A `sim calibrate` fit (sim.apps.trace.calibrate.Calibration) as a preset YAML whose header records the fit: what
it was fitted on, the GEMM tile and small-M class chosen, each curve's residual and the kinds left on the unit's."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from sim.core.files import atomic_write
from sim.apps.trace.preset_text import cited

if TYPE_CHECKING:
    from sim.apps.trace.calibrate import Calibration


def write_preset(cal: Calibration, path: str | Path, note: str = "") -> Path:
    """The calibrated machine as a preset YAML whose header records the fit."""
    path = Path(path)
    data = cal.raw
    date = _dt.date.today().isoformat()
    lines = [
        f"# {data['name']}: {cal.base} with its efficiency curves and launch overhead fitted to measured ops",
        f"# by `sim calibrate` (scipy.optimize.least_squares on log-time residuals), {date}.",
        f"# Peaks, capacities and bandwidths are {cal.base}.yaml's (see the citations there); only",
        "# units.*.efficiency, launch_overhead_s and stacks.* (below) are fitted. Fitted on:",
        *[f"#   {s}" for s in cal.sources],
        f"# GEMM tile/wave term: {_tile_note(cal)}",
        *([f"# Small-M GEMM class (gemv): {'M <= %d' % cal.gemv_max_m if cal.gemv_max_m else 'none'}, chosen by "
           "GEMM RMS log residual on the "
           "calibration ops (" + ", ".join(f"{k} {v:.3f}" for k, v in cal.gemv_scores.items()) + ")"]
          if cal.gemv_scores else []),
        f"# Fit: all ops, one curve: RMS log residual {cal.overall.rms_log_residual:.3f}, "
        f"MAPE {cal.overall.mape:.1%} over {cal.overall.n} ops.",
        *[f"#   {k}: RMS log residual {f.rms_log_residual:.3f}, MAPE {f.mape:.1%} over {f.n} ops"
          + (f"; not constrained by the data, kept: {', '.join(sorted(f.fixed))}" if f.fixed else "")
          for k, f in cal.by_kind.items()],
        *([f"#   on the all-ops curve (ops from too few traces, --min-traces, or of too few shapes): {', '.join(cal.kept)}"]
          if cal.kept else []),
        *([f"# {line}" for line in note.splitlines()]),
    ]
    text = "\n".join(lines) + "\n" + cited(yaml.safe_dump(data, sort_keys=False), cal.base)
    atomic_write(path, lambda p: p.write_text(text))
    return path


def _tile_note(cal: Calibration) -> str:
    if not cal.tile_scores:
        return "not fitted (the base preset has no parallel_units, or no GEMMs were measured)"
    chosen = "none" if cal.tile is None else f"{cal.tile[0]}x{cal.tile[1]}"
    units = cal.machine.units[cal.unit].efficiency.parallel_units
    return (f"parallel_units {units} is {cal.base}'s SM count (cited there); "
            f"tile {chosen} chosen by GEMM RMS log residual on the calibration ops ("
            + ", ".join(f"{k} {v:.3f}" for k, v in cal.tile_scores.items()) + ")")

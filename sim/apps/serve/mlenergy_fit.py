"""The power figures fitted on ML.ENERGY's H100 runs (issue 33): active_power_w and the fp16 energy per FLOP of
h100_sxm.yaml (and, where asked, the HBM's energy per byte), by non-negative least squares on the relative power error.

Uncapped, a replay's power per GPU is linear in the three figures and its time does not
depend on them (the step times are the roofline's; only the cap would stretch them):

    P = p0 + active_power_w x busy + J/FLOP(fp16) x per_j + J/byte(HBM) x per_b   (the formats' ratios to fp16 held)

`components` reads p0 (idle + links + other tiers' bytes), busy (the share of the time the GPUs draw activity
power: their kernels and the engine's in-loop gaps), per_j (W per J/FLOP) and per_b (W per J/byte: the HBM
bytes a second) from four replays, so the fit needs no replay per trial figure. A run whose measured
power is within CAP_MARGIN of the board limit ran at the cap: its power is the limit's, not
the figures', and the fit leaves it out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from hw_models.machine import load_machine
from sim.apps.serve import mlenergy as M
from sim.apps.serve.energy import energy_window
from sim.apps.serve.run import serve

NO_CAP_W = 1e6      # the components' replays run uncapped, so their times do not depend on the figures
CAP_MARGIN = 0.97   # a run measured (or predicted) above this share of its power limit ran at the cap
PROBE_J_PER_FLOP = 1e-12
PROBE_ACTIVE_W = 100.0
PROBE_J_PER_BYTE = 1e-10


@dataclass(frozen=True)
class Components:
    """One run's simulated steady-state power per GPU as its linear parts (module doc) and its output tokens/s."""

    run: M.Run
    p0_w: float
    busy: float
    per_j_w: float     # W per J/FLOP of fp16
    tput_tok_s: float
    per_b_w: float     # W per J/byte of the HBM

    def to_dict(self, keys: dict[M.Run, tuple]) -> dict:
        return dict(run=list(keys[self.run]), p0_w=self.p0_w, busy=self.busy, per_j_w=self.per_j_w,
                    per_b_w=self.per_b_w, tput_tok_s=self.tput_tok_s)


def run_keys(runs: list[M.Run]) -> dict[M.Run, tuple]:
    """Each run's key: what names it in the CSV, with its rank among runs that share the rest (the data repeat
    a few configurations), so a stored file need not copy measured figures."""
    seen: dict[tuple, int] = {}
    out = {}
    for r in runs:
        k = (r.gpu, r.model, r.task, r.tp, r.ep, r.max_num_seqs)
        seen[k] = seen.get(k, -1) + 1
        out[r] = (*k, seen[k])
    return out


def machine_at(preset: str, active_w: float, fp16_j_per_flop: float, hbm_j_per_byte: float,
               limit_w: float | None = NO_CAP_W) -> Any:
    """`preset` with these three figures (the other formats keep their ratio to fp16) and this power limit."""
    m = load_machine(preset)
    u = m.units["gpu"]
    ratios = {k: v / u.energy_j_per_flop["fp16"] for k, v in u.energy_j_per_flop.items()}
    sets: dict[str, Any] = {"units.gpu.active_power_w": active_w,
                            "units.gpu.energy_j_per_flop": {k: r * fp16_j_per_flop for k, r in ratios.items()},
                            f"memory.{u.memory}.energy_j_per_byte": hbm_j_per_byte}
    if limit_w is not None:
        sets["units.gpu.power_limit_w"] = limit_w
    return load_machine(preset, sets)


def components(run: M.Run) -> Components:
    """Four uncapped replays of `run` (nothing; PROBE_J_PER_FLOP; PROBE_ACTIVE_W; PROBE_J_PER_BYTE) as Components:
    `busy` is the share of the steady window the devices draw activity power over (their kernels and the engine's
    in-loop gaps, hw_models.base.Mapper.gap_active_j), read off the replay like the other parts."""
    out = []
    for a, j, b in ((0.0, 0.0, 0.0), (0.0, PROBE_J_PER_FLOP, 0.0), (PROBE_ACTIVE_W, 0.0, 0.0),
                    (0.0, 0.0, PROBE_J_PER_BYTE)):
        res, _ = serve(M.serve_file(run), machine_at(M.PRESETS[run.gpu], a, j, b))
        t0, t1 = M.steady_window(res, run.max_num_seqs)
        joules, tokens = energy_window(res, t0, t1)
        out.append((joules / (t1 - t0) / run.num_gpus, tokens / (t1 - t0)))
    (p0, tput), (p1, _), (pa, _), (pb, _) = out
    return Components(run, p0, (pa - p0) / PROBE_ACTIVE_W, (p1 - p0) / PROBE_J_PER_FLOP, tput,
                      (pb - p0) / PROBE_J_PER_BYTE)


def from_dict(d: dict, runs: dict[tuple, M.Run]) -> Components | None:
    """Stored components of a run `runs` (key -> run, run_keys inverted) has; None when the data lack it."""
    run = runs.get(tuple(d["run"]))
    if run is None or "per_b_w" not in d:   # a store from before the replays read the HBM bytes: replay it
        return None
    return Components(run, d["p0_w"], d["busy"], d["per_j_w"], d["tput_tok_s"], d["per_b_w"])


def predict(c: Components, active_w: float, fp16_j_per_flop: float, hbm_j_per_byte: float) -> M.Replay:
    """The uncapped replay of `c`'s run at these figures (exact by linearity)."""
    w = c.p0_w + active_w * c.busy + fp16_j_per_flop * c.per_j_w + hbm_j_per_byte * c.per_b_w
    return M.Replay(c.run, w * c.run.num_gpus / c.tput_tok_s, w, c.tput_tok_s)


def uncapped(comps: list[Components], limit_w: float) -> list[Components]:
    """The runs measured below CAP_MARGIN x the board limit (module doc)."""
    return [c for c in comps if c.run.power_per_gpu_w < CAP_MARGIN * limit_w]


@dataclass(frozen=True)
class Fit:
    active_power_w: float
    fp16_j_per_flop: float
    hbm_j_per_byte: float
    runs: int            # runs fitted on
    left_out: int        # runs left out (at the cap)
    power_mape: float    # over the runs fitted on

    def as_dict(self) -> dict:
        return asdict(self)


def sig3(x: float) -> float:
    """Three significant figures: what the presets carry."""
    return float(f"{x:.3g}")


def fit(comps: list[Components], limit_w: float, hbm_j_per_byte: float | None) -> Fit:
    """Non-negative least squares (scipy.optimize.nnls) on the relative power error over the uncapped runs, rounded
    to 3 figures: minimise sum(((p0 + a busy + j per_j + b per_b) - P) / P)^2 over (a, j) >= 0, with the HBM's
    J/byte b held at `hbm_j_per_byte` (None: fitted too, b >= 0). The columns are scaled to one before solving (a
    watt, a pJ/FLOP, a pJ/byte), so no figure's unit swamps the others."""
    from scipy.optimize import nnls

    use = uncapped(comps, limit_w)
    meas = np.array([c.run.power_per_gpu_w for c in use])
    free = hbm_j_per_byte is None
    unit = np.array([1.0, 1e-12, 1e-12][:3 if free else 2])
    A = np.array([[c.busy, c.per_j_w, c.per_b_w][:len(unit)] for c in use]) * unit / meas[:, None]
    held = 0.0 if free else hbm_j_per_byte * np.array([c.per_b_w for c in use])
    y = (meas - np.array([c.p0_w for c in use]) - held) / meas
    x, _ = nnls(A, y)
    a, j = (sig3(float(v)) for v in x[:2] * unit[:2])
    b = sig3(float(x[2] * unit[2])) if free else hbm_j_per_byte
    err = M.mape([predict(c, a, j, b).power_error for c in use])
    return Fit(a, j, b, len(use), len(comps) - len(use), err)

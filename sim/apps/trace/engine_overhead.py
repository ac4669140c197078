"""Fit an engine's host time per iteration (hw_models.stack.step_overhead) to vidur's
cpu_overheads.csv (shared/validation/vidur/cpu_overhead/<gpu>/, PROVENANCE §1.3).

vidur ran a sarathi LLMEngine (vLLM V0 scheduler, Ray workers, dummy weights) with
`batch_size` requests and recorded, per engine step, the CPU time of each stage (ms,
mean and median). The host time of an iteration here is the sum of the medians of
  schedule + prepare_inputs_e2e + sampler_e2e + process_model_outputs
(medians: a step's mean carries the odd garbage-collector pause). Left out:
model_execution (the forward pass: the device model's) and ray_comm_time (wall time
not covered by recorded CPU ops, 6-7 ms per step on the A100 node at TP > 1: Ray's RPC
between driver and workers; vLLM V1 drives its workers over shared-memory queues).

The curve: host seconds at knots over the batch size, piecewise linear (as
StepOverhead.host_s evaluates it), plus one figure added when TP > 1; least squares
on relative residuals with a soft-L1 loss (scipy), knots kept non-decreasing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from hw_models.stack.step_overhead import StepOverhead

PARTS = ("schedule_median", "prepare_inputs_e2e_median", "sampler_e2e_median", "process_model_outputs_median")
KNOTS = (8, 32, 64, 128)


def load_cpu_overheads(path: Path) -> pd.DataFrame:
    """One row per (model, tp, batch_size): host_s (the summed medians, seconds) and the parts."""
    d = pd.read_csv(path, index_col=0)
    d["model"] = d.model_name.str.split("/").str[-1]
    d["tp"] = d.tensor_parallel_degree
    d["host_s"] = d[list(PARTS)].sum(axis=1) / 1e3
    return d[["model", "tp", "batch_size", "host_s", *PARTS]].reset_index(drop=True)


def predict(curve: StepOverhead, d: pd.DataFrame) -> np.ndarray:
    return np.array([curve.host_s(int(b), int(t)) for b, t in zip(d.batch_size, d.tp)])


def mape(curve: StepOverhead, d: pd.DataFrame) -> float:
    """Mean absolute relative error of `curve` over the rows of `d`."""
    return float(np.mean(np.abs(predict(curve, d) / d.host_s.to_numpy() - 1.0)))


@dataclass
class Fit:
    curve: StepOverhead
    mape: float          # on the rows it was fitted to
    max_error: float     # largest relative error on those rows


def _curve(params: np.ndarray, knots: tuple[int, ...], cite: str, overlap: bool) -> StepOverhead:
    *steps, tp_extra = params
    seconds = np.cumsum(np.abs(steps))      # non-decreasing by construction
    return StepOverhead(cite=cite, overlap=overlap, seqs=list(knots), seconds=[float(s) for s in seconds],
                        tp_extra_s=abs(float(tp_extra)))


def fit_curve(d: pd.DataFrame, knots: tuple[int, ...] = KNOTS, cite: str = "", overlap: bool = False) -> Fit:
    """The knot values and TP figure that best fit the rows of `d` (relative error, soft L1)."""
    y = d.host_s.to_numpy()
    x0 = np.r_[np.median(y) / 4, np.full(len(knots) - 1, np.median(y) / 4), 1e-4]

    def resid(p: np.ndarray) -> np.ndarray:
        return predict(_curve(p, knots, cite, overlap), d) / y - 1.0

    sol = least_squares(resid, x0, loss="soft_l1", f_scale=0.05, x_scale=1e-3)
    curve = _curve(sol.x, knots, cite, overlap)
    err = np.abs(predict(curve, d) / y - 1.0)
    return Fit(curve, float(err.mean()), float(err.max()))

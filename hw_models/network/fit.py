"""Fit the alpha-beta collective model to measured NCCL times (vidur's network
tables, shared/validation/vidur/network/<node>/{all_reduce,send_recv}.csv: median
ms per message size, PROVENANCE.md §1.2) and measure its error out of sample.

Only intra-node rows are used (all ranks in one node), and each group size gets its
own alpha and B: NCCL's achieved bus bandwidth and per-step latency differ between
2, 4 and 8 ranks of one node (one pair for all n leaves 15-45% error). Message sizes from 1 MB to
1 GB (the tables stop at 64 MiB, 512 MiB for the pairwise A100 all-reduce) are split
by rank of size: every third size fits alpha and B (least squares on the relative
error, scipy), the other two thirds are the test set.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from hw_models.network.collectives import ALL_REDUCE, SEND_RECV, alpha_beta

# Topology preset -> vidur's node folder.
VIDUR_NODES = {"dgx_a100": "a100_dgx", "dgx_h100": "h100_dgx", "a100_pcie_pairs": "a100_pairwise_nvlink",
               "a6000_x8_pcie": "a6000"}
MIN_BYTES, MAX_BYTES = 1e6, 1e9
FIT_EVERY = 3


@dataclass(frozen=True)
class Fit:
    node: str
    kind: str
    ranks: int
    latency_s: float
    bandwidth_bytes_per_s: float
    fit_points: int
    test_points: int
    test_mape: float
    test_max_error: float
    test_within_10pct: float          # share of held-out sizes within 10%
    sizes: tuple[float, float]        # smallest and largest size tested


def measured(folder: Path, kind: str) -> pd.DataFrame | None:
    """Intra-node rows with sizes in [MIN_BYTES, MAX_BYTES]: size, ranks, seconds."""
    path = folder / f"{kind}.csv"
    if not path.is_file():
        return None
    d = pd.read_csv(path)
    intra = d["devices_per_node"] >= d["num_workers"]
    d = d[intra & d["size"].between(MIN_BYTES, MAX_BYTES)]
    return pd.DataFrame({"size": d["size"].astype(float), "ranks": d["num_workers"].astype(int),
                         "time_s": d[f"time_stats.{kind}.median"] * 1e-3})


def predict_s(alpha: float, bw: float, kind: str, size: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    coeffs = np.array([alpha_beta(kind, "ring", int(n)) for n in ranks])
    return coeffs[:, 0] * alpha + coeffs[:, 1] * size / bw


def split(data: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    sizes = np.sort(data["size"].unique())
    fit_sizes = set(sizes[::FIT_EVERY])
    in_fit = data["size"].isin(fit_sizes)
    return data[in_fit], data[~in_fit]


def fit_node(node: str, kind: str, data: pd.DataFrame) -> Fit:
    """One alpha and B for `data` (rows of one group size)."""
    train, test = split(data)
    size, ranks, t = (train[c].to_numpy() for c in ("size", "ranks", "time_s"))

    def residual(x: np.ndarray) -> np.ndarray:
        return predict_s(np.exp(x[0]), np.exp(x[1]), kind, size, ranks) / t - 1.0

    x = least_squares(residual, x0=np.log([5e-6, 1e11]), method="lm").x
    alpha, bw = float(np.exp(x[0])), float(np.exp(x[1]))
    err = predict_s(alpha, bw, kind, test["size"].to_numpy(), test["ranks"].to_numpy()) / test["time_s"].to_numpy() - 1
    return Fit(node, kind, int(data["ranks"].iloc[0]), alpha, bw, len(train), len(test),
               float(np.mean(np.abs(err))), float(np.max(np.abs(err))), float(np.mean(np.abs(err) <= 0.10)),
               (float(test["size"].min()), float(test["size"].max())))


def fit_all(root: Path) -> list[Fit]:
    """Every node and collective with a table under `root` (shared/validation/vidur/network)."""
    out = []
    for node, folder in VIDUR_NODES.items():
        for kind in (ALL_REDUCE, SEND_RECV):
            data = measured(root / folder, kind)
            if data is None:
                continue
            for _, rows in data.groupby("ranks"):
                out.append(fit_node(node, kind, rows))
    return out

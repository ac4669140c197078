#!/usr/bin/env python3
"""Fit the engines' kernel figures on aiconfigurator's measured op tables of the in-sample GPUs.

Reads shared/validation/aic (H100, A100, RTX PRO 6000, L40S; never the held-out H200 or
Blackwell datacenter tables, aic/README.md) and writes the fitted files:

* hw_models/network/engine_collectives.yaml: per node topology (H100 -> dgx_h100, A100 ->
  dgx_a100) and group size, NCCL's two protocol lines per collective and each engine's
  one-shot / two-shot custom all-reduce line (hw_models.network.engine_collectives).

Every line is fitted by least squares on the relative error (each point weighted by
1 / measured), so small and large messages count alike. NCCL's two lines: for each split
of the sorted message sizes, one line through the sizes below and one through those above;
the split whose min(line_1, line_2) has the lowest MAPE over all sizes wins.

    python scripts/fit_kernels.py            # print the fits and their MAPE
    python scripts/fit_kernels.py --write    # rewrite the shipped YAML
    python scripts/fit_kernels.py --check    # exit 1 if the shipped YAML differs from the fit
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.network.collectives import ALL_REDUCE, alpha_beta  # noqa: E402
from hw_models.network.engine_collectives import FITS_FILE, ONE_SHOT, custom_kernel  # noqa: E402

SHARED = Path(os.environ.get("SIM_SHARED_VALIDATION", ROOT.parent / "shared" / "validation")) / "aic"
IN_SAMPLE = {"h100": "dgx_h100", "a100": "dgx_a100"}     # GPUs with comm tables and a node preset
COMM_KIND = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
             "alltoall": "all_to_all"}
ENGINES = {"trtllm_custom_ar": "trtllm", "vllm_custom_ar": "vllm"}
MIN_BYTES = 1024          # the NCCL tables start at 1 KB; smaller custom rows are kept


def _sig(x: float) -> float:
    return float(f"{x:.3g}")


def line_fit(x: np.ndarray, y: np.ndarray, c: np.ndarray | None = None) -> tuple[float, float]:
    """(a, b) of y ~ a c + b x, least squares on the relative error, both >= 0; c defaults to 1."""
    c = np.ones_like(x) if c is None else c
    w = 1.0 / y
    A = np.vstack([c * w, x * w]).T
    (a, b), *_ = np.linalg.lstsq(A, np.ones_like(y), rcond=None)
    if a < 0:
        a, b = 0.0, float(np.sum(x * w * w * y) / np.sum((x * w) ** 2)) if np.any(x) else 0.0
    if b <= 0:
        b = float(np.median(y / np.maximum(x, 1.0))) * 1e-3 or 1e-18
        a = float(np.sum(c * w * (1 - b * x * w)) / np.sum((c * w) ** 2))
    return float(max(a, 0.0)), float(b)


def nccl_lines(size: np.ndarray, t: np.ndarray, steps: float, factor: float) -> list[dict]:
    """Two protocol lines (module doc); t seconds for whole-buffer bytes `size`."""
    order = np.argsort(size)
    size, t = size[order], t[order]
    c, x = np.full_like(size, steps), factor * size
    best = None
    for cut in range(2, len(size) - 1):
        lines = [line_fit(x[:cut], t[:cut], c[:cut]), line_fit(x[cut:], t[cut:], c[cut:])]
        pred = np.min([a * c + b * x for a, b in lines], axis=0)
        mape = float(np.mean(np.abs(pred - t) / t))
        if best is None or mape < best[0]:
            best = (mape, lines)
    return [{"latency_s": _sig(a), "bandwidth_bytes_per_s": _sig(1.0 / b)} for a, b in best[1]]


def _comm(gpu: str) -> pd.DataFrame:
    df = pd.read_csv(SHARED / f"comm_{gpu}.csv.gz")
    return df[~df["kernel_source"].str.endswith("_eager")]   # the engines replay CUDA graphs


def fit_node(gpu: str) -> dict:
    df = _comm(gpu)
    out: dict = {"fitted_on": f"shared/validation/aic/comm_{gpu}.csv.gz", "nccl": {}, "custom": {}}
    nccl = df[(df["source"] == "nccl") & (df["bytes"] >= MIN_BYTES)]
    for op, kind in COMM_KIND.items():
        for n, part in sorted(nccl[nccl["op"] == op].groupby("num_gpus")):
            med = part.groupby("bytes")["latency_us"].median()
            steps, factor = alpha_beta(kind, "ring", int(n))
            out["nccl"].setdefault(kind, {})[int(n)] = nccl_lines(med.index.to_numpy(float),
                                                                 med.to_numpy() * 1e-6, steps, factor)
    for src, engine in ENGINES.items():
        rows = df[(df["source"] == src) & (df["op"] == "all_reduce")]
        if rows.empty:
            continue
        latest = rows[rows["version"] == _latest(rows["version"])]
        for n, part in sorted(latest.groupby("num_gpus")):
            n = int(n)
            med = part.groupby("bytes")["latency_us"].median()
            kernels = {}
            for kernel in sorted({custom_kernel(engine, b, n) for b in med.index} - {None}):
                sel = [b for b in med.index if custom_kernel(engine, b, n) == kernel]
                if len(sel) < 2:
                    continue
                s = np.array(sel, dtype=float)
                moved = (n - 1) * s if kernel == ONE_SHOT else 2 * (n - 1) / n * s
                a, b = line_fit(moved, med.loc[sel].to_numpy() * 1e-6)
                kernels[kernel] = {"latency_s": _sig(a), "bandwidth_bytes_per_s": _sig(1.0 / b)}
            if kernels:
                out["custom"].setdefault(engine, {})[n] = kernels
    return out


def _latest(versions: pd.Series) -> str:
    def key(v: str) -> tuple:
        return tuple(int(p) if p.isdigit() else 0 for p in str(v).replace("rc", ".").replace("post", ".").split("."))
    return max(versions.astype(str).unique(), key=key)


def render(fits: dict[str, dict]) -> str:
    lines = ["# Generated by scripts/fit_kernels.py from aiconfigurator's measured comm tables of the in-sample GPUs",
             "# (shared/validation/aic; H200 / Blackwell tables are held out). Do not edit: rerun the script.",
             "# hw_models/network/engine_collectives.py says how each line is used.", "nodes:"]
    for node, f in fits.items():
        lines += [f"  {node}:", f"    fitted_on: {f['fitted_on']}", "    nccl:"]
        for kind, by_n in f["nccl"].items():
            lines.append(f"      {kind}:")
            for n, ls in by_n.items():
                lines.append(f"        {n}: [" + ", ".join(
                    f"{{latency_s: {x['latency_s']:.3g}, bandwidth_bytes_per_s: {x['bandwidth_bytes_per_s']:.3g}}}"
                    for x in ls) + "]")
        lines.append("    custom:")
        for engine, by_n in f["custom"].items():
            lines.append(f"      {engine}:")
            for n, ks in by_n.items():
                lines.append(f"        {n}:")
                for k, x in ks.items():
                    lines.append(f"          {k}: {{latency_s: {x['latency_s']:.3g}, "
                                 f"bandwidth_bytes_per_s: {x['bandwidth_bytes_per_s']:.3g}}}")
    return "\n".join(lines) + "\n"


def fit_all() -> str:
    return render({node: fit_node(gpu) for gpu, node in IN_SAMPLE.items()})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true", help="rewrite the shipped YAML")
    p.add_argument("--check", action="store_true", help="exit 1 if the shipped YAML differs from the fit")
    args = p.parse_args()
    if not (SHARED / "comm_h100.csv.gz").is_file():
        print(f"{SHARED} not found: nothing to fit")
        return 0
    text = fit_all()
    if args.check:
        shipped = FITS_FILE.read_text() if FITS_FILE.is_file() else ""
        if shipped != text:
            print(f"{FITS_FILE} differs from scripts/fit_kernels.py's fit: rerun with --write")
            return 1
        print(f"{FITS_FILE}: as fitted")
        return 0
    if args.write:
        FITS_FILE.write_text(text)
        print(f"wrote {FITS_FILE}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

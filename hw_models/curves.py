"""Efficiency-curve maths: the formulas behind machine.Efficiency (the schema keeps
the fitted figures and picks the curve per op kind; this module evaluates it).

* saturating: achieved/peak as a function of op size, eff(x) = top * x / (x + half);
  `half` is the size at which an op gets half of `top`; 0 means always `top`.
* gemm_waves: the tile/wave utilization of an M x N x K GEMM on `units` SMs.

Both work on floats and on numpy arrays (calibration evaluates many ops at once).
"""

from __future__ import annotations

import numpy as np

# A split-K slice is at least one threadblock K-tile deep; cuBLAS/CUTLASS Ampere
# kernels use K-tiles of 32 (the "_32x3" in cutlass_80_..._128x256_32x3 kernel names).
GEMM_K_TILE = 32


def saturating(size, top: float, half: float):
    """top * size / (size + half); `top` flat when half is 0."""
    return top * (size / (size + half) if half else 1.0)


def gemm_waves(m, n, k, tile_m: int, tile_n: int, units: int):
    """Fraction of the SMs' tile throughput that does useful work for an M x N x K
    GEMM on `units` SMs. The output is cut into ceil(M/tile_m) * ceil(N/tile_n) tiles
    (M and N padded to whole tiles); when there are fewer tiles than SMs, K is split
    (split-K, as cuBLAS does: grid z of 2-3 in the A6000 traces) into
    s = floor(SMs / tiles) slices, at most one per K-tile; the CTAs run in
    ceil(tiles * s / SMs) waves and the last partial wave idles SMs.
    Useful / issued = M*N*s / (waves * SMs * tile_m * tile_n)."""
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    tiles = np.ceil(m / tile_m) * np.ceil(n / tile_n)
    split = np.clip(np.floor(units / tiles), 1.0, np.maximum(np.ceil(k / GEMM_K_TILE), 1.0))
    waves = np.ceil(tiles * split / units)
    out = m * n * split / (waves * units * tile_m * tile_n)
    return float(out) if out.ndim == 0 else out

"""Analytic timing model of a 2-D PE array (systolic array) running one GEMM.

Used for spatial-dataflow chips whose matrix unit is a systolic grid (Groq-TSP
MXM, IPU-style tiles, TPU MXU).  The model reproduces SCALE-Sim 3.0.0's
*compute-cycle* accounting (the "Total Cycles" column of its
COMPUTE_REPORT.csv, with no memory stalls), so that its numbers can be checked
cycle-for-cycle against that simulator (scripts/scalesim_compare.py).

GEMM convention (same as SCALE-Sim's GEMM mode): C[M, N] = A[M, K] @ B[K, N];
M is the number of output rows (tokens), N the number of output columns
(output features / "filters"), K the reduction dimension.

SCALE-Sim maps the three GEMM dims onto (S_r, S_c, T): the dims laid out along
the array rows, the array columns, and the one streamed through time
(scalesim/topology_utils.py, calc_spatio_temporal_params):

    dataflow  S_r  S_c  T    what stays resident in the PEs
    ws        K    N    M    a K x N weight tile; A rows stream through
    os        M    N    K    an M x N output tile; K streams through
    is        K    M    N    a K x M input tile; B columns stream through

Each "fold" is one resident tile of R x C PEs, so
folds = ceil(S_r / R) * ceil(S_c / C), and folds run back to back without
overlap (SCALE-Sim does not pipeline fold i+1's fill under fold i's drain).

Per-fold cycles (length of the per-fold demand matrices in
scalesim/compute/systolic_compute_{ws,os,is}.py):

  ws / is: 2R + C + T - 2
      R cycles to shift the stationary tile in from the top, then T operand
      vectors streamed in, skewed by R - 1 cycles across the rows, and C - 1
      cycles for the last partial sum to ripple out across the columns.
  os:      R + C + T - 2
      Nothing is preloaded: both operands stream in (T steps), skewed by
      R - 1 and C - 1 along the two edges.  SCALE-Sim does not charge a
      separate drain of the accumulated outputs.

Total: folds * per_fold - 1.  The "- 1" is because SCALE-Sim reports the
index (zero-based) of the cycle in which the last output is written, not a
count.  Note the per-fold cost uses the full array size R, C even for a
partial edge fold: the skew is set by the physical array, not by how many PEs
are mapped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from sim.core.frozen import frozen

Dataflow = Literal["ws", "os", "is"]
_DATAFLOWS: tuple[str, ...] = ("ws", "os", "is")


@dataclass(frozen=True)
class PEArray:
    """A rows x cols grid of MAC units with a fixed dataflow."""

    rows: int
    cols: int
    dataflow: Dataflow = "ws"
    clock_hz: float = 1.0e9

    def __post_init__(self) -> None:
        if self.rows < 1 or self.cols < 1:
            raise ValueError(f"PE array must be at least 1x1, got {self.rows}x{self.cols}")
        if self.dataflow not in _DATAFLOWS:
            raise ValueError(f"dataflow must be one of {_DATAFLOWS}, got {self.dataflow!r}")
        if not self.clock_hz > 0:
            raise ValueError(f"clock_hz must be positive, got {self.clock_hz}")

    @property
    def num_pes(self) -> int:
        return self.rows * self.cols


@frozen
class GemmCycles:
    """Cycle breakdown of one GEMM on one PE array."""

    compute_cycles: int  # SCALE-Sim "Total Cycles" (stall-free)
    folds: int  # resident tiles processed one after another
    row_folds: int  # ceil(S_r / rows)
    col_folds: int  # ceil(S_c / cols)
    cycles_per_fold: int
    spatial_rows: int  # S_r: GEMM dim mapped on the array rows
    spatial_cols: int  # S_c: GEMM dim mapped on the array columns
    temporal: int  # T: GEMM dim streamed through time
    macs: int  # M * N * K
    utilization: float  # macs / (PEs * compute_cycles); SCALE-Sim "Overall Util"
    mapping_efficiency: float  # mean fraction of PEs holding a real operand per fold


def spatio_temporal_dims(dataflow: Dataflow, M: int, N: int, K: int) -> tuple[int, int, int]:
    """(S_r, S_c, T) for a GEMM under `dataflow`, as SCALE-Sim maps them."""
    if dataflow == "ws":
        return K, N, M
    if dataflow == "os":
        return M, N, K
    if dataflow == "is":
        return K, M, N
    raise ValueError(f"unknown dataflow {dataflow!r}")


def _cycles_per_fold(array: PEArray, temporal: int) -> int:
    R, C, T = array.rows, array.cols, temporal
    if array.dataflow == "os":
        return R + C + T - 2
    # ws and is both preload the stationary tile (R cycles) before streaming.
    return 2 * R + C + T - 2


def gemm_cycles(array: PEArray, M: int, N: int, K: int) -> GemmCycles:
    """Compute cycles of C[M,N] = A[M,K] @ B[K,N] on `array` (SCALE-Sim accounting)."""
    if min(M, N, K) < 1:
        raise ValueError(f"GEMM dims must be >= 1, got M={M} N={N} K={K}")
    s_r, s_c, t = spatio_temporal_dims(array.dataflow, M, N, K)
    row_folds = math.ceil(s_r / array.rows)
    col_folds = math.ceil(s_c / array.cols)
    folds = row_folds * col_folds
    per_fold = _cycles_per_fold(array, t)
    compute = folds * per_fold - 1
    macs = M * N * K
    # Mapped PEs summed over all folds is exactly S_r * S_c (each (r, c) pair of
    # the spatial dims lands on one PE in exactly one fold).
    mapping_eff = (s_r * s_c) / (folds * array.num_pes)
    return GemmCycles(
        compute_cycles=compute,
        folds=folds,
        row_folds=row_folds,
        col_folds=col_folds,
        cycles_per_fold=per_fold,
        spatial_rows=s_r,
        spatial_cols=s_c,
        temporal=t,
        macs=macs,
        utilization=macs / (array.num_pes * compute),
        mapping_efficiency=mapping_eff,
    )


def shared_gemm_cycles(array: PEArray, M: int, N: int, K: int, *, arrays: int = 1, overlap: bool = False,
                       row_cycles: float = 1.0, install_cycles: float = 0.0) -> float:
    """Cycles of one GEMM whose folds are dealt out to `arrays` identical arrays
    that run in parallel (the MXM planes of a Groq TSP, the tiles of an IPU).

    Each array takes ceil(folds / arrays) folds, one after another. A fold
    streams its T operand rows at `row_cycles` cycles per row (1 on an array
    running in its own format; more where a mode does fewer MACs per cycle).
    Its fixed cost is SCALE-Sim's skew: cycles_per_fold - T (the tile preload
    plus the row and column fill/drain).

    overlap=False is SCALE-Sim's accounting, the skew paid on every fold; with
    arrays=1 and row_cycles=1 it equals gemm_cycles(...).compute_cycles.
    overlap=True models double-buffered stationary tiles: the next tile is
    installed while the current one streams, so the skew is paid once per GEMM
    and each fold costs max(T x row_cycles, install_cycles), where
    install_cycles is the time to install one tile (0: installation always
    hides under streaming)."""
    if arrays < 1:
        raise ValueError(f"arrays must be >= 1, got {arrays}")
    c = gemm_cycles(array, M, N, K)
    folds = math.ceil(c.folds / arrays)
    skew = c.cycles_per_fold - c.temporal
    stream = c.temporal * row_cycles
    if overlap:
        return folds * max(stream, install_cycles) + skew - 1
    return folds * (stream + skew) - 1


def gemm_time_s(array: PEArray, M: int, N: int, K: int) -> float:
    """Wall time of the GEMM's compute cycles at the array's clock."""
    return gemm_cycles(array, M, N, K).compute_cycles / array.clock_hz

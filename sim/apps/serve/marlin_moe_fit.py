"""The fit of vLLM's fused Marlin MoE kernel for MXFP4 experts on Hopper (the `marlin_moe_mxfp4` kernel family,
hw_models/stack/kernel_families.yaml): its fraction of the bf16 peak at the tokens each expert gets in a prefill,
on the silicon sample's training half only (scripts/fit_moe_marlin.py runs it).

Why. The routed experts of gpt-oss-120b are MXFP4; InferenceX's vLLM launcher sets VLLM_MXFP4_USE_MARLIN=1, so
they run vLLM's fused Marlin MoE kernel (weights widened to bf16 in registers, mma.sync). No table of this
project measures it; the stack had priced it as the dense weight-only FP4 family (Marlin's dense figures, 0.70 of
the bf16 peak at every M), and the held-out rows' first token read ~2x fast at every TP, prompt length and client
count up to 64, with their decode steps within a few percent (weight streaming, which the same figures price).

What. A first token at 4 or 8 clients is mostly one prefill, whose routed experts are compute-bound at a prompt's
tokens per expert (1k tokens x 4 of 128 experts: 32 rows an expert; 8k: 256). Each training row's replay under
the dense family gives its simulated first token; the measured one exceeds it by the time the experts take beyond
the dense family's, so the fraction f that closes the row solves

    F / (P f) = measured - simulated + F / (P x 0.70)

with F the prefill's expert FLOPs on one rank (3 grouped GEMMs x 2 x prompt x top-k x hidden x expert width x
layers / TP: each expert split over the TP group) and P the bf16 peak.

The rows' f falls with TP at either prompt length (8k tokens: 0.138 at TP 2, 0.105-0.127 at TP 4, 0.071-0.102 at
TP 8): each rank multiplies 1/TP of every expert, and the kernel reaches less of the peak on smaller matrices.
So the fit is least squares of log f on an intercept per prompt length (its tokens per expert) and
log(size / size_ref), size the N x K of a grouped expert GEMM on one rank over every expert it touches (a prompt
of 1k tokens at top-4 reaches all 128, so in these rows the total and the per-expert size move together, with
TP alone: expert parallelism and decode's few experts are extrapolations); the family's `rate_points` are the
intercepts at TP 4's size, flat below the shortest prompt's (decode's few rows an expert stream their weights,
which the rate does not touch), and its `size_exponent` the slope; three significant digits each. A dense-family
replay per row is stored (COMPONENTS): the fit reads them and the measured table, so the check is seconds
(tests/test_marlin_moe_fit.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.core.model import ModelConfig

MODEL = "openai/gpt-oss-120b"
PRESET = "gpt-oss-120b"               # models.yaml: hidden 2880, expert width 2880, top-4 of 128 experts, 36 layers
MAX_CLIENTS = 8                      # a first token that is mostly one prefill, not a long queue
DENSE = "fp4_marlin_emulated"        # the family the experts took before (and the fit's replay takes)
FAMILY = "marlin_moe_mxfp4"
DENSE_FRACTION = 0.70                # DENSE's rate at every M (kernel_families.yaml)
SIZE_TP = 4                          # the layout whose grouped-GEMM size is the family's size_ref (the rows' middle)


@dataclass(frozen=True)
class Point:
    """One training row: its prompt, TP, measured first token and the dense family's simulated one (seconds)."""

    run_id: str
    isl: int
    tp: int
    measured_ttft_s: float
    dense_ttft_s: float

    def expert_flops(self, m: ModelConfig) -> float:
        """The prefill's routed-expert FLOPs on one rank (gate, up and down; each expert split over TP)."""
        return 3 * 2 * self.isl * m.experts_per_token * m.hidden_size * m.expert_intermediate * m.num_layers / self.tp

    def size(self, m: ModelConfig) -> float:
        """N x K of a grouped expert GEMM on one rank: every expert's width / TP by the hidden size."""
        return size_at(m, self.tp)

    def rows_per_expert(self, m: ModelConfig) -> int:
        return max(1, round(self.isl * m.experts_per_token / m.num_experts))

    def fraction(self, m: ModelConfig, peak_flops_per_s: float) -> float:
        """The kernel's fraction of the peak that closes this row (module doc)."""
        f = self.expert_flops(m)
        return f / (peak_flops_per_s * (self.measured_ttft_s - self.dense_ttft_s)
                    + f / DENSE_FRACTION)


def size_at(m: ModelConfig, tp: int) -> float:
    return m.num_experts * m.expert_intermediate * m.hidden_size / tp


def fit(points: list[Point], m: ModelConfig, peak_flops_per_s: float) -> tuple[list[list[float]], float, float]:
    """The family's figures (module doc): rate_points [[M, fraction at size_ref]] (flat below the first M, never
    falling as M grows: kernel_families.py), size_exponent and size_ref; three significant digits (two decimals had
    moved the intercepts by 3-4%)."""
    ms = sorted({p.rows_per_expert(m) for p in points})
    ref = size_at(m, SIZE_TP)
    x = np.array([[float(p.rows_per_expert(m) == r) for r in ms] + [np.log(p.size(m) / ref)] for p in points])
    y = np.log([p.fraction(m, peak_flops_per_s) for p in points])
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    out, floor = [], 0.0
    for rows, a in zip(ms, coef[:-1]):
        floor = max(floor, _sig3(float(np.exp(a))))
        out.append([rows, floor])
    curve = [[1, out[0][1]], *out] if out and out[0][0] > 1 else out
    return curve, _sig3(float(coef[-1])), ref


def _sig3(x: float) -> float:
    return float(f"{x:.3g}")


def save(points: list[Point], path: Path) -> None:
    """The replays only (no measured figure: those are the shared table's)."""
    path.write_text(json.dumps([dict(run_id=p.run_id, isl=p.isl, tp=p.tp, dense_ttft_s=p.dense_ttft_s)
                                for p in points], indent=1) + "\n")


def stored_ids(path: Path) -> set[str]:
    return {d["run_id"] for d in json.loads(path.read_text())}


def load(path: Path, measured: dict[str, float]) -> list[Point]:
    """The stored replays of the rows `measured` holds (run id -> seconds), with their measured first token."""
    return [Point(d["run_id"], d["isl"], d["tp"], measured[d["run_id"]], d["dense_ttft_s"])
            for d in json.loads(path.read_text()) if d["run_id"] in measured]

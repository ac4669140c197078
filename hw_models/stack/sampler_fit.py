"""The fit of the vllm stack's `top_p_sampler` (hw_models.stack.sampler) on published timings of vLLM's
PyTorch-native top-p masking: scripts/fit_sampler.py prints it, tests/test_sampler.py checks the shipped
figures are its output."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from hw_models.stack.sampler import mask_seconds

VOCAB = 131072
H100_BYTES_PER_S = 3.35e12   # hw_models/presets/h100_sxm.yaml
H200_BYTES_PER_S = 4.8e12    # hw_models/presets/h200.yaml


@dataclass(frozen=True)
class Timing:
    gpu: str
    rows: int
    seconds: float
    dram_bytes_per_s: float
    source: str


# benchmarks/benchmark_topk_topp.py, scenario topp_whole (top-p on every row), PyTorch column
PUBLISHED = (
    Timing("H100", 1, 0.128e-3, H100_BYTES_PER_S, "vllm-project/vllm#42191 (benchmark results on a H100)"),
    Timing("H100", 512, 8.787e-3, H100_BYTES_PER_S, "vllm-project/vllm#33538 (the same author's H100 sweep)"),
    Timing("H100", 1024, 16.312e-3, H100_BYTES_PER_S, "vllm-project/vllm#33538"),
    Timing("H200", 64, 1.132e-3, H200_BYTES_PER_S, "vllm-project/vllm#51507 (the author's H200 sweep)"),
    Timing("H200", 128, 4.180e-3, H200_BYTES_PER_S, "vllm-project/vllm#51507"),
    Timing("H200", 512, 6.194e-3, H200_BYTES_PER_S, "vllm-project/vllm#51507"),
)


@dataclass(frozen=True)
class SamplerFit:
    fixed_s: float
    bytes_per_logit: float
    block_s_per_logit: float

    def seconds(self, t: Timing) -> float:
        return mask_seconds(t.rows, VOCAB, t.dram_bytes_per_s, self.fixed_s, self.bytes_per_logit, self.block_s_per_logit)


def fit(points: tuple[Timing, ...] = PUBLISHED) -> SamplerFit:
    """Least squares on relative error, in three parameters (module doc of hw_models.stack.sampler)."""
    def resid(p: np.ndarray) -> np.ndarray:
        f = SamplerFit(p[0] * 1e-3, p[1] * 100.0, p[2] * 1e-9)
        return np.array([f.seconds(t) / t.seconds - 1.0 for t in points])
    r = least_squares(resid, x0=[0.1, 4.0, 30.0], bounds=([0.0, 0.1, 0.0], [10.0, 100.0, 1000.0]))
    return SamplerFit(float(r.x[0]) * 1e-3, float(r.x[1]) * 100.0, float(r.x[2]) * 1e-9)

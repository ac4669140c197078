"""Prefill attention curves: a causal kernel's fraction of the 16-bit tensor peak over the sequence length, per
(query, KV) dtype pair (hw_models.stack.attention_kernels' module doc has the model and where the figures come from)."""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, field_validator

from sim.core.errors import ConfigError
from sim.core.formats import get_format
from sim.core.schema import Quantity, Strict


class Prefill(Strict):
    fixed_s: Quantity = Field(ge=0)
    rate_points: list[tuple[int, float]] = Field(min_length=1)   # (q_len, fraction of the bf16 peak)
    walk_s_per_token: Quantity = Field(default=0.0, ge=0)         # critical path: the last query tile's walk
    rows: int = 0
    fit_mape: float = 0.0

    @field_validator("rate_points")
    @classmethod
    def _monotone(cls, v: list[tuple[int, float]]) -> list[tuple[int, float]]:
        for (l0, f0), (l1, f1) in zip(v, v[1:]):
            if l1 <= l0 or f1 < f0:
                raise ValueError(f"({l0}, {f0}) then ({l1}, {f1}): q_len must increase and the fraction not fall")
        if any(not 0 < f <= 1 for _, f in v):
            raise ValueError("fractions must lie in (0, 1]")
        return v

    def fraction(self, q_len: float) -> float:
        """The fraction at `q_len`: a power law between the fitted lengths, flat past the ends (module doc)."""
        xs = [math.log(p[0]) for p in self.rate_points]
        return float(np.exp(np.interp(math.log(max(q_len, 1)), xs, [math.log(p[1]) for p in self.rate_points])))

    def walk_s(self, kv_len: int) -> float:
        return kv_len * self.walk_s_per_token

    def time_s(self, flops: float, q_len: int, peak: float, kv_len: int = 0) -> float:
        return self.fixed_s + flops / (peak * self.fraction(chunk_length(q_len, kv_len))) + self.walk_s(kv_len)


def chunk_length(q_len: int, kv_len: int) -> float:
    """The length a prefill curve is read at for the last q_len of kv_len queries: the whole prompt n with as many
    causal (query, key) pairs, n (n + 1) / 2 = q_len (kv_len - (q_len - 1) / 2) (sim.core.lowering.causal_keys);
    q_len itself on a whole prompt (kv_len = q_len, as every measured row; no keys: q_len). Module doc of
    hw_models.stack.attention_kernels says why."""
    kv = max(kv_len, q_len)
    return (math.sqrt(1 + 4 * (2 * q_len * kv - q_len * q_len + q_len)) - 1) / 2


# The attention kernels' tables measure bf16; an fp16 tensor runs the same kernels at the same bytes
# (FlashAttention-2/3, FlashInfer, TensorRT-LLM's XQA/FMHA and cuDNN's SDPA each instantiate both 16-bit float types),
# so it takes the bf16 figures (a trial's fp16 cache had silently fallen back to the roofline, 27-46% fast).
SAME_KERNELS = {"fp16": "bf16"}


def kernel_format(fmt: str) -> str:
    """The format whose fitted figures `fmt` takes (SAME_KERNELS), by its canonical name."""
    name = get_format(fmt).name
    return SAME_KERNELS.get(name, name)


def format_keys(v: dict) -> dict:
    try:
        return {same_kernels_refused(get_format(k).name): d for k, d in v.items()}
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def same_kernels_refused(name: str) -> str:
    """A family's figures or a rule keyed by a format that takes another's figures (SAME_KERNELS) would never be
    read: refused (a review), naming the format to write."""
    if name in SAME_KERNELS:
        raise ValueError(f"{name}: takes the {SAME_KERNELS[name]} figures (prefill_curves.SAME_KERNELS); write "
                         f"{SAME_KERNELS[name]}")
    return name


class PrefillCurves(Strict):
    """One architecture's prefill curves, per (query, KV) dtype pair (module doc)."""
    prefill: Prefill | None = None              # a 16-bit KV cache (and any format without its own curve)
    prefill_kv: dict[str, Prefill] = {}         # KV format -> its own curve (16-bit query), where the kernel runs another path
    prefill_fp8_query: Prefill | None = None    # FP8 query on an FP8 cache: FP8 FMHA math (module doc)

    @field_validator("prefill_kv")
    @classmethod
    def _kv_formats(cls, v: dict) -> dict:
        return format_keys(v)

    def curves(self, kv_fmt: str | None, q_fmt: str | None = None) -> list[Prefill | None]:
        """The curves a query in `q_fmt` on a KV cache stored in `kv_fmt` may take, the most specific first:
        FP8 math (both in FP8), the KV format's own curve, the 16-bit one (module doc); None where not given."""
        out = []
        if kv_fmt:
            kv = get_format(kv_fmt)
            if q_fmt and get_format(q_fmt).bits <= 8 and kv.bits <= 8:
                out.append(self.prefill_fp8_query)
            out.append(self.prefill_kv.get(kernel_format(kv.name)))
        return [*out, self.prefill]

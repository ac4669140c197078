"""scripts/fit_kernels.py's prefill attention fit (nnls_prefill, hw_models.stack.attention_kernels.Prefill's model):
it recovers a curve planted in exact rows, and its growth cap keeps a longer sequence from being faster."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from fit_kernels import _growth_caps, nnls_prefill  # noqa: E402

PEAK = 1e15       # FLOP/s
OTHERS = 1e-6     # s: what sim charges for the call's other ops


def _rows(lens: list[int], fracs: list[float], fixed: float, walk: float) -> tuple[np.ndarray, ...]:
    """Exact rows of the model: batch x heads in (1, 4, 32, 256) at each length, causal FLOPs
    b h q (q + 1) / 2 x 4 x 128."""
    idx, ideal, kv = [], [], []
    for i, q in enumerate(lens):
        for bh in (1, 4, 32, 256):
            idx.append(i)
            ideal.append(bh * q * (q + 1) / 2 * 4 * 128 / PEAK)
            kv.append(float(q))
    idx, ideal, kv = np.array(idx), np.array(ideal), np.array(kv)
    t = OTHERS + fixed + walk * kv + ideal / np.array(fracs)[idx]
    return idx, ideal, t, np.full_like(t, OTHERS), kv


def test_growth_cap_by_hand():
    """From 16 to 32 tokens the causal FLOPs grow as q (q + 1): the fraction may grow at most
    (32 / 16)^(33 / 17) = 3.84x there (x 0.99 for rounding), from 1024 to 2048 (2^(2049 / 1025)) = 3.998x."""
    assert _growth_caps([16, 32, 1024, 2048]) == pytest.approx(
        [0.99 * 2 ** (33 / 17), 0.99 * 32 ** (65 / 33), 0.99 * 2 ** (2049 / 1025)])


def test_recovers_a_planted_curve():
    """Fixed 10 us, 5 ns per key walked, fractions 0.05 -> 0.55 (inside the caps): recovered to 1e-6."""
    lens, fracs = [16, 64, 256, 1024, 4096], [0.05, 0.15, 0.3, 0.45, 0.55]
    got = nnls_prefill(*_rows(lens, fracs, 10e-6, 5e-9), lens)
    assert got == pytest.approx([10e-6, 5e-9, *fracs], rel=1e-6)


def test_growth_cap_holds_where_the_rows_jump():
    """Rows whose fraction jumps 10x from 32 to 64 tokens (the time would fall with the length): the fit stays
    under the cap, its fractions never fall, and the fitted call never gets faster with a longer sequence."""
    lens, fracs = [16, 32, 64, 128], [0.01, 0.02, 0.2, 0.25]
    got = nnls_prefill(*_rows(lens, fracs, 5e-6, 0.0), lens)
    f = got[2:]
    assert np.all(np.diff(f) >= 0) and np.all(f[1:] / f[:-1] <= _growth_caps(lens) * (1 + 1e-6))
    q = np.arange(16, 129)
    frac = np.exp(np.interp(np.log(q), np.log(lens), np.log(f)))
    time = got[0] + got[1] * q + 32 * q * (q + 1) / 2 * 512 / PEAK / frac
    assert np.all(np.diff(time) >= 0)

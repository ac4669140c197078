"""Numeric emulation of the formats in `sim.core.formats`: quantise, then dequantise.

`quantize(array, fmt)` returns what a kernel would see after storing `array`
in `fmt` and reading it back, as float32. Element rounding is done by ml_dtypes
casts (round to nearest, ties to even); scales follow:

* plain fp8/fp6/fp4: values are clamped to +-max_normal before the cast
  (saturating, as OCP MX / microxcaling; ml_dtypes' own cast turns an
  out-of-range e4m3fn value into NaN). fp32/fp16/bf16 keep IEEE behaviour
  (overflow to Inf).
* MX (OCP v1.0, "FLOOR" method): per block of 32 along the last axis,
  shared_exp = floor(log2(amax)) - emax_elem, clamped below at -127 (an
  all-zero block gets -127); X = 2^shared_exp stored as E8M0;
  P = saturate(V / X) cast to the element type; value = P * X. MXINT8 elements
  are k/64 with |k| <= 127 (symmetric, as microxcaling). Microxcaling rounds
  ties away from zero; we round ties to even (ml_dtypes, gfloat, torchao).
* NVFP4 (torchao two-level): tensor_scale = amax/(448*6) in fp32;
  block_scale = E4M3(clamp(block_amax/6/tensor_scale, 2^-6, 448));
  P = E2M1(clamp(x/(tensor_scale*block_scale), -6, 6)).
* block (fp8_block128): per 128 x 128 tile of the last two axes (a 1-D input:
  per 128 along it), scale = amax / 448 in fp32 (an all-zero tile: 1; at least
  the smallest fp32 subnormal);
  P = E4M3(saturate(x / scale)) rounded once from the float32 quotient, as the
  engines' quantize kernels do; value = P * scale.
* int: symmetric absmax, scale = amax/qmax rounded to the scale format (fp16,
  or fp32 per tensor; fp16 scales clamp to [2^-24, 65504]), q = clamp(rint(x/scale), -2^(b-1), 2^(b-1)-1).
  `_asym` formats: AWQ-style min-max, scale = (max-min)/(2^b-1) (fp16),
  zero = clamp(-rint(min/scale), 0, 2^b-1), q = clamp(rint(x/scale)+zero, 0, 2^b-1),
  value = (q-zero)*scale.

Non-finite inputs: NaN stays NaN; +-Inf stays +-Inf for fp32/fp16/bf16/e5m2 and
becomes NaN for element types without Inf. In every scaled format a NaN or Inf
makes its block's scale NaN (microxcaling: max() propagates NaN, Inf overflows
the E8M0 range), so the whole block (per-channel: row; per-tensor: tensor)
reads back as NaN. The NVFP4 tensor scale is taken over finite values only.
Ragged last axes are padded with zeros to whole blocks (zeros never change a
block's amax) and cut back afterwards. Input is converted to float32 first.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from sim.core.errors import ConfigError
from sim.core.formats import NumberFormat, get_format

_E4M3_TINY = float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).tiny)  # 2^-6
_E4M3_MAX = 448.0
_FP4_MAX = 6.0
_FP16_MAX = 65504.0
_FP16_MIN_SUBNORMAL = 2.0 ** -24
_INF_TYPES = {"float32", "float16", "bfloat16", "float8_e5m2"}


def _dtype(name: str):
    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)


def _cast_elements(v: np.ndarray, fmt: NumberFormat) -> np.ndarray:
    """Round v to fmt's element type and back (float32), saturating if fmt.saturate.

    v must be float32-exact (a float32 input, or one divided by a power of two), so
    the single ml_dtypes cast is the only rounding."""
    v = np.asarray(v, dtype=np.float32)
    dt = _dtype(fmt.element_dtype)
    c = np.clip(v, np.float32(-fmt.max_normal), np.float32(fmt.max_normal)) if fmt.saturate else v
    with np.errstate(over="ignore"):   # fp16/bf16 overflow to Inf is the intended IEEE result
        out = c.astype(dt).astype(np.float32)
    nan = np.isnan(v)
    if nan.any():
        out[nan] = np.nan  # ml_dtypes maps NaN to -0 for fp4/fp6
    inf = np.isinf(v)
    if inf.any():
        out[inf] = v[inf] if fmt.element_dtype in _INF_TYPES else np.nan
    return out


def _blocks(x: np.ndarray, block: int) -> np.ndarray:
    """[..., n] -> [..., ceil(n/block), block], zero padded."""
    n = x.shape[-1]
    nb = max(1, math.ceil(n / block))
    pad = nb * block - n
    if pad:
        x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)])
    return x.reshape(x.shape[:-1] + (nb, block))


def _unblocks(b: np.ndarray, n: int) -> np.ndarray:
    return b.reshape(b.shape[:-2] + (-1,))[..., :n]


def _finite_amax(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-block (last axis) amax over finite values, and a mask of blocks holding NaN/Inf."""
    finite = np.isfinite(b)
    amax = np.max(np.where(finite, np.abs(b), 0.0), axis=-1, keepdims=True)
    bad = ~finite.all(axis=-1, keepdims=True)
    return amax, bad


def _quantize_mx(x: np.ndarray, fmt: NumberFormat) -> np.ndarray:
    n = x.shape[-1]
    b = _blocks(x, fmt.block_size)
    amax, bad = _finite_amax(b)
    _, e = np.frexp(amax.astype(np.float64))           # amax = m * 2^e, m in [0.5, 1)
    shared = np.where(amax > 0, e.astype(np.int64) - 1, -127) - fmt.emax
    bad = bad | (shared > 127)                          # E8M0 overflow -> NaN scale
    shared = np.clip(shared, -127, 127)
    # 2^shared is exact in float32 (2^-127 is a float32 subnormal), and so is the E8M0 round trip.
    scale = np.ldexp(np.float32(1.0), shared.astype(np.int32)).astype(np.float32)
    scale = scale.astype(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    v = b / scale        # exact: dividing a float32 by a power of two (underflow only far below the grid)
    if fmt.kind == "int":   # MXINT8: grid k/64, |k| <= 127
        v = np.where(np.isfinite(v), v, 0.0)   # blocks holding NaN/Inf are set to NaN below
        k = np.clip(np.rint(v * np.float32(64.0)), -127, 127).astype(np.int8)
        p = k.astype(np.float32) / np.float32(64.0)
    else:
        p = _cast_elements(v, fmt)
    out = p * scale      # one correctly rounded float32 product (only rounds in the subnormal range)
    out = np.where(bad, np.float32(np.nan), out)
    return _unblocks(out, n).astype(np.float32, copy=False)


def _quantize_nvfp4(x: np.ndarray, fmt: NumberFormat) -> np.ndarray:
    n = x.shape[-1]
    finite = np.isfinite(x)
    amax_t = np.float32(np.max(np.abs(x[finite]))) if finite.any() else np.float32(0)
    ts = np.float32(amax_t / np.float32(_E4M3_MAX * _FP4_MAX))
    if not ts > 0:
        ts = np.float32(1.0)   # all-zero tensor (or only tiny values): any scale gives zeros
    b = _blocks(x, fmt.block_size)
    amax, bad = _finite_amax(b)
    bs = (amax.astype(np.float32) / np.float32(_FP4_MAX)) / ts
    bs = np.clip(bs, _E4M3_TINY, _E4M3_MAX).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    total = (ts * bs).astype(np.float32)
    v = np.clip(b / total, -_FP4_MAX, _FP4_MAX)
    p = v.astype(ml_dtypes.float4_e2m1fn).astype(np.float32)
    out = (p * bs) * ts
    out = np.where(bad, np.nan, out)
    return _unblocks(out, n).astype(np.float32)


def _quantize_block2d(x: np.ndarray, fmt: NumberFormat) -> np.ndarray:
    x2 = x.reshape((1,) + x.shape) if x.ndim == 1 else x
    r, c = x2.shape[-2:]
    br, bc = fmt.block_rows, fmt.block_size
    pr, pc = -r % br, -c % bc
    p = np.pad(x2, [(0, 0)] * (x2.ndim - 2) + [(0, pr), (0, pc)])
    t = p.reshape(p.shape[:-2] + ((r + pr) // br, br, (c + pc) // bc, bc))
    finite = np.isfinite(t)
    amax = np.max(np.where(finite, np.abs(t), 0.0), axis=(-3, -1), keepdims=True)
    bad = ~finite.all(axis=(-3, -1), keepdims=True)
    scale = np.where(amax > 0, amax / np.float32(fmt.max_normal), 1.0).astype(np.float32)
    scale = np.maximum(scale, np.float32(2.0 ** -149))   # the smallest fp32 scale (a tile of subnormals)
    with np.errstate(over="ignore", invalid="ignore"):
        out = _cast_elements((t / scale).astype(np.float32), fmt) * scale
    out = np.where(bad, np.float32(np.nan), out).reshape(p.shape)[..., :r, :c]
    return out.reshape(x.shape).astype(np.float32)


def _round_scale(s: np.ndarray, fmt: NumberFormat) -> np.ndarray:
    """Round a positive scale to how it is stored (fp16 block scales, fp32 tensor scale)."""
    if fmt.scale_format == "fp16":
        s = np.clip(s, _FP16_MIN_SUBNORMAL, _FP16_MAX).astype(np.float16)
    else:
        s = s.astype(np.float32)
    return s.astype(np.float64)


def _quantize_int(x: np.ndarray, fmt: NumberFormat) -> np.ndarray:
    shape = x.shape
    if fmt.block_size is None:            # per tensor
        g = x.reshape(1, 1, -1)
        n = g.shape[-1]
    else:
        n = shape[-1]
        g = _blocks(x, fmt.block_size or max(1, n))
    g = g.astype(np.float64)
    bits = fmt.bits
    qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    finite = np.isfinite(g)
    bad = ~finite.all(axis=-1, keepdims=True)
    gz = np.where(finite, g, 0.0)
    if fmt.zero_bits:   # asymmetric min-max (AWQ style)
        levels = 2 ** bits - 1
        hi = np.max(gz, axis=-1, keepdims=True)
        lo = np.min(gz, axis=-1, keepdims=True)
        rng = hi - lo
        s = _round_scale(np.where(rng > 0, rng / levels, 1.0), fmt)
        zero = np.clip(-np.rint(lo / s), 0, levels)
        q = np.clip(np.rint(gz / s) + zero, 0, levels)
        out = (q - zero) * s
    else:
        amax = np.max(np.abs(gz), axis=-1, keepdims=True)
        s = _round_scale(np.where(amax > 0, amax / qmax, 1.0), fmt)
        q = np.clip(np.rint(gz / s), qmin, qmax)
        q = q.astype(_dtype(fmt.element_dtype)).astype(np.float64)  # exact: already in range
        out = q * s
    out = np.where(bad, np.nan, out)
    if fmt.block_size is None:
        return out.reshape(shape).astype(np.float32)
    return _unblocks(out, n).astype(np.float32)


def quantize(array, fmt: str | NumberFormat) -> np.ndarray:
    """Store `array` in `fmt` and read it back: the dequantised values as float32.

    Blocks/groups run along the last axis; the output has the input's shape."""
    f = get_format(fmt)
    if not f.element_dtype:
        raise ConfigError(f"number format {f.name!r} has no element_dtype, so it cannot be emulated")
    with np.errstate(over="ignore"):   # a value past float32's range is +-inf, as documented: no numpy warning
        x = np.asarray(array, dtype=np.float32)
    if x.size == 0:
        return x.copy()
    scalar = x.ndim == 0
    if scalar:
        x = x.reshape(1)
    if f.family == "plain":
        out = _cast_elements(x, f).astype(np.float32)
    elif f.family == "mx":
        out = _quantize_mx(x, f)
    elif f.family == "nvfp4":
        out = _quantize_nvfp4(x, f)
    elif f.family == "int":
        out = _quantize_int(x, f)
    elif f.family == "block":
        out = _quantize_block2d(x, f)
    else:
        raise ConfigError(f"number format {f.name!r}: no numeric emulation for family {f.family!r}")
    return out.reshape(()) if scalar else out


def quantization_error(array, fmt: str | NumberFormat) -> dict[str, float]:
    """Error of `quantize(array, fmt)` against the input as given (a float64 array's own values, not their
    float32 rounding: its fp32 row is that rounding's error, not exact), over finite inputs.

    Returns rmse, rel_rmse (rmse / rms of the input), max_abs_err, sqnr_db
    (10 log10(signal power / error power); inf when exact), and rms."""
    ref = np.asarray(array, dtype=np.float64)
    with np.errstate(over="ignore"):   # beyond float32's range reads as an infinite error below
        y = quantize(ref.astype(np.float32), fmt)
    keep = np.isfinite(ref)
    xd = ref[keep]
    err = y[keep].astype(np.float64) - xd
    if xd.size == 0:
        nan = float("nan")
        return {"rmse": nan, "rel_rmse": nan, "max_abs_err": nan, "sqnr_db": nan, "rms": nan}
    # The powers on the inputs' own scale (peak 1), so values past 1e154 square without overflowing (a trial's
    # 1e308 array leaked numpy's warning and read rel. RMSE nan); the ratios do not depend on the scale.
    peak = float(np.max(np.abs(xd))) or 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        mse_unit, sig_unit = float(np.mean((err / peak) ** 2)), float(np.mean((xd / peak) ** 2))
    rmse, rms = math.sqrt(mse_unit) * peak, math.sqrt(sig_unit) * peak
    rel = math.sqrt(mse_unit / sig_unit) if sig_unit > 0 else (0.0 if mse_unit == 0 else math.inf)
    if mse_unit == 0:
        sqnr = math.inf
    elif sig_unit == 0 or not math.isfinite(mse_unit):   # a format that overflows (fp16 past 65504) has an infinite error
        sqnr = -math.inf
    else:
        sqnr = 10 * math.log10(sig_unit / mse_unit)
    return {"rmse": rmse, "rel_rmse": rel, "max_abs_err": float(np.max(np.abs(err))),
            "sqnr_db": sqnr, "rms": rms}

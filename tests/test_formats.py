"""Tests for sim.core.formats (storage bytes) and sim.core.quantize (numeric emulation).

Every expected storage figure below is derived by hand, written as arithmetic.
Shapes: A = 4096 x 4096 (16,777,216 elements), R = 4096 x 4000 (16,384,000
elements; 4000 = 125 * 32 = 250 * 16, so only int groups of 64/128 are ragged
there) and Q = 4096 x 4001 (ragged for every block size).
"""

from __future__ import annotations

import dataclasses
import math

import ml_dtypes
import numpy as np

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sim.core.errors import ConfigError
from sim.core.formats import NumberFormat, get_format, known_formats
from sim.core.quantize import quantization_error, quantize

A = (4096, 4096)
R = (4096, 4000)
Q = (4096, 4001)

# (format, shape) -> bytes, by hand.
EXPECTED_BYTES = {
    # --- plain element formats: elements * bits / 8, no scales ---
    ("fp32", A): 4096 * 4096 * 4,                      # 67,108,864
    ("fp32", R): 4096 * 4000 * 4,                      # 65,536,000
    ("fp16", A): 4096 * 4096 * 2,                      # 33,554,432
    ("fp16", R): 4096 * 4000 * 2,                      # 32,768,000
    ("bf16", A): 4096 * 4096 * 2,
    ("bf16", R): 4096 * 4000 * 2,
    ("fp8_e4m3", A): 4096 * 4096,                      # 16,777,216
    ("fp8_e4m3", R): 4096 * 4000,                      # 16,384,000
    ("fp8_e5m2", A): 4096 * 4096,
    ("fp8_e5m2", R): 4096 * 4000,
    ("fp6_e3m2", A): 4096 * 4096 * 6 // 8,             # 12,582,912 (4 elements per 3 bytes)
    ("fp6_e3m2", R): 4096 * 4000 * 6 // 8,             # 12,288,000
    ("fp6_e2m3", A): 4096 * 4096 * 6 // 8,
    ("fp6_e2m3", R): 4096 * 4000 * 6 // 8,
    ("fp4_e2m1", A): 4096 * 4096 // 2,                 # 8,388,608 (2 per byte)
    ("fp4_e2m1", R): 4096 * 4000 // 2,                 # 8,192,000
    # --- MX: + one 1-byte E8M0 scale per 32 elements of a row ---
    # A: 4096 rows * (4096 / 32 = 128) blocks = 524,288 scale bytes
    # R: 4096 rows * (4000 / 32 = 125) blocks = 512,000 scale bytes
    ("mxfp8_e4m3", A): 4096 * 4096 + 4096 * 128,       # 16,777,216 + 524,288 = 17,301,504
    ("mxfp8_e4m3", R): 4096 * 4000 + 4096 * 125,       # 16,384,000 + 512,000 = 16,896,000
    ("mxfp8_e5m2", A): 4096 * 4096 + 4096 * 128,
    ("mxfp8_e5m2", R): 4096 * 4000 + 4096 * 125,
    ("mxint8", A): 4096 * 4096 + 4096 * 128,
    ("mxint8", R): 4096 * 4000 + 4096 * 125,
    ("mxfp6_e3m2", A): 4096 * 4096 * 6 // 8 + 4096 * 128,   # 12,582,912 + 524,288 = 13,107,200
    ("mxfp6_e3m2", R): 4096 * 4000 * 6 // 8 + 4096 * 125,   # 12,288,000 + 512,000 = 12,800,000
    ("mxfp6_e2m3", A): 4096 * 4096 * 6 // 8 + 4096 * 128,
    ("mxfp6_e2m3", R): 4096 * 4000 * 6 // 8 + 4096 * 125,
    ("mxfp4", A): 8_388_608 + 524_288,                 # the spec example: 8,912,896
    ("mxfp4", R): 4096 * 4000 // 2 + 4096 * 125,       # 8,192,000 + 512,000 = 8,704,000
    # --- NVFP4: fp4 elements + 1-byte E4M3 scale per 16 + one 4-byte fp32 tensor scale ---
    ("nvfp4", A): 4096 * 4096 // 2 + 4096 * (4096 // 16) + 4,   # 8,388,608 + 1,048,576 + 4 = 9,437,188
    ("nvfp4", R): 4096 * 4000 // 2 + 4096 * (4000 // 16) + 4,   # 8,192,000 + 1,024,000 + 4 = 9,216,004
    # --- fp8_block128: 1-byte e4m3 elements + one 4-byte fp32 scale per 128 x 128 tile ---
    ("fp8_block128", A): 4096 * 4096 + 32 * 32 * 4,    # 32 x 32 tiles: 16,777,216 + 4,096 = 16,781,312
    ("fp8_block128", R): 4096 * 4000 + 32 * 32 * 4,    # 4000 / 128 = 31.25 -> 32 tile columns: 16,388,096
    # --- int8: per output channel (row) 2-byte fp16 scale ---
    ("int8", A): 4096 * 4096 + 4096 * 2,               # 16,777,216 + 8,192 = 16,785,408
    ("int8", R): 4096 * 4000 + 4096 * 2,               # 16,384,000 + 8,192 = 16,392,192
    # --- int4: groups of 128, 2-byte fp16 scale per group ---
    ("int4", A): 4096 * 4096 // 2 + 4096 * 32 * 2,     # 8,388,608 + 262,144 = 8,650,752
    # 4000 / 128 = 31.25 -> 32 groups per row (the last holds 32 elements)
    ("int4", R): 4096 * 4000 // 2 + 4096 * 32 * 2,     # 8,192,000 + 262,144 = 8,454,144
}

# Parameterised int names (not in known_formats()), also by hand.
EXPECTED_INT_VARIANTS = {
    ("int4_g128", A): 4096 * 4096 // 2 + 4096 * 32 * 2,        # same as int4
    ("int4_g64", A): 4096 * 4096 // 2 + 4096 * 64 * 2,         # 8,388,608 + 524,288 = 8,912,896
    ("int4_g64", R): 4096 * 4000 // 2 + 4096 * 63 * 2,         # 4000/64 = 62.5 -> 63 groups: 8,192,000 + 516,096
    ("int8_g64", A): 4096 * 4096 + 4096 * 64 * 2,              # 16,777,216 + 524,288 = 17,301,504
    ("int8_g64", R): 4096 * 4000 + 4096 * 63 * 2,              # 16,384,000 + 516,096 = 16,900,096
    ("int4_pc", A): 4096 * 4096 // 2 + 4096 * 2,               # 8,388,608 + 8,192 = 8,396,800
    ("int4_pc", R): 4096 * 4000 // 2 + 4096 * 2,               # 8,192,000 + 8,192 = 8,200,192
    ("int8_pc", A): 4096 * 4096 + 4096 * 2,                    # same as int8
    ("int8_pt", A): 4096 * 4096 + 4,                           # one fp32 scale
    ("int8_pt", R): 4096 * 4000 + 4,
    # asym: + one 4-bit integer zero-point per group of 128 (half a byte)
    ("int4_g128_asym", A): 4096 * 4096 // 2 + 4096 * 32 * 2 + 4096 * 32 // 2,  # 8,388,608 + 262,144 + 65,536
    ("int4_g128_asym", R): 4096 * 4000 // 2 + 4096 * 32 * 2 + 4096 * 32 // 2,  # 8,192,000 + 262,144 + 65,536
    ("int8_asym", A): 4096 * 4096 + 4096 * 2 + 4096 * 1,       # per channel, fp16 scale + int8 zero
}

# Ragged for every block size: 4001 = 125 * 32 + 1 = 250 * 16 + 1 = 31 * 128 + 33.
EXPECTED_RAGGED = {
    ("fp4_e2m1", Q): math.ceil(4096 * 4001 / 2),              # 16,388,096 elements / 2 = 8,194,048
    ("fp6_e2m3", Q): 4096 * 4001 * 6 // 8,                     # 98,328,576 bits / 8 = 12,291,072
    ("mxfp4", Q): 4096 * 4001 // 2 + 4096 * 126,               # 126 blocks per row: 8,194,048 + 516,096
    ("mxfp8_e4m3", Q): 4096 * 4001 + 4096 * 126,               # 16,388,096 + 516,096
    ("mxfp6_e3m2", Q): 4096 * 4001 * 6 // 8 + 4096 * 126,      # 12,291,072 + 516,096
    ("nvfp4", Q): 4096 * 4001 // 2 + 4096 * 251 + 4,           # 251 blocks per row: 8,194,048 + 1,028,096 + 4
    ("int4", Q): 4096 * 4001 // 2 + 4096 * 32 * 2,             # 32 groups per row
    ("int8", Q): 4096 * 4001 + 4096 * 2,
    ("fp8_block128", Q): 4096 * 4001 + 32 * 32 * 4,   # 4001 / 128 -> 32 tile columns, 4096 / 128 = 32 rows
    ("fp8_block128", (129, 128)): 129 * 128 + 2 * 4,   # a 129-row weight: a second, one-row tile
    ("fp8_block128", (300,)): 300 + 3 * 4,             # 1-D: blocks of 128 along it
}


# ---------------------------------------------------------------- registry / sizes

def test_every_known_format_has_hand_derived_bytes():
    covered = {name for name, _ in EXPECTED_BYTES}
    assert covered == set(known_formats())
    for name in known_formats():
        assert (name, A) in EXPECTED_BYTES and (name, R) in EXPECTED_BYTES


@pytest.mark.parametrize("key", sorted(EXPECTED_BYTES) + sorted(EXPECTED_INT_VARIANTS) + sorted(EXPECTED_RAGGED))
def test_storage_bytes_by_hand(key):
    expected = {**EXPECTED_BYTES, **EXPECTED_INT_VARIANTS, **EXPECTED_RAGGED}[key]
    name, shape = key
    fmt = get_format(name)
    assert fmt.storage_bytes(shape) == expected
    assert fmt.element_bytes(shape) + fmt.scale_bytes(shape) == expected


def test_mxfp4_spec_example():
    fmt = get_format("mxfp4")
    assert fmt.element_bytes(A) == 8_388_608
    assert fmt.scale_bytes(A) == 524_288
    assert fmt.bits_per_element(A) == 4.25
    assert get_format("nvfp4").nominal_bits_per_element == 4.5
    assert get_format("mxfp6").nominal_bits_per_element == 6.25


def test_odd_element_counts_round_up():
    assert get_format("fp4").storage_bytes((3, 5)) == 8          # 15 * 4 = 60 bits -> 7.5 -> 8
    assert get_format("fp6_e3m2").storage_bytes((3, 5)) == 12    # 90 bits -> 11.25 -> 12
    assert get_format("mxfp4").storage_bytes((3, 5)) == 8 + 3    # one scale per row
    assert get_format("fp16").storage_bytes(()) == 2             # a scalar
    assert get_format("mxfp4").storage_bytes((40,)) == 20 + 2    # 1-D: 2 blocks


def test_format_fields():
    f = get_format("mxfp4")
    assert (f.bits, f.block_size, f.scale_bits, f.scale_format) == (4, 32, 8, "e8m0")
    assert f.element_dtype == "float4_e2m1fn" and f.max_normal == 6.0 and f.emax == 2
    n = get_format("nvfp4")
    assert (n.block_size, n.scale_bits, n.scale_format, n.tensor_scale_bits, n.tensor_scale_format) == \
        (16, 8, "e4m3", 32, "fp32")
    m = get_format("mxint8")
    assert m.kind == "int" and m.max_normal == 127 / 64 and m.scale_format == "e8m0"
    assert get_format("int8").block_size == 0 and get_format("int8").scale_format == "fp16"
    assert get_format("int4").block_size == 128 and get_format("int4").element_dtype == "int4"
    assert get_format("fp16").block_size is None and get_format("fp16").scale_bits == 0


@pytest.mark.parametrize("name", known_formats())
def test_element_dtype_and_max_normal_match_ml_dtypes(name):
    f = get_format(name)
    dt = np.dtype(getattr(ml_dtypes, f.element_dtype, None) or f.element_dtype)
    if f.kind == "float":
        assert float(ml_dtypes.finfo(dt).max) == pytest.approx(f.max_normal, rel=1e-7)
    elif f.family == "int":
        assert float(ml_dtypes.iinfo(dt).max) == f.max_normal
    assert f.storage_bytes(A) * 8 >= f.bits * 4096 * 4096


def test_aliases_and_parsing():
    assert get_format("fp8").name == "fp8_e4m3"
    assert get_format("FP8-E5M2").name == "fp8_e5m2"
    assert get_format("mxfp8").name == "mxfp8_e4m3"
    assert get_format("mxfp6").name == "mxfp6_e2m3"
    assert get_format("fp6").name == "fp6_e3m2"
    assert get_format("fp4").name == "fp4_e2m1"
    assert get_format("bfloat16").name == "bf16"
    assert get_format("int4_g64").block_size == 64
    assert get_format("int8_g64").bits == 8
    assert get_format("int4_pc").block_size == 0
    assert get_format("int8_pt").block_size is None
    # the defaults spelled out are the registry's int4 / int8 (docs/formats.md), one name and one rate (a hardware
    # designer's trial: spelled out they ran 1.8-3x slower, missing the preset's int rates)
    assert get_format("int4_g128") is get_format("int4") and get_format("int8_pc") is get_format("int8")
    assert get_format("int4_g128") == NumberFormat("int4", 4, "int", 128, 16, 0, family="int",
                                                   element_dtype="int4", max_normal=7.0,
                                                   scale_format="fp16",
                                                   description=get_format("int4_g128").description)
    f = get_format("mxfp4")
    assert get_format(f) is f


@pytest.mark.parametrize("bad", ["fp7", "mxint4_g64", "int4_g0", "int3", "", "mxfp4_g32", "int8_pt_asym"])
def test_unknown_format_raises_config_error(bad):
    with pytest.raises(ConfigError) as e:
        get_format(bad)
    assert "\n" not in str(e.value)


def test_unknown_format_message_lists_known_names():
    with pytest.raises(ConfigError) as e:
        get_format("fp7")
    msg = str(e.value)
    assert "\n" not in msg
    for name in known_formats():
        assert name in msg
    with pytest.raises(ConfigError):
        quantize(np.ones(4), "nope")


# ---------------------------------------------------------------- emulation: exact values

def _finite_values(dtype_name: str) -> np.ndarray:
    dt = getattr(ml_dtypes, dtype_name)
    bits = {"float4_e2m1fn": 4, "float6_e3m2fn": 6, "float6_e2m3fn": 6}.get(dtype_name, 8)
    v = np.arange(2 ** bits, dtype=np.uint8).view(dt).astype(np.float32)
    return v[np.isfinite(v)]


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"])
def test_plain_representable_values_round_trip(name):
    v = _finite_values(get_format(name).element_dtype)
    np.testing.assert_array_equal(quantize(v, name), v)


def test_fp4_representable_set():
    x = np.linspace(-8, 8, 20001, dtype=np.float32)
    got = set(np.abs(quantize(x, "fp4")).tolist())
    assert got == {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0}
    assert set(np.abs(_finite_values("float4_e2m1fn")).tolist()) == got


def test_fp16_bf16_fp32_round_trip():
    x = np.array([1.0, -2.5, 0.099975586, 65504.0], dtype=np.float32)
    np.testing.assert_array_equal(quantize(x, "fp16"), x)
    np.testing.assert_array_equal(quantize(x, "fp32"), x)
    np.testing.assert_array_equal(quantize(np.array([1.0, 3.0, 0.5]), "bf16"), [1.0, 3.0, 0.5])
    assert quantize(np.float32(1 + 2 ** -9), "bf16") == 1.0   # 7 mantissa bits
    assert np.isinf(quantize(np.array([1e5]), "fp16"))[0]      # IEEE overflow, not saturation


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"])
def test_mx_representable_blocks_round_trip(name):
    f = get_format(name)
    v = _finite_values(f.element_dtype)
    v = v[np.abs(v) < f.max_normal]
    # Each block of 32 = [max_normal, 31 representable values]: amax = max_normal, so
    # shared_exp = floor(log2(max_normal)) - emax = 0 and the scale is 1.
    n_blocks = math.ceil(len(v) / 31)
    body = np.resize(v, n_blocks * 31).reshape(n_blocks, 31)
    x = np.concatenate([np.full((n_blocks, 1), f.max_normal, np.float32), body], axis=1)
    np.testing.assert_array_equal(quantize(x, name), x)
    # A power-of-two multiple of the same block is also exact (scale 2^k).
    np.testing.assert_array_equal(quantize(x * 2.0 ** 20, name), x * 2.0 ** 20)
    np.testing.assert_array_equal(quantize(x * 2.0 ** -20, name), x * 2.0 ** -20)


def test_mxint8_and_int_exact_grids():
    k = np.arange(-127, 128, dtype=np.float32)
    x = np.resize(k / 64, 8 * 32).reshape(8, 32)
    x[:, 0] = 127 / 64          # amax 1.98 -> shared exp floor(log2 1.98) - 0 = 0, scale 1
    np.testing.assert_array_equal(quantize(x, "mxint8"), x)
    # int8 per channel: each row holds +-127, so the fp16 scale is exactly 1.
    rows = np.stack([k, -k])
    np.testing.assert_array_equal(quantize(rows, "int8"), rows)
    # int4 g128: each group of 128 holds 7, so the scale is 1 and -7..7 are exact.
    g = np.resize(np.arange(-7, 8, dtype=np.float32), 256)
    g[0] = g[128] = 7
    np.testing.assert_array_equal(quantize(g[None, :], "int4"), g[None, :])


def test_nvfp4_exact_values():
    # Tensor amax 6 * 448 = 2688 -> tensor scale 2688 / (448 * 6) = 1; every block of 16
    # holds 2688, so block scale = 2688 / 6 / 1 = 448 (an exact E4M3 value).
    fp4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)
    x = np.concatenate([[6.0], fp4]).astype(np.float32)[None, :] * 448
    x = np.repeat(x, 3, axis=0)
    np.testing.assert_array_equal(quantize(x, "nvfp4"), x)


# ---------------------------------------------------------------- emulation: hand-derived scaling

def test_mx_block_amax_10_spot_check():
    # mxfp4, block amax 10: shared_exp = floor(log2 10) - emax(E2M1) = 3 - 2 = 1, X = 2.
    # 10 / 2 = 5 lies halfway between 4 and 6; ml_dtypes rounds ties to even (mantissa 0) -> 4.
    assert float(np.float32(5.0).astype(ml_dtypes.float4_e2m1fn)) == 4.0
    x = np.zeros(32, np.float32)
    x[:5] = [10.0, 3.0, 1.1, -7.0, 0.9]
    y = quantize(x, "mxfp4")
    # 10 -> 4*2 = 8; 3/2 = 1.5 exact -> 3; 1.1/2 = 0.55 -> 0.5 -> 1; -7/2 = -3.5 -> tie 3|4 -> 4 (even) -> -8;
    # 0.9/2 = 0.45 -> 0.5 -> 1.
    np.testing.assert_array_equal(y[:5], [8.0, 3.0, 1.0, -8.0, 1.0])
    np.testing.assert_array_equal(y[5:], 0.0)


def test_mx_blocks_are_independent_and_along_last_axis():
    x = np.zeros((2, 64), np.float32)
    x[0, 0], x[0, 1] = 1000.0, 1.0     # block (0,0): amax 1000 -> X = 2^(9-2) = 128 -> 1.0/128 -> 0
    x[0, 33] = 1.0                      # block (0,1): amax 1 -> X = 2^(0-2) = 1/4 -> exact
    x[1, 0] = 1.0
    y = quantize(x, "mxfp4")
    # 1000/128 = 7.8125 -> saturates to 6 -> 768
    assert y[0, 0] == 768.0 and y[0, 1] == 0.0 and y[0, 33] == 1.0 and y[1, 0] == 1.0


def test_mx_saturation():
    # mxfp4: amax 7 -> shared_exp = 2 - 2 = 0, scale 1; 7 > max_normal 6 -> clamps to 6.
    x = np.zeros(32, np.float32)
    x[0], x[1] = 7.0, -7.5
    y = quantize(x, "mxfp4")
    assert y[0] == 6.0 and y[1] == -6.0
    # mxfp8_e4m3: amax 500 -> shared_exp = floor(log2 500) - 8 = 0; 500 > 448 -> 448
    # (a raw ml_dtypes cast of 500 to float8_e4m3fn would give NaN).
    assert np.isnan(float(np.float32(500.0).astype(ml_dtypes.float8_e4m3fn)))
    x = np.zeros(32, np.float32)
    x[0], x[1] = 500.0, -470.0
    y = quantize(x, "mxfp8_e4m3")
    assert y[0] == 448.0 and y[1] == -448.0
    # mxint8: amax 1.999 -> scale 1, 1.999 * 64 = 127.9 -> clamps to 127 -> 127/64
    x = np.zeros(32, np.float32)
    x[0] = 1.999
    assert quantize(x, "mxint8")[0] == 127 / 64


def test_plain_saturation():
    x = np.array([1e6, -1e6, 500.0], np.float32)
    np.testing.assert_array_equal(quantize(x, "fp8_e4m3"), [448, -448, 448])
    np.testing.assert_array_equal(quantize(x, "fp8_e5m2"), [57344, -57344, 512])
    np.testing.assert_array_equal(quantize(x, "fp4"), [6, -6, 6])
    np.testing.assert_array_equal(quantize(x, "fp6_e3m2"), [28, -28, 28])
    np.testing.assert_array_equal(quantize(x, "fp6_e2m3"), [7.5, -7.5, 7.5])


def test_mx_scale_range():
    x = np.zeros((3, 32), np.float32)
    x[0, 0] = 2.0 ** 100                 # scale 2^(100-2) = 2^98, exact
    x[1, 0] = 2.0 ** -140                # shared_exp -142 clamps to -127: 2^-140 / 2^-127 = 2^-13 -> 0
    y = quantize(x, "mxfp4")
    assert y[0, 0] == 2.0 ** 100
    assert y[1, 0] == 0.0
    np.testing.assert_array_equal(y[2], 0.0)   # all-zero block stays zero


def test_nvfp4_hand_derived():
    x = np.zeros((1, 48), np.float32)
    x[0, 0] = 2688.0      # tensor amax -> tensor scale 2688 / 2688 = 1
    # block 1: amax 30 -> block scale 30/6 = 5 (exact E4M3); 7/5 = 1.4 -> 1.5 -> 7.5;
    # -13/5 = -2.6 -> -3 -> -15.
    x[0, 16], x[0, 17], x[0, 18] = 30.0, 7.0, -13.0
    # block 2: amax 26.5 -> 26.5/6 = 4.4167 -> E4M3 (step 0.5 in [4, 8)) -> 4.5;
    # 26.5/4.5 = 5.89 -> 6 -> 27.
    x[0, 32] = 26.5
    y = quantize(x, "nvfp4")
    assert y[0, 0] == 2688.0
    np.testing.assert_array_equal(y[0, 16:19], [30.0, 7.5, -15.0])
    assert y[0, 32] == 27.0


def test_int_hand_derived():
    # int8 per channel: amax 254 -> scale 254/127 = 2 (exact fp16); 3/2 = 1.5 -> RNE 2 -> 4;
    # 5/2 = 2.5 -> RNE 2 -> 4; -1/2 = -0.5 -> -0 -> 0.
    y = quantize(np.array([[254.0, 3.0, 5.0, -1.0]]), "int8")
    np.testing.assert_array_equal(y, [[254.0, 4.0, 4.0, 0.0]])
    # int4 g128: amax 14 -> scale 2; 3/2 = 1.5 -> 2 -> 4. 100 sits in a second group of its
    # own: scale 100/7 = 14.2857 is stored as fp16 (step 2^-7 in [8, 16)): 1829 * 2^-7 =
    # 14.2890625, so 100 reads back as 7 * 14.2890625 = 100.0234375.
    x = np.zeros((1, 130), np.float32)
    x[0, 0], x[0, 1], x[0, 128] = 14.0, 3.0, 100.0
    y = quantize(x, "int4")
    assert (y[0, 0], y[0, 1], y[0, 128]) == (14.0, 4.0, 100.0234375)
    # asymmetric int4 g128 on [0, 15]: scale (15 - 0)/15 = 1, zero 0 -> exact integers.
    x = np.arange(16, dtype=np.float32)[None, :]
    np.testing.assert_array_equal(quantize(x, "int4_g128_asym"), x)
    # per tensor: amax 127 -> scale 1
    np.testing.assert_array_equal(quantize(np.array([[127.0, 2.0], [1.4, -3.6]]), "int8_pt"),
                                  [[127.0, 2.0], [1.0, -4.0]])


# ---------------------------------------------------------------- emulation: NaN / Inf

def test_nan_propagation_plain():
    x = np.array([np.nan, 1.0, -np.inf, np.inf], np.float32)
    for name in ["fp4", "fp6_e3m2", "fp6_e2m3", "fp8_e4m3"]:
        y = quantize(x, name)
        assert np.isnan(y[0]) and y[1] == 1.0 and np.isnan(y[2]) and np.isnan(y[3]), name
    for name in ["fp8_e5m2", "fp16", "bf16", "fp32"]:
        y = quantize(x, name)
        assert np.isnan(y[0]) and y[1] == 1.0 and y[2] == -np.inf and y[3] == np.inf, name


@pytest.mark.parametrize("name", ["mxfp4", "mxfp8_e4m3", "mxfp6", "mxint8", "nvfp4", "int4_g64"])
def test_nan_in_block_makes_block_nan(name):
    block = get_format(name).block_size
    x = np.ones((2, 2 * block), np.float32)
    x[0, 1] = np.nan
    x[1, block + 2] = np.inf
    y = quantize(x, name)
    assert np.isnan(y[0, :block]).all() and np.isfinite(y[0, block:]).all()
    assert np.isnan(y[1, block:]).all() and np.isfinite(y[1, :block]).all()
    np.testing.assert_array_equal(y[0, block:], quantize(x[0:1, block:], name)[0])


def test_nan_in_channel_makes_row_nan():
    x = np.ones((3, 10), np.float32)
    x[1, 4] = np.nan
    y = quantize(x, "int8")
    assert np.isnan(y[1]).all()
    np.testing.assert_array_equal(y[[0, 2]], quantize(np.ones((2, 10)), "int8"))


def test_fp8_block128_hand_derived():
    """Tile amax 1344 -> scale 1344 / 448 = 3: 1 / 3 = 0.333.. rounds to e4m3 0.34375 (2^-2 x 1.375),
    reads back 1.03125; 1344 / 3 = 448 exactly. The tile spans 128 rows: a row in the next tile keeps
    its own scale (amax 2 -> scale 2/448, 2 reads back exactly)."""
    x = np.zeros((129, 4), np.float32)
    x[0, :2] = 1.0, 1344.0
    x[128, 0] = 2.0
    y = quantize(x, "fp8_block128")
    assert y[0, 0] == 1.03125 and y[0, 1] == 1344.0 and y[128, 0] == 2.0
    x[5, 3] = np.nan
    y = quantize(x, "fp8_block128")
    assert np.isnan(y[:128]).all() and y[128, 0] == 2.0
    tiny = quantize(np.array([3e-45, 1e-40], np.float32), "fp8_block128")   # the fp32 scale floors at 2^-149
    assert np.isfinite(tiny).all() and tiny[1] == pytest.approx(1e-40, rel=0.07)
    assert get_format("fp8_block").name == "fp8_block128"
    assert get_format("fp8_block128").nominal_bits_per_element == 8 + 32 / (128 * 128)


# ---------------------------------------------------------------- emulation: shapes

@pytest.mark.parametrize("name", ["mxfp4", "mxfp8_e4m3", "mxint8", "int4_g64", "int4", "nvfp4"])
def test_ragged_last_block(name):
    rng = np.random.default_rng(1)
    block = get_format(name).block_size
    n = 3 * block + 5                      # last block partial
    x = rng.standard_normal((4, n)).astype(np.float32)
    x[:, 0] = 8.0                          # keep the nvfp4 tensor amax in the first part
    y = quantize(x, name)
    assert y.shape == x.shape and y.dtype == np.float32 and np.isfinite(y).all()
    cut = 3 * block
    # Block-wise: quantising the pieces separately gives the same values.
    np.testing.assert_array_equal(y[:, :cut], quantize(x[:, :cut], name))
    if name != "nvfp4":   # nvfp4's tensor scale sees the whole tensor
        np.testing.assert_array_equal(y[:, cut:], quantize(x[:, cut:], name))


def test_4000_columns_and_other_shapes():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 4000)).astype(np.float32)
    for name in ["mxfp4", "nvfp4", "int4", "int4_g64", "int8"]:
        assert quantize(x, name).shape == (8, 4000)
    assert quantize(np.float32(3.3), "fp4").shape == ()
    assert quantize(np.arange(70, dtype=np.float32), "mxfp4").shape == (70,)
    assert quantize(np.ones((2, 3, 40)), "mxfp6").shape == (2, 3, 40)
    assert quantize(np.zeros((0, 5)), "mxfp4").shape == (0, 5)


# ---------------------------------------------------------------- error metrics

def test_error_ordering_on_gaussian():
    x = np.random.default_rng(0).standard_normal((512, 1024)).astype(np.float32)
    err = {n: quantization_error(x, n)["rmse"] for n in
           ["fp32", "fp16", "bf16", "fp8_e4m3", "mxfp6", "mxfp4", "int8", "int4", "nvfp4", "mxfp8"]}
    assert err["fp32"] == 0.0
    assert err["fp16"] < err["bf16"] < err["fp8_e4m3"] < err["mxfp6"] < err["mxfp4"]
    assert err["int8"] < err["int4"]
    # mxfp8_e4m3 and mxfp6_e2m3 both keep 3 mantissa bits, and FLOOR scaling clips the
    # top of the e4m3 range ([448, 512)) harder, so mxfp8 is NOT better than mxfp6_e2m3 here;
    # it does beat mxfp6_e3m2 (2 mantissa bits).
    err["mxfp6_e3m2"] = quantization_error(x, "mxfp6_e3m2")["rmse"]
    assert err["mxfp8"] < err["mxfp6_e3m2"] < err["mxfp4"]
    assert err["mxfp6"] < err["mxfp6_e3m2"]          # why the mxfp6 alias is e2m3
    assert err["nvfp4"] < err["mxfp4"]


def test_quantization_error_fields():
    x = np.random.default_rng(3).standard_normal(4096).astype(np.float32)
    e = quantization_error(x, "mxfp4")
    assert set(e) >= {"rmse", "rel_rmse", "max_abs_err", "sqnr_db"}
    assert e["rel_rmse"] == pytest.approx(e["rmse"] / float(np.sqrt(np.mean(x.astype(np.float64) ** 2))))
    assert e["sqnr_db"] == pytest.approx(-20 * math.log10(e["rel_rmse"]))
    y = quantize(x, "mxfp4")
    assert e["max_abs_err"] == pytest.approx(float(np.max(np.abs(y.astype(np.float64) - x))))
    assert quantization_error(x, "fp32")["sqnr_db"] == math.inf


def test_a_float64_input_is_compared_as_given():
    """A numerics trial: a float64 array's error was measured against its float32 rounding, so fp32 read exact
    (inf dB). Against the input itself, fp32's error is that rounding: for N(0, 1) a relative error uniform within
    half an ulp of 2^-23, SQNR ~ 10 log10(12 / 2^-46) ~ 149 dB (the log-uniform mantissa raises it a few dB; 145-158
    dB defended), and a value past float32's range is an infinite error, not left out."""
    x = np.random.default_rng(4).standard_normal(1 << 16)
    assert 145 < quantization_error(x, "fp32")["sqnr_db"] < 158
    assert quantization_error(x.astype(np.float32), "fp32")["sqnr_db"] == math.inf
    # a narrow format hardly moves (the float32 rounding is ~100 dB below its own error)
    assert quantization_error(x, "bf16")["sqnr_db"] == pytest.approx(
        quantization_error(x.astype(np.float32), "bf16")["sqnr_db"], abs=1e-3)
    assert quantization_error(np.array([1e39, 1.0]), "fp32")["sqnr_db"] == -math.inf


# ---------------------------------------------------------------- properties

_finite = st.floats(-2.0 ** 100, 2.0 ** 100, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 3), st.integers(1, 70)), elements=_finite),
       st.sampled_from(["mxfp4", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8",
                        "fp8_e4m3", "fp4", "fp6_e2m3", "fp8_block128"]))
def test_idempotent_and_bounded(x, name):
    y = quantize(x, name)
    assert y.shape == x.shape and np.isfinite(y).all()
    np.testing.assert_array_equal(quantize(y, name), y)
    f = get_format(name)
    if f.family == "mx":
        # the block scale never exceeds the block's amax-derived power of two: |y| < 2^(floor(log2 amax)+1)
        assert np.all(np.abs(y) <= 2.0 ** (np.floor(np.log2(np.max(np.abs(x)) + 1e-45)) + 1))


def test_mx_floor_log2_is_exact_at_powers_of_two():
    # amax exactly 4: floor(log2 4) - 2 = 0, scale 1, 4 -> 4.
    # amax just below 4: floor(log2) = 1, shared_exp -1, scale 0.5; 3.9999998/0.5 = 7.9999996
    # saturates to 6 -> reads back as 3 (the FLOOR rule's worst case).
    below4 = np.nextafter(np.float32(4.0), np.float32(0.0))
    x = np.zeros((2, 32), np.float32)
    x[0, 0], x[1, 0] = 4.0, below4
    y = quantize(x, "mxfp4")
    assert y[0, 0] == 4.0 and y[1, 0] == 3.0


def _mx_reference(x: np.ndarray, name: str) -> np.ndarray:
    """Slow per-block reference with Python floats, for cross-checking the vectorised code."""
    f = get_format(name)
    dt = getattr(ml_dtypes, f.element_dtype, None)
    out = np.empty_like(x, dtype=np.float64)
    for r in range(x.shape[0]):
        for s in range(0, x.shape[1], 32):
            blk = [float(v) for v in x[r, s:s + 32]]
            amax = max(abs(v) for v in blk)
            e = (math.frexp(amax)[1] - 1 if amax > 0 else -127) - f.emax
            scale = 2.0 ** max(-127, min(127, e))
            for i, v in enumerate(blk):
                w = max(-f.max_normal, min(f.max_normal, v / scale))
                if f.kind == "int":
                    p = max(-127, min(127, round(w * 64))) / 64    # Python round() is ties-to-even
                else:
                    p = float(np.array([w], np.float32).astype(dt)[0])
                out[r, s + i] = p * scale
    return out.astype(np.float32)


@pytest.mark.parametrize("name", ["mxfp4", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8"])
def test_mx_matches_slow_reference(name):
    rng = np.random.default_rng(7)
    # wide dynamic range: per-block magnitudes from 2^-140 to 2^120
    mag = 2.0 ** rng.integers(-140, 120, size=(6, 3, 1))
    x = (rng.standard_normal((6, 3, 32)) * mag).reshape(6, 96).astype(np.float32)
    np.testing.assert_array_equal(quantize(x, name), _mx_reference(x, name))


# fp16 scales are subnormal below 2^-14 and clamp at 2^-24 (quantize.py's
# documented rule). There a scale rounds by up to half a subnormal step (2^-25)
# however small it is, and a code q carries that error q times: |y| <= amax +
# |q| * 2^-25 with |q| < 2^bits. No relative slack covers it.
_FP16_SCALE_FLOOR = 2.0 ** -24


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 3), st.integers(1, 300)), elements=_finite),
       st.sampled_from(["nvfp4", "int8", "int4", "int4_g64", "int4_g128_asym", "int8_pt", "int4_pc", "fp8_block128"]))
@example(np.array([[1e-7]], np.float32), "int8")   # amax/127 underflows fp16: the scale clamps
@example(np.array([[7.8019735e-07]], np.float32), "int4")   # amax/7 subnormal: scale rounds up 7%
@example(np.array([[3e-45]], np.float32), "fp8_block128")   # amax/448 underflows fp32: the scale floors
def test_scaled_formats_finite_and_error_bounded(x, name):
    y = quantize(x, name)
    assert y.shape == x.shape and np.isfinite(y).all()
    amax = float(np.max(np.abs(x)))
    # no value grows past the tensor amax by more than the scale's rounding slack,
    # plus the subnormal fp16 scale's rounding carried by the largest code
    slack = 2 ** get_format(name).bits * _FP16_SCALE_FLOOR / 2
    assert float(np.max(np.abs(y))) <= amax * 1.01 + slack


def test_int8_scale_clamps_at_the_fp16_floor():
    """x = 1e-7: amax/127 = 7.9e-10 is below fp16's 2^-24, so the scale is 2^-24;
    1e-7 / 2^-24 = 1.68 rounds to 2, so the value reads back as 2 * 2^-24 = 1.19e-7."""
    y = quantize(np.array([[1e-7]], np.float32), "int8")
    assert float(y[0, 0]) == pytest.approx(2 * _FP16_SCALE_FLOOR, rel=1e-7)


def test_a_value_past_float32_is_inf_without_a_numpy_warning():
    """quantize(1e39, 'bf16') is inf as documented; numpy's "overflow encountered in cast" leaked to the user's
    console (a trial's finding)."""
    import warnings

    import numpy as np

    from sim.core.quantize import quantize
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isinf(quantize(np.array([1e39, -1e39]), "bf16")).all()


def test_error_figures_of_values_past_the_square_root_of_float64():
    """A hostile-input trial: an array of 1e308 leaked numpy's overflow warning (its square overflows float64) and
    read rel. RMSE nan. The powers are taken on the array's own scale: bf16 holds 1e30 to its 8 bits (rel. RMSE
    of a round-to-nearest bf16 of a constant: |1e30 - bf16(1e30)| / 1e30), and 1e308 overflows fp32 and bf16,
    an infinite error, without a warning."""
    import warnings

    import ml_dtypes

    from sim.core.quantize import quantization_error

    x = np.full(10, 1e30)
    e = quantization_error(x, "bf16")
    want = abs(float(np.float32(1e30).astype(ml_dtypes.bfloat16)) - 1e30) / 1e30
    assert e["rel_rmse"] == pytest.approx(want, rel=1e-6) and e["rms"] == pytest.approx(1e30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        huge = quantization_error(np.full(10, 1e308), "fp32")
    assert huge["sqnr_db"] == -math.inf and huge["rel_rmse"] == math.inf and huge["rms"] == pytest.approx(1e308)


def test_register_refuses_what_get_format_or_the_emulation_cannot_use():
    """A formats trial registered block_size 0 (quantize raised ZeroDivisionError), -4 (an indexing error) and a
    capitalised name that get_format could never find again: each is now a ValueError naming the field."""
    from sim.core.formats import _FORMATS, get_format, register
    mx = get_format("mxfp4")
    for bad, match in ((dataclasses.replace(mx, name="mxfp4_b0", block_size=0), "block_size must be >= 1"),
                       (dataclasses.replace(mx, name="mxfp4_neg", block_size=-4), "block_size must be >= 1"),
                       (dataclasses.replace(get_format("int4"), name="int4_neg", block_size=-1), "block_size must be >= 0"),
                       (dataclasses.replace(mx, name="MyFP4"), "get_format looks up 'myfp4'"),
                       (dataclasses.replace(mx, name="my-fp4"), "get_format looks up 'my_fp4'"),
                       (dataclasses.replace(mx, name="mxfp0", bits=0), "bits must be >= 1")):
        with pytest.raises(ValueError, match=match):
            register(bad)
        assert bad.name not in _FORMATS
    ok = dataclasses.replace(mx, name="mxfp4_b16", block_size=16)
    try:
        register(ok)
        assert get_format("MXFP4-B16") is ok
    finally:
        _FORMATS.pop("mxfp4_b16")


def test_register_refuses_a_built_in_name():
    """register(replace(mxfp4, name="fp8_e4m3")) had replaced FP8 in the registry while runs kept costing 8 bits
    (an API trial); an alias and an int pattern are taken too. A format of one's own may be registered again."""
    from sim.core.formats import _FORMATS, get_format, register
    mx = get_format("mxfp4")
    for name in ("fp8_e4m3", "fp8", "int4_g64", "bf16", "int4_g0"):
        with pytest.raises(ValueError, match=f"register: '{name}' is (a built-in format|an alias of fp8_e4m3|an int "
                                             "pattern): the presets' rates"):
            register(dataclasses.replace(mx, name=name))
    assert get_format("fp8").bits == 8
    mine = dataclasses.replace(mx, name="my_fp4")
    try:
        register(mine)
        register(dataclasses.replace(mine, block_size=16))
        assert get_format("my_fp4").block_size == 16
    finally:
        _FORMATS.pop("my_fp4")

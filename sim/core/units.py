"""One parser for quantities with units: "3.35 TB/s", "80 GiB", "5 us", "154.8 TFLOP/s".

Decimal prefixes (k, M, G, T, P) are powers of 1000; binary ones (Ki, Mi, Gi, Ti)
are powers of 1024. Everything comes back in SI base units: bytes, seconds,
FLOP/s, bytes/s, joules, hertz, watts. A plain number passes through unchanged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

_PREFIX = {
    "": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50,
    "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9, "p": 1e-12, "f": 1e-15,
}

# Base units and the dimension they measure. Bits are converted to bytes.
_UNITS = {
    "B": ("bytes", 1.0), "byte": ("bytes", 1.0), "bytes": ("bytes", 1.0),
    "b": ("bytes", 1 / 8), "bit": ("bytes", 1 / 8),
    "B/s": ("bytes/s", 1.0), "b/s": ("bytes/s", 1 / 8), "bps": ("bytes/s", 1 / 8),
    "s": ("s", 1.0), "sec": ("s", 1.0),
    "FLOP/s": ("flop/s", 1.0), "FLOPS": ("flop/s", 1.0), "OP/s": ("flop/s", 1.0),
    "OPS": ("flop/s", 1.0), "FLOP": ("flop", 1.0),
    "Hz": ("Hz", 1.0), "W": ("W", 1.0), "J": ("J", 1.0),
    "J/B": ("J/B", 1.0), "J/b": ("J/B", 8.0),
}

# A field's unit from the end of its name (the project's naming rule), longest first.
_NAME_DIMENSIONS = (("_bytes_per_s", "bytes/s"), ("_flops_per_s", "flop/s"), ("_j_per_byte", "J/B"),
                    ("_bytes", "bytes"), ("_hz", "Hz"), ("_w", "W"), ("_s", "s"))


def dimension_of(name: str) -> str | None:
    """The dimension a key named like `capacity_bytes` or `latency_s` wants; None if unsaid."""
    for suffix, dim in _NAME_DIMENSIONS:
        if name.endswith(suffix) or name == suffix[1:]:
            return dim
    return None


_RE = re.compile(r"^\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?)\s*(\S*)\s*$")


def parse_quantity(value: object, expect: str | None = None) -> float:
    """Parse a number with an optional unit into SI base units.

    `expect` is a dimension ("bytes", "bytes/s", "s", "flop/s", ...); a string
    whose unit measures something else raises ValueError.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a number or a quantity string, got {value!r}")
    m = _RE.match(value)
    if not m:
        raise ValueError(f"cannot parse quantity {value!r}")
    number, unit = float(m.group(1)), m.group(2)
    if unit == "":
        return number
    for prefix in sorted(_PREFIX, key=len, reverse=True):
        if unit.startswith(prefix) and unit[len(prefix):] in _UNITS:
            dim, factor = _UNITS[unit[len(prefix):]]
            if expect is not None and dim != expect:
                raise ValueError(f"{value!r} is in {dim}, expected {expect}")
            return number * _PREFIX[prefix] * factor
    raise ValueError(f"unknown unit {unit!r} in {value!r}")


def fmt_bytes(n: float) -> str:
    """Bytes in decimal units (GB = 10^9 bytes), sim's one convention, as bandwidths (GB/s) are; past 10^6 TB in
    powers of ten (a batch of 1e20 printed '111149056000000000.00 TB', a trial)."""
    if abs(n) >= 1e18:
        return f"{n / 1e12:.3g} TB"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_capacity(n: float) -> str:
    """A memory's capacity: decimal like every byte count sim prints, and beside it the binary
    size where the part is a whole number of GiB (a "48 GB" A6000 holds 48 GiB = 51.54 GB), so
    the figure a datasheet prints is on the line too."""
    gib = n / 2 ** 30
    whole = n >= 2 ** 30 and gib == int(gib)
    return f"{fmt_bytes(n)} ({int(gib):,} GiB)" if whole else fmt_bytes(n)


def fmt_time(t: float) -> str:
    if t >= 1:
        return f"{t:.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3f} ms"
    return f"{t * 1e6:.2f} us"


def fmt_rate(x: float) -> str:
    """A rate to one decimal from 100 up (12,345.6), three significant digits below, so that an offloaded run's
    0.053 tokens/s does not read 0.1 (a trial's finding): 0.0532 -> '0.0532', 8.49 -> '8.49', 177.64 -> '177.6'."""
    return f"{x:,.1f}" if abs(x) >= 100 or x == 0 else f"{x:.3g}"


def fmt_si(x: float, unit: str) -> str:
    """`x` with the decimal prefix that puts it in [1, 1000): fmt_si(1.536e12, "B/s") == "1.54 TB/s"."""
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def fmt_percent(fraction: float) -> str:
    """A share as a whole percent, with two significant digits below 1% so that a non-zero share never
    reads 0% (a Groq chip's 0.03% utilisation): 0.5 -> '50%', 0.0003 -> '0.03%', 0 -> '0%'."""
    pct = 100.0 * fraction
    return f"{pct:.0f}%" if pct == 0.0 or abs(pct) >= 0.995 else f"{pct:.2g}%"


def whole_percents(fractions: Sequence[float], decimals: int = 0) -> list[str]:
    """`fractions` of one whole as percentages to `decimals` places that add up to 100 (largest remainder:
    the units rounding leaves over go to the largest remainders). Each rounded on its own, thirds showed as
    33/33/33. Fractions of less than a whole keep their own total (0.5, 0.3: 50, 30)."""
    scale = 10 ** decimals
    # round(.., 9): 0.29 x 1000 is 289.99999999999994, which is 290 units, not 289 and a remainder
    units = [round(100 * scale * f, 9) for f in fractions]
    shown = [math.floor(u) for u in units]
    left = round(sum(units)) - sum(shown)   # 100 x scale when they are one whole; never more units than there are
    for i in sorted(range(len(units)), key=lambda i: units[i] - shown[i], reverse=True)[:max(left, 0)]:
        shown[i] += 1
    return [f"{n / scale:.{decimals}f}" for n in shown]

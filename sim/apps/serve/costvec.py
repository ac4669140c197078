"""Arithmetic on serving step costs: a cost is a tuple (seconds, joules, busy seconds per resource in
ExactCost.keys' order); the surrogate adds, scales and interpolates them every iteration, so these stay plain
tuple comprehensions (sim.apps.serve.stepcost)."""

from __future__ import annotations

from bisect import bisect_right
from itertools import zip_longest

Cost = tuple[float, ...]   # (seconds, joules, busy seconds per resource in ExactCost.keys' order)


# Equal lengths (the usual case) take a list comprehension over zip: the same sums, a few times
# faster than the padded generator, and the engine adds and interpolates costs every iteration.
def add(a: Cost, b: Cost) -> Cost:
    if len(a) == len(b):
        return tuple([x + y for x, y in zip(a, b)])
    return tuple(x + y for x, y in zip_longest(a, b, fillvalue=0.0))


def lerp(a: Cost, b: Cost, w: float) -> Cost:
    if len(a) == len(b):
        return tuple([x + w * (y - x) for x, y in zip(a, b)])
    return tuple(x + w * (y - x) for x, y in zip_longest(a, b, fillvalue=0.0))


def scaled(a: Cost, f: float) -> Cost:
    return tuple(x * f for x in a)


def segment(xs: list[int], ys, x: float) -> tuple[Cost, Cost, float] | None:
    """The two entries of ys around x and the weight between them (interp's reads, in its order); None
    below xs[1]'s segment, where interp answers ys[0]."""
    i = min(bisect_right(xs, x) - 1, len(xs) - 2)
    if i < 0:
        return None
    return ys[i], ys[i + 1], (x - xs[i]) / (xs[i + 1] - xs[i])


def interp(xs: list[int], ys: list, x: float) -> Cost:
    """Piecewise-linear interpolation of costs; x within [xs[0], xs[-1]]."""
    s = segment(xs, ys, x)
    return ys[0] if s is None else lerp(*s)


def rows_around(ns: list[int], rows, n: float) -> tuple:
    """A table's two rows around n on its grid `ns` and the weight between them, clamped to [0, 1] (a
    bilinear read's first step: Surrogate._bilinear, the one-pass decode and mixed costs)."""
    j = max(0, min(bisect_right(ns, n) - 1, len(ns) - 2))
    w = (n - ns[j]) / (ns[j + 1] - ns[j]) if len(ns) > 1 and ns[j + 1] > ns[j] else 0.0
    return rows[j], rows[min(j + 1, len(ns) - 1)], min(max(w, 0.0), 1.0)


# A bilinear read: the entries at (j, i), (j, i + 1), (j + 1, i), (j + 1, i + 1), the weight along the
# rows' axis, then the clamped weight between the rows (Surrogate._bilinear).
Cell = tuple[Cost, Cost, Cost, Cost, float, float]


def cell(rs: list[int], lo_row, hi_row, w: float, r: float) -> Cell | None:
    """Surrogate._bilinear's reads at r between two rows (rows_around), in its order (both rows' segment
    is the one around r in rs); None below rs[1]'s segment."""
    i = min(bisect_right(rs, r) - 1, len(rs) - 2)
    if i < 0:
        return None
    return lo_row[i], lo_row[i + 1], hi_row[i], hi_row[i + 1], (r - rs[i]) / (rs[i + 1] - rs[i]), w


def within_step(c: Cost) -> Cost:
    """`c` with no resource busier than the step lasts. The tables are summed in pieces (a mixed step is M + P
    plus slopes), so the interpolated time can fall below an interpolated busy time; an exact step never has that
    (its busy times come from its own timeline), so clamping is the identity at the grid points. (The tables hold
    steps at full clock; the board limit's stretch is applied after: ExactCost.capped.)"""
    t = c[0]
    for b in c[2:]:   # a loop, not all() over a generator: the engine asks every step
        if not b <= t:
            return (t, c[1], *(min(b, t) for b in c[2:]))
    return c


def add_busy(out: list[float], keys: list[str], key: str, seconds: float) -> None:
    """`seconds` onto resource `key`'s busy entry of the cost list `out` (its entries after time and energy in
    the order of `keys`; `key` joins `keys` if new, `out` grows to match)."""
    if key not in keys:
        keys.append(key)
    out += [0.0] * (2 + len(keys) - len(out))
    out[2 + keys.index(key)] += seconds

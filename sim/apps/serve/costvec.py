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


def interp(xs: list[int], ys: list, x: float) -> Cost:
    """Piecewise-linear interpolation of costs; x within [xs[0], xs[-1]]."""
    i = min(bisect_right(xs, x) - 1, len(xs) - 2)
    if i < 0:
        return ys[0]
    return lerp(ys[i], ys[i + 1], (x - xs[i]) / (xs[i + 1] - xs[i]))


def within_step(c: Cost) -> Cost:
    """`c` with no resource busier than the step lasts. The tables are summed in pieces (a mixed step is M + P
    plus slopes), so where the power cap binds at one grid point and not at its neighbour the interpolated time
    can fall below an interpolated busy time; an exact step never has that (its busy times come from its own
    timeline), so clamping is the identity at the grid points."""
    t = c[0]
    return c if all(b <= t for b in c[2:]) else (t, c[1], *(min(b, t) for b in c[2:]))

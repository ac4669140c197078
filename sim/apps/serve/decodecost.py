"""A pure decode step's interpolated device cost in one pass (issue 30: the engine costs one every
iteration). Surrogate._interpolated of n decode sequences and nothing else is D(n) plus the KV table
read bilinearly at (n, mean kv_len): five piecewise-linear steps over cost vectors. What depends on n
alone (D(n), the two KV rows around n and the weight between them) is kept per n; what is left is
one comprehension doing, element by element, the very operations of interp, _bilinear and add in
their order, so the vector is the same to the bit (tests/test_decodecost.py).

Cases the one pass does not cover (a mean kv_len outside the table's range, vectors of unequal
length) answer None, and the caller takes the general path.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Callable

from sim.apps.serve.costvec import Cost, cell, rows_around


class DecodeCosts:
    """Pure decode costs of one surrogate; `table(name)` is Surrogate.table, `interp` costvec.interp."""

    def __init__(self, table: Callable, interp: Callable):
        self._table, self.interp = table, interp
        self._by_n: dict[int, tuple] = {}
        # n -> the KV cell its last step read: the segment [x0, x0 + dx) of the kv_len grid and its four
        # entries (fixed once read, sim.apps.serve.lazytable); a step of n whose mean kv_len falls in it
        # (most: a context grows by one token a step) reads them here, its weight computed as cell() does
        self._cells: dict[int, tuple] = {}

    def _at(self, n: int) -> tuple:
        """D(n), the KV grid and rows around n, and _bilinear's (clamped) weight between them."""
        got = self._by_n.get(n)
        if got is None:
            d = self.interp(*self._table("D"), n)
            (ns, ks), K = self._table("kv")
            got = self._by_n[n] = (d, ks, *rows_around(ns, K, n))
        return got

    def __call__(self, n: int, decode_kv: int) -> Cost | None:
        d, ks, lo_row, hi_row, w = self._at(n)
        kbar = decode_kv / n
        got = self._cells.get(n)
        if got is not None and got[0] <= kbar < got[0] + got[1]:
            x0, dx, a, b, a2, b2 = got
            wk = (kbar - x0) / dx
        else:
            if kbar > ks[-1]:
                return None
            c = cell(ks, lo_row, hi_row, w, kbar)
            if c is None:
                return None
            a, b, a2, b2, wk, _ = c
            if not len(d) == len(a) == len(b) == len(a2) == len(b2):
                return None
            i = min(bisect_right(ks, kbar) - 1, len(ks) - 2)   # cell()'s segment
            self._cells[n] = (ks[i], ks[i + 1] - ks[i], a, b, a2, b2)
        # lerp(x, y, wk) on each row, lerp(lo, hi, w) between them, add(D(n), that)
        return tuple([de + (lo + w * ((x2 + wk * (y2 - x2)) - lo))
                      for de, lo, x2, y2 in zip(d, [x + wk * (y - x) for x, y in zip(a, b)], a2, b2)])

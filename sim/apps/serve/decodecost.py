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

Cost = tuple[float, ...]


class DecodeCosts:
    """Pure decode costs of one surrogate; `table(name)` is Surrogate.table, `interp` costvec.interp."""

    def __init__(self, table: Callable, interp: Callable):
        self._table, self.interp = table, interp
        self._by_n: dict[int, tuple] = {}

    def _at(self, n: int) -> tuple:
        """D(n), the KV grid and rows around n, and _bilinear's (clamped) weight between them."""
        got = self._by_n.get(n)
        if got is None:
            d = self.interp(*self._table("D"), n)
            (ns, ks), K = self._table("kv")
            j = max(0, min(bisect_right(ns, n) - 1, len(ns) - 2))
            w = (n - ns[j]) / (ns[j + 1] - ns[j]) if len(ns) > 1 and ns[j + 1] > ns[j] else 0.0
            got = self._by_n[n] = (d, ks, K[j], K[min(j + 1, len(ns) - 1)], min(max(w, 0.0), 1.0))
        return got

    def __call__(self, n: int, decode_kv: int) -> Cost | None:
        d, ks, lo_row, hi_row, w = self._at(n)
        kbar = decode_kv / n
        if kbar > ks[-1]:
            return None
        i = min(bisect_right(ks, kbar) - 1, len(ks) - 2)
        if i < 0:
            return None
        a, b, a2, b2 = lo_row[i], lo_row[i + 1], hi_row[i], hi_row[i + 1]
        if not len(d) == len(a) == len(b) == len(a2) == len(b2):
            return None
        wk = (kbar - ks[i]) / (ks[i + 1] - ks[i])
        # lerp(x, y, wk) on each row, lerp(lo, hi, w) between them, add(D(n), that)
        return tuple([de + (lo + w * ((x2 + wk * (y2 - x2)) - lo))
                      for de, lo, x2, y2 in zip(d, [x + wk * (y - x) for x, y in zip(a, b)], a2, b2)])

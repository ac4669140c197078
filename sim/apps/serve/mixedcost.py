"""A step's interpolated device cost in one pass when it has prefill tokens (issue 30: under vLLM V1
two in five iterations carry decodes and a prefill chunk together, under V0 one in seven is a prefill
batch, and each took Surrogate._interpolated's dozen piecewise-linear steps over cost vectors: a tuple
and a few calls per step; pure decode steps are sim.apps.serve.decodecost's).

Surrogate._interpolated of n decode sequences and `rest` other tokens is
    M(n, rest) + P(tokens) + KV(n, mean kv_len) [+ C(chunks, rest)] + pairs_or_split(rest) * dp,
or, without decodes, P(rest) [+ C(chunks, rest)] + pairs_or_split(rest) * dp, each term a bilinear or
linear read of a table. Here the table entries are read first, in the order the general path reads
them (an entry is computed on its first read, sim.apps.serve.lazytable), then a few comprehensions do,
element by element, the very operations of interp, _bilinear, add and scaled in their order, so the
vector is the same to the bit (tests/test_mixedcost.py). Like sim.apps.serve.decodecost, the cases it
does not cover (a point below a grid's first entry, a mean kv_len past the KV grid, vectors of unequal
length) answer None, and the caller takes the general path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from sim.apps.serve.costvec import Cell, Cost, cell, rows_around, segment

if TYPE_CHECKING:
    from sim.apps.serve.iteration import Iteration


def _bilinear(c: Cell) -> list[float]:
    a, b, a2, b2, wr, w = c
    return [lo + w * ((x2 + wr * (y2 - x2)) - lo) for lo, x2, y2 in zip([x + wr * (y - x) for x, y in zip(a, b)], a2, b2)]


class MixedCosts:
    """Mixed-step costs of one surrogate; `table(name)` is Surrogate.table."""

    def __init__(self, table: Callable):
        self._table = table
        self._by_n: dict[int, tuple] = {}    # n -> the M and KV grids' rows around n and weights

    def _at(self, n: int) -> tuple:
        got = self._by_n.get(n)
        if got is None:
            (ns, rs), M = self._table("M")
            (kn, ks), K = self._table("kv")
            got = self._by_n[n] = (rs, *rows_around(ns, M, n), ks, *rows_around(kn, K, n))
        return got

    def __call__(self, it: Iteration, n: int, rest: int) -> Cost | None:
        """Surrogate._interpolated(it, n, rest) for rest > 0 (beside n decodes, or none), or None (module doc)."""
        m = k = ch = None
        if n:
            rs, m_lo, m_hi, wm, ks, k_lo, k_hi, wk = self._at(n)
            m = cell(rs, m_lo, m_hi, wm, rest)
            if m is None:
                return None
        p = segment(*self._table("P"), it.tokens)
        if p is None:
            return None
        if n:
            kbar = it.decode_kv / n
            k = cell(ks, k_lo, k_hi, wk, kbar) if kbar <= ks[-1] else None
            if k is None:
                return None
        canon = rest * (rest + 1) / 2
        if it.chunks > 1 and rest > 1:
            (cs, crs), C = self._table("C")
            kc = min(it.chunks, cs[-1], rest)
            ch = cell(crs, *rows_around(cs, C, kc), rest)
            if ch is None:
                return None
            a = rest / kc
            canon = kc * a * (a + 1) / 2
        dp = it.pairs - canon
        s = segment(*self._table("pairs" if dp >= 0 or rest < 4 else "split"), rest)
        if s is None:
            return None
        if len(set(map(len, [*p[:2], *s[:2]] + [v for c in (m, k, ch) if c for v in c[:4]]))) > 1:
            return None
        # add(add(add(M, P), KV), C) (P alone without decodes), then add(_, scaled(pairs, dp)), element by element
        wp, ws = p[2], s[2]
        if m and not ch:   # V1's usual mixed step: the same operations in one comprehension (left to right)
            (a, b, a2, b2, wr, wm), (c, d, c2, d2, wkr, wk) = m, k
            return tuple([(lo := x + wr * (y - x)) + wm * ((x2 + wr * (y2 - x2)) - lo) + (p0 + wp * (p1 - p0))
                          + ((klo := u + wkr * (v - u)) + wk * ((u2 + wkr * (v2 - u2)) - klo)) + (s0 + ws * (s1 - s0)) * dp
                          for x, y, x2, y2, p0, p1, u, v, u2, v2, s0, s1 in zip(a, b, a2, b2, *p[:2], c, d, c2, d2, *s[:2])])
        if m:
            base = [x + (p0 + wp * (p1 - p0)) for x, p0, p1 in zip(_bilinear(m), p[0], p[1])]
            base = [x + y for x, y in zip(base, _bilinear(k))]
        else:
            base = [p0 + wp * (p1 - p0) for p0, p1 in zip(p[0], p[1])]
        if ch:
            base = [x + y for x, y in zip(base, _bilinear(ch))]
        return tuple([x + (s0 + ws * (s1 - s0)) * dp for x, s0, s1 in zip(base, s[0], s[1])])

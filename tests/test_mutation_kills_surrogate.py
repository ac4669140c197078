"""The serving surrogate's tables and features on exact costs simple enough to work by hand (issue 32:
the survivors of the mutation job on sim.apps.serve.stepcost): a KV term that is not linear, an attended-
pairs term, more prefill chunks than the chunk table holds, the table store, decode steps of 2 tokens.
Costs are (seconds, joules = 2 x seconds); `Poly` is the exact path, a polynomial in the features."""

from __future__ import annotations

import pytest

from sim.apps.serve.costvec import add, lerp
from sim.apps.serve.lazytable import flush_all
from sim.apps.serve.iteration import Iteration, features
from sim.apps.serve.stepcost import Surrogate, _grid


class Poly:
    """Exact cost 1 ms + a x tokens + b x attended pairs + c x (summed decode KV)^2."""
    keys: list[str] = []

    def __init__(self, a: float = 0.0, b: float = 0.0, c: float = 0.0, lm: float = 0.0):
        self.a, self.b, self.c, self.lm, self.points = a, b, c, lm, 0

    def device(self, it: Iteration) -> tuple[float, float]:
        rows = len(it.seqs) if it.logits is None else it.logits   # LM-head rows (sim.core.mixed)
        t = 1e-3 + self.a * it.tokens + self.b * it.pairs + self.c * it.decode_kv ** 2 + self.lm * rows
        return t, 2 * t

    def point(self, it: Iteration):
        self.points += 1
        t, e = self.device(it)
        return t, e, []

    def vector(self, p) -> tuple[float, float]:
        return p[0], p[1]

    def engine(self, c, it):
        return c


def test_features_count_the_prefill_chunks():
    """Two prefill chunks (4 and 3 tokens) and one decode (q 1, KV 5): 8 tokens, 1 decode of KV 5, 2 chunks,
    pairs 4 x (4 - 1.5) + 3 x (3 - 1) = 16."""
    it = features([(4, 4), (3, 3), (1, 5)])
    assert (it.tokens, it.n_decode, it.decode_kv, it.pairs, it.chunks) == (8, 1, 5, 16.0, 2)


def test_split_pairs_and_halves():
    """One fresh chunk of 5 tokens attends 1 + 2 + 3 + 4 + 5 = 15 pairs, its halves 2 and 3 tokens 3 + 6:
    6 more; of 4 tokens 10 against 3 + 3: 4 more. The split point asks the exact path for the halves
    (4, 4) and (4, 4) of 8 tokens: pairs 10 + 10 = 20 (a third, 2 and 6, would be 3 + 21 = 24)."""
    assert Surrogate._split_pairs(5) == 6.0 and Surrogate._split_pairs(4) == 4.0
    sur = Surrogate(Poly(b=1e-9), max_tokens=64, max_decode=8, max_kv=128)
    assert sur._split(8) == pytest.approx((1e-3 + 20e-9, 2e-3 + 40e-9), rel=1e-12)


def test_kv_slope_interpolated_between_grid_points():
    """One decode at KV 100, exact cost 1 ms + 1e-12 x KV^2 (max_kv 1024: the KV grid 1, 64, 256, 1024).
    D(1) at KV 1 plus the KV table's difference, interpolated between KV 64 and 256 (w = 36 / 192 = 0.1875):
    1e-12 x (1 + 4095 + 0.1875 x 61440) = 1e-12 x 15616 over 1 ms (the exact cost has 10000)."""
    sur = Surrogate(Poly(c=1e-12), max_tokens=64, max_decode=8, max_kv=1024)
    assert sur.device(features([(1, 100)]))[0] - 1e-3 == pytest.approx(15616e-12, rel=1e-6, abs=0)


def test_prefill_after_a_prefix_adds_its_pairs():
    """16 new tokens after a prefix of 84 (KV 100): exact 1 ms + 1 us x 16 + 1 ns x 16 x (100 - 7.5) pairs.
    The surrogate: P(16) (a fresh chunk, 136 pairs) + the pairs slope (1 ns) x (1480 - 136): exact, the
    cost being linear in pairs. Through __call__ (no host work here) the same."""
    sur = Surrogate(Poly(a=1e-6, b=1e-9), max_tokens=64, max_decode=8, max_kv=128)
    want = 1e-3 + 16e-6 + 1480e-9
    it = features([(16, 100)])
    assert sur.device(it)[0] == pytest.approx(want, rel=1e-12)
    assert sur(it) == pytest.approx((want, 2 * want), rel=1e-12)


def test_more_chunks_than_the_chunk_table_holds():
    """40 fresh chunks of 2 tokens (max_tokens 80, a grid point of every table): 80 tokens, 40 x 3 = 120
    pairs. The chunk table stops at 32 chunks: P(80) + C(32, 80) is the exact cost of 32 chunks of 80 tokens
    (16 of 3, 16 of 2: 96 + 48 = 144 pairs); its formula count is 32 x 2.5 x 3.5 / 2 = 140, 20 more than
    the 120 attended: 20 pairs fewer at the split table's slope (1 ns per pair): 1 ms + 80 us + 124 ns."""
    sur = Surrogate(Poly(a=1e-6, b=1e-9), max_tokens=80, max_decode=8, max_kv=128)
    it = features([(2, 2)] * 40)
    assert (it.tokens, it.pairs, it.chunks) == (80, 120.0, 40)
    assert sur.device(it)[0] == pytest.approx(1e-3 + 80e-6 + 124e-9, rel=1e-12)


def test_two_token_decode_steps():
    """decode_q 2 (a draft token verified per step): 3 decodes of q 2 at KV 2 are 6 tokens, all decode,
    no prefill and no pairs. Exact 1 ms + 1 us per token (+ 1 ns per prefill pair): the D table at
    n = 2 (4 tokens) and 4 (8 tokens), at n = 3 halfway: 1 ms + 6 us. (Read as 3 decodes of 1 token,
    the 4.5 tokens left would be costed as a prefill chunk with its pairs.)"""
    sur = Surrogate(Poly(a=1e-6, b=1e-9), max_tokens=64, max_decode=8, max_kv=128, decode_q=2)
    assert sur.device(features([(2, 2)] * 3, 2)) == pytest.approx((1.006e-3, 2.012e-3), rel=1e-12)


def test_verify_steps_read_their_lm_head_rows_from_the_grid():
    """decode_q 3 (k = 2 drafts verified): every verify position reaches the LM head, a prefill chunk's last
    token only. 2 verify rows and a 5-token chunk: 11 tokens, 2 x 3 + 1 = 7 LM-head rows. Exact 1 ms +
    1 us per token + 10 us per LM-head row; the grid is built with the same rows, so no fallback. A step
    that asks for other rows (one per sequence) is costed exactly, and counted."""
    sur = Surrogate(Poly(a=1e-6, lm=1e-5), max_tokens=64, max_decode=8, max_kv=128, decode_q=3)
    it = features([(3, 3), (3, 3), (5, 5)], 3)
    assert it.logits == 7
    assert sur.device(it)[0] == pytest.approx(1e-3 + 11e-6 + 70e-6, rel=1e-9)
    assert sur.exact_fallbacks == 0
    plain = Iteration(it.seqs, it.tokens, it.n_decode, it.decode_kv, it.pairs, it.chunks, 3)
    assert sur.device(plain)[0] == pytest.approx(1e-3 + 11e-6 + 30e-6, rel=1e-12)
    assert sur.exact_fallbacks == 1
    assert features([(1, 5), (4, 4)]).logits is None   # the plain step: one row per sequence


def test_outside_the_grid_is_exact_and_counted():
    """65 tokens with max_tokens 64: costed exactly (1 ms + 65 us), one fallback counted."""
    sur = Surrogate(Poly(a=1e-6), max_tokens=64, max_decode=8, max_kv=128)
    assert sur.device(features([(65, 65)]))[0] == pytest.approx(1.065e-3, rel=1e-12)
    assert sur.exact_fallbacks == 1


class Store:
    """An in-memory TableStore: load and save per table name."""

    def __init__(self):
        self.saved: dict[str, dict] = {}

    def load(self, name: str) -> dict:
        return dict(self.saved.get(name, {}))

    def save(self, name: str, points: dict) -> None:
        self.saved[name] = dict(points)


def test_table_points_are_stored_and_reused():
    """max_tokens 8: a fresh chunk of 6 tokens reads the P table (grid 2, 4, 8) between 4 and 8 and the
    pairs table there too (each entry fresh and after a prefix: 4 points); entries are computed on first
    read (sim.apps.serve.lazytable), so the first surrogate computes those 6 exact points and flush_all
    saves them per table; a second one on a store holding them computes none and gives the same cost
    (1 ms + 6 us)."""
    store, first, second = Store(), Poly(a=1e-6), Poly(a=1e-6)
    a = Surrogate(first, max_tokens=8, max_decode=1, max_kv=16, store=store)
    assert a.device(features([(6, 6)]))[0] == pytest.approx(1.006e-3, rel=1e-12)
    flush_all()
    assert first.points == 6 and (len(store.saved["P"]), len(store.saved["pairs"])) == (2, 4)
    again = Store()
    again.saved = store.saved
    b = Surrogate(second, max_tokens=8, max_decode=1, max_kv=16, store=again)
    assert b.device(features([(6, 6)]))[0] == pytest.approx(1.006e-3, rel=1e-12)
    assert second.points == 0


def test_coarse_grid_grows_by_1_6_above_1024():
    """The coarse tables (KV slopes, chunks, mixed) take 64 ... 768 by hand-picked steps, then x 1.6 per
    point from 1024 (1638, 2620, 4192), and the top: their interpolation error is bounded by this spacing."""
    assert _grid(5000, fine=False) == [0, 1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768,
                                       1024, 1638, 2620, 4192, 5000]


def test_kv_grid_of_the_shortest_requests():
    """max_kv 2 (requests of 1 + 1 tokens): the KV grid is {1, 2}, so a decode at KV 2 is a grid point,
    costed exactly: 1 ms + 1e-12 x 2^2. (A grid up to 3 would interpolate 1e-12 x (1 + 8 / 2) there.)"""
    sur = Surrogate(Poly(c=1e-12), max_tokens=8, max_decode=1, max_kv=2)
    assert sur.device(features([(1, 2)]))[0] - 1e-3 == pytest.approx(4e-12, rel=1e-6, abs=0)


def test_mixed_table_is_coarse_in_the_decode_count():
    """80 decodes at KV 1 and a fresh 16-token chunk, max_decode 128, exact 1 ms + 1e-12 x (decode KV)^2:
    P(96) has no decodes (1 ms); the mixed table M(n, 16) = 1e-12 n^2 is held at the coarse decode counts
    64 and 96 (the GEMMs' kinks cancel in M: module doc), so n = 80 is halfway: 1e-12 x (4096 + 9216) / 2
    = 6656e-12 over 1 ms (the exact cost has 6400e-12)."""
    sur = Surrogate(Poly(c=1e-12), max_tokens=128, max_decode=128, max_kv=16)
    it = features([(1, 1)] * 80 + [(16, 16)])
    assert sur.device(it)[0] - 1e-3 == pytest.approx(6656e-12, rel=1e-6, abs=0)


def test_decode_steps_longer_than_max_tokens_stay_in_the_tables():
    """max_tokens 4 but max_decode 8: a step of 8 one-token decodes has 8 tokens, so the token grid is
    raised to 8 (max_decode x decode_q) and the step is interpolated, not sent to the exact path: D(8)
    at KV 1 each, 1 ms + 8 us, no fallback counted."""
    sur = Surrogate(Poly(a=1e-6), max_tokens=4, max_decode=8, max_kv=16)
    assert sur.max_tokens == 8
    assert sur.device(features([(1, 1)] * 8))[0] == pytest.approx(1.008e-3, rel=1e-12)
    assert sur.exact_fallbacks == 0


def test_tables_other_than_d_and_p_take_the_coarse_token_grid():
    """max_tokens 100: the fine grid has 80 between 64 and 96, the coarse one (module doc: the pairs,
    split, chunk and mixed terms are smooth in the tokens) does not. Pairs, chunks and mixed start at
    2 tokens (1 is the exact path's), split at 4 (two halves of at least 2); the mixed table's decode
    counts are the coarse grid of max_decode 8 less 0."""
    sur = Surrogate(Poly(), max_tokens=100, max_decode=8, max_kv=128)
    coarse = [2, 4, 8, 16, 32, 48, 64, 96, 100]
    assert sur.table("P")[0] == [2, 4, 8, 16, 32, 48, 64, 80, 96, 100]
    assert sur.table("pairs")[0] == coarse
    assert sur.table("split")[0] == coarse[1:]
    assert sur.table("C")[0] == ([1, 2, 4, 8, 16, 32], coarse)
    assert sur.table("M")[0] == ([1, 2, 4, 8], coarse)


def test_mixed_step_kv_between_the_first_grid_points_is_interpolated_not_extended():
    """One decode at KV 100 and a fresh 16-token chunk, max_kv 1024 (KV grid 1, 64, 256, 1024), exact
    1 ms + 1e-12 x (decode KV)^2. P(17) has no decode (1 ms); M(1, 16) = 1e-12 x 1^2 (the decode at KV 1);
    the KV table between 64 and 256 (w = 36 / 192): 1e-12 x (4095 + 0.1875 x 61440) = 15615e-12; no extra
    pairs (the chunk's 136 are a fresh chunk's). Total 15616e-12 over 1 ms. Only KV beyond the grid's last
    point (1024) extends the last segment (from 256 and 1024 it would give -134145e-12 here)."""
    sur = Surrogate(Poly(c=1e-12), max_tokens=64, max_decode=8, max_kv=1024)
    it = features([(1, 100), (16, 16)])
    assert (it.tokens, it.n_decode, it.decode_kv) == (17, 1, 100)
    assert sur.device(it)[0] - 1e-3 == pytest.approx(15616e-12, rel=1e-6, abs=0)


def test_pure_decode_steps_take_the_one_pass_path(monkeypatch):
    """A step of decodes only (3 at KV 40, 70, 90; exact 1 ms + 1 us x tokens + 1e-12 x (decode KV)^2) is
    costed by DecodeCosts in one pass (speed: the usual step), equal to the general interpolation. By hand:
    D(3) halfway between D(2) and D(4): 1 ms + 3 us + 1e-12 x (4 + 16) / 2; the KV table K(n, k) =
    1e-12 x ((n k)^2 - n^2) at mean KV 200 / 3, between 64 and 256 (w = 1 / 72): n = 2: 16380 + 245760 / 72
    = 19793.33, n = 4: 65520 + 983040 / 72 = 79173.33, halfway 49483.33; in all 49493.33e-12 over 1.003 ms."""
    sur = Surrogate(Poly(a=1e-6, c=1e-12), max_tokens=64, max_decode=8, max_kv=1024)
    it = features([(1, 40), (1, 70), (1, 90)])
    general = sur._interpolated(it, 3, 0)

    def refuse(*_):
        raise AssertionError("a pure decode step went through the general interpolation")
    monkeypatch.setattr(sur, "_interpolated", refuse)
    assert general[0] - 1.003e-3 == pytest.approx(49493.333e-12, rel=1e-6, abs=0)
    assert sur.device(it) == pytest.approx(general, rel=1e-12)


class Chunky(Poly):
    """Poly with e seconds a prefill chunk: splitting tokens into more chunks costs more than their fewer
    attended pairs save, so the "split" table's slope per pair differs from the "pairs" table's."""

    def __init__(self, b: float, e: float):
        super().__init__(b=b)
        self.e = e

    def device(self, it: Iteration) -> tuple[float, float]:
        t = 1e-3 + self.b * it.pairs + self.e * it.chunks
        return t, 2 * t


def test_a_fraction_of_a_pair_more_than_the_even_split_reads_the_pairs_table():
    """Kills stepcost.Surrogate._interpolated__mutmut_183 (`dp >= 1`: a step with 0 < dp < 1 read the split
    table). Two fresh chunks of 3 and 2 tokens attend 3 x 2 + 2 x 1.5 = 9 pairs; the chunk table's even split
    of 5 tokens in 2 (2.5 each) 2 x 2.5 x 3.5 / 2 = 8.75, so dp = 0.25: more pairs than the even split, the
    "pairs" slope. Exact cost 1 ms + b x pairs + e x chunks (b = 1e-9, e = 1e-6). By table, at rest 5 (coarse
    grid 4, 8: w = 1/4; fine P grid the same points): P(5) = 1 ms + e + b (10 + 26 / 4) = 1 ms + e + 16.5 b;
    C(2 chunks, 5) = e - b (4 + 12 / 4) = e - 7 b; pairs slope b everywhere: + 0.25 b. Sum 1 ms + 2 e + 9.75 b.
    The split slope at 5 is b - e (1/4 + (1/16 - 1/4) / 4) = b - 13 e / 64: 5e-8 s less. The one-pass mixed
    cost (mixedcost) gives the same."""
    sur = Surrogate(Chunky(b=1e-9, e=1e-6), max_tokens=64, max_decode=8, max_kv=128)
    it = features([(3, 3), (2, 2)])
    assert (it.pairs, it.chunks, it.tokens) == (9.0, 2, 5)
    want = 1e-3 + 2e-6 + 9.75e-9
    assert sur._interpolated(it, 0, 5)[0] == pytest.approx(want, rel=1e-12)
    assert sur.device(it)[0] == pytest.approx(want, rel=1e-12)


def test_cost_vectors_of_unequal_length_pad_the_shorter_with_zeros():
    """Kills costvec.lerp__mutmut_13 (`y + x` in the padded branch). A cost made before a resource joined
    ExactCost.keys is one entry shorter: that resource was not busy, 0 s. lerp((1, 2), (3, 4, 5), 1/4) =
    (1 + 2/4, 2 + 2/4, 0 + 5/4) = (1.5, 2.5, 1.25); add gives (4, 6, 5); the equal-length branch the same
    numbers where the lengths match."""
    assert lerp((1.0, 2.0), (3.0, 4.0, 5.0), 0.25) == (1.5, 2.5, 1.25)
    assert lerp((3.0, 4.0, 5.0), (1.0, 2.0), 0.25) == (2.5, 3.5, 3.75)
    assert lerp((1.0, 2.0, 0.0), (3.0, 4.0, 5.0), 0.25) == (1.5, 2.5, 1.25)
    assert add((1.0, 2.0), (3.0, 4.0, 5.0)) == (4.0, 6.0, 5.0) == add((1.0, 2.0, 0.0), (3.0, 4.0, 5.0))


def test_the_fine_tables_take_the_cost_s_kinks_as_grid_points():
    """An exact cost with kinks (ExactCost.kinks: a stack's last graph-replayed token count and the first eager
    one) puts both on the prefill and decode grids, and on no coarse table (their differences cancel the jump);
    a cost without them leaves the grids as they were. max 100, kinks 70 / 71."""
    class Kinked(Poly):
        kinks = (70, 71)

    sur = Surrogate(Kinked(), max_tokens=100, max_decode=100, max_kv=128)
    assert sur.table("P")[0] == [2, 4, 8, 16, 32, 48, 64, 70, 71, 80, 96, 100]
    assert {70, 71} <= set(sur.table("D")[0])
    assert not {70, 71} & set(sur.table("pairs")[0])
    plain = Surrogate(Poly(), max_tokens=100, max_decode=100, max_kv=128)
    assert not {70, 71} & (set(plain.table("P")[0]) | set(plain.table("D")[0]))

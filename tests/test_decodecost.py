"""The one-pass pure decode cost (sim.apps.serve.decodecost) gives the vector the general
interpolation (Surrogate._interpolated) gives, to the bit, wherever it answers; and it does answer for
the steps a serving run has (a mean kv_len within the KV table)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.apps.serve.cohort import DecodeSeqs
from sim.apps.serve.costvec import within_step
from sim.apps.serve.iteration import Iteration
from sim.apps.serve.stepcost import Surrogate


class CurvedCost:
    """A device cost curved in every feature (a GEMM-like kink, attention super-linear), so that no
    interpolation step is exact by accident and a reordered operation shows in the last bits."""
    keys = ["gpu", "gpu.compute", "gpu.memory"]

    def device(self, it: Iteration) -> tuple[float, ...]:
        t = 1e-3 + 3e-6 * max(it.tokens, 64) ** 1.1 + 7e-9 * it.decode_kv ** 1.05 + 1e-11 * it.pairs * math.log1p(it.tokens)
        return t, 0.37 * t + 1e-5 * it.n_decode, 0.9 * t, t / 3, t * math.sqrt(it.n_decode + 1) / 7


def surrogate() -> Surrogate:
    return Surrogate(CurvedCost(), max_tokens=2048, max_decode=256, max_kv=8192)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 256), st.integers(1, 9000))
def test_one_pass_equals_the_general_interpolation(n, kv_mean):
    sur = surrogate()
    kv = n * kv_mean + n // 3
    it = Iteration(tuple((1, kv_mean) for _ in range(n)), n, n, kv, 0.0, 0)
    fast = sur._decode(n, kv)
    general = sur._interpolated(it, n, 0)
    if fast is not None:
        assert fast == general          # equal, not close
    assert sur.device(it) == within_step(general)   # the step-length clamp on top (costvec.within_step)
    assert (fast is None) == (kv / n > 8192)   # it answers everywhere in the table's range


def test_decode_seqs_read_as_the_tuple_they_stand_for():
    seqs = DecodeSeqs((3, 7), 5, ((16, 16),))
    want = ((1, 8), (1, 12), (16, 16))
    assert seqs == want and want == seqs and len(seqs) == 3 and tuple(seqs) == want and seqs[1] == (1, 12)
    assert hash(seqs) == hash(want) and seqs != ((1, 8), (1, 12))
    a = Iteration(seqs, 18, 2, 20, 0.0, 1)
    assert a == Iteration(want, 18, 2, 20, 0.0, 1) and a != Iteration(want[:2], 18, 2, 20, 0.0, 1)


def test_no_resource_is_busier_than_the_step():
    """An interpolated busy time above the interpolated step time is cut to it; energy and the rest untouched."""
    assert within_step((1.0, 5.0, 1.25, 0.5)) == (1.0, 5.0, 1.0, 0.5)
    ok = (2.0, 3.0, 2.0, 1.5)
    assert within_step(ok) is ok


class HostCost(CurvedCost):
    """CurvedCost with host work per step that grows with the sequence count (as ExactCost.engine_n), its
    resource joining the keys on first use."""

    def __init__(self) -> None:
        self.keys = list(CurvedCost.keys)

    def engine_n(self, c: tuple[float, ...], n: int) -> tuple[float, ...]:
        if "host" not in self.keys:
            self.keys.append("host")
        out = list(c) + [0.0] * (2 + len(self.keys) - len(c))
        h = 2e-5 + 3e-7 * n ** 0.9
        out[0], out[1] = c[0] + h, c[1] + 0.11 * h
        out[2 + self.keys.index("host")] += h
        return tuple(out)

    def engine(self, c: tuple[float, ...], it: Iteration) -> tuple[float, ...]:
        return self.engine_n(c, len(it.seqs))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 300), st.integers(1, 9000))
def test_decode_step_is_the_call_it_stands_for(n, kv_mean):
    """Surrogate.decode_step (the engine's cohort steps) gives __call__'s vector to the bit, inside the grid
    without building the step, beyond it (n past max_decode 256, mean kv_len past max_kv 8192) through it."""
    kv = n * kv_mean + n // 3
    it = Iteration(tuple((1, kv_mean) for _ in range(n)), n, n, kv, 0.0, 0)
    built = []
    fast = Surrogate(HostCost(), max_tokens=2048, max_decode=256, max_kv=8192)
    got = fast.decode_step(n, kv, lambda: built.append(1) or it)
    assert got == Surrogate(HostCost(), max_tokens=2048, max_decode=256, max_kv=8192)(it)
    assert bool(built) == (n > 256 or kv / n > 8192)


def test_decode_step_reads_a_step_run_ahead_kept():
    """A whole step kept by run-ahead under (n, decode_kv, len(keys)) is the answer, as it is the same step."""
    sur = Surrogate(HostCost(), max_tokens=2048, max_decode=256, max_kv=8192)
    sur.memo.put((4, 4000, 3), (9.0, 9.0, 9.0, 9.0, 9.0))
    assert sur.decode_step(4, 4000, lambda: None) == (9.0, 9.0, 9.0, 9.0, 9.0)
    assert sur.decode_step(4, 4004, lambda: None) != (9.0, 9.0, 9.0, 9.0, 9.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 256), st.integers(1, 8000), st.integers(1, 300))
def test_cells_kept_between_steps_give_the_general_interpolation(n, kv_mean, steps):
    """One surrogate over a run of steps (each context one token longer, so the mean kv_len crosses grid
    points: a kept KV cell is reused inside its segment, replaced past it) gives the general vector each step."""
    sur = surrogate()
    for j in range(steps):
        kv = n * (kv_mean + j) + n // 3
        if kv / n > 8192:
            break
        it = Iteration(tuple((1, kv_mean + j) for _ in range(n)), n, n, kv, 0.0, 0)
        assert sur._decode(n, kv) == sur._interpolated(it, n, 0)
    assert len(sur._decode._cells) == 1

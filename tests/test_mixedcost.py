"""The one-pass cost of steps with prefill tokens (sim.apps.serve.mixedcost) gives the vector the general
interpolation (Surrogate._interpolated) gives, to the bit, wherever it answers; and it does answer for the
steps a serving run has (decodes beside the prefill or none, a mean kv_len within the KV table, any
number of prefill chunks)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.apps.serve.costvec import within_step
from sim.apps.serve.iteration import Iteration, features
from sim.apps.serve.stepcost import Surrogate
from tests.test_decodecost import CurvedCost


def surrogate() -> Surrogate:
    return Surrogate(CurvedCost(), max_tokens=2048, max_decode=256, max_kv=8192)


@st.composite
def mixed_steps(draw) -> list[tuple[int, int]]:
    """n decodes (or none: a prefill batch) at kv_lens around a mean, then 1-6 prefill chunks (fresh or
    after a prefix)."""
    n = draw(st.integers(0, 200))
    mean = draw(st.integers(1, 9000))
    seqs = [(1, max(1, mean + draw(st.integers(-mean // 2, mean // 2)))) for _ in range(min(n, 4))]
    seqs += [(1, mean)] * (n - len(seqs))
    for _ in range(draw(st.integers(1, 6))):
        q = draw(st.integers(2, 300))
        seqs.append((q, q + draw(st.sampled_from([0, 0, 17, 900, 5000]))))
    return seqs


@settings(max_examples=500, deadline=None)
@given(mixed_steps())
def test_one_pass_equals_the_general_interpolation(seqs):
    it = features(seqs)
    n, rest = it.n_decode, it.tokens - it.n_decode
    fast = surrogate()._mixed(it, n, rest)
    general = surrogate()._interpolated(it, n, rest)
    if fast is not None:
        assert fast == general          # equal, not close
        assert [x.hex() for x in fast] == [x.hex() for x in general]   # and the same bits (a -0.0 shows)
    assert (fast is None) == (n > 0 and it.decode_kv / n > 8192)   # it answers everywhere in the KV table's range
    sur = surrogate()
    if it.tokens <= sur.max_tokens:
        assert sur.device(it) == within_step(general)   # the step-length clamp on top (costvec.within_step)


def test_a_vector_of_another_length_takes_the_general_path():
    """A resource first seen after some entries were computed leaves those vectors shorter: the one
    pass declines (None), and Surrogate.device's general path pads them with zeros."""
    class Growing(CurvedCost):
        calls = 0

        def device(self, it: Iteration) -> tuple[float, ...]:
            self.calls += 1
            v = super().device(it)
            return v if self.calls < 10 else v + (1e-3 * it.tokens,)

    sur = Surrogate(Growing(), max_tokens=2048, max_decode=256, max_kv=8192)
    it = features([(1, 700)] * 40 + [(300, 300)])
    assert sur._mixed(it, 40, 300) is None
    assert len(sur.device(it)) == 6

"""Hand-derived edge cases of the core cost functions that the mutation job (scripts/mutation_check.py,
issue 21) found untested: the roofline's per-kind and small-M curves, steady slices, dequantized
GEMMs on a tiled preset, work_time_s on arrays and zero work, odd-width and empty format shapes,
weight bytes of a model whose first layers are dense, and the layer-folding extrapolation.

The roofline checks use one made-up efficiency block on the a6000 preset (768 GB/s, fp16 154.8
TFLOP/s, vector 38.7 TFLOP/s, 4 us launch): ramps given as half sizes, eff(x) = max x / (x + half),
so a time is (work + half) / (peak x max); 64 x 128 GEMM tiles on 84 SMs; a norm override with its
own compute ramp and a 10 us floor; a rope override of the memory ceiling only; GEMMs of M = 1 on a
`gemv` curve (memory_max 0.6, 7 us floor); energy 7e-11 J per GDDR6 byte (the preset's) plus made-up
per-FLOP energies, 2 pJ in fp16, 1 pJ on the vector units, 4 pJ in fp32.
"""

from __future__ import annotations

import numpy as np
import pytest

from hw_models.cost import roofline_cost, work_time_s
from hw_models.machine import Efficiency, machine_from_dict, raw_machine
from hw_models.stack.spec import load_stack
from sim.core import graph as g
from sim.core.errors import ConfigError
from sim.core.footprint import activation_peak_bytes, weight_bytes
from sim.core.formats import NumberFormat, get_format
from sim.core.generation import fold_layers
from sim.core.graph import Op, OpGraph, TensorUse
from sim.core.lowering import FormatPolicy
from sim.core.model import load_model
from sim.core.results import StepResult

FP16, VECTOR, BW, LAUNCH = 154.8e12, 38.7e12, 768e9, 4e-6
C_MAX, C_HALF, M_MAX, M_HALF = 0.8, 2e6, 0.85, 1e6
N = K = 4096
W_FP16 = 2 * N * K                      # 33,554,432 B
W_INT4 = N * K // 2 + N * (K // 128) * 2  # 8,388,608 B of nibbles + one fp16 scale per 128: 8,650,752 B


@pytest.fixture(scope="module")
def gpu():
    raw = raw_machine("a6000")
    raw["units"]["gpu"]["efficiency"] = dict(
        compute_max=C_MAX, compute_half_flops=C_HALF, memory_max=M_MAX, memory_half_bytes=M_HALF,
        parallel_units=84, gemm_tile_m=64, gemm_tile_n=128,
        by_kind={"norm": {"compute_max": 0.5, "compute_half_flops": 1e5, "overhead_s": 10e-6},
                 "rope": {"memory_max": 0.5}},
        gemv_max_m=1, gemv={"memory_max": 0.6, "overhead_s": 7e-6})
    raw["units"]["gpu"]["energy_j_per_flop"] = {"fp16": 2e-12, "vector": 1e-12, "fp32": 4e-12}
    m = machine_from_dict(raw, "edges")
    return m.units["gpu"], m.memory["gddr"]


def close(x: float, rel: float = 1e-12):
    """pytest.approx without its 1e-12 absolute floor, which would pass any two times under a microsecond."""
    return pytest.approx(x, rel=rel, abs=0)


def act(name: str, *shape: int) -> TensorUse:
    return TensorUse(name, "activation", shape, "fp16", 2 * int(np.prod(shape)))


def vector_op(kind: str, flops: float, elements: int, weight: bool = False) -> Op:
    reads = (act("x", 1, elements),) + ((TensorUse("w", "weight", (elements,), "fp16", 2 * elements),) if weight else ())
    return Op(kind, kind, flops, reads, (act("y", 1, elements),))


def gemm(m: int, *weights: TensorUse) -> Op:
    return Op("fc", g.GEMM, 2.0 * m * N * K, (act("x", m, K), *weights), (act("y", m, N),),
              (("m", m), ("n", N), ("k", K)))


def fp16_w() -> TensorUse:
    return TensorUse("w", "weight", (N, K), "fp16", W_FP16)


def test_vector_ops_keep_a_compute_ramp_only_where_their_kind_fits_one(gpu):
    """Norm (override: compute_max 0.5, its own half 1e5 FLOP, 10 us floor): 16,384 FLOP and 3 x 8192 B,
    compute (16,384 + 1e5) / (38.7e12 x 0.5) = 6.02 ns, memory (24,576 + 1e6) / (768e9 x 0.85) = 1.57 us,
    10 us floor: overhead bound. Rope (override of memory_max only) and softmax (none): the unit's
    tensor-core ramp is dropped, compute = FLOPs / (38.7e12 x 0.8) exactly."""
    unit, tier = gpu
    c = roofline_cost(vector_op(g.NORM, 16384, 4096, weight=True), unit, "gpu", tier)
    assert c.compute_s == close((16384 + 1e5) / (VECTOR * 0.5))
    assert c.memory_s == close((3 * 8192 + M_HALF) / (BW * M_MAX))
    assert (c.overhead_s, c.bound, c.path, c.unit) == (close(10e-6), "overhead", "vector", "gpu")
    assert c.duration_s == close(10e-6 + c.memory_s)
    assert c.energy_j == close(3 * 8192 * 7e-11 + 16384 * 1e-12)      # bytes + vector FLOPs
    rope = roofline_cost(vector_op(g.ROPE, 49152, 8192), unit, "gpu", tier)
    assert rope.compute_s == close(49152 / (VECTOR * C_MAX))
    assert rope.memory_s == close((2 * 8192 * 2 + M_HALF) / (BW * 0.5))
    assert rope.overhead_s == LAUNCH
    soft = roofline_cost(vector_op(g.SOFTMAX, 81920, 16384), unit, "gpu", tier)
    assert soft.compute_s == close(81920 / (VECTOR * C_MAX))


def test_small_m_gemm_takes_the_gemv_curve_and_the_wave_term(gpu):
    """4096 x 4096 fp16 GEMM. M = 1: one 64-row tile x 32 column tiles = 32 tiles on 84 SMs, split-K
    floor(84 / 32) = 2, 64 CTAs in one wave: useful 1 x 4096 x 2 / (84 x 64 x 128) = 1/84, so the SMs
    issue 84 x the FLOPs and the ramp sits on that issued work (work_time_s): compute = (84 x FLOPs +
    2e6) / (154.8e12 x 0.8) = 22.8 us; memory on the gemv curve (W + 2 x 8192 B + 1e6) / (768e9 x 0.6)
    = 75.0 us; 7 us floor. M = 2: the same 32 tiles, 2/84 useful, so the same issued work; the unit's
    memory curve (0.85) and the 4 us launch. A steady slice (a pipelined op's continuation): no floor,
    no ramps. An activation x activation product (no weight) computes natively."""
    unit, tier = gpu
    f1, b1 = 2.0 * N * K, W_FP16 + 2 * 8192
    c = roofline_cost(gemm(1, fp16_w()), unit, "gpu", tier)
    assert c.compute_s == close((84 * f1 + C_HALF) / (FP16 * C_MAX))
    assert c.memory_s == close((b1 + M_HALF) / (BW * 0.6))
    assert (c.overhead_s, c.bound, c.path) == (close(7e-6), "memory", "fp16 native")
    assert c.duration_s == close(7e-6 + (b1 + M_HALF) / (BW * 0.6))
    assert c.energy_j == close(b1 * 7e-11 + f1 * 2e-12)               # bytes + fp16 FLOPs
    c2 = roofline_cost(gemm(2, fp16_w()), unit, "gpu", tier)
    assert c2.compute_s == close((42 * 2 * f1 + C_HALF) / (FP16 * C_MAX))
    assert c2.memory_s == close((W_FP16 + 4 * 8192 + M_HALF) / (BW * M_MAX))
    assert c2.overhead_s == LAUNCH
    s = roofline_cost(gemm(1, fp16_w()), unit, "gpu", tier, steady=True)
    assert s.compute_s == close(84 * f1 / (FP16 * C_MAX))
    assert s.memory_s == close(b1 / (BW * 0.6))
    assert s.overhead_s == 0.0 and s.duration_s == close(b1 / (BW * 0.6))
    x2 = Op("xx", g.GEMM, f1, (act("a", 1, K), act("b", N, K)), (act("y", 1, N),), (("m", 1), ("n", N), ("k", K)))
    assert roofline_cost(x2, unit, "gpu", tier).path == "fp16 native"


def test_dequantized_gemm_skips_the_wave_term(gpu):
    """int4 (groups of 128) weights under fp16 activations: a6000's int4 rate needs int4 activations,
    so the kernel dequantizes into fp16, 2 vector FLOPs per weight element at 38.7e12 x 0.8, and (as a
    weight-only kernel tiles M at the MMA's 16 rows, issue 15) takes no wave term: compute =
    (FLOPs + 2e6) / (154.8e12 x 0.8) + 2 x 4096^2 / (38.7e12 x 0.8). The stored operand is the matrix
    even when the op lists a 1-D fp16 bias first, and the bias is not dequantized."""
    unit, tier = gpu
    bias = TensorUse("b", "weight", (N,), "fp16", 2 * N)
    op = gemm(1, bias, TensorUse("w", "weight", (N, K), "int4", W_INT4))
    c = roofline_cost(op, unit, "gpu", tier)
    assert c.path == "int4 -> fp16 dequant"
    assert c.compute_s == close((2.0 * N * K + C_HALF) / (FP16 * C_MAX) + 2 * N * K / (VECTOR * C_MAX))
    assert c.memory_s == close((W_INT4 + 3 * 8192 + M_HALF) / (BW * 0.6))
    with pytest.raises(ConfigError, match=r"units\.gpu has no native int4 weight x fp16 activation matrix rate"):
        roofline_cost(op, unit, "gpu", tier, mode="native")


def test_a_stack_keeps_the_plain_roofline_where_it_says_nothing(gpu):
    """torch-eager (hw_models/stack/presets) has no kernel spec for an fp16 GEMM: the M = 1 GEMV keeps the
    plain roofline above, steady slices included. Its norm is `kernels` kernels at its floor moving
    `traffic` x the one-pass bytes at its memory_efficiency x 0.85 x 768 GB/s (8 kernels, traffic 9 there), or
    its mean's serial walk where that is longer: one 4096-wide row is summed by 512 threads, 8 values each
    (hw_models.stack.row_kernels.row_reduce). fp8_e5m2 weights have no kernel family there, so
    compute: native still refuses them on the a6000 (no fp8 rate)."""
    unit, tier = gpu
    eager = load_stack("torch-eager")
    c = roofline_cost(gemm(1, fp16_w()), unit, "gpu", tier, stack=eager)
    assert (c.unit, c.path) == ("gpu", "fp16 native")
    assert c.duration_s == close(7e-6 + (W_FP16 + 2 * 8192 + M_HALF) / (BW * 0.6))
    s = roofline_cost(gemm(1, fp16_w()), unit, "gpu", tier, steady=True, stack=eager)
    assert s.duration_s == close((W_FP16 + 2 * 8192) / (BW * 0.6))
    op = vector_op(g.NORM, 16384, 4096, weight=True)
    spec = eager.spec(op)
    norm = roofline_cost(op, unit, "gpu", tier, stack=eager)
    assert norm.unit == "gpu"
    assert norm.duration_s == close(spec.kernels * spec.floor_s
                                    + max(spec.traffic * 3 * 8192 / (BW * M_MAX * spec.memory_efficiency),
                                          8 * spec.serial.per_s))
    fp8 = gemm(1, TensorUse("w", "weight", (N, K), "fp8_e5m2", N * K))
    with pytest.raises(ConfigError, match=r"units\.gpu has no native fp8_e5m2 weight"):
        roofline_cost(fp8, unit, "gpu", tier, mode="native", stack=eager)


def test_work_time_on_arrays_with_one_scale_and_no_work():
    """t = (work + half) / (peak x max) per element, 0 for no work with no 0/0 evaluated; an
    element below one byte is no exception (a per-stack share can be). One scalar work with an
    array of scales gives one time per scale; a scalar in, a Python float out. A scale of 0.5 (half
    the issued work useful) doubles the work the curve sees: (2 x 2e6 + 1e6) / (peak x max)."""
    eff = Efficiency(memory_max=0.85, memory_half_bytes=1e6)
    work = np.array([0.0, 0.5, 2e6])
    with np.errstate(all="raise"):
        got = work_time_s(work, BW, eff.memory)
        zero = work_time_s(0.0, BW, eff.memory, np.array([1.0, 0.5]))
    assert got == close([0.0, (0.5 + 1e6) / (BW * 0.85), 3e6 / (BW * 0.85)])
    assert np.shape(zero) == (2,) and not zero.any()
    one = work_time_s(2e6, BW, eff.memory, 0.5)
    assert type(one) is float and one == close(5e6 / (BW * 0.85))


# ----------------------------------------------------------------- formats and footprint

def test_format_bytes_round_up_and_empty_shapes():
    """Odd widths round each part up to whole bytes: 3-bit elements in blocks of 5 with 5-bit scales
    and an 18-bit tensor scale, shape (2, 7): 42 bits -> 6 B, 2 x ceil(7/5) = 4 scales = 20 bits ->
    3 B, 18 bits -> 3 B: 12 B. Groups of 1: a scale per element, (2, 3) int8_g1 = 6 + 6 x 2 B.
    A plain format has no scales; an empty (zero-width) tensor stores nothing, per channel too."""
    odd = NumberFormat("odd", 3, "int", 5, 5, 18)
    assert (odd.element_bytes((2, 7)), odd.scale_count((2, 7)), odd.scale_bytes((2, 7))) == (6, 4, 6)
    assert odd.storage_bytes((2, 7)) == 12
    g1 = get_format("int8_g1")
    assert (g1.scale_count((2, 3)), g1.storage_bytes((2, 3))) == (6, 18)
    assert get_format("fp16").scale_count((4096,)) == 0 == get_format("fp16").scale_bytes((64, 4096))
    for name in ("int8", "int4", "mxfp4"):
        assert get_format(name).scale_count((5, 0)) == 0 == get_format(name).storage_bytes((5, 0)), name


def test_weight_bytes_of_a_model_with_a_dense_first_layer():
    """DeepSeek-V2-Lite (models.yaml; MLA as MQA of head_dim 288): embedding and untied head 2 x 102400 x
    2048; 27 layers of q 2048 x 4608, k and v 2048 x 288, o 4608 x 2048 and two norms of 2048; layer 0 a
    dense MLP 3 x 2048 x 10944; layers 1-26 a router 2048 x 64, 64 experts 3 x 2048 x 1408 and 2 shared
    experts 3 x 2048 x 2816; a final norm: 15,876,339,712 parameters, 2 B each in fp16."""
    attn = 2048 * 4608 * 2 + 2048 * 288 * 2 + 2 * 2048
    moe = 2048 * 64 + 64 * 3 * 2048 * 1408 + 3 * 2048 * 2816
    params = 2 * 102400 * 2048 + 27 * attn + 3 * 2048 * 10944 + 26 * moe + 2048
    assert params == 15_876_339_712
    assert weight_bytes(load_model("deepseek-v2-lite"), FormatPolicy()) == 2 * params


def test_tied_head_counts_the_table_once_at_its_larger_size():
    """OPT-6.7B ties its LM head to the embedding table: with the head overridden to int4 the table is
    still read by the embedding in fp16, and stored once: the same bytes as all-fp16."""
    opt = load_model("opt-6.7b")
    assert opt.tie_word_embeddings
    assert weight_bytes(opt, FormatPolicy(overrides=(("lm_head", "int4"),))) == weight_bytes(opt, FormatPolicy())
    assert activation_peak_bytes(OpGraph("decode", 1, 1, 1)) == 0     # no op, nothing live


# ----------------------------------------------------------------- layer folding

class Runs:
    """run(n): a step of n layers whose time, busy times, energy and counters grow as n^2 (not
    linearly, so folding is visible); a link resource appears from the 3rd layer on; an idle
    resource is listed (at 0 s) in runs of up to 2 layers only."""

    def __init__(self):
        self.calls: list[int] = []

    def __call__(self, n: int) -> StepResult:
        self.calls.append(n)
        busy = {"gpu": float(n * n), **({"link": float(n)} if n > 2 else {"idle": 0.0})}
        return StepResult("decode", 100 + n, float(n * n), busy, 3.0 * n * n, {"bytes": 10.0 * n * n})


def test_fold_layers_extrapolates_from_two_runs():
    """F = 2, L = 10: T = T(2) + 8 (T(3) - T(2)) = 4 + 8 x 5 = 44 (time, gpu busy), energy 3 x 44,
    bytes 10 x 44; link, absent from run(2): 0 + 8 x (3 - 0) = 24; idle, absent from run(3): 0.
    Phase and kv_len are run(3)'s."""
    run = Runs()
    r = fold_layers(run, 10, 2)
    assert run.calls == [2, 3]
    assert (r.phase, r.kv_len, r.time_s, r.energy_j) == ("decode", 103, 44.0, 132.0)
    assert r.busy_s == {"gpu": 44.0, "link": 24.0, "idle": 0.0}
    assert r.counters == {"bytes": 440.0}


@pytest.mark.parametrize("layers, exhaustive, calls, time_s", [
    (10, True, [10], 100.0),      # exhaustive: every layer simulated
    (4, False, [2, 3], 14.0),     # 4 + 2 x 5
    (3, False, [3], 9.0),         # F + 1 layers or fewer: simulated whole, once
    (2, False, [2], 4.0),
    (1, False, [1], 1.0),
])
def test_fold_layers_runs_short_steps_whole(layers, exhaustive, calls, time_s):
    run = Runs()
    assert fold_layers(run, layers, 2, exhaustive=exhaustive).time_s == time_s
    assert run.calls == calls

"""Quantized GEMM families fitted on aiconfigurator's in-sample tables (hw_models/stack/
kernel_families_fitted.yaml, scripts/fit_kernels.py): each family's floor and slope checked
by hand from the YAML figures and the preset's datasheet bandwidth, and never faster with
more work."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from hw_models.stack import cost
from hw_models.stack.kernel_families import families
from hw_models.stack.spec import load_stack
from sim.apps.trace.aic import GEMM_FORMAT, _mapper, gemm_op

H100_STREAM_BYTES_PER_S = 3.35e12 * 0.85     # h100_sxm.yaml: datasheet bandwidth x memory_max
A100_STREAM_BYTES_PER_S = 2.039e12 * 0.85    # a100_80g.yaml
PRO6000_STREAM_BYTES_PER_S = 1792e9 * 0.85   # rtx_pro_6000.yaml
# family -> (preset, stack, weight format, weight bytes per element, streaming rate of that preset)
FITTED = {
    "trtllm_fp8_per_tensor": ("h100_sxm", "trtllm", "fp8_e4m3", 1.0, H100_STREAM_BYTES_PER_S),
    "vllm_fp8_per_tensor": ("h100_sxm", "vllm", "fp8_e4m3", 1.0, H100_STREAM_BYTES_PER_S),
    "vllm_fp8_per_tensor_sm120": ("rtx_pro_6000", "vllm", "fp8_e4m3", 1.0, PRO6000_STREAM_BYTES_PER_S),
    "sglang_fp8_per_tensor": ("h100_sxm", "sglang", "fp8_e4m3", 1.0, H100_STREAM_BYTES_PER_S),
    "sglang_fp8_per_tensor_sm120": ("rtx_pro_6000", "sglang", "fp8_e4m3", 1.0, PRO6000_STREAM_BYTES_PER_S),
    "trtllm_w4a16": ("a100_80g", "trtllm", "int4", None, A100_STREAM_BYTES_PER_S),
    "trtllm_w8a16": ("a100_80g", "trtllm", "int8", None, A100_STREAM_BYTES_PER_S),
    "trtllm_nvfp4": ("rtx_pro_6000", "trtllm", "nvfp4", None, None),
    "vllm_nvfp4": ("rtx_pro_6000", "vllm", "nvfp4", None, None),
    "sglang_nvfp4": ("rtx_pro_6000", "sglang", "nvfp4", None, None),
    "trtllm_fp8_block": ("h100_sxm", "trtllm", "fp8_block128", None, H100_STREAM_BYTES_PER_S),
    "trtllm_fp8_block_sm120": ("rtx_pro_6000", "trtllm", "fp8_block128", None, PRO6000_STREAM_BYTES_PER_S),
    "vllm_fp8_block": ("h100_sxm", "vllm", "fp8_block128", None, H100_STREAM_BYTES_PER_S),
    "sglang_fp8_block": ("h100_sxm", "sglang", "fp8_block128", None, H100_STREAM_BYTES_PER_S),
}


def _as_timed(preset: str, stack: str, fmt: str):
    """The per-op replay of a family's own rows, timed as the collector timed them: vLLM's block-FP8 rows
    without a CUDA graph (sim.apps.trace.aic EAGER_TIMED), every other row graph-replayed."""
    return _mapper(preset, stack, eager=(stack, fmt) == ("vllm", "fp8_block128"))


def _cost_s(family: str, m: int, n: int, k: int) -> float:
    preset, stack, fmt, _, _ = FITTED[family]
    return _as_timed(preset, stack, fmt).cost(gemm_op(m, n, k, fmt)).duration_s


def test_stacks_name_the_fitted_families():
    for family, (preset, stack, fmt, _, _) in FITTED.items():
        assert _as_timed(preset, stack, fmt).cost(gemm_op(16, 4096, 4096, fmt)).path == family


def test_the_architecture_picks_the_fp8_kernel():
    """sgl-kernel's and vLLM's CUTLASS FP8 GEMMs build one configuration on SM 12.x and shape-dispatched
    ones on SM 9.0 (fp8_gemm_kernel.cu, scaled_mm_sm120_fp8_dispatch.cuh), and TensorRT-LLM's block-scaled FP8
    GEMM picks its kernel by SM version (fp8BlockScalingGemm.cpp): the stacks say so per compute capability
    (RTX PRO 6000 12.0, H100 9.0); a GPU of another architecture (A100, 8.0) takes quant_gemm's."""
    for stack, default in (("sglang", "sglang_fp8_per_tensor"), ("vllm", "vllm_fp8_per_tensor")):
        st = load_stack(stack)
        assert st.family("fp8_e4m3", 12.0) == f"{default}_sm120"
        assert st.family("fp8_e4m3", 9.0) == st.family("fp8_e4m3", 8.0) == st.family("fp8_e4m3") == default
        assert st.family("nvfp4", 12.0) == f"{stack}_nvfp4"    # formats the capability table does not name
    trtllm = load_stack("trtllm")
    assert trtllm.family("fp8_block128", 12.0) == "trtllm_fp8_block_sm120"
    assert trtllm.family("fp8_block128", 9.0) == "trtllm_fp8_block" and trtllm.family("fp8_e4m3", 12.0) == "trtllm_fp8_per_tensor"


@pytest.mark.parametrize("family", FITTED)
def test_floor_is_the_fitted_kernels(family):
    """A tiny GEMM (M=1, 64x64: under a ns of data) costs the GEMM kernel's floor plus, for
    W8A8, the quantize kernel's floor: two kernels; plus, for a family with a serial K-walk, its
    walk over K = 64 (64 x k_walk_s_per_k, at most 0.23 us: the fits' walks are <= 3.6 ns per K);
    at least the family's least call time (min_s: vLLM's FlashInfer block-scaled FP8, ~60 us)."""
    fam = families()[family]
    want = max(fam.min_s, fam.floor_s + (fam.quant_floor_s if fam.activation_quant else 0.0) + 64 * fam.k_walk_s_per_k)
    assert _cost_s(family, 1, 64, 64) == pytest.approx(want, rel=0.01)


@pytest.mark.parametrize("family", ["trtllm_fp8_per_tensor", "vllm_fp8_per_tensor", "sglang_fp8_per_tensor"])
def test_fp8_slope_at_m1_is_the_weight_stream(family):
    """At M=1 the FP8 GEMM streams its 1-byte weights: going from 4096x4096 to 8192x8192 adds
    (8192^2 - 4096^2) B / (3.35 TB/s x 0.85 x efficiency), plus the activations: x grows by
    4096 bf16 values (and the quantize pass reads 2 B + writes 1 B of each), y by 4096 bf16."""
    fam = families()[family]
    bw = FITTED[family][4]
    extra_w = (8192 ** 2 - 4096 ** 2) / (bw * fam.weight_stream_efficiency)
    extra_act = (4096 * 2 + 4096 * 2) / bw + 4096 * 3 / (bw * fam.quant_stream_efficiency)
    slope = _cost_s(family, 1, 8192, 8192) - _cost_s(family, 1, 4096, 4096)
    assert slope == pytest.approx(extra_w + extra_act, rel=0.01)


@pytest.mark.parametrize("family", ["trtllm_fp8_per_tensor", "trtllm_w8a16", "trtllm_fp8_block", "sglang_fp8_block"])
def test_large_m_is_compute_at_the_fitted_fraction(family):
    """At M=8192, 8192x8192 the GEMM is compute-bound: 2 M N K / (peak x fraction(8192)) over
    the floor (989 TFLOP/s bf16, 1979 FP8 on H100; 312 bf16 on A100: the presets' datasheet peaks)."""
    fam = families()[family]
    peak = {"trtllm_fp8_per_tensor": 1979e12, "trtllm_w8a16": 312e12, "trtllm_fp8_block": 1979e12,
            "sglang_fp8_block": 1979e12}[family]
    compute = 2.0 * 8192 ** 3 / (peak * fam.rate_fraction(8192))
    quant = (fam.quant_floor_s + 8192 * 8192 * 3 / (H100_STREAM_BYTES_PER_S * fam.quant_stream_efficiency)
             if fam.activation_quant else 0.0)
    assert _cost_s(family, 8192, 8192, 8192) == pytest.approx(fam.floor_s + quant + compute, rel=0.01)


@pytest.mark.parametrize("family", ["trtllm_nvfp4", "vllm_nvfp4", "sglang_nvfp4", "vllm_fp8_per_tensor_sm120",
                                    "sglang_fp8_per_tensor_sm120"])
def test_k_walk_sets_the_pace_of_a_narrow_gemm(family):
    """RTX PRO 6000 at M = 1, N = 512: the weights (NVFP4: 512 x 16384 x 0.5 B + one 1-byte scale per 16 =
    4.7 MB; FP8: 8.4 MB) stream in at most 8.4e6 / (1792 GB/s x 0.85) = 5.5 us, below the walk over K
    (16384 x 1.5-6.8 ns = 24-112 us), so K 8192 -> 16384 adds exactly 8192 x k_walk_s_per_k (plus, for
    W8A8, the quantize pass's 8192 x 3 B more at its streaming rate), and doubling N to 1024 (at most 11 us
    of stream, 1.7 us of compute at 1% of the FP4 peak) adds nothing. aic measures the NVFP4 shape at
    62.1 us (vLLM) and 47.9-62 us (TRT-LLM, N 512-16384 medians): flat in N, linear in K."""
    fam = families()[family]
    assert fam.k_walk_s_per_k > 0
    quant = 8192 * 3 / (PRO6000_STREAM_BYTES_PER_S * fam.quant_stream_efficiency) if fam.activation_quant else 0.0
    if fam.quant_row_s:   # the dynamic-scale pass at M = 1: the longer of reading x again (2 B per K) and one row
        quant += max(16384 * 2 / PRO6000_STREAM_BYTES_PER_S, fam.quant_row_s) - \
            max(8192 * 2 / PRO6000_STREAM_BYTES_PER_S, fam.quant_row_s)
    slope = _cost_s(family, 1, 512, 16384) - _cost_s(family, 1, 512, 8192)
    assert slope == pytest.approx(8192 * fam.k_walk_s_per_k + quant, rel=1e-6)
    assert _cost_s(family, 1, 1024, 16384) == pytest.approx(_cost_s(family, 1, 512, 16384), rel=1e-9)
    if not fam.activation_quant:
        assert _cost_s(family, 1, 512, 16384) == pytest.approx(fam.floor_s + 16384 * fam.k_walk_s_per_k, rel=1e-9)


@pytest.mark.parametrize("family", ["vllm_fp8_per_tensor", "trtllm_fp8_block_sm120"])
def test_dynamic_scale_pass_costs_a_fixed_time_per_row(monkeypatch, family):
    """vLLM's dynamic per-tensor FP8 scale runs one thread block per token (segmented_max_reduction, an atomicMax
    each into one float): at M = 8192, N = K = 512 on H100 the pass takes 8192 x quant_row_s (7 ns fitted: 57 us)
    rather than the 8192 x 512 x 2 B = 8.4 MB re-read of x (2.9 us at 3.35 TB/s x 0.85): exactly that over the
    family without the pass. aic measures vLLM 0.24 at 68 us on this shape, TensorRT-LLM (static scale) 23 us.
    TensorRT-LLM's block-scaled FP8 on RTX PRO 6000 pays such a pass too (22 ns per row fitted: 180 us at M = 8192,
    against 8.4 MB / (1792 GB/s x 0.85) = 5.5 us of re-read)."""
    preset, stack, fmt, _, bw = FITTED[family]
    fam = families()[family]
    assert fam.quant_row_s > 0
    machine = load_machine(preset)
    unit = machine.units[machine.main_unit]
    args = (gemm_op(8192, 512, 512, fmt), unit, machine.main_unit, machine.memory[unit.memory],
            load_stack(stack), family)
    with_pass = cost.family_cost(*args).duration_s
    monkeypatch.setattr(cost, "families", lambda: {**families(), family: fam.model_copy(
        update={"quant_row_s": 0.0})})
    assert with_pass - cost.family_cost(*args).duration_s == pytest.approx(
        max(8192 * fam.quant_row_s, 8192 * 512 * 2 / bw), rel=1e-6)


@pytest.mark.parametrize("family", FITTED)
def test_never_faster_with_more_work(family):
    ms = [1, 2, 3, 4, 8, 16, 24, 32, 64, 100, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    for n, k in [(1024, 1024), (4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192)]:
        t = [_cost_s(family, m, n, k) for m in ms]
        assert all(b >= a * (1 - 1e-12) for a, b in zip(t, t[1:])), (n, k, t)
        assert _cost_s(family, 64, 2 * n, k) >= t[ms.index(64)]
        assert _cost_s(family, 64, n, 2 * k) >= t[ms.index(64)]


def test_vllm_fp4_is_native_on_blackwell_and_marlin_before():
    """vLLM runs NVFP4 natively where the GPU has an FP4 tensor rate (RTX PRO 6000, B200) and as Marlin
    weight-only emulation where it has none (H100): the same weights cost what each kernel does."""
    op = gemm_op(4096, 4096, 4096, "nvfp4")
    assert _mapper("rtx_pro_6000", "vllm").cost(op).path == "vllm_nvfp4"
    assert _mapper("b200", "vllm").cost(op).path == "vllm_nvfp4"
    assert _mapper("h100_sxm", "vllm").cost(op).path == "fp4_marlin_emulated"


@pytest.mark.parametrize("family", ["trtllm_fp8_block", "sglang_fp8_block"])
def test_fp8_block_slope_at_m1_counts_the_tile_scales(family):
    """At M=1 a block-scaled FP8 GEMM streams its 1-byte weights plus one 4-byte fp32 scale per 128x128
    tile: 4096x4096 -> 8192x8192 adds (8192^2 - 4096^2) B + (64^2 - 32^2) x 4 B = 50,331,648 + 12,288 B
    at 3.35 TB/s x 0.85 x efficiency, plus the activations as the per-tensor FP8 test counts them
    (x and y each 4096 bf16 more; the 1x128 quantize pass reads 2 B and writes 1 B of each)."""
    fam = families()[family]
    bw = FITTED[family][4]
    extra_w = ((8192 ** 2 - 4096 ** 2) + (64 ** 2 - 32 ** 2) * 4) / (bw * fam.weight_stream_efficiency)
    extra_act = (4096 * 2 + 4096 * 2) / bw + 4096 * 3 / (bw * fam.quant_stream_efficiency)
    slope = _cost_s(family, 1, 8192, 8192) - _cost_s(family, 1, 4096, 4096)
    assert slope == pytest.approx(extra_w + extra_act, rel=0.01)


def test_fp8_block_rows_run_the_block_family():
    """aiconfigurator's fp8_block rows are 128x128 block-scaled FP8 (aic README), not per-tensor FP8."""
    assert GEMM_FORMAT["fp8_block"] == "fp8_block128"
    op = gemm_op(16, 4096, 4096, GEMM_FORMAT["fp8_block"])
    assert _mapper("h100_sxm", "trtllm").cost(op).path == "trtllm_fp8_block"
    assert _mapper("h100_sxm", "vllm", eager=True).cost(op).path == "vllm_fp8_block"
    assert _mapper("h100_sxm", "sglang").cost(op).path == "sglang_fp8_block"


def test_vllm_block_fp8_switches_kernel_at_m32():
    """vLLM's block-scaled FP8 on Hopper runs FlashInfer's swapAB kernel below M = 32 and DeepGEMM from 32
    (fp8_utils.py _flashinfer_fp8_blockscale_gemm_impl, torch.cond on M < 32): the aic H100 rows name
    flashinfer_fp8_block at M 1-16 and deepgemm_fp8_block at M 32-8192. A tiny GEMM costs each kernel's least
    call time (aic medians: FlashInfer 59.5-60.4 us at M 1-16, DeepGEMM 88-92 us at M 32-512)."""
    op = lambda m: gemm_op(m, 64, 64, "fp8_block128")   # noqa: E731
    mapper = _mapper("h100_sxm", "vllm", eager=True)
    assert [mapper.cost(op(m)).path for m in (1, 16, 31, 32, 8192)] == \
        ["vllm_fp8_block"] * 3 + ["vllm_fp8_block_deepgemm"] * 2
    assert mapper.cost(op(31)).duration_s == families()["vllm_fp8_block"].min_s
    assert mapper.cost(op(32)).duration_s == families()["vllm_fp8_block_deepgemm"].min_s
    assert 50e-6 < families()["vllm_fp8_block"].min_s < 65e-6 and 75e-6 < families()["vllm_fp8_block_deepgemm"].min_s < 95e-6


def test_least_call_time_hides_the_stream_beneath_it():
    """vLLM's FlashInfer block-scaled FP8 at M = 1 (floor 0 under min_s): 16384 x 16384 weights (268 MB + one
    4-byte scale per 128x128 tile) stream in 94 us at 3.35 TB/s x 0.85, over its ~60 us least call time, so
    N 16384 -> 32768 adds the weights' 268,435,456 + 16384 x 4 B at that rate and y's 16384 bf16 values; at
    4096 x 4096 (5.9 us of stream) the call is min_s exactly."""
    fam = families()["vllm_fp8_block"]
    bw = H100_STREAM_BYTES_PER_S
    cost_s = lambda n, k: _mapper("h100_sxm", "vllm", eager=True).cost(gemm_op(1, n, k, "fp8_block128")).duration_s  # noqa: E731
    slope = cost_s(32768, 16384) - cost_s(16384, 16384)
    assert slope == pytest.approx((268_435_456 + 16384 * 4) / (bw * fam.weight_stream_efficiency) + 16384 * 2 / bw,
                                  rel=1e-6)
    assert cost_s(4096, 4096) == fam.min_s
    # vLLM's Triton block-scaled kernel on L40S: aic medians 329-341 us at M 1-16 whatever the shape (min 283 us)
    triton = families()["vllm_fp8_block_sm89"]
    assert 280e-6 < triton.min_s < 350e-6 and triton.floor_s == 0
    assert _mapper("l40s", "vllm", eager=True).cost(gemm_op(1, 4096, 4096, "fp8_block128")).duration_s == triton.min_s


def test_a_graph_replayed_block_fp8_call_pays_the_kernels_not_the_eager_dispatch():
    """aiconfigurator timed vLLM's block-FP8 rows without a CUDA graph (collector/vllm/collect_gemm.py:
    use_cuda_graph=gemm_type != "fp8_block"), so their ~60 / ~90 us floor (min_s) is the eager call's dispatch.
    Under the vllm stack a step of at most graph_max_tokens (512: vLLM's largest capture size) replays from a graph
    and its block-FP8 call costs as the graph family, DeepGEMM's graph-timed rows in SGLang's tables, to the
    last digit; a step of more tokens runs eagerly and pays min_s again (M 1024, 4096 x 4096: DeepGEMM's 90 us).
    The per-op replay marks exactly vLLM's block-FP8 rows as eager-timed."""
    from sim.apps.trace.aic import EAGER_TIMED

    assert EAGER_TIMED == {("vllm", "fp8_block")}
    assert load_stack("vllm").graph_max_tokens == 512
    graph, sglang = _mapper("h100_sxm", "vllm"), _mapper("h100_sxm", "sglang")
    for m in (1, 16, 31, 32, 256, 512):
        op = gemm_op(m, 4096, 4096, "fp8_block128")
        assert graph.cost(op).path == "sglang_fp8_block"
        assert graph.cost(op).duration_s == sglang.cost(op).duration_s
    assert graph.cost(gemm_op(16, 4096, 4096, "fp8_block128")).duration_s < 15e-6   # SGLang's rows: 11-13 us
    deepgemm = families()["vllm_fp8_block_deepgemm"]
    assert graph.cost(gemm_op(513, 64, 64, "fp8_block128")).duration_s == deepgemm.min_s
    assert graph.cost(gemm_op(1024, 4096, 4096, "fp8_block128")).path == "vllm_fp8_block_deepgemm"


def test_a_graph_family_must_name_a_family(tmp_path):
    from hw_models.stack.kernel_families import families as read
    from sim.core.errors import ConfigError

    bad = tmp_path / "f.yaml"
    bad.write_text("families:\n  x:\n    cite: c\n    rate_points: [[1, 0.5]]\n    graph_family: nowhere\n")
    with pytest.raises(ConfigError, match="graph_family names no kernel family: x -> nowhere"):
        read(bad, None)


def test_smoothquant_runs_the_w8a8_int8_plugin():
    """TensorRT-LLM's SmoothQuant GEMM takes int8 activations (quantized upstream; aic times the plugin layer
    alone): int8 weights with int8 activations run the quant_gemm_w8a8 family, with bf16 activations the
    weight-only plugin. The plugin runs a CUDA-core kernel at M <= 4 and CUTLASS above (smoothQuantGemmPlugin.cpp
    enqueue): trtllm_w8a8_sq switches to trtllm_w8a8_sq_cutlass at M = 5. On A100 a tiny call is the CUDA-core
    kernel's floor (no quantize kernel), and at M = 8192, 8192^3 it is CUTLASS's compute at its fitted fraction
    of the int8 peak (624 TOP/s, a100_80g.yaml) over its floor. Never faster with more rows, across the switch."""
    from sim.apps.trace.aic import GEMM_ACT_FORMAT
    assert GEMM_ACT_FORMAT["sq"] == "int8"
    mapper = _mapper("a100_80g", "trtllm")
    assert [mapper.cost(gemm_op(m, 4096, 4096, "int8", "int8")).path for m in (1, 4, 5, 16)] == \
        ["trtllm_w8a8_sq"] * 2 + ["trtllm_w8a8_sq_cutlass"] * 2
    assert mapper.cost(gemm_op(16, 4096, 4096, "int8")).path == "trtllm_w8a16"
    gemv, cutlass = families()["trtllm_w8a8_sq"], families()["trtllm_w8a8_sq_cutlass"]
    assert not gemv.activation_quant and not cutlass.activation_quant
    assert mapper.cost(gemm_op(1, 64, 64, "int8", "int8")).duration_s == pytest.approx(
        gemv.floor_s + 64 * gemv.k_walk_s_per_k, rel=0.01)
    compute = 2.0 * 8192 ** 3 / (624e12 * cutlass.rate_fraction(8192))
    assert mapper.cost(gemm_op(8192, 8192, 8192, "int8", "int8")).duration_s == pytest.approx(
        cutlass.floor_s + compute, rel=1e-6)
    ms = [1, 2, 3, 4, 5, 6, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    for n, k in [(1024, 1024), (4096, 4096), (14336, 4096), (28672, 8192), (16384, 16384)]:
        t = [mapper.cost(gemm_op(m, n, k, "int8", "int8")).duration_s for m in ms]
        assert all(b >= a for a, b in zip(t, t[1:])), (n, k, t)


def test_vllm_block_fp8_never_faster_with_more_work_across_the_switch():
    """More rows never cost less, the switch from FlashInfer to DeepGEMM at M = 32 included (H100 and, for
    the Triton kernel under its least call time, L40S)."""
    for preset in ("h100_sxm", "l40s"):
        mapper = _mapper(preset, "vllm")
        ms = [1, 2, 4, 8, 16, 24, 31, 32, 48, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
        for n, k in [(1024, 1024), (4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (16384, 16384)]:
            t = [mapper.cost(gemm_op(m, n, k, "fp8_block128")).duration_s for m in ms]
            assert all(b >= a * (1 - 1e-12) for a, b in zip(t, t[1:])), (preset, n, k, t)


def test_switch_needs_both_fields():
    from hw_models.stack.kernel_families import Family
    with pytest.raises(ValueError, match="go together"):
        Family(cite="x", rate_points=[(1, 0.5)], switch_m=32)

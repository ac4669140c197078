"""Costs under a software stack, MoE routing shares and the kernel-family file cache, worked by hand
(issue 32: the survivors of the mutation job on hw_models.stack.cost, sim.core.moe and
hw_models.stack.kernel_families)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from hw_models.cost import roofline_cost
from hw_models.machine import load_machine
from hw_models.stack import cost as stack_cost_module
from hw_models.stack.cost import family_cost, stack_cost
from hw_models.stack.kernel_families import FAMILIES_FILE, Families, families, read_families
from hw_models.stack.spec import KernelSpec, load_stack
from sim.core.errors import ConfigError
from sim.core.graph import Op, TensorUse
from sim.apps.trace.aic import gemm_op
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import load_model
from sim.core.moe import ExpertLoad

# h100_sxm: HBM 3.35 TB/s at memory_max 0.85, 4e-11 J/byte (the preset's figures); its FP8 energy per FLOP is
# read from the preset (a fitted figure that moves with the energy fits).
BW = 3.35e12 * 0.85
J_PER_BYTE = 4e-11


def _h100():
    m = load_machine("h100_sxm")
    u = m.units[m.main_unit]
    return u, m.main_unit, m.memory[u.memory]


def _norm_op():
    """The RMSNorm of Llama-2-7B prefill, 1 x 1024 tokens, fp16 (one layer lowered)."""
    graph = lower(load_model("llama2-7b"), "prefill", 1, 1024, 1024, FormatPolicy("fp16", "fp16", "fp16", ()),
                  False, num_layers=1)
    return graph.op("L0.attn_norm")


def test_w8a8_fp8_gemm_under_torch_eager_by_hand():
    """fp8 q_proj, M = 1, 4096 x 4096, bf16 activations, under torch-eager (fp8_e4m3 -> fp8_scaled_mm):
    weights 16 777 216 B streamed at 0.859 of 2.8475 TB/s = 6.8591 us, activations 8192 + 8192 B at
    2.8475 TB/s = 5.75 ns; the activation-quantization pass reads 2 B and writes 1 B of 4096
    activations: 12 288 B / 2.8475 TB/s = 4.32 ns, one more kernel at the stack's 1.2 us floor (the
    family gives no floor of its own) on top of the family's 2.71 us: overhead 3.91 us, duration
    3.91 + 0.00432 + 6.8649 = 10.7792 us. Energy: 16 793 600 B x 4e-11 = 671.74 uJ, + the quantization pass's net
    2 B an activation through HBM (it reads 2 and writes 1, the GEMM then reads 1 of the op's 2) = 8192 B x 4e-11,
    + 2 x 4096^2 FLOP at the preset's FP8 energy per FLOP. The unit is the gpu, the path the family."""
    u, name, tier = _h100()
    got = roofline_cost(gemm_op(1, 4096, 4096, "fp8"), u, name, tier, stack=load_stack("torch-eager"))
    memory_s = 16777216 / (BW * 0.859) + 16384 / BW
    extra_s = 4096 * 3 / BW
    assert got.overhead_s == pytest.approx(3.91e-6, rel=1e-12)
    assert got.memory_s == pytest.approx(memory_s + extra_s, rel=1e-12)
    assert got.duration_s == pytest.approx(3.91e-6 + extra_s + memory_s, rel=1e-12)
    assert got.duration_s == pytest.approx(10.7792e-6, rel=1e-5)
    fp8_j_per_flop = u.energy_j_per_flop["fp8_e4m3"]
    assert got.energy_j == pytest.approx((16793600 + 2 * 4096) * J_PER_BYTE + 2 * 4096**2 * fp8_j_per_flop, rel=1e-12,
                                         abs=0)
    assert (got.unit, got.path) == ("gpu", "fp8_scaled_mm")


def test_eager_norm_kernel_spec_on_a_preset_below_full_bandwidth():
    """RMSNorm of Llama-2-7B prefill (1 x 1024 tokens, fp16) under torch-eager on h100_sxm: 8 kernels
    at 1.34 us, 9 passes over its bytes at 0.85 x 3.35 TB/s x 0.713 (memory_max below 1, unlike h200's).
    The plain roofline charged the bytes once: the 8 more passes add 8 x bytes x 4e-11 J."""
    u, name, tier = _h100()
    op = _norm_op()
    plain = roofline_cost(op, u, name, tier)
    got = stack_cost(op, u, name, tier, load_stack("torch-eager"), plain)
    memory_s = 9.0 * op.bytes / (BW * 0.713)
    assert got.memory_s == pytest.approx(memory_s, rel=1e-12)
    assert got.duration_s == pytest.approx(8 * 1.34e-6 + max(plain.compute_s, memory_s), rel=1e-12)
    assert got.energy_j == pytest.approx(plain.energy_j + 8 * op.bytes * J_PER_BYTE, rel=1e-12)
    assert got.unit == "gpu" and got.op is op


def test_extra_passes_on_a_tier_without_an_energy_figure_add_no_energy():
    """The same RMSNorm on a memory tier with no energy per byte (None in a preset that gives none): the 8
    more passes add time, not energy; the cost's energy is the plain roofline's."""
    u, name, tier = _h100()
    tier = tier.model_copy(update={"energy_j_per_byte": None})
    op = _norm_op()
    plain = roofline_cost(op, u, name, tier)
    got = stack_cost(op, u, name, tier, load_stack("torch-eager"), plain)
    assert got.energy_j == plain.energy_j
    assert got.memory_s == pytest.approx(9.0 * op.bytes / (BW * 0.713), rel=1e-12)


def test_expert_shares_by_hand():
    """Default (uniform) over 4 experts: 1/4 each. Zipf skew 1 over 3: 1, 1/2, 1/3 over 11/6 =
    6/11, 3/11, 2/11. A histogram 3, 1: 3/4, 1/4."""
    assert ExpertLoad().shares(4) == pytest.approx([0.25] * 4, rel=1e-12)
    assert ExpertLoad("zipf").shares(3) == pytest.approx(np.array([6, 3, 2]) / 11, rel=1e-12)
    assert ExpertLoad("histogram", histogram=(3.0, 1.0)).shares(2) == pytest.approx([0.75, 0.25], rel=1e-12)


def test_family_file_is_read_again_when_it_changes(tmp_path):
    """The cache is keyed by the file's modification time: a file rewritten with one family fewer
    (and a later mtime) gives one family fewer, not the first read's mapping."""
    path = tmp_path / "families.yaml"
    text = FAMILIES_FILE.read_text()
    path.write_text(text)
    first = read_families(Families, path)
    assert "marlin" in first
    start = text.index("  marlin:")
    end = text.index("\n  dequant_gemm:")
    path.write_text(text[:start] + text[end + 1:])
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    second = read_families(Families, path)
    assert set(first) - set(second) == {"marlin"}


def test_checked_families_are_read_again_when_either_file_changes(tmp_path):
    """families() checks both files once per content, keyed by each file's modification time: a second file
    rewritten with one more family (and a later mtime) is seen; a caller's change to the mapping it got is its own."""
    path, more = tmp_path / "a.yaml", tmp_path / "b.yaml"
    path.write_text("families:\n  x:\n    cite: c\n    rate_points: [[1, 0.5]]\n")
    more.write_text("families:\n  y:\n    cite: c\n    rate_points: [[1, 0.5]]\n")
    got = families(path, more)
    assert set(got) == {"x", "y"}
    got.pop("x")
    assert set(families(path, more)) == {"x", "y"}
    more.write_text(more.read_text() + "  z:\n    cite: c\n    rate_points: [[1, 0.5]]\n")
    st = more.stat()
    os.utime(more, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert set(families(path, more)) == {"x", "y", "z"}
    assert set(families(path, None)) == {"x"}


def test_attention_kernel_cost_is_charged_to_its_unit():
    """bf16 decode attention of Llama-2-7B (KV 1024) under vllm runs flash_attn's decode kernel on the
    h100's gpu: the cost names that unit (the engine books busy time under it) and that kernel."""
    u, name, tier = _h100()
    graph = lower(load_model("llama2-7b"), "decode", 1, 1, 1024, FormatPolicy("bf16", "bf16", "bf16", ()),
                  True, num_layers=1)
    op = next(o for o in graph.ops() if o.kind == "attention")
    got = roofline_cost(op, u, name, tier, stack=load_stack("vllm"))
    assert (got.unit, got.path) == ("gpu", "flash_attn decode")


def test_dequant_pass_and_activation_quant_both_add_their_traffic(monkeypatch):
    """A family with both extra kernels (dequant_gemm with activation quantization: W4A8 through 16-bit
    weights), nvfp4 M = 1, 4096 x 4096 on h100_sxm under torch-eager: the dequant kernel reads the
    9 437 188 B of nvfp4 weights and writes 33 554 432 B of bf16 ones, the quantization kernel moves
    4096 x 3 B; the GEMM then reads the bf16 weights and 16 384 B of activations, all at 2.8475 TB/s.
    Floors: 2 us (family) + 1.2 us + 1.2 us (the stack's, for each extra kernel) = 4.4 us."""
    fam = families()["dequant_gemm"].model_copy(update={"activation_quant": True})
    monkeypatch.setattr(stack_cost_module, "families", lambda: {"w4a8_dequant": fam})
    u, name, tier = _h100()
    got = family_cost(gemm_op(1, 4096, 4096, "nvfp4"), u, name, tier, load_stack("torch-eager"), "w4a8_dequant")
    extra_s = (9437188 + 33554432) / BW + 4096 * 3 / BW
    assert got.overhead_s == pytest.approx(4.4e-6, rel=1e-12)
    assert got.memory_s == pytest.approx((33554432 + 16384) / BW + extra_s, rel=1e-12)


def test_gemm_kernel_spec_reads_the_small_m_curve():
    """A stack giving GEMMs a kernel spec (1 kernel, 1 us floor) on cpu_host_calibrated, whose fitted
    small-M curve (M <= 1) streams at memory_max 0.07224 (its GEMM curve: 0.02138): fp32 weights, M = 1,
    4096 x 4096 (67 125 248 B with the bf16 activations) at 204.8 GB/s x 0.07224 = 4.5371 ms, + 1 us."""
    m = load_machine("cpu_host_calibrated")
    u, tier = m.units["cpu"], m.memory[m.units["cpu"].memory]
    eager = load_stack("torch-eager")
    stack = eager.model_copy(update={"ops": {**eager.ops, "gemm": KernelSpec(kernels=1, floor_s=1e-6)}})
    op = gemm_op(1, 4096, 4096, "fp32")
    plain = roofline_cost(op, u, "cpu", tier)
    got = stack_cost(op, u, "cpu", tier, stack, plain)
    memory_s = 67125248 / (204.8e9 * 0.07224)
    assert got.memory_s == pytest.approx(memory_s, rel=1e-12)
    assert got.duration_s == pytest.approx(1e-6 + max(plain.compute_s, memory_s), rel=1e-12)


def test_gemm_without_a_stored_weight_keeps_the_plain_roofline():
    """A GEMM of two activations (no 2-D weight: nothing for a quantized family to stream) under
    torch-eager, which has no GEMM kernel spec: the stack leaves it to the plain roofline."""
    x = TensorUse("x", "activation", (8, 64), "bf16", 8 * 64 * 2)
    y = TensorUse("y", "activation", (64, 32), "bf16", 64 * 32 * 2)
    out = TensorUse("z", "activation", (8, 32), "bf16", 8 * 32 * 2)
    op = Op("L0.xy", "gemm", 2 * 8 * 64 * 32, (x, y), (out,), (("m", 8), ("n", 32), ("k", 64)), "bf16", 0)
    u, name, tier = _h100()
    assert stack_cost(op, u, name, tier, load_stack("torch-eager"), roofline_cost(op, u, name, tier)) is None


def test_unknown_dense_gemm_family_is_a_config_error_naming_the_known_ones():
    """A preset naming a dense GEMM family that no family file has (a typo): a bf16 GEMM under vllm (CUDA
    graphs) refuses with a ConfigError listing the families there are, not a TypeError."""
    m = load_machine("a100_80g")
    u = m.units["gpu"]
    u = u.model_copy(update={"efficiency": u.efficiency.model_copy(update={"dense_gemm": "dense_bf16_typo"})})
    tier = m.memory[u.memory]
    op = gemm_op(1, 64, 64, "bf16")
    with pytest.raises(ConfigError, match="dense_bf16_typo.*dense_bf16_a100"):
        stack_cost(op, u, "gpu", tier, load_stack("vllm"), roofline_cost(op, u, "gpu", tier))


def test_dynamic_scale_pass_adds_its_time_and_stays_memory_bound(monkeypatch):
    """Kills stack.cost.family_cost__mutmut_93 (the per-row scale pass subtracted), __mutmut_143 (the extra
    kernels subtracted from the memory term that names the bound) and __mutmut_113 (1 J a byte on a tier
    with no energy figure). An FP8 W8A8 family with a dynamic activation scale, its figures set plainly
    (no floors but its own 10 us, full streaming rates, no K walk, 0.9 us a row for the scale), M = 64,
    4096 x 4096 under torch-eager on h100_sxm (2.8475 TB/s): the GEMM reads 16 777 216 B of weights and
    524 288 B of bf16 activations and writes 524 288 B; the quantization kernel moves 64 x 4096 x 3 B, the
    scale kernel the larger of a re-read (64 x 4096 x 2 B: 0.18 us) and 64 x 0.9 us = 57.6 us. Memory term
    (17 825 792 + 786 432) B / 2.8475 TB/s + 57.6 us, ~64 us: memory-bound, the 10 us floor below it. On a
    tier with no energy per byte the energy is the FLOPs' alone: 2 x 64 x 4096^2 at the FP8 figure."""
    plain = dict(floor_s=10e-6, weight_stream_efficiency=1.0, k_walk_s_per_k=0.0, quant_floor_s=0.0,
                 quant_stream_efficiency=1.0, quant_row_s=9e-7, dequant_pass=False, activation_quant=True)
    fam = families()["fp8_scaled_mm"].model_copy(update=plain)
    monkeypatch.setattr(stack_cost_module, "families", lambda: {"w8a8_dynamic": fam})
    u, name, tier = _h100()
    op = gemm_op(64, 4096, 4096, "fp8")
    assert op.bytes == 16777216 + 2 * 524288
    got = family_cost(op, u, name, tier.model_copy(update={"energy_j_per_byte": None}), load_stack("torch-eager"),
                      "w8a8_dynamic")
    memory_s = (16777216 + 2 * 524288) / BW
    extra_s = 64 * 4096 * 3 / BW + 64 * 9e-7
    assert got.memory_s == pytest.approx(memory_s + extra_s, rel=1e-12)
    assert got.overhead_s == pytest.approx(10e-6, rel=1e-12)
    assert got.duration_s == pytest.approx(10e-6 + extra_s + max(got.compute_s, memory_s), rel=1e-12)
    assert got.bound == "memory" and got.compute_s < memory_s + extra_s
    assert got.energy_j == pytest.approx(2 * 64 * 4096**2 * u.energy_j_per_flop["fp8_e4m3"], rel=1e-12, abs=0)


def test_kernel_spec_cost_keeps_the_plain_roofline_path():
    """Kills stack.cost.stack_cost__mutmut_113 (the path dropped). A stack's kernel spec (the RMSNorm of
    test_eager_norm_kernel_spec_on_a_preset_below_full_bandwidth) reprices the op's memory and launches, not
    the way it computes: the cost keeps the plain roofline's compute path (reports group ops by it)."""
    u, name, tier = _h100()
    op = _norm_op()
    plain = roofline_cost(op, u, name, tier)
    got = stack_cost(op, u, name, tier, load_stack("torch-eager"), plain)
    assert plain.path and got.path == plain.path


def test_a_family_s_fraction_scales_with_the_n_x_k_on_a_rank(monkeypatch):
    """size_exponent 0.5, size_ref 16.8M elements, rate 0.2 at M = 1024: a compute-bound 1024 x 4096 x 4096 bf16 GEMM
    (N x K = size_ref) runs at 0.2 of the 989.4 TFLOP/s bf16 peak; one of a quarter the N (N x K = size_ref / 4) at
    0.2 x 0.25 ** 0.5 = 0.1, so its compute time is a quarter of the work at half the rate: half the first's."""
    fam = families()["dense_bf16_h100"].model_copy(update={
        "rate_points": [(1, 0.2)], "size_exponent": 0.5, "size_ref": 4096.0 * 4096, "floor_s": 0.0})
    monkeypatch.setattr(stack_cost_module, "families", lambda: {"sized": fam})
    u, name, tier = _h100()
    big = family_cost(gemm_op(1024, 4096, 4096, "bf16"), u, name, tier, load_stack("vllm"), "sized")
    small = family_cost(gemm_op(1024, 1024, 4096, "bf16"), u, name, tier, load_stack("vllm"), "sized")
    assert big.compute_s == pytest.approx(2 * 1024 * 4096 * 4096 / (989.4e12 * 0.2), rel=1e-9)
    assert small.compute_s == pytest.approx(2 * 1024 * 1024 * 4096 / (989.4e12 * 0.1), rel=1e-9)
    assert fam.rate_fraction(1024, False, 1e15) == 1.0   # never above the whole rate
    assert fam.rate_fraction(1024, False) == pytest.approx(0.2)   # no size given: the curve alone


def test_eager_call_by_hand():
    """A call is eager where no CUDA graph replays it: a stack without graphs, a per-op table timed eagerly, or a
    step of more tokens than the stack's graphs capture (vllm: 512; a GEMM's M is its step's tokens)."""
    from hw_models.stack.cost import eager_call

    vllm = load_stack("vllm")
    assert vllm.graphs and vllm.graph_max_tokens == 512
    assert not eager_call(vllm, 1) and not eager_call(vllm, 512) and eager_call(vllm, 513)
    assert eager_call(vllm.model_copy(update={"eager_replay": True}), 1)
    assert eager_call(vllm.model_copy(update={"graphs": False}), 1)
    assert not eager_call(vllm.model_copy(update={"graph_max_tokens": None}), 10 ** 6)


def test_min_s_binds_only_an_eager_call():
    """vLLM's Triton block-FP8 family on L40S names no graph family: replayed (M = 1 under the vllm stack) it costs
    its own device terms, below its 337 us eager call time; launched eagerly it is that time exactly; a step of
    513 rows runs eagerly too. The Hopper family's replayed call is its graph family's cost to the bit."""
    l40s = load_machine("l40s")
    unit, tier = l40s.units["gpu"], l40s.memory[l40s.device_tier]
    vllm = load_stack("vllm")
    triton = families()["vllm_fp8_block_sm89"]
    one = gemm_op(1, 4096, 4096, "fp8_block128")
    replayed = family_cost(one, unit, "gpu", tier, vllm, "vllm_fp8_block_sm89").duration_s
    eager = family_cost(one, unit, "gpu", tier, vllm.model_copy(update={"eager_replay": True}), "vllm_fp8_block_sm89")
    assert replayed < 0.2 * triton.min_s and eager.duration_s == triton.min_s
    assert family_cost(gemm_op(513, 64, 64, "fp8_block128"), unit, "gpu", tier, vllm,
                       "vllm_fp8_block_sm89").duration_s == triton.min_s
    h100 = load_machine("h100_sxm")
    hunit, htier = h100.units["gpu"], h100.memory[h100.device_tier]
    for m in (4, 64):
        op = gemm_op(m, 4096, 4096, "fp8_block128")
        got = family_cost(op, hunit, "gpu", htier, vllm, "vllm_fp8_block")
        want = family_cost(op, hunit, "gpu", htier, vllm, "sglang_fp8_block")
        assert (got.path, got.duration_s) == ("sglang_fp8_block", want.duration_s)


def test_a_graph_or_switch_family_must_exist(tmp_path):
    for key in ("graph_family", "switch_family"):
        bad = tmp_path / f"{key}.yaml"
        extra = "    switch_m: 8\n" if key == "switch_family" else ""
        bad.write_text(f"families:\n  x:\n    cite: c\n    rate_points: [[1, 0.5]]\n{extra}    {key}: nowhere\n")
        with pytest.raises(ConfigError, match=f"{key} names no kernel family: x -> nowhere"):
            families(bad, None)


@pytest.mark.parametrize("body, message", [
    ("  a:\n    cite: c\n    rate_points: [[1, 0.5]]\n    rate_format: fp8_e4m3\n    graph_family: b\n"
     "  b:\n    cite: c\n    rate_points: [[1, 0.5]]\n    rate_format: fp8_e4m3\n    switch_m: 8\n    switch_family: a\n",
     "a: its switch_family / graph_family hand-offs come back to it"),
    ("  a:\n    cite: c\n    rate_points: [[1, 0.5]]\n    rate_format: fp8_e4m3\n    graph_family: b\n"
     "  b:\n    cite: c\n    rate_points: [[1, 0.5]]\n    rate_format: int8\n",
     "a: hands calls to b, which runs int8, not fp8_e4m3"),
])
def test_a_hand_off_keeps_the_math_and_never_loops(tmp_path, body, message):
    """A family's switch_family / graph_family runs the same math, and a chain of them never returns to where it
    began (a loop a -> b -> a had recursed until Python's limit while costing a call)."""
    bad = tmp_path / "f.yaml"
    bad.write_text("families:\n" + body)
    with pytest.raises(ConfigError, match=message):
        families(bad, None)
    fine = tmp_path / "g.yaml"   # a chain that does not come back is fine, however long
    fine.write_text("families:\n" + "".join(
        f"  f{i}:\n    cite: c\n    rate_points: [[1, 0.5]]\n{f'    graph_family: f{i + 1}' + chr(10) if i < 3 else ''}"
        for i in range(4)))
    assert set(families(fine, None)) == {"f0", "f1", "f2", "f3"}


def test_a_refusal_names_the_family_the_stack_file_names():
    """A100 has no FP8 rate: vllm.yaml's block-FP8 family, replayed as its graph family, is refused under the name
    the stack file gives (a review: the line had named only sglang_fp8_block, which vllm.yaml never mentions)."""
    a100 = load_machine("a100_80g")
    unit, tier = a100.units["gpu"], a100.memory[a100.device_tier]
    with pytest.raises(ConfigError, match=r"fp8_block128 weights run quant_gemm family vllm_fp8_block \(here its "
                                          r"kernel sglang_fp8_block\), "):
        family_cost(gemm_op(4, 4096, 4096, "fp8_block128"), unit, "gpu", tier, load_stack("vllm"), "vllm_fp8_block")
    eager = load_stack("vllm").model_copy(update={"eager_replay": True})   # M = 64: the switch to DeepGEMM's family
    with pytest.raises(ConfigError, match=r"family vllm_fp8_block \(here its kernel vllm_fp8_block_deepgemm\), "):
        family_cost(gemm_op(64, 4096, 4096, "fp8_block128"), unit, "gpu", tier, eager, "vllm_fp8_block")
    with pytest.raises(ConfigError, match=r"quant_gemm family sglang_fp8_block, priced"):
        family_cost(gemm_op(4, 4096, 4096, "fp8_block128"), unit, "gpu", tier, load_stack("sglang"), "sglang_fp8_block")

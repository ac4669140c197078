"""Serial row kernels (hw_models.stack.row_kernels) and fused GEMMs (hw_models.stack.fuse), checked by hand."""

from __future__ import annotations

import pytest

from hw_models.cost import roofline_cost
from hw_models.gpu.mapper import GpuMapper
from hw_models.machine import load_machine
from hw_models.stack.row_kernels import index_rows, row_reduce, warp_row
from hw_models.stack.spec import load_stack
from sim.core import graph as g
from sim.core.errors import ConfigError
from sim.core.graph import Op, TensorUse
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import load_model
from sim.core.workload import Workload

FP16 = FormatPolicy("fp16", "fp16", "fp16", ())


@pytest.mark.parametrize("rows, row, values", [
    (1, 4096, 8),      # 512 threads on one row: 4096 / 512
    (4, 4096, 32),     # block 128 x 4: 4096 / 128
    (8, 5120, 80),     # block 64 x 8: ceil(5120 / 64), under min(16 x 8, 256) = 128: no warp split
    (8, 8192, 16),     # 8192 / 64 = 128 >= 128: split over the 8 warps -> 16
    (16, 4096, 128),   # block 32 x 16: 4096 / 32 = 128 < 256
    (32, 4096, 128),   # block height stays 16
])
def test_row_reduce_values_per_thread(rows, row, values):
    assert row_reduce(rows, row) == values


def test_index_and_warp_walks():
    assert [index_rows(r, 4096) for r in (1, 16, 17)] == [1, 16, 0]       # > 16 indices: parallel gather
    assert [warp_row(32, n) for n in (136, 1032, 2048, 2049)] == [8, 64, 64, 0]   # next_pow2 / 32; > 2048: block


def _h200():
    m = load_machine("h200")
    return m.units["gpu"], m.memory["hbm"]


def test_small_embedding_walks_its_rows():
    """Decode embed of 8 tokens under torch-eager: floor + 8 x per_s (the walk beats the bytes)."""
    unit, tier = _h200()
    stack = load_stack("torch-eager")
    op = lower(load_model("llama2-7b"), "decode", 8, 1, 512, FP16, False, num_layers=1).op("embed")
    spec = stack.spec(op)
    assert spec.serial.work == "index_rows"
    got = roofline_cost(op, unit, "gpu", tier, stack=stack).duration_s
    assert got == pytest.approx(spec.floor_s + 8 * spec.serial.per_s, rel=1e-12)
    # 32 tokens take the gather kernel: bandwidth only, no walk
    op32 = lower(load_model("llama2-7b"), "decode", 32, 1, 512, FP16, False, num_layers=1).op("embed")
    bw = op32.bytes / (4.13e12 * spec.memory_efficiency)
    assert roofline_cost(op32, unit, "gpu", tier, stack=stack).duration_s == pytest.approx(spec.floor_s + bw, rel=1e-9)


def _gemm(name, m, n, k):
    x = TensorUse("x", "act", (m, k), "fp16", 2 * m * k)
    w = TensorUse(f"{name}.w", "weight", (n, k), "fp16", 2 * n * k)
    y = TensorUse(f"{name}.y", "act", (m, n), "fp16", 2 * m * n)
    return Op(name, g.GEMM, 2 * m * n * k, (x, w), (y,), (("m", m), ("n", n), ("k", k)), "fp16", 0)


@pytest.mark.parametrize("model, n", [("llama2-7b", 3 * 4096), ("llama3-8b", 4096 + 2 * 1024)])
def test_fused_qkv_is_one_gemm_of_the_summed_n(model, n):
    """vllm: q/k/v run as one GEMM of N = q + k + v widths: its cost is that GEMM's (one floor),
    k and v cost nothing, and the step names it qkv_proj."""
    machine = load_machine("h200")
    w = Workload(model=model, batch=4, prompt_len=64, gen_len=2, stack="vllm")
    mapper = GpuMapper(machine, w, load_model(model))
    graph = lower(load_model(model), "decode", 4, 1, 64, FP16, False, num_layers=1)
    tasks = {t.id: t for t in mapper.plan_step(graph)}
    one = roofline_cost(_gemm("L0.qkv_proj", 4, n, 4096), machine.units["gpu"], "gpu", machine.memory["hbm"],
                        stack=load_stack("vllm"))
    assert tasks["L0.qkv_proj"].duration_s == pytest.approx(one.duration_s, rel=1e-12)
    assert tasks["L0.qkv_proj"].tag.op.dims["n"] == n
    assert tasks["L0.k_proj"].duration_s == tasks["L0.v_proj"].duration_s == 0.0
    assert "L0.q_proj" not in tasks and "L0.qkv_proj" in tasks["L0.rope"].deps
    # by hand: one floor + bytes at the memory curve, less than three GEMMs' floors and ramps
    three = sum(roofline_cost(graph.op(f"L0.{p}_proj"), machine.units["gpu"], "gpu", machine.memory["hbm"],
                              stack=load_stack("vllm")).duration_s for p in "qkv")
    assert one.duration_s < three
    gu = tasks["L0.gate_up_proj"]
    assert gu.tag.op.dims["n"] == 2 * load_model(model).intermediate_size and tasks["L0.up_proj"].duration_s == 0.0


def test_torch_eager_fuses_nothing():
    machine = load_machine("h200")
    w = Workload(model="llama2-7b", batch=1, prompt_len=64, gen_len=2, stack="torch-eager")
    graph = lower(load_model("llama2-7b"), "decode", 1, 1, 64, FP16, False, num_layers=1)
    names = {t.id for t in GpuMapper(machine, w, load_model("llama2-7b")).plan_step(graph)}
    assert {"L0.q_proj", "L0.k_proj", "L0.gate_proj"} <= names and "L0.qkv_proj" not in names


def test_bad_fuse_group_is_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\ncite: t\nhost_launch_s: 1 us\nfloor_s: 1 us\nfuse: {a: [q_proj], b: [k_proj, v_proj]}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml.*fuse.*two or more"):
        load_stack(str(path))
    path.write_text("name: bad\ncite: t\nhost_launch_s: 1 us\nfloor_s: 1 us\nops: {embed: {serial: {work: x, per_s: 1 ns}}}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml.*ops.embed.serial.work.*index_rows"):
        load_stack(str(path))


def test_rate_fraction_is_interpolated_in_log_m_and_held_flat_beyond_the_ends():
    """Points (1, 0.2) and (100, 0.6), interpolated as a power law (log fraction linear in log M,
    hw_models.stack.kernel_families.Family.rate_fraction): M = 10 is halfway in log M, so the fraction is
    the geometric mean sqrt(0.2 x 0.6) = 0.34641 (linear in M would give 0.2 + 0.4 x 9 / 99 = 0.236,
    linear in log M 0.4); M = 1000 holds 0.6, M = 0 counts as 1: 0.2."""
    from hw_models.stack.kernel_families import Family

    fam = Family(cite="test", rate_points=[(1, 0.2), (100, 0.6)])
    assert fam.rate_fraction(10) == pytest.approx((0.2 * 0.6) ** 0.5, rel=1e-12)
    assert fam.rate_fraction(1000) == pytest.approx(0.6, rel=1e-12) and fam.rate_fraction(0) == pytest.approx(0.2, rel=1e-12)


@pytest.mark.parametrize("stack, machine, fmt", [
    ("torch-eager", "h200", "nvfp4"), ("torch-cudagraph", "h200", "mxfp4"),
    ("vllm", "h200", "nvfp4"), ("vllm", "h200", "mxfp4"), ("trtllm", "b200", "mxfp4"),
])
def test_fp4_weight_gemm_under_each_stack_priced_by_hand(stack, machine, fmt):
    """llama2-7b's gate_proj at batch 4 (m 4, n 11008, k 4096) with 4-bit weights: nvfp4 stores 4 bits +
    an 8-bit scale per 16 elements (4.5 bits) and one fp32 tensor scale (4 B), mxfp4 an 8-bit scale per 32
    (4.25 bits); fp16 activations in
    (m k x 2 B) and out (m n x 2 B). Memory-bound at m = 4, so each family's time is its memory term:
    - dequant_gemm (torch stacks, no fused kernel): a pass reads the narrow weights and writes them in
      16 bits, the GEMM reads the 16-bit ones: (w + 2 x 2 n k + act) / bw, + the family's 2 us floor + the
      stack's floor for the extra kernel;
    - fp4_marlin_emulated (vLLM on Hopper, which has no FP4 rate: the stack's quant_gemm_emulated family
      runs in place of its native one): 2 us + w / (0.95 bw) + act / bw;
    - blackwell_block_scaled (TensorRT-LLM on B200, native FP4): 2 us + (w + act) / bw.
    bw = HBM bandwidth x memory_max (h200: 4.13 TB/s x 1.0; b200: 7.672 TB/s x 0.85).
    TensorRT-LLM's native NVFP4 on B200 runs a family fitted on measured tables (trtllm_nvfp4), priced by
    hand in tests/test_quant_gemm_families.py."""
    from hw_models.stack.cost import stack_cost

    mach = load_machine(machine)
    unit_name = next(iter(mach.units))
    unit = mach.units[unit_name]
    tier = mach.memory[unit.memory]
    st = load_stack(stack)
    graph = lower(load_model("llama2-7b"), "decode", 4, 1, 100, FormatPolicy(fmt, "fp16", "fp16", ()), True, 1)
    op = graph.op("L0.gate_proj")
    m, n, k = 4, 11008, 4096
    assert (op.dims["m"], op.dims["n"], op.dims["k"]) == (m, n, k)
    w = n * k * (4 + 8 / (16 if fmt == "nvfp4" else 32)) / 8 + (4 if fmt == "nvfp4" else 0)
    act = (m * k + m * n) * 2
    bw = {"h200": 4.13e12 * 1.0, "b200": 7.672e12 * 0.85}[machine]
    family = st.emulated_family(fmt) if machine == "h200" and st.emulated_family(fmt) else st.family(fmt)
    want = {"dequant_gemm": 2e-6 + st.floor_s + (w + 2 * 2 * n * k + act) / bw,
            "fp4_marlin_emulated": 2e-6 + w / (0.95 * bw) + act / bw,
            "blackwell_block_scaled": 2e-6 + (w + act) / bw}[family]
    assert family == {"torch-eager": "dequant_gemm", "torch-cudagraph": "dequant_gemm", "vllm": "fp4_marlin_emulated",
                      "trtllm": "blackwell_block_scaled"}[stack]
    cost = stack_cost(op, unit, unit_name, tier, st, None)
    assert cost.duration_s == pytest.approx(want, rel=1e-9, abs=0)
    assert cost.memory_s > cost.compute_s    # memory-bound, as assumed above


def test_l2_rate_points_are_read_only_for_l2_weights_and_checked_like_rate_points():
    from hw_models.stack.kernel_families import Family
    fam = Family(cite="test", rate_points=[(1, 0.1), (128, 0.3)], l2_rate_points=[(1, 0.2), (128, 0.5)])
    assert fam.rate_fraction(128) == pytest.approx(0.3)
    assert fam.rate_fraction(128, l2=True) == pytest.approx(0.5)
    assert fam.rate_fraction(1 << 20, l2=True) == pytest.approx(0.5)          # flat past the last point
    assert Family(cite="test", rate_points=[(1, 0.1)]).rate_fraction(64, l2=True) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="not monotone"):
        Family(cite="test", rate_points=[(1, 0.1)], l2_rate_points=[(1, 0.5), (64, 0.3)])

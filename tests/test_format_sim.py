"""Number formats on simulated hardware (issue 3, parts 2 and 3): bytes from the
registry in the graph, compute paths per preset, weight-only dequantization,
native FP8/FP4 compute, and the errors for unknown or non-native formats.

Llama-2-13B (hidden 5120, MLP 13824, 40 layers, 40 heads, vocab 32000) is the
case of the issue. Hand-derived byte counts used below:

* weight matrices per layer: q,k,v,o 5120x5120 and gate,up [13824, 5120],
  down [5120, 13824]: 4 * 26,214,400 + 3 * 70,778,880 = 317,194,240 elements;
  40 layers 12,687,769,600, plus lm_head 32000 x 5120 = 163,840,000:
  12,851,609,600 weight-matrix elements in a decode step.
* fp16: 2 bytes each = 25,703,219,200 bytes.
* int4 (groups of 128 along the input axis, one fp16 scale per group):
  q/k/v/o 13,107,200 + 5120*40*2 = 13,516,800; gate/up 35,389,440 + 13824*40*2
  = 36,495,360; down 35,389,440 + 5120*108*2 = 36,495,360 (13824/128 = 108);
  per layer 163,553,280, 40 layers 6,542,131,200; lm_head 81,920,000 + 32000*40*2
  = 84,480,000. Total 6,626,611,200 bytes.
* mxfp4 (32 per one-byte E8M0 scale): elements/2 + elements/32 = 4.25 bits:
  12,851,609,600 * 4.25 / 8 = 6,827,417,600 bytes (every row is a multiple of 32).
* KV cache read in a decode step at kv_len n, fp16: 2 (K and V) * 40 layers *
  5120 * 2 bytes * n = 819,200 * n bytes.
"""

import json

import pytest

from hw_models import compute_path
from hw_models.registry import mapper_for
from hw_models.cost import roofline_cost
from hw_models.ideal import ideal
from hw_models.machine import Unit, load_machine
from sim.core import graph as g
from sim.apps.cli import main
from sim.core.errors import ConfigError
from sim.core.formats import get_format, known_formats
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import load_model
from sim.core.workload import load_workload, workload_from_dict
from tests.conftest import ROOT

DECODE = str(ROOT / "workloads/llama13b_decode.yaml")
MXFP4 = str(ROOT / "workloads/llama13b_decode_mxfp4.yaml")
A6000_BW = 768e9          # bytes/s (a6000.yaml)
A6000_VECTOR = 38.7e12    # FLOP/s, CUDA cores (a6000.yaml)
WEIGHT_ELEMENTS = 12_851_609_600
WEIGHT_BYTES = {"fp16": 25_703_219_200, "int4": 6_626_611_200, "mxfp4": 6_827_417_600}
KV_BYTES_PER_TOKEN = 819_200


def _err_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


def _workload(**kw):
    base = dict(model="llama2-13b", batch=1, prompt_len=1024, gen_len=2)
    formats = {k: kw.pop(k) for k in ("weights", "activations", "kv_cache", "overrides") if k in kw}
    base.update(kw, formats=formats)
    return workload_from_dict(base, "test")


def _step(machine, phase: str, q_len: int, kv_len: int, **kw):
    w = _workload(**kw)
    return mapper_for(machine, w, w.model_config_()).step_timeline(phase, q_len, kv_len)


# ----------------------------------------------------------------- compute paths
@pytest.mark.parametrize("hw, weights, acts, mode, fmt, rate, dequant", [
    # Ampere: no FP8/FP4; INT8/INT4 tensor cores only (hardware.md §1.2).
    ("a6000", "int4", "fp16", "auto", "fp16", 154.8e12, True),      # weight-only (Marlin/AWQ style)
    ("a6000", "mxfp4", "fp16", "auto", "fp16", 154.8e12, True),
    ("a6000", "nvfp4", "fp16", "auto", "fp16", 154.8e12, True),
    ("a6000", "int8", "int8", "native", "int8", 309.7e12, False),   # W8A8 on INT8 tensor cores
    ("a6000", "int4", "int4", "auto", "int4", 619.4e12, False),
    ("a6000", "int4", "int8", "auto", "int8", 309.7e12, True),      # QServe-style int4 -> int8
    ("a6000", "fp8", "fp8", "auto", "bf16", 154.8e12, True),        # no FP8: both widened
    ("a100_80g", "mxfp4", "fp16", "auto", "fp16", 312e12, True),
    # Hopper: FP8 (E4M3 and E5M2 mix); no MX in hardware.
    ("h100_sxm", "fp8", "fp8", "native", "fp8_e4m3", 1978.9e12, False),
    ("h100_sxm", "fp8_e5m2", "fp8", "native", "fp8_e5m2", 1978.9e12, False),
    ("h100_sxm", "mxfp8", "mxfp8", "auto", "bf16", 989.4e12, True),
    ("h100_sxm", "mxfp4", "fp8", "auto", "fp8_e4m3", 1978.9e12, True),  # W4A8: dequantize into fp8
    # NVFP4's E4M3 scale per 16 elements is no power of two and too fine to apply at promotion: an element times
    # its scale is no E4M3 value (a formats trial: 23-93% are not), so no FP8 path; bf16, the activations widened.
    # int4's fp16 scale per 128 rides at promotion (as fp8_block128's); per channel, in the epilogue; per 64, not.
    ("h100_sxm", "nvfp4", "fp8", "auto", "bf16", 989.4e12, True),
    ("h100_sxm", "int4", "fp8", "auto", "fp8_e4m3", 1978.9e12, True),
    ("h100_sxm", "int4_pc", "fp8", "auto", "fp8_e4m3", 1978.9e12, True),
    ("h100_sxm", "int4_g64", "fp8", "auto", "bf16", 989.4e12, True),
    ("b200", "nvfp4", "mxfp8", "auto", "bf16", 2250e12, True),
    ("h100_sxm", "bf16", "fp8", "native", "bf16", 989.4e12, False),     # an lm_head kept in bf16
    ("h100_sxm", "bf16", "fp16", "auto", "bf16", 989.4e12, False),      # ... under fp16: the activations cast
    # DeepSeek-V3 block-scaled FP8: the MMA in e4m3, the 128 x 128 tile scales at promotion on the CUDA cores
    # (its report §3.3.2), so the FP8 rate with block or plain e4m3 activations (a numerics trial: it ran at bf16's)
    ("h100_sxm", "fp8_block128", "fp8_block128", "native", "fp8_e4m3", 1978.9e12, False),
    ("h100_sxm", "fp8_block128", "fp8", "native", "fp8_e4m3", 1978.9e12, False),
    ("h100_sxm", "fp8_block128", "bf16", "auto", "bf16", 989.4e12, True),   # weight-only: dequantized to bf16
    ("a100_80g", "fp8_block128", "fp8_block128", "auto", "bf16", 312e12, True),   # no FP8 tensor cores there
    ("h200", "fp8", "fp8", "native", "fp8_e4m3", 1978.9e12, False),
    # Blackwell: FP4 at 2x FP8 only block-scaled; MX pairs mix at the slower rate.
    ("b200", "mxfp4", "mxfp4", "native", "mxfp4", 9000e12, False),
    ("b200", "nvfp4", "nvfp4", "native", "nvfp4", 9000e12, False),
    ("b200", "mxfp4", "mxfp8", "native", "mxfp8_e4m3", 4500e12, False),
    ("b200", "mxfp6", "mxfp6", "native", "mxfp6_e2m3", 4500e12, False),
    ("b200", "fp8", "fp8", "native", "fp8_e4m3", 4500e12, False),
    ("b200", "nvfp4", "mxfp4", "auto", "bf16", 2250e12, True),    # nvfp4 -> mxfp4 would requantize
    ("b200", "int4", "fp16", "auto", "fp16", 2250e12, True),
])
def test_compute_paths(hw, weights, acts, mode, fmt, rate, dequant):
    unit = load_machine(hw).units["gpu"]
    path = compute_path.choose(unit, "gpu", weights, acts, mode)
    assert (path.fmt, path.dequant) == (fmt, dequant)
    assert path.rate_flops_per_s == pytest.approx(rate)
    assert ("dequant" in path.label) == dequant


def test_native_mode_refuses_what_needs_dequantization():
    a6000 = load_machine("a6000").units["gpu"]
    for weights, acts in (("mxfp4", "fp16"), ("fp8", "fp8"), ("fp16", "fp8"), ("int4", "int8")):
        with pytest.raises(ConfigError, match="compute: native: units.gpu has no native"):
            compute_path.choose(a6000, "gpu", weights, acts, "native")
    # KV cache in fp8 for attention: dequantized under auto, refused under native.
    assert compute_path.choose(a6000, "gpu", "fp8", "fp16", "auto", "kv").label == "kv fp8_e4m3 -> fp16 dequant"
    with pytest.raises(ConfigError, match="fp8_e4m3 kv x fp16 activation"):
        compute_path.choose(a6000, "gpu", "fp8", "fp16", "native", "kv")


def test_presets_list_the_formats_their_hardware_has():
    """hardware.md §1.1-1.2: Ampere has INT8/INT4 but no FP8/FP6/FP4 or block-scaled
    tensor cores; Hopper adds FP8; B200 has FP8 = FP6 = 2x FP16 and block-scaled
    FP4 = 2x FP8 (2250 / 4500 / 9000 TFLOP/s dense)."""
    narrow = {"fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1", "mxfp8_e4m3", "mxfp4", "nvfp4"}
    for hw in ("a6000", "a100_80g"):
        rates = compute_path.native_rates(load_machine(hw).units["gpu"])
        assert not narrow & set(rates) and {"int8", "int4"} <= set(rates)
    for hw in ("h100_sxm", "h200"):
        rates = compute_path.native_rates(load_machine(hw).units["gpu"])
        assert rates["fp8_e4m3"] == pytest.approx(2 * rates["fp16"], rel=1e-3)
        assert not {"mxfp4", "nvfp4", "fp4_e2m1"} & set(rates)
    for hw in ("l40s", "rtx4090"):   # Ada (AD102): INT4 tensor cores at 2x INT8 (l40s.yaml, rtx4090.yaml cite it)
        rates = compute_path.native_rates(load_machine(hw).units["gpu"])
        assert rates["int4"] == pytest.approx(2 * rates["int8"], rel=2e-3)
    b200 = load_machine("b200")
    assert (b200.kind, b200.device_tier) == ("gpu", "hbm")
    r = compute_path.native_rates(b200.units["gpu"])
    assert r["fp16"] == 2250e12 and r["fp8_e4m3"] == r["fp6_e2m3"] == r["mxfp8_e4m3"] == 4500e12
    assert r["mxfp4"] == r["nvfp4"] == 2 * r["fp8_e4m3"]
    # the driver-reported 7680-bit bus at 3996 MHz, DDR: 960 B x 3.996e9 x 2 (b200.yaml, pytorch/ao pull 4002)
    assert b200.memory["hbm"].bandwidth_bytes_per_s == pytest.approx(960 * 3.996e9 * 2, rel=1e-4)


def test_rate_keys_are_format_names():
    unit = Unit(memory="m", peak_flops_per_s={"fp16": 1e12, "fp8": 2e12, "fp4": 4e12}, vector_flops_per_s=1e11)
    assert set(compute_path.native_rates(unit)) == {"fp16", "fp8_e4m3", "fp4_e2m1"}
    assert compute_path.choose(unit, "u", "e4m3", "fp8", "native").rate_flops_per_s == 2e12
    # an unknown key is refused when the unit is read (it used to surface at the first op that chose a rate)
    with pytest.raises(ValueError, match=r"peak_flops_per_s\n  Value error, tf32: unknown number format 'tf32'"):
        Unit(memory="m", peak_flops_per_s={"fp16": 1e12, "tf32": 2e12}, vector_flops_per_s=1e11)


# ----------------------------------------------------------------- graph integration
@pytest.mark.parametrize("fmt", [*known_formats(), "int4_g64", "int8_pc", "int4_g128_asym", "int8_pt"])
def test_every_format_runs_in_every_role(fmt):
    """Each registry format as weights, as activations and as KV cache: one layer
    of Llama-2-13B decode and prefill on a6000 (no native narrow float) and b200
    (native FP8/FP6/FP4/MX/NVFP4); tensor bytes come from the registry. Every op
    pays the launch (4 us a6000, 3 us b200), streams its bytes at the preset's curve (memory_max 0.85,
    its DRAM ramp added: bytes / (0.85 x bandwidth) + ramp) and never beats the
    roofline (bytes at peak bandwidth, FLOPs at the fastest rate the unit has). The
    decode q_proj (one 5120 x 5120 GEMV) is memory bound in every format."""
    model = load_model("llama2-13b")
    for policy in (FormatPolicy(weights=fmt), FormatPolicy(activations=fmt), FormatPolicy(kv_cache=fmt)):
        for phase, q, kv in (("decode", 1, 512), ("prefill", 64, 64)):
            graph = lower(model, phase, 1, q, kv, policy, num_layers=1)
            for hw in ("a6000", "b200"):
                m = load_machine(hw)
                unit, tier = m.units["gpu"], m.memory[m.device_tier]
                bw, eff = tier.bandwidth_bytes_per_s, unit.efficiency
                fastest = max(*unit.peak_flops_per_s.values(), unit.vector_flops_per_s)
                for op in graph.ops():
                    c = roofline_cost(op, unit, "gpu", tier)
                    assert c.overhead_s == unit.launch_overhead_s   # 4 us a6000, 3 us b200
                    assert c.memory_s == pytest.approx(op.bytes / (eff.memory_max * bw) + eff.memory_ramp_s, rel=1e-9)
                    assert c.duration_s == pytest.approx(c.overhead_s + max(c.compute_s, c.memory_s), rel=1e-12)
                    assert c.duration_s - c.overhead_s >= max(op.bytes / bw, op.flops / fastest)
                if phase == "decode":
                    assert roofline_cost(graph.op("L0.q_proj"), unit, "gpu", tier).bound == "memory"
        q_proj = graph.op("L0.q_proj")
        w = next(t for t in q_proj.reads if t.role == "weight")
        assert w.bytes == get_format(policy.weights).storage_bytes((5120, 5120))


def test_lm_head_override_keeps_bf16():
    model = load_model("llama2-13b")
    policy = load_workload(MXFP4).formats.policy()
    graph = lower(model, "decode", 1, 1, 1025, policy, num_layers=1)
    head = next(t for t in graph.op("lm_head").reads if t.role == "weight")
    q = next(t for t in graph.op("L0.q_proj").reads if t.role == "weight")
    assert (head.fmt, head.bytes) == ("bf16", 2 * 32000 * 5120)
    assert (q.fmt, q.bytes) == ("mxfp4", 5120 * 5120 // 2 + 5120 * 5120 // 32)
    m = load_machine("a6000")
    c = roofline_cost(graph.op("lm_head"), m.units["gpu"], "gpu", m.memory["gddr"])
    assert c.path == "act fp16 -> bf16"   # the activations cast into the weights' 16-bit format, no dequantization
    b200 = load_machine("b200")
    # On b200 with mxfp4 activations, native compute: the bf16 head multiplies in bf16.
    c = roofline_cost(lower(model, "decode", 1, 1, 1025, FormatPolicy("mxfp4", "mxfp4", "fp16", (("lm_head", "bf16"),)),
                            num_layers=1).op("lm_head"), b200.units["gpu"], "gpu", b200.memory["hbm"], "native")
    assert c.path == "act mxfp4 -> bf16"


# ----------------------------------------------------------------- decode on a6000
def test_a6000_decode_weight_only_speedup_is_the_bytes_ratio():
    """Batch-1 decode is weight-bandwidth bound, so weight-only int4 / mxfp4 beat fp16
    by the ratio of bytes moved per step (weights + KV cache), less any dequantization
    cost. On the pure roofline (ideal a6000) at kv_len 1024:

      fp16 : 25,703,219,200 + 819,200 * 1024 = 26,542,059,200 B -> / 768 GB/s = 34.56 ms
      int4 :  6,626,611,200 + 838,860,800    =  7,465,472,000 B -> 9.72 ms, ratio 3.555
      mxfp4:  6,827,417,600 + 838,860,800    =  7,666,278,400 B -> 9.98 ms, ratio 3.462

    Dequantization charged: 2 FLOPs per weight element on the vector units,
    2 * 12,851,609,600 / 38.7e12 = 0.664 ms per step. It overlaps each GEMM's
    weight stream (roofline max): q_proj dequantizes 2 * 26,214,400 FLOPs in 1.35 us
    plus 0.34 us of tensor math, while its 13,516,800 int4 bytes take 17.6 us. So the
    dequantization cost seen in decode is 0, as in fused Marlin-style kernels. The
    rest (activations, non-flash attention scores: ~1.6% of the bytes) keeps the
    measured ratio within 10% of the bytes ratio."""
    m = ideal(load_machine("a6000"))
    kv = KV_BYTES_PER_TOKEN * 1024
    t16 = _step(m, "decode", 1, 1024).makespan_s
    assert t16 == pytest.approx((WEIGHT_BYTES["fp16"] + kv) / A6000_BW, rel=0.03)
    dequant_s = compute_path.DEQUANT_FLOPS_PER_ELEMENT * WEIGHT_ELEMENTS / A6000_VECTOR
    assert dequant_s == pytest.approx(0.664e-3, rel=0.01)
    for fmt in ("int4", "mxfp4"):
        tl = _step(m, "decode", 1, 1024, weights=fmt)
        ratio = (WEIGHT_BYTES["fp16"] + kv) / (WEIGHT_BYTES[fmt] + kv)
        assert t16 / tl.makespan_s == pytest.approx(ratio, rel=0.10)
        assert t16 / tl.makespan_s == pytest.approx(ratio, rel=0.02)   # in fact much closer
        # The dequantization is charged (compute time grows) but hidden under memory.
        for i in tl.intervals:
            c = i.tag
            if c.op.kind == g.GEMM:
                assert c.path == f"{fmt} -> fp16 dequant"
                assert c.compute_s < c.memory_s
        q = next(i.tag for i in tl.intervals if i.task == "L0.q_proj")
        assert q.compute_s == pytest.approx(2 * 26_214_400 / A6000_VECTOR + 2 * 26_214_400 / 154.8e12, rel=1e-6)


def test_a6000_decode_against_llm_viewer():
    """LLM-Viewer (hahnyuan/LLM-Viewer, the roofline tool of arXiv 2402.16363) gives
    34.6 ms (W16) and 9.5 ms (W4) for Llama-2-13B batch-1 decode on A6000 (issue 3;
    its W4 counts exactly 4 bits per weight, no scales). Our pure roofline (ideal
    a6000, kv_len 1024): fp16 34.6 ms. int4_pc (per-row fp16 scale: 4.004 bits)
    is the closest to a bare 4-bit count: 9.5 ms. The registry's int4 (GPTQ/AWQ
    groups of 128, 4.125 bits) carries more scale bytes: 32000*40*2 + 40*(4*5120*40*2
    + 2*13824*40*2 + 5120*108*2) = 200,806,400 B against int4_pc's one fp16 per row,
    2*(32000 + 40*(4*5120 + 2*13824 + 5120)) = 4,323,840 B; the difference, 196,482,560 B
    / 768 GB/s = 0.256 ms, gives 9.77 ms. Tolerance 2%: LLM-Viewer rounds to 0.1 ms
    (0.5% at 9.5 ms), and the two tools count activations and attention-score traffic
    differently (~1.5% of a step)."""
    m = ideal(load_machine("a6000"))
    t16 = _step(m, "decode", 1, 1024).makespan_s
    t4pc = _step(m, "decode", 1, 1024, weights="int4_pc").makespan_s
    t4 = _step(m, "decode", 1, 1024, weights="int4").makespan_s
    assert t16 == pytest.approx(34.6e-3, rel=0.02)
    assert t4pc == pytest.approx(9.5e-3, rel=0.02)
    assert t4 - t4pc == pytest.approx(196_482_560 / A6000_BW, rel=0.01)
    assert t4 == pytest.approx(9.5e-3 + 0.256e-3, rel=0.02)


def test_a6000_prefill_gains_little_from_int4():
    """Prefill of 1 x 1024 tokens is compute bound on a6000 (q_proj: 2*1024*5120^2 =
    53.7 GFLOP vs 52 MB of fp16 weights, 1032 FLOP/B against a ridge of 202), and
    weight-only int4 still multiplies at the fp16 rate: it saves only the bytes of
    the memory-bound ops (the lm_head: 1 token) and adds 0.66 ms of dequantization.
    The gain is below 10% (in fact ~0)."""
    m = load_machine("a6000")
    t16 = _step(m, "prefill", 1024, 1024).makespan_s
    t4 = _step(m, "prefill", 1024, 1024, weights="int4").makespan_s
    assert 0.95 < t16 / t4 < 1.10


# ----------------------------------------------------------------- native FP8 / FP4
def _gemm_costs(tl) -> dict:
    return {i.task: i.tag for i in tl.intervals if i.tag.op.kind == g.GEMM}


def test_h100_fp8_prefill_gains_the_rate_ratio_where_compute_bound():
    """h100_sxm FP8 tensor rate 1978.9 vs FP16 989.4 TFLOP/s: ratio 2.0. With weights,
    activations and KV cache in fp8, every compute-bound GEMM of a 1 x 1024 prefill
    does its FLOPs 2x faster. The preset's compute ramp is a time (compute_ramp_s: tile
    fill does not speed up with the format), so a GEMM's math is F / (rate * max) + ramp
    and gains (F / (r16 * max) + ramp) / (F / (r8 * max) + ramp), a little under 2.
    Its kernel time adds launch overhead: q_proj (53.7 GFLOP) gains about 1.90x, the
    MLP GEMMs (145 GFLOP) about 1.95x. The whole prefill gains less, as norms, RoPE,
    softmax and adds stay on the vector units."""
    m = load_machine("h100_sxm")
    fp16 = _gemm_costs(_step(m, "prefill", 1024, 1024))
    fp8_tl = _step(m, "prefill", 1024, 1024, weights="fp8", activations="fp8", kv_cache="fp8")
    fp8 = _gemm_costs(fp8_tl)
    peak = m.units["gpu"].peak_flops_per_s
    rate_ratio = peak["fp8_e4m3"] / peak["fp16"]
    assert rate_ratio == pytest.approx(2.0, rel=1e-3)
    compute_bound = [n for n, c in fp16.items() if c.bound == "compute"]
    assert len(compute_bound) >= 7   # every layer GEMM; the 1-token lm_head is memory bound
    eff = m.units["gpu"].efficiency
    ramp = eff.compute_ramp_s
    for name in compute_bound:
        slow, fast = fp16[name], fp8[name]
        assert fast.path == "fp8_e4m3 native" and fast.bound == "compute"
        flops = slow.op.flops
        math16 = flops / (peak["fp16"] * eff.compute_max) + ramp
        math8 = flops / (peak["fp8_e4m3"] * eff.compute_max) + ramp
        assert slow.compute_s == pytest.approx(math16, rel=1e-9)
        assert slow.compute_s / fast.compute_s == pytest.approx(math16 / math8, rel=1e-9)
        oh = slow.overhead_s
        assert slow.duration_s / fast.duration_s == pytest.approx((oh + math16) / (oh + math8), rel=1e-9)
        assert slow.duration_s / fast.duration_s > 0.9 * rate_ratio
    assert fp16["L0.q_proj"].duration_s / fp8["L0.q_proj"].duration_s == pytest.approx(1.90, abs=0.02)
    ttft16 = _step(m, "prefill", 1024, 1024).makespan_s
    gain = ttft16 / fp8_tl.makespan_s
    assert 1.5 < gain < rate_ratio


def test_b200_native_fp4_prefill_beats_fp8():
    """b200: block-scaled FP4 (mxfp4 or nvfp4, both operands) at 9000 TFLOP/s vs FP8
    at 4500: the compute-bound GEMMs of a 1 x 1024 prefill do their FLOPs 2x faster
    (math = F / (rate * max) + the preset's fixed compute ramp), so the prefill is
    faster; weight-only mxfp4 (fp16 activations) multiplies at the FP16 rate (2250)
    and is slower than fp8."""
    m = load_machine("b200")
    fp8_tl = _step(m, "prefill", 1024, 1024, weights="fp8", activations="fp8")
    fp8 = _gemm_costs(fp8_tl)
    ttft = {}
    for fmt in ("mxfp4", "nvfp4"):
        tl = _step(m, "prefill", 1024, 1024, weights=fmt, activations=fmt, compute="native")
        fp4 = _gemm_costs(tl)
        for name in ("L0.q_proj", "L0.gate_proj", "L0.down_proj"):
            assert fp4[name].path == f"{fmt} native"
            eff, peak = m.units["gpu"].efficiency, m.units["gpu"].peak_flops_per_s
            flops = fp8[name].op.flops
            math8 = flops / (peak["fp8_e4m3"] * eff.compute_max) + eff.compute_ramp_s
            math4 = flops / (peak[fmt] * eff.compute_max) + eff.compute_ramp_s
            assert peak[fmt] == 2 * peak["fp8_e4m3"]
            assert fp8[name].compute_s / fp4[name].compute_s == pytest.approx(math8 / math4, rel=1e-9)
        ttft[fmt] = tl.makespan_s
        assert ttft[fmt] < fp8_tl.makespan_s
    w_only = _step(m, "prefill", 1024, 1024, weights="mxfp4").makespan_s
    assert w_only > fp8_tl.makespan_s > ttft["mxfp4"]


# ----------------------------------------------------------------- CLI and report
def test_cli_unknown_format_is_one_line(capsys):
    assert main(["run", DECODE, "--hw", "a6000", "--set", "formats.weights=fp5", "-q"]) == 2
    line = _err_line(capsys)
    assert "llama13b_decode.yaml (with formats.weights overridden): formats.weights: unknown number format 'fp5'; known: bf16" in line


def test_cli_forced_native_on_hardware_without_the_format(capsys):
    assert main(["run", MXFP4, "--hw", "a6000", "--set", "compute=native", "-q"]) == 2
    line = _err_line(capsys)
    assert "compute: native" in line and "mxfp4" in line and "compute: auto" in line
    assert main(["run", MXFP4, "--hw", "h100_sxm", "--set", "formats.kv_cache=fp8",
                 "--set", "formats.weights=fp16", "--set", "compute=native", "-q"]) == 2
    assert "fp8_e4m3 kv x fp16 activation" in _err_line(capsys)


def test_cli_report_and_json_show_the_path(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["run", MXFP4, "--hw", "a6000", "--json", str(out)]) == 0
    report = capsys.readouterr().out
    assert "path" in report and "dequant" in report and "mxfp4" in report   # the top-ops table (wrapped)
    ops = {o["name"]: o["path"] for o in json.loads(out.read_text())["ops"]}
    assert ops["L0.q_proj"] == "mxfp4 -> fp16 dequant"
    assert ops["lm_head"] == "act fp16 -> bf16"
    assert main(["run", MXFP4, "--hw", "b200", "--set", "formats.activations=mxfp4",
                 "--set", "compute=native", "--json", str(out), "-q"]) == 0
    ops = {o["name"]: o["path"] for o in json.loads(out.read_text())["ops"]}
    assert ops["L0.q_proj"] == "mxfp4 native"
    assert ops["lm_head"] == "act mxfp4 -> bf16"

"""Ada (SM 8.9): the l40s preset and node, the dense bf16 and FP8 families fitted on aiconfigurator's L40S tables
(scripts/fit_kernels_ada.py), the stacks naming them for SM 8.9 only, and the L40S tables costed from the CLI.

Figures hand-derived from the presets' datasheet numbers (L40S: 864 GB/s, 362.05 TFLOP/s bf16, 733 FP8) and
the fitted YAML."""

from __future__ import annotations

import json

import pytest

from hw_models.machine import load_machine
from hw_models.network.collectives import collective_s
from hw_models.network.engine_collectives import ONE_SHOT, custom_all_reduce_s, node_fits
from hw_models.network.topology import load_topology
from hw_models.stack.kernel_families import families
from hw_models.stack.spec import load_stack
from sim.apps.cli import main
from sim.apps.trace.aic import _mapper, gemm_op

L40S_STREAM_BYTES_PER_S = 864e9 * 0.85    # l40s.yaml: datasheet bandwidth x memory_max
L40S_BF16_PEAK = 362.05e12
L40S_FP8_PEAK = 733e12
# SM 8.9 family -> (stack, weight format)
ADA_FAMILIES = {"vllm_fp8_per_tensor_sm89": ("vllm", "fp8_e4m3"), "sglang_fp8_per_tensor_sm89": ("sglang", "fp8_e4m3"),
                "trtllm_fp8_block_sm89": ("trtllm", "fp8_block128"), "vllm_fp8_block_sm89": ("vllm", "fp8_block128")}


def _cost_s(m: int, n: int, k: int, fmt: str = "bf16", stack: str = "vllm", preset: str = "l40s") -> float:
    return _timed(preset, stack, fmt).cost(gemm_op(m, n, k, fmt)).duration_s   # as that engine's rows


def _timed(preset: str, stack: str, fmt: str):
    """The per-op replay as the collector timed the rows: vLLM's block-FP8 ones eagerly (aic EAGER_TIMED)."""
    return _mapper(preset, stack, collector=stack, eager=(stack, fmt) == ("vllm", "fp8_block128"))


def test_preset_figures_and_node(capsys):
    assert main(["hw", "check", "l40s"]) == 0
    assert "every figure has a comment" in capsys.readouterr().out
    m = load_machine("l40s")
    u = m.units["gpu"]
    assert m.memory[u.memory].bandwidth_bytes_per_s == pytest.approx(864e9)
    assert u.peak_flops_per_s["bf16"] == pytest.approx(L40S_BF16_PEAK)
    assert u.peak_flops_per_s["fp8_e4m3"] == pytest.approx(L40S_FP8_PEAK)
    assert (u.efficiency.parallel_units, u.efficiency.clock_hz, u.efficiency.compute_capability) == (142, 2.52e9, 8.9)
    assert u.efficiency.dense_gemm == "dense_bf16_l40s" and u.l2_bytes == 96 * 2 ** 20
    node = load_topology("l40s_x8_pcie")
    assert node.device == "l40s" and node.devices_per_node == 8


def test_dense_m1_slope_is_the_weight_stream():
    """M = 1, 4096x4096 -> 8192x8192: (8192^2 - 4096^2) x 2 B more weights at 864 GB/s x 0.85 x the fitted
    efficiency, plus 4096 more bf16 inputs and outputs at 864 GB/s x 0.85 (~116 us at efficiency 0.95)."""
    eff = families()["dense_bf16_l40s"].weight_stream_efficiency
    want = (8192 ** 2 - 4096 ** 2) * 2 / (L40S_STREAM_BYTES_PER_S * eff) + 4096 * 4 / L40S_STREAM_BYTES_PER_S
    assert _cost_s(1, 8192, 8192) - _cost_s(1, 4096, 4096) == pytest.approx(want, rel=0.01)


def test_dense_large_m_is_the_fitted_fraction_of_the_datasheet_peak():
    """M = 8192: doubling N adds 2 x 8192 x 4096 x 8192 FLOP (550 GFLOP) at 362.05 TFLOP/s x the fraction at
    M = 8192 (2.6 ms at 0.59), far above the 64 MB more weights (~0.1 ms)."""
    m, frac = families()["dense_bf16_l40s"].rate_points[-1]
    assert m == 8192
    want = 2 * 8192 * 4096 * 8192 / (L40S_BF16_PEAK * frac)
    assert _cost_s(8192, 8192, 8192) - _cost_s(8192, 4096, 8192) == pytest.approx(want, rel=0.01)


def _non_decreasing(t: list[float]) -> bool:
    return all(b >= a * (1 - 1e-12) for a, b in zip(t, t[1:]))


@pytest.mark.parametrize("family", ["dense_bf16_l40s", *ADA_FAMILIES])
def test_never_faster_with_more_work(family):
    stack, fmt = ADA_FAMILIES.get(family, ("vllm", "bf16"))
    assert _timed("l40s", stack, fmt).cost(gemm_op(16, 4096, 4096, fmt)).path == family
    ms = [1, 2, 3, 8, 16, 24, 64, 100, 256, 777, 1024, 3000, 8192, 16384]
    for n, k in [(1024, 1024), (4096, 4096), (14336, 4096), (4096, 14336)]:
        assert _non_decreasing([_cost_s(m, n, k, fmt, stack) for m in ms]), (n, k)
    for m in (1, 256, 4096):
        assert _non_decreasing([_cost_s(m, n, 4096, fmt, stack) for n in (512, 2048, 8192, 16384)])
        assert _non_decreasing([_cost_s(m, 4096, k, fmt, stack) for k in (512, 2048, 8192, 16384)])


@pytest.mark.parametrize("family", ["vllm_fp8_per_tensor_sm89", "sglang_fp8_per_tensor_sm89"])
def test_fp8_m1_slope_is_the_weight_stream(family):
    """M = 1, 6144x6144 -> 8192x8192 FP8: 29.4 MB more 1-byte weights at 864 GB/s x 0.85 x the efficiency (above
    the K-walk: 8192 x <= 2 ns = 16 us against ~70 us of stream), plus 2048 more bf16 inputs and outputs and the
    quantize pass's 3 B per input (read 2, write 1) at its fitted rate. Both shapes stream from DRAM under the
    tables' replay: the vLLM / SGLang collectors' 6 copies of 37.7 MB exceed the 96 MiB L2
    (hw_models.stack.cost.replay_weight_copies; 4096x4096, 6 x 16.8 MB = 96 MiB, would stay in it)."""
    fam = families()[family]
    bw = L40S_STREAM_BYTES_PER_S
    want = (8192 ** 2 - 6144 ** 2) / (bw * fam.weight_stream_efficiency) + 2048 * 4 / bw \
        + 2048 * 3 / (bw * fam.quant_stream_efficiency)
    assert _cost_s(1, 8192, 8192, "fp8_e4m3", ADA_FAMILIES[family][0]) - \
        _cost_s(1, 6144, 6144, "fp8_e4m3", ADA_FAMILIES[family][0]) == pytest.approx(want, rel=0.01)


def test_stacks_name_the_ada_families_on_sm89_only():
    """The capability table's 8.9 key is Ada's SM alone: A100 (8.0, no FP8 tensor cores) keeps quant_gemm's
    family, and the RTX 4090 (AD102, 8.9) runs the L40S-fitted kernels as its engine would."""
    for family, (stack, fmt) in ADA_FAMILIES.items():
        st = load_stack(stack)
        assert st.family(fmt, 8.9) == family
        assert st.family(fmt, 8.0) == st.family(fmt) != family
    assert _mapper("rtx4090", "vllm").cost(gemm_op(16, 4096, 4096, "fp8_e4m3")).path == "vllm_fp8_per_tensor_sm89"
    assert load_machine("rtx4090").units["gpu"].efficiency.dense_gemm is None   # its preset says why


def test_l40s_tables_costed_from_the_cli(shared_validation, tmp_path):
    aic = shared_validation / "aic"
    if not (aic / "gemm_l40s.csv.gz").is_file():
        pytest.skip("shared/validation/aic has no L40S tables")
    out = tmp_path / "aic.json"
    tables = [aic / f"{t}_l40s.csv.gz" for t in ("gemm", "gen_attn", "comm")]
    assert main(["validate", "--input-format", "aic", *map(str, tables), "--limit", "60", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["mape_by_family"]
    assert {"gemm bfloat16 [vllm]", "gemm fp8 [vllm]", "decode attention kv bfloat16 [trtllm]",
            "all_reduce nccl"} <= {r["family"] for r in rows}
    assert all(r["gpu"] == "l40s" and not r["held_out"] and r["rows"] > 0 for r in rows)


def test_l40s_node_collectives_are_its_fitted_lines():
    """l40s_x8_pcie (PCIe, no NVLink): NCCL all-reduce at 8 ranks is the faster of its two fitted lines, ring
    steps 2 x 7 = 14 and 2 x 7/8 of the bytes per rank; vLLM's custom all-reduce runs only at 2 PCIe ranks
    (one-shot: latency + 1 x S / B), TensorRT-LLM's never (no NVLink): those hand the message to NCCL."""
    topo = load_topology("l40s_x8_pcie")
    lo, hi = node_fits("l40s_x8_pcie").nccl["all_reduce"][8]
    for s in (4096.0, 256 * 2 ** 20):
        want = min(14 * ln.latency_s + 2 * 7 / 8 * s / ln.bandwidth_bytes_per_s for ln in (lo, hi))
        assert collective_s(topo, "all_reduce", s, 8, "nccl") == pytest.approx(want)
    line = node_fits("l40s_x8_pcie").custom["vllm"][2][ONE_SHOT]
    assert custom_all_reduce_s("l40s_x8_pcie", "vllm", 65536.0, 2) == pytest.approx(
        line.latency_s + 65536.0 / line.bandwidth_bytes_per_s)
    assert custom_all_reduce_s("l40s_x8_pcie", "vllm", 65536.0, 4) is None
    assert custom_all_reduce_s("l40s_x8_pcie", "trtllm", 65536.0, 2) is None

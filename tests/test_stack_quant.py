"""Quantized weights under a software stack where the GPU's rates and the engine's kernels disagree: W4A4 without an
FP4 rate, `compute: native` against an emulating family, and a family that widens a format the GPU runs natively."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from sim.apps.api import load_workload, simulate
from sim.apps.checks import stack_widens_native
from sim.core.errors import ConfigError
from sim.core.workload import workload_from_dict
from tests.conftest import ROOT


def test_w4a4_without_a_native_rate_runs_the_engines_weight_only_kernel_and_native_refuses_emulation():
    """A many-device trial: MXFP4 weights with MXFP4 activations on an H100 (no FP4 rate) skipped the stack's family
    and ran the plain dequantize-then-bf16 roofline, 3.5x faster in prefill than the MXFP4 x bf16 it stands for (the
    engine's Marlin path); and `compute: native` under a stack ran that Marlin emulation where without one it is
    refused. Now W4A4 costs as W4A16 there, and native is refused as without a stack."""
    path = ROOT / "workloads" / "llama13b_decode.yaml"
    base = {"stack": "vllm", "flash_attention": True, "formats.weights": "mxfp4"}
    a16 = simulate(load_workload(path, base), "h100_sxm")
    a4 = simulate(load_workload(path, {**base, "formats.activations": "mxfp4"}), "h100_sxm")
    q16, q4 = (next(o for o in r.decode_ops if o.name == "L0.qkv_proj") for r in (a16, a4))
    assert q16.path == q4.path == "fp4_marlin_emulated"
    assert a4.ttft_s == pytest.approx(a16.ttft_s, rel=0.05)
    with pytest.raises(ConfigError, match="compute: native: units.gpu has no native mxfp4 weight x fp16 activation"):
        simulate(load_workload(path, {**base, "compute": "native"}), "h100_sxm")


def test_a_stack_family_that_widens_a_format_the_gpu_runs_natively_is_said():
    """vllm runs gpt-oss's MXFP4 experts on a B200 through its weight-only FP4 family, beside MXFP8 activations the
    B200 pairs with them natively (Blackwell's native MXFP4 MoE not modelled): only a comment in the stack preset had
    said so (a many-device trial). With 16-bit activations (what the engine runs), or on an H100 (no FP4 rate), there
    is nothing to say."""
    overrides = {"expert_gate": "mxfp4", "expert_up": "mxfp4", "expert_down": "mxfp4"}
    w = workload_from_dict({"name": "g", "model": "gpt-oss-120b", "stack": "vllm", "formats": {
        "weights": "bf16", "activations": "mxfp8_e4m3", "overrides": overrides}}, "g.yaml")
    assert stack_widens_native(w, load_machine("b200")) == [
        "g.yaml: formats: mxfp4 experts x mxfp8_e4m3: stack vllm runs them as fp4_marlin_emulated, widened to its bf16 "
        "rate, though b200 pairs them natively: that engine path is not modelled (hw_models/stack/presets/vllm.yaml)"]
    assert stack_widens_native(w, load_machine("h100_sxm")) == []
    bf16 = workload_from_dict({"name": "g", "model": "gpt-oss-120b", "stack": "vllm", "formats": {
        "weights": "bf16", "activations": "bf16", "overrides": overrides}}, "g.yaml")
    assert stack_widens_native(bf16, load_machine("b200")) == []


def test_a_dequant_pass_draws_the_energy_of_its_traffic_and_its_widening():
    """torch-eager runs MXFP4 weights on an H100 as dequantize-then-GEMM (kernel_families.yaml dequant_gemm): a pass
    reads the 4-bit weights and writes them in 16 bits, the GEMM reads those back. Its energy had been op.bytes and
    the GEMM's FLOPs only (a review). By hand, q_proj of Llama-2-13B at batch 1 (M 1, N = K = 5120): the op's bytes
    plus 2 x 5120^2 x 2 B more through HBM at 40 pJ, 2 x 5120^2 FLOPs at bf16's 0.702 pJ and the widening's
    2 x 5120^2 vector FLOPs at the vector J/FLOP, set to 1 pJ here (below fp32's 2.11 pJ, the preset's largest entry,
    which a format without one is charged)."""
    h100 = load_machine("h100_sxm", {"units.gpu.energy_j_per_flop.vector": 1e-12})
    r = simulate(load_workload(ROOT / "workloads" / "llama13b_decode.yaml",
                               {"stack": "torch-eager", "formats.weights": "mxfp4"}), h100)
    q = next(o for o in r.decode_ops if o.name == "L0.q_proj")
    assert q.path == "dequant_gemm"
    n = 5120 * 5120
    assert q.energy_j == pytest.approx((q.bytes + 2 * n * 2) * 40e-12 + 2 * n * 0.702e-12 + 2 * n * 1e-12, rel=1e-9)


@pytest.mark.parametrize("hw, stack, fmt, path", [
    ("h100_sxm", "vllm", "fp8_block128", "fp8_block128 native (fp8_e4m3 MMA)"),   # a review: it had read 74% slower
    ("a100_80g", "vllm", "fp8_e4m3", "fp8_e4m3 +act -> bf16 dequant"),            # had been refused
    ("h100_sxm", "trtllm", "mxfp4", "mxfp4 +act -> bf16 dequant"),                # had been refused
    ("a100_80g", "trtllm", "int8", "trtllm_w8a8_sq"),
    ("b200", "vllm", "mxfp4", "mxfp4 native")])
def test_weights_and_activations_in_one_format_keep_the_path_they_had(hw, stack, fmt, path):
    """Only a pair the GPU has no rate for, whose engine family (or its emulation) runs here, moves to that family;
    a pair the GPU runs on its element format, a W8A8 family, or a family without a rate keep their paths."""
    r = simulate(load_workload(ROOT / "workloads" / "llama13b_decode.yaml", {
        "stack": stack, "flash_attention": True, "formats.weights": fmt, "formats.activations": fmt}), hw)
    assert next(o for o in r.decode_ops if o.name == "L0.qkv_proj").path == path


def test_sim_run_notes_what_its_formats_run_as_and_nothing_where_all_is_native(capsys):
    """`sim run` says narrow activations without a rate (it had, per op only; `sim serve` in a line); a weight-only
    int4 run, what the engines run, is no note (a review's false positive)."""
    from sim.apps.cli import main
    wl = str(ROOT / "workloads" / "llama13b_decode.yaml")
    assert main(["run", wl, "--hw", "a100_80g", "-q", "--set", "formats.activations=fp8_e4m3"]) == 0
    assert "formats.activations: fp8_e4m3 has no matrix rate on a100_80g" in capsys.readouterr().err
    assert main(["run", wl, "--hw", "a100_80g", "-q", "--set", "stack=vllm", "--set", "flash_attention=true",
                 "--set", "formats.weights=int4"]) == 0
    assert "warning" not in capsys.readouterr().err

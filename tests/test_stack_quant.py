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
    """vllm runs gpt-oss's MXFP4 experts on a B200 through its weight-only FP4 family (Blackwell's native MXFP4 MoE not
    modelled): only a comment in the stack preset had said so (a many-device trial). On an H100, which has no FP4
    rate, there is nothing to say."""
    w = workload_from_dict({"name": "g", "model": "gpt-oss-120b", "stack": "vllm", "formats": {
        "weights": "bf16", "overrides": {"expert_gate": "mxfp4", "expert_up": "mxfp4", "expert_down": "mxfp4"}}}, "g.yaml")
    assert stack_widens_native(w, load_machine("b200")) == [
        "g.yaml: formats: mxfp4 experts: stack vllm runs them as fp4_marlin_emulated, widened to its bf16 rate, though "
        "b200 has a native mxfp4 rate: that engine path is not modelled (hw_models/stack/presets/vllm.yaml)"]
    assert stack_widens_native(w, load_machine("h100_sxm")) == []

"""A stack's `quant_gemm_experts`: a MoE layer's routed experts run the engine's fused-MoE kernel, not its dense
Linear. Under `vllm` the block-FP8 Linear is vllm_fp8_block (FlashInfer's kernel, ~60 us a call when launched
eagerly; replayed from a CUDA graph, its graph family, DeepGEMM's device time); the experts take fp8_scaled_mm
(hw_models/stack/presets/vllm.yaml), checked here by hand from the YAML figures."""

from __future__ import annotations

import dataclasses

import pytest

from hw_models.stack.kernel_families import families
from hw_models.stack.spec import Stack, load_stack
from sim.apps.trace.aic import _mapper, gemm_op
from sim.core.errors import ConfigError
from sim.core.schema import validate_mapping

H100_STREAM_BYTES_PER_S = 3.35e12 * 0.85     # h100_sxm.yaml: datasheet bandwidth x memory_max


def _expert(m: int, n: int, k: int, fmt: str, name: str = "expert_up"):
    return dataclasses.replace(gemm_op(m, n, k, fmt), name=f"L0.{name}")


def test_vllm_experts_run_fp8_scaled_mm_and_its_linear_keeps_the_flashinfer_family():
    mapper = _mapper("h100_sxm", "vllm", eager=True)   # as aiconfigurator timed the Linear: eagerly
    assert _mapper("h100_sxm", "vllm").cost(gemm_op(4, 4096, 4096, "fp8_block128")).path == "sglang_fp8_block"
    dense = mapper.cost(gemm_op(4, 4096, 4096, "fp8_block128"))
    experts = [mapper.cost(_expert(4, 4096, 4096, "fp8_block128", n)) for n in ("expert_gate", "expert_up", "expert_down")]
    assert dense.path == "vllm_fp8_block" and {c.path for c in experts} == {"fp8_scaled_mm"}
    # By hand (M = 4, 4096 x 4096, weights and their 32 x 32 fp32 block scales): the family's floor, the
    # activation-quantize kernel at the stack's 2 us floor with 4 x 4096 x 3 B streamed, and the weights at
    # 0.859 of the stream; the 16-bit activations in and out at the full stream.
    fam = families()["fp8_scaled_mm"]
    w = 4096 * 4096 + 32 * 32 * 4
    other = 2 * (4 * 4096 * 2)
    want = (fam.floor_s + 2e-6 + 4 * 4096 * 3 / H100_STREAM_BYTES_PER_S
            + w / (H100_STREAM_BYTES_PER_S * fam.weight_stream_efficiency) + other / H100_STREAM_BYTES_PER_S)
    assert experts[1].duration_s == pytest.approx(want, rel=0.01)
    assert experts[1].duration_s < 0.25 * dense.duration_s     # the Linear's ~60 us floor is not the experts'


def test_trtllm_block_experts_keep_its_own_kernel_and_per_tensor_ones_do_not():
    """TensorRT-LLM's block-FP8 Linear family measures its own block-scale kernel (floor ~11 us), the library its MoE
    runs: no experts entry for it. Its per-tensor FP8 Linear (a quantize kernel and cuBLASLt, ~15 us at M = 1) is not
    what its fused MoE runs: those experts take fp8_scaled_mm, as under vllm."""
    mapper = _mapper("h100_sxm", "trtllm")
    assert mapper.cost(_expert(4, 4096, 4096, "fp8_block128")).path == "trtllm_fp8_block"
    assert load_stack("trtllm").family("fp8_block128", 9.0, experts=True) == "trtllm_fp8_block"
    assert mapper.cost(_expert(4, 4096, 4096, "fp8_e4m3")).path == "fp8_scaled_mm"
    assert mapper.cost(gemm_op(4, 4096, 4096, "fp8_e4m3")).path == "trtllm_fp8_per_tensor"


@pytest.mark.parametrize("stack", ["vllm", "trtllm", "sglang"])
def test_an_fp8_expert_never_costs_more_than_a_bf16_one_at_decode(stack):
    """A user's trial: under trtllm a Qwen3-235B decode ran slower in FP8 than in bf16, its experts at the FP8
    Linear's floor. Half the bytes of a memory-bound expert GEMM (one expert's 1536 x 4096) now cost less."""
    mapper = _mapper("h100_sxm", stack)
    for m in (1, 4, 16):
        for name in ("expert_up", "expert_down"):
            fp8, bf16 = (mapper.cost(_expert(m, 1536, 4096, fmt, name)).duration_s for fmt in ("fp8_e4m3", "bf16"))
            assert fp8 <= bf16, (m, name, fp8, bf16)
    # a 16-bit expert under vllm: no quantized family at all (the dense bf16 one, as before)
    assert load_stack("vllm").family("bf16", 9.0, experts=True) is None


def test_more_tokens_never_make_an_expert_gemm_cheaper():
    mapper = _mapper("h100_sxm", "vllm")
    times = [mapper.cost(_expert(m, 1536, 4096, "fp8_block128")).duration_s for m in (1, 2, 8, 32, 128, 512, 2048)]
    assert times == sorted(times)


def test_an_unknown_experts_family_is_a_one_line_error_at_its_key():
    raw = load_stack("vllm").model_dump(exclude_none=True)
    raw["quant_gemm_experts"] = {"fp8_block128": "no_such_kernel"}
    with pytest.raises(ConfigError, match=r"quant_gemm_experts.*no_such_kernel"):
        validate_mapping(Stack, raw, "s.yaml", "a mapping of stack fields")

"""The Ada (SM 8.9) kernel families scripts/fit_kernels.py fits on aiconfigurator's L40S tables.

Kept apart so that the pooled families (fitted on H100, A100, RTX PRO 6000) keep their figures: the L40S
rows feed only the families below, the L40S dense bf16 family and the l40s_x8_pcie collectives. Each
family is fitted on the L40S rows alone (its architecture's only GPU in sample, so none is held out);
the W8A8 families' activation-quantize kernel on the L40S quant table's rows of the engine's own
quantize kernel (`quant_gpus`). The stacks name them for SM 8.9 (`quant_gemm_by_capability: 8.9`).
"""

from __future__ import annotations

ADA_GPUS = {"l40s": "l40s"}                 # aic system -> sim preset
ADA_L2_BYTES = {"l40s": 96 * 2 ** 20}       # hw_models/presets/l40s.yaml (Ada whitepaper: AD102 96 MB)
# The aic quant table's SGLang rows (kernel_source `sglang`, L40S only) are not the quantize the SGLang GEMM call
# runs: 978 us at M = 8192, K = 4096, more than the whole measured FP8 Linear of that shape with N = 4096 (855 us);
# fitted on them the family's MAPE was 62.6%. SGLang's family borrows vLLM's quantize kernel, as on SM 9.0 / 12.x.

_ONLY = "fitted on L40S only (the only in-sample SM 8.9 GPU)"

ADA_FP8 = {
    "vllm_fp8_per_tensor_sm89": dict(
        framework="vllm", dtype="fp8", kernel="cutlass_fp8_scaled_mm", quant="vllm", rate_format="fp8_e4m3",
        gpus=("l40s",), quant_gpus=("l40s",),
        description="vLLM per-tensor FP8 W8A8 Linear on SM 8.9 (Ada): scaled_fp8_quant, then CUTLASS 2.x "
                    "cutlass_scaled_mm's SM 8.9 FP8 configurations",
        cite="vllm csrc/quantization/cutlass_w8a8/scaled_mm_entry.cu (cutlass_scaled_mm: SM 8.9 -> "
             "cutlass_scaled_mm_sm89), c2x/scaled_mm_sm89_fp8_dispatch.cuh (M-bucketed CUTLASS 2.x tiles); " + _ONLY),
    "sglang_fp8_per_tensor_sm89": dict(
        framework="sglang", dtype="fp8", kernel=None, quant="vllm", rate_format="fp8_e4m3", table="gemm_sglang",
        gpus=("l40s",), quant_gpus=("l40s",),
        assumed="the activation-quantize kernel takes the floor and streaming rate fitted on vLLM's per-tensor "
                "quantize kernel (L40S quant table; its SGLang rows are not the kernel the call runs)",
        description="SGLang per-tensor FP8 W8A8 Linear on SM 8.9: quantize, then sgl-kernel fp8_scaled_mm's SM 8.9 "
                    "CUTLASS 2.x path",
        cite="sgl-kernel csrc/gemm/fp8_gemm_kernel.cu fp8_scaled_mm (SM 8.9: sm89_fp8_dispatch_shape, CUTLASS 2.x "
             "tiles by M); aic kernel sglang_sgl_kernel_fp8_scaled_mm; " + _ONLY),
    "trtllm_fp8_block_sm89": dict(
        framework="trtllm", dtype="fp8_block", kernel=None, quant="trtllm", rate_format="fp8_e4m3",
        gpus=("l40s",), quant_gpus=("l40s",),
        assumed="the 1x128 activation-quantize kernel's floor and streaming rate are those fitted on the engine's "
                "per-tensor quantize kernel (no block-quantize table is measured)",
        description="TensorRT-LLM block-scaled FP8 Linear on SM 8.9 (Ada)",
        cite="TensorRT-LLM linear.py FP8BlockScalesLinearMethod.apply (fp8_quantize_1x128, then fp8_block_scaling_gemm; "
             "cpp/tensorrt_llm/thop/fp8BlockScalingGemm.cpp: the kernel by SM version, Hopper's only on SM 9.0); "
             "aic kernel torch_flow, L40S rows; " + _ONLY),
    "vllm_fp8_block_sm89": dict(
        framework="vllm", dtype="fp8_block", kernel="TritonFp8BlockScaledMMKernel", quant="vllm",
        rate_format="fp8_e4m3", gpus=("l40s",), quant_gpus=("l40s",),
        # timed without a CUDA graph, as on Hopper (fit_kernels.py VLLM_BLOCK_GRAPH_FAMILY): nothing beneath its
        # ~337 us eager call shows the Triton kernel's own time, so a replayed call costs as the block-scaled FP8
        # GEMM that is measured graph-timed on this GPU, TensorRT-LLM's (another kernel: an assumption)
        graph_family="trtllm_fp8_block_sm89",
        assumed="the 1x128 activation-quantize kernel's floor and streaming rate are those fitted on the engine's "
                "per-tensor quantize kernel (no block-quantize table is measured)",
        description="vLLM block-scaled FP8 Linear on SM 8.9: per-token-group quantize, then the Triton "
                    "w8a8_block_fp8_matmul kernel (neither DeepGEMM nor FlashInfer's block-scale GEMM builds for Ada)",
        cite="vllm/model_executor/layers/quantization/utils/fp8_utils.py W8A8BlockFp8LinearOp (QuantFP8 1x128 groups; "
             "no DeepGEMM / CUTLASS blockwise path below SM 9.0: w8a8_triton_block_scaled_mm); aic kernel "
             "TritonFp8BlockScaledMMKernel, L40S rows; " + _ONLY),
}
# As their SM 9.0 / 12.x siblings (fit_kernels.py ROW_SCALE, K_WALK): vLLM's and SGLang's dynamic per-token scale
# pass, and the serial K-walk of every family but vLLM's block-scaled one.
ADA_ROW_SCALE = {"vllm_fp8_per_tensor_sm89", "sglang_fp8_per_tensor_sm89"}
ADA_K_WALK = {"vllm_fp8_per_tensor_sm89", "sglang_fp8_per_tensor_sm89", "trtllm_fp8_block_sm89"}

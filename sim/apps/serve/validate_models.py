"""What the measured serving runs name, as this project builds it: the models of the replayed tables
(by their Hugging Face names), and the GPUs and nodes they ran on (by aiconfigurator's system names)."""

from __future__ import annotations

from functools import cache
from typing import Any

from sim.core.lowering import EXPERT_GEMMS
from sim.core.model import from_mapping, preset_mapping

# Llama-3.1 has Llama-3's shapes (sim/core/data/models.yaml llama3-8b/-70b) with a 128k context
# (meta-llama/Llama-3.1-8B config.json max_position_embeddings 131072); Qwen3-32B from its config.json
# (Qwen/Qwen3-32B: hidden 5120, 64 layers, 64 heads, 8 KV heads, head_dim 128, MLP 25600, vocab 151936,
# untied head, 40960 positions).
# The context is the served one, as benchmark servers are launched (--max-model-len): 16k holds every
# replayed run (isl + osl <= 9216) and bounds the step-cost grid (a 128k grid costs seconds per run).
SERVED_CONTEXT = 16384
# The models' own context (their config.json max_position_embeddings): a run longer than SERVED_CONTEXT is served
# at the power of two that holds it, up to this (validate.run_file).
NATIVE_CONTEXT = {"meta-llama/Llama-3.1-8B-Instruct": 131072, "meta-llama/Llama-3.1-8B": 131072,
                  "meta-llama/Llama-3.1-70B": 131072, "Qwen/Qwen3-32B": 40960}
_LLAMA31 = dict(vocab_size=128256, max_position_embeddings=SERVED_CONTEXT, num_key_value_heads=8)
MODELS: dict[str, dict[str, Any]] = {
    "meta-llama/Llama-3.1-8B-Instruct": dict(name="llama3.1-8b", hidden_size=4096, intermediate_size=14336,
                                             num_hidden_layers=32, num_attention_heads=32, **_LLAMA31),
    "meta-llama/Llama-3.1-70B": dict(name="llama3.1-70b", hidden_size=8192, intermediate_size=28672,
                                     num_hidden_layers=80, num_attention_heads=64, **_LLAMA31),
    "Qwen/Qwen3-32B": dict(name="qwen3-32b", hidden_size=5120, intermediate_size=25600, num_hidden_layers=64,
                           num_attention_heads=64, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                           max_position_embeddings=SERVED_CONTEXT, tie_word_embeddings=False),
}
MODELS["meta-llama/Llama-3.1-8B"] = MODELS["meta-llama/Llama-3.1-8B-Instruct"]
# The MoE models of the table: the presets of sim/core/data/models.yaml, whose `source` lines cite their config.json
# (Qwen3-235B-A22B; MiniMax-M2.5, lowered as qwen3_moe: the same op graph).
MOE_PRESETS = {"Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b", "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5",
               "openai/gpt-oss-120b": "gpt-oss-120b"}
for _hf, _preset in MOE_PRESETS.items():
    _raw = {k: v for k, v in preset_mapping(_preset).items() if k != "source"}
    NATIVE_CONTEXT[_hf] = _raw["max_position_embeddings"]
    MODELS[_hf] = {**_raw, "name": _preset, "max_position_embeddings": SERVED_CONTEXT}
# Checkpoints whose weights are block-scaled FP8 whatever a row's gemm_quant_mode says (the table labels the same
# checkpoint fp8_block under TensorRT-LLM 1.0 and fp8 under 1.2 and vLLM): both ship weight_block_size [128, 128] in
# their config.json quantization_config (the Qwen3-235B-A22B-FP8 model card: "fine-grained fp8 quantization with
# block size of 128").
BLOCK_FP8_CHECKPOINTS = {"Qwen/Qwen3-235B-A22B-FP8", "MiniMaxAI/MiniMax-M2.5"}
# The ops those checkpoints keep in 16 bits: their quantization_config.modules_to_not_convert lists lm_head and the
# MoE router (`mlp.gate` of every layer in Qwen's FP8 MoE releases; `gate` in MiniMax's), which the engines then
# load unquantized (formats.overrides of the replay; sim.core.lowering names the router `router`).
UNQUANTIZED_OPS = {name: ("router", "lm_head") for name in BLOCK_FP8_CHECKPOINTS}


# Checkpoints that quantize the routed experts alone: gpt-oss ships its experts in MXFP4 and every other weight in
# bf16 (openai/gpt-oss-120b config.json quantization_config: quant_method mxfp4, modules_to_not_convert the attention,
# the router, the embedding and lm_head), whatever a row's label says (the table labels its vLLM rows nvfp4).
EXPERT_ONLY_CHECKPOINTS = {"openai/gpt-oss-120b": "mxfp4"}


def checkpoint_quant(model: str, label: str | None = None) -> str | None:
    """The gemm_quant_mode a replay of `model` runs (a key of FORMATS): the checkpoint's where its weights are
    known (BLOCK_FP8_CHECKPOINTS, EXPERT_ONLY_CHECKPOINTS), else what the row says (`label`; None: 16-bit)."""
    return "fp8_block" if model in BLOCK_FP8_CHECKPOINTS else EXPERT_ONLY_CHECKPOINTS.get(model, label)


def checkpoint_formats(model: str, weights: str, quantized_kv: bool) -> dict[str, Any]:
    """The `formats:` of a replay of `model` with its weights in `weights`. `quantized_kv`: the engine quantizes the
    KV cache as the checkpoint says (TensorRT-LLM: validate.py's KV note), which a per-tensor FP8 (ModelOpt)
    checkpoint says, a block-FP8 one not (no kv_cache_quant_algo in Qwen's or MiniMax's quantization_config).
    An expert-only checkpoint keeps everything but the routed experts in bf16."""
    if model in EXPERT_ONLY_CHECKPOINTS:
        return {"weights": "bf16", "activations": "bf16", "kv_cache": "bf16",
                "overrides": dict.fromkeys(EXPERT_GEMMS, weights)}
    kv = weights if quantized_kv and weights == "fp8_e4m3" else "bf16"
    keep = UNQUANTIZED_OPS.get(model, ()) if weights != "bf16" else ()
    return {"weights": weights, "activations": "bf16", "kv_cache": kv,
            **({"overrides": dict.fromkeys(keep, "bf16")} if keep else {})}

# gemm_quant_mode -> the stored weight format. Activations stay bf16 under every quantization: the engines' W8A8
# Linear quantizes its bf16 input on each call (TensorRT-LLM _torch/modules/linear.py FP8QDQLinearMethod.apply:
# static_quantize_e4m3_per_tensor, then cublas_scaled_mm; vLLM w8a8_utils.py Fp8LinearOp.apply: scaled_fp8_quant,
# then cutlass_scaled_mm), the residual stream, norms and attention inputs being bf16. So the stack's W8A8 family
# (kernel_families_fitted.yaml: quantize kernel + scaled GEMM at its measured rate) prices each GEMM; with fp8
# activations declared it did not apply (hw_models.stack.cost: a family runs where weights and activations differ)
# and every FP8 GEMM ran at the plain FP8 peak, 25-45% faster than aic's measured rows at M ~ 1,000.
FORMATS = {None: "bf16", "fp8": "fp8_e4m3", "fp8_block": "fp8_block128", "mxfp4": "mxfp4"}

# aiconfigurator `system` names -> this project's presets (hw_models/presets), and the node a TP group
# spans (hw_models/network/presets; None: no multi-GPU node preset).
GPUS = {"h100_sxm": "h100_sxm", "h200_sxm": "h200", "b200_sxm": "b200", "rtx_pro_6000": "rtx_pro_6000",
        "a100_sxm": "a100_80g", "rtx4090": "rtx4090"}
NODES = {"h100_sxm": "dgx_h100", "h200": "hgx_h200", "a100_80g": "dgx_a100", "b200": "hgx_b200",
         "rtx_pro_6000": "rtx_pro_6000_x8_pcie"}


@cache
def is_moe(name: str) -> bool:
    """Whether the table's model `name` (a key of MODELS) routes experts, read off its config as a replay builds it
    (Qwen's configs say num_experts, gpt-oss's num_local_experts)."""
    return from_mapping(dict(MODELS[name]), name).is_moe


def served_model(name: str, longest: int) -> dict[str, Any] | str:
    """The model as a server is launched for a run whose longest request is `longest` tokens: a replayed table's
    at SERVED_CONTEXT, or at the power of two that holds it, up to its own context; a preset or path as it is."""
    if name not in MODELS:
        return name
    context = max(SERVED_CONTEXT, 1 << (int(longest) - 1).bit_length())
    return {**MODELS[name], "max_position_embeddings": min(context, NATIVE_CONTEXT[name])}

"""What the measured serving runs name, as this project builds it: the models of the replayed tables
(by their Hugging Face names), and the GPUs and nodes they ran on (by aiconfigurator's system names)."""

from __future__ import annotations

from typing import Any

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

# aiconfigurator `system` names -> this project's presets (hw_models/presets), and the node a TP group
# spans (hw_models/network/presets; None: no multi-GPU node preset).
GPUS = {"h100_sxm": "h100_sxm", "h200_sxm": "h200", "b200_sxm": "b200", "rtx_pro_6000": "rtx_pro_6000",
        "a100_sxm": "a100_80g", "rtx4090": "rtx4090"}
NODES = {"h100_sxm": "dgx_h100", "h200": "hgx_h200", "a100_80g": "dgx_a100"}


def served_model(name: str, longest: int) -> dict[str, Any] | str:
    """The model as a server is launched for a run whose longest request is `longest` tokens: a replayed table's
    at SERVED_CONTEXT, or at the power of two that holds it, up to its own context; a preset or path as it is."""
    if name not in MODELS:
        return name
    context = max(SERVED_CONTEXT, 1 << (int(longest) - 1).bit_length())
    return {**MODELS[name], "max_position_embeddings": min(context, NATIVE_CONTEXT[name])}

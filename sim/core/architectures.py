"""Which Hugging Face `model_type`s sim models, and what each one fixes.

A config.json names its architecture in `model_type`; the keys beside it give
sizes, but several cost-relevant features are implied by the type alone
(Qwen2's q/k/v biases, Qwen3's q/k norm, Gemma-2's sandwich norms and
alternating sliding window) or take the class's default when the file leaves
them out (Mistral's 4096-key window, Gemma's tied head). A type not in
`ARCHITECTURES`, or a config that switches on a feature the op graph does not
have, is refused in one line naming the feature: running it as LLaMA would
give wrong parameter counts and times without a word.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from sim.core.errors import ConfigError, where


@dataclass(frozen=True)
class Refusal:
    """A config key whose value asks for a feature sim does not model."""

    key: str
    applies: Callable[[Any, dict[str, Any]], bool]   # (value, whole config) -> True where the feature is on
    feature: str                     # what is not modelled, in the user's words
    hint: str = ""                   # what to do instead


@dataclass(frozen=True)
class Architecture:
    """What one model_type fixes. `fixed`: ModelConfig fields the type implies; `defaults`:
    the HF config class's defaults for keys a config.json may leave out (HF key -> value)."""

    family: str = "llama"
    fixed: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    refusals: tuple[Refusal, ...] = ()
    ignores: tuple[str, ...] = ()    # HF keys present but inactive (Qwen's sliding_window without use_sliding_window)


class SwitchError(ValueError):
    """A feature key written as a string (a string "false" is truthy)."""


def _on(value: Any, raw: dict[str, Any]) -> bool:
    if isinstance(value, str):   # a switch, a count (kv_lora_rank) or a list (mlp_only_layers); "false" is truthy
        raise SwitchError(f"must be true or false, got {value!r}")
    return bool(value)


def _not_one(value: Any, raw: dict[str, Any]) -> bool:
    return value not in (None, 1)


def _alternating(layer_types: Any) -> bool:
    """gpt-oss's layer_types as global_every 2 lowers them: sliding_attention on even layers, full_attention on odd."""
    return isinstance(layer_types, list) and all(
        t == ("sliding_attention" if i % 2 == 0 else "full_attention") for i, t in enumerate(layer_types))


_SWA_LAYERS = Refusal("use_sliding_window", _on, "a sliding window on the layers above max_window_layers")
_SPARSE_STEP = Refusal("decoder_sparse_step", _not_one, "MoE on every n-th layer only (decoder_sparse_step > 1)")
_MLP_ONLY = Refusal("mlp_only_layers", _on, "dense MLP layers among MoE ones (mlp_only_layers)")
_MLP_BIAS = Refusal("mlp_bias", _on, "biases on the MLP projections (mlp_bias)")
_LLAMA_LIKE = (_MLP_BIAS,)
# Every type: transformers' RoPE helpers read partial_rotary_factor from any config (a trial gave it to a llama
# config, which ran without a word while phi3's was refused).
_PARTIAL_ROPE = Refusal("partial_rotary_factor", lambda v, raw: v not in (None, 1, 1.0),
                        "RoPE on part of each head (partial_rotary_factor < 1)")

ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture(defaults={"tie_word_embeddings": False}, refusals=_LLAMA_LIKE),
    # MistralConfig's default window is 4096 (v0.1 writes it; v0.2 on write null).
    "mistral": Architecture(defaults={"tie_word_embeddings": False, "sliding_window": 4096}, refusals=_LLAMA_LIKE),
    "mixtral": Architecture(defaults={"tie_word_embeddings": False}),
    # Qwen configs carry a sliding_window that only use_sliding_window switches on.
    "qwen2": Architecture(fixed={"qkv_bias": True}, defaults={"tie_word_embeddings": False},
                          refusals=(_SWA_LAYERS,), ignores=("sliding_window",)),
    "qwen3": Architecture(fixed={"qk_norm": True}, defaults={"tie_word_embeddings": False},
                          refusals=(_SWA_LAYERS,), ignores=("sliding_window",)),
    "qwen3_moe": Architecture(fixed={"qk_norm": True}, defaults={"tie_word_embeddings": False},
                              refusals=(_SWA_LAYERS, _SPARSE_STEP, _MLP_ONLY), ignores=("sliding_window",)),
    "gemma": Architecture(defaults={"tie_word_embeddings": True, "head_dim": 256}),
    # Gemma-2: norms before and after attention and MLP, a 4096-key window on every other
    # layer (layer 0 local), tanh soft-capping of attention scores (50) and logits (30).
    "gemma2": Architecture(fixed={"post_norms": True, "global_every": 2},
                           defaults={"tie_word_embeddings": True, "head_dim": 256, "sliding_window": 4096,
                                     "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}),
    # gpt-oss (openai/gpt-oss-120b and -20b config.json): attention_bias (q/k/v/o biases), a 128-key window on
    # every other layer from layer 0 (layer_types sliding, full, ...), routed SwiGLU experts intermediate_size wide
    # (num_local_experts, num_experts_per_tok), untied head. Not priced apart: each head's learned attention-sink
    # logit (one more score per row of the softmax), the clamped SwiGLU (swiglu_limit), biases on the router and
    # the experts.
    "gpt_oss": Architecture(fixed={"global_every": 2},
                            defaults={"tie_word_embeddings": False, "sliding_window": 128, "attention_bias": True},
                            refusals=(Refusal("layer_types", lambda v, raw: not _alternating(v),
                                              "a window on layers other than every other one from layer 0"),)),
    "phi3": Architecture(defaults={"tie_word_embeddings": False}),
    "opt": Architecture(family="opt", defaults={"tie_word_embeddings": True},
                        refusals=(Refusal("do_layer_norm_before", lambda v, raw: v is False,
                                          "LayerNorm after attention (do_layer_norm_before: false, OPT-350m)"),
                                  Refusal("word_embed_proj_dim",
                                          lambda v, raw: v is not None and v != raw.get("hidden_size"),
                                          "an embedding narrower than hidden_size (word_embed_proj_dim, "
                                          "OPT-350m)"))),
    # DeepSeek's MLA has its own keys; the deepseek-v2-lite preset approximates it as MQA
    # (see sim/core/data/models.yaml), a raw config with kv_lora_rank is refused.
    "deepseek_v2": Architecture(defaults={"tie_word_embeddings": False},
                                refusals=(Refusal("kv_lora_rank", _on, "multi-head latent attention",
                                                  "the deepseek-v2-lite preset approximates it as MQA"),)),
}

# Types users meet that sim does not model, with the feature that rules each out.
KNOWN_UNSUPPORTED = {
    "gpt2": "a GELU MLP without a gate and learned positions (n_embd, n_layer, n_head keys)",
    "falcon": "parallel attention and MLP blocks with LayerNorm",
    "phi": "parallel attention and MLP blocks with partial rotary embeddings",
    "gpt_neox": "parallel residual blocks with partial rotary embeddings",
    "gptj": "parallel attention and MLP blocks with partial rotary embeddings",
    "bloom": "ALiBi positions and a GELU MLP without a gate",
    "mpt": "ALiBi positions and a GELU MLP without a gate",
    "qwen2_moe": "the sigmoid gate on the shared expert",
    "gemma3": "5:1 interleaved local/global attention and a vision tower",
    "gemma3_text": "5:1 interleaved local/global attention",
    "deepseek_v3": "multi-head latent attention and node-limited routing",
    "phimoe": "Phi-3.5-MoE's sparse-mixer routing and biases",
    "mamba": "state-space layers instead of attention",
    "llava": "a vision tower and projector in front of the language model",
    "llava_next": "a vision tower and projector in front of the language model",
    "mllama": "cross-attention layers over a vision tower's image tokens",
    "qwen2_vl": "a vision tower and multimodal rotary positions (M-RoPE)",
    "qwen2_5_vl": "a vision tower and multimodal rotary positions (M-RoPE)",
    "jamba": "interleaved state-space and attention layers",
}


def _check_classes(classes: Any, source: str | None) -> None:
    """A config without model_type is read as LLaMA; one whose `architectures` names another model's class
    (FalconForCausalLM) is refused rather than run as LLaMA (a model-import trial: Falcon-7B read as 11.2B)."""
    if not isinstance(classes, list):
        return
    other = [c for c in classes if not str(c).startswith("Llama")]
    if other:
        raise ConfigError(f"{where(source, 'architectures')}{other[0]!r} with no model_type: a config without "
                          "model_type is read as LLaMA; give its model_type (modelled types: "
                          f"{', '.join(sorted(ARCHITECTURES))})")


def architecture(raw: dict[str, Any], source: str | None) -> Architecture:
    """The Architecture of a config mapping; a refused type or feature raises ConfigError.
    No model_type (a sim-style YAML or an inline mapping): its `family`, LLaMA by default."""
    kind = raw.get("model_type")
    if kind is None:
        _check_classes(raw.get("architectures"), source)
        family = str(raw.get("family") or "llama").lower()
        return ARCHITECTURES["opt" if family == "opt" else "llama"]
    kind = str(kind).lower()
    arch = ARCHITECTURES.get(kind)
    if arch is None:
        why = KNOWN_UNSUPPORTED.get(kind)
        listed = ", ".join(sorted(ARCHITECTURES))
        raise ConfigError(f"{where(source, 'model_type')}{kind!r} is not modelled"
                          f"{f' ({why})' if why else ''}; modelled types: {listed}")
    for refusal in (*arch.refusals, _PARTIAL_ROPE):
        try:
            applies = refusal.key in raw and refusal.applies(raw[refusal.key], raw)
        except SwitchError as exc:
            raise ConfigError(f"{where(source, refusal.key)}{exc}") from None
        if applies:
            raise ConfigError(f"{where(source, refusal.key)}{refusal.feature} is not modelled "
                              f"(model_type {kind}, {refusal.key}: {raw[refusal.key]!r})"
                              f"{'; ' + refusal.hint if refusal.hint else ''}")
    return arch

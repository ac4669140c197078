"""What a Hugging Face config.json says about its checkpoint's quantization, and the sim weight format that costs it.

A config.json of a quantized checkpoint carries `quantization_config` (transformers' quantizers read it). sim costs
weights in the workload's `formats.weights`, whatever the checkpoint stores, so a run of an FP8 or MXFP4 checkpoint
without that key costs 16-bit weights: sim.apps.checks says so, naming the format that matches where one does:
* `fp8` (transformers FineGrainedFP8Config; Qwen3-32B-FP8, DeepSeek-V3): e4m3, per 128x128 block where
  `weight_block_size` is given -> fp8_block128, else fp8_e4m3;
* `mxfp4` (gpt-oss) -> mxfp4;
* `modelopt` (NVIDIA ModelOpt exports: `quant_algo` FP8 or NVFP4) -> fp8_e4m3 or nvfp4;
* `awq`, `gptq` (`bits` 4 or 8) -> int4 or int8;
* `compressed-tensors` (llm-compressor): the first config group's weights, 8-bit float -> fp8_e4m3, 4- or 8-bit
  int -> int4 or int8.
Others (bitsandbytes' NF4, ...) are named without a format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CheckpointQuant:
    described: str               # as the config.json says it, e.g. "quant_method 'fp8', weight_block_size [128, 128]"
    weights: str | None = None   # the sim format of its weights, None where no format matches
    # The quantized weights are a MoE's routed experts only: `modules_to_not_convert` keeps the attention in 16 bits
    # (gpt-oss: self_attn, router, embed_tokens and lm_head in bf16), so formats.weights alone would understate them.
    experts_only: bool = False

    def fix(self, moe: bool) -> str:
        """The workload `formats` that cost the checkpoint's weights (a model-import trial: the warning had named
        formats.weights: mxfp4 for gpt-oss, 19% fewer weight bytes than the checkpoint's bf16 attention and head)."""
        if self.weights is None:
            return "set formats.weights to the nearest format sim has (docs/formats.md)"
        if self.experts_only and moe:
            return (f"formats: {{weights: bf16, overrides: {{expert_gate: {self.weights}, expert_up: {self.weights}, "
                    f"expert_down: {self.weights}}}}} costs the checkpoint's (its modules_to_not_convert keep the "
                    "attention, router and head in 16 bits)")
        return f"formats.weights: {self.weights} costs the checkpoint's"


def _int_weights(bits: Any) -> str | None:
    return {4: "int4", 8: "int8"}.get(bits) if isinstance(bits, int) else None


def _compressed_tensors(qc: dict) -> str | None:
    groups = qc.get("config_groups")
    group = next(iter(groups.values()), None) if isinstance(groups, dict) and groups else None
    weights = group.get("weights") if isinstance(group, dict) else None
    if not isinstance(weights, dict):
        return None
    if weights.get("type") == "float":
        return "fp8_e4m3" if weights.get("num_bits") == 8 else None
    return _int_weights(weights.get("num_bits"))


def checkpoint_quant(raw: dict[str, Any]) -> CheckpointQuant | None:
    """The config.json's quantization_config as a CheckpointQuant, None where it has none."""
    qc = raw.get("quantization_config")
    if not isinstance(qc, dict):
        return None
    method = str(qc.get("quant_method", "")).lower()
    details = [f"{key} {qc[key]!r}" for key in ("quant_method", "quant_algo", "bits", "weight_block_size")
               if key in qc]
    if method == "fp8":
        weights = "fp8_block128" if qc.get("weight_block_size") == [128, 128] else (
            None if qc.get("weight_block_size") else "fp8_e4m3")
    elif method == "mxfp4":
        weights = "mxfp4"
    elif method == "modelopt":
        weights = {"FP8": "fp8_e4m3", "NVFP4": "nvfp4"}.get(str(qc.get("quant_algo", "")).upper())
    elif method in ("awq", "gptq"):
        weights = _int_weights(qc.get("bits"))
    elif method == "compressed-tensors":
        weights = _compressed_tensors(qc)
    else:
        weights = None
    kept = qc.get("modules_to_not_convert")
    experts_only = isinstance(kept, list) and any(w in str(m) for m in kept for w in ("attn", "attention"))
    return CheckpointQuant(", ".join(details) or "quantization_config", weights, experts_only)

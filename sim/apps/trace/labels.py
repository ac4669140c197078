"""The op labels a trace may carry, and the simulator op kind (sim.core.graph) of each:
the simulator's op names (`L3.q_proj`, `embed`, `lm_head`) inside step annotations
(`step0.prefill`, `step5.decode`), and vidur's `vidur_<op>` names, which keep
vidur's fused ops (QKV in one GEMM, gate+up in one GEMM)."""

from __future__ import annotations

import re

from sim.core import graph as g

# vidur op -> simulator op kind (sim.core.graph). QKV and gate+up are single fused GEMMs.
VIDUR_KINDS = {
    "emb": g.EMBED, "input_layernorm": g.NORM, "attn_pre_proj": g.GEMM, "attn_rope": g.ROPE,
    "attn_post_proj": g.GEMM, "post_attention_layernorm": g.NORM, "mlp_up_proj": g.GEMM,
    "mlp_act": g.ELEMENTWISE, "mlp_down_proj": g.GEMM, "add": g.ELEMENTWISE,
}
# simulator op base name -> kind, for the project's labels (same as sim.core.lowering).
SIM_KINDS = {
    "embed": g.EMBED, "final_norm": g.NORM, "lm_head": g.GEMM,
    "attn_norm": g.NORM, "mlp_norm": g.NORM, "q_proj": g.GEMM, "k_proj": g.GEMM, "v_proj": g.GEMM,
    "o_proj": g.GEMM, "gate_proj": g.GEMM, "up_proj": g.GEMM, "down_proj": g.GEMM, "fc1": g.GEMM,
    "fc2": g.GEMM, "rope": g.ROPE, "kv_append": g.KV_APPEND, "qk": g.ATTN_SCORE, "softmax": g.SOFTMAX,
    "av": g.ATTN_CONTEXT, "attention": g.ATTENTION, "attn_residual": g.ELEMENTWISE,
    "mlp_residual": g.ELEMENTWISE, "act": g.ELEMENTWISE,
}
SIM_OP_RE = re.compile(r"^(?:L(\d+)\.(\w+)|(embed|final_norm|lm_head))$")
STEP_RE = re.compile(r"^step(\d+)\.(prefill|decode)$")
VIDUR_RE = re.compile(r"^vidur_(\w+)$")
VIDUR_DTYPE = "fp16"   # vidur profiles with dummy fp16 weights (shared/validation/PROVENANCE.md §1.1)


def sim_label(name: str) -> tuple[int | None, str] | None:
    """(layer, kind) of a simulator op label ("L3.q_proj" -> (3, gemm), "lm_head" -> (None, gemm));
    None for a name that is not one or an op the simulator does not model."""
    m = SIM_OP_RE.match(name)
    kind = SIM_KINDS.get((m.group(2) or m.group(3)) if m else "")
    if kind is None:
        return None
    return (int(m.group(1)) if m.group(1) else None), kind


def step_index(name: str) -> int:
    """The step number of a step annotation ("step5.decode" -> 5); `name` must match STEP_RE."""
    return int(STEP_RE.match(name).group(1))

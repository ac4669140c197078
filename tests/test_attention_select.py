"""Which attention kernel family a stack runs on a GPU (hw_models.stack.attention_kernels.AttentionRule):
the engines choose their backend by the GPU's compute capability and the KV-cache format (sglang
server_args.py _get_default_attn_backend; vllm platforms/cuda.py _get_backend_priorities)."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from hw_models.stack.attention_kernels import AttentionRule, attention_cost, attention_families, select_family
from hw_models.stack.cost import stack_cost
from hw_models.stack.spec import Stack, load_stack
from sim.apps.trace.aic import measured_family
from sim.core.errors import ConfigError
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import load_model
from sim.core.schema import validate_mapping

MODEL = {"name": "t", "hidden_size": 4096, "intermediate_size": 14336, "num_layers": 1, "num_heads": 32,
         "num_kv_heads": 8, "head_dim": 128, "vocab_size": 32000, "max_position_embeddings": 1 << 20}


def _op(kv: str = "bf16", phase: str = "decode", q_len: int = 1):
    graph = lower(load_model(MODEL), phase, 4, q_len, 1024 if phase == "decode" else q_len, FormatPolicy("bf16", "bf16", kv), True, 1)
    return graph.op("L0.attention")


def _path(stack: str, preset: str, kv: str = "bf16", phase: str = "decode") -> str:
    m = load_machine(preset)
    u = m.units[m.main_unit]
    op = _op(kv, phase, 1 if phase == "decode" else 512)
    return stack_cost(op, u, m.main_unit, m.memory[u.memory], load_stack(stack), None).path


def test_rules_by_hand():
    """First match wins; an empty list matches anything; no compute capability matches no capability list."""
    rules = [AttentionRule(family="b", capability_major=[9]),
             AttentionRule(family="c", capability_major=[8, 12], kv=["fp8_e4m3"])]
    assert select_family("a", rules, 9.0, "fp8_e4m3") == "b"
    assert select_family("a", rules, 12.0, "fp8_e4m3") == "c"
    assert select_family("a", rules, 12.0, "bf16") == "a"
    assert select_family("a", rules, None, "fp8_e4m3") == "a"
    assert select_family("a", [AttentionRule(family="d", kv=["fp8"])], None, "fp8_e4m3") == "d"   # alias


def test_exact_capability_rule_by_hand():
    """`capability` matches the exact SM version, not its major: SM 8.9 (Ada) apart from SM 8.0 (Ampere)."""
    rules = [AttentionRule(family="ada", capability=[8.9])]
    assert select_family("a", rules, 8.9, "bf16") == "ada"
    assert select_family("a", rules, 8.0, "bf16") == "a"
    assert select_family("a", rules, 8.6, "bf16") == "a"
    assert select_family("a", rules, None, "bf16") == "a"


@pytest.mark.parametrize("preset, family", [
    ("l40s", "trtllm_attention_sm89"), ("a100_80g", "trtllm_attention"), ("h100_sxm", "trtllm_attention"),
    ("rtx_pro_6000", "trtllm_attention_sm120")])
def test_trtllm_attention_by_sm_version(preset, family):
    m = load_machine(preset)
    cap = m.units[m.main_unit].efficiency.compute_capability
    assert load_stack("trtllm").attention_family(cap, "fp8_e4m3") == family


@pytest.mark.parametrize("preset, kv, family", [
    ("h100_sxm", "bf16", "sglang_fa3"),          # fa3 on Hopper (sgl-kernel's build)
    ("h200", "fp8_e4m3", "sglang_fa3"),
    ("rtx_pro_6000", "bf16", "flashinfer"),      # SM 12.0: neither Hopper nor SM 10.x
    ("a100_80g", "bf16", "flashinfer"),
    ("rtx4090", "fp8_e4m3", "flashinfer"),
])
def test_sglang_picks_fa3_on_hopper_flashinfer_elsewhere(preset, kv, family):
    assert _path("sglang", preset, kv) == f"{family} decode"
    assert _path("sglang", preset, kv, "prefill") == f"{family} prefill"


@pytest.mark.parametrize("preset, kv, family", [
    ("h100_sxm", "fp8_e4m3", "flash_attn"),      # FA3 reads FP8 KV on Hopper
    ("h100_sxm", "bf16", "flash_attn"),          # FA3 on SM 9.0 (fa_utils.get_flash_attn_version)
    ("rtx_pro_6000", "bf16", "flash_attn2"),     # FA2 elsewhere
    ("a100_80g", "bf16", "flash_attn2"),
    ("l40s", "bf16", "flash_attn2"),
    ("rtx_pro_6000", "fp8_e4m3", "vllm_flashinfer"),  # FA2 has no FP8 KV: FlashInfer, vLLM's prefill path
    ("a100_80g", "fp8_e4m3", "vllm_flashinfer"),
])
def test_vllm_runs_flashinfer_for_fp8_kv_off_hopper(preset, kv, family):
    assert _path("vllm", preset, kv) == f"{family} decode"


def test_sm100_rules():
    """SM 10.x: vLLM puts FlashInfer first, SGLang runs trtllm_mha (TensorRT-LLM's kernels)."""
    assert load_stack("vllm").attention_family(10.0, "bf16") == "flashinfer"
    assert load_stack("sglang").attention_family(10.0, "bf16") == "trtllm_attention"


def test_v0_eager_has_no_family():
    """vLLM V0 had neither FlashAttention's paged decode nor FlashInfer: its rules are emptied with it."""
    assert load_stack("vllm-v0-eager").attention_family(12.0, "fp8_e4m3") is None


def test_flashinfer_is_fitted_and_sglang_names_it():
    fam = attention_families()["flashinfer"]
    assert {"bf16", "fp8_e4m3"} <= set(fam.decode) and fam.prefill is not None
    assert "server_args.py" in fam.cite and load_stack("sglang").attention == "flashinfer"


def test_unknown_family_in_a_rule_is_refused():
    with pytest.raises(ConfigError, match="unknown attention kernel family"):
        validate_mapping(Stack, {**load_stack("vllm").model_dump(exclude={"source"}),
                                 "attention_rules": [{"family": "nope"}]}, "t.yaml", "a stack")


@pytest.mark.parametrize("src, family", [("torch_flow", None), ("torch_flow_flashinfer", None), ("fa3", "sglang_fa3"), ("vllm_flash_attn_fa3", "flash_attn"),
                                         ("flash_attention", "sglang_fa3_sm80"), ("vllm_flash_attn_fa2", "flash_attn2"),
                                         ("vllm_flash_attn", None),
                                         ("vllm_flashinfer_fidecode", "vllm_flashinfer"), ("flashinfer", "flashinfer"),
                                         ("triton", None)])
def test_aic_rows_keep_the_kernel_they_measured(src, family):
    assert measured_family(src) == family


def test_sglang_flash_attention_rows_are_fa3_on_sm80():
    """SGLang's A100 FlashAttention-backend rows run FlashAttention-3's SM 8.x build (SGLang's fa3 backend takes
    SM 8.x): decode costed as sglang_fa3_sm80 (fitted on them), prefill as sglang_fa3's SM 8.0 curve (prefill_from).
    vLLM's A100 rows name no FlashAttention version: the stack picks it by the GPU (FA2 on SM 8.0)."""
    fams = attention_families()
    assert measured_family("flash_attention") == "sglang_fa3_sm80"
    assert fams["sglang_fa3_sm80"].decode["bf16"].split == "fa3"
    assert fams["sglang_fa3_sm80"].prefill_sm[8.0] == fams["sglang_fa3"].prefill_sm[8.0]
    assert measured_family("vllm_flash_attn") is None


def test_shipped_prefill_by_hand_on_rtx_pro_6000():
    """Each family's 16-bit prefill on the RTX PRO 6000 (SM 12.0, bf16 peak 503.8 TFLOP/s): fixed_s + the causal
    FLOPs at the curve's fraction at 512 tokens (a measured point of every shipped curve) + 512 keys walked. FLOPs:
    batch 4 x 32 heads x 512 x 513 / 2 causal scores, each 4 x 128 (QK^T and PV, multiply-add) + 5 (softmax).
    The curve is SM 12.0's where the family has one, else its own (vllm_flashinfer has no 16-bit curve: None)."""
    m = load_machine("rtx_pro_6000")
    u = m.units[m.main_unit]
    op = _op("bf16", "prefill", 512)
    for name, fam in attention_families().items():
        pf = fam.prefill_sm[12.0].prefill if 12.0 in fam.prefill_sm and fam.prefill_sm[12.0].prefill else fam.prefill
        c = attention_cost(op, u, m.main_unit, m.memory[u.memory], name)
        if pf is None:
            assert c is None
            continue
        frac = dict(pf.rate_points)[512]
        assert op.flops == pytest.approx(4 * 32 * 512 * 513 / 2 * (4 * 128 + 5))
        assert c.duration_s == pytest.approx(pf.fixed_s + op.flops / (503.8e12 * frac) + 512 * pf.walk_s_per_token)

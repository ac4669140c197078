"""A stack whose engine runs attention as one fused kernel (vllm: FlashAttention; sglang: FlashInfer/FA3; trtllm:
its XQA/FMHA) lowers attention fused unless the workload says otherwise, and a workload that sets
flash_attention: false under such a stack is warned that the engine never launches the unfused kernels."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from hw_models.registry import mapper_for
from sim.apps.checks import unused_settings
from sim.core import graph as g
from sim.core.workload import Workload

H100 = load_machine("h100_sxm")


def _workload(**kw) -> Workload:
    return Workload(model="llama3-8b", batch=4, prompt_len=512, gen_len=8,
                    formats={"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"}, **kw)


def _decode_kinds(w: Workload) -> set[str]:
    m = mapper_for(H100, w, w.model_config_())
    return {op.kind for op in m.step_graph("decode", 1, 520).ops()}


@pytest.mark.parametrize("stack", ["vllm", "sglang", "trtllm"])
def test_a_fused_attention_stack_lowers_one_attention_op_when_the_workload_is_silent(stack):
    kinds = _decode_kinds(_workload(stack=stack))
    assert g.ATTENTION in kinds and g.SOFTMAX not in kinds
    assert not unused_settings(_workload(stack=stack), H100, _workload().model_config_())


def test_the_workload_s_own_choice_stands_and_is_warned():
    w = _workload(stack="vllm", flash_attention=False)
    kinds = _decode_kinds(w)
    assert g.ATTENTION not in kinds and g.SOFTMAX in kinds
    (note,) = unused_settings(w, H100, w.model_config_())
    assert "flash_attention: false" in note and "'vllm'" in note


@pytest.mark.parametrize("stack", [None, "torch-eager", "vllm-v0-eager"])
def test_no_stack_or_one_without_an_attention_family_keeps_the_default(stack):
    """Eager torch and vLLM V0's eager xformers path have no attention family: the field's default (unfused)."""
    w = _workload(stack=stack)
    assert g.SOFTMAX in _decode_kinds(w)
    assert not unused_settings(_workload(stack=stack, flash_attention=False), H100, w.model_config_())

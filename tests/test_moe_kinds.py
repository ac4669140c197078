"""MoE models on the kinds other than gpu (issue 14): offload, PIM and spatial refuse
them with one line naming the workload file, the `model` key and why (exit 2), since
each lays a layer's weights out whole and would mis-count routed experts; the same
model runs on a gpu preset, and a dense model still runs on every one of these kinds."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from hw_models.registry import simulate
from sim.core.errors import ConfigError
from sim.core.workload import Workload
from tests.robust_helpers import TINY_WORKLOAD, refused

# A tiny Mixtral-shaped model (8 experts, top-2): fast on every kind.
TINY_MOE = {"model_type": "mixtral", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
            "max_position_embeddings": 512, "num_local_experts": 8, "num_experts_per_tok": 2}
KINDS = {"a6000_offload": ("offload", "buffers"), "hbm_pim": ("pim", "bank layout"),
         "groq_lpu": ("spatial", "resident")}


def _w(model=None) -> Workload:
    return Workload(name="moe", model=model or TINY_MOE, batch=2, prompt_len=16, gen_len=2, source="moe.yaml")


@pytest.mark.parametrize("hw", sorted(KINDS))
def test_moe_refused_on_kind(hw):
    kind, why = KINDS[hw]
    with pytest.raises(ConfigError) as e:
        simulate(_w(), load_machine(hw), detail=False)
    msg = str(e.value)
    assert msg.startswith("moe.yaml: model: ") and f"the {kind} kind ({hw})" in msg and why in msg
    assert "\n" not in msg


def test_moe_runs_on_gpu_and_dense_runs_on_the_refusing_kinds():
    assert simulate(_w(), load_machine("a100_80g"), detail=False).tpot_s > 0
    for hw in KINDS:
        assert simulate(_w("tinyllama-1.1b"), load_machine(hw), detail=False).tpot_s > 0


def test_moe_refusal_exits_2(capsys, tmp_path):
    path = tmp_path / "moe.yaml"
    path.write_text(TINY_WORKLOAD.replace("model: tinyllama-1.1b", "model: mixtral-8x7b"))
    line = refused(capsys, ["run", str(path), "--hw", "hbm_pim", "-q"], tmp_path)
    assert f"{path}: model: mixtral-8x7b" in line and "pim kind" in line

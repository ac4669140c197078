"""Mixture of Experts: configs, the routing model, and a Mixtral decode step by hand."""

import json

import numpy as np
import pytest

from hw_models.machine import load_machine
from hw_models.registry import mapper_for
from sim.core.errors import ConfigError
from sim.core.footprint import weight_bytes
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import load_model
from sim.core.moe import ExpertLoad, route
from sim.core.workload import Workload


@pytest.mark.parametrize("name,total,active,tol", [
    # Model cards: Mixtral 46.7B / 12.9B; Qwen3-30B-A3B 30.5B / 3.3B (q/k norms not modelled).
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.005),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02),
])
def test_moe_parameter_counts(name, total, active, tol):
    m = load_model(name)
    assert m.params() == pytest.approx(total, rel=tol)
    assert m.params(active=True) == pytest.approx(active, rel=tol)
    # Every expert is resident: fp16 weights are 2 bytes per parameter.
    assert weight_bytes(m, FormatPolicy()) == 2 * m.params()


def test_deepseek_v2_lite_mla_approximation():
    m = load_model("deepseek-v2-lite")
    # Model card: 15.7B total; MQA in place of MLA adds 27 x 6.3M projection weights (models.yaml): +1.1%.
    assert m.params() == pytest.approx(15.7e9 + 27 * (20.1e6 - 13.8e6), rel=0.005)
    # Card: 2.4B activated. It does not say which tables it counts; the LM head's GEMM runs per
    # token, the embedding is a lookup. Without the embedding and our MQA surplus: 2.45B.
    assert m.params(active=True) - 102400 * 2048 - 27 * 6.3e6 == pytest.approx(2.4e9, rel=0.03)
    # The KV cache is exact: 576 elements (512 latent + 64 RoPE key) per token and layer.
    assert m.kv_bytes_per_token(2) == 27 * 576 * 2
    # Layer 0 is dense (first_k_dense_replace 1); the others have 2 shared experts of 1408.
    graph = lower(m, "decode", 1, 1, 1, num_layers=2)
    names = {op.name for op in graph.ops()}
    assert "L0.gate_proj" in names and "L0.router" not in names
    assert {"L1.router", "L1.expert_gate", "L1.shared_gate_proj"} <= names
    assert graph.op("L1.shared_gate_proj").dims["n"] == 2 * 1408


def test_hf_config_keys(tmp_path):
    cfg = {"model_type": "deepseek_v2", "hidden_size": 64, "intermediate_size": 256, "moe_intermediate_size": 32,
           "num_hidden_layers": 3, "num_attention_heads": 4, "vocab_size": 100, "n_routed_experts": 8,
           "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_model(path)
    assert (m.num_experts, m.experts_per_token, m.expert_intermediate, m.shared_intermediate,
            m.first_dense_layers) == (8, 2, 32, 32, 1)
    mixtral = load_model({**cfg, "model_type": "mixtral", "n_routed_experts": None, "num_local_experts": 4,
                          "moe_intermediate_size": None, "n_shared_experts": None, "first_k_dense_replace": 0})
    assert mixtral.expert_intermediate == 256 and mixtral.num_experts == 4 and mixtral.first_dense_layers == 0
    # A config class with an expert width of its own (DeepSeek's, Qwen-MoE's) that leaves it out is refused: its
    # class default is the reference model's width, and the dense width in its place made Qwen3-235B a 1.8T model.
    for model_type in ("deepseek_v2", "qwen3_moe"):
        with pytest.raises(ConfigError, match="model: missing moe_intermediate_size"):
            load_model({**cfg, "model_type": model_type, "moe_intermediate_size": None})
    with pytest.raises(ConfigError, match="num_experts_per_tok.*between 1 and the 8"):
        load_model({**cfg, "num_experts_per_tok": 9})
    assert "num_experts" not in load_model("llama2-7b").to_dict()   # dense configs are unchanged


@pytest.mark.parametrize("batch", [1, 2, 3, 8, 32])
def test_uniform_experts_touched(batch):
    r = route(8, 2, ExpertLoad(), batch)
    assert r.experts_touched == pytest.approx(8 * (1 - (1 - 2 / 8) ** batch))
    assert r.assignments == pytest.approx(2 * batch) and r.dropped == 0


def test_zipf_capacity_drops_by_hand():
    # E=4, k=1, skew 1: shares 1, 1/2, 1/3, 1/4 over 25/12 = .48 .24 .16 .12; 100 tokens load 48 24 16 12.
    # Capacity 1.0 x 100 x 1 / 4 = 25 per expert: the first keeps 25, 23 assignments are dropped.
    r = route(4, 1, ExpertLoad("zipf", 1.0, (), 1.0), 100)
    assert np.allclose(r.tokens, [25, 24, 16, 12]) and r.dropped == pytest.approx(23)
    hist = route(4, 1, ExpertLoad("histogram", 1.0, (3, 1, 0, 0)), 4)
    assert np.allclose(hist.tokens, [3, 1, 0, 0]) and hist.experts_touched == pytest.approx((1 - 0.25 ** 4) + (1 - 0.75 ** 4))


def test_workload_moe_section_and_errors():
    w = Workload(model="mixtral-8x7b", moe={"distribution": "zipf", "skew": 1.2, "capacity_factor": 1.25})
    assert w.model_config_().expert_load == ExpertLoad("zipf", 1.2, (), 1.25)
    with pytest.raises(ConfigError, match="moe.histogram: needs 8"):
        Workload(model="mixtral-8x7b", moe={"distribution": "histogram", "histogram": [1, 2]}).model_config_()
    with pytest.raises(ConfigError, match="moe: llama2-7b has no experts"):
        Workload(model="llama2-7b", moe={}).model_config_()


def test_mixtral_decode_step_by_hand():
    """One decode token (batch 1) at kv_len K, fp16, non-fused attention: the step
    reads the weights of its 2 routed experts only (2 x 3 x 4096 x 14336 per layer)."""
    m, K = load_model("mixtral-8x7b"), 1000
    h, f, q, kv, V, L = 4096, 14336, 4096, 1024, 32000, 32
    graph = lower(m, "decode", 1, 1, K)
    per_layer_w = 2 * h + 2 * h * q + 2 * h * kv + 8 * h + 2 * 3 * h * f   # norms, q+o, k+v, router, 2 experts
    assert graph.bytes_by_role()["weight"] == 2 * (h + L * per_layer_w + h + V * h)
    per_layer_flops = (2 * 4 * h + 2 * h * q + 2 * 2 * h * kv + 2 * q * h + 6 * (q + kv)   # norms, projections, rope
                       + 2 * 32 * K * 128 * 2 + 5 * 32 * K + h                          # qk, av, softmax, residual
                       + 2 * h * 8 + (5 + 2) * 8                                       # router, top-k
                       + 2 * 3 * 2 * h * f + 5 * 2 * f + 2 * 2 * h + h)                 # experts, act, combine, residual
    assert graph.flops == pytest.approx(L * per_layer_flops + 4 * h + 2 * h * V, rel=1e-12)


def _decode_s(batch: int) -> float:
    w = Workload(model="mixtral-8x7b", batch=batch, prompt_len=128, gen_len=2)
    mapper = mapper_for(load_machine("h200"), w, w.model_config_())
    return mapper.step("decode", 1, 129).time_s


def test_mixtral_decode_time_steps_with_experts_touched():
    """Decode time grows with the experts' bytes read: E(1-(1-k/E)^B) experts, 2 at
    batch 1, 7.2 at 8, then flat (7.9992 at 32, all 8 by 64). A memory-bound op takes
    overhead + (bytes + ramp) / (bandwidth x memory_max) (the ramp makes the curve
    linear), so t(B) - t(1) = (experts(B) - 2) x one expert's bytes / (bandwidth x
    memory_max), plus the KV cache the extra sequences read (K and V, 129 positions, 32
    layers); the activations that grow with B are left out (under 2%)."""
    h200 = load_machine("h200")
    rate = h200.memory["hbm"].bandwidth_bytes_per_s * h200.units[h200.main_unit].efficiency.memory_max
    expert_bytes = 3 * 4096 * 14336 * 2 * 32           # one expert, all 32 layers, fp16
    times = {b: _decode_s(b) for b in (1, 2, 8, 32, 64)}
    for b in (2, 8, 32, 64):
        extra = 8 * (1 - 0.75 ** b) - 2
        kv = 2 * 32 * (b - 1) * 129 * 1024 * 2
        assert times[b] - times[1] == pytest.approx((extra * expert_bytes + kv) / rate, rel=0.03)
    assert times[8] / times[1] > 2 and times[64] / times[32] < 1.02


def test_capacity_counts_every_choice_of_top_k():
    """Capacity C T k / E counts all k choices of each token (GShard). E = 4, k = 2, Zipf skew 1: shares
    .48 .24 .16 .12, picked with q = min(1, 2 p) = .96 .48 .32 .24; 100 tokens want 96 48 32 24 (200 = k T).
    Capacity 1.0 x 100 x 2 / 4 = 50 per expert: the first keeps 50, 46 assignments are dropped."""
    r = route(4, 2, ExpertLoad("zipf", 1.0, (), 1.0), 100)
    assert np.allclose(r.tokens, [50, 48, 32, 24]) and r.dropped == pytest.approx(46)
    # At C = 2 every expert's cap (100) is above its load: nothing is dropped.
    assert route(4, 2, ExpertLoad("zipf", 1.0, (), 2.0), 100).dropped == 0

"""The serving KV pool under a parallel plan (sim/apps/serve/placement.py): one device's
share of the weights, of the KV layout and of the profiled activations, checked by hand."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from sim.apps.serve.instance import RUNTIME_RESERVED_BYTES, prepare
from sim.apps.serve.spec import ServeFile
from sim.core.errors import ConfigError
from sim.core.schema import validate_mapping

GIB = 2**30


def _file(model: str, parallel: dict | None, **serving_extra) -> ServeFile:
    serving = dict(arrivals=dict(process="poisson", rate=1, num_requests=4, seed=1),
                   lengths=dict(prompt=dict(dist="uniform", low=32, high=512),
                                output=dict(dist="uniform", low=8, high=64)),
                   scheduler=dict(kind="vllm", max_num_batched_tokens=2048, max_num_seqs=8), **serving_extra)
    raw = dict(name="t", model=model, flash_attention=True, serving=serving)
    if parallel:
        raw["parallel"] = parallel
    return validate_mapping(ServeFile, raw, "t.yaml", "a serving file")


def test_tp2_llama2_13b_on_two_a6000_by_hand():
    """Llama-2-13B (40 layers, hidden 5120, MLP 13824, vocab 32000, 40 KV heads): 13,015,864,320
    parameters = 26.03 GB fp16, 819,200 B of KV per token (2 x 40 x 5120 x 2 B). TP2 on 48 GiB
    A6000s at gpu_memory_utilization 0.9: each device holds half the weights, half of each
    token's KV (20 of 40 heads) and half the profiled activations (2048 tokens x 3 live MLP
    tensors of 13824 / 2 x 2 B). Pool = (0.9 x 48 GiB - 13.02 GB - 84.9 MB - 1.528 GB) /
    (16 x 409,600 B) = 4845 blocks, against 1423 on one A6000 (3.4x: the weights' half freed)."""
    h, inter, vocab, L = 5120, 13824, 32000, 40
    params = 2 * vocab * h + L * (4 * h * h + 3 * h * inter + 2 * h) + h
    assert params == 13_015_864_320
    one = prepare(_file("llama2-13b", None), load_machine("a6000"), exact=True)
    two = prepare(_file("llama2-13b", {"tp": 2, "topology": "a6000_x8_pcie"}), load_machine("a6000"), exact=True)
    act_one, act_two = 2048 * 3 * inter * 2, 2048 * 3 * (inter // 2) * 2
    assert (one.weights_bytes, two.weights_bytes) == (2 * params, params)
    assert (one.activation_bytes, two.activation_bytes) == (act_one, act_two)
    assert (one.block_bytes, two.block_bytes) == (16 * 819_200, 16 * 409_600)
    assert two.kv_bytes_per_token == 819_200            # the whole instance's, what a transfer moves
    room = 0.9 * 48 * GIB - RUNTIME_RESERVED_BYTES
    assert one.total_blocks == int((room - 2 * params - act_one) // (16 * 819_200)) == 1423
    assert two.total_blocks == int((room - params - act_two) // (16 * 409_600)) == 4845


def test_kv_heads_replicated_past_tp():
    """TinyLlama has 4 KV heads: at tp 8 each rank keeps one whole KV head (two ranks per
    head), so a device's block is 1/4 of the token's KV, not 1/8; its K/V projections
    replicate the same way (weights per device = (W - KV proj) / 8 + KV proj / 4)."""
    f = _file("tinyllama-1.1b", {"tp": 8, "topology": "a6000_x8_pcie"})
    s = prepare(f, load_machine("a6000"), exact=True)
    m = s.model
    assert s.block_bytes == pytest.approx(16 * s.kv_bytes_per_token / 4)
    kv_proj = 2 * 2 * m.hidden_size * m.kv_dim * m.num_layers
    whole = 2 * m.params()
    assert s.weights_bytes == pytest.approx((whole - kv_proj) / 8 + kv_proj / 4)


def test_ep_over_tp_serving_refusals_in_one_line():
    """Data-parallel attention serves (sim.apps.serve.attention_dp) but not with pipeline stages."""
    f = _file("mixtral-8x7b", {"ep": 4, "pp": 2, "topology": "hgx_h200"})
    with pytest.raises(ConfigError) as e:
        prepare(f, load_machine("h200"), exact=True)
    msg = str(e.value)
    assert msg.startswith("t.yaml: parallel.pp: 2 with ep 4 > tp 1") and "\n" not in msg


def test_a_draft_under_tp_is_sharded_as_its_step_is():
    """A new user's trial: at TP2 the draft's weights and KV counted whole on each device while its step was
    priced sharded with all-reduces. The draft now takes its own plan's share, as its step does: TinyLlama
    (1,100,048,384 parameters, 2.200 GB fp16; 4 KV heads x 64 x 22 layers x 2 x 2 B = 22,528 B of KV a token)
    at TP2 adds half of each per device."""
    from sim.core.footprint import kv_bytes, weight_bytes
    from sim.core.model import load_model

    tiny = load_model("tinyllama-1.1b")
    assert weight_bytes(tiny, _file("llama2-7b", None).formats.policy()) == pytest.approx(2 * 1_100_048_384, rel=1e-3)
    assert kv_bytes(tiny, _file("llama2-7b", None).formats.policy(), 1, 1) == 22_528
    tp2 = {"tp": 2, "topology": "dgx_h100"}
    plain = prepare(_file("llama2-7b", tp2), load_machine("h100_sxm"), exact=True)
    spec = prepare(_file("llama2-7b", tp2, speculative={"draft": "tinyllama-1.1b", "k": 4}), load_machine("h100_sxm"),
                   exact=True)
    assert spec.weights_bytes - plain.weights_bytes == pytest.approx(2 * 1_100_048_384 / 2, rel=1e-3)
    # the pool's block is the device's share of both models' KV: (4,096 x 2 x 32 x 2 B) / 2 + 22,528 / 2 a token
    assert spec.block_bytes == 16 * (524_288 / 2 + 22_528 / 2)


def test_a_dense_draft_of_a_moe_target_takes_the_tp_share_without_expert_ways():
    """A user's trial: a MoE target at tp 2 / ep 2 refused a dense draft ("parallel.ep: 2, but qwen3-8b is a dense
    model"). The draft is sharded by the tensor parallelism only: it adds half its 16-bit weights per device (Qwen3-8B:
    36 layers, hidden 4096, MLP 12288, 32 heads of 128, 8 KV heads, vocab 151936, untied: 8,190,735,360 parameters)."""
    from sim.core.model import load_model

    assert load_model("qwen3-8b").params() == 8_190_735_360
    par = {"tp": 2, "ep": 2, "topology": "dgx_h100"}
    plain = prepare(_file("qwen3-30b-a3b", par), load_machine("h100_sxm"), exact=True)
    spec = prepare(_file("qwen3-30b-a3b", par, speculative={"draft": "qwen3-8b", "k": 2}), load_machine("h100_sxm"),
                   exact=True)
    assert spec.weights_bytes - plain.weights_bytes == pytest.approx(2 * 8_190_735_360 / 2, rel=1e-3)

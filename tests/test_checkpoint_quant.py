"""A quantized checkpoint's config.json: what its quantization_config names, and the warning when a run costs its
weights in 16 bits (sim.core.checkpoint_quant, sim.apps.checks.checkpoint_formats)."""

import json

import pytest

from sim.core.checkpoint_quant import checkpoint_quant

# The quantization_config blocks of published checkpoints (their config.json files on the Hugging Face hub).
QWEN3_FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
GPT_OSS = {"modules_to_not_convert": ["model.layers.*.self_attn"], "quant_method": "mxfp4"}
COMPRESSED_FP8 = {"quant_method": "compressed-tensors",
                  "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}}


@pytest.mark.parametrize("qc, weights", [
    (QWEN3_FP8, "fp8_block128"),
    ({"quant_method": "fp8"}, "fp8_e4m3"),
    ({"quant_method": "fp8", "weight_block_size": [64, 64]}, None),   # no 64x64 block format: named, none offered
    (GPT_OSS, "mxfp4"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8_e4m3"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4"),
    ({"quant_method": "gptq", "bits": 8}, "int8"),
    (COMPRESSED_FP8, "fp8_e4m3"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}},
     "int4"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, None),
])
def test_each_method_names_its_format(qc, weights):
    quant = checkpoint_quant({"quantization_config": qc})
    assert quant is not None and quant.weights == weights
    assert f"quant_method {qc['quant_method']!r}" in quant.described


def test_no_quantization_config_is_none():
    assert checkpoint_quant({"hidden_size": 4096}) is None
    assert checkpoint_quant({"quantization_config": "fp8"}) is None   # not a mapping: nothing transformers reads


def _config(tmp_path, qc):
    cfg = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
           "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1000, "max_position_embeddings": 2048,
           "tie_word_embeddings": False}
    if qc is not None:
        cfg["quantization_config"] = qc
    (tmp_path / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("formats, warns", [("", True), ("formats: {weights: fp8_block128}\n", False),
                                            ("formats: {weights: bf16}\n", False)])
def test_a_quantized_checkpoint_at_16_bit_weights_warns(tmp_path, capsys, formats, warns):
    from sim.apps.cli import main
    _config(tmp_path, QWEN3_FP8)
    path = tmp_path / "w.yaml"
    path.write_text(f"model: config.json\nbatch: 1\nprompt_len: 16\ngen_len: 2\n{formats}")
    capsys.readouterr()
    assert main(["run", str(path), "--hw", "h100_sxm", "-q"]) == 0
    err = capsys.readouterr().err.strip()
    expected = (f"warning: {path}: model: llama's config.json is quantized (quant_method 'fp8', weight_block_size "
                "[128, 128]); its weights cost as fp16 here: formats.weights: fp8_block128 costs the checkpoint's")
    assert err == (expected if warns else "")


def test_an_unquantized_config_json_is_silent_and_to_dict_leaves_it_out(tmp_path, capsys):
    from sim.apps.cli import main
    from sim.core.model import load_model
    _config(tmp_path, None)
    path = tmp_path / "w.yaml"
    path.write_text("model: config.json\nbatch: 1\nprompt_len: 16\ngen_len: 2\n")
    capsys.readouterr()
    assert main(["run", str(path), "--hw", "h100_sxm", "-q"]) == 0
    assert capsys.readouterr().err.strip() == ""
    _config(tmp_path, GPT_OSS)
    assert "checkpoint_quant" not in load_model(str(tmp_path / "config.json")).to_dict()


def test_an_experts_only_checkpoint_names_the_overrides_that_cost_it(tmp_path, capsys):
    """gpt-oss keeps its attention, router and head in bf16 (modules_to_not_convert): formats.weights: mxfp4 alone
    would cost every weight in MXFP4 (a model-import trial: 19% fewer bytes than the checkpoint). The warning names
    the overrides instead, and the formats it names are a valid workload section that silences it."""
    import yaml

    from sim.apps.cli import main
    quant = checkpoint_quant({"quantization_config": GPT_OSS})
    assert quant.experts_only
    fix = quant.fix(moe=True)
    assert fix.startswith("formats: {weights: bf16, overrides: {expert_gate: mxfp4, expert_up: mxfp4, "
                          "expert_down: mxfp4}} costs the checkpoint's")
    assert quant.fix(moe=False) == "formats.weights: mxfp4 costs the checkpoint's"   # no experts to single out
    assert not checkpoint_quant({"quantization_config": QWEN3_FP8}).experts_only
    cfg = {"model_type": "mixtral", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 2048,
           "num_local_experts": 4, "num_experts_per_tok": 2, "quantization_config": GPT_OSS}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    formats = yaml.safe_load(fix.split(" costs ")[0])
    for extra, warns in (({}, True), (formats, False)):
        path = tmp_path / "w.yaml"
        path.write_text(yaml.safe_dump({"model": "config.json", "batch": 1, "prompt_len": 16, "gen_len": 2, **extra}))
        capsys.readouterr()
        assert main(["run", str(path), "--hw", "h100_sxm", "-q"]) == 0
        assert ("overrides: {expert_gate: mxfp4" in capsys.readouterr().err) == warns

"""`formats.overrides` that name some layers only ("L0.*": the first layer in bf16, as
mixed-precision deployments keep the first and last layers wide). Found by a new-user trial:
an L0.* override was applied to every layer's footprint (llama3-8b int4: 4.46 GB read as
14.50 GB), the layer fold costed every layer as the ones it simulated (an L31.* override was
ignored: TPOT 4.430 ms folded, 4.544 ms --exhaustive), pipeline stages took layer 1's formats
for all their layers, and the check warned that L31.* "matches no op".

Hand-derived bytes, TinyLlama-1.1B (hidden 2048, 32 heads, 4 KV heads of 128, MLP 5632, 22
layers): one layer's matrices are q, o 2048 x 2048, k, v 256 x 2048 and gate, up, down
2048 x 5632: 2 * 4,194,304 + 2 * 524,288 + 3 * 11,534,336 = 44,040,192 elements. int4 keeps
one 16-bit scale per group of 128 (sim.core.formats): 4 + 16/128 = 4.125 bits, 0.515625 bytes
an element; bf16 2 bytes. A layer in bf16 instead of int4 adds 44,040,192 * 1.484375 =
65,372,160 bytes (the norms are 1-D and stay in the activation format either way).
"""

import pandas as pd
import yaml
import pytest

from hw_models.gpu.expert_parallel import expert_weight_bytes
from hw_models.registry import mapper_for
from hw_models.machine import load_machine
from sim.apps.cli import main
from sim.apps.report import _paths
from sim.apps.roofline_rows import _spans, roofline_rows
from sim.apps.serve.spec import load_serve_file
from sim.core.footprint import weight_bytes
from sim.core.lowering import FormatPolicy, formats_repeat_from, per_layer_overrides, repeating_from
from sim.core.model import load_model
from sim.core.workload import Workload, load_workload
from tests.conftest import ROOT

TINY = "tinyllama-1.1b"
LAYER_ELEMENTS = 2 * 2048 * 2048 + 2 * 256 * 2048 + 3 * 2048 * 5632
BF16_OVER_INT4 = LAYER_ELEMENTS * (2 - 0.515625)


def _int4(*overrides: tuple[str, str]) -> FormatPolicy:
    return FormatPolicy("int4", "bf16", "bf16", overrides)


def test_hand_counted_layer_elements():
    assert LAYER_ELEMENTS == 44_040_192 and BF16_OVER_INT4 == 65_372_160


@pytest.mark.parametrize("overrides, layers", [
    ((("L0.*", "bf16"),), 1),
    ((("L0.*", "bf16"), ("L21.*", "bf16")), 2),
    ((("L3.q_proj", "bf16"),), 1),
    ((("L[0-2].*", "bf16"),), 3),
])
def test_each_overridden_layer_is_counted_once(overrides, layers):
    m = load_model(TINY)
    assert weight_bytes(m, _int4(*overrides)) - weight_bytes(m, _int4()) == pytest.approx(
        layers * BF16_OVER_INT4 if "q_proj" not in overrides[0][0] else 2048 * 2048 * (2 - 0.515625))


@pytest.mark.parametrize("overrides, first", [
    ((), 0),
    ((("q_proj", "bf16"),), 0),          # every layer's q_proj: the layers still repeat
    ((("L0.*", "int4"),), 0),            # the format the weights have anyway
    ((("L0.*", "bf16"),), 1),
    ((("L[0-2].*", "bf16"),), 3),
    ((("L21.*", "bf16"),), 21),          # the last of 22: no layer before it stands for it
    ((("L10.*", "bf16"),), 11),
])
def test_where_the_layers_start_to_repeat(overrides, first):
    m = load_model(TINY)
    assert formats_repeat_from(m, _int4(*overrides)) == first == repeating_from(m, _int4(*overrides))
    assert per_layer_overrides(m, _int4(*overrides)) == ([] if first == 0 else [overrides[0][0]])


def test_alternating_layers_repeat_by_pairs():
    """Gemma-2 alternates local and global attention (period 2): an override on every other
    layer is a repeating pattern, one on layer 0 alone is not."""
    m = load_model("gemma-2-9b")
    assert m.layer_period == 2
    assert formats_repeat_from(m, _int4(("L*[02468].*", "bf16"))) == 0
    assert formats_repeat_from(m, _int4(("L0.*", "bf16"))) == 1


def _workload(overrides: dict[str, str], **kw) -> Workload:
    return Workload(model=TINY, batch=4, prompt_len=128, gen_len=4,
                    formats={"weights": "int4", "activations": "bf16", "kv_cache": "bf16", "overrides": overrides},
                    **kw)


@pytest.mark.parametrize("overrides", [{"L0.*": "bf16"}, {"L21.*": "bf16"}, {"L10.*": "bf16", "L11.*": "bf16"}])
def test_the_layer_fold_is_exact_with_per_layer_formats(overrides):
    w = _workload(overrides)
    mp = mapper_for(load_machine("h100_sxm"), w, w.model_config_())
    folded, exact = mp.step("decode", 1, 200), mp.step("decode", 1, 200, exhaustive=True)
    assert folded.time_s == pytest.approx(exact.time_s, rel=1e-9)
    assert folded.energy_j == pytest.approx(exact.energy_j, rel=1e-9)


def test_a_pipeline_stage_costs_its_own_layers():
    """Layers 0-2 in bf16 sit in stage 0 of two (11 layers each): stage 0 holds their extra bytes
    and spends their extra time; with one micro-batch the step is the stages in series, so it
    grows by what the same three layers add on one GPU (plus nothing: the sends do not change)."""
    three = {"L[0-2].*": "bf16"}
    plan = {"tp": 1, "pp": 2, "topology": "dgx_h100"}
    h100 = load_machine("h100_sxm")

    def step_s(overrides, parallel=None) -> float:
        w = _workload(overrides, parallel=parallel)
        return mapper_for(h100, w, w.model_config_()).step("decode", 1, 200).time_s

    def weights_per_device(overrides) -> float:
        w = _workload(overrides, parallel=plan)
        return mapper_for(h100, w, w.model_config_())._weights_per_device()

    assert weights_per_device(three) - weights_per_device({}) == pytest.approx(3 * BF16_OVER_INT4)
    one_gpu = step_s(three) - step_s({})
    assert one_gpu > 0
    assert step_s(three, plan) - step_s({}, plan) == pytest.approx(one_gpu, rel=0.02)


def test_offload_refuses_formats_for_some_layers_only(capsys):
    rc = main(["run", str(ROOT / "workloads/opt30b_flexgen.yaml"), "--hw", "a6000_offload",
               "--set", "formats.overrides.L0.q_proj=int8"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "formats.overrides.L0.q_proj" in err[0] and "offload" in err[0]


def test_set_takes_the_rest_of_the_key_as_one_glob(tmp_path):
    """An op name holds a dot (L0.q_proj): `--set formats.overrides.L0.q_proj=bf16` is one override."""
    w = load_workload(ROOT / "workloads/llama13b_decode.yaml", {"formats.overrides.L0.q_proj": "bf16"})
    assert w.formats.overrides == {"L0.q_proj": "bf16"}


@pytest.mark.parametrize("pattern, warns", [("L21.*", False), ("L3.q_proj", False), ("L22.*", True),
                                            ("lm_head", False), ("no_such_op", True)])
def test_an_override_of_any_layer_is_not_called_unmatched(capsys, pattern, warns):
    path = ROOT / "workloads/llama13b_decode.yaml"
    assert main(["run", str(path), "--hw", "h100_sxm", "--set", f"model={TINY}", "--set", "gen_len=2",
                 "--set", f"formats.overrides.{pattern}=bf16"]) == 0
    assert ("matches no op" in capsys.readouterr().err) == warns


def test_the_path_column_counts_each_path():
    assert _paths(["int4 -> bf16 dequant"] * 3) == "int4 -> bf16 dequant"
    assert _paths(["bf16 native", "int4 -> bf16 dequant", "int4 -> bf16 dequant"]) == \
        "int4 -> bf16 dequant x2, bf16 native x1"


@pytest.mark.parametrize("model, overrides, kv", [
    (TINY, {"L0.*": "bf16", "L21.*": "bf16"}, 200),
    ("gemma-2-9b", {}, 8000),          # local (window 4096) and global layers alternate
])
def test_the_roofline_table_sums_to_the_simulated_step(model, overrides, kv):
    """`sim roofline`'s simulated column over all rows is the stackless decode step `sim run`
    simulates (every op one kernel in series on the GPU): it lowered one layer for all, so it
    costed the L0 override on every layer and Gemma-2's global attention as local (6.474 ms
    against the run's 6.713 ms at 8,000 keys)."""
    w = Workload(model=model, batch=1, prompt_len=kv - 1, gen_len=2,
                 formats={"weights": "int4", "activations": "bf16", "kv_cache": "bf16", "overrides": overrides})
    h100 = load_machine("h100_sxm")
    rows = roofline_rows(w, h100, "decode", 1, kv)
    assert sum(r["count"] for r in rows if r["op"].startswith("q_proj")) == w.model_config_().num_layers
    step = mapper_for(h100, w, w.model_config_()).step("decode", 1, kv, exhaustive=True).time_s
    assert sum(r["simulated_s"] * r["count"] for r in rows) == pytest.approx(step, rel=1e-6)


def test_layer_spans():
    assert _spans([0, 1, 2, 31]) == "L0-2, L31"
    assert _spans([5]) == "L5"
    assert _spans(list(range(1, 42, 2))) == "L1-41 every 2"


def test_a_sweep_axis_sets_an_override_of_one_layer(tmp_path):
    """A sweep's axis is a dotted key like --set's: `workload.formats.overrides.L0.*` is one glob
    (it failed with 'formats.overrides: no such field'). L0 in bf16 adds its bytes to the step."""
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"name: ov\nworkload: {ROOT / 'workloads/llama13b_decode.yaml'}\nhw: h100_sxm\naxes:\n"
                    f"  workload.model: [{TINY}]\n  workload.gen_len: [2]\n  workload.formats.weights: [int4]\n"
                    "  workload.formats.overrides.L0.*: [bf16, int4]\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    rows = pd.read_csv(tmp_path / "out" / "results.csv").set_index("workload.formats.overrides.L0.*")
    assert rows.loc["bf16", "tpot_s"] > rows.loc["int4", "tpot_s"]


def test_expert_bytes_take_each_layers_format():
    """Mixtral-8x7B (32 MoE layers, 8 experts of 14336 x 4096 per matrix): the experts of layer 0 in
    bf16, the rest int4: 3 * 8 * 14336 * 4096 elements a layer at 2 bytes, and at 0.515625 bytes."""
    per_layer = 3 * 8 * 14336 * 4096
    m = load_model("mixtral-8x7b")
    assert expert_weight_bytes(m, _int4()) == pytest.approx(32 * per_layer * 0.515625)
    assert expert_weight_bytes(m, _int4(("L0.expert_*", "bf16"))) == pytest.approx(
        per_layer * 2 + 31 * per_layer * 0.515625)


def test_serve_set_takes_an_override_glob():
    """`sim serve --set formats.overrides.L0.*=bf16` failed ('formats.overrides.L0: Input should be a valid string')."""
    f = load_serve_file(ROOT / "workloads/serve_llama3_8b_sharegpt.yaml", {"formats.overrides.L0.*": "bf16"})
    assert f.formats.overrides == {"L0.*": "bf16"}


def test_the_fold_starts_past_an_moe_models_dense_layers():
    """DeepSeek-V3 keeps its first 3 layers dense (first_k_dense_replace): folding from layer 2 took a
    dense layer's cost for every MoE layer. DeepSeek-V2-Lite's config with 3 dense layers: folded = exhaustive."""
    raw = {k: v for k, v in yaml.safe_load((ROOT / "sim/core/data/models.yaml").read_text())["deepseek-v2-lite"].items()
           if k != "source"} | {"first_k_dense_replace": 3, "name": "three-dense"}
    w = Workload(model=raw, batch=4, prompt_len=256, gen_len=2,
                 formats={"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"})
    mp = mapper_for(load_machine("h100_sxm"), w, w.model_config_())
    assert mp.fold_from == 4
    assert mp.step("decode", 1, 300).time_s == pytest.approx(mp.step("decode", 1, 300, exhaustive=True).time_s, rel=1e-9)

"""Issue 17, items 8-10: model configs, workload fields, YAML, hardware sections,
relative model paths, and the ordinary mistakes that used to end in a traceback."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import sim.apps.cli as cli
from sim.apps.cli import main
from sim.core.workload import load_workload
from tests.conftest import ROOT
from tests.robust_helpers import TINY_WORKLOAD, refused

DATA = ROOT / "tests/data"
CONFIG = dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
              vocab_size=256, max_position_embeddings=512)


@pytest.fixture
def tiny(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY_WORKLOAD)
    return p


# ---------------------------------------------------------------- item 8: config.json and workload fields

@pytest.mark.parametrize("change, message", [
    (dict(hidden_size=100, num_attention_heads=3), "model.hidden_size: 100 is not divisible by 3 attention heads; give head_dim explicitly"),
    (dict(hidden_size=4, num_attention_heads=8), "model.hidden_size: 4 is not divisible by 8 attention heads; give head_dim explicitly"),
    (dict(head_dim=0), "model.head_dim: must be a positive integer, got 0"),
    (dict(tie_word_embeddings="no"), "model.tie_word_embeddings: must be true or false, got 'no'"),
    # a string switch is truthy: "false" had added q/k/v/o biases, or refused a window that is off
    (dict(attention_bias="false"), "model.attention_bias: must be true or false, got 'false'"),
    (dict(model_type="qwen2", num_key_value_heads=2, use_sliding_window="false", sliding_window=256),
     "use_sliding_window: must be true or false, got 'false'"),
    (dict(num_hidden_layers=10**12), "model.num_hidden_layers: 1000000000000 layers: more than 100000 is no model"),
])
def test_bad_config_json(tmp_path, capsys, change, message):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**CONFIG, **change}))
    assert refused(capsys, ["model", "show", str(cfg)], tmp_path) == f"error: {cfg}: {message}"


def test_head_dim_given_explicitly_may_differ_from_hidden_over_heads(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**CONFIG, "hidden_size": 100, "num_attention_heads": 3, "head_dim": 32}))
    assert main(["model", "show", str(cfg), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["head_dim"] == 32


@pytest.mark.parametrize("line, message", [
    ("batch: true", "batch: Input should be a valid integer"),
    ("batch: '4'", "batch: Input should be a valid integer"),
    ("batch: 2.0", "batch: Input should be a valid integer"),
    ("flash_attention: 'yes'", "flash_attention: Input should be a valid boolean"),
    ("batch: 2\nbatch: 4", "malformed YAML at line 5, column 1: duplicate key 'batch'"),
    # past the longest published context: a run keeps arrays of one entry per decode step (a 10^8 typo ran out of memory)
    ("gen_len: 100000000", "gen_len: Input should be less than or equal to 10000000"),
])
def test_workload_fields_are_strict(tmp_path, capsys, line, message):
    wl = tmp_path / "w.yaml"
    wl.write_text(TINY_WORKLOAD.replace("batch: 1\n", "").replace("gen_len: 2\n", "" if "gen_len" in line else "gen_len: 2\n")
                  + line + "\n")
    assert refused(capsys, ["run", str(wl), "--hw", "a6000", "-q"], tmp_path) == f"error: {wl}: {message}"


def test_format_aliases_resolve_to_one_name(tiny):
    assert load_workload(tiny, {"formats.weights": "half"}).formats.weights == "fp16"


@pytest.mark.parametrize("section", ["pim: {stacks: 1}", "spatial: {chips: 2}", "host: {cpu: x}"])
def test_a_kind_section_on_another_kind_is_refused(tiny, tmp_path, capsys, section):
    hw = tmp_path / "hw.yaml"
    hw.write_text((ROOT / "hw_models/presets/a6000.yaml").read_text() + section + "\n")
    name = section.split(":")[0]
    assert refused(capsys, ["run", str(tiny), "--hw", str(hw), "-q"], tmp_path) == (
        f"error: {hw}: {name}: a `{name}:` section belongs to kind {dict(host='offload').get(name, name)}, "
        "not this preset's kind 'gpu'")


def test_settings_a_gpu_preset_ignores_are_warned(tiny, capsys):
    assert main(["run", str(tiny), "--hw", "a6000", "-q", "--set", "policy=search",
                 "--set", "formats.overrides.lmhead=bf16"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"warning: {tiny}: policy: only offload presets read it; a6000 is kind 'gpu', "
                      "so it is ignored")
    assert err[1].startswith(f"warning: {tiny}: formats.overrides.lmhead: matches no op; the ops it can set in tinyllama-1.1b: ")
    assert len(err) == 2


# ---------------------------------------------------------------- item 9: relative model paths

def test_relative_model_path_prefers_the_workloads_folder(tmp_path, monkeypatch):
    (tmp_path / "wl").mkdir()
    (tmp_path / "wl" / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "config.json").write_text(json.dumps({**CONFIG, "hidden_size": 128}))
    (tmp_path / "wl" / "w.yaml").write_text("model: config.json\n")
    monkeypatch.chdir(tmp_path)   # ./config.json exists too, and is another model
    assert load_workload("wl/w.yaml").model_config_().hidden_size == 64


# ---------------------------------------------------------------- item 10: no tracebacks

@pytest.mark.parametrize("argv, name, says", [
    (["run", "{f}", "--hw", "a6000"], "bin.yaml", "not a YAML file: binary data"),
    (["run", "{tiny}", "--hw", "{f}"], "bin.yaml", "not a YAML file: binary data"),
    (["model", "show", "{f}"], "bin.json", "not valid JSON"),
    (["validate", "{f}", "--hw", "cpu_host"], "bin.ops.csv", "not a trace: binary data"),
    (["validate", "{f}", "--hw", "cpu_host"], "mlp.csv", "not a trace: binary data"),
    (["validate", "{f}", "--hw", "cpu_host"], "bin.json", "not a torch Chrome trace"),
])
def test_binary_files_get_one_line(tiny, tmp_path, capsys, argv, name, says):
    f = tmp_path / name
    f.write_bytes(bytes(range(255, -1, -1)) * 8)
    line = refused(capsys, [a.format(f=f, tiny=tiny) for a in argv], tmp_path)
    assert line.startswith(f"error: {f}: {says}")


def test_names_with_markup_print_literally(tiny, capsys):
    assert main(["run", str(tiny), "--hw", "a6000", "--set", "name=[/b]x[red]"]) == 0
    assert "[/b]x[red]" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["validate", "replay"])
@pytest.mark.parametrize("hw", ["flexgen_t4", "groq_lpu"])
def test_replay_and_validate_name_the_kinds_they_support(tmp_path, capsys, command, hw):
    line = refused(capsys, [command, str(DATA / "trace_tinyllama_L1.ops.csv"), "--hw", hw], tmp_path)
    assert line.startswith(f"error: --hw {hw}: kind ") and f"sim {command} supports gpu, cpu, pim presets" in line


def _meta() -> dict:
    return json.loads((DATA / "trace_tinyllama_L1.meta.json").read_text())


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.pop("prompt"), "prompt: required key is missing"),
    (lambda m: m.update(batch=0), "batch: Input should be greater than 0"),
    (lambda m: m.update(layers="two"), "layers: Input should be a valid integer"),
    (lambda m: m["steps"][1].update(step=-1), "steps.1.step: Input should be greater than or equal to 0"),
    (lambda m: m["steps"][0].update(wall_us="slow"), "steps.0.wall_us: Input should be a valid number, unable to parse string as a number"),
    (lambda m: m.update(decode_steps=None, steps=[{"phase": "x"}]), "steps.0.step: required key is missing"),
    (lambda m: m.update(flash="no"), "flash: Input should be a valid boolean"),
])
def test_broken_trace_metadata(tmp_path, capsys, edit, message):
    ops = tmp_path / "t.ops.csv"
    shutil.copy(DATA / "trace_tinyllama_L1.ops.csv", ops)
    meta = _meta()
    edit(meta)
    (tmp_path / "t.meta.json").write_text(json.dumps(meta))
    line = refused(capsys, ["validate", str(ops), "--hw", "cpu_host"], tmp_path)
    assert line == f"error: {tmp_path / 't.meta.json'}: {message}"


@pytest.mark.parametrize("value, message", [("nan", "a duration must be finite and not negative, got 'nan'"),
                                            ("-3", "a duration must be finite and not negative, got '-3'"),
                                            ("fast", "expected a duration, got 'fast'"),
                                            ("", "the duration is missing (a truncated file?)")])
def test_bad_measured_times_in_an_ops_table(tmp_path, capsys, value, message):
    ops = tmp_path / "t.ops.csv"
    rows = (DATA / "trace_tinyllama_L1.ops.csv").read_text().splitlines()
    header = rows[0].split(",")
    first = rows[1].split(",")
    first[header.index("cpu_time_us")] = value
    ops.write_text("\n".join([rows[0], ",".join(first), *rows[2:]]) + "\n")
    shutil.copy(DATA / "trace_tinyllama_L1.meta.json", tmp_path / "t.meta.json")
    for command in (["validate", str(ops), "--hw", "cpu_host"],
                    ["calibrate", str(ops), "--hw", "cpu_host", "-o", str(tmp_path / "c.yaml")]):
        line = refused(capsys, command, tmp_path)
        assert line.startswith(f"error: {ops}: line 2") and message in line


@pytest.mark.parametrize("event, message", [
    ({"ph": "X", "name": "a", "ts": "abc", "dur": 1}, "ts: expected a duration, got 'abc'"),
    ({"ph": "X", "name": "a", "ts": 1, "dur": float("nan")}, "dur: a duration must be finite and not negative"),
    ({"ph": "X", "name": "a", "ts": 1, "dur": -5}, "dur: a duration must be finite and not negative"),
])
def test_bad_chrome_events(tmp_path, capsys, event, message):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [event]}))
    line = refused(capsys, ["validate", str(trace), "--hw", "cpu_host"], tmp_path)
    assert line.startswith(f"error: {trace}: traceEvents[0] ('a'): ") and message in line


def test_calibrate_name_must_be_one_line(tmp_path, capsys):
    line = refused(capsys, ["calibrate", str(DATA / "trace_tinyllama_L1.ops.csv"), "--hw", "cpu_host",
                            "-o", str(tmp_path / "c.yaml"), "--name", "a\nb"], tmp_path)
    assert line == "error: --name 'a\\nb': must be one printable line"


SAVE_AS = " (float32, float16, bfloat16, integers): save it as one of those"


@pytest.mark.parametrize("make, message", [
    (lambda p: np.save(p, np.array(["a", "b"])), "array of dtype <U1; expected real numbers" + SAVE_AS),
    (lambda p: np.save(p, np.zeros(3, dtype=[("a", "f4"), ("b", "i4")])),
     "array of dtype [('a', '<f4'), ('b', '<i4')]; expected real numbers" + SAVE_AS),
    (lambda p: np.save(p, np.array([1.0, np.nan])), "array holds NaN or infinite values; the error of a format is undefined there"),
    (lambda p: np.savez(p, a=np.zeros(3)), "a .npz archive; expected one .npy array"),
])
def test_formats_array_must_be_finite_real_numbers(tmp_path, capsys, make, message):
    path = tmp_path / "a.npy"
    make(path)
    path = next(tmp_path.iterdir())  # savez appends .npz
    assert refused(capsys, ["formats", "--formats", "int4", "--array", str(path)], tmp_path) == f"error: {path}: {message}"


def test_ctrl_c_during_start_up_is_one_line(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert main(["hw", "list"]) == 130
    assert capsys.readouterr().err == "interrupted\n"


@pytest.mark.parametrize("argv, names", [
    (["run", str(ROOT / "workloads/llama70b_decode.yaml"), "--hw", "a6000", "-q"], ("llama70b_decode.yaml", "a6000.yaml", "short by")),
    (["run", "{tiny}", "--hw", "a6000", "-q", "--set", "compute=native", "--set", "formats.weights=mxfp4"],
     ("tiny.yaml", "a6000.yaml", "compute: native")),
    (["roofline", "{tiny}", "--hw", "a6000", "--set", "compute=native", "--set", "formats.weights=mxfp4"],
     ("tiny.yaml", "a6000.yaml", "compute: native")),
])
def test_simulation_errors_name_the_files(tiny, tmp_path, capsys, argv, names):
    line = refused(capsys, [a.format(tiny=tiny) for a in argv], tmp_path)
    assert all(n in line for n in names)


def test_json_nested_past_the_parser_is_one_line(tmp_path, capsys):
    """A trace workflow trial: `[` x 200,000 gave a RecursionError traceback in validate, calibrate, replay and
    validate-serving; every JSON reader says it is nested too deeply, in one line, exit 2."""
    deep = "[" * 200_000 + "]" * 200_000
    (tmp_path / "d.trace.json").write_text(deep)
    (tmp_path / "d.json").write_text(deep)
    (tmp_path / "t.jsonl").write_text(deep + "\n")
    (tmp_path / "s.yaml").write_text("name: s\nmodel: tinyllama-1.1b\nserving:\n  arrivals: {process: trace}\n"
                                     "  trace: {path: t.jsonl}\n")
    for argv in (["validate", str(tmp_path / "d.trace.json"), "--hw", "cpu_host"],
                 ["validate-serving", str(tmp_path / "d.json"), "--hw", "h100_sxm", "--engine", "vllm",
                  "--model", "mistral-7b"],
                 ["model", "show", str(tmp_path / "d.json")],
                 ["serve", str(tmp_path / "s.yaml"), "--hw", "h100_sxm"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "nested too deeply" in err and "\n" not in err and "Traceback" not in err


def test_a_sidecar_with_more_layers_than_the_model_is_refused(tmp_path, capsys):
    """A trace workflow trial: a .meta.json saying 23 layers of the 22-layer TinyLlama validated 23 simulated layers
    against a 2-layer measurement, and 100,000 layers ran past a minute. The sidecar's layers lie in 1..the model's."""
    src = ROOT / "traces/cpu/llama2-7b_L2_fp32_b1_p128_d16_cpu"
    for layers, message in ((33, "layers 33 in its .meta.json: llama2-7b has 32"), (0, "layers: Input should be greater than 0")):
        meta = json.loads(src.with_name(src.name + ".meta.json").read_text())
        meta["layers"] = layers
        (tmp_path / "t.meta.json").write_text(json.dumps(meta))
        shutil.copy(src.with_name(src.name + ".ops.csv"), tmp_path / "t.ops.csv")
        assert main(["validate", str(tmp_path / "t.ops.csv"), "--hw", "cpu_host"]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err


def test_a_contended_cpu_capture_is_said(tmp_path, capsys):
    """A trace workflow trial: captures taken under load (up to 75x inflated) were validated and fitted without a
    word, though the capture records its load. Above its threads + 0.5 (scripts/validation_report.py's rule, now
    sim.apps.trace.input_checks's), validate says so."""
    src = ROOT / "traces/cpu/llama2-7b_L2_fp32_b1_p128_d16_cpu"
    meta = json.loads(src.with_name(src.name + ".meta.json").read_text())
    shutil.copy(src.with_name(src.name + ".ops.csv"), tmp_path / "t.ops.csv")
    for load, said in ((2.4, False), (2.6, True)):
        meta["loadavg_1m"] = {"before": 1.0, "after": load}
        (tmp_path / "t.meta.json").write_text(json.dumps(meta))
        assert main(["validate", str(tmp_path / "t.ops.csv"), "--hw", "cpu_host", "-q"]) == 0
        assert ("captured at a load of 2.60 on 2 thread(s)" in capsys.readouterr().err) == said


def test_a_truncated_ops_table_is_said(tmp_path, capsys):
    """A trace workflow trial: the first 20 lines of an ops table (19 of step 0's 37 ops, no other step) validated
    against whole steps with exit 0 and no word. Fewer ops than the capture's ops_per_step x steps is said."""
    src = ROOT / "traces/cpu/llama2-7b_L2_fp32_b1_p128_d16_cpu"
    lines = src.with_name(src.name + ".ops.csv").read_text().splitlines(keepends=True)
    (tmp_path / "t.ops.csv").write_text("".join(lines[:20]))
    shutil.copy(src.with_name(src.name + ".meta.json"), tmp_path / "t.meta.json")
    # refused since stop 69 (a hostile-input trial: the warning ran the cut file to exit 0)
    assert main(["validate", str(tmp_path / "t.ops.csv"), "--hw", "cpu_host", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "step(s) 0 partial; 16 step(s) missing: a truncated file" in err and "\n" not in err
    assert main(["validate", str(src.with_name(src.name + ".ops.csv")), "--hw", "cpu_host", "-q"]) == 0
    assert "fewer ops" not in capsys.readouterr().err


def test_an_override_of_an_op_without_a_weight_matrix_is_warned(tiny, capsys):
    """A numerics researcher's trial: formats.overrides.qk=fp8 (and softmax, kv_append, attn_norm) ran the baseline
    without a word, while the typo warning listed those names as valid. An override sets a weight matrix's format:
    matching only ops without one is said; a matrix op (q_proj) is not."""
    assert main(["run", str(tiny), "--hw", "a6000", "-q", "--set", "formats.overrides.qk=fp8",
                 "--set", "formats.overrides.attn_norm=fp8", "--set", "formats.overrides.q_proj=fp8"]) == 0
    err = capsys.readouterr().err
    for op in ("qk", "attn_norm"):
        assert f"formats.overrides.{op}: matches only ops without a weight matrix" in err
    assert "overrides.q_proj" not in err
    assert "the ops it can set in tinyllama-1.1b: down_proj, embed, gate_proj, k_proj, lm_head, o_proj" in err


@pytest.mark.parametrize("edit, message", [
    # a duplicated row had been averaged into its op (and a repeated step label dropped a step's ops), exit 0
    (lambda rows: rows[:3] + [rows[2]] + rows[3:], "L0.attn_norm appears 2 times in step0.prefill: a capture records "
     "each op once a step (a duplicated row, or two steps under one label)"),
    # times in seconds where microseconds belong validated at 21,049,431% and calibrated a preset at its bounds
    (lambda rows: [rows[0]] + [",".join(f if i != 4 else f"{float(f) / 1e6:.9f}" for i, f in enumerate(r.split(",")))
                               for r in rows[1:]],
     "step0.prefill's ops sum to"),
])
def test_a_capture_whose_ops_cannot_be_its_measurement_is_refused(tmp_path, capsys, edit, message):
    """A trace trial: each read exit 0 (validate) and wrote a preset (calibrate)."""
    ops = tmp_path / "t.ops.csv"
    ops.write_text("\n".join(edit((DATA / "trace_tinyllama_L1.ops.csv").read_text().splitlines())) + "\n")
    shutil.copy(DATA / "trace_tinyllama_L1.meta.json", tmp_path / "t.meta.json")
    for command in (["validate", str(ops), "--hw", "cpu_host"],
                    ["calibrate", str(ops), "--hw", "cpu_host", "-o", str(tmp_path / "c.yaml")]):
        assert main(command) == 2
        line = capsys.readouterr().err.strip().splitlines()[-1]   # after the fixture's own contended-capture warning
        assert line.startswith(f"error: {ops}: ") and message in line
        assert not (tmp_path / "c.yaml").exists()


def test_op_labels_sim_does_not_model_are_named(tmp_path, capsys):
    """A trace trial: renamed ops in an ops table were said to be ops the profiler did not record, and in a Chrome
    trace dropped without a word. They are named as left out, and the short steps say why."""
    ops = tmp_path / "t.ops.csv"
    text = (DATA / "trace_tinyllama_L1.ops.csv").read_text()
    ops.write_text(text.replace(",L0.attn_norm,", ",L0.frobnicate,").replace(",lm_head,", ",my_custom_op,"))
    shutil.copy(DATA / "trace_tinyllama_L1.meta.json", tmp_path / "t.meta.json")
    assert main(["validate", str(ops), "--hw", "cpu_host", "-q"]) == 0
    err = capsys.readouterr().err
    assert f"{ops}: 2 op label(s) sim does not model, left out: L0.frobnicate, my_custom_op" in err
    assert "(the op labels sim does not model, said above)" in err and "the profiler did not record" not in err


def test_calibrate_says_which_fitted_figures_ended_at_the_edge_of_the_fit_space():
    """A trace trial: a fit whose figures all sat at their bounds (compute_max 1, overhead 1 ns) was written without
    a word. The kinds and figures are named; a figure the data did not constrain (kept) is not."""
    from types import SimpleNamespace

    from sim.apps.trace.stack_calibrate import at_bounds

    def fit(fixed=frozenset(), **params):
        return SimpleNamespace(params={**dict(compute_max=0.7, memory_max=0.8, overhead_s=2e-6), **params}, fixed=fixed)
    cal = SimpleNamespace(overall=fit(), by_kind={"gemm": fit(overhead_s=1e-9), "norm": fit(compute_max=1.0),
                                                 "embed": fit(frozenset({"memory_max"}), memory_max=1.0)})
    assert at_bounds(cal).endswith("gemm overhead_s, norm compute_max")
    assert at_bounds(SimpleNamespace(overall=fit(), by_kind={})) is None


def test_calibrate_names_the_op_kinds_its_fit_makes_worse():
    """A trace trial: one kind's MAPE went 89.6% -> 256.2% on the capture it was fitted on while the whole improved,
    written without a word. The kinds made worse (by more than 1%) are named; none where the whole got worse (that
    warning says it) or no kind did."""
    from sim.apps.trace.stack_calibrate import HeldOut

    h = HeldOut(100, 0.9, 0.4, "cpu_host", None, (("attn_score", 0.896, 2.562),))
    assert h.kinds_warning() == ("warning: the fit makes these op kinds worse on its own traces: attn_score 89.6% "
                                 "with cpu_host -> 256.2%")
    assert HeldOut(100, 0.4, 0.9, "cpu_host", None, (("qk", 0.1, 0.2),)).kinds_warning() is None
    assert HeldOut(100, 0.9, 0.4, "cpu_host").kinds_warning() is None


@pytest.mark.parametrize("column, value", [("batch", "8"), ("kv_len", "-5"), ("q_len", "abc")])
def test_an_ops_row_whose_shape_its_meta_contradicts_is_refused(tmp_path, capsys, column, value):
    """A trace trial: the batch, q_len and kv_len columns were never read, the .meta.json's shapes used, so batch 8
    or kv_len -5 gave the file's own results without a word. A row that contradicts its step's shape is refused."""
    ops = tmp_path / "t.ops.csv"
    rows = (DATA / "trace_tinyllama_L1.ops.csv").read_text().splitlines()
    header = rows[0].split(",")
    first = rows[1].split(",")
    first[header.index(column)] = value
    ops.write_text("\n".join([rows[0], ",".join(first), *rows[2:]]) + "\n")
    shutil.copy(DATA / "trace_tinyllama_L1.meta.json", tmp_path / "t.meta.json")
    assert main(["validate", str(ops), "--hw", "cpu_host"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"error: {ops}: line 2: {column} '{value}', but its step step0.prefill has {column} ")


def test_a_malformed_file_is_named_in_the_python_parsers_words(tmp_path):
    """YAML is parsed by libyaml's C parser; a file it refuses is read again by the pure-Python one, whose words
    name the tab or the alias (a review: libyaml's message for a tab indent did not name the tab)."""
    from sim.core.errors import ConfigError
    from sim.core.schema import read_yaml
    for text, words in (("model: x\n\tbatch: 1\n", "found character '\\t' that cannot start any token"),
                        ("x: *y\n", "found undefined alias 'y'"), ("a: 1\na: 2\n", "duplicate key 'a'")):
        (tmp_path / "w.yaml").write_text(text)
        with pytest.raises(ConfigError) as err:
            read_yaml(tmp_path / "w.yaml")
        assert str(err.value).startswith(f"{tmp_path / 'w.yaml'}: malformed YAML at line ") and words in str(err.value)
    (tmp_path / "ok.yaml").write_text("a: 1\nb: [1, 2]\n")
    assert read_yaml(tmp_path / "ok.yaml") == {"a": 1, "b": [1, 2]}

"""The command line: the main job, outputs, and one clear line for each user mistake."""

import json
from pathlib import Path

import pytest

from sim.apps.cli import main
from tests.conftest import ROOT

WL = str(ROOT / "workloads/llama13b_decode.yaml")


def _err_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err            # exactly one line, no traceback
    assert "Traceback" not in err[0]
    return err[0]


def test_run_writes_json_trace_and_plots(tmp_path, capsys):
    out = tmp_path / "r.json"
    trace = tmp_path / "t.json"
    assert main(["run", WL, "--hw", "a6000", "--json", str(out), "--chrome-trace", str(trace),
                 "--plots", str(tmp_path / "plots")]) == 0
    report = capsys.readouterr().out
    for text in ("TTFT", "TPOT", "tokens/s", "Peak memory", "down_proj", "memory"):
        assert text in report
    data = json.loads(out.read_text())
    for key in ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s", "params", "peak_memory_bytes", "utilization", "ops"):
        assert key in data
    assert data["params"] == 13_015_864_320
    op = data["ops"][0]
    assert set(op) >= {"name", "kind", "unit", "start_s", "end_s", "flops", "bytes", "bound"}
    assert len(data["ops"]) == 1 + 40 * 17 + 2
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("ph") == "X" and e["name"] == "L0.q_proj" for e in events)
    for png in ("roofline.png", "decode_gantt.png"):
        assert (tmp_path / "plots" / png).stat().st_size > 1000


def test_set_overrides_and_model_show(capsys):
    assert main(["run", WL, "--hw", "a6000", "--set", "batch=4", "--set", "formats.weights=int4", "-q"]) == 0
    assert main(["model", "show", "llama2-7b", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["params"] == 6_738_415_616
    assert data["weight_bytes"]["fp16"] == 2 * 6_738_415_616
    assert data["kv_cache_bytes_per_token"]["fp16"] == 2 * 32 * 4096 * 2   # K and V, 32 layers, fp16


def test_roofline_and_hw_commands(tmp_path, capsys):
    assert main(["hw", "list"]) == 0
    listed = capsys.readouterr().out
    # the A6000's int4 peak (619.4 TOPS dense, hardware.md) is operations, a float format's FLOPs (a trial)
    assert "a6000" in listed and "619 TOP/s int4" in listed and "TFLOP/s int4" not in listed
    assert main(["hw", "show", "h100_sxm"]) == 0
    out = tmp_path / "roof.json"
    assert main(["roofline", WL, "--hw", "a6000", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["ops"]
    q = next(r for r in rows if r["op"] == "q_proj")
    assert q["bound"] == "memory" and q["intensity"] == pytest.approx(2 * 5120 * 5120 / (5120 * 5120 * 2 + 4 * 5120), rel=1e-6)


@pytest.mark.parametrize("content,expect", [
    ("model: llama2-7b\nbatch: [1\n", "malformed YAML at line"),
    ("model: llama2-7b\nbatchh: 4\n", "batchh: unknown key (did you mean batch?)"),   # a newcomer's trial
    ("model: llama2-7b\nformats: {weight: int4}\n", "formats.weight: unknown key (did you mean weights?)"),
    ("model: llama2-7b\nzzz: 4\n", "zzz: unknown key; keys here: name, model, batch, prompt_len, gen_len, formats"),
    ("model: llama2-7b\nbatch: 0\n", "batch: Input should be greater than 0"),
    ("model: llama2-7b\nprompt_len: -5\n", "prompt_len"),
    ("model: llama9-1t\n", "unknown model 'llama9-1t'"),
    ("model: llama2-7b\nformats: {weights: fp5}\n", "unknown number format 'fp5'"),
])
def test_bad_workloads_get_one_line(tmp_path, capsys, content, expect):
    wl = tmp_path / "w.yaml"
    wl.write_text(content)
    out = tmp_path / "out.json"
    assert main(["run", str(wl), "--hw", "a6000", "--json", str(out)]) == 2
    line = _err_line(capsys)
    assert expect in line and "w.yaml" in line, line   # names the file and the key
    assert not out.exists()                     # nothing half-written


def test_unknown_preset_and_bad_hw_file(tmp_path, capsys):
    assert main(["run", WL, "--hw", "a9000"]) == 2
    assert "unknown hardware preset 'a9000'" in _err_line(capsys)
    hw = tmp_path / "hw.yaml"
    hw.write_text((ROOT / "hw_models/presets/a6000.yaml").read_text().replace("768 GB/s", "-768 GB/s"))
    assert main(["run", WL, "--hw", str(hw)]) == 2
    line = _err_line(capsys)
    assert "hw.yaml" in line and "memory.gddr.bandwidth_bytes_per_s" in line
    hw.write_text((ROOT / "hw_models/presets/a6000.yaml").read_text().replace("launch_overhead_s", "launch_overhed_s"))
    assert main(["run", WL, "--hw", str(hw)]) == 2
    assert "units.gpu.launch_overhed_s: unknown key" in _err_line(capsys)
    assert main(["run", WL, "--hw", "a6000", "--set", "hw.memory.gddr.bandwith=1"]) == 2
    assert "bandwith" in _err_line(capsys)


def test_model_too_big_for_the_device(tmp_path, capsys):
    out = tmp_path / "out.json"
    wl = str(ROOT / "workloads/llama70b_decode.yaml")
    assert main(["run", wl, "--hw", "a6000", "--json", str(out)]) == 2
    line = _err_line(capsys)
    assert "needs" in line and "short by" in line and "offload" in line
    assert not out.exists()


def test_context_beyond_max_positions_warns(tmp_path, capsys):
    assert main(["run", WL, "--hw", "a6000", "--set", "prompt_len=4000", "--set", "gen_len=200"]) == 0
    assert "max_position_embeddings" in capsys.readouterr().out


def test_formats_command_measures_error_on_an_array(tmp_path, capsys):
    import numpy as np

    x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    np.save(tmp_path / "w.npy", x)
    assert main(["formats", "--formats", "fp16,mxfp4,int4", "--array", str(tmp_path / "w.npy"), "--json"]) == 0
    rows = {r["format"]: r for r in json.loads(capsys.readouterr().out)["formats"]}
    # mxfp4 on 64 x 256: 16,384 elements x 4 bits + 64 x 8 blocks x 8-bit scales = 8192 + 512 bytes
    assert rows["mxfp4"]["storage_bytes"] == 8192 + 512
    assert rows["int4"]["storage_bytes"] == 8192 + 64 * 2 * 2      # groups of 128, fp16 scales
    assert rows["fp16"]["sqnr_db"] > rows["int4"]["sqnr_db"] > 10
    assert main(["formats", "--formats", "fp5"]) == 2
    assert "unknown number format 'fp5'" in capsys.readouterr().err
    (tmp_path / "bad.npy").write_text("not an array")   # no NumPy header: numpy would advise allow_pickle=
    assert main(["formats", "--array", str(tmp_path / "bad.npy")]) == 2
    assert capsys.readouterr().err.strip() == (f"error: {tmp_path / 'bad.npy'}: not a .npy file (it lacks the NumPy "
                                               "header; write one with numpy.save)")
    (tmp_path / "cut.npy").write_bytes((tmp_path / "w.npy").read_bytes()[:100])   # a header, then cut short
    assert main(["formats", "--array", str(tmp_path / "cut.npy")]) == 2
    assert "not a readable .npy array" in capsys.readouterr().err


def test_formats_default_array_is_the_docs_table_s(tmp_path):
    """`sim formats` without --array measures docs/formats.md's array (a trial read 256 x 4096 in the CLI against the
    doc's 512 x 1024): its SQNR column, rounded as the doc prints it, is the doc's."""
    import re

    doc = (Path(__file__).resolve().parents[1] / "docs" / "formats.md").read_text()
    names = ("nvfp4", "mxfp4", "fp8_e4m3", "int4", "int8")   # int8 (a scale per row) tells the two arrays apart
    want = {n: float(re.search(rf"^\| `{n}` \|.*\| ([0-9.]+) \|$", doc, re.M).group(1)) for n in names}
    assert main(["formats", "--formats", ",".join(names), "--json", str(tmp_path / "f.json")]) == 0
    got = {r["format"]: round(r["sqnr_db"], 1) for r in json.loads((tmp_path / "f.json").read_text())["formats"]}
    assert got == want


def test_a_repeated_format_is_shown_once(tmp_path, capsys):
    # `--formats mxfp4,mxfp4` measured mxfp4 twice and printed two identical rows; MXFP4 and fp8 are
    # spellings of mxfp4 and fp8_e4m3. Dropped with a warning, as a sweep drops a repeated point.
    out = tmp_path / "f.json"
    assert main(["formats", "--formats", "mxfp4, mxfp4,MXFP4,fp8_e4m3,fp8,mxfp4", "-q", "--json", str(out)]) == 0
    assert [r["format"] for r in json.loads(out.read_text())["formats"]] == ["mxfp4", "fp8_e4m3"]
    assert capsys.readouterr().err.splitlines() == ["warning: --formats: mxfp4 is listed more than once; shown once",
                                                    "warning: --formats: MXFP4 is mxfp4 again; shown once",
                                                    "warning: --formats: fp8 is fp8_e4m3 again; shown once"]
    assert main(["model", "show", "llama3-8b", "--formats", "int8,mxfp4,mxfp4", "--json", str(out)]) == 0
    assert list(json.loads(out.read_text())["weight_bytes"]) == ["int8", "mxfp4"]
    assert capsys.readouterr().err == "warning: --formats: mxfp4 is listed more than once; shown once\n"


@pytest.mark.parametrize("preset", sorted(p.stem for p in (ROOT / "hw_models" / "presets").glob("*.yaml")))
def test_every_preset_renders_its_report(tmp_path, capsys, preset):
    """The full report of `sim run` on every shipped preset (kind sections included): a report
    section reading a key the result no longer carries was a KeyError traceback on offload presets."""
    from sim.apps.cli import main
    wl = tmp_path / "w.yaml"
    model = "tinyllama-1.1b"
    if preset == "attacc_dgx":
        # Its 12 head groups need OPT-175B's 96 heads; 4 of its 96 layers render the same report
        # sections (the whole model took ~13 s of CPU, every layer planned alike).
        model = str(tmp_path / "opt-175b-4l.yaml")
        Path(model).write_text("model_type: opt\nhidden_size: 12288\nffn_dim: 49152\nnum_hidden_layers: 4\n"
                               "num_attention_heads: 96\nvocab_size: 50272\nmax_position_embeddings: 2048\n"
                               "tie_word_embeddings: true\n")
    wl.write_text(f"name: tiny\nmodel: {model}\nbatch: 1\nprompt_len: 32\ngen_len: 2\n")
    rc = main(["run", str(wl), "--hw", preset])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "Traceback" not in out.out + out.err and "TPOT" in out.out


def test_quiet_with_a_data_format_prints_the_data(capsys):
    """-q keeps stdout to what was asked for: with --format json/csv that is the tables (docs/cli.md's example)."""
    assert main(["model", "show", "qwen3-8b", "--format", "json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0] == ["name", "qwen3-8b"]
    assert main(["run", WL, "--hw", "a6000", "--set", "gen_len=2", "--format", "csv", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Model\n") and "TTFT (prefill)" in out
    assert main(["run", WL, "--hw", "a6000", "--set", "gen_len=2", "-q"]) == 0
    assert capsys.readouterr().out == ""


def test_ideal_drops_the_stack_with_a_note(capsys):
    assert main(["run", WL, "--hw", "a6000", "--ideal", "--set", "stack=torch-eager", "--set", "gen_len=2",
                 "--format", "json"]) == 0
    cap = capsys.readouterr()
    assert "stack 'torch-eager' is not applied" in cap.err
    assert main(["run", WL, "--hw", "a6000", "--ideal", "--set", "gen_len=2", "--format", "json"]) == 0
    assert json.loads(cap.out) == json.loads(capsys.readouterr().out)   # the same run as without the stack
    assert "section" not in cap.err                                      # a6000 has no kind section


def test_an_ideal_run_says_so_in_its_report_and_json(tmp_path, capsys):
    """An --ideal run passed for a real one: its report and JSON said nothing (a trial's finding)."""
    out = tmp_path / "r.json"
    assert main(["run", WL, "--hw", "a6000", "--ideal", "--set", "gen_len=2", "--json", str(out)]) == 0
    cap = capsys.readouterr()
    assert "--ideal: the pure roofline" in cap.out + cap.err
    run = json.loads(out.read_text())
    assert run["ideal"] is True and any(n.startswith("--ideal") for n in run["notes"])
    assert main(["run", WL, "--hw", "a6000", "--set", "gen_len=2", "--json", str(out), "-q"]) == 0
    assert "ideal" not in json.loads(out.read_text())


def test_ideal_says_a_kind_section_stays_as_given(capsys):
    """--ideal idealises units, memory and links; a spatial chip's hops and issue cycles are its `spatial:`
    section's, applied as given: the run says so rather than passing for a pure roofline."""
    assert main(["run", WL, "--hw", "groq_lpu", "--ideal", "--set", "gen_len=2", "-q"]) == 0
    assert capsys.readouterr().err.strip().splitlines()[0] == (
        "note: --ideal idealises units, memory and links only; the preset's `spatial:` section (its spatial timings) "
        "is applied as given")


def test_power_limit_without_a_board_model_is_refused(capsys):
    assert main(["run", WL, "--hw", "l40s", "--set", "hw.units.gpu.power_limit_w=100"]) == 2
    line = _err_line(capsys)
    assert "power_limit_w 100 W: this unit has no board-power model" in line
    assert "l40s.yaml (with hw.units.gpu.power_limit_w overridden): units.gpu: power_limit_w" in line


def test_a_bad_set_value_is_named_as_the_set_not_the_file(capsys):
    """An architecture trial: `--set batch=0` read `llama13b_decode.yaml: batch: ...`, blaming a file that says
    `batch: 1`; the line names the --set keys, as a preset's overridden ones are named."""
    assert main(["run", WL, "--hw", "a6000", "--set", "batch=0", "-q"]) == 2
    assert _err_line(capsys).endswith("(with batch overridden): batch: Input should be greater than 0")


def test_a_prefill_only_run_has_no_tpot(capsys):
    assert main(["run", WL, "--hw", "a6000", "--set", "gen_len=1"]) == 0
    assert "- (gen_len 1: the one token comes from prefill, no decode step)" in capsys.readouterr().out


def test_run_on_a_serving_file_points_to_sim_serve(capsys):
    assert main(["run", str(ROOT / "workloads/serve_llama3_8b_sharegpt.yaml"), "--hw", "h100_sxm"]) == 2
    assert "run it with `sim serve" in _err_line(capsys)


def test_roofline_warns_past_the_models_context_and_on_a_prefill_kv_len(capsys):
    assert main(["roofline", WL, "--hw", "a6000", "--kv-len", "100000"]) == 0
    assert "kv_len 100000 is beyond llama2-13b's max_position_embeddings (4096)" in capsys.readouterr().err
    assert main(["roofline", WL, "--hw", "a6000", "--phase", "prefill", "--kv-len", "5"]) == 0
    assert "--kv-len sets a decode step's context" in capsys.readouterr().err


def test_gantt_layers_without_plots_is_refused(tmp_path, capsys):
    """The flag sets the zoom of a plot only --plots writes: alone it would be silently ignored."""
    from tests.robust_helpers import refused
    line = refused(capsys, ["run", WL, "--hw", "a6000", "--gantt-layers", "0-1"], tmp_path)
    assert line == ("error: --gantt-layers chooses the layers of the Gantt plot that --plots DIR writes; "
                    "add --plots DIR")


def test_model_show_gives_the_experts_width_the_model_uses(capsys):
    """Mixtral's config has no moe_intermediate_size (0): its experts are intermediate_size (14336) wide."""
    assert main(["model", "show", "mixtral-8x7b"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "moe_intermediate_size" in line)
    assert "14336" in row
    # DeepSeek-V2-Lite: 2 shared experts of 1408 (moe_intermediate_size), no shared_expert_intermediate_size given
    assert main(["model", "show", "deepseek-v2-lite"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "shared_expert_intermediate_size" in line)
    assert "2816" in row and "not given" in row   # absent from the config, not 0 in it (a trial)


def test_model_show_says_a_windowed_cache_is_not_capped(capsys):
    """Mistral's KV figure per token counts every layer's whole context (docs/models.md): the row says so, where a
    model-import trial read it as the windowed cache's (4x it at 16k tokens). A model without a window has no row."""
    assert main(["model", "show", "mistral-7b"]) == 0
    out = capsys.readouterr().out
    assert "KV cache of windowed layers" in out and "4096-key window bounds what attention reads" in out
    assert main(["model", "show", "llama3-8b"]) == 0
    assert "windowed" not in capsys.readouterr().out


def test_run_past_the_models_positions_is_noted_once(tmp_path, capsys):
    """A context longer than max_position_embeddings is costed and noted once, in the report and the JSON's notes
    (a model-import trial read Phi-3-mini at 8,000 tokens as silent; a second warning added for it printed the
    same fact twice, a sweep trial found); within the positions nothing is said."""
    wl = tmp_path / "w.yaml"
    for prompt, notes in ((8000, 1), (4000, 0)):
        wl.write_text(f"model: phi-3-mini\nbatch: 1\nprompt_len: {prompt}\ngen_len: 8\n")
        capsys.readouterr()
        assert main(["run", str(wl), "--hw", "h100_sxm", "--json", str(tmp_path / "o.json")]) == 0
        text = capsys.readouterr()
        said = (text.out + text.err).count("max_position_embeddings")
        assert said == notes, text
        import json
        got = [n for n in json.loads((tmp_path / "o.json").read_text())["notes"] if "max_position_embeddings" in n]
        assert len(got) == notes


def test_roofline_says_what_it_leaves_out(capsys):
    """sim roofline prices one device: a parallel: plan and the board power cap were silently skipped (a trial
    read the 70B TP4/PP2 table as 141 GB a step on one H100)."""
    assert main(["roofline", str(ROOT / "workloads/llama70b_tp4_pp2.yaml"), "--hw", "h100_sxm", "-q"]) == 0
    err = capsys.readouterr().err
    assert "the pipeline stages (parallel.pp: every layer counted on one rank)" in err and "the board power cap" in err
    assert main(["roofline", str(ROOT / "workloads/llama13b_decode.yaml"), "--hw", "l40s", "-q"]) == 0
    assert "note:" not in capsys.readouterr().err       # no stack, no plan, no board-power model on the l40s
    assert main(["roofline", str(ROOT / "workloads/llama13b_decode.yaml"), "--hw", "a6000", "-q"]) == 0
    assert "the board power cap: not applied" in capsys.readouterr().err   # a6000's board power since stop 67


def test_roofline_prices_one_tp_rank_and_its_collectives(tmp_path):
    """A capacity planner's trial: `sim roofline` ignored the plan (the whole model on one device). Under TP 2 on
    dgx_h100 a rank computes half of each column- or row-split GEMM (Llama-2-7B q_proj at batch 1: 2 x 4096 x 2048
    FLOPs, was 2 x 4096 x 4096) and two all-reduces a layer of the 4096 x 2 B hidden state, each by hand
    2 (n - 1) alpha + 2 (n - 1) / n S / B with DGX H100's fitted 2-rank line, and S / B over the datasheet link
    (450 GB/s per direction) as its pure line."""
    from hw_models.machine import load_machine
    from hw_models.network.topology import load_topology
    from sim.apps.roofline_rows import roofline_rows
    from sim.core.workload import Workload

    w = Workload(model="llama2-7b", batch=1, prompt_len=128, gen_len=2, flash_attention=True,
                 formats={"weights": "fp16", "activations": "fp16", "kv_cache": "fp16"},
                 parallel={"tp": 2, "topology": "dgx_h100"})
    rows = {r["op"]: r for r in roofline_rows(w, load_machine("h100_sxm"), "decode", 1, 129)}
    assert rows["q_proj"]["flops"] == 2 * 4096 * 2048
    fit = load_topology("dgx_h100").fitted["all_reduce"][2]
    for after in ("o_proj", "down_proj"):
        ar = rows[f"all_reduce after {after}"]
        assert ar["count"] == 32 and ar["bytes"] == 4096 * 2
        assert ar["simulated_s"] == pytest.approx(2 * fit.latency_s + 4096 * 2 / fit.bandwidth_bytes_per_s, rel=1e-9)
        assert ar["roofline_s"] == pytest.approx(4096 * 2 / 450e9, rel=1e-9)


def test_model_show_moe_active_parameters_and_block_formats(capsys, tmp_path):
    """A new user's trial: `model show` gave MoE totals only and no FP8 / MX / NVFP4 bytes. Mixtral-8x7B: 12.88B
    of its 46.70B parameters are active per token (2 of 8 experts; docs/models.md); NVFP4 stores 4.5 bits an
    element (an e4m3 scale per 16), MXFP4 4.25 (an e8m0 scale per 32). NVFP4's per-tensor fp32 scale belongs to
    each layer's K and V tensor, not to a token (a hardware designer's trial: 2 x 32 x 4 B counted again per token)."""
    assert main(["model", "show", "mixtral-8x7b", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["active_params"] == 12_879_925_248 and data["params"] == 46_702_792_704
    kv = data["kv_cache_bytes_per_token"]
    assert kv["fp8_e4m3"] == 2 * 32 * 1024 and kv["nvfp4"] == 2 * 32 * 1024 * 4.5 / 8
    assert data["weight_bytes"]["mxfp4"] < data["weight_bytes"]["nvfp4"] < data["weight_bytes"]["fp8_e4m3"]
    work = tmp_path / "w.yaml"
    work.write_text("model: {name: m, hidden_size: 64, num_layers: 2, num_heads: 4, vocab_size: 100}\n")
    assert main(["model", "show", str(work)]) == 2
    assert "a workload file" in capsys.readouterr().err


def test_an_ignored_stack_is_not_recorded(tmp_path, capsys):
    """A new user's trial: `stack: vllm` on hbm_pim warned "ignored" but the JSON (and so a sweep's row) said
    stack vllm. The record says what was costed: no stack there, the stack on a GPU."""
    for hw, recorded in (("hbm_pim", ""), ("a6000", "vllm")):
        out = tmp_path / f"{hw}.json"
        assert main(["run", "workloads/llama2_7b_decode.yaml", "--hw", hw, "--set", "stack=vllm", "--set", "gen_len=2",
                     "--json", str(out), "-q"]) == 0
        assert json.loads(out.read_text())["stack"] == recorded
    capsys.readouterr()


@pytest.mark.parametrize("hw,placement", [("groq_lpu", "the chip pipeline"), ("hbm_pim", "the PIM units"),
                                          ("flexgen_t4", "the offload placement")])
def test_roofline_says_what_a_kind_places_beyond_it(capsys, hw, placement):
    """An architect's trial: `sim roofline` on PIM, spatial and offload presets gave one device's roofline in a column
    labelled simulated, 3-10x off sim run, without a word. It names what the kind places that the table does not."""
    assert main(["roofline", "workloads/llama13b_decode.yaml", "--hw", hw, "-q"]) == 0
    err = capsys.readouterr().err
    assert f"{placement}" in err and "not applied (sim run applies them)" in err


def test_formats_on_an_array_that_overflows_fp16_and_on_a_bf16_file(tmp_path, capsys):
    """A numerics researcher's trial: a value past fp16's 65504 made `sim formats --array` a traceback (log10 of 0:
    the overflowed error is infinite), and a bf16 .npy (np.save writes ml_dtypes' bfloat16 as |V2) was refused as
    'not real numbers'. fp16's error there is -inf dB; the bf16 file reads as the same numbers in float32."""
    import ml_dtypes
    import numpy as np

    from sim.core.quantize import quantization_error

    assert quantization_error(np.array([1e5, 1.0], np.float32), "fp16")["sqnr_db"] == -np.inf
    big, half = tmp_path / "big.npy", tmp_path / "bf16.npy"
    np.save(big, np.array([[1e5, 1.0, -2.0, 3.0]], np.float32))
    assert main(["formats", "--array", str(big), "--formats", "fp16,bf16", "--json", str(tmp_path / "o.json")]) == 0
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(ml_dtypes.bfloat16)
    np.save(half, x)
    assert np.load(half).dtype.str == "|V2"
    assert main(["formats", "--array", str(half), "--formats", "fp8", "--json", str(tmp_path / "h.json")]) == 0
    [row] = json.loads((tmp_path / "h.json").read_text())["formats"]
    assert row["format"] == "fp8_e4m3"
    assert row["rel_rmse"] == pytest.approx(quantization_error(x.astype(np.float32), "fp8_e4m3")["rel_rmse"], rel=1e-12)


def test_json_dash_is_stdout(tmp_path, capsys, monkeypatch):
    """`--json -` wrote a 131 kB file named `-` (a trial's finding): it is stdout, as for most Unix tools."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(ROOT / "workloads" / "llama2_7b_decode.yaml"), "--hw", "a6000", "--json", "-", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["tpot_s"] > 0
    assert not (tmp_path / "-").exists()


def test_requests_dash_is_csv_on_stdout(capsys):
    """`-` is stdout for every writer (sim.core.files.atomic_write), not only --json: --requests - prints the CSV."""
    w = str(ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml")
    assert main(["serve", w, "--hw", "h100_sxm", "--set", "serving.arrivals.num_requests=4", "--requests", "-",
                 "-q"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("id,arrival_s,") and len(lines) == 5


def test_two_outputs_on_stdout_are_refused(capsys):
    w = str(ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml")
    assert main(["serve", w, "--hw", "h100_sxm", "--json", "-", "--requests", "-", "-q"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --json and --requests: both write to stdout (-); give one of them a file path")


def test_one_file_for_two_outputs_is_refused(tmp_path, capsys):
    """`--json same.csv --requests same.csv` kept only the requests (a trial): refused before the run."""
    w = str(ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml")
    same = str(tmp_path / "same.json")
    assert main(["serve", w, "--hw", "h100_sxm", "--json", same, "--chrome-trace", same, "-q"]) == 2
    assert capsys.readouterr().err.strip() == f"error: --json and --chrome-trace: both write {same}; give each its own file"
    assert not (tmp_path / "same.json").exists()


def test_a_field_of_a_preset_model_says_the_model_is_a_name(capsys):
    """`--set model.num_layers=0` on a workload whose model is a preset read "parent is not a mapping" (a trial):
    the message says the model is a name and how to give fields."""
    w7 = str(ROOT / "workloads" / "llama2_7b_decode.yaml")
    assert main(["run", w7, "--hw", "h100_sxm", "--set", "model.num_layers=0", "-q"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {w7}: model.num_layers: model is 'llama2-7b', a name, not a mapping of fields; to change "
        "num_layers, give the model as an inline mapping or a config.json / model YAML (docs/models.md)")


def test_stdout_without_a_byte_buffer_takes_text():
    """A code review: '-' wrote through sys.stdout.buffer, which a StringIO (redirect_stdout, a notebook) lacks."""
    import contextlib
    import io

    from sim.core.files import write_json

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        write_json("-", {"a": 1})
    assert json.loads(out.getvalue()) == {"a": 1}


def test_a_topology_given_as_hw_and_a_missing_topology_name_the_topologies(capsys):
    """A newcomer's trial: `--hw hgx_h200` (a topology `sim hw list --topologies` lists) said only "unknown hardware
    preset", and a tp of 4 without a topology named no topology."""
    assert main(["run", WL, "--hw", "hgx_h200", "-q"]) == 2
    assert "(hgx_h200 is a topology: --set parallel.topology=hgx_h200 and parallel.tp on a device preset)" in \
        capsys.readouterr().err
    assert main(["run", WL, "--hw", "h200", "--set", "parallel.tp=4", "-q"]) == 2
    err = capsys.readouterr().err
    assert "parallel.topology: needed when a replica spans devices: one of " in err and "hgx_h200" in err


def test_a_format_that_rounds_every_value_to_zero_is_said(tmp_path, capsys):
    """N(0, 0.02) weights lie below fp4_e2m1's smallest step (0.5; |x| < 0.25 rounds to 0 for all but a ~1e-35
    tail): its SQNR read 0.0 dB without a word (a newcomer's trial); mxfp4's block scale keeps them, and is not named."""
    import numpy as np
    path = tmp_path / "w.npy"
    np.save(path, (np.random.default_rng(0).standard_normal((64, 64)) * 0.02).astype(np.float32))
    assert main(["formats", "--array", str(path), "--formats", "fp4_e2m1,mxfp4"]) == 0
    err = capsys.readouterr().err
    assert "note: fp4_e2m1: every value rounds to zero (rel. RMSE 1)" in err and "mxfp4:" not in err


def test_the_decode_table_says_the_step_s_device_time_by_bound(capsys):
    """An architecture trial asked why twice the HBM bandwidth gave 1.56x: the small ops bound by their launch,
    floor or fill, which the top rows hide, do not shrink. The decode table's caption sums the step's device time by
    each op's bound (the engine's overlapped host work left out); one bound alone needs no line."""
    from sim.apps.report import bound_caption
    from sim.core.results import OpRecord

    ops = [OpRecord("gemm.L0", "gemm", "gpu", 0.0, 3e-3, 1.0, 1.0, "memory"),
           OpRecord("norm.L0", "norm", "gpu", 3e-3, 4e-3, 1.0, 1.0, "overhead"),
           OpRecord("engine.host", "engine", "host", 0.0, 9e-3, 0.0, 0.0, "overhead")]
    assert bound_caption(ops) == ("device time by bound: memory 3.000 ms (75%), overhead 1.000 ms (25%) (ops bound by "
                                  "their launch, floor or fill: neither a faster memory nor compute shrinks them; the "
                                  "other ops' launches and ramps count under their own bound)")
    assert bound_caption(ops[:1]) is None
    assert main(["run", WL, "--hw", "h100_sxm"]) == 0
    assert "device time by bound: memory" in capsys.readouterr().out.replace("\n", " ")


def test_the_bound_caption_counts_a_spatial_op_split_over_chips_once():
    """A review: an op split over two consecutive chips was counted from its first piece's start to its last piece's
    end, the hop between them inside (and again as its own link record), so a Groq step's bounds summed past its
    latency (compute twice over). Each piece counts the time it covers: the bounds of a pipelined decode step sum to
    its makespan, ops and hops one after another."""
    from hw_models.machine import load_machine
    from hw_models.registry import simulate
    from sim.core.results import time_by_bound
    from sim.core.workload import load_workload

    w = load_workload(str(ROOT / "workloads/llama2_7b_groq_2k.yaml"), {"gen_len": 2, "prompt_len": 64})
    r = simulate(w, load_machine("groq_lpu"))
    by = time_by_bound(r.decode_ops)
    assert sum(by.values()) == pytest.approx(r.decode_timeline.makespan_s, rel=1e-9)
    assert {"weight install", "link"} <= by.keys()

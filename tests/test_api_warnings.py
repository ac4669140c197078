"""The Python API says what `sim run` says before a run (sim.apps.api.simulate), and its metrics name the energy
model behind their J/token (hw_models.power.board_columns)."""

import warnings

import pytest

from sim.apps.api import SimInputWarning, load_machine, load_workload, simulate

WORKLOAD = "workloads/llama2_7b_decode.yaml"


def run(workload, machine):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = simulate(workload, machine).metrics()
    return metrics, [w for w in caught if w.category is SimInputWarning]


def test_a_limit_above_the_tdp_warns_and_the_run_goes_on():
    metrics, said = run(WORKLOAD, load_machine("h100_sxm", {"units.gpu.power_limit_w": 900}))
    assert len(said) == 1 and "900 W is above power_w (700 W" in str(said[0].message)
    assert metrics["power_cap_limit_w"] == 900 and metrics["energy_board_model"] == 1.0


def test_a_plain_run_warns_nothing_and_records_the_tdp_as_its_limit():
    metrics, said = run(WORKLOAD, "h100_sxm")
    assert said == [] and metrics["power_cap_limit_w"] == 700   # h100_sxm.yaml power_w, no power_limit_w


def test_a_setting_the_hardware_ignores_is_named():
    # a software stack on a spatial preset: sim run's note, naming the key
    _, said = run(load_workload(WORKLOAD, {"stack": "vllm"}), "groq_lpu")
    assert any("stack: 'vllm' is ignored" in str(w.message) for w in said)


@pytest.mark.parametrize("hw", ["l40s"])
def test_busy_time_power_has_no_limit_column(hw):
    metrics, _ = run(WORKLOAD, hw)
    assert metrics["energy_board_model"] == 0.0 and "power_cap_limit_w" not in metrics


def test_serve_is_sim_serve_and_warns_what_it_says():
    """`serve` runs a serving file as `sim serve` does and warns its notes: another engine's stack beside vLLM's
    scheduler (engine_mismatch) is named; the summary holds the CLI's figures."""
    from sim.apps.api import load_serve_file, serve
    f = load_serve_file("workloads/serve_llama3_8b_sharegpt.yaml", {"serving.arrivals.num_requests": 12,
                                                                    "stack": "sglang"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, summary = serve(f, "h100_sxm")
    said = [str(w.message) for w in caught if w.category is SimInputWarning]
    assert any("stack 'sglang' runs beside scheduler.kind 'vllm-v0'" in m for m in said)
    assert summary["completed"] == 12 and len(result.requests["finish_s"]) == 12


def test_serve_of_a_stream_nothing_of_which_runs_raises_as_sim_serve_fails():
    """Prompts past tinyllama's 2048-token context: every request rejected, a CapacityError naming why (sim serve
    exits 2; the API had returned figures of nothing)."""
    import pytest as _pytest

    from sim.apps.api import load_serve_file, serve
    from sim.core.errors import CapacityError
    f = load_serve_file("workloads/serve_llama3_8b_sharegpt.yaml", {
        "model": "tinyllama-1.1b", "serving.arrivals.num_requests": 4,
        "serving.lengths": {"prompt": {"dist": "fixed", "value": 4000}, "output": {"dist": "fixed", "value": 8}}})
    with _pytest.raises(CapacityError, match="all 4 requests were rejected"):
        serve(f, "h100_sxm")


def test_wrong_arguments_are_type_errors_naming_them():
    """A sweep trial's simulate(w, 123), simulate(machine, workload) and simulate(None, "h100_sxm") raised
    AttributeErrors from deep inside, and exhaustive="yes" ran silently. Each is now a TypeError saying what is
    wrong; a mapping of preset fields is a machine built in code (machine_from_dict), as a Machine is."""
    import pytest
    import yaml

    from sim.apps.api import load_machine, load_workload, serve, simulate
    from tests.conftest import ROOT
    w = load_workload(ROOT / "workloads" / "llama2_7b_decode.yaml")
    m = load_machine("h100_sxm")
    for args, kw, match in (((w, 123), {}, "machine must be a Machine, a preset name, a path or a mapping"),
                            ((m, w), {}, r"simulate\(workload, machine\): the arguments are swapped"),
                            ((None, "h100_sxm"), {}, "workload must be a Workload, a path or a file name, got NoneType"),
                            ((w, m), {"exhaustive": "yes"}, "exhaustive must be True or False, got 'yes'")):
        with pytest.raises(TypeError, match=match):
            simulate(*args, **kw)
    with pytest.raises(TypeError, match=r"serve\(workload, machine\): the arguments are swapped"):
        serve(m, w)
    raw = yaml.safe_load((ROOT / "hw_models" / "presets" / "h100_sxm.yaml").read_text())
    assert simulate(w, raw).tpot_s == simulate(w, m).tpot_s


def test_load_machine_reads_the_set_spelling_of_an_override():
    """`hw.memory...` (as --set spells it) had read "(override hw.hw.memory...): hw: unknown key" (a sweep trial)."""
    a = load_machine("h100_sxm", {"hw.memory.hbm.bandwidth_bytes_per_s": 4e12})
    b = load_machine("h100_sxm", {"memory.hbm.bandwidth_bytes_per_s": 4e12})
    assert a.memory["hbm"].bandwidth_bytes_per_s == b.memory["hbm"].bandwidth_bytes_per_s == 4e12


def test_a_model_copy_is_checked_again_before_it_runs():
    """Workload and Machine are frozen, so a script changes a field with model_copy(update=...), which pydantic runs
    no check on: an API trial's batch 0 read a TPOT, batch -4 NaN times, a negative bandwidth a NaN TPOT, "8" a bare
    TypeError. simulate refuses each as the file would; a valid copy runs as the same workload loaded with it."""
    from sim.core.errors import ConfigError
    from tests.conftest import ROOT
    path = ROOT / "workloads" / "llama13b_decode.yaml"
    w = load_workload(path)
    for update, match in (({"batch": 0}, r"\(as changed in code\): batch: Input should be greater than 0"),
                          ({"batch": -4}, "batch: Input should be greater than 0"),
                          ({"prompt_len": -100}, "prompt_len: Input should be greater than 0"),
                          ({"batch": "8"}, "batch: Input should be a valid integer")):
        with pytest.raises(ConfigError, match=match):
            simulate(w.model_copy(update=update), "a6000")
    m = load_machine("a6000")
    slow = m.model_copy(update={"memory": {**m.memory, "gddr": m.memory["gddr"].model_copy(
        update={"bandwidth_bytes_per_s": -1.0})}})
    with pytest.raises(ConfigError, match=r"a6000.yaml \(as changed in code\): memory.gddr.bandwidth_bytes_per_s: "
                                          "Input should be greater"):
        simulate(w, slow)
    with pytest.raises(ConfigError, match=r"llama13b_decode.yaml \(as changed in code\): batchh: unknown key"):
        simulate(w.model_copy(update={"batchh": 8}), m)   # model_copy takes any name silently
    with pytest.raises(ConfigError, match=r"\(as changed in code\): formats.weigths: unknown key"):   # at any depth
        simulate(w.model_copy(update={"formats": w.formats.model_copy(update={"weigths": "int4"})}), m)
    # a serving file is checked as its file is: an SLO pydantic takes but the metrics do not had died after the run
    from sim.apps.api import load_serve_file, serve
    f = load_serve_file(ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml", {"serving.arrivals.num_requests": 4})
    with pytest.raises(ConfigError, match="serving.slo: ttft_p95: unknown SLO metric"):
        serve(f.model_copy(update={"serving": f.serving.model_copy(update={"slo": {"ttft_p95": 0.2}})}), "h100_sxm")
    assert simulate(w.model_copy(update={"batch": 2}), m).tpot_s == simulate(load_workload(path, {"batch": 2}), m).tpot_s


def test_a_preset_name_given_as_the_workload_is_named_as_swapped():
    """simulate("a6000", "workloads/...") had read "a6000: file not found" where docs/api.md promises a TypeError."""
    with pytest.raises(TypeError, match="'a6000' is a hardware preset, not a workload; the workload comes first"):
        simulate("a6000", "workloads/llama13b_decode.yaml")


def test_a_prefill_only_run_has_no_decode_table_and_every_table_names_the_path():
    """gen_len 1 runs no decode step: to_pandas("decode") had returned the 603-op representative step the run costed
    anyway; and the ops' `path` (how a format computed), which --json and the CLI give, was missing from the table."""
    from tests.conftest import ROOT
    r = simulate(load_workload(ROOT / "workloads" / "llama13b_prefill.yaml"), "h100_sxm")
    assert r.gen_len == 1 and r.to_pandas("decode").empty and "path" in r.to_pandas("decode").columns
    q = simulate(load_workload(ROOT / "workloads" / "llama13b_decode.yaml", {"formats.weights": "int4"}), "a6000")
    paths = set(q.to_pandas("decode")["path"])
    assert any("int4" in p and "dequant" in p for p in paths), paths

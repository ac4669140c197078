"""One flag language (docs/cli.md): -q and --format on every subcommand, --json PATH writes a
file, and each deprecated spelling still works, with a warning naming its replacement."""

import json

import pytest

from sim.apps.cli import build_parser, main
from tests.conftest import ROOT

TRACE = str(ROOT / "tests/data/trace_tinyllama_L1.trace.json.gz")


def _leaves(parser):
    for action in parser._actions:
        if hasattr(action, "choices") and isinstance(action.choices, dict):
            for sub in action.choices.values():
                yield from _leaves(sub)
            return
    yield parser


def test_every_subcommand_has_format_width_and_quiet():
    for leaf in _leaves(build_parser()):
        options = {o for a in leaf._actions for o in a.option_strings}
        assert {"--format", "--width", "-q"} <= options, leaf.prog


def test_json_path_writes_a_file_and_bare_json_is_deprecated(capsys, tmp_path):
    out = tmp_path / "m.json"
    assert main(["model", "show", "gemma-2-9b", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["params"] == 9_241_705_984 and capsys.readouterr().out == ""
    assert main(["model", "show", "gemma-2-9b", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["params"] == 9_241_705_984
    assert "deprecated" in captured.err and "--json PATH" in captured.err


def test_quiet_prints_no_table(capsys):
    assert main(["roofline", str(ROOT / "workloads/llama2_7b_decode.yaml"), "--hw", "h200", "-q"]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("old,new,written", [
    (["--plot", "{d}/old.png"], ["--plots", "{d}"], "validate_scatter.png"),
])
def test_validate_plots_dir_and_the_old_plot_file(capsys, tmp_path, old, new, written):
    args = ["validate", TRACE, "--hw", "cpu_host", "-q"]
    assert main(args + [a.format(d=tmp_path) for a in new]) == 0 and (tmp_path / written).is_file()
    assert main(args + [a.format(d=tmp_path) for a in old]) == 0 and (tmp_path / "old.png").is_file()
    assert "--plot is deprecated" in capsys.readouterr().err


def test_calibrate_out_is_required_and_output_is_an_alias(capsys):
    assert main(["calibrate", TRACE, "--hw", "cpu_host"]) == 2
    assert "--out PRESET.yaml is required" in capsys.readouterr().err


def test_a_stack_on_a_kind_without_one_is_reported_ignored(capsys):
    assert main(["run", str(ROOT / "workloads/llama2_7b_decode.yaml"), "--hw", "hbm_pim", "--set", "stack=vllm",
                 "--set", "gen_len=4"]) == 0
    out, err = capsys.readouterr()
    assert "stack: 'vllm' is ignored" in err and "vllm: ignored (a pim preset costs no software stack)" in out


def test_run_reports_each_simulated_step_to_the_progress_bar():
    from sim.apps.api import load_machine, load_workload, simulate
    from sim.core.generation import DECODE_SAMPLES, STEP_PROGRESS

    seen = []
    token = STEP_PROGRESS.set(lambda done, total: seen.append((done, total)))
    try:
        simulate(load_workload(ROOT / "workloads/llama2_7b_decode.yaml"), load_machine("h200"))
    finally:
        STEP_PROGRESS.reset(token)
    # The prefill and the 9 sampled decode steps, one call each, counting up to the total.
    steps = 1 + DECODE_SAMPLES
    assert seen == [(n, steps) for n in range(1, steps + 1)]


def test_progress_bar_is_silent_off_a_terminal(capsys):
    from sim.apps.progress import bar

    with bar("x", "units", 3) as update:
        update(1)
        update(3)
    assert capsys.readouterr() == ("", "")

"""Issue 34, item 1: inputs are sacred. An output that resolves (after symlinks, or as a
hard link) to a file the same command reads is refused in one line, exit 2, before
anything is written; the input stays byte for byte. Each case overwrote its input before."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from sim.apps.cli import main
from sim.core import files
from sim.core.errors import ConfigError
from tests.conftest import ROOT, write_serving_file
from tests.robust_helpers import TINY_WORKLOAD, refused
from tests.test_robust_serve import SERVE
from tests.test_sweep import make_spec

REFUSAL = "refusing to write an output over an input this command reads"
TRACE = ROOT / "tests" / "data" / "synthetic_cuda_L1"


def _trace_copy(tmp_path):
    for suffix in (".trace.json", ".meta.json"):
        shutil.copy(f"{TRACE}{suffix}", tmp_path / f"t{suffix}")
    return tmp_path / "t.trace.json"


def _serve_with_trace(tmp_path):
    (tmp_path / "req.csv").write_text("arrival_s,prompt_len,output_len\n0,32,4\n0.1,16,3\n")

    def edit(s):
        s.update(arrivals=dict(process="trace"), trace=dict(path="req.csv", format="plain"))
        del s["lengths"]
    return write_serving_file(tmp_path, SERVE, edit)


def _cases(tmp_path):
    """(argv, the input it must not overwrite) for each finding of the issue, and a few more."""
    wl = tmp_path / "wl.yaml"
    wl.write_text(TINY_WORKLOAD)
    serve = write_serving_file(tmp_path, SERVE)
    traced = _serve_with_trace(tmp_path)
    trace = _trace_copy(tmp_path)
    hw = tmp_path / "hw.yaml"
    shutil.copy(ROOT / "hw_models" / "presets" / "a6000.yaml", hw)
    link = tmp_path / "link.json"
    link.symlink_to(serve)
    hard = tmp_path / "hard.json"
    os.link(wl, hard)
    return {
        "serve --json FILE": (["serve", str(serve), "--hw", "a6000", "-q", "--json", str(serve)], serve),
        "serve --requests TRACE": (["serve", str(traced), "--hw", "a6000", "-q", "--requests",
                                    str(tmp_path / "req.csv")], tmp_path / "req.csv"),
        "serve --json via a symlink": (["serve", str(serve), "--hw", "a6000", "-q", "--json", str(link)], serve),
        "serve --chrome-trace HW": (["serve", str(serve), "--hw", str(hw), "-q", "--chrome-trace", str(hw)], hw),
        "run --json via a hard link": (["run", str(wl), "--hw", "a6000", "-q", "--json", str(hard)], wl),
        "run --json WORKLOAD": (["run", str(wl), "--hw", "a6000", "-q", "--json", str(wl)], wl),
        "replay --json TRACE": (["replay", str(trace), "--hw", "a6000", "--json", str(trace)], trace),
        "replay --json its meta": (["replay", str(trace), "--hw", "a6000", "--json",
                                    str(tmp_path / "t.meta.json")], tmp_path / "t.meta.json"),
        "calibrate -o TRACE": (["calibrate", str(trace), "--hw", "a6000", "-o", str(trace)], trace),
        "validate --json TRACE": (["validate", str(trace), "--hw", "a6000", "--json", str(trace)], trace),
    }


@pytest.mark.parametrize("case", ["serve --json FILE", "serve --requests TRACE", "serve --json via a symlink",
                                  "serve --chrome-trace HW", "run --json via a hard link", "run --json WORKLOAD",
                                  "replay --json TRACE", "replay --json its meta", "calibrate -o TRACE",
                                  "validate --json TRACE"])
def test_an_output_over_an_input_is_refused(tmp_path, capsys, case):
    argv, victim = _cases(tmp_path)[case]
    line = refused(capsys, argv, tmp_path)   # the folder, the input included, is untouched
    assert REFUSAL in line, line
    assert victim.name in line or os.path.realpath(victim) in line


def test_a_model_config_read_later_is_protected_too(tmp_path, capsys):
    shutil.copy(ROOT / "tests" / "data" / "tiny_config.json", tmp_path / "config.json")
    f = write_serving_file(tmp_path, {**SERVE, "model": "config.json"})
    assert REFUSAL in refused(capsys, ["serve", str(f), "--hw", "a6000", "-q", "--json",
                                       str(tmp_path / "config.json")], tmp_path)


def test_sweep_export_into_its_own_store_is_refused(tmp_path, capsys):
    spec = make_spec(tmp_path, {"workload.batch": [1, 2]})
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "-q", "--no-plots", "--workers", "1"]) == 0
    store = tmp_path / "out" / "results.sqlite"
    line = refused(capsys, ["sweep", "export", str(tmp_path / "out"), "--csv", str(store)], tmp_path)
    assert REFUSAL in line
    assert main(["sweep", "export", str(tmp_path / "out"), "--csv", str(tmp_path / "r.csv")]) == 0   # still a database


def test_an_unrelated_output_is_written_and_tracking_ends_with_the_command(tmp_path):
    wl = tmp_path / "wl.yaml"
    wl.write_text(TINY_WORKLOAD)
    assert main(["run", str(wl), "--hw", "a6000", "-q", "--json", str(tmp_path / "o.json")]) == 0
    files.write_json(wl, {"a": 1})   # outside a command nothing is tracked: library callers may overwrite
    assert wl.read_text().strip().startswith("{")


def test_the_helper_refuses_inside_a_guard_only(tmp_path):
    src = tmp_path / "in.yaml"
    src.write_text("x: 1\n")
    with files.guard_inputs():
        files.note_input(src)
        with pytest.raises(ConfigError, match=REFUSAL):
            files.check_output(src)
        with pytest.raises(ConfigError, match=REFUSAL):
            files.write_json(src, {})
        files.check_output(tmp_path / "other.json")
    assert src.read_text() == "x: 1\n"
    files.check_output(src)


def test_survey_writes_nothing_when_a_late_section_fails(tmp_path, capsys, monkeypatch):
    # An empty --shared folder made the measured section fail after the plots were written.
    import sim.apps.survey.build as build

    def failing(setup, repo, shared, plots, doc, *options):   # options: update_docs, the progress hook
        files.atomic_write(plots / "early.png", lambda p: p.write_bytes(b"png"))
        raise ConfigError(f"--shared {shared}: no RTX A6000 traces")
    monkeypatch.setattr(build, "build", failing)
    (tmp_path / "empty").mkdir()
    refused(capsys, ["survey", "--hw", "a6000", "--quick", "--shared", str(tmp_path / "empty"),
                     "--out", str(tmp_path / "plots")], tmp_path)


def test_survey_names_an_empty_shared_folder(tmp_path):
    from sim.apps.survey.measured import a6000_layer_table

    with pytest.raises(ConfigError, match=r"--shared .*: no RTX A6000 traces in"):
        a6000_layer_table(tmp_path)


# ---------------------------------------------------------------- item 2: sweeps key on content

def _serving_sweep(tmp_path, serving_edit, hw="a6000", model=None):
    import yaml

    from tests.test_sweep_serving import SERVE as SWEEP_SERVE, TINY_MODEL

    raw = json.loads(json.dumps(SWEEP_SERVE))
    raw["model"] = model or TINY_MODEL
    serving_edit(raw["serving"])
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(raw))
    spec = dict(name="s", workload="serve.yaml", hw=hw, axes={"workload.serving.scheduler.kind": ["vllm"]},
                metrics=["ttft_p90_s"])
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec))
    return tmp_path / "sweep.yaml"


def _run(spec, out):
    import concurrent.futures as cf

    from sim.apps.sweep import load_results
    from sim.apps.sweep.run import run_sweep

    with cf.ThreadPoolExecutor(1) as ex:   # in-process: no fork for one small point
        s = run_sweep(spec, out, executor=ex, progress=False, plots=False)
    return s, load_results(out).iloc[0]


def _trace_stream(s):
    s.update(arrivals=dict(process="trace"), trace=dict(path="req.csv", format="plain"))
    del s["lengths"]


def _histogram(s):
    s["lengths"]["prompt"] = dict(dist="histogram", path="hist.csv")


# each: (the serving edit, the file, its first content, the changed content, the hardware, the model,
# a metric the change must raise: longer prompts batch more tokens per iteration; 8x the layers or
# a thousandth of the bandwidth make the first token later)
CHANGES = {
    "replayed trace": (_trace_stream, "req.csv", "arrival_s,prompt_len,output_len\n" + "0,16,2\n" * 20,
                       "arrival_s,prompt_len,output_len\n" + "0,400,2\n" * 20, "a6000", None,
                       "tokens_per_iteration_mean"),
    "length histogram": (_histogram, "hist.csv", "length,count\n16,1\n", "length,count\n400,1\n", "a6000", None,
                         "tokens_per_iteration_mean"),
    "model config.json": (lambda s: None, "config.json", None, None, "a6000", "config.json", "ttft_mean_s"),
    "hardware YAML": (lambda s: None, "hw.yaml", None, None, "hw.yaml", None, "ttft_mean_s"),
}


@pytest.mark.parametrize("case", list(CHANGES))
def test_a_sweep_reruns_a_point_whose_file_changed_content(tmp_path, case):
    # Each file changed content at the same path; the sweep reported the stored (old) numbers.
    import yaml

    edit, name, first, second, hw, model, metric = CHANGES[case]
    if name == "config.json":
        cfg = json.loads((ROOT / "tests" / "data" / "tiny_config.json").read_text())
        first = json.dumps(cfg)
        second = json.dumps({**cfg, "num_hidden_layers": cfg["num_hidden_layers"] * 8})   # 8x the layers
    if name == "hw.yaml":
        raw = yaml.safe_load((ROOT / "hw_models" / "presets" / "a6000.yaml").read_text())
        first = yaml.safe_dump(raw)
        tier = raw["memory"]["hbm"] if "hbm" in raw["memory"] else next(iter(raw["memory"].values()))
        number, unit = str(tier["bandwidth_bytes_per_s"]).split(maxsplit=1)   # "768 GB/s"
        tier["bandwidth_bytes_per_s"] = f"{float(number) / 1000:g} {unit}"   # a thousandth: the tiny model feels it
        second = yaml.safe_dump(raw)
    (tmp_path / name).write_text(first)
    spec = _serving_sweep(tmp_path, edit, hw=str(tmp_path / hw) if hw.endswith(".yaml") else hw, model=model)
    s1, row1 = _run(spec, tmp_path / "out")
    assert (s1.ran, s1.changed) == (1, [])
    s2, _ = _run(spec, tmp_path / "out")
    assert (s2.ran, s2.skipped) == (0, 1)                  # unchanged: reused
    (tmp_path / name).write_text(second)
    s3, row3 = _run(spec, tmp_path / "out")
    assert (s3.ran, s3.skipped) == (1, 0), case            # a new point, not the stale row
    assert s3.changed == [os.path.realpath(tmp_path / name)]
    assert row3[metric] > 1.5 * row1[metric], (row1[metric], row3[metric])   # the new content's numbers


def test_the_sweep_command_reports_a_changed_file(tmp_path, capsys):
    (tmp_path / "hist.csv").write_text("length,count\n16,1\n")
    spec = _serving_sweep(tmp_path, _histogram)
    argv = ["sweep", str(spec), "--out", str(tmp_path / "out"), "--workers", "1", "--no-plots"]
    assert main(argv) == 0
    (tmp_path / "hist.csv").write_text("length,count\n32,1\n")
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"{os.path.realpath(tmp_path / 'hist.csv')}: changed since the stored rows; the points that read it ran again" in err

"""A sweep file's `metrics:` names what its points record: an unknown name is refused before any point runs, in one
line naming the file and the entry (it was dropped with exit 0); a name of the other kind of point (a run metric in
a serving sweep, or the reverse) says so; a serving sweep without `metrics:` ranks serving metrics."""

from __future__ import annotations

import concurrent.futures as cf
import warnings

import pytest
import yaml

from hw_models.machine import load_machine
from sim.apps.cli import main
from sim.apps.serve.run import serve
from sim.apps.serve.spec import serve_file_from_dict
from sim.apps.sweep.names import recorded
from hw_models.power import board_columns
from sim.apps.sweep.point import run_metrics
from sim.apps.sweep.serving import flat_metrics
from tests.robust_helpers import refused
from tests.test_sweep import TINY, make_spec
from tests.test_sweep_serving import SERVE


def _serving_spec(tmp_path, **extra):
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(SERVE))
    spec = tmp_path / "sweep.yaml"
    spec.write_text(yaml.safe_dump(dict(name="s", workload="serve.yaml", hw="a6000",
                                        axes={"workload.serving.arrivals.rate": [200]}, **extra)))
    return spec


@pytest.mark.parametrize("serving, metrics, tail", [
    (False, ["tpot_s", "peak_power_per_device_w"],
     "metrics[1]: 'peak_power_per_device_w' is a metric of `sim serve` points only; this sweep's points run "
     "`sim run` (the workload is not a serving file); theirs: ttft_s, tpot_s,"),
    (True, ["avg_power_per_device_w", "tpot_s"],
     "metrics[1]: 'tpot_s' is a metric of `sim run` points only; this sweep's points run `sim serve` (the workload "
     "is a serving file); theirs: <ttft|tpot|tbt|e2e|queue>_<mean|p50|p90|p99|max>_s,"),
    (False, ["tpot_ms"], "metrics[0]: unknown metric 'tpot_ms' (did you mean 'tpot_s'?); known: ttft_s, tpot_s,"),
    (True, ["avg_power_w"], "metrics[0]: unknown metric 'avg_power_w' (did you mean 'avg_power_per_device_w'?); "
     "known: <ttft|tpot|tbt|e2e|queue>"),
    (False, ["utilization."], "metrics[0]: unknown metric 'utilization.'"),   # a family needs a member
])
def test_a_metric_the_points_never_record_is_refused_before_any_runs(tmp_path, capsys, serving, metrics, tail):
    spec = _serving_spec(tmp_path, metrics=metrics) if serving else make_spec(tmp_path, {"workload.batch": [1]},
                                                                              metrics=metrics)
    line = refused(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out"), "-q"], tmp_path)
    assert line.startswith(f"error: {spec}: {tail}"), line
    assert not (tmp_path / "out").exists()


def test_family_members_and_both_kinds_names_are_accepted(tmp_path, capsys, monkeypatch):
    """Which `utilization.<resource>` or `<kind>.<figure>` a point records depends on its hardware: any member goes
    (one no point recorded is warned after the run, as before); the power-cap columns are in both kinds."""
    monkeypatch.setattr("sim.apps.sweep.run.make_executor", lambda executor, workers: cf.ThreadPoolExecutor(1))
    spec = make_spec(tmp_path, {"workload.batch": [1]},
                     metrics=["tpot_s", "utilization.gpu", "spatial.chips", "power_cap_binds"])
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning")]
    assert warned == [f"warning: {spec}: metrics[2]: 'spatial.chips' is not a column of the results; left out"]


def test_a_serving_sweep_without_metrics_ranks_serving_metrics(tmp_path, capsys, monkeypatch):
    """The spec's default list names run metrics (tpot_s, ttft_s): a serving sweep without `metrics:` warned that
    each was left out and plotted only the two names both kinds share."""
    monkeypatch.setattr("sim.apps.sweep.run.make_executor", lambda executor, workers: cf.ThreadPoolExecutor(1))
    spec = _serving_spec(tmp_path)
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err and "min TTFT p90" in err and "min TPOT p90" in err
    assert {p.name.split("_vs_")[0] for p in (tmp_path / "out" / "plots").glob("line_*.png")} == {
        "line_ttft_p90_s", "line_tpot_p90_s", "line_throughput_tok_s", "line_energy_per_token_j"}


@pytest.mark.parametrize("hw", ["a6000", "h100_sxm", "h100_offload", "groq_lpu", "hbm_pim"])
def test_every_column_a_point_records_is_a_known_name(hw):
    """The names check_metrics accepts cover what the points record (RunResult.metrics() lives outside the sweep:
    a new metric there must be named in sim.apps.sweep.names too), each kind's only."""
    machine = load_machine(hw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = dict(workload=TINY, workload_source="tiny.yaml")
        cols = {**run_metrics(config, machine), **board_columns(machine)}
    assert [c for c in cols if not recorded(c, serve=False)] == []
    if hw in ("a6000", "h100_sxm"):
        _, summary = serve(serve_file_from_dict(SERVE, "serve.yaml"), machine)
        cols = {**flat_metrics(summary), **board_columns(machine)}
        assert [c for c in cols if not recorded(c, serve=True)] == []

"""Serving points in the sweep machinery: a sweep whose workload is a serving file runs
sim.apps.serve per point, records the flat summary, resumes, and reports bad axes and
failing points as the other sweeps do."""

from __future__ import annotations

import concurrent.futures as cf
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from hw_models.machine import load_machine
from sim.apps.serve.timeline import kv_timeline
from sim.apps.serve.run import serve
from sim.apps.serve.spec import load_serve_file
from sim.apps.sweep import load_results
from sim.apps.sweep.run import run_sweep
from sim.apps.sweep.plots import compact_labels
from sim.apps.sweep.serving import flat_metrics
from sim.apps.sweep.store import load_series
from sim.core.errors import ConfigError

TINY_MODEL = dict(name="tiny", hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=256, max_position_embeddings=512)
SERVE = dict(name="tiny_serve", model=TINY_MODEL, flash_attention=True,
             serving=dict(arrivals=dict(process="poisson", rate=100, num_requests=24, seed=1),
                          lengths=dict(prompt=dict(dist="uniform", low=16, high=128),
                                       output=dict(dist="uniform", low=2, high=24)),
                          scheduler=dict(kind="vllm", max_num_batched_tokens=512),
                          slo=dict(ttft_p90=0.001)))
RATE = "workload.serving.arrivals.rate"


def make(tmp: Path, axes: dict, **extra) -> Path:
    (tmp / "serve.yaml").write_text(yaml.safe_dump(SERVE))
    plots = [dict(kind="line", x=RATE, y="ttft_p90_s", lines="workload.serving.scheduler.kind", file="ttft_vs_rate"),
             dict(kind="line", x=RATE, y="throughput_tok_s", file="throughput_vs_rate")]
    spec = dict(name="s", workload="serve.yaml", hw="a6000", axes=axes,
                metrics=["ttft_p90_s", "throughput_tok_s", "goodput_req_s"], **{"plots": plots, **extra})
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def sweep(path: Path, out: Path, plots: bool = False):
    with cf.ThreadPoolExecutor(1) as ex:   # in-process: no fork for a few small points
        return run_sweep(path, out, executor=ex, progress=False, plots=plots)


def test_serving_points_record_what_serve_gives(tmp_path):
    path = make(tmp_path, {RATE: [200, 2000], "workload.serving.scheduler.kind": ["vllm", "sarathi"]})
    s = sweep(path, tmp_path / "out", plots=True)
    assert (s.total, s.ran, s.failed) == (4, 4, 0)
    assert {p.name for p in (tmp_path / "out" / "plots").iterdir()} == {"ttft_vs_rate.png", "throughput_vs_rate.png",
                                                                         "kv_usage_timeline.png"}
    df = load_results(tmp_path / "out")
    series = load_series(tmp_path / "out", df["key"])
    assert set(series) == set(df["key"])
    a6000 = load_machine("a6000")
    for _, row in df.iterrows():
        f = load_serve_file(tmp_path / "serve.yaml", {"serving.arrivals.rate": row[RATE],
                                                      "serving.scheduler.kind": row["workload.serving.scheduler.kind"]})
        want = flat_metrics(serve(f, a6000)[1])
        for key in ("ttft_p90_s", "tpot_mean_s", "throughput_tok_s", "goodput_req_s", "slo_ttft_p90", "completed",
                    "utilization.gpu.memory"):
            assert row[key] == pytest.approx(want[key], rel=1e-9), key
        kv = series[row["key"]]["kv_usage"]
        assert len(kv["t_s"]) == len(kv["kv_share"]) == 200 and 0 < max(kv["kv_share"]) <= 1
        assert row["completed"] == 24 and row["goodput_req_s"] <= row["throughput_req_s"]
    for kind, g in df.groupby("workload.serving.scheduler.kind"):   # same seed: TTFT does not fall as rate rises
        g = g.sort_values(RATE)
        assert g["ttft_mean_s"].is_monotonic_increasing, kind


def test_serving_sweep_resumes_and_reports_failures(tmp_path):
    out = tmp_path / "out"
    path = make(tmp_path, {RATE: [200, 400]})
    assert sweep(path, out).ran == 2
    path = make(tmp_path, {RATE: [200, 400, 800]})
    s = sweep(path, out)
    assert (s.skipped, s.ran) == (2, 1)
    # A point whose KV pool cannot exist: its row is an error, the other runs.
    path = make(tmp_path, {"workload.serving.scheduler.gpu_memory_utilization": [1e-6, 0.9]})
    sweep(path, tmp_path / "cap")
    df = load_results(tmp_path / "cap").set_index("workload.serving.scheduler.gpu_memory_utilization")
    assert df.loc[1e-6, "status"] == "error" and "CapacityError" in df.loc[1e-6, "error"]
    assert df.loc[0.9, "status"] == "ok"


@pytest.mark.parametrize("axes, match", [({"workload.serving.arrivals.rat": [1]}, "rat"),
                                         ({RATE: [-1.0]}, "rate"),
                                         ({"workload.servng.arrivals.rate": [1]}, "servng")])
def test_bad_serving_axis_is_one_line(tmp_path, axes, match):
    with pytest.raises(ConfigError, match=match) as exc:
        sweep(make(tmp_path, axes), tmp_path / "out")
    assert "sweep.yaml" in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "out").exists()


def test_mapping_valued_axis_is_plotted_with_compact_labels(tmp_path):
    """Sweeping serving.scheduler over mappings: the plots group by them (they crashed: a dict is unhashable)."""
    scheds = [dict(kind="vllm", max_num_batched_tokens=512), dict(kind="sarathi", max_num_batched_tokens=64)]
    path = make(tmp_path, {RATE: [200, 400], "workload.serving.scheduler": scheds},
                plots=[dict(kind="line", x=RATE, y="ttft_p90_s", lines="workload.serving.scheduler", file="by_sched")])
    s = sweep(path, tmp_path / "out", plots=True)
    assert (s.ran, s.failed) == (4, 0)
    assert {p.name for p in (tmp_path / "out" / "plots").iterdir()} == {"by_sched.png", "kv_usage_timeline.png"}


def test_compact_labels():
    """The keys that differ, flattened; lists as JSON; other values untouched."""
    assert compact_labels([{"kind": "vllm", "block_size": 16}, {"kind": "sarathi", "block_size": 16}]) == \
        ["kind=vllm", "kind=sarathi"]
    assert compact_labels([{"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}}]) == ["a.c=2", "a.c=3"]
    assert compact_labels([{"x": 1}]) == ["x=1"]               # nothing differs: every key
    assert compact_labels([[1, 2], "h100", 3]) == ["[1, 2]", "h100", 3]


def test_kv_timeline_by_hand():
    """Iterations start at 1 s (10 blocks in use) and 3 s (20 blocks), the run ends at 5 s, pool 100:
    over [0, 2.5] the mean is 1.5 x 10 / 2.5 = 6 blocks, over [2.5, 5] (0.5 x 10 + 2 x 20) / 2.5 = 18."""
    res = SimpleNamespace(iterations={"start_s": np.array([1.0, 3.0]), "kv_blocks_used": np.array([10.0, 20.0])},
                          makespan_s=5.0, total_blocks=100)
    kv = kv_timeline(res, bins=2)
    assert kv["t_s"] == pytest.approx([1.25, 3.75]) and kv["kv_share"] == pytest.approx([0.06, 0.18])
    assert kv_timeline(res, bins=5)["kv_share"] == pytest.approx([0.0, 0.1, 0.1, 0.2, 0.2])

"""An energy researcher's trial of `sim sweep`: a power-cap study plotted from results.csv. Serving points record the
`sim serve` summary's energy block (power per device, joules by phase, a binding cap), run points the same cap
columns; a line whose points hold no value of the plotted metric is named, not dropped; axis labels say the
unit once ("power limit (W)", not "units @main power limit w")."""

from __future__ import annotations

import concurrent.futures as cf
import io
from pathlib import Path

import pandas as pd
import pytest
import yaml
from matplotlib.colors import to_rgba
from rich.console import Console

from hw_models.machine import load_machine
from sim.apps.mpl import pyplot
from sim.apps.serve.run import serve
from sim.apps.serve.spec import serve_file_from_dict
from sim.apps.sweep import load_results
from sim.apps.sweep import plots as sweep_plots
from sim.apps.sweep.cli import best_table
from sim.apps.sweep.labels import axis_for, fmt_value
from sim.apps.sweep.run import run_sweep
from sim.apps.sweep.spec import Plot
from tests.test_sweep import make_spec
from tests.test_sweep_serving import SERVE

LIMIT = "hw.units.@main.power_limit_w"


def _sweep(path: Path, out: Path, plots: bool = False) -> None:
    with cf.ThreadPoolExecutor(1) as ex:   # in-process: a few small points
        run_sweep(path, out, executor=ex, progress=False, plots=plots)


@pytest.fixture
def figures(monkeypatch):
    """The figures the sweep's plot functions would save, kept open for inspection."""
    kept: list = []
    monkeypatch.setattr(sweep_plots, "_save", lambda fig, path: kept.append(fig) or path)
    yield kept
    for fig in kept:
        pyplot().close(fig)


# ---------------------------------------------------------------- 1: what the points record

def test_serving_points_record_the_energy_block_of_sim_serve(tmp_path):
    """The tiny model's stream on an H100 under a 150 W limit (it binds: the board draws up to ~350 W at full clock)
    and the 700 W TDP (it does not): each row's energy columns are `sim serve`'s summary, units in the names."""
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(SERVE))
    spec = tmp_path / "sweep.yaml"
    spec.write_text(yaml.safe_dump(dict(name="cap", workload="serve.yaml", hw="h100_sxm", axes={LIMIT: [150, 700]},
                                        metrics=["avg_power_per_device_w", "energy_per_token_j"])))
    _sweep(spec, tmp_path / "out")
    df = pd.read_csv(tmp_path / "out" / "results.csv").set_index(LIMIT)
    for limit in (150, 700):
        e, row = _energy(tmp_path, limit), df.loc[limit]
        want = {"total_energy_j": e["total_j"], "energy_per_request_j": e["per_request_j"], "devices": 1,
                "avg_power_per_device_w": e["avg_power_per_device_w"],
                "peak_power_per_device_w": e["peak_power_per_device_w"],
                "prefill_energy_j": e["by_phase_j"]["prefill"], "decode_energy_j": e["by_phase_j"]["decode"],
                "idle_energy_j": e["by_phase_j"]["idle"], "power_cap_limit_w": limit,
                # J per output token: one column, named as a run point names it
                "energy_per_token_j": e["per_output_token_j"], "energy_board_model": 1}
        for col, value in want.items():
            assert row[col] == pytest.approx(value, rel=1e-9), (limit, col)
    # the tiny model's ops are memory- or launch-bound: 150 W lowers the clock (binds) and adds no time
    assert df.loc[150, "power_cap_binds"] == 1 and df.loc[150, "power_cap_added_s"] == pytest.approx(
        _energy(tmp_path, 150)["power_cap"]["added_s"], abs=1e-12)
    assert df.loc[150, "power_cap_stretch"] == pytest.approx(_energy(tmp_path, 150)["power_cap"]["stretch"], rel=1e-9)
    assert df.loc[150, "peak_power_per_device_w"] == pytest.approx(150, rel=1e-6)   # held at the limit
    assert (df.loc[700, "power_cap_binds"], df.loc[700, "power_cap_added_s"], df.loc[700, "power_cap_stretch"]) == (0, 0, 0)


def _energy(tmp_path: Path, limit: float) -> dict:
    """`sim serve`'s energy block for the sweep's serving file on an H100 under `limit` watts."""
    _, s = serve(serve_file_from_dict(SERVE, str(tmp_path / "serve.yaml")),
                 load_machine("h100_sxm", {"units.gpu.power_limit_w": limit}))
    return s["energy"]


def test_run_points_record_the_same_cap_columns(tmp_path):
    """A `sim run` sweep over the limit names a binding cap with the serving points' columns; the per-phase
    stretch is the run's own (hw_models.power.cap_figures); a preset without the board-power model has no limit."""
    path = make_spec(tmp_path, {"hw": ["h100_sxm"], LIMIT: [130, 700], "workload.batch": [8]})
    _sweep(path, tmp_path / "out")
    df = load_results(tmp_path / "out").set_index(LIMIT)
    assert df.loc[130, "power_cap_binds"] == 1
    # decode runs at a lowered clock (memory-bound ops keep their time, hw_models.clock); never faster
    assert df.loc[130, "decode_power_cap_clock"] < 1.0 and df.loc[130, "tpot_s"] >= df.loc[700, "tpot_s"]
    assert df.loc[700, "decode_power_cap_clock"] == 1.0
    assert list(df["power_cap_limit_w"]) == [130, 700]
    busy = make_spec(tmp_path, {"workload.batch": [1]})
    busy.write_text(busy.read_text().replace("hw: a6000", "hw: l40s"))   # l40s: busy-time power, no cap
    _sweep(busy, tmp_path / "l40s")
    row = load_results(tmp_path / "l40s").iloc[0]
    assert (row["energy_board_model"], row["power_cap_binds"], row["power_cap_added_s"]) == (0, 0, 0)
    assert "power_cap_limit_w" not in row.index


# ---------------------------------------------------------------- 3: a line without values

def _energy_frame() -> pd.DataFrame:
    """a6000 ran at batch 1 and 4 without the board-power model (no decode J/token) and failed at 16; h100 ran all."""
    rows = [{"hw": "a6000", "workload.batch": b, "status": "ok", "decode_energy_per_token_j": float("nan"),
             "energy_board_model": 0.0} for b in (1, 4)]
    rows.append({"hw": "a6000", "workload.batch": 16, "status": "error", "error": "CapacityError: no room"})
    rows += [{"hw": "h100_sxm", "workload.batch": b, "status": "ok", "decode_energy_per_token_j": 2.0 / b,
              "energy_board_model": 1.0} for b in (1, 4, 16)]
    return pd.DataFrame(rows)


def test_a_line_without_values_is_named_in_its_colour(figures, tmp_path):
    p = Plot(kind="line", x="workload.batch", y="decode_energy_per_token_j", lines="hw")
    sweep_plots.line(_energy_frame(), p, "t", tmp_path / "l.png")
    ax = figures[0].axes[0]
    entries = dict(zip([t.get_text() for t in ax.get_legend().get_texts()], ax.get_legend().legend_handles))
    note = "hardware = a6000: no decode energy per token (no board-power model)"
    assert note in entries and "hardware = h100_sxm" in entries
    # a6000's failed point is drawn in the colour its legend entry shows (it was black, with no entry)
    failed = next(c for c in ax.collections if c.get_label().startswith("not run"))
    colour = entries[note].get_color()
    assert tuple(failed.get_facecolors()[0]) == pytest.approx(to_rgba(colour))
    assert [ln.get_label() for ln in ax.get_lines() if len(ln.get_xdata())] == ["hardware = h100_sxm"]


def test_a_plot_whose_only_line_has_no_values_says_so(figures, tmp_path):
    df = _energy_frame()
    df = df[df["hw"] == "a6000"]
    sweep_plots.line(df, Plot(kind="line", x="workload.batch", y="decode_energy_per_token_j"), "t", tmp_path / "l.png")
    legend = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
    assert "no decode energy per token (no board-power model)" in legend
    sweep_plots.line(df.assign(tpot_s=float("nan")), Plot(kind="line", x="workload.batch", y="tpot_s", lines="hw"),
                     "t", tmp_path / "m.png")
    legend = [t.get_text() for t in figures[1].axes[0].get_legend().get_texts()]
    assert "hardware = a6000: no TPOT (not recorded for these points)" in legend


# ---------------------------------------------------------------- 4: labels

@pytest.mark.parametrize("col, values, label", [
    (LIMIT, [300, 700], "power limit (W)"),
    ("hw.units.@main.power_w", [700], "power (W)"),
    ("avg_power_per_device_w", [450], "average power per device (W)"),
    ("decode_energy_per_token_j", [2.0], "decode energy per token (J)"),
    ("decode_energy_per_token_j", [0.2], "decode energy per token (mJ)"),
    ("total_energy_j", [3000], "total energy (J)"),
    ("ttft_p90_s", [0.1], "TTFT p90 (ms)"),
    ("power_cap_added_s", [3.0], "power cap added (s)"),
    ("tpot_s", [0.01], "TPOT (ms)"),
    ("hw.memory.@device.bandwidth_bytes_per_s", [2e12], "device memory bandwidth (TB/s)"),
    ("hw.links.nvlink.bytes_per_s", [9e11], "links nvlink bandwidth (GB/s)"),
    ("goodput_tok_s", [10], "goodput (tokens/s)"),
    ("workload.serving.arrivals.rate", [3], "arrival rate (requests/s)"),
    ("workload.batch", [4], "batch (sequences)"),
])
def test_a_label_says_the_unit_once(col, values, label):
    assert axis_for(col, values).label == label


def test_plot_axes_and_the_best_table_read_naturally(figures, tmp_path):
    df = pd.DataFrame([{LIMIT: w, "status": "ok", "decode_energy_per_token_j": 300 / w} for w in (300, 500, 700)])
    sweep_plots.line(df, Plot(kind="line", x=LIMIT, y="decode_energy_per_token_j"), "t", tmp_path / "l.png")
    ax = figures[0].axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("power limit (W)", "decode energy per token (J)")
    assert sweep_plots.title_for("s", Plot(kind="line", x=LIMIT, y="avg_power_per_device_w"), []) == (
        "s: average power per device vs power limit")
    assert fmt_value(LIMIT, 700) == "700 W"
    spec = type("Spec", (), dict(name="s", axes=[LIMIT], metrics=["decode_energy_per_token_j"]))
    buf = io.StringIO()
    Console(file=buf, width=100).print(best_table(spec, df, len(df)))
    assert "power limit (W)" in buf.getvalue() and "min decode energy per token" in buf.getvalue()


def test_the_best_table_names_every_point_that_ties():
    """An energy trial: 300, 400 and 700 W gave the same decode J/token (the cap bound at none), and the best-points
    table named 300 W alone, read as the best limit. Tied points are counted and every value their axes take named;
    a point alone stays as it was."""
    df = pd.DataFrame([{LIMIT: w, "workload.batch": b, "status": "ok",
                        "decode_energy_per_token_j": 0.27194 if w >= 300 else 0.3, "tpot_s": 0.01 * 700 / w + b}
                       for w in (200, 300, 400, 700) for b in (16,)])
    spec = type("Spec", (), dict(name="s", axes=[LIMIT, "workload.batch"],
                                 metrics=["decode_energy_per_token_j", "tpot_s"]))
    buf = io.StringIO()
    Console(file=buf, width=160).print(best_table(spec, df, len(df)))
    lines = buf.getvalue().splitlines()
    energy = next(ln for ln in lines if "min decode energy per token" in ln)
    assert "(3 points tie)" in energy and "300, 400, 700" in energy
    tpot = next(ln for ln in lines if "min TPOT" in ln)
    assert "tie" not in tpot and "│ 700 " in tpot
    # tied points differing on two axes: their cells say so, where lists would read as every combination (a review)
    two = pd.DataFrame([{LIMIT: w, "workload.batch": b, "status": "ok", "decode_energy_per_token_j": 0.5}
                        for w, b in ((300, 16), (400, 32))])
    buf = io.StringIO()
    Console(file=buf, width=160).print(best_table(type("Spec", (), dict(name="s", axes=[LIMIT, "workload.batch"],
                                                                      metrics=["decode_energy_per_token_j"])), two, 2))
    row = next(ln for ln in buf.getvalue().splitlines() if "min decode energy" in ln)
    assert "(2 points tie: results.csv lists them)" in row and row.count("(varies)") == 2


# ---------------------------------------------------------------- 4: a sweep architect's trial (stop 67)

def test_a_binding_cap_is_said_in_the_sweep_summary(tmp_path):
    """Doubling an H100's fp16 peak moved a batch-16 TTFT 384.7 -> 332.9 ms where the roofline said 301 -> 170: the
    700 W cap held 40 of 48 points and the summary said nothing (a trial). Under a 130 W limit every point binds."""
    from sim.apps.sweep.energy import cap_caveats

    path = make_spec(tmp_path, {"hw": ["h100_sxm"], LIMIT: [130, 5000], "workload.batch": [8]})
    _sweep(path, tmp_path / "out")
    df = load_results(tmp_path / "out")
    assert list(df.sort_values(LIMIT)["power_cap_binds"]) == [1, 0]
    [note] = [n for n in cap_caveats(df, [LIMIT]) if n.startswith("power cap: the board limit binds")]
    assert note.startswith("power cap: the board limit binds in 1 of 2 points (power_cap_binds 1")
    assert not [n for n in cap_caveats(df[df[LIMIT] == 5000], [LIMIT]) if "binds in" in n]


def test_the_pareto_star_and_the_heatmap_name_what_they_hide(tmp_path, figures):
    """The Pareto star read 'a6000' for an a6000 at 2x bandwidth with int4 weights; a heatmap cell took the best over
    a third axis without a word (a trial). The star names the point's varying axis values, the title the axes a cell
    is the best over."""
    path = make_spec(tmp_path, {"hw": ["a6000", "h100_sxm"], "workload.formats.weights": ["fp16", "int4"]},
                     plots=[dict(kind="pareto", x="hw.price_usd", y="tpot_s", label="hw"),
                            dict(kind="heatmap", x="workload.formats.weights", y="workload.batch", z="tpot_s")])
    _sweep(path, tmp_path / "out", plots=True)
    labels = [t.get_text() for fig in figures for ax in fig.axes if ax.get_legend() for t in ax.get_legend().texts]
    [star] = [t for t in labels if t.startswith("best trade-off")]
    assert "\nat hardware a6000, weight format int4" in star
    titles = [ax.get_title() for fig in figures for ax in fig.axes]
    assert any("each cell the min over hardware" in t for t in titles)


def test_line_and_heatmap_bests_rank_board_power_rows_first():
    """An architect's trial: a sweep over [ipu_bow, a100_80g] starred ipu_bow's busy-time J/token (1.52 J) in its line
    and heatmap, where the best-points table ranked a100_80g's 1.70 J. At each x (and in each cell) a board-power row
    comes before a busy-time one; a group with busy-time rows alone keeps its own best."""
    from sim.apps.sweep.energy import best_per, cell_tables

    df = pd.DataFrame({"hw": ["ipu_bow", "a100_80g", "ipu_bow", "a100_80g", "ipu_bow"],
                       "workload.batch": [1, 1, 2, 2, 4], "workload.prompt_len": [512] * 5,
                       "energy_per_token_j": [1.52, 1.70, 0.80, 0.95, 0.40],
                       "energy_board_model": [0, 1, 0, 1, 0]})
    best = best_per(df, ["workload.batch"], "energy_per_token_j", "min")
    assert list(best["hw"]) == ["a100_80g", "a100_80g", "ipu_bow"]   # batch 4 has the busy-time row alone
    assert list(best_per(df, ["workload.batch"], "energy_per_token_j", "max")["hw"])[:2] == ["a100_80g", "a100_80g"]
    table, ranked, among = cell_tables(df, "workload.prompt_len", "workload.batch", "energy_per_token_j", "min")
    assert among == " (board-power rows)"
    assert table.loc[512].tolist() == [1.70, 0.95, 0.40]
    assert ranked.loc[512, 4] != ranked.loc[512, 4] and ranked.loc[512, 2] == 0.95   # the star can't take batch 4
    # a metric the two models compare on (not energy or power): plain best
    df["tpot_s"] = [2.0, 3.0, 2.0, 3.0, 2.0]
    assert list(best_per(df, ["workload.batch"], "tpot_s", "min")["hw"]) == ["ipu_bow"] * 3


def test_a_point_records_the_list_price_of_the_devices_it_spans():
    """A capacity planner's trial plotted cost against TPOT with hw.price_usd, one device's price: an 8-GPU a100 plan
    ($120,000) read $15,000 and took the Pareto star from a 2-GPU h100 one ($60,000). plan_price_usd is the preset's
    price x the point's devices, run and serving points alike; a preset with no price records none."""
    from sim.apps.sweep.point import run_point

    def row(hw: str, serving: bool, **extra):
        m = load_machine(hw)
        w = dict(name="t", model="tinyllama-1.1b", batch=1, prompt_len=32, gen_len=2, **extra)
        if serving:
            w.pop("batch"), w.pop("prompt_len"), w.pop("gen_len")
            w["serving"] = dict(arrivals=dict(process="constant", rate=1, num_requests=2),
                                lengths=dict(prompt=dict(dist="fixed", value=32), output=dict(dist="fixed", value=2)))
        out = run_point(dict(workload=w, workload_source="t.yaml", machine=m.model_dump(mode="json", exclude={"source"}),
                             machine_source=m.source, serving=serving))
        assert out["status"] == "ok", out
        return out["metrics"]

    tp2 = {"parallel": {"tp": 2, "topology": "dgx_h100"}}
    for serving in (False, True):
        assert row("h100_sxm", serving, **tp2)["plan_price_usd"] == 2 * 30000.0
        assert row("a100_80g", serving)["plan_price_usd"] == 15000.0
        assert "plan_price_usd" not in row("b200", serving)


def test_pim_rows_ranked_on_energy_are_said_to_lack_their_units_own_power():
    """An architecture trial: a sweep over GPU, PIM, spatial and offload presets named hbm_pim the least energy
    per token without saying that its PIM units draw no static or activity power in the model (docs/pim.md)."""
    import numpy as np
    import pandas as pd

    from sim.apps.sweep.energy import pim_note

    rows = pd.DataFrame({"hw": ["h100_sxm", "hbm_pim"], "energy_per_token_j": [5.85, 3.96], "tpot_s": [0.013, 0.018],
                         "pim.utilization": [np.nan, 0.4]})
    (note,) = pim_note(rows, ["tpot_s", "energy_per_token_j"])
    assert note.startswith("note: 1 PIM row(s) (hbm_pim): their PIM units draw no static or activity power")
    assert pim_note(rows, ["tpot_s"]) == []                        # no energy figure ranked
    assert pim_note(rows[rows.hw == "hbm_pim"], ["energy_per_token_j"]) == []   # PIM beside PIM: same footing
    assert pim_note(rows.drop(columns="pim.utilization"), ["energy_per_token_j"]) == []
    # a serving sweep's rows carry the stacks' utilisation, not the run's PIM figures (a review)
    served = rows.drop(columns="pim.utilization").assign(**{"utilization.pim.stack0-4": [np.nan, 0.3]})
    assert len(pim_note(served, ["energy_per_token_j"])) == 1

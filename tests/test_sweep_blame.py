"""A user trial of `sim sweep`: error rows named the wrong axis and the wrong point (a machine shared by several points
kept the source of whichever check built it first); a preset refusing a power limit aborted the sweep while other
per-point model errors were rows; a power cap past what `sim run` calls outside the model said nothing; the Pareto
plot mixed rows of the two energy models while the best-points table ranks the board-power rows only."""

from __future__ import annotations

import concurrent.futures as cf
from pathlib import Path

import pandas as pd
import pytest

from sim.apps.cli import main
from sim.apps.sweep import load_results
from sim.apps.sweep import plots as sweep_plots
from sim.apps.sweep.blame import attributed
from sim.apps.sweep.energy import cap_caveats
from sim.apps.sweep.run import run_sweep
from sim.apps.sweep.spec import Plot
from tests.robust_helpers import refused
from tests.test_sweep import make_spec
from tests.test_sweep_power import figures  # noqa: F401  (a fixture)

BW = "hw.memory.@device.bandwidth_bytes_per_s"
LIMIT = "hw.units.@main.power_limit_w"
GROUPS = "hw.pim.head_groups"


def _sweep(path: Path, out: Path):
    with cf.ThreadPoolExecutor(1) as ex:   # in-process: a few small points
        return run_sweep(path, out, executor=ex, progress=False, plots=False)


def _errors(out: Path) -> dict[tuple, str]:
    df = load_results(out)
    axes = [c for c in df.columns if c.startswith(("hw", "workload."))]
    return {tuple(r[a] for a in axes if a != "hw.name" and a != "hw.price_usd"): r["error"]
            for r in df.to_dict("records") if r["status"] == "error"}


# ---------------------------------------------------------------- 1: which point, which axis

def test_each_error_row_names_its_own_point_and_no_axis_that_did_not_cause_it(tmp_path):
    """attacc_dgx's 12 head groups do not divide the tiny model's 4 heads at any point: the rows at bandwidth 1x had
    read "axes.hw.memory.@device.bandwidth_bytes_per_s" (the axis check built their machine) and those at batch 8
    "workload.batch=1" (the first point built it)."""
    path = make_spec(tmp_path, {"hw": ["attacc_dgx"], BW: {"scale": [1, 2]}, "workload.batch": [1, 8]})
    s = _sweep(path, tmp_path / "o")
    assert (s.ran, s.failed) == (4, 4)
    df = load_results(tmp_path / "o")
    for row in df.to_dict("records"):
        bw, batch = row[BW], row["workload.batch"]
        want = f"ConfigError: {path}: point (hw=attacc_dgx, {BW}={bw}, workload.batch={batch}): pim.head_groups: 12 "
        assert row["error"].startswith(want), row["error"]
    assert {(r[BW], r["workload.batch"]) for r in df.to_dict("records")} == {(1.0, 1), (1.0, 8), (2.0, 1), (2.0, 8)}


def test_the_axis_whose_field_fails_is_named_and_a_reused_row_names_the_new_axes(tmp_path):
    """12 groups fail, 2 divide the 4 heads: the rows at 12 name the head-group axis and their own batch. A changed
    spec that reuses them (workload.gen_len: [4] is the workload's own value: the same configs) names them by its
    axes, as it relabels their columns."""
    path = make_spec(tmp_path, {"hw": ["attacc_dgx"], GROUPS: [12, 2], "workload.batch": [1, 8]})
    _sweep(path, tmp_path / "o")
    df = load_results(tmp_path / "o").set_index([GROUPS, "workload.batch"])
    assert list(df["status"]) == ["error", "error", "ok", "ok"]
    for batch in (1, 8):
        assert df.loc[(12, batch), "error"].startswith(
            f"ConfigError: {path}: axes.{GROUPS} at point (hw=attacc_dgx, {GROUPS}=12, workload.batch={batch}): "
            "pim.head_groups: 12 groups do not divide")
    path = make_spec(tmp_path, {"hw": ["attacc_dgx"], GROUPS: [12, 2], "workload.batch": [1, 8],
                                "workload.gen_len": [4]})
    assert _sweep(path, tmp_path / "o").skipped == 4
    df = load_results(tmp_path / "o").set_index([GROUPS, "workload.batch"])
    assert f"at point (hw=attacc_dgx, {GROUPS}=12, workload.batch=8, workload.gen_len=4): " in df.loc[(12, 8), "error"]


def test_an_error_under_another_files_name_gets_its_point_in_front():
    src = "s.yaml: point (hw=h100_sxm, workload.parallel.ep=3)"
    fields = {"parallel.ep": "workload.parallel.ep", "memory.hbm.bandwidth_bytes_per_s": BW}
    assert attributed("wl.yaml: parallel.ep: batch 4 does not split", src, fields) == (
        "s.yaml: axes.workload.parallel.ep at point (hw=h100_sxm, workload.parallel.ep=3): wl.yaml: parallel.ep: "
        "batch 4 does not split")
    assert attributed("llama on a6000 does not fit", src, fields) == f"{src}: llama on a6000 does not fit"
    # the subject's parent, then the axis field's last key: the unit's power limit
    assert attributed(f"{src}: units.gpu: power_limit_w 250 W: no", src, {"units.gpu.power_limit_w": LIMIT}) == (
        f"s.yaml: axes.{LIMIT} at point (hw=h100_sxm, workload.parallel.ep=3): units.gpu: power_limit_w 250 W: no")
    assert attributed(f"{src}: units.gpu: idle_power_w: no", src, {"units.gpu.power_limit_w": LIMIT}) == (
        f"{src}: units.gpu: idle_power_w: no")


# ---------------------------------------------------------------- 2: a preset that refuses a value

def test_a_preset_refusing_a_power_limit_is_an_error_row_unless_no_preset_takes_it(tmp_path, capsys):
    """l40s has no board-power model: its points are error rows beside h100_sxm's, which run; a sweep of l40s
    alone can never apply the axis: one line before anything runs, nothing written."""
    path = make_spec(tmp_path, {"hw": ["h100_sxm", "l40s"], LIMIT: [300, 700]})
    s = _sweep(path, tmp_path / "o")
    assert (s.ran, s.failed) == (4, 2)
    errors = _errors(tmp_path / "o")
    assert set(errors) == {("l40s", 300), ("l40s", 700)}
    for limit in (300, 700):
        assert errors[("l40s", limit)] == (
            f"ConfigError: {path}: axes.{LIMIT} at point (hw=l40s, {LIMIT}={limit}): units.gpu: power_limit_w "
            f"{limit} W: this unit has no board-power model (idle_power_w, active_power_w, energy_j_per_flop: "
            "docs/energy.md), so neither a cap nor a clock lock is modelled; presets with one: e.g. h100_sxm, h200, b200, a100_80g, a6000")
    path = make_spec(tmp_path, {LIMIT: [300, 700]})
    path.write_text(path.read_text().replace("hw: a6000", "hw: l40s"))
    line = refused(capsys, ["sweep", str(path), "--out", str(tmp_path / "a"), "-q"], tmp_path)
    assert line.startswith(f"error: {path}: axes.{LIMIT} (hw l40s): units.gpu: power_limit_w 300 W: this unit has "
                           "no board-power model")


def test_a_field_typo_is_still_refused_at_once_on_every_preset(tmp_path, capsys):
    path = make_spec(tmp_path, {"hw": ["h100_sxm", "a6000"], "hw.units.@main.power_limt_w": [300]})
    line = refused(capsys, ["sweep", str(path), "--out", str(tmp_path / "a"), "-q"], tmp_path)
    assert f"{path}: axes.hw.units.@main.power_limt_w (hw h100_sxm): units.gpu.power_limt_w" in line


@pytest.mark.parametrize("values", [[300e6, 600e6], {"scale": [1, 2]}])
def test_a_section_one_kind_lacks_is_an_error_row_of_that_kinds_points(tmp_path, values):
    """An architect's trial: `hw.pim.clock_hz` over [hbm_pim, groq_lpu] was refused for the whole file ("pim: unknown
    key"), and as a factor named no preset at all, where docs/sweeps.md says a value one preset of the hw axis refuses
    and another takes makes error rows of the first one's points. hbm_pim's points run; groq_lpu's are error rows
    naming the point and the missing section."""
    path = make_spec(tmp_path, {"hw": ["hbm_pim", "groq_lpu"], "hw.pim.clock_hz": values})
    s = _sweep(path, tmp_path / "o")
    assert (s.ran, s.failed) == (4, 2)
    df = load_results(tmp_path / "o")
    bad = df[df["status"] == "error"]
    assert set(bad["hw"]) == {"groq_lpu"} and set(df[df["status"] != "error"]["hw"]) == {"hbm_pim"}
    assert all(("pim: unknown key" in e or "hw.pim.clock_hz: no such field" in e) and "hw=groq_lpu" in e
               for e in bad["error"])


# ---------------------------------------------------------------- 2: a cap past the model

def _cap_rows(*stretches: tuple[float, ...]) -> pd.DataFrame:
    """Rows of (prefill stretch, decode stretch[, decode clock]); without a clock, a sweep's rows before the clock
    column: the phase stretched alike, at 1 / (1 + stretch)."""
    return pd.DataFrame([{"point": i, LIMIT: 100 + i, "status": "ok", "power_cap_limit_w": 100 + i,
                          "prefill_power_cap_stretch": s[0], "decode_power_cap_stretch": s[1],
                          **({"decode_power_cap_clock": s[2]} if len(s) > 2 else {})}
                         for i, s in enumerate(stretches)])


def test_the_sweep_names_the_points_a_cap_stretches_past_sim_runs_range():
    """`sim run` says below a third of the full clock (a phase stretched alike past 3x: added time over twice the
    full-clock time) that no clock floor is modelled: 2.99x is inside, 3.01x outside, and so is a memory-bound decode
    at 20% of its clock that took no longer; an unbound point (0, 0) and a serving sweep say nothing."""
    [note] = cap_caveats(_cap_rows((1.99, 0.5), (0.0, 2.01), (0.0, 0.0), (4.0, 1.0), (0.0, 0.0, 0.2)), [LIMIT])
    assert note.startswith("3 of 5 points: power cap: ")
    assert (f"point 1 ({LIMIT}=101: decode 3.01x at 33% clock); point 3 ({LIMIT}=103: prefill 5.00x at 20% clock, "
            f"decode 2.00x at 50% clock); point 4 ({LIMIT}=104: decode 1.00x at 20% clock); ") in note
    assert "point 0" not in note and note.endswith("a clock this low (a limit this close to the idle power, or a lock this low) is outside the model")
    assert cap_caveats(_cap_rows((1.99, 1.5)), [LIMIT]) == []
    assert cap_caveats(pd.DataFrame([{"status": "ok", "power_cap_stretch": 9.0}]), [LIMIT]) == []


def test_sim_sweep_warns_of_a_cap_past_the_model(tmp_path, capsys):
    """The tiny model on an H100 at 120 W, just over its 117.1 W idle: every phase stretches far past 3x; at the
    700 W TDP the cap does not bind."""
    path = make_spec(tmp_path, {"hw": ["h100_sxm"], LIMIT: [120, 700]})
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--workers", "1", "--no-plots"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [ln for ln in err if "power cap: the board limit binds" in ln] == [
        "warning: power cap: the board limit binds in 1 of 2 points (power_cap_binds 1; their times include the "
        "stretch, <phase>_power_cap_stretch): a faster compute or memory there is held by the limit (`sim run` says "
        "so of each)"]
    [line] = [ln for ln in err if "power cap" in ln and "binds in" not in ln]
    row = load_results(tmp_path / "o").set_index(LIMIT).loc[120]
    assert row["decode_power_cap_clock"] < 1 / 3   # its memory-bound decode meets the limit far below full clock
    assert line.startswith("warning: 1 of 2 points: power cap: ")
    assert (f"point 0 (hw=h100_sxm, {LIMIT}=120: prefill {1 + row['prefill_power_cap_stretch']:.2f}x at "
            f"{row['prefill_power_cap_clock']:.0%} clock, decode ") in line
    assert "=700" not in line


# ---------------------------------------------------------------- 3: the Pareto plot's energy models

def _energy_rows() -> pd.DataFrame:
    """Three board-power points on a front (TPOT up, J/token down) and a busy-time point that would beat two of them:
    15 ms at 0.5 J."""
    rows = [{"hw": "h100_sxm", "tpot_s": t, "energy_per_token_j": e, "throughput_tok_s": 1 / t,
             "energy_board_model": 1.0, "status": "ok"} for t, e in ((0.010, 5.0), (0.020, 2.0), (0.030, 1.0))]
    rows.append({"hw": "a6000", "tpot_s": 0.015, "energy_per_token_j": 0.5, "throughput_tok_s": 1 / 0.015,
                 "energy_board_model": 0.0, "status": "ok"})
    return pd.DataFrame(rows)


def _front(ax) -> list[float]:
    [line] = [ln for ln in ax.get_lines() if ln.get_label() == "Pareto front"]
    return list(line.get_xdata())


def test_a_pareto_of_energy_leaves_busy_time_rows_off_its_front_hollow(figures, tmp_path):  # noqa: F811
    p = Plot(kind="pareto", x="tpot_s", y="energy_per_token_j", label="hw")
    sweep_plots.pareto(_energy_rows(), p, "t", tmp_path / "p.png")
    ax = figures[0].axes[0]
    assert _front(ax) == pytest.approx([10.0, 20.0, 30.0])   # ms; the busy-time point at 15 ms is not on it
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "hollow: busy-time power only (energy_board_model 0): off the front (docs/energy.md)" in legend
    [a6000] = [c for c in ax.collections if c.get_label() == "hardware = a6000"]
    assert len(a6000.get_facecolors()) == 0 and list(a6000.get_offsets()[0]) == pytest.approx([15.0, 0.5])
    # throughput against TPOT compares across the models: every row is on the cloud and may be on the front
    sweep_plots.pareto(_energy_rows(), Plot(kind="pareto", x="tpot_s", y="throughput_tok_s"), "t", tmp_path / "q.png")
    ax = figures[1].axes[0]
    assert not any(t.get_text().startswith("hollow") for t in ax.get_legend().get_texts())
    assert _front(ax) == pytest.approx([10.0])   # the fastest point has the most throughput: it beats the rest


def test_a_scale_axis_on_a_figure_left_to_its_default_says_so(tmp_path, capsys):
    """A code review: `scale:` on power_limit_w (h100_sxm leaves it to its default, the TDP) read "no such field",
    where `--set hw.units.gpu.power_limit_w=0.8x` says the preset leaves it to its default; a typo still reads
    "no such field"."""
    path = make_spec(tmp_path, {"hw": ["h100_sxm"], LIMIT: {"scale": [0.8]}})
    line = refused(capsys, ["sweep", str(path), "--out", str(tmp_path / "o"), "-q"], tmp_path)
    assert "h100_sxm leaves it to its default, which a factor cannot scale: give the values" in line
    path = make_spec(tmp_path, {"hw": ["h100_sxm"], "hw.memory.hmb.bandwidth_bytes_per_s": {"scale": [2]}})
    assert "no such field" in refused(capsys, ["sweep", str(path), "--out", str(tmp_path / "o"), "-q"], tmp_path)


def test_failed_points_past_the_last_that_ran_are_inside_the_plot():
    """A newcomer's trial: bandwidth_x_batch's a6000 runs out of memory at batch 32-128, and the plot's legend said
    the crosses were drawn at the top, but the x-axis ended at 16, the last batch that ran. The limits take them in."""
    from sim.apps.mpl import pyplot
    from sim.apps.sweep.legend import mark_failed
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.set_xscale("log")
    ax.plot([1, 4, 16], [10, 40, 100])
    failed = pd.DataFrame({"error": ["CapacityError: x"] * 3, "workload.batch": [32, 64, 128]})
    mark_failed(ax, failed, [32, 64, 128], [], {})
    lo, hi = ax.get_xlim()
    plt.close(fig)
    assert lo <= 1 and hi >= 128


def test_the_energy_models_note_only_where_an_energy_figure_is_ranked():
    """A newcomer's sweep ranked TPOT and throughput alone and was told its energy_per_token_j mixed two models."""
    from sim.apps.sweep.energy import models_note
    ok = pd.DataFrame({"energy_board_model": [1.0, 0.0], "tpot_s": [0.01, 0.02], "energy_per_token_j": [5.0, 1.0]})
    assert models_note(ok, ["tpot_s", "throughput_tok_s"]) == []
    assert models_note(ok, ["tpot_s", "energy_per_token_j"])[0].startswith("note: energy_per_token_j mixes two")
    assert models_note(ok)   # no metrics named: said


def test_without_point_drops_either_label_form():
    """point_source labels a point `point (axes) (hw X)` or, with an hw axis, `point (hw=X, axes)`: the same error at
    two points reads the same without it (sim sweep's all-failed count groups by it)."""
    from sim.apps.sweep.blame import without_point
    from sim.apps.sweep.resolve import point_source
    msg = "ConfigError: {}: wl.yaml: parallel.topology: needed"
    a = msg.format(point_source("s.yaml", {"workload.batch": 1}, "a6000"))
    b = msg.format(point_source("s.yaml", {"hw": "h100_sxm", "workload.batch": 2}, "h100_sxm"))
    assert without_point(a) == without_point(b) == "ConfigError: s.yaml: wl.yaml: parallel.topology: needed"


def test_a_line_plot_draws_busy_time_lines_hollow_and_keeps_the_axis_colours(figures, tmp_path):  # noqa: F811
    """The line plot drew groq_lpu's busy-time J/token like the board-power lines, and coloured the lines by sorted
    value where the Pareto plot takes the sweep's order (int4 green in one, purple in the other: an architecture
    trial). The busy-time line is hollow and says so; the lines come in the order the sweep lists them."""
    rows = [{"hw": hw, "batch": b, "energy_per_token_j": e / b, "energy_board_model": m, "status": "ok"}
            for hw, e, m in (("h100_sxm", 4.0, 1.0), ("a6000", 2.0, 0.0)) for b in (1, 2)]
    sweep_plots.line(pd.DataFrame(rows), Plot(kind="line", x="batch", y="energy_per_token_j", lines="hw"), "t",
                     tmp_path / "l.png")
    ax = figures[0].axes[0]
    lines = [ln for ln in ax.get_lines() if ln.get_label().startswith("hardware")]
    assert [ln.get_label() for ln in lines] == [
        "hardware = h100_sxm", "hardware = a6000 (hollow: busy-time power only, not comparable: docs/energy.md)"]
    assert [ln.get_color() for ln in lines] == ["C0", "C1"] and lines[1].get_markerfacecolor() == "none"

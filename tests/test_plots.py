"""The pictures a person reads (issue 20): each plot kind rendered on a small case and
checked from its matplotlib artists: every unit that ran an op has a roof, no point
sits above its unit's roofs, no two text labels overlap by more than half their
area, and numeric axes say their unit; plus the Gantt zoom, coincident sweep
series, the sweep summary table and the Perfetto counter tracks."""

import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgba
from rich.console import Console

from hw_models.machine import load_machine
from sim.apps.mpl import pyplot
from hw_models.registry import simulate
from hw_models.roofs import roofs
from sim.apps import gantt as gantt_mod
from sim.apps import plots
from sim.apps.cli import main
from sim.apps.counters import step_tracks
from sim.apps.sweep import plots as sweep_plots
from sim.apps.sweep.cli import best_table
from sim.apps.sweep.spec import Plot
from sim.core.workload import load_workload
from tests.conftest import ROOT

TINY = ROOT / "tests/data/tiny_config.json"   # 4 layers, hidden 512, 2 KV heads of 64
PROMPT, GEN, BATCH = 64, 8, 2
OFFLOAD_POLICY = dict(wg=20, wc=80, cg=0, cc=100, hg=0, hc=100, gpu_batch_size=1, num_gpu_batches=2,
                      cpu_attention=True)
CASES = {"a6000": {}, "hbm_pim": {}, "groq_lpu": {}, "flexgen_t4": {"policy": OFFLOAD_POLICY}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(workload, machine, result) per preset, for the tiny model."""
    out = {}
    for hw, extra in CASES.items():
        path = tmp_path_factory.mktemp("wl") / f"tiny_{hw}.yaml"
        path.write_text(json.dumps(dict(name="tiny", model=str(TINY), batch=BATCH, prompt_len=PROMPT,
                                        gen_len=GEN, **extra)))
        w, m = load_workload(path), load_machine(hw)
        out[hw] = (w, m, simulate(w, m))
    return out


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions would save, kept open for inspection."""
    kept = []

    def keep(fig, path):
        kept.append(fig)
        return path
    for mod in (plots, gantt_mod, sweep_plots):
        monkeypatch.setattr(mod, "_save", keep)
    yield kept
    for fig in kept:
        pyplot().close(fig)


def _texts_overlap_at_most_half(fig) -> None:
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_visible() and t.get_text()]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                w = min(a.x1, b.x1) - max(a.x0, b.x0)
                h = min(a.y1, b.y1) - max(a.y0, b.y0)
                inter = max(w, 0) * max(h, 0)
                assert inter <= 0.5 * min(a.width * a.height, b.width * b.height)


def _has_unit(label: str) -> bool:
    return re.search(r"\([^()]+\)$", label) is not None


@pytest.mark.parametrize("hw", list(CASES))
def test_roofline_has_a_roof_per_unit_and_no_point_above_it(runs, figures, tmp_path, hw):
    w, m, r = runs[hw]
    all_roofs = roofs(m, w.formats.activations)
    plots.roofline(r, all_roofs, tmp_path / "roofline.png")
    (fig,) = figures
    ax = fig.axes[0]
    drawn = {line.get_label(): line for line in ax.get_lines()}
    by_label = {roof.label: roof for roof in all_roofs}
    units = plots.ran_ops(r.decode_ops + r.prefill_ops)
    assert units
    for unit in units:
        assert any(by_label[lbl].covers(unit) for lbl in drawn if lbl in by_label), f"{unit} has no roof"
    assert set(ax.get_legend_handles_labels()[1]) >= {lbl for lbl in drawn if lbl in by_label}
    # Points, from the table written beside the plot, sit under the highest roof of their unit.
    table = json.loads((tmp_path / "roofline.json").read_text())
    drawn_roofs = table["roofs"]
    for p in table["points"]:
        top = max(min(rf["peak_flops_per_s"], p["intensity_flop_per_byte"] * rf["bandwidth_bytes_per_s"])
                  for rf in drawn_roofs if rf["unit"] == drawn_roofs[p["roof"]]["unit"])
        assert p["achieved_flops_per_s"] <= top * (1 + 1e-9), p
    # Point colours are the colours of their units' roofs.
    roof_colors = {tuple(np.round(to_rgba(line.get_color()), 3)) for line in drawn.values()}
    for coll in (c for c in ax.collections if len(c.get_offsets())):   # not the legend's empty markers
        for c in coll.get_facecolors():
            assert tuple(np.round(c[:3], 3)) in {k[:3] for k in roof_colors}
    _texts_overlap_at_most_half(fig)
    assert _has_unit(ax.get_xlabel()) and _has_unit(ax.get_ylabel())


def test_pim_roof_is_the_stacks_internal_bandwidth(runs, figures, tmp_path):
    """hbm_pim: 5 stacks x 16 pseudo-channels x 8 units, each 16 fp16 lanes (2 FLOP per MAC) and one
    32 B column per 300 MHz cycle; a 1 KiB row streams in 107 ns, longer than the 28 ns row opening
    the other bank of the pair hides, so the units stream at the full column rate:
    6.144 TFLOP/s and 6.144 TB/s, 4x the 1.536 TB/s the host sees at the pins."""
    w, m, r = runs["hbm_pim"]
    plots.roofline(r, roofs(m, "fp16"), tmp_path / "roofline.png")
    ax = figures[0].axes[0]
    pim = next(line for line in ax.get_lines() if line.get_label().startswith("PIM"))
    host = next(line for line in ax.get_lines() if line.get_label().startswith("gpu"))
    scale = 1e-12 if "TFLOP/s" in ax.get_ylabel() else pytest.fail(ax.get_ylabel())
    x, y = pim.get_data()
    assert y.max() == pytest.approx(5 * 128 * 16 * 2 * 300e6 * scale, rel=1e-9)
    assert y[0] / x[0] == pytest.approx(5 * 128 * 32 * 300e6 * scale, rel=1e-9)
    hx, hy = host.get_data()
    assert hy[0] / hx[0] == pytest.approx(1536e9 * scale, rel=1e-9)
    # The decode GEMMs ran inside the DRAM: their points belong to the PIM roof, not the host's.
    table = json.loads((tmp_path / "roofline.json").read_text())
    gemms = [p for p in table["points"] if p["phase"] == "decode" and p["kind"] == "gemm"]
    assert gemms and all(table["roofs"][p["roof"]]["unit"] == "pim.stack" for p in gemms)


def test_labels_one_per_name_and_the_rest_in_the_table(runs, figures, tmp_path):
    w, m, r = runs["hbm_pim"]
    plots.roofline(r, roofs(m, "fp16"), tmp_path / "roofline.png")
    ax = figures[0].axes[0]
    shown = [t.get_text() for t in ax.texts if t.get_text() and t.get_visible()]
    points = json.loads((tmp_path / "roofline.json").read_text())["points"]
    labelled = [(p["name"], p["kind"], p["phase"], p["roof"]) for p in points if p["labelled"]]
    assert len(labelled) == len(set(labelled)) == len([s for s in shown if "\n" not in s])
    # Every layer's instance of an op is a point in the table, labelled or not.
    assert sum(p["name"] == "q_proj" and p["phase"] == "decode" for p in points) == 4


def test_gantt_zoom_panel_spans_the_first_two_layers(runs, figures, tmp_path):
    ops = runs["hbm_pim"][2].decode_ops
    gantt_mod.gantt(ops, "decode", tmp_path / "g.png")
    whole, zoom = figures[0].axes
    start = min(o.start_s for o in ops if o.name.startswith(("L0.", "L1.")))
    end = max(o.end_s for o in ops if o.name.startswith(("L0.", "L1.")))
    unit = re.search(r"\((.+)\)$", zoom.get_xlabel()).group(1)
    scale = {"s": 1, "ms": 1e3, "µs": 1e6, "ns": 1e9}[unit]
    assert zoom.get_xlim() == pytest.approx((start * scale, end * scale), rel=1e-9)
    assert end < max(o.end_s for o in ops)       # a zoom, not the whole step again
    for ax in (whole, zoom):
        assert _has_unit(ax.get_xlabel())
    # A step of ~µs is shown in µs, not as 1e-4 s.
    assert 1 <= whole.get_xlim()[1] < 1000
    _texts_overlap_at_most_half(figures[0])


def test_gantt_layers_flag(tmp_path, capsys):
    wl = str(ROOT / "workloads/llama13b_decode.yaml")
    assert main(["run", wl, "--hw", "a6000", "-q", "--plots", str(tmp_path / "p"), "--gantt-layers", "5-6"]) == 0
    assert (tmp_path / "p" / "decode_gantt.png").stat().st_size > 1000
    capsys.readouterr()   # the first run's note of the folder it made
    assert main(["run", wl, "--hw", "a6000", "-q", "--plots", str(tmp_path / "q"), "--gantt-layers", "6-5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--gantt-layers" in err[0]
    assert not (tmp_path / "q").exists()


def _sweep_frame() -> pd.DataFrame:
    rows = []
    for fmt, slope in (("fp16", 2.0), ("fp8_e4m3", 1.0), ("int8", 1.0 * (1 + 2e-4)), ("int4", 0.6)):
        for b in (1, 4, 16):
            rows.append({"workload.formats.weights": fmt, "workload.batch": b, "status": "ok",
                         "tpot_s": slope * (0.01 + 0.001 * b), "throughput_tok_s": b / (slope * (0.01 + 0.001 * b)),
                         "hw.price_usd": 1000.0 * slope, "peak_memory_bytes.gddr": 7.8e9 * slope})
    return pd.DataFrame(rows)


def test_sweep_plots_name_units_and_mark_coincident_series(figures, tmp_path):
    df = _sweep_frame()
    sweep_plots.line(df, Plot(kind="line", x="workload.batch", y="tpot_s", lines="workload.formats.weights",
                              logx=True, logy=True), "t", tmp_path / "l.png")
    sweep_plots.pareto(df, Plot(kind="pareto", x="hw.price_usd", y="throughput_tok_s",
                                label="workload.formats.weights"), "t", tmp_path / "p.png")
    sweep_plots.heatmap(df, Plot(kind="heatmap", x="workload.batch", y="workload.formats.weights", z="tpot_s"),
                        "t", tmp_path / "h.png")
    line_ax = figures[0].axes[0]
    assert line_ax.get_ylabel() == "TPOT (ms)" and line_ax.get_xlabel() == "batch (sequences)"
    lines = {ln.get_label(): ln for ln in line_ax.get_lines()}
    twin = next(lbl for lbl in lines if "int8" in lbl)
    assert "fp8_e4m3" in twin and lines[twin].get_linestyle() != "-"     # int8 is 0.02% from fp8: dashed
    assert sum("within" in lbl for lbl in lines) == 1                    # fp16 and int4 differ: solid
    assert max(lines[next(lbl for lbl in lines if "fp16" in lbl)].get_ydata()) == pytest.approx(2 * 26)  # ms
    pareto_ax = figures[1].axes[0]
    assert pareto_ax.get_xlabel() == "price (USD)" and pareto_ax.get_ylabel() == "throughput (tokens/s)"
    heat = figures[2]
    assert heat.axes[1].get_ylabel() == "TPOT (ms)"                       # the colour bar
    for fig in figures:
        _texts_overlap_at_most_half(fig)


def test_sweep_summary_has_one_line_per_metric_with_units():
    df = _sweep_frame()
    spec = type("Spec", (), dict(name="s", axes=["workload.formats.weights", "workload.batch"],
                                 metrics=["tpot_s", "throughput_tok_s", "peak_memory_bytes.gddr"]))
    buf = io.StringIO()
    Console(file=buf, width=80).print(best_table(spec, df, len(df)))
    lines = buf.getvalue().splitlines()
    tpot = next(ln for ln in lines if "min TPOT" in ln)
    assert "6.6 ms" in tpot and "int4" in tpot                      # 0.6 x (0.01 + 0.001 x 1) s
    assert "tokens/s" in next(ln for ln in lines if "max throughput" in ln)
    mem = next(ln for ln in lines if "peak memory on gddr" in ln)
    assert "4.68 GB" in mem                                         # 0.6 x 7.8 GB
    assert not any(ln.strip("│ ").startswith(("throughput", "gddr")) for ln in lines)   # nothing wrapped


def test_trace_counters_follow_kv_growth_and_links(runs):
    w, m, r = runs["a6000"]
    per_token = 2 * 4 * 128 * 2 * BATCH         # K and V, 4 layers, 2 heads x 64, fp16, per position
    prefill = step_tracks(r, "prefill")["gddr occupancy (GB)"]
    assert prefill[0][1]["kv_cache"] == 0.0
    assert prefill[-1][1]["kv_cache"] == pytest.approx(PROMPT * per_token / 1e9, rel=1e-9)
    assert {v["weights"] for _, v in prefill} == {r.memory_by_role["gddr"]["weights"] / 1e9}
    decode = step_tracks(r, "decode")["gddr occupancy (GB)"]
    assert decode[0][1]["kv_cache"] == pytest.approx((r.decode_kv_len - 1) * per_token / 1e9, rel=1e-9)
    assert decode[-1][1]["kv_cache"] == pytest.approx(r.decode_kv_len * per_token / 1e9, rel=1e-9)
    assert max(v["activations"] for _, v in decode) > 0
    # Offload: PCIe in use at its rate (PCIe 3.0 x16, 15.754 GB/s x 0.8 for pinned copies), GPU buffers.
    tracks = step_tracks(runs["flexgen_t4"][2], "decode")
    assert max(v["GB/s"] for _, v in tracks["pcie_h2d in use (GB/s)"]) == pytest.approx(15.754 * 0.8, rel=2e-3)
    assert max(v["in use"] for _, v in tracks["gpu.weights in use (GB)"]) > 0


def test_chrome_trace_has_counter_events(tmp_path):
    wl = str(ROOT / "workloads/llama13b_decode.yaml")
    trace = tmp_path / "t.json"
    assert main(["run", wl, "--hw", "groq_lpu", "-q", "--chrome-trace", str(trace)]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["name"] for e in events if e["ph"] == "C"}
    assert {"sram occupancy (GB)", "c2c in use (GB/s)"} <= names
    assert Path(trace).stat().st_size > 0


def test_pipeline_and_tensor_parallel_links_have_counters(tmp_path):
    """A TP x PP plan's stage-to-stage sends (llama70b_tp4_pp2: one micro-batch's activations, 32 MiB in
    prefill, over the link after stage 0) show as that link's GB/s: bytes / the send's duration."""
    trace = tmp_path / "t.json"
    assert main(["run", str(ROOT / "workloads/llama70b_tp4_pp2.yaml"), "--hw", "h100_sxm", "-q",
                 "--chrome-trace", str(trace)]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    sends = [e for e in events if e["ph"] == "X" and e["cat"] == "send_recv" and e["pid"] == 1]
    rates = [e["args"]["GB/s"] for e in events if e["ph"] == "C" and e["name"] == "link.s0 in use (GB/s)"
             and e["pid"] == 1]
    assert sends and max(rates) == pytest.approx(sends[0]["args"]["bytes"] / (sends[0]["dur"] * 1e-6) / 1e9, rel=1e-9)
    assert min(rates) == 0.0   # idle between the sends


def _two_way_frame() -> pd.DataFrame:
    """PIM on/off x context, over batch; the long context at batch 8 ran out of memory."""
    rows = []
    for policy, base in (("auto", 5.0), ("none", 14.0)):
        for ctx in (256, 4096):
            for batch in (1, 2, 8):
                oom = ctx == 4096 and batch == 8
                rows.append({"workload.pim_policy": policy, "workload.prompt_len": ctx, "workload.batch": batch,
                             "tpot_s": None if oom else (base + batch + ctx / 1024) / 1e3,
                             "energy_per_token_j": None if oom else 0.1 * batch,
                             "status": "error" if oom else "ok",
                             "error": "CapacityError: needs 48 GB but it holds 32 GB" if oom else ""})
    return pd.DataFrame(rows)


def test_sweep_line_legend_explains_colour_and_style_and_marks_failed_points(figures, tmp_path):
    df = _two_way_frame()
    p = Plot(kind="line", x="workload.batch", y="tpot_s", lines=["workload.pim_policy", "workload.prompt_len"],
             where="workload.batch >= 1")
    sweep_plots.line(df, p, sweep_plots.title_for("pim", p, list(df.columns)), tmp_path / "l.png")
    ax = figures[0].axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:3] == ["colour: prompt length", "256 tokens", "4096 tokens"]
    assert legend[3:6] == ["line style: PIM policy", "auto", "none"]
    assert any(t.startswith("not run: 2 out of memory (CapacityError)") for t in legend)
    # Both failed points are drawn (stacked at batch 8), in the 4096-token colour.
    failed = next(c for c in ax.collections if c.get_label().startswith("not run"))
    assert len(failed.get_offsets()) == 2
    assert ax.get_title() == "pim: TPOT vs batch\nonly where batch >= 1"


def test_sweep_titles_name_both_metrics_and_the_filter():
    cols = ["workload.batch", "workload.pim_policy"]
    pareto = Plot(kind="pareto", x="energy_per_token_j", y="tpot_s")
    assert sweep_plots.title_for("s", pareto, cols) == "s: TPOT vs energy per token (Pareto front)"
    heat = Plot(kind="heatmap", x="workload.batch", y="workload.prompt_len", z="tpot_s",
                where="workload.pim_policy == 'auto'")
    assert sweep_plots.title_for("s", heat, cols) == ("s: TPOT over batch and prompt length\n"
                                                     "only where PIM policy == 'auto'")


def test_serve_kv_and_batch_panels_are_binned_not_solid(tmp_path, figures, monkeypatch):
    from sim.apps.serve import output

    monkeypatch.setattr(output, "_save", lambda fig, path: figures.append(fig) or path)
    # Iterations alternate prefill (1 sequence) and decode (20): the raw step function would fill the
    # panel; binned, the mean over each span is the time-weighted 10.5 and the shaded range 1..20.
    n = 400
    res = type("R", (), {})()
    res.iterations = {"start_s": np.arange(n) * 0.01, "seqs": np.where(np.arange(n) % 2, 20, 1),
                      "kv_blocks_used": np.full(n, 50), "duration_s": np.full(n, 0.01)}
    res.makespan_s, res.total_blocks = n * 0.01, 100
    output._kv_and_batch(res, tmp_path / "kv.png", bins=20)
    kv_ax, batch_ax = figures[-1].axes
    mean = batch_ax.get_lines()[0].get_ydata()
    assert np.allclose(mean, 10.5) and np.allclose(kv_ax.get_lines()[0].get_ydata(), 50.0)
    assert kv_ax.get_ylabel() == "KV in use (% of pool)"


def test_the_batch_panel_counts_an_idle_instance_as_zero():
    """Two replicas (a serving researcher's trial: three replicas' panel read 3 where one request was in
    service): replica 0 runs 4 sequences over [0, 1) s and is idle after; replica 1 runs 2 over [0.5, 1.5)
    and 1 over [1.5, 2) s, then both idle to 4 s. Levels: 4, 6, 2, 1, 0; over [0, 2] the mean is
    (0.5 x 4 + 0.5 x 6 + 0.5 x 2 + 0.5 x 1) / 2 = 6.5 / 2 = 3.25, over [2, 4] 0 (carried forward: 1.5 and 1)."""
    from sim.apps.serve.timeline import binned_mean, running_steps

    res = type("R", (), {})()
    res.iterations = {"start_s": np.array([0.0, 0.5, 1.5]), "duration_s": np.array([1.0, 1.0, 0.5]),
                      "seqs": np.array([4.0, 2.0, 1.0]), "instance": np.array([0, 1, 1])}
    res.makespan_s = 4.0
    knots, levels = running_steps(res, res.iterations["seqs"])
    assert knots.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0] and levels.tolist() == [4.0, 6.0, 2.0, 1.0, 0.0]
    assert binned_mean(res, levels, 2, knots)[1] == pytest.approx([3.25, 0.0])


def test_gantt_legend_names_every_bar_kind(figures, tmp_path):
    from sim.core.results import OpRecord

    ops = [OpRecord("L0.q_proj", "gemm", "gpu", 0.0, 1e-6, 1.0, 1.0, "memory"),
           OpRecord("L0.dispatch", "all_to_all", "link", 1e-6, 2e-6, 0.0, 1.0, "link")]
    gantt_mod.gantt(ops, "t", tmp_path / "g.png")
    legend = [t.get_text() for t in figures[-1].legends[0].get_texts()]
    assert legend == ["gemm", "all_to_all"]    # the collective's bars are explained too


def test_a_line_over_an_axis_it_does_not_split_keeps_the_best_point_at_each_x(figures, tmp_path):
    """Lines by nothing over a frame where the weight format varies too: four points at each batch, drawn in turn
    a zigzag (a new user's trial). The line keeps the best (lowest TPOT: int4's, slope 0.6) at each batch, and says so,
    naming the sweep axis it took the best over (the label said "the points" and left the reader to guess which)."""
    df = _sweep_frame()
    df.attrs["axes"] = ["workload.formats.weights", "workload.batch"]   # as draw_all passes the sweep's axes
    sweep_plots.line(df, Plot(kind="line", x="workload.batch", y="tpot_s"), "t", tmp_path / "l.png")
    (line,) = [ln for ln in figures[0].axes[0].get_lines() if "at each x" in ln.get_label()]
    assert list(line.get_xdata()) == [1, 4, 16]
    assert list(line.get_ydata()) == pytest.approx([0.6 * (0.01 + 0.001 * b) * 1e3 for b in (1, 4, 16)])
    assert line.get_label() == "TPOT: min over weight format at each x"
    sweep_plots.line(_sweep_frame(), Plot(kind="line", x="workload.batch", y="tpot_s"), "t", tmp_path / "m.png")
    assert [ln.get_label() for ln in figures[1].axes[0].get_lines() if "at each x" in ln.get_label()] == [
        "TPOT: min over the points at each x"]   # no axes given: said without names


def test_the_gantt_zoom_finds_a_pipelined_step_s_layers_in_its_first_micro_batch():
    """A pipelined step's records are mbI.stageJ.L<n>.op: the zoom (layers 0-1) spans the first micro-batch's, not
    every micro-batch's (which would be the whole stage), and found none before (it matched only L<n>. at the start)."""
    from sim.apps.gantt import layer_window
    from sim.core.results import OpRecord

    def rec(name, t):
        return OpRecord(name=name, kind="gemm", unit="gpu", start_s=t, end_s=t + 1.0, flops=0.0, bytes=0.0, bound="")
    ops = [rec("mb0.stage0.L0.q_proj", 0.0), rec("mb0.stage0.L1.q_proj", 1.0), rec("mb0.stage0.L2.q_proj", 2.0),
           rec("mb1.stage0.L0.q_proj", 3.0), rec("L0.q_proj", 10.0)]
    assert layer_window(ops[:4], (0, 1)) == (0.0, 2.0)
    assert layer_window(ops[4:], (0, 1)) == (10.0, 11.0)

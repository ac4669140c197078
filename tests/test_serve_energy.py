"""Energy of a serving run (issue 33, sim.apps.serve.energy): exact vs surrogate, the phase split, idle
power between iterations, the power trace and its Perfetto counter, and the ML.ENERGY replay."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from hw_models.machine import load_machine
from sim.apps.serve import mlenergy as M
from sim.apps.serve.energy import energy_window, power_trace
from sim.apps.serve.output import chrome_trace
from sim.apps.serve.run import serve
from sim.apps.serve.spec import ServeFile
from sim.apps.serve.iteration import features
from sim.apps.serve.stepcost import ExactCost
from sim.core.model import load_model
from sim.core.schema import validate_mapping


def _file(rate: float, n: int = 60, limit_w: float | None = None, sampling: str = "greedy") -> ServeFile:
    raw = dict(name="t", model="llama3-8b", flash_attention=True, stack="vllm", sampling=sampling,
               serving=dict(arrivals=dict(process="poisson", rate=rate, num_requests=n, seed=1),
                            lengths=dict(prompt=dict(dist="uniform", low=64, high=1024),
                                         output=dict(dist="uniform", low=8, high=64)),
                            scheduler=dict(kind="vllm", max_num_seqs=32, max_num_batched_tokens=2048)))
    return validate_mapping(ServeFile, raw, "test.yaml", "a serving file")


@pytest.fixture(scope="module")
def h100():
    return load_machine("h100_sxm")


@pytest.fixture(scope="module")
def run(h100):
    return serve(_file(4.0), h100)


@pytest.mark.parametrize("sampling", ["greedy", "top_p"])   # top_p: the sampler's GPU work rides on both paths
def test_energy_exact_and_surrogate_within_one_percent(h100, sampling):
    _, exact = serve(_file(4.0, n=30, sampling=sampling), h100, exact=True)
    _, sur = serve(_file(4.0, n=30, sampling=sampling), h100)
    assert sur["energy"]["total_j"] == pytest.approx(exact["energy"]["total_j"], rel=0.01)
    assert sur["energy_per_token_j"] == pytest.approx(exact["energy_per_token_j"], rel=0.01)
    for phase in ("prefill", "decode", "idle"):
        assert sur["energy"]["by_phase_j"][phase] == pytest.approx(exact["energy"]["by_phase_j"][phase], rel=0.01,
                                                                   abs=1e-3 * exact["energy"]["total_j"])


def test_pim_decode_energy_of_the_surrogate_is_the_exact_steps():
    """On hbm_pim Llama-3-8B's GEMVs leave the banks past 4 rows and the step's energy jumps ~7.5x (0.72 -> 5.43 J
    at kv 768: the host then draws its power). The surrogate's decode grid had 4 and 8, so it read 6 rows at
    3.09 J against 5.44 exact, and a 30-request run 38% low (an energy researcher's trial). Every count to
    serving_dense_decodes is now a grid point: each step's energy within 1% of the exact step's."""
    from sim.apps.serve.instance import prepare
    from sim.apps.serve.spec import load_serve_file
    from tests.conftest import ROOT

    f, pim = load_serve_file(ROOT / "workloads/serve_pim_vs_h200.yaml", {}), load_machine("hbm_pim")
    sur, ex = prepare(f, pim), prepare(f, pim, exact=True)
    # 12 x 1,500 sits beside the PIM reach's kink: past 1,707 tokens 12 of Llama-2-7B's sequences hold more KV than
    # the PIM dies do and attention's sequences move to the host one by one. The KV table's usual points (1,024 and
    # 2,048) read it +7.5%; a PIM mapper with a reach asks for points every 25% (Mapper.serving_dense_kv).
    for n, kv in [(3, 700), (4, 768), (5, 768), (6, 768), (7, 1000), (12, 1000), (12, 1500)]:
        it = features([(1, kv)] * n)
        assert sur.target_cost(it)[1] == pytest.approx(ex.target_cost(it)[1], rel=0.01), (n, kv)
        assert sur.target_cost(it)[0] == pytest.approx(ex.target_cost(it)[0], rel=0.02), (n, kv)


def test_phases_add_up_and_idle_is_idle_power_over_the_gaps(run, h100):
    """At 4 requests/s the engine waits between bursts of work: the idle phase is the H100's idle power
    (117.1 W) x the gaps, and the three phases add up to the run's energy."""
    res, s = run
    e = s["energy"]
    gaps = res.makespan_s - res.iterations["duration_s"].sum()
    assert gaps > 0.05 * res.makespan_s
    assert e["by_phase_j"]["idle"] == pytest.approx(h100.units["gpu"].idle_power_w * gaps, rel=1e-9)
    assert sum(e["by_phase_j"].values()) == pytest.approx(e["total_j"], rel=1e-9)
    assert e["total_j"] == pytest.approx(s["energy_per_token_j"] * res.tokens_out, rel=1e-9)
    assert e["per_request_j"] == pytest.approx(e["total_j"] / s["completed"], rel=1e-9)
    assert h100.units["gpu"].idle_power_w < e["avg_power_per_device_w"] < e["peak_power_per_device_w"] <= 700.0 + 1e-6


def test_engine_gap_draws_idle_plus_activity_power(h100):
    """The vLLM stack's fitted per-iteration terms leave the GPU without a kernel inside the serving loop, but at
    boost clock (hw_models.base.Mapper.gap_active_j): over that gap the board draws idle + activity power,
    idle_power_w + active_power_w of h100_sxm (117.1 + 230 W as shipped), not the idle power alone."""
    cost = ExactCost(h100, _file(4.0), load_model("llama3-8b"))
    it = features([(1, 300)] * 12 + [(64, 64)])
    dev, full = cost.device(it), cost(it)
    gap = full[0] - dev[0]
    oh = cost.overheads
    assert gap == pytest.approx(oh.step_s + 13 * oh.per_seq_s, rel=1e-9)   # one GPU: no collectives
    assert gap > 0
    u = h100.units["gpu"]
    assert (full[1] - dev[1]) / gap == pytest.approx(u.idle_power_w + u.active_power_w, rel=1e-9)


def test_power_trace_integrates_to_the_energy_and_is_a_perfetto_counter(run):
    res, s = run
    t, w = power_trace(res)
    assert np.sum(w[:-1] * np.diff(t)) == pytest.approx(s["energy"]["total_j"], rel=1e-6)
    counters = [e for e in chrome_trace(res)["traceEvents"] if e["ph"] == "C"]
    assert len(counters) == len(t) and counters[0]["name"] == "power per device (W)"


def test_replicas_power_trace_is_all_devices_draw():
    """Two replicas (an energy researcher's trial: one counter interleaved both replicas' iterations, each at
    its own power, and integrated x 2 devices read 1.3% over the run's energy). By hand: replica 0 runs
    [0, 1) s at 600 J, replica 1 [0.5, 1.5) s at 400 J, 100 W idle a device, the run ends at 2 s:
    per device (600 + 100) / 2 = 350 W, then (600 + 400) / 2 = 500, (100 + 400) / 2 = 250, 100 to the end;
    integrated x 2: 1,000 J of work + 100 W x (4 - 2) device-seconds idle = 1,200 J."""
    from types import SimpleNamespace

    from hw_models.power import Board

    res = SimpleNamespace(iterations={"start_s": np.array([0.0, 0.5]), "duration_s": np.array([1.0, 1.0]),
                                      "energy_j": np.array([600.0, 400.0])},
                          board=Board(idle_w=100.0, devices=1), instances=2, makespan_s=2.0)
    t, w = power_trace(res)
    assert t.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0] and w.tolist() == [350.0, 500.0, 250.0, 100.0, 100.0]
    assert np.sum(w[:-1] * np.diff(t)) * 2 == pytest.approx(1200.0, rel=1e-12)


def test_power_plot_is_written(run, tmp_path):
    from sim.apps.serve.output import plots
    import matplotlib.pyplot as plt

    from sim.apps.serve import output

    res, _ = run
    shown = []
    real_save = output._save
    output._save = lambda fig, path: shown.append((path.name, fig)) or real_save(fig, path)
    try:
        assert tmp_path / "power.png" in plots(res, tmp_path)
    finally:
        output._save = real_save
    assert (tmp_path / "power.png").stat().st_size > 0
    ax = dict(shown)["power.png"].axes[0]
    # from 0 W, no offset: a flat line's rounding (215 +- 1e-9 W on groq_lpu) drew as large swings
    assert ax.get_ylim()[0] == 0 and ax.yaxis.get_major_formatter().get_offset() == ""
    plt.close("all")


def test_energy_window_of_the_whole_run_is_the_run(run):
    res, s = run
    joules, tokens = energy_window(res, 0.0, res.makespan_s)
    assert joules == pytest.approx(s["energy"]["total_j"], rel=1e-9)
    assert tokens == pytest.approx(res.tokens_out, rel=1e-9)


def test_lower_power_limit_never_shortens_the_run():
    """The same stream under 700, 400 and 250 W: the run never gets shorter, its power never higher."""
    spans, peaks = [], []
    for limit in (700, 400, 250):
        res, s = serve(_file(50.0, n=40), load_machine("h100_sxm", {"units.gpu.power_limit_w": limit}))
        spans.append(res.makespan_s)
        peaks.append(s["energy"]["peak_power_per_device_w"])
        assert peaks[-1] <= limit * (1 + 1e-9)
    assert spans == sorted(spans) and spans[-1] > spans[0]


@functools.lru_cache(maxsize=1)
def _replay_h100_8b_64(shared: Path) -> M.Replay:
    """One in-sample run (H100, Llama-3.1-8B, max_num_seqs 64, not one of the 19 the fit used), replayed once."""
    return M.replay(next(r for r in M.load_runs(shared)
                         if r.gpu == "H100" and r.preset == "llama3-8b" and r.max_num_seqs == 64))


def test_mlenergy_replay_of_one_h100_run(shared_validation):
    """J/token = power x GPUs / throughput holds for the replay, so its J/token error is the power's and the
    throughput's together (docs/energy.md has the whole table)."""
    x = _replay_h100_8b_64(shared_validation)
    # exact but for the CSV's rounding (J/token to 5 decimals, power to 0.1 W, tok/s to 0.01)
    assert x.j_error == pytest.approx((1 + x.power_error) / (1 + x.throughput_error) - 1, rel=1e-3)


@pytest.mark.xfail(strict=True, reason="the one-GPU Llama-3.1-8B replay draws activity power over its whole steady "
                                       "window (engine gaps at boost clock) and still reads 507 W against 610 W "
                                       "measured, with tok/s 26% high: its step lacks per-sequence work (docs/energy.md)")
def test_mlenergy_replay_of_one_h100_run_meets_the_power_target(shared_validation):
    """The issue's H100 power target (10%) on this run. It held before issue 29 (the model said 579 W);
    the H100 power MAPE over all the runs still meets it (7.7%, docs/energy.md), this run does not (-17%).
    Strict: when the serving model charges this power again, the xfail fails and comes off."""
    assert abs(_replay_h100_8b_64(shared_validation).power_error) < 0.10


@pytest.mark.parametrize("exact", [True, False])
def test_serve_reports_the_seconds_the_power_cap_added(exact):
    """One request runs the same iterations under any limit, so the seconds the 250 W cap adds are the engine
    time it has over the same run at a limit that never binds; the report names the limit, and utilisation
    does not count the cap as a resource."""
    loose, tight = (serve(_file(1.0, n=1), load_machine("h100_sxm", {"units.gpu.power_limit_w": w}), exact=exact)
                    for w in (5000, 250))
    assert loose[1]["energy"]["power_cap"] is None
    engine_s = [float(r.iterations["duration_s"].sum()) for r, _ in (loose, tight)]
    assert len(loose[0].iterations["duration_s"]) == len(tight[0].iterations["duration_s"])
    cap = tight[1]["energy"]["power_cap"]
    assert cap["limit_w"] == 250
    assert cap["added_s"] == pytest.approx(engine_s[1] - engine_s[0], rel=1e-6)
    assert cap["stretch"] == pytest.approx(engine_s[1] / engine_s[0] - 1.0, rel=1e-6)
    assert "power_cap" not in tight[1]["utilization"]


def test_a_limit_near_idle_power_says_it_is_outside_the_model_and_peaks_at_the_limit():
    """An energy trial: `sim serve` at 150 W on an H100 read "engine time +909%" with no word that no clock floor is
    modelled, which `sim run` says past 3x; and its peak power per device read 700.0000000000244 W at a 700 W limit
    that binds. The report row now carries the clause past 3x (not at a mild limit), and a peak a rounding error
    above the limit is the limit."""
    from rich.console import Console

    from sim.apps.serve.report import print_report

    def report(limit_w: float) -> tuple[dict, str]:
        _, s = serve(_file(1.0, n=2), load_machine("h100_sxm", {"units.gpu.power_limit_w": limit_w}))
        con = Console(record=True, width=400)
        print_report(s, "t", con)
        return s["energy"], con.export_text()

    near_idle, text = report(150.0)
    assert near_idle["power_cap"]["stretch"] > 2.0 and "no clock floor is modelled" in text
    mild, text = report(400.0)
    assert 0.0 < mild["power_cap"]["stretch"] < 2.0 and "no clock floor" not in text
    assert mild["peak_power_per_device_w"] <= 400.0
    from sim.apps.serve.energy import _at_most_limit
    assert _at_most_limit(700.0000000000244, 700.0) == 700.0   # rounding above a binding limit
    assert _at_most_limit(839.0, 700.0) == 839.0 and _at_most_limit(650.0, 700.0) == 650.0   # offload's host; below
    assert _at_most_limit(700.0000000000244, None) == 700.0000000000244


def test_serve_names_what_its_power_figures_rest_on(run):
    """`sim serve` says where the board figures come from, as `sim run` does (its "power figures" row): the
    preset's power_source, in the summary and the report; a preset without the board-power model has none."""
    from rich.console import Console

    from sim.apps.serve.report import print_report

    src = load_machine("h100_sxm").units["gpu"].power_source
    assert src.startswith("fitted") and run[1]["energy"]["power_source"] == src
    con = Console(record=True, width=400)
    print_report(run[1], "t", con)
    assert any("power figures" in line and src in line for line in con.export_text().splitlines())
    _, plain = serve(_file(1.0, n=2), load_machine("l40s"))
    assert "power_source" not in plain["energy"]


def test_the_surrogate_caps_its_interpolated_steps_as_the_exact_step_is_capped():
    """The step-cost tables hold iterations at full clock and the cap is applied to the interpolated cost
    (ExactCost.capped, stop 67): interpolated across the limit's kink, capped grid points had read a stream's mean TTFT
    1.1% (vLLM) and 3.4% (Sarathi) off the exact run on the a6000. On a capped step the two agree exactly: time,
    energy, and the cap's added seconds."""
    from hw_models.power import CAP_ADDED

    machine = load_machine("h100_sxm", {"units.gpu.power_limit_w": 300.0})
    f = _file(4.0)
    cost = ExactCost(machine, f, f.model_config_())
    it = features([(512, 512), (1, 300), (1, 700)])
    full = cost.mapper.iteration(tuple(it.seqs), device_only=True)   # the table's point: full clock
    step = cost.mapper.capped(full)                                    # the exact step under the limit
    added = step.counters["power_cap_s"]
    assert added > 0.1 * step.time_s   # it binds
    c = cost.capped(cost.device(it))
    assert c[0] == pytest.approx(step.time_s, rel=1e-12)
    assert c[1] == pytest.approx(step.energy_j + cost.mapper.power_j(step.busy_s, step.time_s), rel=1e-12)
    assert dict(zip(cost.keys, c[2:]))[CAP_ADDED] == pytest.approx(added, rel=1e-12)
    assert cost.device(it)[0] == pytest.approx(full.time_s, rel=1e-12) and full.time_s == pytest.approx(step.time_s - added)
    exact, sur = (serve(f, machine, exact=x)[1] for x in (True, False))
    for m in ("ttft", "tpot"):
        assert sur["latency"][m]["mean"] == pytest.approx(exact["latency"][m]["mean"], rel=2e-3), m
    assert sur["energy"]["total_j"] == pytest.approx(exact["energy"]["total_j"], rel=2e-3)
    assert exact["energy"]["power_cap"]["added_s"] > 0


def test_a_tp_instance_capped_after_interpolation_is_the_exact_capped_step():
    """The same under TP 2, whose mapper charges every rank's static power and clamps a rank's compute plus collective
    time at the wall (ParallelGpuMapper.power_j): ExactCost.capped recomputes it over the stretched wall, as the exact
    step's energy is (a review had asked whether the two agree beyond one GPU)."""
    machine = load_machine("h100_sxm", {"units.gpu.power_limit_w": 300.0})
    raw = dict(name="t", model="llama3-8b", flash_attention=True, stack="vllm",
               parallel=dict(tp=2, topology="dgx_h100"),
               serving=dict(arrivals=dict(process="poisson", rate=4.0, num_requests=8, seed=1),
                            lengths=dict(prompt=dict(dist="uniform", low=64, high=512),
                                         output=dict(dist="uniform", low=8, high=16)),
                            scheduler=dict(kind="vllm", max_num_seqs=32, max_num_batched_tokens=2048)))
    f = validate_mapping(ServeFile, raw, "test.yaml", "a serving file")
    cost = ExactCost(machine, f, f.model_config_())
    for seqs in ([(1024, 1024)], [(512, 512)] + [(1, 400)] * 16):
        it = features(seqs)
        step = cost.mapper.capped(cost.mapper.iteration(tuple(it.seqs), device_only=True))
        assert step.counters["power_cap_s"] > 0
        c = cost.capped(cost.device(it))
        assert c[0] == pytest.approx(step.time_s, rel=1e-12)
        assert c[1] == pytest.approx(step.energy_j + cost.mapper.power_j(step.busy_s, step.time_s), rel=1e-12)


def test_run_totals_read_in_one_style():
    """An energy trial read 'run total 4561 J' in one run and '1.541e+04 J' in the next: whole joules with
    separators from 100 J, three figures below."""
    from sim.apps.serve.report import _total

    assert (_total(15410.2), _total(4561.0), _total(12.345), _total(0.5)) == ("15,410", "4,561", "12.3", "0.5")


def test_a_served_run_under_a_clock_lock_says_it_is_a_lock():
    """`sim serve` with the SM clock locked at 60% (units.gpu.sm_clock_fraction): every iteration runs at that clock
    (the 700 W limit lowers none further at 4 requests/s), the energy falls and the report row names the lock, not the
    limit; exact and surrogate costs agree on it."""
    from rich.console import Console

    from sim.apps.serve.report import print_report

    free = serve(_file(4.0, n=20), load_machine("h100_sxm"))[1]
    runs = [serve(_file(4.0, n=20), load_machine("h100_sxm", {"units.gpu.sm_clock_fraction": 0.6}), exact=x)[1]
            for x in (True, False)]
    for s in runs:
        cap = s["energy"]["power_cap"]
        # the device steps at the lock; the engine time holds the host work beside them
        assert cap["clock_lock"] == 0.6 and cap["clock"] == pytest.approx(0.6) and 0.5 < cap["clocked_share"] <= 1.0
        assert s["energy"]["per_output_token_j"] < free["energy"]["per_output_token_j"]
    assert runs[1]["latency"]["tpot"]["mean"] == pytest.approx(runs[0]["latency"]["tpot"]["mean"], rel=2e-3)
    con = Console(record=True, width=400)
    print_report(runs[0], "t", con)
    assert "the SM clock is locked at 60% of full: engine time +" in con.export_text()

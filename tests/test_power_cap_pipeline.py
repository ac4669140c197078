"""The board power limit per device under pipeline parallelism, and the cap in the run's report.

Found by a new-user trial: one sequence's prefill on two pipeline stages of H100s ran faster than
on one H100 (45.6 against 53.9 ms), because the 700 W limit was applied to the power averaged
over the devices and the step: each stage's GPU idles while the other works, so the average was
half the draw and the cap never bound, while the single GPU was stretched. A board limits its own
power while it works (hw_models/power.py): each stage is capped on its own board's draw while it runs
(hw_models/gpu/stage_power.py).
"""

import json

import pytest

from hw_models.clock import ClockWork
from hw_models.gpu.schedule import StageCost
from hw_models.gpu.stage_power import stage_caps
from hw_models.machine import load_machine
from hw_models.power import BoardPower
from hw_models.registry import mapper_for
from sim.apps.cli import main
from sim.core import engine
from sim.core.engine import Task
from sim.core.lowering import lower
from sim.core.workload import Workload
from tests.conftest import ROOT

PLAN = {"tp": 1, "pp": 2, "topology": "dgx_h100"}


def _step(limit_w: float | None = None, parallel: dict | None = PLAN, batch: int = 1):
    machine = load_machine("h100_sxm", {"units.gpu.power_limit_w": limit_w} if limit_w else None)
    w = Workload(model="llama3-8b", batch=batch, prompt_len=2048, gen_len=2, parallel=parallel,
                 formats={"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"})
    mp = mapper_for(machine, w, w.model_config_())
    return mp, mp.step("prefill", 2048, 2048)


def test_two_stages_of_one_sequence_are_never_faster_than_one_gpu():
    """With one micro-batch the stages run one after the other: the same kernels as one GPU plus a
    send, each GPU drawing what the one GPU draws while it works, so as capped."""
    _, one = _step(parallel=None)
    _, two = _step()
    assert one.counters["power_cap_s"] > 0.0           # the 700 W limit binds on a 2048-token prefill
    assert two.time_s >= one.time_s


def test_two_stages_in_turn_each_stretch_by_their_own_power():
    """By hand: 100 W idle, 200 W activity, 500 W limit. Stage 0 runs 1 s with 600 J of dynamic energy, so its
    board draws 100 + (200 x 1 + 600) / 1 = 900 W while it works: s = 800 / (1 x (500 - 100)) = 2. Stage 1 runs
    1 s with 100 J: 100 + 300 = 400 W, under the limit, s = 1. In turn the step takes 2 x 1 + 1 = 3 s. The mean
    over the two boards across the 2 s step, 100 + (800 + 300) / (2 x 2) = 375 W, would never have bound. (Tasks
    without their ops' split by bound stretch as wholes, every cycle kept: the hot board at clock 1/2, nothing saved.)"""
    bp = BoardPower(idle_w=100.0, active_w=200.0, limit_w=500.0)
    tasks = [Task("mb0.stage0", "gpu", 1.0, tag=StageCost("mb0.stage0", 1.0, energy_j=600.0)),
             Task("mb0.stage1", "gpu.s1", 1.0, ("mb0.stage0",), tag=StageCost("mb0.stage1", 1.0, energy_j=100.0))]
    slowed, hot, saved = stage_caps(tasks, bp)
    assert [t.duration_s for t in slowed] == [2.0, 1.0] and saved == 0.0
    assert hot == (800.0, 1.0, 0.5)                     # the hottest board: 800 J clocked over its 1 s of work
    assert engine.run(slowed, {}, {}, True).makespan_s == pytest.approx(3.0)
    assert stage_caps(tasks, BoardPower(100.0, 200.0, 1000.0))[1] is None   # 900 W < 1000 W: nothing binds


def test_each_stage_slows_by_its_own_board():
    """Llama-3-8B, one 2048-token prompt, pp = 2 on h100_sxm: each stage's task of d_j seconds and e_j dynamic
    joules slows by what its own board's limit adds to it (BoardPower.under_cap over d_j with the stage's ops split by
    bound, solved by hand in tests/test_power.py), less than the whole task stretched alike, s_j = (active d_j + e_j) /
    (d_j (700 - idle)); the activation send between them does not; busy times stay those at full clock and the energy
    loses the activity the lower clocks save, every rank's."""
    mp, _ = _step()
    bp = mp.machine.units["gpu"].board_power()
    graph = lower(mp.model, "prefill", 1, 2048, 2048, mp.formats, False)
    tasks = mp.plan_step(graph)
    stages = [t for t in tasks if isinstance(t.tag, StageCost)]
    (send,) = [t for t in tasks if not isinstance(t.tag, StageCost)]
    s = [(bp.active_w * t.duration_s + t.tag.energy_j) / (t.duration_s * (700.0 - bp.idle_w)) for t in stages]
    assert min(s) > 1.05                                 # both stages bind: each board alone draws over 700 W
    step = mp.graph_step("prefill", 2048, graph)
    caps = [bp.under_cap(t.duration_s, bp.active_w * t.duration_s, t.tag.energy_j, ClockWork.read(t.tag.clock))
            for t in stages]
    assert all(0.0 < a < (sj - 1.0) * t.duration_s for (a, _, _), sj, t in zip(caps, s, stages))
    assert step.time_s == pytest.approx(sum(t.duration_s + a for (a, _, _), t in zip(caps, stages)) + send.duration_s)
    assert step.busy_s["gpu"] == pytest.approx(stages[0].duration_s)      # full clock: the activity energy's
    free = engine.run(tasks, mp.resources(), mp.containers(), mp.in_order)
    assert step.energy_j == pytest.approx(mp.energy_j(free) - sum(saved for _, saved, _ in caps), rel=1e-12)
    assert step.counters["power_cap_s"] == pytest.approx(step.time_s - sum(t.duration_s for t in tasks))


def test_the_run_says_when_the_cap_binds(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["run", str(ROOT / "workloads/llama13b_prefill.yaml"), "--hw", "h100_sxm", "--json", str(out)]) == 0
    cap = json.loads(out.read_text())["extra"]["power_cap"]
    err = capsys.readouterr()
    note = next(line for line in (err.out + err.err).splitlines() if "power cap:" in line)
    assert cap["limit_w"] == 700.0 and cap["prefill_stretch"] > 0.05 and f"prefill {cap['prefill_stretch']:+.1%}" in note
    assert f"would draw {cap['prefill_board_w']:.0f} W" in note and cap["decode_board_w"] is None
    assert f"at {cap['prefill_clock']:.0%} of the full clock" in note and cap["prefill_clock"] < 1 / (1 + cap["prefill_stretch"])
    assert main(["run", str(ROOT / "workloads/llama13b_prefill.yaml"), "--hw", "h100_sxm", "--json", str(out),
                 "--set", "hw.units.gpu.power_limit_w=5000"]) == 0
    free = json.loads(out.read_text())
    assert "power_cap" not in free["extra"]
    # what the board would draw at full clock is what the uncapped run's prefill draws: its energy over its TTFT
    assert cap["prefill_board_w"] == pytest.approx(free["energy_by_phase_j"]["prefill"] / free["ttft_s"], rel=1e-9)
    assert "power cap:" not in "".join(capsys.readouterr())

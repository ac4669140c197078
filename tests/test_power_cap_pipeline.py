"""The board power limit per device under pipeline parallelism, and the cap in the run's report.

Found by a new-user trial: one sequence's prefill on two pipeline stages of H100s ran faster than
on one H100 (45.6 against 53.9 ms), because the 700 W limit was applied to the power averaged
over the devices and the step: each stage's GPU idles while the other works, so the average was
half the draw and the cap never bound, while the single GPU was stretched. A board limits its own
power while it works (hw_models/power.py): each device is capped over its own busy time.
"""

import json

import pytest

from hw_models.machine import load_machine
from hw_models.registry import mapper_for
from sim.apps.cli import main
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


def test_each_stage_is_capped_over_its_own_busy_time():
    """Hand formula (power.py, with a device's busy time b for the step's t): s = (active_w x b + dynamic
    J) / (b (L - idle)), b the stages' summed busy time (one device each), the dynamic joules the
    uncapped step's. The step stretches by s."""
    mp, free = _step(limit_w=5000.0)
    _, capped = _step()
    bp = mp.machine.units["gpu"].board_power()
    b = free.busy_s["gpu"] + free.busy_s["gpu.s1"]
    s = (bp.active_w * b + free.energy_j) / (b * (700.0 - bp.idle_w))
    assert s > 1.05
    assert capped.time_s == pytest.approx(free.time_s * s, rel=1e-9)
    assert capped.counters["power_cap_s"] == pytest.approx(capped.time_s - free.time_s)


def test_the_run_says_when_the_cap_binds(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["run", str(ROOT / "workloads/llama13b_prefill.yaml"), "--hw", "h100_sxm", "--json", str(out)]) == 0
    cap = json.loads(out.read_text())["extra"]["power_cap"]
    err = capsys.readouterr()
    note = next(line for line in (err.out + err.err).splitlines() if "power cap:" in line)
    assert cap["limit_w"] == 700.0 and cap["prefill_stretch"] > 0.05 and f"prefill {cap['prefill_stretch']:+.1%}" in note
    # At full clock the board draws idle + clocked / t; capped, the step stretches by s = clocked / (t (L - idle)),
    # so the board's draw is idle + s (L - idle) (power.py).
    idle = load_machine("h100_sxm").units["gpu"].idle_power_w
    assert cap["prefill_board_w"] == pytest.approx(idle + (1 + cap["prefill_stretch"]) * (700.0 - idle))
    assert f"would draw {cap['prefill_board_w']:.0f} W" in note and cap["decode_board_w"] is None
    assert main(["run", str(ROOT / "workloads/llama13b_prefill.yaml"), "--hw", "h100_sxm", "--json", str(out),
                 "--set", "hw.units.gpu.power_limit_w=5000"]) == 0
    assert "power_cap" not in json.loads(out.read_text())["extra"]
    assert "power cap:" not in "".join(capsys.readouterr())

"""`sim run`'s average power per device (RunResult.avg_power_per_device_w): the run's energy over its time and the
devices that draw it, in the report, the JSON and a sweep's metrics, as `sim serve` gives it."""

from __future__ import annotations

import json

import pytest

from hw_models.machine import load_machine
from hw_models.registry import simulate
from sim.apps.cli import main
from sim.core.workload import Workload
from tests.conftest import ROOT

FORMATS = {"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"}


def _run(hw: str, parallel: dict | None = None):
    w = Workload(model="llama2-7b", batch=8, prompt_len=256, gen_len=16, formats=FORMATS, flash_attention=True,
                 parallel=parallel)
    return simulate(w, load_machine(hw))


def test_average_power_is_the_runs_energy_over_its_time_and_devices():
    """By definition, and within the board's physics: an H100 (board-power model) draws at least its idle power and
    at most its 700 W limit on average; two TP ranks each draw their own share, the run's energy over 2 devices."""
    one, two = _run("h100_sxm"), _run("h100_sxm", {"tp": 2, "topology": "dgx_h100"})
    idle_w = load_machine("h100_sxm").board_power().idle_w
    for r, n in ((one, 1), (two, 2)):
        assert r.devices == n
        joules = r.energy_per_token_j * r.batch * r.gen_len
        assert r.avg_power_per_device_w == pytest.approx(joules / (r.e2e_s * n), rel=1e-12)
        assert idle_w < r.avg_power_per_device_w <= 700.0
        assert r.metrics()["avg_power_per_device_w"] == r.avg_power_per_device_w
        assert r.to_json()["avg_power_per_device_w"] == r.avg_power_per_device_w


def test_the_report_and_json_say_the_power_and_what_it_holds(tmp_path, capsys):
    """The offload kind's power holds its host CPU where the preset gives it a power figure, as `sim serve` says
    (power_includes); where it gives none (flexgen_t4), the figures hold the GPU alone and a warning says so (a
    trial read flexgen_t4's 14.6 W as the GPU's and the host's: its CPU drew 0 W)."""
    out = tmp_path / "r.json"
    assert main(["run", str(ROOT / "workloads" / "opt30b_flexgen.yaml"), "--hw", "a6000_offload", "--json",
                 str(out)]) == 0
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    # a6000_offload's CPU has power_w alone (270 W), drawn while it computes (a trial read "with the host CPU" as
    # the host's whole draw): the line and a note say busy time
    assert data["devices"] == 1 and data["power_includes"] == "host CPU's busy time, host DRAM, link and disk J/byte"
    row = next(ln for ln in text.splitlines() if "power per device" in ln)
    assert f"{data['avg_power_per_device_w']:,.1f} W average over the run (1 device, with the host CPU's busy time, host DRAM, link and disk J/byte)" in row
    assert "draws its power_w 270 W over its busy time alone, nothing while it waits" in text
    assert main(["run", str(ROOT / "workloads" / "opt30b_flexgen.yaml"), "--hw", "flexgen_t4", "--json",
                 str(out)]) == 0
    captured = capsys.readouterr()
    assert json.loads(out.read_text())["power_includes"] == "host DRAM and link J/byte"   # its disk unpriced
    assert ("warning: energy: flexgen_t4's host CPU (units.cpu) has no power_w: the energy and power count the GPU "
            "and the bytes' J/byte (the transfers', and host DRAM's under CPU attention) alone") in captured.out


def test_a_run_without_decode_steps_has_no_tpot(tmp_path):
    """A DSE trial: a prefill-only workload (gen_len 1) recorded tpot_s = 0, which a sweep ranked the fastest and
    plotted at 0 s. It has no decode step: NaN in the metrics (a sweep's best-points and plots skip it), None in
    the JSON; the report says why."""
    import math

    from sim.core.results import check_finite

    w = Workload(model="llama2-7b", batch=1, prompt_len=256, gen_len=1, formats=FORMATS, flash_attention=True)
    r = check_finite(simulate(w, load_machine("h100_sxm")), "t")
    assert all(math.isnan(getattr(r, k)) for k in ("tpot_s", "tpot_first_s", "tpot_last_s"))
    assert math.isnan(r.metrics()["tpot_s"]) and r.ttft_s > 0
    assert r.to_json()["tpot_s"] is None
    assert not math.isnan(_run("h100_sxm").tpot_s)


def test_every_board_power_preset_says_what_its_figures_rest_on(capsys):
    """An architect's trial: b200's and a100_80g's idle and activity power are the H100's fit scaled by TDP, and the
    report read exactly as h100_sxm's, whose figures are fitted. Every unit with the board-power model now names
    its figures' source (fitted, or assumed by a rule), and `sim run` prints it."""
    from hw_models.machine import load_machine, preset_names
    board = {(p, n): u.power_source for p in preset_names() for n, u in load_machine(p).units.items()
             if u.idle_power_w is not None}
    assert {p for p, _ in board} >= {"h100_sxm", "h200", "b200", "a100_80g", "hbm_pim", "h100_offload"}
    assert all(src.startswith(("fitted:", "assumed:")) for src in board.values()), board
    assert board[("h100_sxm", "gpu")].startswith("fitted:") and board[("b200", "gpu")].startswith("assumed:")
    assert main(["run", str(ROOT / "workloads" / "llama13b_decode.yaml"), "--hw", "b200"]) == 0
    out = capsys.readouterr().out
    assert "power figures" in out and "assumed: the H100's fit scaled by the board limits (1000 / 700 W)" in out


def test_run_json_gives_the_joules_and_their_phases(tmp_path):
    """An energy trial: `sim run --json` held per-token figures alone where `sim serve --json` gives the total and the
    split by phase. The split holds the decode's J per token over its batch x (gen_len - 1) tokens (the phases are
    derived from the total and the prefill's own figure: the decode side checks both); a busy-time preset, which
    has no split, gives null."""
    out = tmp_path / "r.json"
    w = str(ROOT / "workloads" / "llama2_7b_decode.yaml")
    assert main(["run", w, "--hw", "h100_sxm", "--json", str(out), "-q"]) == 0
    d = json.loads(out.read_text())
    b, g = d["batch"], d["gen_len"]
    assert d["energy_by_phase_j"]["decode"] == pytest.approx(d["decode_energy_per_token_j"] * b * (g - 1), rel=1e-9)
    assert main(["run", w, "--hw", "l40s", "--json", str(out), "-q"]) == 0
    busy = json.loads(out.read_text())
    assert busy["energy_by_phase_j"] is None and busy["energy_total_j"] > 0


def test_a_board_power_model_missing_a_figure_is_said(tmp_path):
    """An energy trial: h100_sxm copies without active_power_w, energy_j_per_flop or the HBM's energy_j_per_byte read
    2.8 / 5.7 / 4.8 J/token against 5.9, silently, under the report's full-model wording. Each missing figure is named
    in the run's notes; the shipped board-power presets lack none."""
    from hw_models.power import unpriced_board_note
    from sim.core.schema import read_yaml

    raw = read_yaml(ROOT / "hw_models" / "presets" / "h100_sxm.yaml")
    gpu = raw["units"]["gpu"]
    del gpu["active_power_w"], gpu["energy_j_per_flop"]
    note = unpriced_board_note(_machine_from(raw, tmp_path))
    assert "without units.gpu.active_power_w, units.gpu.energy_j_per_flop: each counts 0" in note
    w = Workload(model="llama2-7b", batch=1, prompt_len=64, gen_len=4, formats=FORMATS)
    assert note in simulate(w, _machine_from(raw, tmp_path)).notes
    for preset in ("h100_sxm", "h200", "b200", "a100_80g", "a6000", "hbm_pim", "attacc_dgx"):
        assert unpriced_board_note(load_machine(preset)) is None, preset
    assert unpriced_board_note(load_machine("groq_lpu")) is None   # no board-power model: busy_time_note's case


def _machine_from(raw: dict, tmp_path):
    import yaml

    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_machine(str(path))


def test_joules_without_their_unit_are_refused(tmp_path):
    """An energy trial: `energy_j_per_flop: {fp16: 0.7}` (pJ meant, J read) ran a TTFT of 3.2e10 s, exit 0. A figure
    above any device's (1 nJ a FLOP, 1 uJ a byte; the presets' largest are 20 pJ and 1.9 nJ) is refused naming its
    key; with its unit it reads as meant."""
    from sim.core.errors import ConfigError
    from sim.core.schema import read_yaml

    raw = read_yaml(ROOT / "hw_models" / "presets" / "h100_sxm.yaml")
    raw["units"]["gpu"]["energy_j_per_flop"]["fp16"] = 0.7
    with pytest.raises(ConfigError, match=r"units.gpu.energy_j_per_flop: fp16: 0.7 J a FLOP, more than any device "
                                          r"spends \(1e-09 J\); a figure in pJ or nJ needs its unit"):
        _machine_from(raw, tmp_path)
    raw["units"]["gpu"]["energy_j_per_flop"]["fp16"] = "0.7 pJ"
    raw["memory"]["hbm"]["energy_j_per_byte"] = 40
    with pytest.raises(ConfigError, match=r"memory.hbm.energy_j_per_byte: 40 J a byte, more than any device spends"):
        _machine_from(raw, tmp_path)
    # every energy field reads so (a review): the PIM MACs' J/FLOP given bare ran 9.6e9 J/token
    w = Workload(model="llama2-7b", batch=1, prompt_len=64, gen_len=2, formats=FORMATS)
    with pytest.raises(ConfigError, match=r"pim.energy_j_per_flop: 0.75 J a FLOP, more than any device spends"):
        simulate(w, load_machine("hbm_pim", {"pim.energy_j_per_flop": 0.75}))
    with pytest.raises(ConfigError, match=r"pim.energy_internal_j_per_byte: 2 J a byte"):
        simulate(w, load_machine("hbm_pim", {"pim.energy_internal_j_per_byte": 2}))
    raw["memory"]["hbm"]["energy_j_per_byte"] = -1e-12   # negative: the field's key once, not ": : must be >= 0"
    with pytest.raises(ConfigError, match=r"memory.hbm.energy_j_per_byte: must be >= 0"):
        _machine_from(raw, tmp_path)
    raw["memory"]["hbm"]["energy_j_per_byte"] = "40 pJ/B"
    m = _machine_from(raw, tmp_path)
    assert m.units["gpu"].energy_j_per_flop["fp16"] == pytest.approx(0.7e-12)
    assert m.memory["hbm"].energy_j_per_byte == pytest.approx(40e-12)


def test_a_unit_of_several_boards_gives_its_power_per_board(capsys):
    """An energy trial: attacc_dgx (eight A100 boards as one unit) reported 3,103 W "per device (1 device)" beside
    TP x PP H100 runs at ~420 W each. The report gives the unit's figure and a board's, the unit's over its `boards`;
    one-board presets say nothing more."""
    from sim.apps.cli import main

    assert load_machine("attacc_dgx").units["gpu"].boards == 8 and load_machine("h100_sxm").units["gpu"].boards == 1
    assert main(["run", str(ROOT / "workloads/opt175b_attacc.yaml"), "--hw", "attacc_dgx"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "power per device" in x)
    unit_w = float(line.split("W average")[0].split()[-1].replace(",", ""))
    board_w = float(line.split("8 boards: ")[1].split(" W a board")[0].replace(",", ""))
    assert board_w == pytest.approx(unit_w / 8, abs=0.06)
    assert main(["run", str(ROOT / "workloads/llama13b_decode.yaml"), "--hw", "h100_sxm"]) == 0
    assert "a board" not in capsys.readouterr().out


@pytest.mark.parametrize("key, value, said", [
    ("units.gpu.launch_overhead_s", 5, "less than or equal to 0.01"),       # 5 us meant: read as 5 s
    ("units.gpu.power_w", 750000, "less than or equal to 100000"),         # 750 kW
    ("units.gpu.efficiency.clock_hz", 2100, "greater than or equal to 1000000"),   # 2.1 GHz meant
    ("memory.hbm.latency_s", 0.5, "less than or equal to 0.1"),
])
def test_absurd_figures_of_a_preset_author_are_refused(key, value, said):
    """A preset author's trial: `launch_overhead_s: 5` (5 s: TPOT 1.89e6 ms), 750 kW, a 2.1 kHz clock and a 0.5 s HBM
    latency passed `sim hw check`. Each is now refused naming its key (the shipped presets' largest: 19 us, 3.2 kW,
    100 us; their smallest clock 1.41 GHz)."""
    from sim.core.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"{key}: Input should be {said}"):
        load_machine("h100_sxm", {key: value})


def test_a_preset_without_efficiency_or_launch_is_said_to_be_the_ideal_roofline(tmp_path, capsys):
    """A preset author's trial: a GPU preset giving only its peaks ran to --ideal's figures to the digit, with no word
    (where --ideal itself warns). It is said; no shipped preset is."""
    from sim.apps.checks import ideal_unit
    from sim.apps.cli import main

    hw = tmp_path / "mini.yaml"
    hw.write_text("version: 1\nname: mini\nkind: gpu\nmemory:\n  hbm: {capacity_bytes: 192 GB, bandwidth_bytes_per_s: "
                  "5.3 TB/s}\nunits:\n  gpu: {memory: hbm, peak_flops_per_s: {fp16: 1307 TFLOP/s}, vector_flops_per_s: "
                  "163 TFLOP/s}\n")
    assert main(["run", str(ROOT / "workloads/llama13b_decode.yaml"), "--hw", str(hw), "-q"]) == 0
    assert "units.gpu gives no efficiency or launch_overhead_s: the ideal roofline" in capsys.readouterr().err
    for preset in ("h100_sxm", "a6000", "cpu_host", "l40s", "rtx4090", "b200"):
        assert ideal_unit(load_machine(preset)) == []

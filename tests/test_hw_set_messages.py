"""`--set hw.KEY` messages: a memory latency nothing reads says so (sim.apps.checks.ignored_hw_overrides; a trial
set 1 s on an a6000 and got the same TTFT and TPOT, silently), and a bad section value names its --set."""

import json

from sim.apps.cli import main
from tests.conftest import ROOT

W7 = str(ROOT / "workloads" / "llama2_7b_decode.yaml")
FLEXGEN = str(ROOT / "workloads" / "opt30b_flexgen.yaml")


def _run(tmp_path, capsys, *args):
    out = tmp_path / "r.json"
    assert main(["run", *args, "--json", str(out), "-q"]) == 0
    return json.loads(out.read_text()), capsys.readouterr().err


def test_a_gpu_memory_latency_is_ignored_and_said(tmp_path, capsys):
    base, err = _run(tmp_path, capsys, W7, "--hw", "a6000")
    assert "latency_s" not in err
    slow, err = _run(tmp_path, capsys, W7, "--hw", "a6000", "--set", "hw.memory.@device.latency_s=0.05")   # <= 0.1 s
    # nothing reads it: the run is the same to the last digit, which is why the warning is there
    assert (slow["ttft_s"], slow["tpot_s"]) == (base["ttft_s"], base["tpot_s"])
    assert err.strip() == ("warning: --set hw.memory.@device.latency_s: no effect on a6000 (gpu kind): only an "
                           "offload preset's disk tier reads latency_s; a memory's ramp is its unit's "
                           "efficiency.memory_ramp_s")


def test_an_offload_disk_latency_is_read_and_not_warned(tmp_path, capsys):
    base, _ = _run(tmp_path, capsys, FLEXGEN, "--hw", "a6000_offload", "--set", "policy.wd=10",
                   "--set", "policy.wc=70")
    slow, err = _run(tmp_path, capsys, FLEXGEN, "--hw", "a6000_offload", "--set", "policy.wd=10",
                     "--set", "policy.wc=70", "--set", "hw.memory.disk.latency_s=0.01")
    assert "latency_s" not in err
    assert slow["tpot_s"] > base["tpot_s"]   # 10% of the weights on the disk: every layer's read waits 10 ms more



def test_a_bad_section_override_names_its_set(capsys):
    """A kind's section is checked when the run builds it, so `--set hw.host.pcie.generation=7` read as flexgen_t4's
    own mistake (a trial's finding): the message names the --set."""
    assert main(["run", FLEXGEN, "--hw", "flexgen_t4", "--set", "hw.host.pcie.generation=7", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("host.pcie.generation: Input should be less than or equal to 5 (workload "
                        f"{FLEXGEN}; from --set hw.host.pcie.generation)")


def test_a_misspelt_key_under_a_named_unit_or_tier_gets_its_neighbour(capsys):
    """An energy trial: `--set hw.units.gpu.power_limt_w=300` read only "unknown key", where a misspelt workload or
    sweep key names its neighbour: the schema walk stopped at the unit's own name (`gpu`, a key of the file's, not
    of the schema). It now steps over such names, under units and memory alike."""
    w = str(ROOT / "workloads" / "llama2_7b_decode.yaml")
    for key, near in (("units.gpu.power_limt_w", "power_limit_w"), ("memory.hbm.bandwith_bytes_per_s",
                                                                      "bandwidth_bytes_per_s"),
                      ("units.gpu.efficiency.compute_maxx", "compute_max")):
        assert main(["run", w, "--hw", "h100_sxm", "--set", f"hw.{key}=1"]) == 2
        assert f"{key}: unknown key (did you mean {near}?)" in capsys.readouterr().err


def test_a_misspelt_key_in_a_kinds_own_section_gets_its_neighbour(capsys):
    """A review: `--set hw.host.pcie.energy_j_per_bite` read a bare "unknown key": the kinds' own sections (host:,
    pim:, spatial:) were validated without their schema's names to suggest from."""
    for workload, hw, key, near in (("opt30b_flexgen", "a6000_offload", "host.pcie.energy_j_per_bite", "energy_j_per_byte"),
                                    ("llama2_7b_decode", "hbm_pim", "pim.clock_hzz", "clock_hz"),
                                    ("llama2_7b_decode", "groq_lpu", "spatial.chipz", "chips")):
        assert main(["run", str(ROOT / "workloads" / f"{workload}.yaml"), "--hw", hw, "--set", f"hw.{key}=1"]) == 2
        assert f"{key}: unknown key (did you mean {near}?)" in capsys.readouterr().err

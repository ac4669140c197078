"""`--set`: one rule for every subcommand (sim.core.settings), worked by hand."""

import pytest

from hw_models.machine import load_machine
from sim.apps.cli import main
from sim.core.errors import ConfigError
from sim.core.settings import hw_only, parse_set, resolve_aliases, split_settings
from tests.conftest import ROOT

WL = str(ROOT / "workloads/llama2_7b_decode.yaml")


def test_values_are_yaml():
    assert parse_set(["batch=16", "x=1.5", "flag=true", "l=[1, 2]", "w=int4", "e=", "s= padded "]) == \
        {"batch": 16, "x": 1.5, "flag": True, "l": [1, 2], "w": "int4", "e": None, "s": "padded"}
    # YAML 1.1 reads 2e12 as text (the schemas make it a number); "a: b: c" is no YAML: kept as typed
    assert parse_set(["b=2e12", "t=a: b: c"]) == {"b": "2e12", "t": "a: b: c"}


def test_later_item_wins_and_value_may_hold_equals():
    assert parse_set(["batch=4", "batch=8", "name=a=b"]) == {"batch": 8, "name": "a=b"}


def test_split_by_prefix():
    s = split_settings(["batch=4", "workload.gen_len=2", "hw.memory.gddr.bandwidth_bytes_per_s=1e12"],
                       {"policy": "search"})
    assert s.workload == {"batch": 4, "gen_len": 2, "policy": "search"}
    assert s.hw == {"memory.gddr.bandwidth_bytes_per_s": "1e12"}   # text until the schema reads it


@pytest.mark.parametrize("item, says", [
    ("batch", "expected KEY=VALUE"),
    ("=4", "expected KEY=VALUE"),
    ("formats..weights=int4", "empty part"),
    ("hw.=1", "empty part"),
])
def test_malformed_item_is_one_clear_error(item, says):
    with pytest.raises(ConfigError, match=says) as exc:
        parse_set([item])
    assert "\n" not in str(exc.value) and repr(item) in str(exc.value)


def test_malformed_item_from_the_cli_exits_2_with_one_line(capsys):
    assert main(["run", WL, "--hw", "a6000", "-q", "--set", "batch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --set 'batch': expected KEY=VALUE, e.g. --set batch=16"]


def test_hw_only_refuses_workload_keys():
    assert hw_only(split_settings(["hw.name=x"]), "validate") == {"name": "x"}
    with pytest.raises(ConfigError, match="sim validate reads no workload"):
        hw_only(split_settings(["batch=4"]), "validate")


def test_device_alias_resolves_against_the_machine():
    assert resolve_aliases("memory.@device.bandwidth_bytes_per_s", {"@device": "gddr"}) == \
        "memory.gddr.bandwidth_bytes_per_s"
    # a6000's device tier is gddr: the alias and the literal name set the same field
    by_alias = load_machine("a6000", {"memory.@device.bandwidth_bytes_per_s": 1.0e12})
    by_name = load_machine("a6000", {"memory.gddr.bandwidth_bytes_per_s": 1.0e12})
    assert by_alias.memory["gddr"].bandwidth_bytes_per_s == 1.0e12 == by_name.memory["gddr"].bandwidth_bytes_per_s


def test_device_alias_from_run(tmp_path):
    import json

    out = tmp_path / "r.json"
    slow = tmp_path / "slow.json"
    assert main(["run", WL, "--hw", "a6000", "-q", "--set", "gen_len=2", "--json", str(out)]) == 0
    assert main(["run", WL, "--hw", "a6000", "-q", "--set", "gen_len=2", "--json", str(slow),
                 "--set", "hw.memory.@device.bandwidth_bytes_per_s=384e9"]) == 0
    # decode of a 7B model at batch 1 is bandwidth bound: half the bandwidth, a slower step
    assert json.loads(slow.read_text())["tpot_s"] > 1.5 * json.loads(out.read_text())["tpot_s"]


def test_version(capsys):
    from sim import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"sim {__version__}"


def test_validate_takes_hw_settings_and_quiet(tmp_path, capsys):
    """`sim validate --set hw.…` reaches the machine: at half H200's memory bandwidth no op is
    faster and the memory-bound ones are slower; -q leaves stdout empty."""
    import json

    trace = str(ROOT / "traces/h200/llama2-13b_L4_fp16_b8_p1024_d8_cuda.trace.json.gz")
    base, slow = tmp_path / "base.json", tmp_path / "slow.json"
    assert main(["validate", trace, "--hw", "h200", "-q", "--json", str(base)]) == 0
    bw = load_machine("h200").memory[load_machine("h200").device_tier].bandwidth_bytes_per_s
    assert main(["validate", trace, "--hw", "h200", "-q", "--json", str(slow),
                 "--set", f"hw.memory.@device.bandwidth_bytes_per_s={bw / 2}"]) == 0
    assert capsys.readouterr().out == ""
    before = [r["simulated_s"] for r in json.loads(base.read_text())["ops"]]
    after = [r["simulated_s"] for r in json.loads(slow.read_text())["ops"]]
    assert len(before) == len(after) and all(a >= b * (1 - 1e-12) for b, a in zip(before, after))
    assert sum(after) > 1.2 * sum(before)
    assert main(["validate", trace, "--hw", "h200", "--set", "batch=4"]) == 2


def test_a_hardware_factor_is_the_preset_s_own_value_times_n():
    """`--set hw.X=2x` (an architect's trial: it read 'unknown unit x'): the a6000's 768 GB/s doubled is 1536 GB/s,
    the same machine as writing it out; 0.5x halves a peak; a factor of a name is refused in one line."""
    two = load_machine("a6000", {"memory.@device.bandwidth_bytes_per_s": "2x"})
    assert two.memory["gddr"].bandwidth_bytes_per_s == 2 * 768e9
    assert two == load_machine("a6000", {"memory.gddr.bandwidth_bytes_per_s": 1536e9}).model_copy(
        update={"source": two.source})
    assert load_machine("a6000", {"units.gpu.peak_flops_per_s.fp16": "0.5x"}).units["gpu"].peak_flops_per_s["fp16"] \
        == 154.8e12 / 2
    with pytest.raises(ConfigError, match=r"'2x' is a factor of the preset's value, and it has no number there"):
        load_machine("a6000", {"units.gpu.memory": "2x"})


def test_a_factor_of_a_key_the_preset_lacks_or_leaves_to_its_default():
    """A typo (`hmb`) and a figure left to its default (power_limit_w: the TDP) had both read "it has no number
    there (None)" (an architect's trial); each now says which it is."""
    with pytest.raises(ConfigError, match=r"'2x' scales the preset's own figure, and the preset has no 'hmb' there"):
        load_machine("h100_sxm", {"memory.hmb.bandwidth_bytes_per_s": "2x"})
    with pytest.raises(ConfigError, match=r"the preset leaves this one to its default: give a number"):
        load_machine("h100_sxm", {"units.gpu.power_limit_w": "2x"})


def test_a_factor_of_a_count_or_of_a_kind_section_s_quantity():
    """A code review: `pim.stacks=2x` gave 10.0, which a count refuses, and a kind's section keeps its quantities as
    written ('2 GiB'), which read as no number. A count stays whole (or is refused), a written quantity is parsed."""
    pim = load_machine("hbm_pim", {"pim.stacks": "2x", "pim.pim_capacity_bytes_per_stack": "0.5x"}).section("pim")
    assert pim["stacks"] == 10 and isinstance(pim["stacks"], int)
    assert pim["pim_capacity_bytes_per_stack"] == 2 ** 30
    with pytest.raises(ConfigError, match=r"'0.5x' of 5 is 2.5, not a whole number"):
        load_machine("hbm_pim", {"pim.stacks": "0.5x"})


@pytest.mark.parametrize("factor", ["1e400x", "0x"])
def test_a_factor_must_be_finite_and_above_zero(factor):
    """`--set hw.pim.stacks=1e400x` overflowed to a traceback (a hostile input): bounded as a sweep's scale: is."""
    with pytest.raises(ConfigError, match="a factor must be a finite number above 0"):
        load_machine("hbm_pim", {"pim.stacks": factor})

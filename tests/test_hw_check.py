"""`sim hw check FILE` on the documented example preset (docs/presets.md), and `sim hw list --topologies`."""

import json
import re

import pytest

from sim.apps.cli import main
from tests.conftest import ROOT
from tests.robust_helpers import refused


def test_hw_check_example_preset_is_valid_and_cited(capsys):
    assert main(["hw", "check", str(ROOT / "docs/examples/l40s.yaml"), "--strict", "--format", "json"]) == 0
    rows = dict(json.loads(capsys.readouterr().out)["rows"])
    assert rows["citations"] == "every figure has a comment" and rows["smoke run"].startswith("tinyllama")


def test_hw_check_names_uncited_figures(capsys, tmp_path):
    text = (ROOT / "docs/examples/l40s.yaml").read_text().replace("power_w: 350                      # datasheet max power",
                                                                 "power_w: 350")
    (tmp_path / "mine.yaml").write_text(text)
    assert main(["hw", "check", str(tmp_path / "mine.yaml"), "--strict"]) == 1
    assert "power_w (line" in capsys.readouterr().out


def test_every_hand_written_preset_cites_each_figure():
    """The standard "presets cite the source of each figure", as `sim hw check --strict` reads it, on every preset
    sim ships but those `sim calibrate` wrote: those say in their header that their peaks, capacities and
    bandwidths are the base preset's and which fit produced the rest."""
    from sim.apps.hw_cli import uncited

    presets = sorted((ROOT / "hw_models/presets").glob("*.yaml"))
    written = [p for p in presets if "by `sim calibrate`" not in p.read_text(encoding="utf-8")[:2000]]
    assert len(written) == len(presets) - 3 >= 18   # all but a6000, cpu_host and h200 calibrated
    missing = {p.name: uncited(p) for p in written}
    assert {name: figures for name, figures in missing.items() if figures} == {}


@pytest.mark.parametrize("preset", sorted(p.stem for p in (ROOT / "hw_models/presets").glob("*.yaml")
                                           if "by `sim calibrate`" not in p.read_text(encoding="utf-8")[:2000]))
def test_every_hand_written_preset_passes_the_whole_check(preset, capsys):
    """docs/presets.md: every preset sim ships passes `sim hw check --strict`, smoke run included (attacc_dgx's
    failed it: its 12 head groups do not divide TinyLlama's KV heads, a docs trial)."""
    assert main(["hw", "check", preset, "--strict", "--format", "json"]) == 0, capsys.readouterr().out[-400:]


def test_hw_list_topologies(capsys):
    assert main(["hw", "list", "--topologies", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert "dgx_h100,h100_sxm,1 x 8,nvswitch" in out


def test_capacities_decimal_with_the_binary_size_beside():
    from sim.core.units import fmt_capacity

    # 48 GiB = 51,539,607,552 bytes: the A6000's "48 GB" is binary; sim prints decimal GB and says so.
    assert fmt_capacity(48 * 2 ** 30) == "51.54 GB (48 GiB)"
    assert fmt_capacity(141e9) == "141.00 GB"            # the H200's datasheet figure is decimal
    assert fmt_capacity(220 * 2 ** 20) == "230.69 MB"    # under 1 GiB: no binary figure


def test_report_groups_numbered_units(capsys):
    assert main(["run", str(ROOT / "workloads/llama2_7b_decode.yaml"), "--hw", "hbm_pim", "--set", "gen_len=4"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "utilization" in ln)
    assert "pim.stack0-4" in line and "pim.stack1" not in line


def test_a_bare_number_where_si_units_are_read_is_flagged(tmp_path, capsys):
    """864 bytes/s (meant: 864 GB/s) is below any device's megabyte a second: the schema refuses it with the unit's
    hint (it had passed, for sim hw check alone to flag). 50 MB/s passes the schema, and sim hw check names it as
    implausible and --strict fails on it."""
    from sim.apps.cli import main
    src = (ROOT / "docs" / "examples" / "l40s.yaml").read_text()
    bad = tmp_path / "l40s.yaml"
    bad.write_text(re.sub(r"bandwidth_bytes_per_s: .*", "bandwidth_bytes_per_s: 864", src, count=1))
    assert main(["hw", "check", str(bad)]) == 2
    assert capsys.readouterr().err.strip().endswith("memory.gddr.bandwidth_bytes_per_s: 864 is below 1 MB/s: out of any "
                                                    "physical range: a bare number is in B/s; give the unit, e.g. '864 GB/s' or '864 TB/s'")
    bad.write_text(re.sub(r"bandwidth_bytes_per_s: .*", "bandwidth_bytes_per_s: 50000000", src, count=1))
    assert main(["hw", "check", str(bad)]) == 0
    assert "bandwidth_bytes_per_s 5e+07" in capsys.readouterr().out
    assert main(["hw", "check", str(bad), "--strict"]) == 1


def test_a_hardware_designers_files(tmp_path, capsys):
    """A hardware designer's trial: a topology could not hold a device of the user's own (device: must be a shipped
    preset), hw check / show could not read a topology file, hw check printed "valid" for a broken pim:/spatial:
    section (the error a table cell, nothing on stderr), and pim.formats took `half` or `fp17` as "not fp16",
    switching PIM off silently."""
    from hw_models.network.topology import load_topology

    mine = tmp_path / "my_gpu.yaml"
    mine.write_text((ROOT / "hw_models/presets/h100_sxm.yaml").read_text().replace("\nname: h100_sxm", "\nname: my_gpu"))
    topo = tmp_path / "my_node.yaml"
    # its own name: a user's node named as a shipped one of another device is refused (stop 72, test_network.py)
    topo.write_text((ROOT / "hw_models/network/presets/dgx_h100.yaml").read_text()
                    .replace("\ndevice: h100_sxm", "\ndevice: my_gpu.yaml").replace("\nname: dgx_h100", "\nname: my_node"))
    assert load_topology(topo).device == "my_gpu"
    assert main(["hw", "check", str(topo)]) == 0 and "valid topology" in capsys.readouterr().out
    assert main(["hw", "show", str(topo)]) == 0 and "[my_gpu:0]" in capsys.readouterr().out
    w = tmp_path / "w.yaml"
    w.write_text(f"name: w\nmodel: llama2-7b\nbatch: 1\nprompt_len: 64\ngen_len: 2\nparallel: {{tp: 2, topology: {topo}}}\n")
    assert main(["run", str(w), "--hw", str(mine), "-q"]) == 0
    bad = tmp_path / "groq_torus.yaml"
    bad.write_text((ROOT / "hw_models/presets/groq_lpu.yaml").read_text().replace("  topology: ring", "  topology: torus", 1))
    assert main(["hw", "check", str(bad)]) == 2
    out = capsys.readouterr()
    assert "valid" not in out.out and "spatial.topology" in out.err and "\n" not in out.err.strip()
    tpot = []
    for formats in ("[fp16]", "[half]"):   # an alias is the format: PIM stays on (it read "PIM units compute half only")
        out = tmp_path / "p.json"
        assert main(["run", "workloads/llama13b_decode.yaml", "--hw", "hbm_pim", "--set", f"hw.pim.formats={formats}",
                     "--json", str(out), "-q"]) == 0
        tpot.append(json.loads(out.read_text())["tpot_s"])
    assert tpot[0] == tpot[1]
    assert main(["run", "workloads/llama13b_decode.yaml", "--hw", "hbm_pim", "--set", "hw.pim.formats=[fp17]"]) == 2
    assert "pim.formats: unknown number format 'fp17'" in capsys.readouterr().err


def test_one_format_given_two_rates_is_refused(tmp_path, capsys):
    """A hardware designer's trial: `fp8` beside `fp8_e4m3` in one preset's rates, the faster silently won and the
    report listed both. One format, one rate."""
    text = (ROOT / "hw_models/presets/h100_sxm.yaml").read_text()
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("fp8_e4m3:"))
    dup = tmp_path / "dup.yaml"
    dup.write_text(text.replace(line, line + "\n" + line.replace("fp8_e4m3:", "fp8:"), 1))
    assert main(["hw", "check", str(dup)]) == 2
    assert "fp8_e4m3 and fp8 are one format (fp8_e4m3): give its rate once" in capsys.readouterr().err


EXAMPLE = ROOT / "docs/examples/l40s.yaml"


def _example_with(tmp_path, old: str, new: str):
    text = EXAMPLE.read_text()
    assert old in text
    path = tmp_path / "mine.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("comment", ["#", "# ", "# TODO", "# ???", "# ?", "# tbd: datasheet", "# FIXME later"])
def test_a_placeholder_comment_is_no_citation(tmp_path, capsys, comment):
    """A hardware designer's trial: `--strict` took a bare `#`, `# TODO` or `# ???` as a figure's source."""
    mine = _example_with(tmp_path, "power_w: 350                      # datasheet max power", f"power_w: 350  {comment}")
    assert main(["hw", "check", str(mine), "--strict", "--format", "json"]) == 1
    rows = dict(json.loads(capsys.readouterr().out)["rows"])
    assert rows["citations"].startswith("1 figure(s) without a source comment: power_w (line 24)")
    above = _example_with(tmp_path, "    power_w: 350                      # datasheet max power",
                          f"    {comment}\n    power_w: 350")   # on the line above, as a block's comment
    assert main(["hw", "check", str(above), "--strict", "--format", "json"]) == 1
    assert "power_w (line 25)" in dict(json.loads(capsys.readouterr().out)["rows"])["citations"]


def test_an_unsupported_preset_version_is_refused(tmp_path, capsys):
    """A hardware designer's trial: `version: 2` was read silently as the format sim knows (1, every shipped preset's)."""
    mine = _example_with(tmp_path, "\nversion: 1\n", "\nversion: 2\n")
    assert refused(capsys, ["hw", "check", str(mine)]) == \
        f"error: {mine}: version: unsupported version 2; supported: 1"


@pytest.mark.parametrize("typo, message", [
    ("capacity_byte", "memory.gddr.capacity_byte: unknown key (did you mean capacity_bytes?)"),
    ("size", "memory.gddr.capacity_bytes: required key is missing; unknown key beside it: size"),
])
def test_a_typo_of_a_required_key_names_what_was_written(tmp_path, capsys, typo, message):
    """A hardware designer's trial: `capacity_byte:` got only "memory.gddr.capacity_bytes: required key is missing",
    which hid the line to fix. Every schema's message (sim.core.schema.validation_error) names the unknown key."""
    mine = _example_with(tmp_path, "    capacity_bytes: 48 GB", f"    {typo}: 48 GB")
    assert refused(capsys, ["hw", "check", str(mine)]) == f"error: {mine}: {message}"


def test_a_failing_smoke_run_says_so_on_stderr_under_no_valid_title(tmp_path, capsys):
    """A hostile-input trial: a preset of 3 bytes of memory printed "h32.yaml: valid" over a table whose smoke run
    had failed, and exited 2 with nothing on stderr. The title says the smoke run failed, and stderr says why."""
    import yaml

    from hw_models.machine import raw_machine

    d = raw_machine("a6000")
    d["name"] = "h32"
    d["memory"]["gddr"]["capacity_bytes"] = "3 bytes"
    path = tmp_path / "h32.yaml"
    path.write_text(yaml.safe_dump(d))
    assert main(["hw", "check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert "the schema is valid; the smoke run failed" in out and ": valid" not in out
    assert err.startswith(f"error: {path}: smoke run failed: ") and "short by" in err

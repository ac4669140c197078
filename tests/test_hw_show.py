"""`sim hw show NAME --format json|csv` prints the validated preset as data (found by a new-user
trial: --format json printed the YAML text, for a node preset its drawing)."""

import csv
import io
import json

import pytest

from hw_models.machine import preset_names
from sim.apps.cli import main
from sim.core.units import dimension_of


@pytest.mark.parametrize("name, kind", [("h100_sxm", "gpu"), ("a6000_offload", "offload"), ("groq_lpu", "spatial"),
                                        ("hbm_pim", "pim"), ("cpu_host", "cpu")])
def test_format_json_is_the_validated_preset(capsys, name, kind):
    assert main(["hw", "show", name, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == name and data["kind"] == kind


def test_a_node_preset_is_json_too(capsys):
    assert main(["hw", "show", "dgx_h100", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == "dgx_h100" and data["devices_per_node"] == 8


def test_format_csv_gives_dotted_keys(capsys):
    """h100_sxm.yaml: HBM3 at 3.35 TB/s (the key --set hw.memory.hbm.bandwidth_bytes_per_s sets)."""
    assert main(["hw", "show", "h100_sxm", "--format", "csv"]) == 0
    rows = dict(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert float(rows["memory.hbm.bandwidth_bytes_per_s"]) == 3.35e12 and rows["kind"] == "gpu"


def test_quiet_prints_nothing(capsys):
    assert main(["hw", "show", "h100_sxm", "-q"]) == 0
    assert capsys.readouterr().out == ""


def _figures(data, key=""):
    """(key, value) of every key whose name says a unit (sim.core.units.dimension_of), nested ones included."""
    if isinstance(data, dict):
        for k, v in data.items():
            if dimension_of(k) is not None:
                yield k, v
            yield from _figures(v, k)
    elif isinstance(data, list):
        for v in data:
            yield from _figures(v, key)


@pytest.mark.parametrize("name", preset_names())
def test_every_figure_is_a_number_in_si_units(capsys, name):
    """A kind's own section (pim:, spatial:, host:) is kept as the file gives it, so `clock_hz: 300 MHz`
    came out as the string "300 MHz"; JSON and CSV carry the number the key's unit names."""
    assert main(["hw", "show", name, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    strings = [(k, v) for k, v in _figures(data) if isinstance(v, str)
               or isinstance(v, dict) and any(not isinstance(x, (int, float)) for x in v.values())]
    assert not strings


def test_pim_figures_are_parsed_to_si(capsys):
    """hbm_pim.yaml: `clock_hz: 300 MHz`, `row_bytes: 1 KiB`, `energy_internal_j_per_byte: 0.55 pJ/b`."""
    assert main(["hw", "show", "hbm_pim", "--format", "csv"]) == 0
    rows = dict(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert float(rows["pim.clock_hz"]) == 300e6 and float(rows["pim.row_bytes"]) == 1024
    assert float(rows["pim.energy_internal_j_per_byte"]) == pytest.approx(0.55e-12 * 8)
    assert rows["pim.formats"] == "fp16"   # its items, not Python's "('fp16',)" (a docs trial)

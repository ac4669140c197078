"""`sim hw show NAME --format json|csv` prints the validated preset as data (found by a new-user
trial: --format json printed the YAML text, for a node preset its drawing)."""

import csv
import io
import json

import pytest

from sim.apps.cli import main


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

"""Tables off a terminal: every table-printing command, its output piped (pytest's capture is
not a TTY), shows every cell whole; --format csv and json carry the same cells; --width fits."""

import csv
import io
import json

import pytest

from sim.apps.cli import main
from tests.conftest import ROOT, write_serving_file

WORKLOAD = str(ROOT / "workloads" / "llama2_7b_decode.yaml")
SERVE = dict(name="t", model="llama2-7b", flash_attention=True, serving=dict(
    arrivals=dict(process="poisson", rate=5, num_requests=12, seed=1),
    lengths=dict(prompt=dict(dist="uniform", low=16, high=64), output=dict(dist="fixed", value=4)),
    scheduler=dict(kind="vllm", max_num_batched_tokens=2048)))

COMMANDS = {
    "roofline": ["roofline", WORKLOAD, "--hw", "h200"],
    "model show": ["model", "show", "gemma-2-9b"],
    "hw list": ["hw", "list"],
    "formats": ["formats", "--formats", "fp16,mxfp4,int4"],
    "run": ["run", WORKLOAD, "--hw", "a6000", "--set", "gen_len=4"],
    "validate": ["validate", str(ROOT / "tests/data/trace_tinyllama_L1.trace.json.gz"), "--hw", "cpu_host"],
    "replay": ["replay", str(ROOT / "tests/data/synthetic_cuda_L1.trace.json"), "--hw", "h100_sxm"],
    "serve": ["serve", "{serve}", "--hw", "a6000"],
}


def _run(capsys, argv):
    assert main(argv) == 0
    return capsys.readouterr().out


def _argv(name, tmp_path):
    path = write_serving_file(tmp_path, SERVE)
    return [str(path) if a == "{serve}" else a for a in COMMANDS[name]]


@pytest.mark.parametrize("name", COMMANDS)
def test_no_cell_truncated_in_a_pipe(capsys, tmp_path, name):
    argv = _argv(name, tmp_path)
    data = json.loads(_run(capsys, [*argv, "--format", "json"]))
    tables = data if isinstance(data, list) else [data]
    assert tables and all(t["rows"] for t in tables)
    text = _run(capsys, argv)
    assert "…" not in text
    lines = text.splitlines()
    for t in tables:
        for row in t["rows"]:
            for cell in row:
                for part in cell.splitlines():   # a cell of several lines is shown line by line
                    assert any(part.strip() in line for line in lines), (name, t["title"], cell)


def test_csv_carries_the_json_cells(capsys):
    argv = COMMANDS["roofline"]
    table = json.loads(_run(capsys, [*argv, "--format", "json"]))
    lines = _run(capsys, [*argv, "--format", "csv"]).splitlines()
    assert lines[0] == f"# {table['title']}"
    rows = list(csv.reader(io.StringIO("\n".join(lines[1:]).strip())))
    assert rows[0] == table["columns"] and rows[1:] == table["rows"]


def test_width_bounds_the_table(capsys):
    text = _run(capsys, [*COMMANDS["roofline"], "--width", "100"])
    assert max(len(line) for line in text.splitlines()) <= 100
    assert main([*COMMANDS["roofline"], "--width", "5"]) == 2
    assert "at least 20 columns" in capsys.readouterr().err

"""Reports written as Markdown (sim validate-serving's) under --format: the pipe tables become data on stdout,
the prose goes to stderr, and -q keeps the data (sim.core.tables.print_markdown)."""

from __future__ import annotations

import json

import pytest

from sim.core import tables

REPORT = """| run | TTFT |
|---|---|
| a_very_long_run_name_that_a_terminal_would_cut | +1.0% |
| b | -2.0% |

2 runs simulated in 1 s.
| GPU | runs |
|---|---|
| h100_sxm | 2 |"""


@pytest.fixture(autouse=True)
def _reset():
    yield
    tables.configure()


def test_csv_gives_each_pipe_table_whole_and_the_prose_on_stderr(capsys):
    tables.configure("csv")
    tables.print_markdown(REPORT)
    cap = capsys.readouterr()
    assert cap.out == ("run,TTFT\na_very_long_run_name_that_a_terminal_would_cut,+1.0%\nb,-2.0%\n\n"
                       "GPU,runs\nh100_sxm,2\n\n")
    assert cap.err.strip() == "2 runs simulated in 1 s."


def test_json_and_quiet(capsys):
    tables.configure("json", quiet=True)
    tables.print_markdown(REPORT)
    tables.flush()
    cap = capsys.readouterr()
    data = json.loads(cap.out)
    assert [t["columns"] for t in data] == [["run", "TTFT"], ["GPU", "runs"]]
    assert data[0]["rows"][1] == ["b", "-2.0%"]
    assert cap.err == ""


def test_table_format_prints_the_markdown_as_is_unless_quiet(capsys):
    tables.configure("table")
    tables.print_markdown(REPORT)
    assert capsys.readouterr().out == REPORT + "\n"
    tables.configure("table", quiet=True)
    tables.print_markdown(REPORT)
    assert capsys.readouterr().out == ""

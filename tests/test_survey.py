"""`sim survey --quick`: the document and every plot are written and non-empty,
every measured-vs-predicted row carries an error, and the survey's reference
number (Llama-2-7B decode at batch 1 on the A6000, pure roofline) is LLM-Viewer's
17.9 ms within 1% (hand count: 13.77 GB moved per step / 768 GB/s = 17.93 ms,
tests/test_gpu_sim.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.apps.cli import main
from sim.apps.survey import figures, measured
from sim.apps.survey.build import build
from sim.apps.survey.cli import REPO
from sim.apps.survey.doc import MEASURED
from sim.apps.survey.runs import Setup, pair
from tests.conftest import SHARED_VALIDATION

ERROR = re.compile(r"^[+-]\d+(\.\d+)?%")


@pytest.fixture(scope="module")
def survey(tmp_path_factory):
    root = tmp_path_factory.mktemp("survey")
    # Half the resolution: the tests check each picture is written, non-trivial and linked, not its
    # pixels; this saves about a third of the save time (bbox_inches="tight" still draws twice).
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(figures, "PNG_DPI", 50)
        doc, sections = build(Setup.make(("a6000", "h200"), quick=True), REPO, SHARED_VALIDATION,
                              root / "survey", root / "survey.md")
    return doc, sections


def test_document_and_every_plot_are_written(survey):
    doc, sections = survey
    text = doc.read_text()
    assert len(text) > 5000
    figures = [path for s in sections for _, path in s.figures]
    assert len(figures) == 11 + SHARED_VALIDATION.is_dir()   # + the measured A6000 layer curve
    for path in figures:
        assert path.is_file() and path.stat().st_size > 5000, path
        assert f"({Path(path).parent.name}/{Path(path).name})" in text   # linked relative to the document
    for s in sections:
        assert f"## {s.title}" in text
        for t in s.tables:
            assert t.title in text and len(t.frame) > 0


def test_every_measured_row_carries_an_error(survey):
    _, sections = survey
    tables = [t for s in sections for t in s.tables if t.kind == MEASURED]
    assert len(tables) >= 2          # LLM-Viewer issue #4 and the repo's CPU traces, shared data or not
    for t in tables:
        cols = t.error_columns()
        assert cols, t.title
        for _, row in t.frame.iterrows():
            for c in cols:
                assert ERROR.match(str(row[c])), (t.title, c, row[c])


def test_a6000_decode_pure_roofline_is_llm_viewers_figure(survey):
    doc, _ = survey
    flat, _ = pair("a6000")
    assert flat.tpot_s == pytest.approx(17.9e-3, rel=0.01)
    assert flat.tpot_s == pytest.approx(13.77e9 / 768e9, rel=0.002)
    assert "Check (A6000, decode, batch 1)" in doc.read_text()


def test_without_shared_data_the_rows_are_skipped_and_said(tmp_path):
    s = measured.measured_section(REPO, tmp_path / "absent", tmp_path, quick=True)
    assert any("Skipped" in n for n in s.notes)
    assert [t.title for t in s.tables] == [measured.cpu_table(REPO).title]


def test_non_gpu_preset_is_one_line_error(tmp_path, capsys):
    assert main(["survey", "--quick", "--hw", "groq_lpu", "--out", str(tmp_path / "s")]) == 2
    assert "gpu preset" in capsys.readouterr().err
    assert not (tmp_path / "s.md").exists()

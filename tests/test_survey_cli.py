"""`sim survey` writes to a new folder (or --out DIR); only --update-docs touches docs/, and
never with the reduced --quick sweeps."""

import argparse

import pytest

from sim.apps.cli import main
from sim.apps.survey.cli import REPO, _targets


def _args(**kw):
    base = dict(out=None, doc=None, update_docs=False, quick=False)
    return argparse.Namespace(**{**base, **kw})


def test_default_is_a_new_folder_not_docs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plots, doc = _targets(_args(quick=True))
    assert plots.parent == doc.parent and plots.parent.name.startswith("survey-")
    assert doc.name == "survey.md" and REPO / "docs" not in doc.resolve().parents
    plots, doc = _targets(_args(out=str(tmp_path / "mine")))
    assert plots == tmp_path / "mine" / "survey" and doc == tmp_path / "mine" / "survey.md"


def test_update_docs_writes_the_committed_survey_only_in_full():
    plots, doc = _targets(_args(update_docs=True))
    assert plots == REPO / "docs" / "survey" and doc == REPO / "docs" / "survey.md"


@pytest.mark.parametrize("extra,why", [(["--quick"], "hold no measurements"), (["--out", "x"], "drop --out")])
def test_update_docs_refusals(capsys, extra, why):
    assert main(["survey", "--update-docs", *extra]) == 2
    err = capsys.readouterr().err
    assert why in err and err.count("\n") == 1

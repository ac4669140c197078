"""Every ```python block of docs/api.md runs as written, from the repository root."""

import re

import pytest

from tests.conftest import ROOT

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(), re.S)


def test_the_page_has_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_example_runs(code, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(code, "docs/api.md", "exec"), {})

"""Every `sim …` command the README and docs/*.md show runs: exit 0 and no traceback.

Commands in code blocks run as written (in a scratch folder that links the repository's
inputs, so their outputs land there); the long ones (serving streams, sweeps, searches,
traces, the 70B and 175B machines) are marked `slow`. Inline commands with placeholders
(`sim run W --hw H`) are checked to name a real subcommand (`--help` exits 0)."""

import glob
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from sim.apps.cli import main
from tests.conftest import ROOT, SHARED_VALIDATION

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Run long: whole request streams, sweeps, searches, trace work, the big multi-chip machines.
SLOW_COMMANDS = ("serve", "sweep", "offload", "calibrate", "replay", "validate", "validate-serving", "survey")
SLOW_INPUTS = ("opt175b_attacc", "llama70b_decode.yaml --hw a6000_offload", "llama70b_groq",
               "ipu_bow", "llama13b_decode.yaml --hw a6000 --json")
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]*\b|…|\.\.\.|\[|<|\bW\b|\bH\b|my_gpu|\bA\.json")


def block_commands() -> list[tuple[str, str]]:
    """(file, command) for each `sim …` line of a fenced block: continuations joined, `;` split,
    a trailing `# comment` dropped."""
    out = []
    for f in DOCS:
        for block in re.findall(r"```[a-z]*\n(.*?)```", f.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                for part in line.strip().removeprefix("$ ").split("; "):
                    part = re.sub(r"\s+#.*$", "", part.strip())
                    if part.startswith("sim "):
                        out.append((f.name, part))
    return out


def inline_commands() -> list[tuple[str, str]]:
    """(file, command) for each inline `sim …` span outside the fenced blocks."""
    out = []
    for f in DOCS:
        text = re.sub(r"```.*?```", "", f.read_text(), flags=re.S)
        out += [(f.name, " ".join(m.split())) for m in re.findall(r"`(sim [^`]+)`", text)]
    return out


def _param(doc: str, cmd: str):
    slow = cmd.split()[1] in SLOW_COMMANDS or any(s in cmd for s in SLOW_INPUTS)
    return pytest.param(cmd, id=f"{doc}: {cmd}"[:120], marks=[pytest.mark.slow] if slow else [])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """One folder for the whole page, so a command can read what an earlier one wrote
    (`sim diff out/a.json out/b.json`): the repository's inputs linked in, the README's array."""
    tmp = tmp_path_factory.mktemp("docs")
    for name in ("workloads", "traces", "sweeps", "docs", "tests", "hw_models", "scripts"):
        (tmp / name).symlink_to(ROOT / name)
    np.save(tmp / "my_weights.npy", np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32))
    return tmp


@pytest.fixture
def scratch(folder, monkeypatch):
    monkeypatch.chdir(folder)
    return folder


def _argv(cmd: str) -> list[str]:
    """The command's arguments: globs expanded, `../shared/validation` read where the suite finds the
    shared measurements (SIM_SHARED_VALIDATION; skipped when they are absent)."""
    if "../shared/validation" in cmd:
        if not SHARED_VALIDATION.is_dir():
            pytest.skip("../shared/validation is not present")
        cmd = cmd.replace("../shared/validation", str(SHARED_VALIDATION))
    argv = []
    for word in shlex.split(cmd)[1:]:
        argv += sorted(glob.glob(word)) if any(c in word for c in "*?") else [word]
    return argv


@pytest.mark.parametrize("cmd", [_param(d, c) for d, c in dict.fromkeys(block_commands())])
def test_documented_command_runs(scratch, capsys, cmd):
    assert main(_argv(cmd)) == 0, capsys.readouterr().err
    assert "Traceback" not in capsys.readouterr().err


def _subcommand(cmd: str) -> list[str]:
    """The subcommand words of an inline span: up to the first argument or option."""
    words = []
    for w in cmd.split()[1:]:
        if w.startswith("-") or "/" in w or "." in w or PLACEHOLDER.fullmatch(w):
            break
        words.append(w)
        if w not in ("hw", "model", "offload", "sweep"):   # the groups that take a second word
            break
    return words


@pytest.mark.parametrize("cmd", sorted({c for _, c in inline_commands()}))
def test_inline_command_names_a_subcommand(capsys, cmd):
    with pytest.raises(SystemExit) as done:
        main([*_subcommand(cmd), "--help"])
    assert done.value.code == 0, (cmd, capsys.readouterr().err)


def test_the_docs_have_commands():
    assert len(block_commands()) >= 30 and len(inline_commands()) >= 30
    assert Path(ROOT / "docs/examples/l40s.yaml").is_file()

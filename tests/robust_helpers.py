"""Shared by the robustness tests (issue 17): run the CLI, demand one error line,
exit status 2, and an untouched folder."""

from __future__ import annotations

from pathlib import Path

from sim.apps.cli import main


def snapshot(folder: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry under `folder`: its mode and, for files, its bytes."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(folder))] = (st.st_mode, p.read_bytes() if p.is_file() and not p.is_symlink() else None)
    return out


def refused(capsys, argv: list[str], folder: Path | None = None) -> str:
    """Run `sim argv`; assert exit 2, exactly one stderr line without a traceback, and
    (with `folder`) nothing under it created or changed. Returns the line."""
    before = snapshot(folder) if folder is not None else None
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, (rc, err)
    assert len(err) == 1, err
    assert err[0].startswith("error: ") and "Traceback" not in err[0]
    if folder is not None:
        assert snapshot(folder) == before
    return err[0]


TINY_WORKLOAD = "model: tinyllama-1.1b\nbatch: 1\nprompt_len: 16\ngen_len: 2\n"

"""Where a command's tables go: a terminal (rich boxes at its width), a pipe or a file
(rich boxes at full width, so `sim roofline | less` never shows "3.36e…"), or CSV / JSON
on stdout for scripts (`--format csv|json`).

Every command prints through `console()` (here in sim.core so that every layer's
subcommands can); `add_to_every_command` gives every subcommand `--format table|csv|json`
and `--width N`, and the CLI's `main` calls `configure` with them. In CSV
or JSON mode a table goes to stdout as data and everything else a command prints (notes,
warnings, headings) to stderr, so stdout stays machine-readable.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from sim.core.errors import ConfigError

FORMATS = ("table", "csv", "json")
# A pipe or a file has no width: wide enough that no cell of any table is cut or wrapped.
UNBOUNDED = 100_000

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


@dataclass
class _Settings:
    format: str = "table"
    width: int | None = None
    quiet: bool = False


_settings = _Settings()
_pending: list[dict[str, Any]] = []      # JSON mode: tables printed so far, written by flush()


def add_options(parser: argparse.ArgumentParser) -> None:
    """--format and --width on `parser` (a subcommand)."""
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="tables as boxes (default), or their cells as shown (units in the text) as CSV or JSON on "
                             "stdout; --json PATH, where a command has it, writes the figures as numbers in SI units")
    parser.add_argument("--width", type=int, metavar="COLUMNS",
                        help="table width in characters (default: the terminal's, unbounded in a pipe or file)")


def add_to_every_command(parser: argparse.ArgumentParser) -> None:
    """add_options on each leaf subcommand under `parser` that does not have them yet."""
    for action in parser._actions:    # argparse keeps subparsers here; there is no public walk
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                add_to_every_command(sub)
            return
    if not any("--format" in a.option_strings for a in parser._actions):
        add_options(parser)
    if not any("-q" in a.option_strings for a in parser._actions):   # -q on every subcommand
        parser.add_argument("-q", "--quiet", action="store_true", help="no tables on stdout")


def report_wanted(args: argparse.Namespace) -> bool:
    """Whether a command prints its report: not under -q, unless --format csv/json asked for its tables as data."""
    return not getattr(args, "quiet", False) or getattr(args, "format", "table") != "table"


def configure(fmt: str = "table", width: int | None = None, quiet: bool = False) -> None:
    if width is not None and width < 20:
        raise ConfigError(f"--width {width}: at least 20 columns")
    _settings.format, _settings.width, _settings.quiet = fmt, width, quiet
    _pending.clear()


def data_format() -> str | None:
    """The format --format asked tables in as data (csv, json), None for boxes: a command that keeps its tables
    on stderr as a report prints them on stdout then (sim sweep's best points)."""
    return _settings.format if _settings.format != "table" else None


def full_width(stderr: bool = False) -> bool:
    """Whether tables may be as wide as their content (no terminal to fit, or --width given)."""
    return _settings.width is not None or not (sys.stderr if stderr else sys.stdout).isatty()


@cache
def _table_console() -> type:
    """TableConsole, a rich Console that writes tables in the chosen format. Built on first use:
    rich's console and table modules take ~60 ms to import, which `sim --help` need not pay."""
    from rich.console import Console
    from rich.table import Table

    class TableConsole(Console):
        def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
            # -q keeps stdout to what was asked for: no report in table form, but --format csv/json asks for the data
            if _settings.quiet and not self.stderr and _settings.format == "table":
                return
            if _settings.format == "table" or self.stderr:
                super().print(*objects, **kwargs)
                return
            for obj in objects:
                if isinstance(obj, Table):
                    _emit(obj)
                elif not _settings.quiet:   # notes and headings stay readable, on stderr, out of the data
                    Console(stderr=True, markup=False, highlight=False).print(obj, **kwargs)

    return TableConsole


def console(stderr: bool = False, markup: bool = False) -> Console:
    """The console a command prints its tables on."""
    width = _settings.width
    if width is None and full_width(stderr):
        width = UNBOUNDED
    return _table_console()(stderr=stderr, markup=markup, width=width, highlight=False)


def _plain(cell: Any) -> str:
    from rich.text import Text

    if isinstance(cell, Text):
        return cell.plain
    return str(cell) if cell is not None else ""


def table_data(t: Table) -> dict[str, Any]:
    """A rich table's title, column names and cells as plain text."""
    headers = [_plain(c.header) for c in t.columns]
    if not any(headers):   # a key-value table without a header row
        headers = ["key", "value", *(f"column{i}" for i in range(3, len(headers) + 1))][: len(headers)]
    columns = [[_plain(cell) for cell in c.cells] for c in t.columns]
    rows = [list(r) for r in zip(*columns)] if columns else []
    return dict(title=_plain(t.title), columns=headers, rows=rows)


def _emit(t: Table) -> None:
    data = table_data(t)
    if _settings.format == "json":
        _pending.append(data)
        return
    out = csv.writer(sys.stdout, lineterminator="\n")
    if data["title"]:
        sys.stdout.write(f"# {data['title']}\n")
    out.writerow(data["columns"])
    out.writerows(data["rows"])
    sys.stdout.write("\n")


def flush() -> None:
    """JSON mode: the tables printed, one object (a single table) or a list, on stdout."""
    if _settings.format == "json" and _pending:
        print(json.dumps(_pending[0] if len(_pending) == 1 else _pending, indent=1))
    _pending.clear()


def print_markdown(text: str) -> None:
    """A report written as Markdown (the form docs/ embeds): as is under --format table; under csv/json each
    pipe table becomes a table of the chosen format on stdout and every other line a note on stderr."""
    if _settings.format == "table":
        if not _settings.quiet:
            print(text)
        return
    from rich.table import Table

    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            t = Table()
            for name in _cells(line):
                t.add_column(name)
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                t.add_row(*_cells(lines[i]))
                i += 1
            _emit(t)
            continue
        if line.strip() and not _settings.quiet:
            print(line, file=sys.stderr)
        i += 1


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]

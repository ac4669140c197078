"""One flag language across subcommands (docs/cli.md): `--json PATH`, `--plots DIR`,
`--out`, `--exhaustive`, `-q`, `--format`, `--width`. Old spellings stay one release
as deprecated aliases that still work and say what replaces them."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from sim.core.files import write_json

# `--json` given without a path: the old stdout switch of `model show`, `formats`, `hw show`.
STDOUT = "<stdout>"


def warn_deprecated(old: str, new: str) -> None:
    print(f"warning: {old} is deprecated and goes in the next release; use {new}", file=sys.stderr)


def deprecated_alias(parser: argparse.ArgumentParser, old: str, new: str, dest: str, **kwargs: Any) -> None:
    """`old` does what `new` does (into `dest`), hidden from --help, with a warning."""

    class Alias(argparse.Action):
        def __call__(self, p, namespace, values, option_string=None):
            warn_deprecated(old, new)
            setattr(namespace, self.dest, True if self.nargs == 0 else values)

    if kwargs.pop("action", None) == "store_true":
        kwargs.update(nargs=0, default=False)
    parser.add_argument(old, dest=dest, action=Alias, help=argparse.SUPPRESS, **kwargs)


def json_option(parser: argparse.ArgumentParser, what: str) -> None:
    """`--json PATH` writes `what` to a file; a bare `--json` (the old stdout switch) still prints it."""
    parser.add_argument("--json", nargs="?", const=STDOUT, metavar="PATH", help=f"write {what} as JSON to PATH")


def emit_json(path: str, data: Any) -> None:
    """`data` to the --json file, or to stdout for the deprecated bare --json."""
    if path == STDOUT:
        warn_deprecated("--json without a path (JSON on stdout)", "--json PATH, or --format json for the table")
        print(json.dumps(data, indent=1, default=float))
    else:
        write_json(path, data)


def comma_list(flag: str, text: str, key: Callable[[str], str] = str) -> list[str]:
    """The items of a comma-separated `flag` value, stripped, in order. An item that is an earlier one again
    (the same `key`, e.g. a format's canonical name) is dropped with a warning, as a sweep drops a repeated
    point and a later --set for a key replaces the earlier one: running it twice only prints the row twice."""
    first: dict[str, str] = {}   # key -> the spelling kept
    dropped: dict[str, str] = {}   # a dropped spelling -> the kept one; one warning each
    for item in (part.strip() for part in text.split(",")):
        k = key(item)
        if k in first:
            dropped.setdefault(item, first[k])
        else:
            first[k] = item
    for item, kept in dropped.items():
        again = "is listed more than once" if item == kept else f"is {kept} again"
        print(f"warning: {flag}: {item} {again}; shown once", file=sys.stderr)
    return list(first.values())

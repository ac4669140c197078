"""The command line of a script with no options or a few on/off ones: `--help` prints its docstring and exits,
anything else on the line is refused (one line, exit 2), so that neither starts the minutes of work the
script does."""

from __future__ import annotations

import argparse


def script_args(doc: str | None, **flags: str) -> argparse.Namespace:
    """Parse sys.argv for a script whose usage is its docstring `doc`; each keyword is an on/off option
    (`check="..."`: --check, its help text), false unless given."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, text in flags.items():
        ap.add_argument(f"--{name.replace('_', '-')}", action="store_true", help=text)
    return ap.parse_args()


def no_options(doc: str | None) -> None:
    """A script that takes no options (script_args with none)."""
    script_args(doc)

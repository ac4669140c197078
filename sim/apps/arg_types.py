"""argparse types the subcommands share: a bad value is argparse's one-line usage error, exit 2."""

from __future__ import annotations

import argparse
from typing import Callable


def positive(cast: Callable[[str], float]) -> Callable[[str], float]:
    """A number of type `cast` (int, float) above zero."""
    def parse(text: str):
        try:
            v = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: not a number") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
        return v
    return parse

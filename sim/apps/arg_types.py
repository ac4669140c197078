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


class Once(argparse.Action):
    """An option given at most once: `--hw a6000 --hw h100_sxm` ran the last without a word (an architect's trial),
    and an empty value names nothing (`--hw ''` read as the current folder)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, f"_{self.dest}_given", False):
            parser.error(f"{option_string} given twice ({getattr(namespace, self.dest)}, {values}): give it once")
        if isinstance(values, str) and not values.strip():
            parser.error(f"{option_string}: empty; give a preset name or a YAML file")
        setattr(namespace, f"_{self.dest}_given", True)
        setattr(namespace, self.dest, values)

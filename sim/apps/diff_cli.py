"""`sim diff A.json B.json`'s parser; sim.apps.diff (pydantic schemas, rich tables) loads when it runs."""

from __future__ import annotations

import argparse


def cmd_diff(args: argparse.Namespace) -> int:
    from sim.apps.diff import cmd_diff as run

    return run(args)


def register(sub) -> None:
    p = sub.add_parser("diff", help="compare two `sim run --json` results (inputs, metrics, op by op) or two "
                                         "`sim serve --json` summaries")
    p.add_argument("a", metavar="A.json")
    p.add_argument("b", metavar="B.json")
    p.add_argument("--all", action="store_true", help="every op (default: the 20 that changed most) and every differing hardware figure (default: the first 12)")
    p.set_defaults(func=cmd_diff)

"""Markdown pieces the generated sections of docs/validation.md share: a percentage and a table
(first column left-aligned, the rest right-aligned)."""

from __future__ import annotations


def pct(x: float) -> str:
    return f"{x:.1%}"


def table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)

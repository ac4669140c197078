"""The survey document's building blocks: tables (pandas frames with their setup
stated), sections, and the Markdown they render to."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

PREDICTION = "prediction"        # every number comes from a run of the simulator
MEASURED = "measured"            # a measured column beside predictions, with the error of each


@dataclass
class Table:
    title: str
    setup: str                   # the workload, machine and what each column means
    frame: pd.DataFrame
    kind: str = PREDICTION

    def error_columns(self) -> list[str]:
        return [c for c in self.frame.columns if str(c).startswith("error")]


@dataclass
class Section:
    title: str
    intro: str = ""
    tables: list[Table] = field(default_factory=list)
    figures: list[tuple[str, Path]] = field(default_factory=list)   # (caption, file)
    notes: list[str] = field(default_factory=list)


def ms(seconds: float | None, digits: int = 2) -> str:
    return "-" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.{digits}f}"


def us(seconds: float | None) -> str:
    return "-" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e6:,.1f}"


def error(predicted: float | None, measured: float | None) -> str:
    """Signed relative error (predicted - measured) / measured."""
    if predicted is None or not measured:
        return "-"
    return f"{(predicted - measured) / measured:+.1%}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def markdown_table(frame: pd.DataFrame) -> str:
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(cols))) + "|"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines)


def render_table(t: Table) -> str:
    badge = "**Measured vs predicted.**" if t.kind == MEASURED else "**Predictions** (simulator runs)."
    return f"#### {t.title}\n\n{badge} {t.setup}\n\n{markdown_table(t.frame)}\n"


def render_section(s: Section, doc_dir: Path) -> str:
    parts = [f"## {s.title}\n"]
    if s.intro:
        parts.append(s.intro.strip() + "\n")
    for t in s.tables:
        parts.append(render_table(t))
    for caption, path in s.figures:
        rel = Path(path).resolve().relative_to(doc_dir.resolve()) if _inside(path, doc_dir) else Path(path)
        parts.append(f"![{caption}]({rel.as_posix()})\n")
    parts.extend(n.strip() + "\n" for n in s.notes)
    return "\n".join(parts)


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(path).resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def render(title: str, preface: str, sections: list[Section], doc_dir: Path) -> str:
    body = "\n".join(render_section(s, doc_dir) for s in sections)
    return f"# {title}\n\n{preface.strip()}\n\n{body}"

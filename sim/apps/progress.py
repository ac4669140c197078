"""A progress bar on stderr for jobs that take more than a moment (`sim run` on a big
machine, `sim survey`, `sim formats --array`): what is done of how many, the measured
rate of those units, and the time so far. Only on a terminal and without -q: a pipe or
a log gets no bar codes."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def bar(label: str, unit: str, total: int | None = None, quiet: bool = False
        ) -> Iterator[Callable[[int, int | None], None]]:
    """Yields `update(done, total=None)`; the bar disappears when the job ends. The rate is
    the units done over the time elapsed, shown once the first unit is done."""
    if quiet or not sys.stderr.isatty():
        yield lambda done, total=None: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as p:
        task = p.add_task(label, total=total, rate="")

        def update(done: int, new_total: int | None = None) -> None:
            elapsed = p.tasks[0].elapsed or 0.0
            p.update(task, completed=done, total=new_total if new_total is not None else p.tasks[0].total,
                     rate=f"{done / elapsed:.2f} {unit}/s" if elapsed > 0 and done else "")

        yield update

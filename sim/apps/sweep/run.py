"""Running the points of a sweep on a concurrent.futures executor.

The work of one point is `run_point(config)`, a top-level, pure function of the
point's resolved config (plain dicts), so it pickles to a local process pool
or a Dask cluster alike. Results come back to this process, which alone writes
the store: one commit per finished point.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import time
import traceback
import warnings
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from sim.core.errors import ConfigError, SimError
from sim.apps.sweep.expand import Point, expand
from sim.apps.sweep.spec import SweepSpec, load_spec
from sim.apps.sweep.store import Store


def run_point(config: dict[str, Any]) -> dict[str, Any]:
    """Simulate one point. Never raises: a failure (the model does not fit, a
    bug) comes back as status `error` with a one-line message, so one bad point
    leaves the others intact."""
    from hw_models.machine import machine_from_dict
    from hw_models.registry import simulate
    from sim.core.results import check_finite
    from sim.core.workload import workload_from_dict

    t0 = time.perf_counter()
    try:
        workload = workload_from_dict(config["workload"], config["workload_source"])
        machine = machine_from_dict(config["machine"], config["machine_source"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # context-length notes; the row carries the numbers
            # detail=False: metrics only, without the per-op timelines a report draws (half the time).
            metrics = check_finite(simulate(workload, machine, detail=False), machine.source).metrics()
        return dict(status="ok", metrics={k: float(v) for k, v in metrics.items()},
                    seconds=time.perf_counter() - t0)
    except SimError as exc:
        msg = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # a bug in one point must not stop the sweep; keep where it happened
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        msg = f"{type(exc).__name__}: {exc} (at {Path(tb.filename).name}:{tb.lineno})"
    return dict(status="error", error=" ".join(msg.split()), seconds=time.perf_counter() - t0)


@contextmanager
def make_executor(executor: "str | cf.Executor | None", workers: int | None) -> Iterator[cf.Executor]:
    """`None`/`local`: a process pool of `workers` (default: all cores);
    `dask://HOST:PORT`: an existing Dask scheduler; `dask-local`: a LocalCluster
    of `workers` single-threaded processes, started here and closed after;
    an Executor object: used as is, left open."""
    if isinstance(executor, cf.Executor):
        yield executor
        return
    with ExitStack() as stack:
        if executor in (None, "", "local"):
            pool = cf.ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1)
            stack.callback(pool.shutdown, wait=True, cancel_futures=True)
            yield pool
            return
        try:
            from distributed import Client, LocalCluster
        except ModuleNotFoundError:
            raise ConfigError(f"--executor {executor}: needs dask (pip install -e .[cluster])") from None
        if executor == "dask-local":
            cluster = stack.enter_context(LocalCluster(n_workers=workers or os.cpu_count() or 1,
                                                       threads_per_worker=1, processes=True,
                                                       dashboard_address=None))
            client = stack.enter_context(Client(cluster))
        elif executor.startswith("dask://"):
            address = "tcp://" + executor.removeprefix("dask://")
            try:
                client = stack.enter_context(Client(address, timeout="10s"))
            except OSError as exc:
                raise ConfigError(f"--executor {executor}: cannot reach the Dask scheduler: {exc}") from None
        else:
            raise ConfigError(f"--executor {executor!r}: expected local, dask-local or dask://HOST:PORT")
        yield client.get_executor()


@dataclass
class Summary:
    total: int        # points after expansion and `when`
    skipped: int      # already in the store
    ran: int
    failed: int       # of those run now
    seconds: float    # running the points: first submit to last result (no executor start-up)

    @property
    def points_per_s(self) -> float:
        return self.ran / self.seconds if self.seconds else 0.0


def _progress(total: int, enabled: bool):
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"{task.speed:.1f} points/s" if task.speed else "-- points/s")

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), Rate(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    disable=not enabled, transient=False)


def run_points(points: list[Point], store: Store, executor: cf.Executor, progress: bool = True,
               description: str = "sweep") -> tuple[int, int, float]:
    """Run `points` on `executor`, committing each result as it arrives. Returns (ran, failed,
    seconds from the first submit to the last result). On Ctrl-C, pending points are
    cancelled; the finished ones are already stored."""
    t0 = time.perf_counter()
    # Submit everything before the progress bar starts its thread: a fork-based pool
    # forks its workers at the first submit, and forking next to a live thread is unsafe.
    futures = {executor.submit(run_point, p.config): p for p in points}
    ran = failed = 0
    with _progress(len(points), progress) as bar:
        task = bar.add_task(description, total=len(points))
        try:
            for fut in cf.as_completed(futures):
                point = futures[fut]
                try:
                    outcome = fut.result()
                except cf.CancelledError:
                    continue
                except Exception as exc:  # the executor lost the point (worker died): not stored, retried on rerun
                    bar.console.print(f"point {point.index} lost: {type(exc).__name__}: {exc}", markup=False, style="yellow")
                    continue
                store.add(point, outcome)
                ran += 1
                failed += outcome["status"] != "ok"
                bar.advance(task)
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
    return ran, failed, time.perf_counter() - t0


def run_sweep(spec: SweepSpec | str | Path, out_dir: str | Path, workers: int | None = None,
              executor: "str | cf.Executor | None" = None, progress: bool = True, plots: bool = True) -> Summary:
    """Expand, skip what the store holds, run the rest, write results.csv and the plots."""
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    points = expand(spec)  # everything is validated before anything runs
    out = Path(out_dir)
    with Store(out) as store:
        store.set_meta(name=spec.name, spec=spec.model_dump(mode="json"), keys=[p.key for p in points],
                       axes=list(spec.axes))
        done = store.done_keys()
        todo = [p for p in points if p.key not in done]
        ran = failed = 0
        seconds = 0.0
        if todo:
            with make_executor(executor, workers) as ex:
                ran, failed, seconds = run_points(todo, store, ex, progress, description=spec.name)
    if plots:
        finish(spec, out)
    return Summary(len(points), len(points) - len(todo), ran, failed, seconds)


def finish(spec: SweepSpec, out: Path) -> list[Path]:
    """results.csv and the plots, from the store."""
    from sim.apps.sweep import plots as sweep_plots
    from sim.apps.sweep.store import export

    written = export(out, csv=out / "results.csv")
    from sim.apps.sweep.store import load_results

    df = load_results(out)
    written += sweep_plots.draw_all(spec, df, out)
    return written

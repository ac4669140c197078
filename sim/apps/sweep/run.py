"""Running the points of a sweep on a concurrent.futures executor.

The work of one point is `run_point(config)` (sim.apps.sweep.point), a top-level, pure
function of the point's resolved config (plain dicts), so it pickles to a local process pool
or a Dask cluster alike. Results come back to this process, which alone writes
the store: one commit per finished point.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from sim.core.errors import ConfigError
from sim.core.files import check_output, transaction
from sim.apps.sweep import DEFAULT_MAX_POINTS
from sim.apps.sweep.energy import cap_caveats
from sim.apps.sweep.expand import Point, check_size, expand, gathered_notes, is_serving
from sim.apps.sweep.names import for_kind
from sim.apps.sweep.spec import SweepSpec, load_spec
from sim.apps.sweep.store import Store
from sim.apps.sweep import plots as sweep_plots
from sim.apps.sweep.point import run_point
from sim.apps.sweep.store import export, load_results, load_series
from sim.apps.workers import check_workers, process_pool, worker_count


# The local cluster's housekeeping, slowed: at Dask's defaults (an event-loop health tick every 20 ms in
# the scheduler and each nanny, a system monitor every 0.5 s, each nanny reading its worker's memory every
# 0.1 s, a stack sample of the running task every 10 ms) the sweep's own process spent 8.6 s CPU over a
# 190 s run of the 200-point serving sweep on 2 loaded cores, 2.9 s with these (issue 30). Monitoring
# only: no point's work or result depends on them. A cluster given by address keeps its own settings.
LOCAL_DASK_CONFIG = {"distributed.admin.tick.interval": "1s",
                     "distributed.admin.system-monitor.interval": "5s",
                     "distributed.worker.memory.monitor-interval": "1s",
                     "distributed.worker.profile.enabled": False}


@contextmanager
def make_executor(executor: "str | cf.Executor | None", workers: int | None) -> Iterator[cf.Executor]:
    """`None`/`local`: a process pool of `workers` (default: all cores);
    `dask://HOST:PORT`: an existing Dask scheduler; `dask-local`: a LocalCluster
    of `workers` single-threaded processes, started here and closed after;
    an Executor object: used as is, left open."""
    if isinstance(executor, cf.Executor):
        yield executor
        return
    check_executor(executor, workers)
    with ExitStack() as stack:
        if executor in (None, "", "local"):
            yield stack.enter_context(process_pool(workers))
            return
        try:
            from distributed import Client, LocalCluster
        except ModuleNotFoundError:
            raise ConfigError(f"--executor {executor}: needs dask (pip install -e .[cluster])") from None
        if executor == "dask-local":
            import dask   # a dependency of distributed, imported above
            # before the cluster: its nannies hand the configuration to the worker processes they start
            stack.enter_context(dask.config.set(LOCAL_DASK_CONFIG))
            cluster = stack.enter_context(LocalCluster(n_workers=worker_count(workers),
                                                       threads_per_worker=1, processes=True,
                                                       dashboard_address=None))
            client = stack.enter_context(Client(cluster))
        elif is_remote(executor):
            address = "tcp://" + executor.split("://", 1)[1]
            try:
                client = stack.enter_context(Client(address, timeout="10s"))
            except OSError as exc:
                raise ConfigError(f"--executor {executor}: cannot reach the Dask scheduler: {exc}") from None
        yield client.get_executor()


def is_remote(executor: "str | cf.Executor | None") -> bool:
    """An address of a running Dask scheduler: dask://HOST:PORT, or tcp://HOST:PORT as the scheduler prints it."""
    return isinstance(executor, str) and executor.startswith(("dask://", "tcp://"))


def check_executor(executor: "str | cf.Executor | None", workers: int | None) -> None:
    """The --executor and --workers values, checked before anything is created."""
    check_workers(workers)
    if isinstance(executor, cf.Executor) or executor in (None, "", "local"):
        return
    if not (executor == "dask-local" or is_remote(executor) and executor.split("://", 1)[1]):
        raise ConfigError(f"--executor {executor!r}: expected local, dask-local or dask://HOST:PORT "
                          "(tcp://HOST:PORT, as a Dask scheduler prints its address, reads the same)")
    if importlib.util.find_spec("distributed") is None:
        raise ConfigError(f"--executor {executor}: needs dask (pip install -e .[cluster])")


@dataclass
class Summary:
    total: int        # points after expansion and `when`
    skipped: int      # already in the store
    ran: int
    failed: int       # of those run now
    seconds: float    # running the points: first submit to last result (no executor start-up)
    reused: list[int] = field(default_factory=list)   # point ids whose stored rows were reused
    changed: list[str] = field(default_factory=list)  # files whose content changed since the folder's last run
    notes: list[str] = field(default_factory=list)    # what the points' runs warn of (expand.gathered_notes)

    @property
    def points_per_s(self) -> float:
        return self.ran / self.seconds if self.seconds else 0.0


def _progress(total: int, enabled: bool):
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"{task.speed:.1f} points/s" if task.speed else "-- points/s")

    # markup=False: the spec's name is printed literally ("[/b]x" is a name, not rich markup). On stderr, as sim
    # run's bar: stdout holds what --format asks for (the bar went there, a trial's `> log` held only it).
    return Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), Rate(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=Console(stderr=True), disable=not enabled, transient=False)


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
        except BaseException:   # Ctrl-C among them: the sweep counts what the store holds (_run_in)
            for fut in futures:
                fut.cancel()
            raise
    return ran, failed, time.perf_counter() - t0


# Points past which a sweep's set-up (each point resolved and validated, ~0.5 ms) is said before it starts
LONG_SETUP_POINTS = 10_000


def run_sweep(spec: SweepSpec | str | Path, out_dir: str | Path, workers: int | None = None,
              executor: "str | cf.Executor | None" = None, progress: bool = True, plots: bool = True,
              max_points: int = DEFAULT_MAX_POINTS) -> Summary:
    """Expand, skip what the store holds, run the rest, write results.csv and (unless not
    `plots`) the plots. Everything is checked before the output folder is touched."""
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    check_executor(executor, workers)
    if progress and (n := check_size(spec, max_points)) >= LONG_SETUP_POINTS:   # a trial sat through ~50 s unsaid
        print(f"{spec.source or spec.name}: resolving and checking {n:,} points before any runs", file=sys.stderr)
    points = expand(spec, max_points)  # everything is validated before anything runs
    spec = for_kind(spec, is_serving(spec))   # a serving sweep's default metrics are serving metrics
    out = Path(out_dir)
    check_output(out, directory=True)
    with ExitStack() as early:
        # a scheduler's address is reached before a new folder is made: an unreachable one leaves nothing behind (an
        # existing folder, all of whose points may be stored, does not need it: it connects when a point is left)
        fresh = is_remote(executor) and not (out / "results.sqlite").exists()
        remote = early.enter_context(make_executor(executor, workers)) if fresh else None
        return _run_in(spec, points, out, remote or executor, workers, progress, plots)


def _run_in(spec: SweepSpec, points: list[Point], out: Path, executor: "str | cf.Executor | None",
            workers: int | None, progress: bool, plots: bool) -> Summary:
    """run_sweep's work in the output folder `out`, its points expanded and checked."""
    with Store(out, lock=True) as store:  # one writer per folder until the plots are drawn
        try:
            return _stored_run(spec, points, out, store, executor, workers, progress, plots)
        except KeyboardInterrupt as stop:   # the CLI prints "interrupted: " and this, wherever Ctrl-C landed (an
            # architecture trial's interrupt in the workers' shutdown or the export printed a bare "interrupted")
            if stop.args:
                raise
            stored = len(store.done_keys() & {p.key for p in points})
            raise KeyboardInterrupt(f"{stored} of {len(points)} points are stored in {store.path}; the same command "
                                    f"resumes from them (`sim sweep export {out} --csv PATH` writes what they hold)") from None


def _stored_run(spec: SweepSpec, points: list[Point], out: Path, store: "Store", executor: "str | cf.Executor | None",
                workers: int | None, progress: bool, plots: bool) -> Summary:
    """_run_in's work with its store open."""
    reused = store.adopt(points)
    contents = {path: digest for p in points for path, digest in p.contents.items()}
    before = store.meta().get("contents") or {}
    changed = sorted(path for path, digest in contents.items() if before.get(path, digest) != digest)
    store.set_meta(name=spec.name, spec=spec.model_dump(mode="json"), keys=[p.key for p in points],
                   contents={**before, **contents},
                   axes=list(spec.axes))
    done = {p.key for p in reused}
    todo = [p for p in points if p.key not in done]
    ran = failed = 0
    seconds = 0.0
    if todo:
        with make_executor(executor, workers) as ex:   # Ctrl-C: _run_in counts the points stored
            ran, failed, seconds = run_points(todo, store, ex, progress, description=spec.name)
    finish(spec, out, plots)
    # what `sim run` would say of the points after running them, as gathered_notes says what it would say before
    return Summary(len(points), len(reused), ran, failed, seconds, [p.index for p in reused], changed,
                   gathered_notes(points) + cap_caveats(load_results(out), list(spec.axes)))


def finish(spec: SweepSpec, out: Path, plots: bool = True) -> list[Path]:
    """results.csv, then the plots (all of them or none), from the store. A plot that names no column of the
    results fails only once they exist, so results.csv is written first and the error says so."""
    with transaction():
        written = export(out, csv=out / "results.csv")
    if plots:
        try:
            with transaction():
                df = load_results(out)
                keys = df["key"].tolist() if "key" in df.columns else []
                written += sweep_plots.draw_all(spec, df, out, load_series(out, keys))
        except ConfigError as exc:
            raise ConfigError(f"{spec.source or spec.name}: {exc} ({out / 'results.csv'} is written; mend the plot "
                              "and run the sweep again: its finished points are reused, only the plots are drawn)"
                              ) from None
    return written

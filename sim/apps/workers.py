"""Worker processes for the commands that spread independent jobs over the cores (`sim sweep`, `sim
validate-serving`): one check of a --workers value, and one process pool whose workers die with the
command's process and whose queued jobs are cancelled when it stops early."""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import os
import signal
import sys
from contextlib import contextmanager
from typing import Iterator

from sim.core.errors import ConfigError

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def check_workers(workers: int | None) -> None:
    """A --workers value (None: all cores), checked before anything is started."""
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers}: must be at least 1")


def worker_count(workers: int | None) -> int:
    """The processes a --workers value asks for: None means all cores."""
    return workers or os.cpu_count() or 1


def die_with_parent(parent_pid: int) -> None:
    """Pool initializer: a worker is killed when the command's process dies, even by SIGKILL
    (Linux PR_SET_PDEATHSIG; elsewhere the pool's own shutdown is all there is). It ignores Ctrl-C:
    a terminal sends SIGINT to the whole process group, and a worker interrupted inside the pool's
    queues can leave a lock held that the shutdown then waits on forever (a trial froze 2 sweeps
    of ~35); the command's process alone handles it and stops the workers (process_pool)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the line above ran
        os._exit(1)


@contextmanager
def process_pool(workers: int | None) -> Iterator[cf.ProcessPoolExecutor]:
    """`workers` processes (None: all cores). Done, the pool is shut down; stopped by an interrupt or an
    error, the jobs not yet started are cancelled and the workers terminated, not waited on: the caller
    has kept every result it took, and a wait on the pool's queues after an interrupt can last forever."""
    pool = cf.ProcessPoolExecutor(max_workers=worker_count(workers),
                                  initializer=die_with_parent, initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException:
        stop(pool)
        raise
    pool.shutdown(wait=True)


def stop(pool: cf.ProcessPoolExecutor) -> None:
    """Cancel what has not started and terminate the workers (SIGTERM; their running jobs are lost)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())   # the executor has no public handle on them
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        p.terminate()
    for p in procs:
        p.join(timeout=2.0)

"""Writing output files: atomically for regular files (a temporary file renamed into
place, so an interrupted run leaves nothing half-written), straight through for
devices and FIFOs, all of a command's outputs or none (`transaction`), and JSON
that is standard (no NaN) and byte-identical run to run (sorted keys). Generic
file I/O: every stratum may write through it (a kind's CLI, calibration, sweeps).

Inputs are sacred: inside `guard_inputs()` (the CLI wraps every command in it) each file
a reader opens is noted (`note_input`; the shared readers in sim.core.schema do it), and
an output that resolves, after symlinks and hard links, to a noted input is refused in one
line before anything is written (`check_output`, which `atomic_write` calls again at the
moment of writing, so an input read after the early check is protected too)."""


from __future__ import annotations

import contextvars
import json
import math
import os
import signal
import stat
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from sim.core.errors import ConfigError

# The files the current command has read: resolved paths and (device, inode) pairs.
# None outside guard_inputs(): library callers (tests, notebooks) are not tracked.
_INPUTS: contextvars.ContextVar[dict[str, tuple[int, int] | None] | None] = \
    contextvars.ContextVar("sim_inputs_read", default=None)

# Per transaction: (commit, abort) callables of the staged writes, in order.
_STAGED: contextvars.ContextVar[list[tuple[Callable[[], None], Callable[[], None]]] | None] = \
    contextvars.ContextVar("sim_staged_outputs", default=None)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _is_stream(path: Path) -> bool:
    """A character device or FIFO (after following symlinks): written through, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _target(path: Path) -> Path:
    """The file a write lands in: a symlink's final target (so the link survives)."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


@contextmanager
def guard_inputs() -> Iterator[None]:
    """Track the files read inside (one command's run) so no output may replace one."""
    token = _INPUTS.set({})
    try:
        yield
    finally:
        _INPUTS.reset(token)


@contextmanager
def capture_inputs() -> Iterator[list[str]]:
    """The files noted inside, listed (even outside guard_inputs) and still noted for the
    enclosing command: a cache of what a reader built can note them again on a hit."""
    outer = _INPUTS.get()
    token = _INPUTS.set({})
    seen: list[str] = []
    try:
        yield seen
    finally:
        seen.extend((_INPUTS.get() or {}).keys())
        _INPUTS.reset(token)
        if outer is not None:
            note_input(*seen)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def note_input(*paths: str | Path | None) -> None:
    """Record `paths` as read by this command (a no-op outside guard_inputs)."""
    inputs = _INPUTS.get()
    if inputs is None:
        return
    for path in paths:
        if path:
            inputs[os.path.realpath(path)] = _identity(Path(path))


def _read_by_this_run(path: Path) -> str | None:
    """The input `path` resolves to, when this command has read it."""
    inputs = _INPUTS.get()
    if not inputs:
        return None
    real = os.path.realpath(path)
    if real in inputs:
        return real
    ident = _identity(path)  # a hard link (or bind mount) to an input has another name
    return next((name for name, i in inputs.items() if ident is not None and i == ident), None)


def refuse_inputs(path: Path) -> None:
    """One line, before anything is written, when the output `path` is a file this run read."""
    same = _read_by_this_run(path)
    if same is not None:
        shown = "" if same == str(path) or same == os.path.abspath(path) else f" (it resolves to {same})"
        raise ConfigError(f"{path}: refusing to write an output over an input this command reads{shown}; "
                          "give another output path")


# Folders a command was given as folders (--plots DIR, a sweep's --out): atomic_write does not note making them.
_NAMED_DIRS: set[Path] = set()


def check_output(path: str | Path, directory: bool = False) -> Path:
    """Fail before a long run, not after it, when `path` cannot be written: it is
    an existing directory (or, for `directory`, a file), a read-only file, a socket or
    block device, or a parent is a file, or the nearest existing parent is not writable,
    or it is a file this command reads (see the module docstring), or a file's path ends in a separator (`out/`
    names a folder; Path() drops the slash and the file would be written as `out`)."""
    if not directory and str(path).endswith(("/", os.sep)):
        raise ConfigError(f"{path}: a folder path; expected a file path")
    path = Path(path)
    if directory:   # a folder the command was told to write into: making it (and under it) is no news
        _NAMED_DIRS.add(Path(os.path.abspath(path)))
    if not directory:
        refuse_inputs(path)
    if path.is_dir() != directory and path.exists():
        raise ConfigError(f"{path}: is {'a file' if directory else 'a directory'}; "
                          f"expected {'a directory' if directory else 'a file path'}")
    if not directory and path.exists():
        mode = os.stat(path).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISREG(mode):
            # The mode bits too: root may write anything, but a file marked read-only is meant to stay.
            if not os.access(path, os.W_OK) or stat.S_ISREG(mode) and not mode & 0o222:
                raise ConfigError(f"{path}: cannot write: permission denied (read-only)")
            if not stat.S_ISREG(mode):
                return path  # written through: the folder it is in need not be writable
        else:
            raise ConfigError(f"{path}: cannot write: not a regular file, character device or FIFO")
    target = path if directory else _target(path)
    parent = target if directory else target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{path}: cannot write: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{path}: cannot write: {parent} is not writable")
    return path


def check_outputs(named: dict[str, str | None]) -> None:
    """`check_output` on each of a command's output flags that is set ({flag: path}); stdout (`-`) once at most,
    as two outputs there would run into one another."""
    on_stdout = [flag for flag, path in named.items() if path == "-"]
    if len(on_stdout) > 1:
        raise ConfigError(f"{' and '.join(on_stdout)}: both write to stdout (-); give one of them a file path")
    seen: dict[str, str] = {}
    for flag, path in named.items():   # one file named twice: the later write replaced the earlier (a trial)
        if path and path != "-":
            real = os.path.realpath(path)
            if real in seen:
                raise ConfigError(f"{seen[real]} and {flag}: both write {path}; give each its own file")
            seen[real] = flag
            check_output(path)


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM held back while the block runs, delivered as it ends: an interrupt lands before the block
    or after it, never inside. For the few statements that must not be cut in two (a temporary file made and
    registered for removal, a transaction's renames): a Ctrl-C between them had left a `.r.csv.*` temporary file
    behind, or one output of three (tests/test_robust_interrupt.py, a suite run on a loaded machine).

    The Python-level handlers are swapped for one that only records the signal, and the recorded ones are raised
    again once the old handlers are back. A thread's signal mask would not do: a process-directed signal goes to
    any thread that does not block it (rich's progress refresh, a worker pool), and Python then runs the handler in
    the main thread inside the block anyway (the suite caught it: the interrupt landed mid-block). Handlers can only
    be set from the main thread, where they run; elsewhere the block runs as it is (no handler interrupts it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    old = {s: signal.signal(s, lambda signum, _frame: caught.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(caught):   # each signal once, in the order it came, to the handler it was meant for
            signal.raise_signal(s)


@contextmanager
def transaction() -> Iterator[None]:
    """Stage every `atomic_write` inside; land them all at the end, or none on an error."""
    if _STAGED.get() is not None:  # nested: the outer transaction lands everything
        yield
        return
    staged: list[tuple[Callable[[], None], Callable[[], None]]] = []
    token = _STAGED.set(staged)
    try:
        yield
        with deferred_interrupts():   # all the renames or none: an interrupt waits for the last
            try:
                for commit, _ in staged:
                    commit()
            except BaseException:   # a rename failed: clean up before a held-back interrupt can cut in
                _abort_all(staged)
                raise
    except BaseException:
        _abort_all(staged)   # after the renames (an interrupt they held back) this removes nothing they landed
        raise
    finally:
        _STAGED.reset(token)


def _abort_all(staged: list[tuple[Callable[[], None], Callable[[], None]]]) -> None:
    for _, abort in reversed(staged):  # the last write's temp goes first, then the folders
        abort()


def _fail(path: Path, exc: OSError) -> ConfigError:
    return ConfigError(f"{path}: cannot write: {exc.strerror or exc}")


def _write_stream(path: Path, write: Callable[[Path], None]) -> None:
    try:
        write(path)
    except OSError as exc:
        raise _fail(path, exc) from None


def _write_stdout(write: Callable[[Path], None]) -> None:
    """`write` into a scratch file, then its bytes to stdout: the writers (pandas, matplotlib, json) take a path,
    and a redirected stdout must be appended to, not replaced by a rename."""
    with tempfile.TemporaryDirectory(prefix="sim-stdout-") as scratch:
        tmp = Path(scratch) / "out"
        write(tmp)
        sys.stdout.flush()
        out = getattr(sys.stdout, "buffer", None)   # a StringIO (redirect_stdout, a notebook) has none: text then
        if out is None:
            sys.stdout.write(tmp.read_bytes().decode("utf-8", errors="replace"))
        else:
            out.write(tmp.read_bytes())
            out.flush()


def _say_made(path: str | Path, final: Path, made: list[Path]) -> None:
    """A folder a write made is named (`made`: innermost first): a typo in a folder name writes somewhere new. Not
    inside a folder the command was given as one (_NAMED_DIRS), where making folders is what it was told."""
    outer = Path(os.path.abspath(made[-1])) if made else None
    if outer is not None and not any(outer == d or d in outer.parents for d in _NAMED_DIRS):
        print(f"note: {path}: made the folder {final.parent}" + (f" (and {len(made) - 1} above it, from {made[-1]})"
              if len(made) > 1 else ""), file=sys.stderr)


def _now_or_staged(staged: list | None, write: Callable[[], None]) -> None:
    """A write straight through (stdout, a device, a FIFO): now, or at the transaction's end (nothing to remove)."""
    if staged is None:
        write()
    else:
        staged.append((write, lambda: None))


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """`write(p)` writes the whole file at `p`; see the module docstring for where it lands. `-` is stdout, as for
    most Unix tools (`--json -` wrote a file named `-`, a trial's finding), inside a transaction at its end."""
    staged = _STAGED.get()
    if str(path) == "-":
        _now_or_staged(staged, lambda: _write_stdout(write))
        return Path("-")
    path = check_output(path)
    if _is_stream(path):
        _now_or_staged(staged, lambda: _write_stream(path, write))
        return path
    final = _target(path)
    made = [d for d in (final.parent, *final.parent.parents) if not d.exists()]  # folders this write creates
    temp: list[Path] = []   # the temporary file, once made

    def abort() -> None:
        for t in temp:
            t.unlink(missing_ok=True)
        for d in made:  # innermost first; a folder something else wrote into stays
            try:
                d.rmdir()
            except OSError:
                break

    def commit() -> None:
        try:
            os.replace(temp[0], final)
        except OSError as exc:
            raise _fail(path, exc) from None
        _say_made(path, final, made)

    try:
        with deferred_interrupts():   # the temporary file is never there without its removal registered
            try:
                final.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", dir=final.parent)
            except OSError as exc:  # a parent is a file, a read-only directory, a full disk
                raise _fail(path, exc) from None
            os.close(fd)
            temp.append(Path(tmp_name))
            if staged is not None:
                staged.append((commit, abort))
        write(temp[0])
        os.chmod(temp[0], 0o666 & ~_umask())  # mkstemp makes 0600; a result file is as readable as any other
        if staged is None:
            commit()
    except OSError as exc:
        abort()
        raise _fail(path, exc) from None
    except BaseException:
        abort()
        raise
    return path


def _finite(data: Any) -> Any:
    """NaN and infinities as null: Python's json writes bare NaN/Infinity, which is not JSON."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def dumps(data: Any) -> str:
    """Standard, byte-identical JSON: finite numbers only, keys sorted (dict order can
    follow set iteration, which changes with the hash seed)."""
    return json.dumps(_finite(json.loads(json.dumps(data, default=float))), indent=1, sort_keys=True,
                      allow_nan=False)


def write_json(path: str | Path, data: Any) -> Path:
    """`data` as JSON at `path`, atomically; `-` is stdout (with a command's tables on stdout too, add -q for the
    JSON alone)."""
    return atomic_write(path, lambda p: p.write_text(dumps(data) + "\n"))


def require_parquet(what: str) -> None:
    """One line, not pandas' traceback asking for fastparquet, when pyarrow (a dependency of
    sim since issue 34) is missing from a broken install."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ConfigError(f"{what}: writing Parquet needs pyarrow, which this install lacks (pip install pyarrow, "
                          "or reinstall sim); or give a .csv name") from None


def write_parquet(path: str | Path, frame: Any, what: str) -> Path:
    """`frame` (a pandas DataFrame) as Parquet through pyarrow, atomically."""
    require_parquet(what)
    return atomic_write(path, lambda p: frame.to_parquet(p, index=False, engine="pyarrow"))

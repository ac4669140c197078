"""Ctrl-C that escapes the CLI's main() (it lands in the imports, before main's handler
exists): one line, `interrupted`, and exit status 130, as inside main, not a
KeyboardInterrupt traceback. Standard library only: it is installed while `sim` itself
is first imported, before anything heavy loads."""

from __future__ import annotations

import os
import signal
import sys

# Set by our SIGINT handler: C code may swallow the KeyboardInterrupt it raised and put an
# unrelated error in its place (CPython's PyCapsule_Import, reached from numpy's import, raises
# "could not import module datetime" with no trace of the interrupt), so the chain alone can miss it.
_received = False


def _on_sigint(signum, frame) -> None:
    global _received
    _received = True
    raise KeyboardInterrupt


def _interrupted(value: BaseException | None) -> bool:
    """Ctrl-C, or an error raised while handling one: numpy turns a KeyboardInterrupt that
    lands inside its C-extension import into an ImportError whose context is the interrupt."""
    seen: set[int] = set()
    while value is not None and id(value) not in seen:
        if isinstance(value, KeyboardInterrupt):
            return True
        seen.add(id(value))
        value = value.__cause__ or value.__context__
    return False


def _hook(kind, value, tb) -> None:
    if issubclass(kind, KeyboardInterrupt) or _received or _interrupted(value):
        print("interrupted", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)   # sys.exit from a hook is ignored; nothing is half-written (atomic writes)
    sys.__excepthook__(kind, value, tb)


def _unraisable(info) -> None:
    """An interrupt raised where Python cannot propagate it (a weakref callback such as the import
    system's module-lock cleanup, a __del__) is only printed as "Exception ignored in", and the run went
    on to exit 0: it is still Ctrl-C, so it ends the run as one."""
    if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
        _hook(info.exc_type, info.exc_value, info.exc_traceback)
    sys.__unraisablehook__(info)


def install() -> None:
    sys.excepthook = _hook
    sys.unraisablehook = _unraisable
    try:   # Python's own handler only: never one a user or a host program set
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:   # not the main thread: only the main thread receives signals anyway
        pass


def running_the_cli() -> bool:
    """This process is the `sim` command: the console script, or `python -m sim.apps.cli` (runpy
    shows argv[0] as "-m" while it imports the module's packages)."""
    argv0 = sys.argv[0] if sys.argv else ""
    return argv0 == "-m" or os.path.basename(argv0) == "sim"

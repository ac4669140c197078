"""sim: a discrete-event simulator of LLM inference hardware."""

import os as _os   # both already loaded: binding them runs no import machinery
import sys as _sys

# Until sim.core.interrupt is imported (finding and compiling it takes a millisecond or two, long
# enough for a Ctrl-C to land in), a KeyboardInterrupt is the one line and status 130 already.
# Only when this process is the `sim` command; interrupt.install() replaces it below.
if _sys.argv and (_sys.argv[0] == "-m" or _os.path.basename(_sys.argv[0]) == "sim"):   # = interrupt.running_the_cli
    def _early_hook(kind, value, tb) -> None:
        if issubclass(kind, KeyboardInterrupt):
            print("interrupted", file=_sys.stderr)
            _sys.stderr.flush()
            _os._exit(130)   # an excepthook cannot exit through SystemExit
        _sys.__excepthook__(kind, value, tb)
    _sys.excepthook = _early_hook

__version__ = "0.1.0"

from sim.core import interrupt as _interrupt  # noqa: E402 (stdlib only; sim.core.__init__ is empty)

if _interrupt.running_the_cli():   # from the first line of sim the CLI runs, not once its imports are done
    _interrupt.install()

"""sim: a discrete-event simulator of LLM inference hardware."""

__version__ = "0.1.0"

from sim.core import interrupt as _interrupt  # noqa: E402 (stdlib only; sim.core.__init__ is empty)

if _interrupt.running_the_cli():   # from the first line of sim the CLI runs, not once its imports are done
    _interrupt.install()

"""sim: a discrete-event simulator of LLM inference hardware."""

__version__ = "0.1.0"

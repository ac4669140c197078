"""User-facing errors.

A `SimError` is a mistake in the user's input (a bad file, an unknown name, a
model that does not fit). The CLI prints its message as one line and exits
non-zero, without a traceback. Anything else is a bug in sim and keeps its
traceback.
"""

from __future__ import annotations


class SimError(Exception):
    """An error in user input, reported as a single line."""


class ConfigError(SimError):
    """A malformed or invalid configuration file or value."""


class CapacityError(SimError):
    """The workload does not fit in the memory of the chosen hardware."""


def where(source: str | None, key: str | None) -> str:
    """Format the 'file: key' prefix of an error message."""
    parts = [p for p in (source, key) if p]
    return ": ".join(parts) + ": " if parts else ""

"""User-facing errors.

A `SimError` is a mistake in the user's input (a bad file, an unknown name, a
model that does not fit). The CLI prints its message as one line and exits
non-zero, without a traceback. Anything else is a bug in sim and keeps its
traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


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


@contextmanager
def naming_sets(source: str, keys) -> Iterator[None]:
    """An error about `source` raised inside names the keys that changed it (--set's, or the API's overrides): the file
    may say `batch: 1` where --set said 0 (an architecture trial read the file blamed), as a preset's overridden keys
    are named, in the same words (an API trial read "--set" of a Python call)."""
    try:
        yield
    except SimError as exc:
        keys = list(keys or ())
        if not keys or not str(exc).startswith(f"{source}: "):
            raise
        raise type(exc)(f"{source} (with {', '.join(keys)} overridden): {str(exc)[len(source) + 2:]}") from None

"""Top-level workload keys that hardware kinds own; hw_models.kinds registers them (the core
cannot know the kinds: it sits below them). Kept apart from sim.core.workload, which loads
pydantic and numpy, so that the kinds' table (and with it the `sim` parser) loads in a millisecond."""

from __future__ import annotations

KIND_SECTIONS: set[str] = set()


def register_sections(names: set[str] | list[str]) -> None:
    KIND_SECTIONS.update(names)

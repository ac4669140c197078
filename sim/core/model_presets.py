"""The model presets sim ships (sim/core/data/models.yaml): their names, their keys, and the Hugging Face repo each
cites in its `source` line, by which a model may also be named (sim.core.model.load_model)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml


@cache
def _presets() -> dict[str, dict[str, Any]]:
    text = resources.files("sim.core").joinpath("data/models.yaml").read_text()
    # The shipped file, not user input: libyaml's parser (when PyYAML has it) reads it ~10x faster
    # than the pure-Python one, to the same mapping (tests/test_startup.py). Every `sim serve` reads it.
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader


def preset_names() -> list[str]:
    """The model presets' names (`sim model list` shows each with its source; docs/models.md)."""
    return sorted(_presets())


def hub_preset(name: str) -> str | None:
    """The preset whose `source` cites the Hugging Face repo `name` names (its first word, `meta-llama/Llama-3.1-8B`),
    or that repo's -Instruct release, which ships the same config.json: `model: meta-llama/Llama-3.1-8B-Instruct`
    worked in validate-serving and was an unknown model to sim serve (a trial)."""
    asked = name.lower().removesuffix("-instruct")
    return next((preset for preset, raw in _presets().items()
                 if str(raw.get("source", "")).split(" ", 1)[0].lower() == asked), None)


def preset_mapping(name: str) -> dict[str, Any]:
    """A shipped preset's keys as models.yaml writes them (its `source` line included)."""
    return dict(_presets()[name])

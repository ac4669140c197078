"""The schema of capture_trace's `PREFIX.meta.json` and the checks on measured
times, so broken metadata or a NaN duration is one line naming the file and key
instead of a KeyError deep in the parser or a NaN MAPE at the end."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from sim.core.errors import ConfigError
from sim.core.schema import validation_error


class StepWall(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    step: StrictInt = Field(ge=0)
    wall_us: float | None = Field(default=None, ge=0)


class TraceMeta(BaseModel):
    """The keys the parser reads; the file carries many more (argv, versions, load average)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    prompt: StrictInt = Field(gt=0)
    batch: StrictInt = Field(default=1, gt=0)
    decode_steps: StrictInt | None = Field(default=None, ge=0)
    layers: StrictInt | None = Field(default=None, gt=0)
    dtype: str = "fp32"
    flash: StrictBool = False
    device: str = "cpu"
    device_name: str = ""
    model: dict[str, Any] | None = None
    steps: list[StepWall] = []


def check_meta(raw: Any, source: str) -> dict[str, Any]:
    """`raw` (a parsed .meta.json) checked; returned as a plain dict with defaults filled in."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a JSON object of capture_trace metadata")
    try:
        return TraceMeta.model_validate(raw).model_dump(exclude_none=True)
    except ValidationError as exc:
        raise validation_error(exc, source) from None


def measured(value: Any, where: str) -> float:
    """A measured duration: a finite, non-negative number."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected a duration, got {value!r}") from None
    if not (math.isfinite(out) and out >= 0):
        raise ConfigError(f"{where}: a duration must be finite and not negative, got {value!r}")
    return out

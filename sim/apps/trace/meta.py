"""capture_trace's `PREFIX.meta.json`: its schema, finding it beside a trace or
ops table, and the run it describes (model, dtype, step shapes); plus reading
JSON (gzipped or not) and the checks on measured times, so broken metadata or a
NaN duration is one line naming the file and key instead of a KeyError deep in
the parser or a NaN MAPE at the end."""

from __future__ import annotations

import gzip
import json
import math
import zlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from sim.core.errors import ConfigError
from sim.core.files import note_input
from sim.core.formats import get_format
from sim.core.model import ModelConfig, from_mapping, load_model
from sim.core.schema import validation_error
from sim.apps.trace.records import StepShape, Trace


class StepWall(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    step: StrictInt = Field(ge=0)
    wall_us: float | None = Field(default=None, ge=0)


class TraceMeta(BaseModel):
    """The keys the parser reads; the file carries many more (argv, versions, load average)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    prompt: StrictInt = Field(gt=0)
    batch: StrictInt = Field(gt=0)   # required: a meta without it had read as batch 1, silently (a trace trial)
    decode_steps: StrictInt | None = Field(default=None, ge=0)
    layers: StrictInt | None = Field(default=None, gt=0)
    dtype: str = "fp32"
    weights: str | None = None     # capture_trace --weights: the projections' format (embed, lm_head: dtype)
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
    """A measured duration: a finite, non-negative number (`true` is no number of microseconds)."""
    if value is None or (isinstance(value, str) and not value.strip()):   # a row cut short (a truncated file)
        raise ConfigError(f"{where}: the duration is missing (a truncated file?)")
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a duration, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected a duration, got {value!r}") from None
    if not (math.isfinite(out) and out >= 0):
        raise ConfigError(f"{where}: a duration must be finite and not negative, got {value!r}")
    return out


def read_json(p: Path, what: str = "a torch Chrome trace") -> Any:
    """The parsed JSON of `p`, gunzipped first when it starts with gzip's magic bytes."""
    note_input(p)  # no output of this command may replace it
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        if not raw.strip():
            raise ConfigError(f"{p}: not {what}: the file is empty")
        return json.loads(raw)
    except (EOFError, OSError, zlib.error) as exc:
        raise ConfigError(f"{p}: not a readable gzip file ({exc}); truncated?") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not {what}: binary data, not JSON") from None
    except RecursionError:   # json recurses per nesting level
        raise ConfigError(f"{p}: not {what}: JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        # "truncated?" where the parser ran out of input or failed on the last line (a cut inside a string fails at
        # its opening quote); a YAML or CSV file fails at its first character
        last = exc.doc.rstrip().count("\n") + 1
        cut = "; truncated?" if exc.pos >= len(exc.doc.rstrip()) or (exc.lineno == last > 1) else ""
        raise ConfigError(f"{p}: not {what}: malformed JSON at line {exc.lineno}, "
                          f"column {exc.colno} ({exc.msg}){cut}") from None


def meta_path_beside(p: Path) -> Path | None:
    """Where PREFIX.meta.json would sit next to PREFIX.trace.json[.gz] or PREFIX.ops.csv (it may not exist)."""
    for suffix in (".trace.json.gz", ".trace.json", ".json.gz", ".json", ".ops.csv"):
        if p.name.endswith(suffix):
            return p.with_name(p.name[: -len(suffix)] + ".meta.json")
    return None


def meta_beside(p: Path) -> dict[str, Any]:
    """The checked PREFIX.meta.json next to PREFIX.trace.json[.gz] or PREFIX.ops.csv; {} when absent."""
    meta = meta_path_beside(p)
    if meta is not None and meta.is_file():
        return check_meta(read_json(meta, "a capture_trace .meta.json"), str(meta))
    return {}


def _sim_steps_from_meta(meta: dict[str, Any]) -> list[StepShape]:
    """capture_trace runs a prefill of `prompt` tokens, then 1-token decode steps."""
    prompt, batch = int(meta["prompt"]), int(meta.get("batch", 1))
    walls = {int(s["step"]): s.get("wall_us") for s in meta.get("steps", [])}
    n = int(meta.get("decode_steps", len(walls) - 1 if walls else 0)) + 1
    out, pos = [], 0
    for j in range(n):
        q = prompt if j == 0 else 1
        wall = walls.get(j)
        out.append(StepShape(f"step{j}.{'prefill' if j == 0 else 'decode'}", "prefill" if j == 0 else "decode",
                             batch, q, pos + q, 1, wall * 1e-6 if wall is not None else None))
        pos += q
    return out


def _sim_model(meta: dict[str, Any], source: str) -> ModelConfig | None:
    m = meta.get("model")
    if isinstance(m, dict):
        return from_mapping(m, str(m.get("name", "traced")), source)
    return None


def sim_trace_shape(trace: Trace, meta: dict[str, Any], model: str | None) -> None:
    """Fill in `trace`'s model (preset `model`, else the meta's own), dtype, layers and steps from `meta`."""
    if not meta:
        return
    trace.model = load_model(model) if model else _sim_model(meta, trace.source)
    trace.dtype = str(meta.get("dtype", "fp32"))
    trace.weights = meta.get("weights")
    for key in ("dtype", "weights"):
        try:
            if getattr(trace, key) is not None:
                get_format(getattr(trace, key))
        except ConfigError as exc:
            raise ConfigError(f"{trace.source}: {key} in its .meta.json: {exc}") from None
    trace.num_layers = int(meta["layers"]) if "layers" in meta else None
    if trace.model is not None and trace.num_layers is not None and not 1 <= trace.num_layers <= trace.model.num_layers:
        # a capture runs some of the model's layers: more than it has is a wrong sidecar (a trial's 100000 ran on)
        raise ConfigError(f"{trace.source}: layers {trace.num_layers} in its .meta.json: {trace.model.name} has "
                          f"{trace.model.num_layers}")
    trace.flash = bool(meta.get("flash", False))
    trace.device_name = trace.device_name or str(meta.get("device_name", ""))
    trace.meta = meta
    trace.steps = _sim_steps_from_meta(meta)

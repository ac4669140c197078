"""The sweep file: what to vary, how to combine it, what to plot.

    name: bw_x_batch
    workload: ../workloads/llama13b_decode.yaml   # relative to this file
    hw: a6000                                     # preset name or hardware file
    mode: grid                                    # grid | zip | random (+ samples, seed)
    axes:
      workload.batch: [1, 4, 16, 64]
      hw.memory.@device.bandwidth_bytes_per_s: {min: 0.4e12, max: 3.2e12, num: 4, log: true}
    when: workload.batch * workload.prompt_len <= 65536
    plots:
      - {kind: line, x: workload.batch, y: tpot_s, lines: hw.memory.@device.bandwidth_bytes_per_s}

Axis paths start with `workload.` (a workload field) or `hw.` (a machine field),
or are exactly `hw` (the machine itself, a list of presets). In `hw.` paths,
`@device` stands for the machine's device memory tier and `@main` for its main
compute unit, so one path works across presets whose tiers are named
differently (a6000's `gddr`, h100's `hbm`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import numpy as np
from pydantic import Field, field_validator, model_validator

from sim.core.errors import ConfigError
from sim.core.schema import Strict, read_yaml, validate_mapping
from sim.core.units import dimension_of, parse_quantity
from sim.apps.sweep.expr import compile_expr


class Range(Strict):
    """`num` evenly spaced values (log-spaced with `log: true`), or every `step`
    from min to max; in random mode, draws from [min, max] (log-uniform with `log`)."""

    # int | float keeps how the file wrote them: `{min: 1, max: 64}` gives whole numbers,
    # `{min: 0.4e12, ...}` floats.
    min: int | float
    max: int | float
    num: int | None = Field(default=None, ge=1)
    step: int | float | None = Field(default=None, gt=0)
    log: bool = False
    # Whole numbers (batch sizes, lengths); default: true when min, max (and step) are written as integers.
    integer: bool | None = None

    @model_validator(mode="after")
    def _check(self) -> "Range":
        if self.max < self.min:
            raise ValueError("max must be >= min")
        if self.log and self.min <= 0:
            raise ValueError("log: true needs min > 0")
        if self.num is not None and self.step is not None:
            raise ValueError("give num or step, not both")
        if self.log and self.step is not None:
            raise ValueError("step cannot be combined with log: true; use num")
        return self

    @property
    def is_integer(self) -> bool:
        if self.integer is not None:
            return self.integer
        return all(isinstance(v, int) for v in (self.min, self.max, self.step) if v is not None)

    def _cast(self, values: np.ndarray) -> list[Any]:
        if self.is_integer:
            return list(dict.fromkeys(int(round(v)) for v in values))  # rounding may collide; keep order
        return [float(f"{v:.12g}") for v in values]  # geomspace's 800000000000.0004 -> 8e11

    def values(self, where: str) -> list[Any]:
        """The grid/zip values of this range; `where` names the file and axis in errors."""
        if self.step is not None:
            n = int(math.floor((self.max - self.min) / self.step + 1e-9)) + 1
            return self._cast(self.min + self.step * np.arange(n))
        if self.num is None:
            raise ConfigError(f"{where}: a range needs `num` or `step` outside random mode")
        space = np.geomspace if self.log else np.linspace
        return self._cast(space(self.min, self.max, self.num))

    def sample(self, rng: np.random.Generator) -> Any:
        if self.log:
            v = math.exp(rng.uniform(math.log(self.min), math.log(self.max)))
        else:
            v = rng.uniform(self.min, self.max)
        if self.step is not None:  # snap to the step grid
            v = self.min + round((v - self.min) / self.step) * self.step
        return int(round(v)) if self.is_integer else float(v)


def _number(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return float(v) if any(c in v for c in ".eE") else int(v)
        except ValueError:
            return v
    return v


def _si(key: str, v: Any) -> Any:
    """An axis value with a unit ("800 GB/s") as the SI number its key's name says (bandwidth_bytes_per_s: 8e11;
    a mapping keyed by format, peak_flops_per_s.fp8, by its parent's name; any unit where neither gives one): the
    points ran with the parsed figure
    but results.csv kept the text, so plots ordered "800 GB/s" after "6.7 TB/s" and a number beside it crashed their
    sort (an architecture trial). A value its dimension does not parse stays as written, for the machine to refuse."""
    v = _number(v)
    parts = key.split(".")
    dim = dimension_of(parts[-1]) or (dimension_of(parts[-2]) if len(parts) > 1 else None)
    if not isinstance(v, str):
        return v
    try:   # a key whose name gives no unit (energy_j_per_flop.fp16: "0.5 pJ") takes any: a review
        return float(f"{parse_quantity(v, dim):.12g}")   # "5 us" as 5e-06, not 4.9999999999999996e-06
    except ValueError:
        return v


class Scale(Strict):
    """Factors of each machine's own value of a `hw.` field (`{scale: [0.5, 1, 2, 4]}`): "what if the memory
    were twice as fast" across presets of different memories, crossed with the other axes; the column is the factor."""

    scale: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(min_length=1)

    def values(self, where: str) -> list[float]:
        return list(self.scale)

    def sample(self, rng: np.random.Generator) -> float:
        return self.scale[int(rng.integers(len(self.scale)))]

    @property
    def min(self) -> float:   # the value _check_paths tries an axis with in random mode, as a Range's
        return self.scale[0]


AxisValues = Union[Range, Scale, list[Any]]
RANGES = (Range, Scale)   # axes that make their values (the others are lists)


class Plot(Strict):
    """One figure. Column names are axis paths, metric names (`tpot_s`) or
    recorded config fields (`hw.price_usd`, `hw.name`)."""

    kind: Literal["line", "heatmap", "pareto"]
    x: str
    y: str
    z: str | None = None            # heatmap: the colored metric
    lines: str | list[str] | None = None   # line: one line per value (combination) of these columns
    where: str | None = None        # only the rows where this expression (over columns) holds
    # Which way is better for the optimized metric (line: y, heatmap: z, pareto: each of x, y);
    # default: `max` for throughput-like names, `min` otherwise.
    goal: Literal["min", "max"] | None = None
    goal_x: Literal["min", "max"] | None = None
    logx: bool = False
    logy: bool = False
    label: str | None = None        # pareto: column whose value labels each front point
    file: str | None = None         # PNG name; default derived from kind and columns

    @field_validator("file")
    @classmethod
    def _plain_name(cls, v: str | None) -> str | None:
        # The file lands in --out/plots/; a path could write anywhere the user can.
        if v is not None and (not v.strip() or "/" in v or "\\" in v or v.startswith(".") or "\0" in v):
            raise ValueError(f"{v!r}: a plain file name (written under --out/plots/), not a path")
        return v

    @model_validator(mode="after")
    def _check(self) -> "Plot":
        if self.kind == "heatmap" and not self.z:
            raise ValueError("a heatmap needs z (the metric to color)")
        if self.kind != "heatmap" and self.z:
            raise ValueError("z is only for heatmaps")
        if self.kind != "line" and self.lines:
            raise ValueError("lines is only for line plots")
        return self

    @property
    def line_columns(self) -> list[str]:
        return [self.lines] if isinstance(self.lines, str) else list(self.lines or [])

    @property
    def metric(self) -> str:
        return self.z if self.kind == "heatmap" else self.y

    def filename(self) -> str:
        if self.file:
            return self.file if self.file.endswith(".png") else f"{self.file}.png"
        parts = [self.kind, self.metric, "vs", self.x] + ([self.y] if self.kind == "heatmap" else [])
        if self.lines:
            parts += ["by", *self.line_columns]
        safe = "_".join(parts).replace("@", "").replace("/", "_")
        return f"{safe}.png"


def default_goal(metric: str) -> str:
    return "max" if "throughput" in metric or "goodput" in metric or metric.endswith("tok_s") else "min"


class SweepSpec(Strict):
    name: str
    workload: str                       # workload file, relative to the sweep file
    hw: str                             # preset name or hardware file (relative to the sweep file)
    axes: dict[str, AxisValues] = Field(min_length=1)
    mode: Literal["grid", "zip", "random"] = "grid"
    samples: int | None = Field(default=None, ge=1)
    seed: int = Field(default=0, ge=0)   # numpy seeds are not negative
    when: str | None = None             # constraint; points where it is false are dropped
    metrics: list[str] = ["tpot_s", "ttft_s", "throughput_tok_s", "energy_per_token_j"]
    # Config fields recorded in every row besides the axes (for plots such as cost Pareto fronts).
    columns: list[str] = ["hw.name", "hw.price_usd"]
    plots: list[Plot] = []
    source: str = Field(default="", exclude=True)

    @field_validator("axes", mode="before")
    @classmethod
    def _scale_factors(cls, v: Any) -> Any:
        """A `{scale: ...}` axis told against its own form: its factors must be positive numbers, at least one (a DSE
        trial: `{scale: [0, 1]}` was told that Range's `min` is missing, the union's first member)."""
        for key, values in (v.items() if isinstance(v, dict) else ()):
            if isinstance(values, dict) and "scale" in values:
                factors = values["scale"]
                if (not isinstance(factors, list) or not factors
                        or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and math.isfinite(f) and f > 0
                                   for f in map(_number, factors))):
                    raise ValueError(f"{key}: scale: {factors!r}: factors of each machine's own value, a list of "
                                     "positive numbers (e.g. [0.5, 1, 2])")
        return v

    @field_validator("axes")
    @classmethod
    def _axes(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, values in v.items():
            if isinstance(values, list) and not values:
                raise ValueError(f"{key}: empty list of values")
        # YAML 1.1 reads `1.6e12` (no sign in the exponent) as a string; make it the number it is.
        return {k: [_si(k, x) for x in vals] if isinstance(vals, list) else vals for k, vals in v.items()}

    @model_validator(mode="after")
    def _scales(self) -> "SweepSpec":
        for key, values in self.axes.items():
            if isinstance(values, Scale) and not (key.startswith("hw.") and key != "hw"):
                raise ValueError(f"{key}: scale: factors of a machine's own value, for a hw.<field> axis only")
        return self

    @model_validator(mode="after")
    def _mode(self) -> "SweepSpec":
        if self.mode == "random" and self.samples is None:
            raise ValueError("mode random needs `samples`")
        if self.mode != "random" and self.samples is not None:
            raise ValueError("`samples` is only for mode random")
        return self

    def scaled_axes(self) -> list[str]:
        """The axes whose values are factors of each machine's own (Scale)."""
        return [k for k, v in self.axes.items() if isinstance(v, Scale)]

    def plot_columns(self) -> list[str]:
        """Every column the plots name (their `where` expressions included); syntax checked."""

        cols: list[str] = []
        for i, p in enumerate(self.plots):
            cols += [c for c in (p.x, p.y, p.z, p.label, *p.line_columns) if c]
            if p.where:
                cols += compile_expr(p.where, f"{self.source}: plots.{i}.where").names
        return list(dict.fromkeys(cols))

    def recorded_columns(self) -> list[str]:
        """`columns` plus config fields the plots name that are not axes (e.g. hw.price_usd)."""
        extra = [c for c in self.plot_columns()
                 if c.partition(".")[0] in ("workload", "hw") and "." in c and c not in self.axes]
        return list(dict.fromkeys([*self.columns, *extra]))

    @property
    def base_dir(self) -> Path:
        return Path(self.source).parent if self.source else Path(".")

    def workload_path(self) -> Path:
        path = self.base_dir / self.workload
        if not path.is_file():   # named by the spec's key, not the bare path (a sweep trial)
            raise ConfigError(f"{self.source or self.name}: workload: {path}: "
                              f"{'a folder, not a workload file' if path.is_dir() else 'file not found'}")
        return path


def load_spec(path: str | Path) -> SweepSpec:
    path = Path(path)
    raw = read_yaml(path)
    return spec_from_dict(raw, str(path))


def spec_from_dict(raw: Any, source: str) -> SweepSpec:
    return validate_mapping(SweepSpec, raw, source, "a mapping (name, workload, hw, axes, ...)")

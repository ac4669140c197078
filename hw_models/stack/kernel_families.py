"""Quantized GEMM kernel families: how fast a given kind of kernel runs a GEMM whose
weights are stored narrow, as a function of M (the rows: tokens in the batch).

One cited file, hw_models/stack/kernel_families.yaml. Each family gives
* `rate_format`: the matrix rate its math runs at (bf16 for weight-only kernels
  that dequantize in registers, fp8_e4m3 for W8A8), and `rate_points`: achieved
  fraction of that peak at a few M, interpolated as a power law between points (linear
  in log M, log fraction) and held flat beyond the ends. Must not fall as M grows (more
  rows never lower a kernel's throughput) nor grow faster than M (more rows never take
  less time: a fraction linear in M between points keeps the compute time flat);
* `weight_stream_efficiency`: the narrow weights' streaming rate at small M, as a
  fraction of the unit's streaming efficiency (memory_max);
* `floor_s`: the kernel's device floor; `activation_quant`: whether a separate pass
  quantizes the activations first (W8A8: read 2 B, write 1 B per element, one kernel);
  `quant_floor_s` / `quant_stream_efficiency`: that kernel's own floor (default: the
  stack's floor) and streaming rate (fraction of memory_max), where measured; `quant_row_s`: where the
  activation scale is computed per call by a pass of one thread block per token (vLLM's dynamic
  per-tensor FP8), that pass's time per row: it costs max(reading the 16-bit activations once more,
  M x quant_row_s) on top (its launch is inside the fitted floor);
* `k_walk_s_per_k`: seconds per element of K of the kernel's serial main loop: each CTA walks
  K in order, and where few tiles run a latency-bound pipeline, not the DRAM, sets the pace (the
  memory term is at least K x this; fitted, 0 where no such walk shows in the measurements);
* `dequant_pass`: dequantize-then-GEMM: a separate kernel writes the weights out
  in 16 bits and a 16-bit GEMM reads them back;
* `min_s`: the least time a call takes when the host launches it eagerly, whatever its work (the
  Python dispatch and launches of the engine's Linear, which the kernel's work hides under: the call
  costs max(min_s, the rest); 0 where none is measured). A CUDA graph replays the kernels without the
  host, so a call inside one does not pay it (hw_models.stack.cost.eager_call): measured where a table
  timed its calls without a graph (aiconfigurator's vLLM block-FP8 rows);
* `graph_family`: the family whose device time a call replayed from a CUDA graph takes, where this
  family's own rows were timed eagerly and cannot show the kernels' time beneath `min_s` (vLLM's
  block-scaled FP8 Linear runs DeepGEMM, measured graph-timed in SGLang's tables);
* `size_exponent` / `size_ref`: the fraction scales as (N x K / size_ref) ** size_exponent, N x K the elements of the
  weights the call multiplies on its rank (a grouped MoE GEMM's: every expert it touches), where a kernel reaches
  less of the peak on smaller matrices (fewer tiles to amortise each expert's pipeline over); 0 (default): M alone.
  Below 1, so that more work never takes less time;
* `switch_m` / `switch_family`: the engine dispatches to another kernel from M = switch_m up
  (vLLM's block-scaled FP8: FlashInfer's swapAB kernel below M = 32, DeepGEMM from 32): such
  calls cost as `switch_family`;
* `l2_rate_points`: the fraction of the rate where the weights are read from the L2, not the DRAM (a single-layer
  replay whose weight copies fit the L2, hw_models.stack.cost.replay_weight_l2_s), as `rate_points` and never
  below them; default `rate_points`. The two populations of a replayed table reach different fractions at one M: a
  GEMM whose weights stream from DRAM issues its MMAs between DRAM loads (at M = 128 the RTX PRO 6000's DRAM rows
  reach 0.34 of the bf16 peak, its L2 rows 0.45), and one curve over both (the dense families before) fitted
  neither: on that GPU, whose 128 MB L2 holds half of aiconfigurator's replayed bf16 rows, it read M = 128 at 0.46.
  (Fitted freely, the L2 rows also fall below the DRAM ones at large M, 0.71 against 0.79 at M = 8192: the
  matrices that fit the L2 are the small ones, with fewer output tiles to fill the SMs. The L2 curve is held at
  or above the DRAM one, so that a replayed GEMM whose weights outgrow the L2 never gets faster per FLOP.) A model
  never replays one layer (every other layer evicts the L2), so it runs on `rate_points`, the DRAM rows' curve
  (scripts/fit_kernels.py fits the dense families so).
A family not measured on the machine at hand carries `assumed:` saying so.

Two files: kernel_families.yaml (written by hand, cited per family) and
kernel_families_fitted.yaml (written by scripts/fit_kernels.py from aiconfigurator's
in-sample GEMM and activation-quantization tables; a name may be in only one).
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import numpy as np
from pydantic import Field, field_validator, model_validator

from sim.core.errors import ConfigError
from sim.core.formats import get_format
from sim.core.schema import Quantity, Strict, read_yaml, validate_mapping

VECTOR = "vector"   # rate_format: the unit's vector (CUDA-core) rate
FAMILIES_FILE = Path(__file__).parent / "kernel_families.yaml"
FITTED_FILE = Path(__file__).parent / "kernel_families_fitted.yaml"


class Family(Strict):
    description: str = ""
    cite: str                               # where the figures come from
    assumed: str = ""                       # what is assumed where no measurement exists
    rate_format: str = "bf16"
    rate_points: list[tuple[int, float]] = Field(min_length=1)
    l2_rate_points: list[tuple[int, float]] | None = Field(default=None, min_length=1)
    weight_stream_efficiency: float = Field(default=1.0, gt=0, le=1.5)
    floor_s: Quantity = Field(default=0.0, ge=0)
    activation_quant: bool = False
    quant_floor_s: Quantity | None = Field(default=None, ge=0)
    quant_stream_efficiency: float = Field(default=1.0, gt=0, le=1.5)
    quant_row_s: float = Field(default=0.0, ge=0, lt=1e-6)
    k_walk_s_per_k: float = Field(default=0.0, ge=0, lt=1e-6)
    # The L2 read rate of the weights under a single-layer replay (hw_models.stack.cost.replay_weight_l2_s), fitted
    # on the per-op tables; replaces the unit's (cited or assumed) L2 rate there only. Serving never reads it.
    replay_l2_bytes_per_s: Quantity | None = Field(default=None, gt=0)
    dequant_pass: bool = False
    min_s: Quantity = Field(default=0.0, ge=0)
    switch_m: int | None = Field(default=None, gt=1)
    switch_family: str | None = None
    graph_family: str | None = None
    size_exponent: float = Field(default=0.0, ge=0, lt=1)
    size_ref: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _switch(self) -> Family:
        if (self.switch_m is None) != (self.switch_family is None):
            raise ValueError("switch_m and switch_family go together (the M from which the engine runs that family)")
        if self.size_exponent and self.size_ref is None:
            raise ValueError("size_exponent needs size_ref (the N x K at which rate_points hold)")
        return self

    def at(self, m: int) -> str | None:
        """The family the engine switches to at `m` rows, else None (this one runs)."""
        return self.switch_family if self.switch_m is not None and m >= self.switch_m else None

    @field_validator("rate_points", "l2_rate_points")
    @classmethod
    def _monotone(cls, v: list[tuple[int, float]] | None) -> list[tuple[int, float]] | None:
        if v is None:
            return v
        for m, f in v:
            if m <= 0 or not 0 < f <= 1:
                raise ValueError(f"({m}, {f}): M must be > 0 and the fraction in (0, 1]")
        for (m0, f0), (m1, f1) in zip(v, v[1:]):
            if m1 <= m0:
                raise ValueError(f"M must increase: {m0} then {m1}")
            if f1 < f0:
                raise ValueError(f"not monotone: fraction falls from {f0} at M={m0} to {f1} at M={m1}")
            if f1 / f0 > (m1 / m0) * (1 + 1e-9):
                raise ValueError(f"fraction grows faster than M from M={m0} ({f0}) to M={m1} ({f1}): "
                                 "more rows would take less time")
        return v

    @field_validator("rate_format")
    @classmethod
    def _fmt(cls, v: str) -> str:
        if v == VECTOR:
            return v
        try:
            return get_format(v).name
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    def rate_fraction(self, m: int, l2: bool = False, size: float | None = None) -> float:
        """The achieved fraction of the rate at `m` rows; `l2`: with the weights read from the L2; `size`: the N x K
        of the call's weights on its rank (size_exponent), never above the whole rate."""
        points = self.l2_rate_points if l2 and self.l2_rate_points else self.rate_points
        ms = [math.log(p[0]) for p in points]
        fs = [math.log(p[1]) for p in points]
        f = math.exp(float(np.interp(math.log(max(m, 1)), ms, fs)))
        if self.size_exponent and size and self.size_ref:
            f = min(1.0, f * (size / self.size_ref) ** self.size_exponent)
        return f


class Families(Strict):
    families: dict[str, Family]
    source: str = Field(default="", exclude=True)


def read_families(schema: type[Strict], path: Path) -> dict:
    """The `families:` of a kernel-family file, checked by `schema` (a Strict model with a `families`
    mapping), read once per content: the cache is keyed by the file's modification time. The quantized
    GEMM families and the attention families (hw_models.stack.attention_kernels) both load this way."""
    return _load(schema, path, path.stat().st_mtime_ns)


@cache
def _load(schema: type[Strict], path: Path, mtime_ns: int) -> dict:
    return validate_mapping(schema, read_yaml(path), str(path), "a mapping with `families:`").families


def read_family_files(schema: type[Strict], path: Path, more: Path | None) -> dict:
    """The families of `path` (if it exists) and of `more` (if given and it exists); a name lives in one file."""
    out = dict(read_families(schema, path)) if path.is_file() else {}
    if more is not None and more.is_file():
        extra = read_families(schema, more)
        both = sorted(set(out) & set(extra))
        if both:
            raise ConfigError(f"{more}: {', '.join(both)} also in {path} (a family lives in one file)")
        out.update(extra)
    return out


def families(path: Path = FAMILIES_FILE, fitted: Path | None = FITTED_FILE) -> dict[str, Family]:
    """The families of both files, checked once per content (every quantized GEMM's cost reads them: the hand-off
    checks had tripled a call's time, 18 -> 43 us); a copy, so a caller's change stays its own."""
    return dict(_checked(path, fitted, _mtime_ns(path), _mtime_ns(fitted)))


def _mtime_ns(path: Path | None) -> int | None:
    return path.stat().st_mtime_ns if path is not None and path.is_file() else None


@cache
def _checked(path: Path, fitted: Path | None, *_mtimes: int | None) -> dict[str, Family]:
    """families() of these files as they are now (the modification times key the cache, as read_families' do)."""
    out = read_family_files(Families, path, fitted)
    for key in ("switch_family", "graph_family"):
        unknown = sorted(f"{n} -> {getattr(f, key)}" for n, f in out.items() if getattr(f, key) and getattr(f, key) not in out)
        if unknown:
            raise ConfigError(f"{key} names no kernel family: {', '.join(unknown)}")
    _check_hand_offs(out)
    return out


def _check_hand_offs(fams: dict[str, Family]) -> None:
    """A family hands a call on (switch_family, graph_family) to one of the same math (rate_format), and no chain of
    hand-offs comes back to where it began (a loop had recursed until Python's limit)."""
    def next_of(f: Family) -> list[str]:
        return [n for n in (f.switch_family, f.graph_family) if n]
    for name, f in fams.items():
        for other in next_of(f):
            if fams[other].rate_format != f.rate_format:
                raise ConfigError(f"{name}: hands calls to {other}, which runs {fams[other].rate_format}, not "
                                  f"{f.rate_format}")
        seen, todo = {name}, next_of(f)
        while todo:   # the families reachable from `name` (the hand-offs of a shipped file are a few steps long)
            n = todo.pop()
            if n == name:
                raise ConfigError(f"{name}: its switch_family / graph_family hand-offs come back to it")
            if n not in seen:
                seen.add(n)
                todo += next_of(fams[n])


class _Names:
    """The family names, read on first use (a stack file's check needs them)."""

    def __contains__(self, name: str) -> bool:
        return name in families()

    def __iter__(self):
        return iter(families())


FAMILIES = _Names()

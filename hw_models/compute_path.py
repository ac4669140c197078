"""Which number format an op computes in on a given unit, and what it costs to
get there.

Real kernels do one of two things with a narrow format:
  * native: the unit has a matrix rate for the format (FP8 on Hopper, FP4 on
    Blackwell, INT8/INT4 tensor cores), and both operands are in it;
  * weight-only: the weights stream in the narrow format and are dequantized
    in registers into a format the unit has (Marlin/AWQ/GPTQ kernels), so the
    memory traffic shrinks but the math runs at the wider rate, plus the
    dequantization work on the vector units.
"""

from __future__ import annotations

from dataclasses import dataclass

from hw_models.machine import Unit
from sim.errors import ConfigError

# Wider formats to fall back to, best first.
_FALLBACK = ("bf16", "fp16", "fp32")
# Vector FLOPs to dequantize one element: scale multiply + convert (+ zero point for ints).
DEQUANT_FLOPS_PER_ELEMENT = 2.0


@dataclass(frozen=True)
class ComputePath:
    fmt: str                 # format the arithmetic runs in
    rate_flops_per_s: float  # peak matrix rate in that format
    dequant: bool            # whether weights are dequantized first
    label: str


def _native_fallback(unit: Unit, want: str) -> str | None:
    if want in unit.peak_flops_per_s:
        return want
    return next((f for f in _FALLBACK if f in unit.peak_flops_per_s), None)


def choose(unit: Unit, unit_name: str, weight_fmt: str | None, act_fmt: str, mode: str = "auto") -> ComputePath:
    """The compute path of a matrix op with weights in `weight_fmt` (None for
    activation-activation products such as attention) and activations in `act_fmt`."""
    peak = unit.peak_flops_per_s
    operand = weight_fmt or act_fmt
    if mode == "native":
        for f in {operand, act_fmt}:
            if f not in peak:
                raise ConfigError(f"{unit_name} has no native {f} compute (it has {', '.join(peak)}); "
                                  "set compute: auto for weight-only quantization")
    if operand == act_fmt and operand in peak:
        return ComputePath(act_fmt, peak[act_fmt], False, f"{act_fmt} native")
    if weight_fmt and weight_fmt in peak and act_fmt in peak and mode == "native":
        return ComputePath(weight_fmt, peak[weight_fmt], False, f"{weight_fmt} native")
    target = _native_fallback(unit, act_fmt)
    if target is None:
        raise ConfigError(f"{unit_name} cannot compute in {act_fmt} and has no bf16/fp16/fp32 rate to fall back on")
    if weight_fmt and weight_fmt != target:
        return ComputePath(target, peak[target], True, f"{weight_fmt} weights -> {target} (dequant)")
    return ComputePath(target, peak[target], False, f"{act_fmt} -> {target}" if act_fmt != target else f"{target} native")

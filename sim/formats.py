"""Number formats: exact storage bytes, scales included.

A tensor's blocks run along its last axis (for a weight stored as
[out_features, in_features] that is the reduction axis, as in GPTQ/AWQ groups
and the OCP MX spec). Storage bytes = element bytes + scale bytes, each rounded
up to whole bytes per tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.errors import ConfigError


@dataclass(frozen=True)
class NumberFormat:
    name: str
    bits: int                       # bits per element, scale excluded
    kind: str = "float"             # "float" or "int"
    block_size: int | None = None   # elements sharing one scale along the last axis; None: no block scale
    scale_bits: int = 0             # bits of each block scale
    tensor_scale_bits: int = 0      # bits of one per-tensor scale

    def scale_count(self, shape: tuple[int, ...]) -> int:
        if self.block_size is None or not shape:
            return 0
        rows = math.prod(shape[:-1])
        block = shape[-1] if self.block_size == 0 else self.block_size  # 0 = one scale per row (per channel)
        return rows * math.ceil(shape[-1] / block)

    def storage_bytes(self, shape: tuple[int, ...]) -> int:
        elements = math.prod(shape)
        element_bytes = math.ceil(elements * self.bits / 8)
        scale_bytes = math.ceil(self.scale_count(shape) * self.scale_bits / 8)
        return element_bytes + scale_bytes + math.ceil(self.tensor_scale_bits / 8)

    def bits_per_element(self, shape: tuple[int, ...]) -> float:
        return 8 * self.storage_bytes(shape) / max(1, math.prod(shape))


_FORMATS: dict[str, NumberFormat] = {
    f.name: f
    for f in (
        NumberFormat("fp32", 32),
        NumberFormat("fp16", 16),
        NumberFormat("bf16", 16),
        # int8 per output channel with an fp16 scale (LLM.int8/SmoothQuant style).
        NumberFormat("int8", 8, kind="int", block_size=0, scale_bits=16),
        # int4 in groups of 128 with an fp16 scale, as GPTQ/AWQ deploy it.
        NumberFormat("int4", 4, kind="int", block_size=128, scale_bits=16),
    )
}


def register(fmt: NumberFormat) -> None:
    _FORMATS[fmt.name] = fmt


def known_formats() -> list[str]:
    return sorted(_FORMATS)


def get_format(name: str) -> NumberFormat:
    """Look up a format by name; 'int4_g64' style names set the group size."""
    key = str(name).lower()
    if key in _FORMATS:
        return _FORMATS[key]
    base, _, group = key.partition("_g")
    if group.isdigit() and base in _FORMATS and _FORMATS[base].kind == "int":
        return NumberFormat(key, _FORMATS[base].bits, "int", int(group), _FORMATS[base].scale_bits)
    raise ConfigError(f"unknown number format {name!r}; known: {', '.join(known_formats())}")

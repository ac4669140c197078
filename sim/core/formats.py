"""Number formats: exact storage bytes, scales included.

A tensor's blocks run along its last axis (for a weight stored as
[out_features, in_features] that is the reduction axis, as in GPTQ/AWQ groups
and the OCP MX spec). Storage bytes = element bytes + scale bytes (+ zero-point
bytes) + per-tensor scale bytes, each rounded up to whole bytes per tensor.
Elements are counted densely packed (two fp4 per byte, four fp6 per three
bytes); a ragged last block still carries a whole scale.

Families (`NumberFormat.family`):

* ``plain``  - bare elements, no scale: fp32, fp16, bf16, fp8_e4m3, fp8_e5m2,
  fp6_e3m2, fp6_e2m3, fp4_e2m1.
* ``mx``     - OCP Microscaling v1.0: 32 elements share one E8M0 (8-bit,
  power-of-two) scale: mxfp8_e4m3, mxfp8_e5m2, mxfp6_e3m2, mxfp6_e2m3, mxfp4,
  mxint8.
* ``nvfp4``  - NVIDIA NVFP4: fp4 E2M1 elements, 16 per block with an E4M3
  8-bit block scale, plus one fp32 per-tensor scale.
* ``block``  - 2-D block-scaled FP8 (DeepSeek-V3): fp8 e4m3 elements, one fp32
  scale per 128 x 128 tile of the weight (``fp8_block128``; ``block_rows`` is
  the tile's height). At run time the engines scale activations per 1 x 128
  group of a token; the weight tile is what is stored.
* ``int``    - symmetric absmax integers with fp16 scales, per channel (one
  scale per row, block_size 0), per group (``int4_g128``) or per tensor
  (``int8_pt``, one fp32 scale). ``int8`` = per channel, ``int4`` = group 128.
  An ``_asym`` suffix adds an integer zero-point per group (AWQ/GPTQ style
  min-max quantisation), e.g. ``int4_g128_asym``.

Names are case-insensitive and ``-`` is read as ``_``. Aliases (see `ALIASES`):
``fp8`` -> fp8_e4m3, ``mxfp8`` -> mxfp8_e4m3, ``fp6`` -> fp6_e3m2 (unscaled fp6
needs the range, as in FP6-LLM), ``mxfp6`` -> mxfp6_e2m3 (the block scale
supplies the range, so the extra mantissa bit wins: lower error on Gaussian
weights, see docs/formats.md), ``fp4`` -> fp4_e2m1, ``mxfp4_e2m1`` -> mxfp4.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from sim.core.errors import ConfigError


@dataclass(frozen=True)
class NumberFormat:
    name: str
    bits: int                       # bits per element, scale excluded
    kind: str = "float"             # "float" or "int"
    block_size: int | None = None   # elements sharing one scale along the last axis; None: no block scale
    scale_bits: int = 0             # bits of each block scale
    tensor_scale_bits: int = 0      # bits of one per-tensor scale
    # --- descriptive / emulation fields (added; all defaulted) ---
    family: str = "plain"           # "plain", "mx", "nvfp4" or "int" (selects the emulation in sim.core.quantize)
    element_dtype: str = ""         # numpy / ml_dtypes dtype name used for emulation
    max_normal: float = 0.0         # largest finite element magnitude (int: largest code; mxint8: 127/64)
    emax: int | None = None         # exponent of max normal of the element (MX shared-exponent offset)
    scale_format: str | None = None         # format of the block scales: "e8m0", "e4m3", "fp16", "fp32"
    tensor_scale_format: str | None = None  # format of the per-tensor scale: "fp32"
    zero_bits: int = 0              # bits of each block zero-point (asymmetric int only)
    block_rows: int = 1             # rows sharing each block scale too (2-D tiles: fp8_block128's 128 x 128)
    saturate: bool = True           # finite values beyond max_normal clamp (False: IEEE overflow to Inf)
    description: str = ""

    # ----------------------------------------------------------------- sizes
    def scale_count(self, shape: tuple[int, ...]) -> int:
        """Number of block scales (one per block along the last axis, per row)."""
        if self.block_size is None or not shape:
            return 0
        rows = math.prod(shape[:-1])
        if self.block_rows > 1 and len(shape) >= 2:   # 2-D tiles: a partial tile of rows still takes a scale
            rows = math.prod(shape[:-2]) * math.ceil(shape[-2] / self.block_rows)
        block = shape[-1] if self.block_size == 0 else self.block_size  # 0 = one scale per row (per channel)
        if block == 0:
            return 0
        return rows * math.ceil(shape[-1] / block)

    def element_bytes(self, shape: tuple[int, ...]) -> int:
        return math.ceil(math.prod(shape) * self.bits / 8)

    def scale_bytes(self, shape: tuple[int, ...]) -> int:
        """Bytes of block scales, zero-points and the per-tensor scale."""
        count = self.scale_count(shape)
        return (math.ceil(count * self.scale_bits / 8) + math.ceil(count * self.zero_bits / 8)
                + math.ceil(self.tensor_scale_bits / 8))

    def storage_bytes(self, shape: tuple[int, ...]) -> int:
        return self.element_bytes(shape) + self.scale_bytes(shape)

    def bits_per_element(self, shape: tuple[int, ...]) -> float:
        return 8 * self.storage_bytes(shape) / max(1, math.prod(shape))

    @property
    def nominal_bits_per_element(self) -> float:
        """Bits per element incl. block scales for a long last axis (no tensor scale):
        bits + (scale_bits + zero_bits) / block_size; per-channel counts as bits."""
        if not self.block_size:
            return float(self.bits)
        return self.bits + (self.scale_bits + self.zero_bits) / (self.block_size * self.block_rows)


def _plain(name: str, bits: int, dtype: str, max_normal: float, emax: int, saturate: bool, desc: str) -> NumberFormat:
    return NumberFormat(name, bits, "float", None, 0, 0, family="plain", element_dtype=dtype,
                        max_normal=max_normal, emax=emax, saturate=saturate, description=desc)


# Element types: (bits, ml_dtypes name, max normal, emax) - hardware.md 5.1.
_ELEMENTS = {
    "fp8_e4m3": (8, "float8_e4m3fn", 448.0, 8),
    "fp8_e5m2": (8, "float8_e5m2", 57344.0, 15),
    "fp6_e3m2": (6, "float6_e3m2fn", 28.0, 4),
    "fp6_e2m3": (6, "float6_e2m3fn", 7.5, 2),
    "fp4_e2m1": (4, "float4_e2m1fn", 6.0, 2),
}


def _mx(name: str, element: str) -> NumberFormat:
    if element == "int8":  # MXINT8: two's complement with implicit scale 2^-6, grid k/64, |k| <= 127
        bits, dtype, max_normal, emax, kind = 8, "int8", 127 / 64, 0, "int"
    else:
        (bits, dtype, max_normal, emax), kind = _ELEMENTS[element], "float"
    return NumberFormat(name, bits, kind, 32, 8, 0, family="mx", element_dtype=dtype,
                        max_normal=max_normal, emax=emax, scale_format="e8m0",
                        description=f"OCP MX v1.0, {element} elements, 32 per E8M0 scale")


_FP16_SCALE = 16


def _int(bits: int, granularity: str, asym: bool = False) -> NumberFormat:
    """granularity: "pc" (per channel = per row), "pt" (per tensor) or "g<N>"."""
    name = f"int{bits}_{granularity}" + ("_asym" if asym else "")
    common = dict(family="int", element_dtype=f"int{bits}", max_normal=float(2 ** (bits - 1) - 1),
                  zero_bits=bits if asym else 0)
    sym = "asymmetric min-max with int zero-point" if asym else "symmetric absmax"
    if granularity == "pt":
        return NumberFormat(name, bits, "int", None, 0, 32, tensor_scale_format="fp32",
                            description=f"int{bits} per tensor, fp32 scale, {sym}",
                            **{**common, "zero_bits": 0})
    if granularity == "pc":
        block = 0
        desc = f"int{bits} per channel (row), fp16 scale, {sym}"
    else:
        block = int(granularity[1:])
        desc = f"int{bits} groups of {block}, fp16 scale, {sym}"
    return NumberFormat(name, bits, "int", block, _FP16_SCALE, 0, scale_format="fp16", description=desc, **common)


def _renamed(fmt: NumberFormat, name: str, description: str | None = None) -> NumberFormat:
    return replace(fmt, name=name, description=description or fmt.description)


_BUILTIN: list[NumberFormat] = [
    _plain("fp32", 32, "float32", 3.4028234663852886e38, 127, False, "IEEE binary32"),
    _plain("fp16", 16, "float16", 65504.0, 15, False, "IEEE binary16"),
    _plain("bf16", 16, "bfloat16", 3.3895313892515355e38, 127, False, "bfloat16"),
    *(_plain(n, b, d, m, e, True, f"OCP {n.split('_')[1].upper()} element, no scale, saturating")
      for n, (b, d, m, e) in _ELEMENTS.items()),
    _mx("mxfp8_e4m3", "fp8_e4m3"),
    _mx("mxfp8_e5m2", "fp8_e5m2"),
    _mx("mxfp6_e3m2", "fp6_e3m2"),
    _mx("mxfp6_e2m3", "fp6_e2m3"),
    _mx("mxfp4", "fp4_e2m1"),
    _mx("mxint8", "int8"),
    NumberFormat("nvfp4", 4, "float", 16, 8, 32, family="nvfp4", element_dtype="float4_e2m1fn",
                 max_normal=6.0, emax=2, scale_format="e4m3", tensor_scale_format="fp32",
                 description="NVIDIA NVFP4: fp4 E2M1, 16 per E4M3 scale, plus an fp32 tensor scale"),
    # DeepSeek-V3 block-scaled FP8 (its paper §3.3.2; DeepGEMM, vLLM's and TensorRT-LLM's fp8 block GEMMs).
    NumberFormat("fp8_block128", 8, "float", 128, 32, 0, family="block", element_dtype="float8_e4m3fn",
                 max_normal=448.0, emax=8, scale_format="fp32", block_rows=128,
                 description="block-scaled FP8: e4m3 elements, one fp32 scale per 128 x 128 tile (DeepSeek-V3)"),
    # int8 per output channel with an fp16 scale (LLM.int8/SmoothQuant style).
    _renamed(_int(8, "pc"), "int8"),
    # int4 in groups of 128 with an fp16 scale, as GPTQ/AWQ deploy it.
    _renamed(_int(4, "g128"), "int4"),
]

_FORMATS: dict[str, NumberFormat] = {f.name: f for f in _BUILTIN}

# alias -> canonical name
ALIASES: dict[str, str] = {
    "float32": "fp32", "f32": "fp32",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "bfloat16": "bf16",
    "fp8": "fp8_e4m3", "e4m3": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3",
    "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
    "fp6": "fp6_e3m2", "e3m2": "fp6_e3m2", "float6_e3m2fn": "fp6_e3m2",
    "e2m3": "fp6_e2m3", "float6_e2m3fn": "fp6_e2m3",
    "fp4": "fp4_e2m1", "e2m1": "fp4_e2m1", "fp4_e2m1fn": "fp4_e2m1", "float4_e2m1fn": "fp4_e2m1",
    "mxfp8": "mxfp8_e4m3",
    "mxfp6": "mxfp6_e2m3",
    "mxfp4_e2m1": "mxfp4",
    "fp8_block": "fp8_block128",
}

_INT_RE = re.compile(r"^int(4|8)(?:_(pc|pt|g([0-9]+)))?(_asym|_sym)?$")
INT_PATTERNS = "int4|int8 + _pc | _pt | _g<N>, optional _asym (e.g. int4_g64, int8_pc, int4_g128_asym)"


def register(fmt: NumberFormat) -> None:
    """Add `fmt` to the registry (the Python API's custom formats). Refused with a ValueError: a name already taken
    (a built-in, an alias or an int pattern; a format of one's own may be registered again, changed), a name get_format
    could not find again (it looks names up lower-cased, '-' as '_'), and a block size the emulation cannot scale
    by (a formats trial: block_size 0 had raised ZeroDivisionError in quantize, -4 an indexing error)."""
    if not fmt.name or _normalize(fmt.name) != fmt.name:
        raise ValueError(f"register: format name {fmt.name!r} must be lower-case, '_' for '-' and non-empty "
                         f"(get_format looks up {_normalize(fmt.name)!r})")
    if fmt.bits < 1:
        raise ValueError(f"register: {fmt.name}: bits must be >= 1, got {fmt.bits}")
    taken = ("an alias of " + ALIASES[fmt.name] if fmt.name in ALIASES else "a built-in format"
             if any(f.name == fmt.name for f in _BUILTIN) else "an int pattern" if _INT_RE.match(fmt.name) else "")
    if taken:   # a built-in replaced: the registry said 4 bits while runs costed 8 (an API trial)
        raise ValueError(f"register: {fmt.name!r} is {taken}: the presets' rates and the stacks' kernels are keyed by "
                         "the built-in names; give yours a name of its own")
    scaled_blocks = fmt.family in ("mx", "nvfp4")   # one scale per block of elements: 0 (per row) has no block
    if fmt.block_size is not None and (fmt.block_size < (1 if scaled_blocks else 0)):
        raise ValueError(f"register: {fmt.name}: block_size must be {'>= 1' if scaled_blocks else '>= 0 (0: per row)'}"
                         f" or None, got {fmt.block_size}")
    _FORMATS[fmt.name] = fmt


def known_formats() -> list[str]:
    """Canonical registered names (aliases and int_g<N> patterns not listed)."""
    return sorted(_FORMATS)


def _normalize(name: str) -> str:
    return str(name).strip().lower().replace("-", "_")


def get_format(name: str | NumberFormat) -> NumberFormat:
    """Look up a format by name or alias; 'int4_g64' style names set the group size."""
    if isinstance(name, NumberFormat):
        return name
    key = _normalize(name)
    key = ALIASES.get(key, key)
    if key in _FORMATS:
        return _FORMATS[key]
    m = _INT_RE.match(key)
    if m:
        bits, gran, group, suffix = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        if group is not None and int(group) <= 0:
            raise ConfigError(f"number format {name!r}: group size must be a positive integer")
        if gran is None:  # plain "int4_asym" / "int8_sym": default granularity
            gran = "pc" if bits == 8 else "g128"
        if gran == "pt" and suffix == "_asym":
            raise ConfigError(f"number format {name!r}: per-tensor asymmetric int is not modelled")
        fmt = _int(bits, gran, asym=(suffix == "_asym"))
        # the defaults spelled out are the registry's own int8 / int4 (docs/formats.md: int8 = int8_pc, int4 =
        # int4_g128): one format, one name, one rate (spelled out, they had missed the preset's int rates)
        default = {(8, "pc"): "int8", (4, "g128"): "int4"}.get((bits, gran)) if suffix != "_asym" else None
        return _FORMATS[default] if default else fmt
    raise ConfigError(
        f"unknown number format {name!r}; known: {', '.join(known_formats())}; "
        f"aliases: {', '.join(sorted(ALIASES))}; int patterns: {INT_PATTERNS}")


def rate_unit(fmt: str) -> str:
    """TOP/s for an integer format's peak (operations, as datasheets give int8/int4), TFLOP/s for a float's (a trial
    read "1248 TFLOP/s int4"); TFLOP/s for a name that is no format ("vector")."""
    try:
        return "TOP/s" if get_format(fmt).kind == "int" else "TFLOP/s"
    except ConfigError:
        return "TFLOP/s"

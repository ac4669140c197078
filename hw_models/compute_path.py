"""Which number format a matrix op computes in on a given unit, and what it
costs to get there.

Rate keys. `units.<u>.peak_flops_per_s` is keyed by number-format names from
the registry (sim.core.formats); aliases are read as their canonical name (`fp8` ->
fp8_e4m3, `fp4` -> fp4_e2m1). A block-scaled format computes natively only
where the preset lists it by its own name (`mxfp8_e4m3`, `mxfp4`, `nvfp4`, ...):
the matrix unit must apply the block scales inside the MMA (Blackwell's
`tcgen05.mma ... block_scale`, hardware.md §1.2). Hopper's FP8 rate therefore
does not make mxfp8 native there, and Ampere's `int4` rate (INT4 tensor cores)
makes the registry's `int4` (int4_g128) native only against int4 activations.
Integer operands scaled per tensor or per row (`int8_pt`, `int4_pc`; symmetric) take their width's integer MMA
(`int8`, `int4`): their scales multiply the int32 accumulator in the epilogue, outside the dot product.
The exception is the `block` family (`fp8_block128`, DeepSeek-V3's 128 x 128 weight tiles and 1 x 128
activation groups): its scales are applied outside the MMA, on the CUDA cores, each time the FP8 tensor
cores' partial sums over 128 K-elements are promoted to FP32 (DeepSeek-V3 technical report §3.3.2,
"Increasing Accumulation Precision"; DeepGEMM), so it computes at its element format's rate (fp8_e4m3) wherever
the unit has that, against block-scaled or plain e4m3 activations alike.

What real kernels do with a (stored operand S, activation A) pair, S being the
weight matrix of a GEMM or the KV cache read by attention (hw_models.cost passes
both; other mappers may pass None, i.e. activation x activation):

1. native pair: S == A (or no S) and the unit has A's rate -> that rate. Two
   different narrow float formats (<= 8 bits) of the same family that the unit
   both has also pair natively, at the slower rate: Hopper mixes E4M3 and E5M2,
   Blackwell's mxf8f6f4 kind mixes MX fp8/fp6/fp4 at the FP8 rate.
2. otherwise (compute: auto) the kernel converts operands into one format C the
   unit has and that loses nothing: first A itself (weight-only quantization:
   int4/mxfp4/nvfp4 weights dequantized in registers into fp16, as Marlin/AWQ/
   GPTQ kernels do; QServe-style int4 -> int8), then S (activations widened
   into the weight's format, e.g. an lm_head kept in bf16 under fp8
   activations), then bf16/fp16/fp32. "Loses nothing" is judged by element
   bits (C strictly wider, and no float into int: nvfp4 -> mxfp4 would be a
   requantization); 16-bit floats count as interchangeable (an fp16 <-> bf16
   cast), as frameworks treat them. Memory traffic keeps the narrow bytes;
   the math runs at C's rate plus the dequantization work on the vector units.
3. compute: native allows only 1, or 2 with C == S where A is native too
   (nothing but the activations converted into the stored operand's native
   format, e.g. fp16 activations into a bf16 lm_head); anything that would
   dequantize the stored operand, or an activation format the unit cannot
   compute, is a ConfigError.

Dequantization cost: DEQUANT_FLOPS_PER_ELEMENT vector FLOPs per converted
weight (or KV) element, at the vector rate times the unit's compute_max (no
small-op ramp: the work is spread over all SMs with the operand's stream), charged once per element per op (a fused kernel dequantizes
each weight tile once per output tile row-block; for decode's skinny GEMMs
that is once). Why 2: a fused dequantization is one FMA per element,
w = q * s + (-z * s), i.e. 2 FLOPs; the bit unpacking and int->float
conversion (Marlin's LOP3/PRMT "magic number" trick) run on the integer pipe,
which issues alongside the FP32 pipe on Ampere and Hopper, so they add no
FLOPs. Plain fp8 -> fp16 is one convert instruction, so 2 is an upper bound
there. The cost is added to the op's compute time, which overlaps with its
memory time (roofline max), so it only shows when an op is compute bound.
"""

from __future__ import annotations

from functools import lru_cache

from hw_models.machine import Unit
from sim.core.errors import ConfigError
from sim.core.formats import NumberFormat, get_format
from sim.core.frozen import frozen

# Wider formats to fall back to, best first.
_FALLBACK = ("bf16", "fp16", "fp32")
# Vector FLOPs to dequantize one element: one fused multiply-add (see module doc).
DEQUANT_FLOPS_PER_ELEMENT = 2.0


@frozen
class ComputePath:
    fmt: str                 # format the arithmetic runs in
    rate_flops_per_s: float  # peak matrix rate in that format
    dequant: bool            # whether the stored operand (weights, or KV cache) is dequantized first
    label: str               # shown in the report's top-ops table and --json ops
    convert_activations: bool = False  # activations converted into `fmt` (cost not charged: widening casts are cheap)


@lru_cache(maxsize=256)
def _rates(items: tuple[tuple[str, float], ...], unit_name: str) -> dict[str, float]:
    """Preset rate keys -> canonical format names (the faster one where two keys alias)."""
    out: dict[str, float] = {}
    for key, rate in items:
        try:
            name = get_format(key).name
        except ConfigError as exc:
            raise ConfigError(f"units.{unit_name}.peak_flops_per_s.{key}: {exc}") from None
        out[name] = max(rate, out.get(name, 0.0))
    return out


def native_rates(unit: Unit, unit_name: str = "unit") -> dict[str, float]:
    """The unit's matrix rates keyed by canonical format name."""
    return _rates(tuple(unit.peak_flops_per_s.items()), unit_name)


def _widens(src: NumberFormat, dst: NumberFormat) -> bool:
    """Whether converting src into dst keeps every value (a dequantization, not a quantization)."""
    if src.name == dst.name:
        return True
    if src.bits == dst.bits == 16 and src.kind == dst.kind == "float":
        return True  # fp16 <-> bf16: a cast frameworks make freely
    return dst.bits > src.bits and (dst.kind == "float" or src.kind == "int")


# K elements between two promotions of an 8-bit MMA's partial sums, where a block's scale can be applied outside the
# MMA: DeepSeek-V3 §3.3.2 promotes every 128 (its fp8_block128 tiles; an int4 group of 128's fp16 scale the same way).
PROMOTION_K = 128


def _scale_rides(fmt: NumberFormat, dst: NumberFormat) -> bool:
    """Whether `fmt`'s block scales can ride into an MMA in `dst`: always into 16 bits or more (folded into each
    element); into an 8-bit float only a power-of-two scale (MX's E8M0 shifts the exponent: the element stays exact)
    or a group of at least PROMOTION_K elements (its scale applied at promotion). NVFP4's E4M3 scale per 16 is
    neither: a formats trial found 23-93% of its values no E4M3 values, and nvfp4 weights had run H100's FP8 rate."""
    if dst.kind != "float" or dst.bits >= 16 or fmt.block_size in (None, 0) or fmt.scale_format in (None, "e8m0"):
        return True
    return fmt.block_size >= PROMOTION_K


def _native_pair(s: NumberFormat, a: NumberFormat, rates: dict[str, float]) -> float | None:
    """Rate of S x A on the unit without converting either operand, or None."""
    if s.name == a.name:
        return rates.get(a.name)
    if (s.name in rates and a.name in rates and s.kind == a.kind == "float"
            and s.bits <= 8 and a.bits <= 8 and s.family == a.family):
        return min(rates[s.name], rates[a.name])
    return None


def native_pair_rate(unit: Unit, unit_name: str, stored_fmt: str, act_fmt: str) -> float | None:
    """The unit's rate for stored x activation operands as `choose` runs them natively (each on its element format:
    fp8_block128 on the fp8_e4m3 MMA), None where it has none."""
    return _native_pair(_on_elements(get_format(stored_fmt)), _on_elements(get_format(act_fmt)),
                        native_rates(unit, unit_name))


def _on_elements(fmt: NumberFormat) -> NumberFormat:
    """The format an operand's MMA runs in: a block-family operand's element format (module doc); a symmetric
    integer operand scaled per tensor or per row, the integer MMA of its width (`int8`, `int4`: the scales multiply
    the int32 accumulator in the epilogue, as SmoothQuant's W8A8 kernels apply them); others are themselves."""
    if fmt.family == "block" and fmt.element_dtype:
        return get_format(fmt.element_dtype)
    if fmt.kind == "int" and not fmt.zero_bits and fmt.block_size in (None, 0):
        return get_format(f"int{fmt.bits}")
    return fmt


def choose(unit: Unit, unit_name: str, weight_fmt: str | None, act_fmt: str, mode: str = "auto",
           stored_role: str = "weight") -> ComputePath:
    """The compute path of a matrix op whose stored operand (`stored_role`: the
    weights of a GEMM, or the KV cache of attention) is in `weight_fmt` (None:
    activations only) and whose activations are in `act_fmt`."""
    rates = native_rates(unit, unit_name)
    a0 = get_format(act_fmt)
    s0 = get_format(weight_fmt) if weight_fmt else a0
    a, s = _on_elements(a0), _on_elements(s0)
    rate = _native_pair(s, a, rates)
    if rate is not None:
        pair = a0.name if s0.name == a0.name else f"{s0.name} x {a0.name}"
        if s.name == a.name:
            return ComputePath(a.name, rate, False, f"{pair} native" + (f" ({a.name} MMA)" if a0 is not a else ""))
        slower = s.name if rates[s.name] <= rates[a.name] else a.name
        return ComputePath(slower, rate, False, f"{pair} native")

    # Candidates for the common format C, best first (see the module doc). Native
    # compute needs the activation format native too, and may only convert the
    # activations into the stored operand's own native format.
    if mode == "native":
        candidates = [s.name] if a.name in rates else []
    elif s.bits == a.bits == 16 and s.kind == a.kind == "float":
        # bf16 weights under fp16 activations: the activations are cast, the weights not dequantized (a formats
        # trial: a bf16 override under fp16 read "bf16 -> fp16 dequant" and paid 2 FLOPs a weight)
        candidates = [s.name, a.name, *_FALLBACK]
    else:
        candidates = [a.name, s.name, *_FALLBACK]
    target = next((c for c in candidates if c in rates and _widens(s, get_format(c)) and _widens(a, get_format(c))
                   and _scale_rides(s0, get_format(c)) and _scale_rides(a0, get_format(c))), None)
    if mode == "native" and target is None:
        what = f"{s.name} {stored_role} x {a.name} activation" if weight_fmt and s.name != a.name else a.name
        raise ConfigError(
            f"compute: native: units.{unit_name} has no native {what} matrix rate "
            f"(peak_flops_per_s: {', '.join(rates)}); set compute: auto to dequantize into a native format")
    if target is None:
        raise ConfigError(f"units.{unit_name} cannot compute {s.name} x {a.name}: no native rate for them "
                          f"or for bf16/fp16/fp32 (peak_flops_per_s: {', '.join(rates)})")
    dequant = weight_fmt is not None and s.name != target
    convert = a.name != target
    # Short labels for the report's path column: "mxfp4 -> fp16 dequant",
    # "kv fp8_e4m3 -> fp16 dequant", "act fp8_e4m3 -> bf16", "fp8_e4m3 +act -> bf16 dequant".
    role = "" if stored_role == "weight" else f"{stored_role} "
    if dequant:   # the operands by their own names (int8_pt, fp8_block128), not the MMA formats they map to
        label = f"{role}{s0.name}{' +act' if convert else ''} -> {target} dequant"
    else:
        label = f"act {a0.name} -> {target}"
    return ComputePath(target, rates[target], dequant, label, convert)

"""Print the number-format registry as a markdown table (pasted into docs/formats.md).

Usage: python scripts/formats_table.py [--rows 4096 --cols 4096] [--no-sqnr]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from sim.apps.formats_cli import DEFAULT_SHAPE  # noqa: E402
from sim.core.formats import ALIASES, get_format, known_formats  # noqa: E402
from sim.core.quantize import quantization_error  # noqa: E402

EXTRA = ["int8_pt", "int8_g64", "int4_pc", "int4_g64", "int4_g128_asym"]
ORDER = ["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1",
         "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8", "nvfp4",
         "fp8_block128", "int8", "int4"]


def _g(x: float) -> str:
    return f"{x:.6g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--no-sqnr", action="store_true", help="skip the Gaussian SQNR column")
    args = ap.parse_args()
    shape = (args.rows, args.cols)
    names = [n for n in ORDER if n in known_formats()] + \
        [n for n in known_formats() if n not in ORDER] + EXTRA
    x = None if args.no_sqnr else np.random.default_rng(0).standard_normal(DEFAULT_SHAPE).astype(np.float32)

    head = ["format", "family", "element (ml_dtypes)", "bits", "block", "block scale", "tensor scale",
            "max normal", f"bytes {shape[0]}x{shape[1]}", "of which scales", "bits/elem incl. scales"]
    if x is not None:
        head.append("SQNR dB, N(0,1)")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for n in names:
        f = get_format(n)
        block = "-" if f.block_size is None else ("row" if f.block_size == 0 else str(f.block_size))
        block = f"{f.block_rows}x{block}" if f.block_rows > 1 else block
        scale = "-" if not f.scale_bits else f"{f.scale_format} ({f.scale_bits} b)"
        if f.zero_bits:
            scale += f" + int{f.zero_bits} zero"
        tscale = "-" if not f.tensor_scale_bits else f"{f.tensor_scale_format} ({f.tensor_scale_bits} b)"
        row = [f"`{n}`", f.family, f"{f.element_dtype}", str(f.bits), block, scale, tscale, _g(f.max_normal),
               f"{f.storage_bytes(shape):,}", f"{f.scale_bytes(shape):,}", f"{f.bits_per_element(shape):.4f}"]
        if x is not None:
            row.append(f"{quantization_error(x, n)['sqnr_db']:.1f}")
        print("| " + " | ".join(row) + " |")
    print()
    print("Aliases: " + ", ".join(f"`{a}` -> `{c}`" for a, c in sorted(ALIASES.items())))


if __name__ == "__main__":
    main()

"""`sim formats`: each number format's exact storage and the error it causes on an array (sim.core.formats,
sim.core.quantize)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.apps import progress
from sim.core import flags, tables

DEFAULT_SHAPE = (512, 1024)   # the array of docs/formats.md's SQNR column (scripts/formats_table.py)


def cmd_formats(args: argparse.Namespace) -> int:
    """Each format's exact storage and the error it causes on an array."""
    from rich.table import Table

    from sim.apps.arrays import numeric_array
    from sim.core.formats import get_format, known_formats
    from sim.core.quantize import quantization_error

    import numpy as np

    # `--formats ""` is a list of one empty name, refused as such (it had printed every format)
    names = (flags.comma_list("--formats", args.formats, lambda n: get_format(n).name) if args.formats is not None
             else known_formats())
    fmts = [get_format(n) for n in names]        # unknown names fail before any work
    if args.array:
        path = Path(args.array)
        x = numeric_array(path)
        source = f"{path} {x.shape}"
    else:
        # docs/formats.md's table's array (scripts/formats_table.py), so that both print the same SQNR (a trial read
        # 256 x 4096 here against the doc's 512 x 1024)
        x = np.random.default_rng(0).standard_normal(DEFAULT_SHAPE).astype(np.float32)
        source = f"N(0, 1), {DEFAULT_SHAPE[0]} x {DEFAULT_SHAPE[1]}, seed 0"
    shape = tuple(x.shape) if x.ndim else (1,)
    rows = []
    with progress.bar("measuring formats", "formats", len(fmts), quiet=args.quiet) as update:
        for f in fmts:
            err = quantization_error(x, f)
            rows.append(dict(format=f.name, bits_per_element=f.bits_per_element(shape), block=f.block_size,
                             block_rows=f.block_rows,
                             storage_bytes=f.storage_bytes(shape), sqnr_db=err["sqnr_db"],
                             rel_rmse=err["rel_rmse"], max_abs_err=err["max_abs_err"]))
            update(len(rows))
    if args.json:
        flags.emit_json(args.json, dict(array=source, formats=rows))
        return 0
    t = Table(title=f"Number formats on {source}")
    for col in ("format", "bits/element", "block", "bytes", "SQNR dB", "rel. RMSE", "max |err|"):
        t.add_column(col, justify="left" if col == "format" else "right")
    for r in rows:
        t.add_row(r["format"], f"{r['bits_per_element']:.3f}",
                  {None: "-", 0: "row"}.get(r["block"], (f"{r['block_rows']}x" if r["block_rows"] > 1 else "")
                                            + str(r["block"])), f"{r['storage_bytes']:,}",
                  f"{r['sqnr_db']:.1f}", f"{r['rel_rmse']:.2e}", f"{r['max_abs_err']:.3g}")
    tables.console().print(t)
    # A rel. RMSE of 1 is everything rounded to zero: an unscaled narrow format under values below its smallest
    # subnormal (fp4_e2m1's 0.5 under N(0, 0.02) weights read "0.0 dB" without a word: a newcomer's trial).
    lost = [r["format"] for r in rows if r["rel_rmse"] >= 1.0 - 1e-12]
    if lost:
        print(f"note: {', '.join(lost)}: every value rounds to zero (rel. RMSE 1): the values lie below the format's "
              "smallest step and it carries no scale; a scaled format (mxfp4, nvfp4) or a per-tensor scale keeps them",
              file=sys.stderr)
    return 0

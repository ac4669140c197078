#!/usr/bin/env python3
"""Fit alpha-beta collective costs to vidur's NCCL tables and print the fit table
(error out of sample: message sizes not used to fit). The fitted figures are the
`fitted:` sections of hw_models/network/presets/*.yaml.

    python scripts/network_fit.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from hw_models.network.fit import fit_all  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402
from sim.apps.script_help import no_options  # noqa: E402

SHARED = shared_validation_dir() / "vidur" / "network"


def main() -> int:
    no_options(__doc__)
    if not SHARED.is_dir():
        print(f"{SHARED} not found: nothing to fit")
        return 0
    table = Table(title="alpha-beta fit to NCCL (vidur), intra-node, 1 MB - 1 GB; error on held-out sizes")
    for col in ("node", "collective", "ranks", "alpha (us)", "B (GB/s)", "fit pts", "test pts", "test sizes (MB)",
                "MAPE", "max |err|", "within 10%"):
        table.add_column(col, justify="right")
    for f in fit_all(SHARED):
        table.add_row(f.node, f.kind, str(f.ranks), f"{f.latency_s * 1e6:.2f}", f"{f.bandwidth_bytes_per_s / 1e9:.1f}",
                      str(f.fit_points), str(f.test_points), f"{f.sizes[0] / 1e6:.1f}-{f.sizes[1] / 1e6:.0f}",
                      f"{f.test_mape:.1%}", f"{f.test_max_error:.1%}",
                      f"{f.test_within_10pct:.0%}")
    Console(width=180).print(table)
    print("\nfitted: sections for the presets (3 significant figures):")
    for f in fit_all(SHARED):
        print(f"  {f.node}: {f.kind}: {f.ranks}: {{latency_s: {f.latency_s:.3g}, "
              f"bandwidth_bytes_per_s: {f.bandwidth_bytes_per_s:.3g}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Fit the vllm stacks' host time per iteration (`step_overhead` in hw_models/stack/presets/vllm.yaml,
inherited by vllm-v0.yaml) on vidur's A100 cpu_overheads.csv and check it out of sample on
the A40 one (sim.apps.trace.engine_overhead: what is summed, what is left out, the loss).

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/fit_step_overhead.py

Prints the fitted knots (paste into vllm.yaml), the fit error on the A100 rows (in sample)
and on the A40 rows (out of sample: another node, another host CPU), per model and TP, and
the stack file's own curve's error on both.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hw_models.stack.spec import load_stack  # noqa: E402
from sim.apps.trace.engine_overhead import fit_curve, load_cpu_overheads, mape, predict  # noqa: E402
from sim.apps.script_help import no_options  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402

SHARED = shared_validation_dir()


def per_group(curve, d) -> str:
    err = (predict(curve, d) / d.host_s - 1.0).abs()
    g = d.assign(err=err).groupby(["model", "tp"]).err.mean()
    return ", ".join(f"{m} tp{t} {e:.1%}" for (m, t), e in g.items())


def main() -> int:
    no_options(__doc__)
    folder = SHARED / "vidur" / "cpu_overhead"
    if not folder.is_dir():
        print(f"{folder}: not found (set SIM_SHARED_VALIDATION)", file=sys.stderr)
        return 2
    a100 = load_cpu_overheads(folder / "a100" / "cpu_overheads.csv")
    a40 = load_cpu_overheads(folder / "a40" / "cpu_overheads.csv")
    fit = fit_curve(a100)
    c = fit.curve
    print(f"fitted on {len(a100)} A100 rows: seqs {c.seqs}, seconds "
          f"[{', '.join(f'{s * 1e3:.3f} ms' for s in c.seconds)}], tp_extra_s {c.tp_extra_s * 1e3:.3f} ms")
    print(f"A100 (in sample): MAPE {fit.mape:.1%}, max {fit.max_error:.1%}; {per_group(c, a100)}")
    print(f"A40 (out of sample): MAPE {mape(c, a40):.1%} all {len(a40)} rows, "
          f"{mape(c, a40[a40.tp == 1]):.1%} TP1, {mape(c, a40[a40.tp > 1]):.1%} TP>1")
    print(f"  per group: {per_group(c, a40)}")
    ratio = (a40.host_s / predict(c, a40))
    print(f"  A40 measured / fitted, median: TP1 {ratio[a40.tp == 1].median():.2f}, TP>1 {ratio[a40.tp > 1].median():.2f}")
    stack = load_stack("vllm").step_overhead
    print(f"vllm.yaml's curve: A100 MAPE {mape(stack, a100):.1%}, A40 {mape(stack, a40):.1%}; "
          f"at 1 / 8 / 32 / 128 / 256 sequences, one device: "
          f"{', '.join(f'{stack.host_s(n) * 1e3:.2f}' for n in (1, 8, 32, 128, 256))} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Fit the torch-eager stack's per-kernel floors and memory efficiencies
(sim.apps.trace.stack_fit) on the H200 calibration traces and report the held-out
traces' per-op error with the uncalibrated `h200` preset, before (no stack) and
after. The fitted figures are what hw_models/stack/presets/torch-eager.yaml holds.

    python scripts/fit_stack.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hw_models.machine import load_machine  # noqa: E402
from hw_models.stack.spec import load_stack  # noqa: E402
from sim.apps.trace.parser import load_trace  # noqa: E402
from sim.apps.script_help import no_options  # noqa: E402
from sim.apps.trace.stack_fit import fit_stack  # noqa: E402
from sim.apps.trace.validate import validate  # noqa: E402

FIT = ("llama2-7b_L4_fp16_b1_p1024", "llama2-13b_L4_fp16_b8_p1024", "llama2-7b_L4_bf16_b4_p4096",
       "llama3-8b_L4_bf16_b1_p128")


def main() -> None:
    no_options(__doc__)
    paths = sorted((ROOT / "traces" / "h200").glob("*.trace.json.gz"))
    fit = [load_trace(p)[0] for p in paths if p.name.startswith(FIT)]
    test = [load_trace(p)[0] for p in paths if not p.name.startswith(FIT)]
    machine = load_machine("h200")
    print("spec, ops, floor_s, memory_efficiency, fitted-set MAPE[, serial per_s]")
    for f in fit_stack(fit, machine, load_stack("torch-eager")):
        fixed = "not constrained" if f.floor_s is None else f"{f.floor_s:.3g}, {f.memory_efficiency:.3g}, {f.mape:.1%}"
        fixed += "" if f.serial_per_s is None else f", serial per_s {f.serial_per_s:.3g}"
        print(f"{f.key}, {f.n}, {fixed}")
    for stack in (None, "torch-eager"):
        v = validate(test, machine, stack=stack)
        kinds = ", ".join(f"{k} {m:.1%}" for k, m in v.mape_by_kind().items())
        print(f"held out, stack {stack}: per-op MAPE {v.mape:.1%} ({kinds})")


if __name__ == "__main__":
    main()

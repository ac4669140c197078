"""Llama-2-13B decode TPOT and prefill TTFT per number format on a6000, h100_sxm
and b200: the "Formats on hardware" table of docs/formats.md.

    python scripts/format_speedups.py [--hw a6000 h100_sxm b200] [--workload PATH]

The workload is workloads/llama13b_decode.yaml (batch 1, prompt 1024, 128 new
tokens), so TTFT is a 1 x 1024 prefill. Each row sets formats.weights and
formats.activations (KV cache fp16, compute: auto). TPOT is the preset's
(efficiencies, launch overheads); "ideal" is the pure roofline of the same
preset (hw_models.ideal). The path column is the q_proj compute path in decode
and prefill, as the report prints it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.ideal import ideal  # noqa: E402
from hw_models.machine import load_machine  # noqa: E402
from hw_models.registry import simulate  # noqa: E402
from sim.core.workload import load_workload  # noqa: E402

# (label, weights, activations)
CONFIGS = [
    ("fp16", "fp16", "fp16"),
    ("int8 W8A16", "int8", "fp16"),
    ("int8 W8A8", "int8", "int8"),
    ("int4 W4A16", "int4", "fp16"),
    ("fp8 W8A8", "fp8", "fp8"),
    ("mxfp4 W4A16", "mxfp4", "fp16"),
    ("mxfp4 W4A4", "mxfp4", "mxfp4"),
    ("nvfp4 W4A16", "nvfp4", "fp16"),
    ("nvfp4 W4A4", "nvfp4", "nvfp4"),
]


def _path(ops, name: str = "L0.q_proj") -> str:
    return next((o.path for o in ops if o.name == name), "")


def rows(hw_names: list[str], workload_path: Path) -> list[list[str]]:
    out = []
    for hw in hw_names:
        machine = load_machine(hw)
        flat = ideal(machine)
        base = None
        for label, weights, acts in CONFIGS:
            w = load_workload(workload_path, {"formats.weights": weights, "formats.activations": acts})
            r, ri = simulate(w, machine), simulate(w, flat)
            if base is None:
                base = (r.tpot_s, ri.tpot_s, r.ttft_s)
            dp, pp = _path(r.decode_ops), _path(r.prefill_ops)
            out.append([hw, label, f"{r.tpot_s * 1e3:.2f}", f"{base[0] / r.tpot_s:.2f}x",
                        f"{ri.tpot_s * 1e3:.2f}", f"{base[1] / ri.tpot_s:.2f}x",
                        f"{r.ttft_s * 1e3:.1f}", f"{base[2] / r.ttft_s:.2f}x",
                        dp if dp == pp else f"{dp} / {pp}"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", nargs="+", default=["a6000", "h100_sxm", "b200"])
    ap.add_argument("--workload", type=Path, default=ROOT / "workloads/llama13b_decode.yaml")
    args = ap.parse_args(argv)
    head = ["hw", "formats", "TPOT ms", "vs fp16", "ideal TPOT ms", "vs fp16", "TTFT ms", "vs fp16",
            "q_proj path"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows(args.hw, args.workload):
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

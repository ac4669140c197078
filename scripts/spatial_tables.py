#!/usr/bin/env python3
"""docs/spatial.md's measured tables: Llama-2-70B on groq_lpu and the IPUs (1024 + 256 tokens), each row a
`sim run ... --json` of the presets as shipped; prints the Markdown rows.

    python scripts/spatial_tables.py            # the batch / chips / numerics table, then the t = 1..8 table
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from sim.apps.script_help import no_options

ROOT = Path(__file__).resolve().parents[1]
W8, TP = "workloads/llama70b_groq.yaml", "workloads/llama70b_groq_fp16act.yaml"
BY_SETTING = [
 ("groq_lpu, batch 1 (auto)", W8, "groq_lpu", []),
 ("groq_lpu, batch 1, chips=576", W8, "groq_lpu", ["hw.spatial.chips=576"]),
 ("groq_lpu, batch 8", W8, "groq_lpu", ["batch=8"]),
 ("groq_lpu, batch 64", W8, "groq_lpu", ["batch=64"]),
 ("groq_lpu, batch 355", W8, "groq_lpu", ["batch=355"]),
 ("groq_lpu, batch 64, microbatch_size 8", W8, "groq_lpu", ["batch=64", "hw.spatial.microbatch_size=8"]),
 ("groq_lpu, batch 1, int8 W x fp16 A (TruePoint, auto)", TP, "groq_lpu", []),
 ("groq_lpu, batch 1, int8 W x fp16 A, chips=576", TP, "groq_lpu", ["hw.spatial.chips=576"]),
 ("groq_lpu, batch 1, int8 W x fp16 A, install hidden (rate unset)", TP, "groq_lpu", ["hw.spatial.pe_array.weight_install_bytes_per_cycle=null"]),
 ("groq_lpu, batch 1, int8 W x fp16 A, mixed_precision_matmul false (vector dequant, overlapping the MXM)", TP, "groq_lpu", ["hw.spatial.mixed_precision_matmul=false"]),
 ("ipu_gc200, fp16 weights, batch 1", W8, "ipu_gc200", ["formats.weights=fp16", "formats.activations=fp16"]),
 ("ipu_bow, fp16 weights, batch 1", W8, "ipu_bow", ["formats.weights=fp16", "formats.activations=fp16"]),
 ("ipu_bow, fp16, batch 8, KV in Streaming Memory", W8, "ipu_bow", ["formats.weights=fp16", "formats.activations=fp16", "batch=8", "hw.spatial.kv_cache=dram"]),
]
BY_TP = [
 ("TruePoint (int8 W × fp16 A)", 1, TP, []),
 ("TruePoint", 2, TP, []), ("TruePoint", 4, TP, []), ("**TruePoint**", 8, TP, []),
 ("TruePoint, chips=576", 8, TP, ["hw.spatial.chips=576"]),
 ("TruePoint, install hidden", 8, TP, ["hw.spatial.pe_array.weight_install_bytes_per_cycle=null"]),
 ("TruePoint, zero link latency", 8, TP, ["hw.spatial.links.latency_s=0"]),
 ("TruePoint, 2 links per peer", 8, TP, ["hw.spatial.tensor_parallel_links_per_peer=2"]),
 ("W8A8", 1, W8, []), ("W8A8", 8, W8, []), ("W8A8, batch 8", 8, W8, ["batch=8"]), ("W8A8, batch 64", 8, W8, ["batch=64"]),
]


def run(workload: str, hw: str, sets: list[str]) -> tuple[dict, dict]:
    """The run's JSON and its spatial metrics."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, "-m", "sim.apps.cli", "run", workload, "--hw", hw, "--json", str(out), "-q"]
        subprocess.run(cmd + [a for s in sets for a in ("--set", s)], check=True, cwd=ROOT)
        d = json.loads(out.read_text())
    return d, d["extra"]["metrics"]


def main() -> int:
    no_options(__doc__)
    for label, workload, hw, sets in BY_SETTING:
        d, m = run(workload, hw, sets)
        print(f"| {label} | {int(m['spatial.chips'])} | {d['tpot_s'] * 1e3:.3f} ms | {m['spatial.tok_s_per_user']:,.1f} | "
              f"{m['spatial.tok_s_aggregate']:,.0f} | {m['spatial.bubble_fraction'] * 100:.1f}% | "
              f"{d['energy_per_token_j']:,.1f} J |")
    print()
    for label, t, workload, sets in BY_TP:
        d, m = run(workload, "groq_lpu", sets + ([f"hw.spatial.tensor_parallel={t}"] if t > 1 else []))
        cs = m["spatial.collective_s_per_token"]
        groups = f" ({int(m['spatial.groups'])})" if t > 1 else ""
        print(f"| {label} | {t} | {int(m['spatial.chips'])}{groups} | {d['tpot_s'] * 1e3:.3f} ms | "
              f"{m['spatial.tok_s_per_user']:,.1f} | {m['spatial.tok_s_aggregate']:,.0f} | "
              f"{f'{cs * 1e6:.0f} µs' if cs else '0'} | {d['energy_per_token_j']:,.1f} J |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

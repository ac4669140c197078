#!/usr/bin/env python3
"""Compare hw_models.spatial.pe_array compute cycles with SCALE-Sim on LLaMA-layer GEMMs.

SCALE-Sim 3.0.0 (PyPI `scalesim`) needs numpy<2, which the project does not
pin, so it lives in its own venv and is driven as a subprocess:

    python3 -m venv .venv-scalesim
    .venv-scalesim/bin/pip install scalesim==3.0.0 'numpy<2'
    python scripts/scalesim_compare.py [--json out.json]

One SCALE-Sim run per (array, dataflow); every shape is one layer of that
run's topology CSV.  If SCALE-Sim cannot be found the script prints
"skipped" and exits 0, so it is safe to call from CI.  It exits 1 if any case
misses the tolerance (default 10 % on compute cycles).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hw_models.spatial.pe_array import PEArray, gemm_cycles  # noqa: E402

DEFAULT_SCALESIM_PY = REPO / ".venv-scalesim" / "bin" / "python"

# LLaMA-2-7B layer GEMMs (C[M,N] = A[M,K] @ B[K,N]) with hidden 4096 -> 512 and
# FFN 11008 -> 1376 (both / 8) so SCALE-Sim's per-cycle Python loop finishes
# in minutes.  1376 = 43 x 32 is not a multiple of 128, so the 128x128 runs
# exercise partial edge folds.  M = 1 / 8 are decode batches, 64 a prefill
# chunk.  Attention GEMMs are per head, head_dim 128 (LLaMA-2-7B's), 64 tokens.
SHAPES: list[tuple[str, int, int, int]] = [
    ("fact_16x256x512", 16, 256, 512),  # the published 14,079-cycle case
    ("decode1_qkvo", 1, 512, 512),
    ("decode8_gate_up", 8, 1376, 512),
    ("decode8_down", 8, 512, 1376),
    ("prefill64_qkvo", 64, 512, 512),
    ("prefill64_gate_up", 64, 1376, 512),
    ("prefill64_attn_qk", 64, 64, 128),  # scores = Q @ K^T, K = head_dim
    ("prefill64_attn_pv", 64, 128, 64),  # out = P @ V, K = seq
]
ARRAYS: list[int] = [32, 128]
DATAFLOWS: list[str] = ["ws", "os"]

# Every section is mandatory in SCALE-Sim 3.0.0.  CALC bandwidth mode and big
# SRAMs keep the memory model stall-free, so "Total Cycles" is pure compute.
CONFIG_TEMPLATE = """\
[general]
run_name = {run_name}

[run_presets]
InterfaceBandwidth = CALC
UseRamulatorTrace = False

[architecture_presets]
ArrayHeight = {rows}
ArrayWidth = {cols}
IfmapSramSzkB = 8192
FilterSramSzkB = 8192
OfmapSramSzkB = 4096
IfmapOffset = 0
FilterOffset = 10000000
OfmapOffset = 20000000
Dataflow = {dataflow}
Bandwidth = 10
ReadRequestBuffer = 32
WriteRequestBuffer = 32

[layout]
IfmapCustomLayout = False
IfmapSRAMBankBandwidth = 10
IfmapSRAMBankNum = 10
IfmapSRAMBankPort = 2
FilterCustomLayout = False
FilterSRAMBankBandwidth = 10
FilterSRAMBankNum = 10
FilterSRAMBankPort = 2

[sparsity]
SparsitySupport = false
SparseRep = ellpack_block
OptimizedMapping = false
BlockSize = 8
RandomNumberGeneratorSeed = 40
"""

# Runs inside the SCALE-Sim venv.  The Python API (rather than scale.py) lets
# us pass save_disk_space=True, skipping the multi-MB per-cycle trace CSVs.
DRIVER = """\
import sys
from scalesim.scale_sim import scalesim
cfg, topo, out = sys.argv[1:4]
s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo,
             layout=topo, input_type_gemm=True)
s.run_scale(top_path=out)
"""


def scalesim_available(py: Path) -> str | None:
    """SCALE-Sim's version if `py` can import it, else None."""
    if not py.exists():
        return None
    probe = "import importlib.metadata as m, scalesim; print(m.version('scalesim'))"
    r = subprocess.run([str(py), "-c", probe], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def run_scalesim(
    py: Path, workdir: Path, rows: int, cols: int, dataflow: str,
    shapes: list[tuple[str, int, int, int]],
) -> dict[str, tuple[int, int]]:
    """Run one SCALE-Sim job; {shape name: (total cycles, stall cycles)}."""
    run_name = f"a{rows}x{cols}_{dataflow}"
    d = workdir / run_name
    d.mkdir(parents=True)
    cfg = d / "scale.cfg"
    cfg.write_text(CONFIG_TEMPLATE.format(run_name=run_name, rows=rows, cols=cols, dataflow=dataflow))
    # GEMM topology rows end in a trailing comma: SCALE-Sim drops the last field.
    topo = d / "gemm.csv"
    topo.write_text("Layer, M, N, K,\n" + "".join(f"{n}, {m}, {nn}, {k},\n" for n, m, nn, k in shapes))
    r = subprocess.run([str(py), "-c", DRIVER, str(cfg), str(topo), str(d / "out")],
                       capture_output=True, text=True, cwd=d)
    report = d / "out" / run_name / "COMPUTE_REPORT.csv"
    if r.returncode != 0 or not report.exists():
        raise RuntimeError(f"SCALE-Sim failed for {run_name} (rc={r.returncode}):\n{r.stderr[-3000:]}")
    result: dict[str, tuple[int, int]] = {}
    with report.open() as f:
        rd = csv.reader(f, skipinitialspace=True)
        header = [h.strip() for h in next(rd)]
        i_total, i_stall = header.index("Total Cycles"), header.index("Stall Cycles")
        for row in rd:
            if not row or not row[0].strip():
                continue
            layer = int(row[0])  # layers are reported by index, in topology order
            result[shapes[layer][0]] = (int(float(row[i_total])), int(float(row[i_stall])))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scalesim-python", type=Path, default=DEFAULT_SCALESIM_PY,
                    help="python of a venv with scalesim==3.0.0 and numpy<2 (default: %(default)s)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--arrays", type=int, nargs="+", default=ARRAYS, help="square array sizes")
    ap.add_argument("--dataflows", nargs="+", default=DATAFLOWS, choices=["ws", "os", "is"])
    ap.add_argument("--shapes", nargs="+", help="subset of shape names (default: all)")
    ap.add_argument("--tolerance-pct", type=float, default=10.0)
    ap.add_argument("--jobs", type=int, default=2, help="SCALE-Sim runs in parallel")
    args = ap.parse_args(argv)

    shapes = SHAPES if not args.shapes else [s for s in SHAPES if s[0] in set(args.shapes)]
    if not shapes:
        ap.error(f"no known shapes in {args.shapes}; known: {[s[0] for s in SHAPES]}")

    version = scalesim_available(args.scalesim_python)
    if version is None:
        msg = (f"skipped: SCALE-Sim not importable from {args.scalesim_python} "
               "(create it with: python3 -m venv .venv-scalesim && "
               ".venv-scalesim/bin/pip install scalesim==3.0.0 'numpy<2')")
        print(msg)
        if args.json:
            args.json.write_text(json.dumps({"status": "skipped", "reason": msg}, indent=2) + "\n")
        return 0

    jobs = [(r, r, df) for r in args.arrays for df in args.dataflows]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="scalesim_cmp_") as tmp:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            futs = {j: ex.submit(run_scalesim, args.scalesim_python, Path(tmp), *j, shapes) for j in jobs}
            sim = {j: f.result() for j, f in futs.items()}
    elapsed = time.monotonic() - t0

    rows: list[dict[str, object]] = []
    for (r, c, df) in jobs:
        for name, m, n, k in shapes:
            ref, stalls = sim[(r, c, df)][name]
            ours = gemm_cycles(PEArray(r, c, df), m, n, k).compute_cycles  # type: ignore[arg-type]
            err = 100.0 * (ours - ref) / ref
            rows.append({"shape": name, "M": m, "N": n, "K": k, "array": f"{r}x{c}", "dataflow": df,
                         "scalesim_cycles": ref, "scalesim_stall_cycles": stalls,
                         "our_cycles": ours, "error_pct": err})

    abs_errs = [abs(float(x["error_pct"])) for x in rows]  # type: ignore[arg-type]
    max_err, mean_err = max(abs_errs), sum(abs_errs) / len(abs_errs)
    misses = [x for x in rows if abs(float(x["error_pct"])) > args.tolerance_pct]  # type: ignore[arg-type]

    hdr = f"{'shape':<20} {'M':>4} {'N':>5} {'K':>5} {'array':>7} {'df':>3} {'scalesim':>9} {'ours':>9} {'err %':>7}"
    print(f"SCALE-Sim {version} vs hw_models.spatial.pe_array (compute cycles), {elapsed:.0f}s")
    print(hdr)
    print("-" * len(hdr))
    for x in rows:
        print(f"{x['shape']:<20} {x['M']:>4} {x['N']:>5} {x['K']:>5} {x['array']:>7} {x['dataflow']:>3} "
              f"{x['scalesim_cycles']:>9} {x['our_cycles']:>9} {float(x['error_pct']):>+7.2f}")  # type: ignore[arg-type]
    print("-" * len(hdr))
    print(f"cases: {len(rows)}  max |err|: {max_err:.2f}%  mean |err|: {mean_err:.2f}%  "
          f"tolerance: {args.tolerance_pct:.0f}%  misses: {len(misses)}")
    stalled = [x for x in rows if x["scalesim_stall_cycles"]]
    if stalled:
        print(f"note: SCALE-Sim reported memory stalls in {len(stalled)} case(s); its Total Cycles include them")

    if args.json:
        args.json.write_text(json.dumps({
            "status": "ok", "scalesim_version": version, "elapsed_s": elapsed,
            "tolerance_pct": args.tolerance_pct, "max_abs_error_pct": max_err,
            "mean_abs_error_pct": mean_err, "misses": len(misses), "rows": rows,
        }, indent=2) + "\n")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())

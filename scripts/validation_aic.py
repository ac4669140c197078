"""The aiconfigurator per-op section of docs/validation.md (called by scripts/validation_report.py).

Every table of shared/validation/aic costed by `sim validate --input-format aic` (sim.apps.trace.aic):
MAPE per op family per GPU, "before" (the stacks and collectives as they were before issue 28:
no attention kernel family, the host launch on every graph-replayed kernel, ring all-reduce on
the datasheet/vidur topology) and "after". The H100, A100 and RTX PRO 6000 tables are in
sample (scripts/fit_kernels.py fits on them); H200 and Blackwell datacenter tables, where
present, are held out and reported apart.

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/validation_aic.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from md_table import pct, table  # noqa: E402  (scripts/, beside this file)
from sim.apps.trace.aic import HELD_OUT, table_of, validate_tables  # noqa: E402
from sim.core.errors import ConfigError  # noqa: E402

def _tables(shared: Path) -> list[Path]:
    folder = shared / "aic"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.csv.gz") if _is_table(p))   # not quant_*, llama_*, silicon_*


def _is_table(path: Path) -> bool:
    try:
        table_of(path)
        return True
    except ConfigError:
        return False


NOTES = """What moved, and what did not:

* Collectives: NCCL as the faster of two fitted alpha-beta lines per group size (its small- and large-message
  protocols), the engines' one-shot / two-shot custom all-reduce with the size thresholds of their source
  (hw_models/network/engine_collectives.py). Fitted on these tables, so the per-op figures are in sample. The
  stacks do not select the custom all-reduce by default: with it, the held-out LLM-Inference-Bench 70B TP4
  end-to-end latency MAPE went 12.2% -> 22.7% (every row too fast; docs/parallelism.md), i.e. a TP step pays
  more than the isolated nccl-tests / custom-kernel time. `parallel.algorithm: trtllm_custom` (or `vllm_custom`,
  `nccl`) selects it per workload.
* bf16 GEMM: graph-replayed kernels pay `graph_gap_s` (1.19 us, the pooled median; by GPU H100 0.93, A100 3.43,
  RTX PRO 6000 -0.23 us: its 128 MB L2 keeps the small weights the collector replicated) instead of the preset's
  3-4 us launch. H100 and RTX PRO 6000 improve; A100, whose graph-replayed small GEMMs cost ~3.4 us over the
  roofline, gets worse: one figure per stack cannot serve both.
* Decode attention: fixed + per-CTA + KV stream per family and KV format (hw_models/stack/attention_kernels.py),
  fitted on each family's own engine rows (TensorRT-LLM's, vLLM's FlashAttention). SGLang rows run under the vllm
  stack and its flash_attn figures; on RTX PRO 6000 SGLang and vLLM's FP8-KV decode run FlashInfer, which has no
  family of its own here, and the 128 MB L2 holds caches up to ~100 MB across graph replays: that GPU's decode
  rows get worse.
* Quantized GEMMs (hw_models/stack/kernel_families_fitted.yaml, fitted by scripts/fit_kernels.py on these
  tables: in sample): per-tensor FP8 as the engines run it, an activation-quantize kernel (fitted on the quant
  tables) then the scaled GEMM with its floor and M-curve, one family per engine (TensorRT-LLM cuBLASLt, vLLM
  CUTLASS); TensorRT-LLM's weight-only INT4 / INT8 plugin (A100); native NVFP4 per engine on RTX PRO 6000 (the
  vllm stack now runs FP4 natively where the GPU has an FP4 rate, Marlin emulation elsewhere). "Before" costs
  them with the hand families the stacks named before (fp8_scaled_mm, fitted on the H200; marlin's figures for
  TRT-LLM weight-only; blackwell_block_scaled; vLLM's FP4 as Marlin emulation). B200 uses the NVFP4 fractions
  fitted on RTX PRO 6000, unfitted there (its tables are held out).
* Not done (issue 28 items 2 and 4 in part): block-scaled FP8 has no format or family of its own (its rows are
  costed as per-tensor FP8, and TensorRT-LLM's got worse: its block kernel has no quantize-kernel-plus-cuBLASLt
  floor); SmoothQuant (`sq`) rows run as weight-only INT8; MXFP4 keeps its hand families."""


def aic_section(shared: Path, table_fn=table) -> tuple[str, dict]:
    paths = _tables(shared)
    if not paths:
        return "", {}
    after = validate_tables(paths)
    before = validate_tables(paths, baseline=True)
    b, a = before.mape_by_family(), after.mape_by_family()
    figures = {f"aic.{gpu}.{fam}.{k}": v[1] for k, by in (("before", b), ("after", a)) for (gpu, fam), v in by.items()}
    parts = []
    for held, title in ((False, "In sample (fitted on by scripts/fit_kernels.py)"),
                        (True, "Held out (never fitted on: report only)")):
        keys = [k for k in a if (k[0] in HELD_OUT) == held]
        if not keys:
            parts.append(f"### {title}\n\nNo such table in shared/validation/aic.\n")
            continue
        rows = [[gpu, fam, str(a[gpu, fam][0]), pct(b[gpu, fam][1]) if (gpu, fam) in b else "-",
                 pct(a[gpu, fam][1])] for gpu, fam in keys]
        parts.append(f"### {title}\n\n" + table_fn(["GPU", "family", "rows", "MAPE before", "MAPE after"], rows) + "\n")
    skipped = "".join(f"- {line}\n" for line in dict.fromkeys(after.skipped))
    text = f"""## aiconfigurator per-op tables (`sim validate --input-format aic`)

{__doc__.split(chr(10) + chr(10), 1)[1].split(chr(10) + chr(10))[0].strip()}
Reproduce: `sim validate --input-format aic ../shared/validation/aic/<table>_<gpu>.csv.gz` (each row under its engine's
stack; `--stack NAME` for one stack on every row).

{chr(10).join(parts)}
{NOTES}

Not costed:

{skipped}"""
    return text, figures


def main() -> int:
    shared = Path(os.environ.get("SIM_SHARED_VALIDATION", ROOT.parent / "shared" / "validation"))
    text, _ = aic_section(shared)
    print(text or f"{shared}/aic not found")
    return 0


if __name__ == "__main__":
    sys.exit(main())

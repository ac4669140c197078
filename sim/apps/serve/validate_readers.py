"""Measured serving runs for sim.apps.serve.validate, from the layouts benchmark tools write.

* silicon sample (aiconfigurator-core `systems/silicon_sample.csv`, NVIDIA ai-dynamo/aiconfigurator;
  shared/validation/aic/README.md): one closed-loop run per row: `batch_size` concurrent clients,
  fixed `isl`/`osl`, `backend`, `tp_size`, `gemm_quant_mode`; `silicon_ttft_ms`, `silicon_tpot_ms`
  (means). Mean E2E is derived exactly from them for fixed lengths: TTFT + TPOT x (osl - 1), since
  TPOT is (e2e - ttft) / (osl - 1) per request. Only aggregated (`mode: agg`) runs of a dense model
  this project has (validate.MODELS) are replayed; the others are listed as skipped, with why.
* vLLM `benchmark_serving.py --save-result` JSON (vllm-project/vllm benchmarks/benchmark_serving.py,
  `result_json`): `max_concurrency`, `input_lens`, `output_lens`, `ttfts`, `itls`, means
  `mean_ttft_ms`, `mean_tpot_ms`, `mean_e2el_ms`, `request_throughput`; the run's engine, GPU and model
  come from the command line (--hw, --engine, --model) since the JSON does not record them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from sim.apps.serve.validate import ENGINES, GPUS, MODELS, Run
from sim.core.errors import ConfigError

SILICON_COLUMNS = {"backend", "model_path", "system", "mode", "isl", "osl", "batch_size", "tp_size",
                   "silicon_ttft_ms", "silicon_tpot_ms"}


def is_silicon(path: Path) -> bool:
    try:
        head = pd.read_csv(path, nrows=0)
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return SILICON_COLUMNS <= set(head.columns)


def read_silicon(path: Path, systems: set[str] | None = None) -> tuple[list[Run], list[tuple[str, str]]]:
    """The replayable runs of a silicon-sample table (of `systems` only, when given), and the
    skipped rows as (id, reason)."""
    df = pd.read_csv(path)
    runs, skipped = [], []
    for row in df.itertuples(index=False):
        rid = str(row.id)
        if systems is not None and row.system not in systems:
            continue
        why = _unreplayable(row)
        if why:
            skipped.append((rid, why))
            continue
        ttft, tpot = row.silicon_ttft_ms / 1e3, row.silicon_tpot_ms / 1e3
        quant = row.gemm_quant_mode if isinstance(row.gemm_quant_mode, str) else None
        runs.append(Run(rid, row.system, row.backend, row.model_path, int(row.isl), int(row.osl), int(row.batch_size),
                        int(row.tp_size), quant,
                        {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": ttft + tpot * (int(row.osl) - 1)}))
    return runs, skipped


def _unreplayable(row) -> str:
    if row.mode != "agg":
        return "disaggregated serving (prefill and decode workers) is not replayed"
    if row.model_path not in MODELS:
        return f"model {row.model_path} has no config here"
    if row.backend not in ENGINES:
        return f"engine {row.backend} unknown"
    if row.system not in GPUS:
        return f"GPU {row.system} has no preset"
    if not (pd.notna(row.tp_size) and pd.notna(row.batch_size)):
        return "no TP size or concurrency"
    if isinstance(row.gemm_quant_mode, str) and row.gemm_quant_mode != "fp8":
        return f"GEMM quantization {row.gemm_quant_mode} not replayed"
    if (pd.notna(row.pp_size) and row.pp_size > 1) or (pd.notna(row.attention_dp_size) and row.attention_dp_size > 1):
        return "pipeline stages or attention data parallelism"
    return ""


def read_vllm_bench(path: Path, gpu: str, engine: str, model: str) -> Run:
    """A vLLM benchmark_serving result JSON as one closed-loop run (its max_concurrency, the mean of its
    input and output lengths)."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable JSON file ({str(exc).splitlines()[0]})") from None
    need = ("input_lens", "output_lens", "mean_ttft_ms", "mean_tpot_ms")
    if not isinstance(d, dict) or any(k not in d for k in need):
        raise ConfigError(f"{path}: not a vLLM benchmark_serving result (expected keys {', '.join(need)})")
    conc = d.get("max_concurrency") or len(d["input_lens"])   # no limit: every request in flight at once
    measured = {"ttft_s": d["mean_ttft_ms"] / 1e3, "tpot_s": d["mean_tpot_ms"] / 1e3}
    if "mean_e2el_ms" in d:
        measured["e2e_s"] = d["mean_e2el_ms"] / 1e3
    if "request_throughput" in d:
        measured["req_s"] = float(d["request_throughput"])
    if model not in MODELS:
        raise ConfigError(f"--model {model}: no config here; known: {', '.join(MODELS)}")
    return Run(path.stem, gpu, engine, model, int(round(np.mean(d["input_lens"]))),
               int(round(np.mean(d["output_lens"]))), int(conc), measured=measured, num_requests=len(d["input_lens"]))

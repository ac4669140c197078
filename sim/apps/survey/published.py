"""What the survey and LLM-Viewer published, quoted with where it was found, and
the one published measurement-vs-roofline comparison found for LLM-Viewer (its
issue #4: NVIDIA's TensorRT-LLM A100 figures against LLM-Viewer's estimates),
set beside this simulator's pure roofline and model of the same runs."""

from __future__ import annotations

import pandas as pd

from sim.apps.survey.doc import MEASURED, Section, Table, error, ms
from sim.apps.survey.runs import machine, run

ISSUE4 = "https://github.com/hahnyuan/LLM-Viewer/issues/4"
# (batch, input, output, TensorRT-LLM out tok/s/GPU, LLM-Viewer estimate), LLaMA 7B, TP 1, A100: issue #4's first table.
ISSUE4_THROUGHPUT = ((256, 128, 128, 5353.0, 8934.54), (32, 128, 2048, 1518.0, 2796.58),
                     (32, 2048, 128, 547.0, 788.73), (16, 2048, 2048, 613.0, 1169.17))
# (batch, input, TensorRT-LLM first-token latency s, LLM-Viewer estimate s): issue #4's second table.
ISSUE4_PREFILL = ((1, 128, 16.1e-3, 6.977e-3), (1, 2048, 120.5e-3, 100.88071e-3))
A100 = "a100_80g"


def _tok_s(r) -> float | None:
    """Output tokens per second per GPU over the whole run (prefill included)."""
    return r.batch * r.gen_len / r.e2e_s if r else None


def issue4_table() -> Table:
    rows = []
    for b, lin, lout, trt, lv in ISSUE4_THROUGHPUT:
        flat, real = (run(A100, flat=f, batch=b, prompt_len=lin, gen_len=lout, flash_attention=True)
                      for f in (True, False))
        rows.append({"metric": f"out tok/s, batch {b}, {lin} in / {lout} out", "measured (TRT-LLM)": f"{trt:,.0f}",
                     "LLM-Viewer": f"{lv:,.0f}", "error LLM-Viewer": error(lv, trt),
                     "roofline": f"{_tok_s(flat):,.0f}" if flat else "does not fit", "error roofline": error(_tok_s(flat), trt),
                     "sim": f"{_tok_s(real):,.0f}" if real else "does not fit", "error sim": error(_tok_s(real), trt)})
    for b, lin, trt, lv in ISSUE4_PREFILL:
        flat, real = (run(A100, flat=f, batch=b, prompt_len=lin, gen_len=1, flash_attention=True) for f in (True, False))
        rows.append({"metric": f"first-token latency (ms), batch {b}, {lin} in", "measured (TRT-LLM)": ms(trt, 1),
                     "LLM-Viewer": ms(lv, 1), "error LLM-Viewer": error(lv, trt),
                     "roofline": ms(flat.ttft_s, 1), "error roofline": error(flat.ttft_s, trt),
                     "sim": ms(real.ttft_s, 1), "error sim": error(real.ttft_s, trt)})
    return Table("A100: TensorRT-LLM measurements vs LLM-Viewer, the pure roofline and sim", (
        f"LLaMA-7B fp16, TP 1. Measured and LLM-Viewer columns are quoted from LLM-Viewer's issue #4 ({ISSUE4}, "
        "feifeibear, 2024-03-11), which took the measurements from NVIDIA's TensorRT-LLM performance page; the "
        "A100 variant is not stated there, and the predictions here use `a100_80g` (SXM4 80 GB, 2039 GB/s) with "
        "Llama-2-7B shapes and fused (flash) attention. out tok/s = batch x output tokens / end-to-end time."),
        pd.DataFrame(rows), MEASURED)


def published_section() -> Section:
    a6000 = machine("a6000")
    unit = a6000.units[a6000.main_unit]
    bw = a6000.memory[a6000.device_tier].bandwidth_bytes_per_s
    s = Section("0. What the survey and LLM-Viewer published", intro=f"""
Yuan et al., "LLM Inference Unveiled: Survey and Roofline Model Insights" (arXiv:2402.16363, 2024), and its tool
LLM-Viewer (github.com/hahnyuan/LLM-Viewer). What was looked up with the search tool, and what was found:

* **The paper's own tables and figures: not found.** The paper's text is not in the corpora the search tool reaches
  (searches for its roofline table of Llama-2-7B on the A6000 and its quantization tables returned only third-party
  summaries and image captions, which are not quoted here). So no table or figure number of the paper is quoted in
  this document, and none of its numbers is compared below.
* **LLM-Viewer's A6000** (`hardwares/hardware_params.py`, hahnyuan/LLM-Viewer @ 0e78452): bandwidth 768e9 B/s,
  FP16 309.677e12 / 2 = 154.8 TFLOP/s, INT8 309.7e12 OP/s. The `a6000` preset here: {bw / 1e9:.0f} GB/s,
  fp16 {unit.peak_flops_per_s['fp16'] / 1e12:.1f} TFLOP/s, int8 {unit.peak_flops_per_s['int8'] / 1e12:.1f} TOP/s: the same.
* **17.9 ms** (Llama-2-7B fp16 decode, batch 1, A6000) is the figure this project's issues (3 and 16) give as
  LLM-Viewer's. It was not found in the paper or in LLM-Viewer's repository with the search tool; section 1 checks
  it against the hand count it implies (bytes moved per step / 768 GB/s).
* **LLM-Viewer's README** warns that its times are theoretical and "only the relative relationships can be
  referenced". Its issue #4 is the one published comparison with measurements found: the table below.

Measurements (the *measured* columns) are quoted or read from files named in each table; every other number comes
from a run of the current code.""")
    s.tables.append(issue4_table())
    return s

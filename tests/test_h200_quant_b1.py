"""scripts/h200_quant_b1.py (issue 28): the batch-1 quantized GEMM decomposition adds up, on a synthetic row."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))   # the script imports its neighbours (energy_h200, md_table)
spec = importlib.util.spec_from_file_location("h200_quant_b1", ROOT / "scripts" / "h200_quant_b1.py")
qb1 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(qb1)


def test_decomposition_adds_up():
    # One M = 1 row of Llama's 4096 x 4096 (the measured values do not enter sim's side). Under torch-cudagraph the
    # W8A8 GEMM carries one activation-quantization kernel: the stack's 1.2 us floor plus 4096 x 3 B of traffic
    # (~0.003 us at the H200's ~4 TB/s); tinygemm's W4A16 has none. Both are weight-stream bound at M = 1, so sim's
    # time is floor + weight stream + quant pass.
    micro = {"graph_timed_gemm_us": [{"M": 1, "N": 4096, "K": 4096, "fp8_us": 9.0, "int4_us": 6.0}]}
    rows = {r["fmt"]: r for r in qb1.rows_for(micro, "torch-cudagraph")}
    fp8, int4 = rows["fp8_e4m3"], rows["int4"]
    assert fp8["quant"] == pytest.approx(1.2, abs=0.01) and int4["quant"] == 0.0
    for r in (fp8, int4):
        assert r["sim"] == pytest.approx(r["floor"] + r["stream"] + r["quant"], rel=1e-9)


def test_headline_is_the_kernel_the_capture_timed():
    """The capture timed torch._scaled_mm alone: the summary's first MAPE is sim's GEMM less its quantize pass,
    the whole op's beside it. On one synthetic row (fp8 9.0 us measured) kernel error = (sim - quant) / 9 - 1."""
    micro = {"graph_timed_gemm_us": [{"M": 1, "N": n, "K": k, "fp8_us": 9.0, "int4_us": 6.0}
                                     for (n, k) in qb1.LAYER_7B]}
    rows = qb1.rows_for(micro, "torch-cudagraph")
    fp8 = next(s for s in qb1.summary(rows) if s[0] == "fp8_e4m3")
    rs = [r for r in rows if r["fmt"] == "fp8_e4m3"]
    kernel = sum(abs((r["sim"] - r["quant"]) / 9.0 - 1) for r in rs) / len(rs)
    whole = sum(abs(r["sim"] / 9.0 - 1) for r in rs) / len(rs)
    assert kernel != pytest.approx(whole, abs=1e-3)
    assert fp8[2] == f"{kernel:.1%}" and fp8[4] == f"{whole:.1%}"

"""SGLang's CustomAllReduceV2 (hw_models.network.engine_collectives, algorithm `sglang_custom`): its
thresholds as sglang's custom_all_reduce_v2.py has them, the lines fitted on aic's H100 SGLang 0.5.14
rows, and which release runs which kernel (PRs #24363, #24742, #25650)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hw_models.network.collectives import collective_s
from hw_models.network.engine_collectives import ONE_SHOT, TWO_SHOT, custom_kernel, sglang_algorithm
from hw_models.network.topology import load_topology
from sim.apps.trace.aic import AicValidation, _comm_rows

KiB, MiB = 1024, 1024 * 1024


def test_thresholds_from_source():
    """THRESHOLD_2_SHOT_MAP (non-SM100): one-shot up to and including the limit (`input_bytes <=
    one_shot_push_threshold`), two-shot above, NCCL above max_size (16 MiB); world sizes 2-8 only."""
    assert custom_kernel("sglang", 16 * MiB, 2) == ONE_SHOT and custom_kernel("sglang", 16 * MiB + 16, 2) is None
    assert custom_kernel("sglang", 384 * KiB, 4) == ONE_SHOT and custom_kernel("sglang", 384 * KiB + 16, 4) == TWO_SHOT
    assert custom_kernel("sglang", 160 * KiB, 8) == ONE_SHOT and custom_kernel("sglang", 160 * KiB + 16, 8) == TWO_SHOT
    assert custom_kernel("sglang", 16 * MiB, 8) == TWO_SHOT and custom_kernel("sglang", 16 * MiB + 16, 8) is None
    assert custom_kernel("sglang", 1024, 16) is None   # not in THRESHOLD_2_SHOT_MAP: NCCL


def test_fitted_lines_by_hand():
    """dgx_h100, 4 ranks (engine_collectives.yaml): one-shot alpha 2.7 us, B 277 GB/s over (n-1) S; two-shot
    alpha 5.93 us, B 321 GB/s over 2 (n-1)/n S. At 64 KiB: 2.7 + 3 x 65536 / 2.77e5 = 3.410 us (measured
    3.5 us); at 4 MiB: 5.93 + 1.5 x 4194304 / 3.21e5 = 25.53 us (measured 25.6 us)."""
    topo = load_topology("dgx_h100")
    assert collective_s(topo, "all_reduce", 64 * KiB, 4, "sglang_custom") == pytest.approx(3.410e-6, rel=1e-3)
    assert collective_s(topo, "all_reduce", 4 * MiB, 4, "sglang_custom") == pytest.approx(25.53e-6, rel=1e-3)
    # the switch at 384 KiB: one-shot line at the limit, two-shot line one 16-byte step above
    at, above = 384 * KiB, 384 * KiB + 16
    assert collective_s(topo, "all_reduce", at, 4, "sglang_custom") == pytest.approx(2.7e-6 + 3 * at / 2.77e11)
    assert collective_s(topo, "all_reduce", above, 4, "sglang_custom") == pytest.approx(5.93e-6 + 1.5 * above / 3.21e11)
    # above 16 MiB SGLang hands the message to NCCL
    assert collective_s(topo, "all_reduce", 32 * MiB, 4, "sglang_custom") == collective_s(topo, "all_reduce",
                                                                                           32 * MiB, 4, "nccl")


@pytest.mark.parametrize("node,ranks", [("dgx_h100", 2), ("dgx_h100", 8), ("l40s_x8_pcie", 2)])
def test_never_faster_with_more_bytes(node, ranks):
    """Monotone within each kernel; at SGLang's own switch to NCCL (16 MiB) the next kernel is not faster here."""
    topo = load_topology(node)
    t = [collective_s(topo, "all_reduce", float(s), ranks, "sglang_custom") for s in np.geomspace(256, 1 << 30, 300)]
    assert all(b >= a for a, b in zip(t, t[1:]))


def test_without_nvlink_or_fit_the_v1_kernel_runs():
    """V2 needs full NVLink: on 2 PCIe GPUs the later releases run the v1 kernel, vLLM's (PR #25650); on an
    NVSwitch node with no V2 fit (dgx_a100: no 0.5.12+ rows) the v1 kernel's fit stands in."""
    for node in ("l40s_x8_pcie", "dgx_a100"):
        topo = load_topology(node)
        for s in (4096.0, 1 * MiB):
            assert collective_s(topo, "all_reduce", s, 2, "sglang_custom") == collective_s(topo, "all_reduce", s, 2,
                                                                                          "vllm_custom")
    h100 = load_topology("dgx_h100")
    assert collective_s(h100, "all_reduce", 4096.0, 4, "sglang_custom") < collective_s(h100, "all_reduce", 4096.0, 4,
                                                                                      "vllm_custom")


def test_release_picks_the_kernel():
    """Before 0.5.12 the v1 kernel; from 0.5.12 (PR #24363) V2; without NVLink 0.5.12 runs NCCL (PR #24742 turned
    the whole custom backend off, issue #25649), later releases fall back to the v1 kernel (PR #25650)."""
    assert sglang_algorithm("0.5.6.post2", True) == sglang_algorithm("0.5.10", False) == "vllm_custom"
    assert sglang_algorithm("0.5.12", True) == sglang_algorithm("0.5.14", False) == "sglang_custom"
    assert sglang_algorithm("0.5.12", False) == "nccl"
    rows = [("h100", "0.5.14"), ("h100", "0.5.10"), ("l40s", "0.5.12"), ("l40s", "0.5.14")]
    got = []
    for gpu, ver in rows:
        df = pd.DataFrame([dict(source="sglang_custom_ar", version=ver, op="all_reduce",
                                kernel_source="SGLang_CustomAllReduce_graph", dtype="bfloat16", num_gpus=2,
                                elements=32768, bytes=65536, latency_us=5.0)])
        out = AicValidation()
        _comm_rows(df, gpu, out)
        got.append(out.rows[0].stack)
    assert got == ["sglang_custom", "vllm_custom", "nccl", "sglang_custom"]

"""Collective times on dgx_h100 (8 x H100 on NVSwitch) worked by hand from its fitted figures (issue 32:
the survivors of the mutation job on hw_models.network.collectives). The figures are the presets':
hw_models/network/presets/dgx_h100.yaml (alpha-beta fit per group size) and
hw_models/network/engine_collectives.yaml (NCCL's protocol lines, the engines' custom all-reduce)."""

from __future__ import annotations

import pytest

from hw_models.network.collectives import collective_s
from hw_models.network.topology import load_topology

S = 64 * 1024.0   # a 64 KiB all-reduce (a decode step's hidden states)


def test_ring_all_reduce_uses_the_fit_for_its_group_size():
    """Ring over 4 ranks: 2 x 3 steps of the 4-rank fit's 4.27 us + 2 x 3/4 x S / 355 GB/s (the 2-rank
    fit, 12.4 us and 323 GB/s, is for 2 ranks only). Send/recv: the send_recv fit, 8.1 us + S / 362 GB/s."""
    topo = load_topology("dgx_h100")
    assert collective_s(topo, "all_reduce", S, 4) == pytest.approx(6 * 4.27e-6 + 1.5 * S / 3.55e11, rel=1e-12)
    assert collective_s(topo, "send_recv", S, 2) == pytest.approx(8.1e-6 + S / 3.62e11, rel=1e-12)


def test_nccl_takes_the_faster_protocol_line():
    """NCCL all-reduce over 8 ranks (ring: 14 steps, factor 14/8 = 1.75): the low-latency line
    14 x 1.22 us + 1.75 S / 226 GB/s = 17.59 us against the other 14 x 3.58 us + 1.75 S / 396 GB/s =
    50.41 us: the first."""
    topo = load_topology("dgx_h100")
    want = min(14 * 1.22e-6 + 1.75 * S / 2.26e11, 14 * 3.58e-6 + 1.75 * S / 3.96e11)
    assert collective_s(topo, "all_reduce", S, 8, "nccl") == pytest.approx(want, rel=1e-12)


def test_custom_all_reduce_below_its_limit_and_nccl_above():
    """TensorRT-LLM's custom all-reduce over 8 ranks: 64 KiB is under its one-shot limit (500 000 B):
    3.2 us + 7 x S / 288 GB/s. 9 MiB is over its 8 MiB workspace: NCCL's faster line (14 steps, 1.75 S)."""
    topo = load_topology("dgx_h100")
    assert collective_s(topo, "all_reduce", S, 8, "trtllm_custom") == pytest.approx(3.2e-6 + 7 * S / 2.88e11,
                                                                                  rel=1e-12)
    big = 9 * 1024 * 1024.0
    want = min(14 * 1.22e-6 + 1.75 * big / 2.26e11, 14 * 3.58e-6 + 1.75 * big / 3.96e11)
    assert collective_s(topo, "all_reduce", big, 8, "trtllm_custom") == pytest.approx(want, rel=1e-12)

"""Samsung's published HBM-PIM kernel speed-ups against this model, in the setup
the public sources document (issue 5, "Published figures ... within ±35%").

Published:
* Lee et al., ISCA 2021 (industry track), abstract: 11.2x on memory-bound NN kernels,
  3.5x on applications, "integrate it with an unmodified commercial processor".
* Kim et al., IEEE Micro 2022 (DOI 10.1109/MM.2022.3164651), abstract: "A GPU system
  equipped with Samsung Aquabolt-XL HBM2-PIM devices improved microkernel GEMV ... by 8.9x";
  "In a Xilinx AlveoU280 system, microkernel GEMV and ADD ... improved by 2.8x".

The GPU system, as far as public sources document it: Samsung's PIM software stack
(SAITPublic/PIMLibrary, runtime/include/manager/PimInfo.h and the `vega20_pbi` block info)
targets an AMD GPU with the Vega20 address map and `num_pim_chan = 64`, i.e. 4 HBM2 stacks x
16 pseudo-channels, 8 PIM blocks per pseudo-channel, 32 B transactions (a kernel comment:
"Radeon7(VEGA20) memory is 16GB but our target is 32GB system"). Neither paper's abstract
gives the kernel dimensions, the pin rate, or the baseline's achieved bandwidth; the
full texts were not available to this check.
"""

from __future__ import annotations

import pytest

from sim.core import engine
from tests.test_pim import gemv_graph, mapper

STACKS = 4
PINS_PER_STACK = 2.4e9 * 1024 / 8          # Aquabolt-XL HBM2 pins, 307.2 GB/s (hardware.md §4.1)
GPU_SYSTEM = {"pim.stacks": STACKS, "memory.hbm.bandwidth_bytes_per_s": STACKS * PINS_PER_STACK,
              "memory.hbm.capacity_bytes": STACKS * 6 * 2**30}
N = K = 8192                                 # large GEMV: the model's speed-up grows with size


def gemv_time(policy: str, overrides: dict) -> float:
    m = mapper(overrides=overrides, pim_policy=policy)
    return engine.run(m.plan_step(gemv_graph(N, K)), m.resources(), m.containers()).makespan_s


def pim_time_by_hand() -> float:
    # Weights interleaved over the 4 stacks; each stack's 128 units stream W/4 at
    # 128 x 32 B x 300 MHz = 1228.8 GB/s (test_pim: no row-open loss). Per stack, through
    # its own pins at the same time: x written once per pseudo-channel (16 x 2K B) and
    # 16 lane partial sums read back per output row (N/4 rows x 16 x 2 B).
    stream = 2 * N * K / STACKS / (128 * 32 * 300e6)             # 27.31 us
    broadcast = 16 * 2 * K / PINS_PER_STACK                      # 0.85 us
    readback = N / STACKS * 16 * 2 / PINS_PER_STACK              # 0.21 us
    return stream + broadcast + readback + 4e-6 + 2 * 0.25e-6   # launch, enter + leave PIM mode


def host_time_by_hand(memory_efficiency: float) -> float:
    # The GPU reads weights + x and writes y through all 4 stacks' pins at memory_efficiency,
    # after its 4 us launch and 2.3 us DRAM ramp (hbm_pim.yaml, as a100_80g.yaml).
    traffic = 2 * N * K + 2 * K + 2 * N                          # 134,250,496 B
    return 4e-6 + 2.3e-6 + traffic / (memory_efficiency * STACKS * PINS_PER_STACK)


def test_gpu_system_gemv_speedup():
    # Setup: 8192x8192 FP16 GEMV on a GPU with 4 Aquabolt-XL stacks (the PIMLibrary geometry).
    pim, host = gemv_time("auto", GPU_SYSTEM), gemv_time("none", GPU_SYSTEM)
    assert pim == pytest.approx(pim_time_by_hand(), rel=1e-3)      # 32.87 us
    assert host == pytest.approx(host_time_by_hand(0.85), rel=1e-3)  # 134.84 us
    # 4.10x. More stacks do not change it (each stack has the same 4x); smaller kernels
    # lower it (1024x4096 on 4 stacks: 2.15x) because launch and mode switches are fixed.
    # Ceiling for large N: host 2K/(0.85 p) per row against PIM 2K/(4 p) + 32/p -> 4.67x at K=8192.
    assert host / pim == pytest.approx(4.10, abs=0.01)


@pytest.mark.xfail(strict=True, reason="model 4.10x vs 8.9x GEMV on Samsung's GPU system (IEEE Micro 2022): -54 %; "
                   "against 11.2x (ISCA 2021): -63 %. Above ~4.7x needs a host far below its pins, "
                   "and no public source gives Samsung's baseline bandwidth")
def test_gpu_system_gemv_within_35_percent():
    assert gemv_time("none", GPU_SYSTEM) / gemv_time("auto", GPU_SYSTEM) == pytest.approx(8.9, rel=0.35)


@pytest.mark.parametrize("published, efficiency", [(8.9, 0.3816), (11.2, 0.3019)])
def test_host_efficiency_the_published_speedups_imply(published, efficiency):
    # Not a reproduction: the inverse. Which fraction of its pins would the GPU baseline have to
    # reach for the model to give Samsung's figure? e = traffic / ((S x t_pim - 6.3 us) x 1228.8 GB/s):
    # 8.9x -> 38 % (469 GB/s), 11.2x -> 30 % (371 GB/s), against the 85 % the presets assume.
    # For scale (not Samsung's baseline): on an MI100 (1228.8 GB/s) a GEMV dispatched as a GEMM
    # reached 447 GB/s (36 %) and rocBLAS's own GEMV 900 GB/s (73 %) (ROCm/hipBLASLt issue 1321, fp32).
    traffic = 2 * N * K + 2 * K + 2 * N
    implied = traffic / ((published * pim_time_by_hand() - 6.3e-6) * STACKS * PINS_PER_STACK)
    assert implied == pytest.approx(efficiency, abs=5e-4)
    slow_host = {**GPU_SYSTEM, "units.gpu.efficiency.memory_max": efficiency}
    assert gemv_time("none", slow_host) / gemv_time("auto", slow_host) == pytest.approx(published, rel=0.01)

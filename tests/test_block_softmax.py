"""The block-per-row softmax PyTorch runs for rows over 2048 (hw_models.stack.row_kernels.block_row,
hw_models.stack.spec.BlockReduce), checked by hand against the torch-eager stack's cited figures."""

from __future__ import annotations

import pytest

from hw_models.cost import roofline_cost
from hw_models.machine import load_machine
from hw_models.stack.row_kernels import block_reduce_cycles, block_row, softmax_block_threads, warp_row
from hw_models.stack.spec import load_stack
from sim.core import graph as g
from sim.core.errors import ConfigError
from sim.core.graph import Op, TensorUse
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import load_model

FP16 = FormatPolicy("fp16", "fp16", "fp16", ())


def _softmax(rows: int, row: int) -> Op:
    n = rows * row
    x = TensorUse("s", "act", (1, rows, 1, row), "fp16", 2 * n)
    y = TensorUse("p", "act", (1, rows, 1, row), "fp16", 2 * n)
    return Op("L0.softmax", g.SOFTMAX, 5 * n, (x,), (y,), (("heads", rows), ("q_len", 1), ("kv_len", row)), "fp16", 0)


def _cost(op: Op) -> float:
    m = load_machine("h200")
    return roofline_cost(op, m.units["gpu"], "gpu", m.memory["hbm"], stack=load_stack("torch-eager")).duration_s


def test_dispatch_threshold():
    """SoftMax.cu: dim <= 2048 runs the warp kernel (next_pow2 / 32 values per lane), 2049 the block
    kernel of min(dim, 1024) threads rounded to a warp: ceil(dim / 1024) values per thread."""
    assert [warp_row(40, n) for n in (2048, 2049)] == [64, 0]
    assert [block_row(40, n) for n in (2048, 2049, 3072, 3073, 9216, 9217)] == [0, 3, 3, 4, 9, 10]
    assert [softmax_block_threads(n) for n in (100, 1000, 2049)] == [128, 1024, 1024]


def test_block_regime_by_hand():
    """4 rows of 3000 fp16 values under torch-eager on the h200 preset.
    Block: 1024 threads = 32 warps, ceil(3000 / 1024) = 3 values per thread.
    One reduction: 5 x (24 shfl + 4 alu) = 140, 3 x (22 + 2 x 32) = 258 barrier, 2 x (19 + 23) = 84
    shared memory: 482 cycles; two: 964 cycles / 1.98 GHz = 486.87 ns.
    Walk: 3 x 85.1 ns = 255.3 ns. Serial 742.17 ns beats the bytes (2 x 48 kB x traffic 2 /
    (4.13 TB/s x 0.8) = 58 ns). Op: 2 kernels x 0.937 us floor + 742.17 ns = 2616.17 ns."""
    assert block_reduce_cycles(32, 24, 4, 23, 19, 22, 2) == 482
    assert _cost(_softmax(4, 3000)) == pytest.approx(2 * 0.937e-6 + 3 * 85.1e-9 + 964 / 1.98e9, rel=1e-12)
    assert _cost(_softmax(4, 3000)) == pytest.approx(2616.17e-9, abs=0.01e-9)


def test_warp_regime_unchanged_at_the_threshold():
    """At 2048 the stack still charges the warp walk alone: 2 x floor + 64 x 85.1 ns."""
    assert _cost(_softmax(4, 2048)) == pytest.approx(2 * 0.937e-6 + 64 * 85.1e-9, rel=1e-12)


def test_block_regime_grows_with_the_row():
    """Within the block regime the walk only lengthens (ceil(dim / 1024) values): never cheaper."""
    costs = [_cost(_softmax(40, n)) for n in range(2049, 20_001, 97)]
    assert all(b >= a for a, b in zip(costs, costs[1:]))
    assert costs[-1] > costs[0]


def test_the_kernel_switch_is_cheaper_as_measured():
    """Not monotone at 2048 -> 2049, as on the H200: the warp kernel walks 64 values per lane
    (llama2-13b b8 decode at kv 1025-1032: softmax_warp_forward 6.24 us median) where the block
    kernel walks 3 (kv 2049-2056: cunn_SoftMaxForwardReg 2.46 us). The model's drop: 64 x 85.1 ns
    walk -> 3 x 85.1 ns + 486.87 ns of reductions."""
    drop = _cost(_softmax(40, 2048)) - _cost(_softmax(40, 2049))
    assert drop == pytest.approx(64 * 85.1e-9 - 3 * 85.1e-9 - 964 / 1.98e9, rel=1e-9)


def test_decode_softmax_of_llama2_13b_past_2048():
    """The lowered decode softmax (Llama-2-13B, batch 1, 40 heads) at a 2049-long row costs the
    hand figure of test_block_regime_by_hand: 2616.17 ns (its bytes, 2 x 164 kB x 2 / 3.30 TB/s
    = 0.2 us, stay under the walk)."""
    graph = lower(load_model("llama2-13b"), "decode", 1, 1, 2049, FP16, False, num_layers=1)
    op = graph.op("L0.softmax")
    assert op.reads[0].shape[-1] == 2049
    assert _cost(op) == pytest.approx(2616.17e-9, abs=0.01e-9)


def test_calibrated_preset_keeps_the_block_figures():
    """h200_calibrated lays its fitted per_s on torch-eager's softmax; the cited block stays."""
    from hw_models.stack.spec import stack_for
    stack = stack_for("torch-eager", load_machine("h200_calibrated"))
    assert stack.ops["softmax"].serial.block == load_stack("torch-eager").ops["softmax"].serial.block


def test_cuda_graph_replay_runs_the_same_block_kernel():
    """torch-cudagraph replays torch-eager's kernels: the same block softmax figures."""
    assert load_stack("torch-cudagraph").ops["softmax"].serial == load_stack("torch-eager").ops["softmax"].serial


_BLOCK = ("clock_hz: 1.98 GHz, shfl_cycles: 24, alu_cycles: 4, smem_load_cycles: 23, smem_store_cycles: 19, "
          "barrier_cycles: 22, barrier_cycles_per_warp: 2")


@pytest.mark.parametrize("work, block, key", [
    ("row_reduce", _BLOCK, r"ops\.softmax\.serial: block: only the warp_row"),
    ("warp_row", _BLOCK.replace("shfl_cycles: 24", "shfl_cycles: 0"), r"ops\.softmax\.serial\.block\.shfl_cycles"),
    ("warp_row", _BLOCK.replace("1.98 GHz", "fast"), r"ops\.softmax\.serial\.block\.clock_hz"),
    ("warp_row", _BLOCK + ", shfl: 3", r"ops\.softmax\.serial\.block\.shfl: unknown key"),
    ("warp_row", _BLOCK.replace(", barrier_cycles: 22", ""), r"ops\.softmax\.serial\.block\.barrier_cycles"),
    ("warp_row", _BLOCK.replace("barrier_cycles_per_warp: 2", "barrier_cycles_per_warp: -1"),
     r"ops\.softmax\.serial\.block\.barrier_cycles_per_warp"),
])
def test_bad_block_figures_are_one_line(tmp_path, work, block, key):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\ncite: t\nhost_launch_s: 1 us\nfloor_s: 1 us\n"
                    f"ops: {{softmax: {{serial: {{work: {work}, per_s: 1 ns, block: {{{block}}}}}}}}}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: " + key) as exc:
        load_stack(str(path))
    assert "\n" not in str(exc.value)

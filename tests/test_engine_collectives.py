"""Collectives as the engines run them (hw_models.network.engine_collectives): NCCL's fitted
protocol lines and the engines' one-shot / two-shot custom all-reduce."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hw_models.network.collectives import ALGORITHMS, collective_s
from hw_models.network.engine_collectives import (ONE_SHOT, TWO_SHOT, custom_all_reduce_s, custom_kernel,
                                                  nccl_s, node_fits)
from hw_models.network.topology import load_topology
from sim.core.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024


def test_engine_thresholds_from_source():
    """TensorRT-LLM AllreduceOp::selectImplementation and vLLM CustomAllreduce::allreduce (module doc)."""
    assert custom_kernel("trtllm", 15 * MiB, 2) == ONE_SHOT and custom_kernel("trtllm", 17 * MiB, 2) is None
    assert custom_kernel("trtllm", 999_999, 4) == ONE_SHOT and custom_kernel("trtllm", 1_000_000, 4) == TWO_SHOT
    assert custom_kernel("trtllm", 499_999, 8) == ONE_SHOT and custom_kernel("trtllm", 500_000, 8) == TWO_SHOT
    assert custom_kernel("trtllm", 9 * MiB, 8) is None
    assert custom_kernel("vllm", 4 * MiB, 2) == ONE_SHOT and custom_kernel("vllm", 8 * MiB, 2) is None
    assert custom_kernel("vllm", 511 * 1024, 4) == ONE_SHOT and custom_kernel("vllm", 512 * 1024, 4) == TWO_SHOT
    assert custom_kernel("vllm", 255 * 1024, 8) == ONE_SHOT and custom_kernel("vllm", 256 * 1024, 8) == TWO_SHOT


def test_one_shot_floor_and_slope():
    """One-shot: latency + (n-1) S / B, with dgx_h100's fitted TensorRT-LLM line at 8 ranks."""
    line = node_fits("dgx_h100").custom["trtllm"][8][ONE_SHOT]
    for s in (1024.0, 256 * 1024.0):
        assert custom_all_reduce_s("dgx_h100", "trtllm", s, 8) == pytest.approx(
            line.latency_s + 7 * s / line.bandwidth_bytes_per_s)


def test_nccl_is_the_faster_protocol_line():
    """Two lines per group size: the small-message one wins at 4 KB, the large-message one at 256 MB."""
    topo = load_topology("dgx_h100")
    lo, hi = node_fits("dgx_h100").nccl["all_reduce"][8]
    steps, factor = 14.0, 2 * 7 / 8   # ring all-reduce over 8 ranks
    for s in (4096.0, 256 * MiB):
        want = min(steps * ln.latency_s + factor * s / ln.bandwidth_bytes_per_s for ln in (lo, hi))
        assert collective_s(topo, "all_reduce", s, 8, "nccl") == pytest.approx(want)
        assert nccl_s("dgx_h100", "all_reduce", s, 8, steps, factor) == pytest.approx(want)


@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "tree"])
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_never_faster_with_more_bytes(algorithm, ranks):
    """Monotone in the message size within each kernel the engine picks. At the engine's own
    switch (two-shot -> NCCL at 8 MiB) the next kernel may be faster: that is the engine's
    threshold, kept as its source has it; the drop there is bounded (< 15%)."""
    topo = load_topology("dgx_h100")
    sizes = np.geomspace(256, 1 << 30, 300)
    engine = {"trtllm_custom": "trtllm", "vllm_custom": "vllm", "sglang_custom": "sglang"}.get(algorithm)
    regime = [custom_kernel(engine, s, ranks) if engine else None for s in sizes]
    t = [collective_s(topo, "all_reduce", float(s), ranks, algorithm) for s in sizes]
    for a, b, ra, rb in zip(t, t[1:], regime, regime[1:]):
        assert b >= a if ra == rb else b >= 0.85 * a


def test_custom_beats_ring_on_small_messages_and_falls_back_above_limit():
    topo = load_topology("dgx_h100")
    assert collective_s(topo, "all_reduce", 64 * 1024, 8, "trtllm_custom") < collective_s(topo, "all_reduce",
                                                                                          64 * 1024, 8, "ring")
    big = 64 * MiB
    assert collective_s(topo, "all_reduce", big, 8, "trtllm_custom") == collective_s(topo, "all_reduce", big, 8, "nccl")


def test_topology_without_fit_keeps_the_ring():
    """A node with no fit of its own nor a node it takes them from (the test topology: HGX H200's datasheet NVSwitch)
    pays its datasheet ring under every algorithm (hgx_h200 and hgx_b200 take DGX H100's:
    test_a_node_of_the_same_fabric_takes_the_measured_collectives)."""
    topo = load_topology(ROOT / "tests" / "data" / "topologies" / "nvswitch4_datasheet.yaml")
    assert node_fits(topo.name) is None and topo.collectives_of is None and topo.collectives_bandwidth_scale == 1.0
    for algorithm in ("nccl", "vllm_custom"):
        assert collective_s(topo, "all_reduce", 1e6, 8, algorithm) == collective_s(topo, "all_reduce", 1e6, 8, "ring")


def test_shipped_fits_are_the_scripts_output(shared_validation):
    if not (shared_validation / "aic" / "comm_h100.csv.gz").is_file():
        pytest.skip("shared/validation/aic is not present")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "fit_kernels.py"), "--check"], capture_output=True,
                       text=True, env={"SIM_SHARED_VALIDATION": str(shared_validation), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr


def _tp_mapper(tmp_path, stack: str, algorithm: str | None = None):
    from hw_models.machine import load_machine
    from hw_models.registry import mapper_for
    from sim.core.model import load_model
    from sim.core.workload import workload_from_dict
    parallel = {"tp": 4, "topology": "dgx_h100", **({"algorithm": algorithm} if algorithm else {})}
    w = workload_from_dict(dict(name="t", model="llama2-70b", batch=8, prompt_len=512, gen_len=4, flash_attention=True,
                                stack=stack, parallel=parallel), str(tmp_path / "t.yaml"))
    return mapper_for(load_machine("h100_sxm"), w, load_model("llama2-70b"))


def test_stack_selects_the_algorithm_and_the_plan_overrides_it(tmp_path):
    """A stack's `all_reduce` is the TP group's algorithm unless `parallel.algorithm` names one: the shipped
    engine stacks run their own custom all-reduce, vllm-v0 the ring (its comment: the held-out end-to-end check)."""
    ringed = tmp_path / "trtllm-ring.yaml"
    ringed.write_text("name: trtllm-ring\nbase: trtllm\nall_reduce: ring\n")
    assert _tp_mapper(tmp_path, "trtllm").algorithm == "trtllm_custom"
    assert _tp_mapper(tmp_path, "vllm").algorithm == _tp_mapper(tmp_path, "sglang").algorithm == "vllm_custom"
    assert _tp_mapper(tmp_path, "vllm-v0").algorithm == "ring"
    assert _tp_mapper(tmp_path, str(ringed)).algorithm == "ring"
    assert _tp_mapper(tmp_path, "trtllm", "nccl").algorithm == "nccl"
    ring = _tp_mapper(tmp_path, str(ringed)).step("decode", 1, 513).time_s
    fast = _tp_mapper(tmp_path, "trtllm").step("decode", 1, 513).time_s
    assert fast < ring    # 80 layers x 2 all-reduces of 8 x 8192 x 2 B: one-shot ~3 us, ring ~17 us each


def test_unknown_all_reduce_in_a_stack_is_refused(tmp_path):
    from hw_models.stack.spec import load_stack
    from sim.core.errors import ConfigError
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nbase: trtllm\nall_reduce: fastest\n")
    with pytest.raises(ConfigError, match="unknown collective algorithm"):
        load_stack(str(bad))


def test_unknown_custom_all_reduce_engine_names_the_known_ones():
    """Kills engine_collectives.custom_kernel__mutmut_43 (the refusal without its message): an engine with no
    custom all-reduce is refused in a line naming the three that have one."""
    with pytest.raises(ConfigError, match="unknown custom all-reduce 'deepspeed'; engines: trtllm, vllm, sglang"):
        custom_kernel("deepspeed", 1024.0, 2)


def test_trtllm_kernel_at_its_workspace_and_at_three_ranks():
    """TensorRT-LLM's AUTO choice (module doc, allreduceOp.cpp): a message that fills the 2-rank workspace
    (16 MiB) exactly still fits it, so it runs one-shot, and one byte more goes to NCCL; only 2 ranks run
    one-shot at every size: 3 ranks (up to 4) take two-shot from 1e6 B, so 2e6 B is two-shot and 5e5 B one-shot."""
    MiB = 1024 * 1024
    assert custom_kernel("trtllm", 16 * MiB, 2) == ONE_SHOT
    assert custom_kernel("trtllm", 16 * MiB + 1, 2) is None
    assert custom_kernel("trtllm", 2e6, 3) == TWO_SHOT
    assert custom_kernel("trtllm", 5e5, 3) == ONE_SHOT


def test_release_reads_rc_and_post_numbers():
    """'1.3.0rc10' is release (1, 3, 0, 10), after 1.3.0rc5 = (1, 3, 0, 5): the rc number is a part of its own,
    as 'post' is ('0.5.6.post2' -> (0, 5, 6, 2))."""
    from hw_models.network.engine_collectives import release
    assert release("1.3.0rc10") == (1, 3, 0, 10)
    assert release("1.3.0rc10") > release("1.3.0rc5")
    assert release("0.5.6.post2") == (0, 5, 6, 2)


def test_a_node_of_the_same_fabric_takes_the_measured_collectives():
    """A capacity planner's trial: hgx_h200 and hgx_b200 (no NCCL table) paid the datasheet ring, 5 us a step, so
    their TP 8 all-reduce was several times DGX H100's and TP 8 decoded slower than TP 4. `collectives_of:
    dgx_h100` gives them DGX H100's measured lines: hgx_h200 (NVLink 4, 450 GB/s per direction, as DGX H100) the
    same time for every algorithm and size; hgx_b200 (NVLink 5, 900 GB/s) the same latency and twice the
    bandwidth, so by hand a fitted line's t = alpha + bytes / B becomes alpha + bytes / 2B: at 4 KB (latency-bound)
    within 2% of DGX H100's (and below it), at 64 MB (bandwidth-bound) close to half."""
    from hw_models.network.collectives import ALL_REDUCE, collective_s, parameters
    from hw_models.network.topology import load_topology

    h100, h200, b200 = (load_topology(n) for n in ("dgx_h100", "hgx_h200", "hgx_b200"))
    assert h200.collectives_node == "dgx_h100" and b200.collectives_node == "dgx_h100"
    assert h200.collectives_bandwidth_scale == 1.0 and b200.collectives_bandwidth_scale == 2.0
    for algorithm in ("ring", "nccl", "vllm_custom", "trtllm_custom"):
        for nbytes in (4096, 1 << 20, 64 << 20):
            for ranks in (2, 4, 8):
                assert collective_s(h200, ALL_REDUCE, nbytes, ranks, algorithm) == \
                    collective_s(h100, ALL_REDUCE, nbytes, ranks, algorithm)
    # the ring with the fitted line: steps x alpha + factor x S / (2 B)
    alpha, bw = parameters(h100, ALL_REDUCE, 8)
    assert parameters(b200, ALL_REDUCE, 8) == (alpha, pytest.approx(2 * bw))
    assert collective_s(b200, ALL_REDUCE, 64 << 20, 8, "ring") == \
        pytest.approx(14 * alpha + 2 * 7 / 8 * (64 << 20) / (2 * bw))
    for algorithm in ("nccl", "vllm_custom", "trtllm_custom"):
        small = [collective_s(t, ALL_REDUCE, 4096, 8, algorithm) for t in (h100, b200)]
        assert 0.98 * small[0] < small[1] < small[0]
        big = [collective_s(t, ALL_REDUCE, 64 << 20, 8, algorithm) for t in (h100, b200)]
        assert 0.5 * big[0] < big[1] < 0.6 * big[0]



def test_a_nodes_own_fit_is_not_scaled_and_an_unfitted_node_has_no_custom_line(tmp_path):
    """collectives_bandwidth_scale applies to lines taken from another node only: a topology with its own `fitted:`
    uses them as fitted, whatever its collectives_of says. And a node name without engine fits (hgx_b200's own)
    has no custom all-reduce line: None, the caller's cue to take the named node's or NCCL's."""
    import yaml

    from hw_models.network.collectives import parameters

    raw = yaml.safe_load((ROOT / "hw_models" / "network" / "presets" / "dgx_h100.yaml").read_text())
    raw.update(name="own_fit", collectives_of="dgx_h100")
    raw["interconnect"]["bandwidth_bytes_per_s"] = "900 GB/s"   # twice dgx_h100's: a scale of 2 were it applied
    path = tmp_path / "own_fit.yaml"
    path.write_text(yaml.safe_dump(raw))
    topo = load_topology(path)
    assert topo.collectives_bandwidth_scale == 2.0
    fit = load_topology("dgx_h100").fitted["all_reduce"][8]
    assert parameters(topo, "all_reduce", 8) == (fit.latency_s, fit.bandwidth_bytes_per_s)
    assert custom_all_reduce_s("hgx_b200", "vllm", 1e6, 8) is None


def test_a_node_without_a_fitted_ring_runs_its_ring_on_nccls_measured_lines():
    """A parallelism trial: rtx_pro_6000_x8_pcie has no fitted ring, so the default ring paid the preset's
    unverified 10 us a step (14 steps at 8 ranks: 142 us for 16 KiB against NCCL's measured 27 us), and Llama-2-70B
    TP 8 read slower than TP 4. Where the node has NCCL's measured lines the ring takes them, as `nccl` does; a
    node with a fitted ring of its own keeps it."""
    pcie = load_topology("rtx_pro_6000_x8_pcie")
    for ranks in (2, 4, 8):
        assert collective_s(pcie, "all_reduce", 16384, ranks) == collective_s(pcie, "all_reduce", 16384, ranks, "nccl")
    assert collective_s(pcie, "all_reduce", 16384, 8) < 40e-6
    dgx = load_topology("dgx_h100")   # vidur's fitted ring, unchanged: 14 x 2.23 us + 1.75 x 16 KiB / 348.8 GB/s
    assert collective_s(dgx, "all_reduce", 16384, 8) == pytest.approx(14 * 2.23e-6 + 1.75 * 16384 / 348.8e9, rel=0.02)


@pytest.mark.parametrize("preset", ["rtx_pro_6000_x8_pcie", "dgx_h100"])
def test_a_faster_link_in_a_copy_of_a_measured_node_is_faster(tmp_path, preset):
    """A what-if of a measured node's link: its file copied with 4x the interconnect bandwidth, its name kept.
    The measured lines (NCCL's, engine_collectives.yaml, for the RTX PRO 6000 node; the file's own fitted ring for
    DGX H100) carry their achieved share of the link across, as a node taking another's (collectives_of) does:
    a 256 MiB all-reduce's bandwidth term is 4x shorter, a 4 KiB one's latency unchanged. A monotonicity trial's
    copies at 0.25x and 4x had given the shipped node's time to the digit. The shipped node is its own scale 1."""
    import re
    from hw_models.network.topology import PRESET_DIR
    text = (PRESET_DIR / f"{preset}.yaml").read_text()
    bw = re.search(r"^  bandwidth_bytes_per_s: ([\d.]+) GB/s", text, re.M)
    fast = tmp_path / f"{preset}.yaml"
    fast.write_text(text.replace(bw.group(0), f"  bandwidth_bytes_per_s: {4 * float(bw.group(1))} GB/s", 1))
    shipped, copy = load_topology(preset), load_topology(str(fast))
    assert shipped.collectives_bandwidth_scale == shipped.own_fit_bandwidth_scale == 1.0
    big, small = 256 * 2**20, 4096
    for algorithm in ("ring", "nccl"):
        t0, t4 = (collective_s(t, "all_reduce", big, 8, algorithm) for t in (shipped, copy))
        l0, l4 = (collective_s(t, "all_reduce", small, 8, algorithm) for t in (shipped, copy))
        assert t4 < t0 / 3 and l4 == pytest.approx(l0, rel=0.05)

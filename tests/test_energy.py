"""Board power as idle + dynamic energy (hw_models.machine.Unit.idle_power_w, energy_j_per_flop):
energy by hand on the h200 preset, the phase split, and the decode power against a published
H200 measurement. Presets without the fields keep TDP x busy time (tests/data/golden pins them)."""

from __future__ import annotations

import re

import pytest

from hw_models.machine import load_machine, machine_from_dict, raw_machine
from hw_models.registry import mapper_for, simulate
from sim.apps.serve import mlenergy_fit as F
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import load_model
from sim.core.graph import ATTENTION, ATTN_CONTEXT, ATTN_SCORE, GEMM
from sim.core.workload import workload_from_dict

MATRIX = (GEMM, ATTN_SCORE, ATTN_CONTEXT, ATTENTION)


def _run(hw: str, gen_len: int = 2, **kw):
    w = workload_from_dict(dict(name="e", model="llama2-7b", batch=1, prompt_len=256, gen_len=gen_len,
                                formats=dict(weights="fp16", activations="fp16", kv_cache="fp16"), **kw), "test")
    return simulate(w, load_machine(hw), exhaustive=True)


def test_decode_step_energy_by_hand():
    """One decode step (kv 257): idle 117.1 W x its time + activity 230 W x the GPU's busy time
    + bytes x 4e-11 J/B + fp16 FLOPs x 0.702e-12 J + vector FLOPs x 3 x that (h200.yaml's figures: the
    fit of scripts/fit_energy.py on H100 runs, and its rule for CUDA-core ops)."""
    r = _run("h200")
    graph = lower(load_model("llama2-7b"), "decode", 1, 1, 257, FormatPolicy("fp16", "fp16", "fp16", ()), False)
    ops = list(graph.ops())
    j_fp16 = 0.702e-12
    dynamic = (sum(o.bytes for o in ops) * 4.0e-11 + sum(o.flops for o in ops if o.kind in MATRIX) * j_fp16
               + sum(o.flops for o in ops if o.kind not in MATRIX) * F.sig3(3 * j_fp16))
    w = workload_from_dict(dict(name="e", model="llama2-7b", batch=1, prompt_len=256, gen_len=2,
                                formats=dict(weights="fp16", activations="fp16", kv_cache="fp16")), "test")
    step = mapper_for(load_machine("h200"), w, w.model_config_()).step("decode", 1, 257, exhaustive=True)
    assert step.time_s == pytest.approx(r.tpot_s, rel=1e-12)
    expect = 117.1 * r.tpot_s + 230.0 * step.busy_s["gpu"] + dynamic
    assert r.decode_energy_per_token_j == pytest.approx(expect, rel=1e-9)
    total = r.energy_per_token_j * r.batch * r.gen_len
    assert r.prefill_energy_per_token_j * 256 + r.decode_energy_per_token_j == pytest.approx(total, rel=1e-12)


def _decode_j(machine) -> float:
    """Joules of 16 decode steps (llama2-7b fp16 batch 1 after a 256-token prompt): two runs' difference."""
    def total(gen: int) -> float:
        w = workload_from_dict(dict(name="e", model="llama2-7b", batch=1, prompt_len=256, gen_len=gen,
                                    formats=dict(weights="fp16", activations="fp16", kv_cache="fp16")), "test")
        return simulate(w, machine, detail=False).energy_per_token_j * gen
    return total(17) - total(1)


def test_decode_energy_against_issue_15s_held_out_measurement():
    """Out of sample (decode was never fitted on an H200): issue 15 reports the H200's measured decode
    energy per token at about half of the old model's (700 W x busy + DRAM bytes). The board-power model
    (activity power fitted on ML.ENERGY's H100 runs) reads ~0.62 of the old model, ~+25% against that
    statement (the model before issue 33 read 0.27, -45%); held within 30%. Ma et al. 2026's published
    137-300 W H200 decode range is missed: the model says ~450 W (docs/energy.md)."""
    raw = raw_machine("h200")
    for key in ("idle_power_w", "active_power_w", "energy_j_per_flop"):
        raw["units"]["gpu"].pop(key)
    ratio = _decode_j(load_machine("h200")) / _decode_j(machine_from_dict(raw, "h200 (old energy model)"))
    assert abs(ratio / 0.5 - 1) < 0.30


def test_presets_without_the_fields_keep_the_old_model():
    r = _run("l40s")   # (a100_80g and a6000 have had the board-power model since the A100 rule, scripts/fit_energy.py)
    assert r.prefill_energy_per_token_j is None and "decode_energy_per_token_j" not in r.metrics()
    # TDP x busy time + DRAM bytes: at least 300 W x the run's GPU-busy time
    assert r.energy_per_token_j * r.gen_len >= 300 * r.utilization["gpu"] * r.e2e_s


def test_negative_flop_energy_is_one_line(tmp_path):
    from pathlib import Path
    from sim.core.errors import ConfigError
    hw = tmp_path / "hw.yaml"
    src = (Path(__file__).resolve().parent.parent / "hw_models/presets/h200.yaml").read_text()
    bad = re.sub(r"fp32: ([0-9.]+e-12) ", r"fp32: -\1 ", src, count=1)   # the J/FLOP entry, whatever the fit gave
    assert bad != src
    hw.write_text(bad)
    with pytest.raises(ConfigError, match=r"energy_j_per_flop.*fp32.*>= 0"):
        load_machine(str(hw))


def test_a_dequantizing_gemm_draws_the_energy_of_its_dequantization():
    """An MXFP4 weight GEMM on the A6000 widens every weight to fp16 (2 vector FLOPs an element,
    compute_path.DEQUANT_FLOPS_PER_ELEMENT), which took time but drew no energy (a physics audit: MXFP4 decode 3.1%
    low). By hand, q_proj of Llama-2-13B at batch 1: bytes x 70 pJ + 2 x 5120^2 FLOPs x 1.21 pJ (fp16) + 2 x 5120^2
    dequant FLOPs at the vector J/FLOP, set here to 1 pJ, below the preset's largest entry (fp32's 3.63 pJ), which a
    format without an entry is charged."""
    from sim.apps.api import load_workload, simulate as api_simulate
    from tests.conftest import ROOT
    a6000 = load_machine("a6000", {"units.gpu.energy_j_per_flop.vector": 1e-12})
    r = api_simulate(load_workload(ROOT / "workloads" / "llama13b_decode_mxfp4.yaml"), a6000)
    q = next(o for o in r.decode_ops if o.name == "L0.q_proj")
    assert "dequant" in q.path and q.flops == 2 * 5120 * 5120
    hand = q.bytes * 70e-12 + q.flops * 1.21e-12 + 2 * 5120 * 5120 * 1e-12
    assert q.energy_j == pytest.approx(hand, rel=1e-9)

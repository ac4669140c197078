"""scripts/validation_stack_tables.py: the per-machine stack tables of docs/validation.md are
computed from their per-op records (recomputed here by hand), out of sample. The A6000 part
skips without ../shared/validation; the CPU part runs on traces/cpu (in the repository)."""

import statistics
import sys

import pytest

from hw_models.machine import load_machine
from sim.apps.trace.parser import load_trace
from sim.apps.trace.validate import OpRow, StepRow, Validation
from tests.conftest import ROOT, SHARED_VALIDATION

if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))
import validation_stack_tables as tables  # noqa: E402  (scripts/)

A6000 = SHARED_VALIDATION / "maveriq-a6000" / "vidur_profiler_traces" / "Llama-2-7b-hf"
A6000_FIT = {1, 16, 128, 1024}   # scripts/validation_report.py A6000_FIT_TOKENS


def _row(op, kind, meas, sim, step="s0"):
    return OpRow("t.csv", step, op, kind, meas, sim)


def test_layer_and_kind_cells_by_hand():
    # layer 0: measured 10 + 30 = 40, simulated 12 + 33 = 45 -> +12.5%; layer 1: 20 -> 15, -25%.
    ops = [_row("L0.q_proj", "gemm", 10, 12), _row("L0.attn_norm", "norm", 30, 33), _row("L1.q_proj", "gemm", 20, 15),
           _row("embed", "embed", 5, 50)]           # outside the layers: not in any layer sum
    v = Validation("m", ops=ops, steps=[StepRow("t.csv", "s0", 1, 100.0, 90.0, "wall")])
    assert sorted(tables.layer_errors(v)) == pytest.approx([-0.25, 0.125])
    # whole_step: one layer of every op, 65 -> 110
    assert tables.layer_errors(v, whole_step=True) == pytest.approx([45 / 65])
    cfg = [tables.Config("x", v)]
    kinds = {r[0]: r for r in tables.kind_rows(cfg)}
    assert kinds["gemm"][1:] == ["2", f"{(0.2 + 0.25) / 2:.1%}"]       # |+20%| and |-25%|
    assert kinds["**overall**"][2] == f"**{(0.2 + 0.1 + 0.25 + 9.0) / 4:.1%}**"
    assert tables.error_rows(cfg)[0] == ["x", "2", "18.8%", "25.0%", "1", "10.0%", "10.0%"]


def _recheck(configs, whole_step):
    """One MAPE cell of each table recomputed from the configuration's per-op records."""
    for c, row in zip(configs, tables.error_rows(configs, whole_step)):
        sums = {}
        for r in c.validation.ops:
            hit = tables.LAYER.match(r.op)
            if hit or whole_step:
                key = (r.source, r.step, "" if whole_step else hit.group(1))
                m, s = sums.get(key, (0.0, 0.0))
                sums[key] = (m + r.measured_s, s + r.simulated_s)
        assert row[2] == f"{statistics.fmean(abs(s - m) / m for m, s in sums.values()):.1%}"
    kinds = tables.kind_rows(configs)
    for k_row in kinds[:-1]:
        for c, cell in zip(configs, k_row[2:]):
            errs = [abs(r.simulated_s - r.measured_s) / r.measured_s for r in c.validation.ops if r.kind == k_row[0]]
            assert cell == f"{statistics.fmean(errs):.1%}" and len(errs) == int(k_row[1])


@pytest.mark.skipif(not A6000.is_dir(), reason="../shared/validation/maveriq-a6000 absent")
def test_a6000_tables_recompute_and_are_out_of_sample():
    traces = [load_trace(p)[0] for p in sorted(A6000.glob("*.json"))]
    fit = [t for t in traces if t.steps[0].tokens in A6000_FIT]
    test = [t for t in traces if t not in fit]
    base = load_machine("a6000")
    configs, _ = tables.a6000_configs(fit, test, base, load_machine("a6000_calibrated"))
    for c in configs:   # every reported row is a test-set token count
        assert {r.tokens for r in c.validation.ops} == {512, 2048, 4096}
    _recheck(configs, whole_step=True)


def test_cpu_tables_recompute():
    files = sorted((ROOT / "traces" / "cpu").glob("*fp32*p*.ops.csv"))
    traces = [load_trace(f)[0] for f in files]
    fit = [t for t in traces if t.meta.get("prompt") == 128 and "llama2-7b" in t.source]
    test = [t for t in traces if t.meta.get("prompt") == 512 and "_b1_" in t.source]
    if not fit or not test:
        pytest.skip("traces/cpu lacks the fp32 prompt-128 / prompt-512 traces")
    base = load_machine("cpu_host")
    configs, sc = tables.cpu_configs(fit, test, base, load_machine("cpu_host_calibrated"), None)
    assert sc.stack == "torch-eager" and all(len(c.validation.ops) == len(configs[0].validation.ops) for c in configs)
    _recheck(configs, whole_step=False)

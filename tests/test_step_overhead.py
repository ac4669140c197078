"""The engine's host work per iteration (hw_models.stack.step_overhead, the vllm stacks' step_overhead):
the fitted curve against vidur's table, steps by hand (serial and overlapped), plain torch
unaffected, serving's surrogate vs exact, and bad stack entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from hw_models.machine import load_machine
from hw_models.registry import mapper_for, simulate
from hw_models.stack.spec import load_stack
from hw_models.stack.step_overhead import StepOverhead
from sim.apps.serve.run import serve
from sim.apps.serve.iteration import features
from sim.apps.serve.stepcost import ExactCost
from sim.core.errors import ConfigError
from sim.core.model import load_model
from sim.core.schema import validate_mapping
from sim.apps.serve.spec import ServeFile
from sim.core.workload import workload_from_dict
from tests.robust_helpers import refused

ROOT = Path(__file__).resolve().parent.parent
# vllm.yaml's knots as fitted (ms). scripts/fit_step_overhead.py reports MAPE 5.5% on A100 (in sample) and
# 63.2% on A40 (out of sample, another host): the ceilings below sit just above them, so the curve may
# improve but not get worse.
KNOTS_MS = {8: 1.183, 32: 2.142, 64: 3.547, 128: 6.218}
TP_EXTRA_MS = 0.747
# vllm.yaml's per_seq_s (V1's host work per sequence beyond vidur's V0 curve; scripts/fit_v1_host.py): vllm-v0 has 0.
V1_PER_SEQ_MS = 0.060
A100_MAPE_MAX, A40_MAPE_MAX = 0.06, 0.65


def vllm_curve():
    """vidur's V0 curve as vllm.yaml ships it (vllm-v0 inherits it, with no V1 per-sequence term)."""
    return load_stack("vllm-v0").step_overhead


def hand_host_s(b: int, devices: int = 1, v1: bool = False) -> float:
    """vllm.yaml's curve by hand: linear between knots, the end segments extended; `v1`: with vllm's
    per-sequence term (vllm-v0 has none)."""
    xs = list(KNOTS_MS)
    i = 0 if b < 32 else 1 if b < 64 else 2
    (x0, x1), (y0, y1) = (xs[i], xs[i + 1]), (KNOTS_MS[xs[i]], KNOTS_MS[xs[i + 1]])
    ms = y0 + (b - x0) * (y1 - y0) / (x1 - x0)
    return (ms + (TP_EXTRA_MS if devices > 1 else 0.0) + (V1_PER_SEQ_MS * b if v1 else 0.0)) / 1e3


def test_stack_curve_is_the_fit_and_matches_hand_values():
    c = vllm_curve()
    assert c.seqs == list(KNOTS_MS) and c.seconds == pytest.approx([v / 1e3 for v in KNOTS_MS.values()])
    assert load_stack("vllm").step_overhead.overlap and not c.overlap
    # 1 sequence: the 8-32 segment extended down; 16 inside it; 256 the 64-128 segment extended up.
    assert c.host_s(1) == pytest.approx((1.183 - 7 * (2.142 - 1.183) / 24) / 1e3)
    assert c.host_s(16) == pytest.approx((1.183 + 8 * (2.142 - 1.183) / 24) / 1e3)
    assert c.host_s(256) == pytest.approx((6.218 + 128 * (6.218 - 3.547) / 64) / 1e3)
    assert c.host_s(16, devices=4) == pytest.approx(c.host_s(16) + TP_EXTRA_MS / 1e3)
    # vllm: the same curve and knots, plus 50 us per sequence (16 sequences: 0.800 ms more).
    v1 = load_stack("vllm").step_overhead
    assert v1.seqs == c.seqs and v1.seconds == c.seconds and v1.per_seq_s == pytest.approx(V1_PER_SEQ_MS / 1e3)
    assert v1.host_s(16, devices=4) == pytest.approx(c.host_s(16, devices=4) + 16 * V1_PER_SEQ_MS / 1e3)
    assert v1.host_s(256) == pytest.approx(hand_host_s(256, v1=True))


def test_curve_reproduces_vidur_a100_within_the_reported_error(shared_validation):
    from sim.apps.trace.engine_overhead import fit_curve, load_cpu_overheads, mape
    folder = shared_validation / "vidur" / "cpu_overhead"
    a100 = load_cpu_overheads(folder / "a100" / "cpu_overheads.csv")
    a40 = load_cpu_overheads(folder / "a40" / "cpu_overheads.csv")
    c = vllm_curve()
    assert mape(c, a100) <= A100_MAPE_MAX
    assert mape(c, a40) <= A40_MAPE_MAX       # out of sample: another host
    # Summed medians by hand, Llama-2-7B TP1 batch 64 (row 7): 1.021 + 0.606 + 0.824 + 1.061 ms.
    row = a100[(a100.model == "Llama-2-7b-hf") & (a100.batch_size == 64)].iloc[0]
    assert row.host_s == pytest.approx(3.512e-3, abs=2e-6)
    assert c.host_s(64) == pytest.approx(row.host_s, rel=0.02)
    refit = fit_curve(a100)
    assert refit.curve.seconds == pytest.approx(c.seconds, rel=0.005)
    assert refit.curve.tp_extra_s == pytest.approx(c.tp_extra_s, rel=0.01)


def workload(stack, batch=16, model="llama2-7b", gen=16):
    return workload_from_dict(dict(name="t", model=model, batch=batch, prompt_len=256, gen_len=gen,
                                   flash_attention=True, stack=stack), "t.yaml")


@pytest.mark.parametrize("batch", [1, 16, 96])
def test_decode_step_serial_adds_host_overlapped_takes_max(batch):
    """vllm-v0: device + host(b); vllm: max(device, host(b)); the device part is the same kernels."""
    h100 = load_machine("h100_sxm")
    serial = mapper_for(h100, workload("vllm-v0", batch), load_model("llama2-7b"))
    device = serial.step_overhead, serial.step("decode", 1, 300)
    serial.step_overhead = None
    dev = serial.step("decode", 1, 300)
    host = hand_host_s(batch)
    assert device[1].time_s == pytest.approx(dev.time_s + host, rel=1e-12)
    assert device[1].busy_s["host"] == pytest.approx(host)
    over = mapper_for(h100, workload("vllm", batch), load_model("llama2-7b")).step("decode", 1, 300)
    assert over.time_s == pytest.approx(max(dev.time_s, hand_host_s(batch, v1=True)), rel=1e-12)


def test_host_bound_when_the_device_step_is_short():
    """TinyLlama at 128 sequences on an H100: ~2 ms of kernels under 6.2 + 11.3 ms of host work."""
    h100 = load_machine("h100_sxm")
    m = mapper_for(h100, workload("vllm", 128, "tinyllama-1.1b"), load_model("tinyllama-1.1b"))
    step = m.step("decode", 1, 300)
    assert step.time_s == pytest.approx(hand_host_s(128, v1=True))
    r = simulate(workload("vllm", 128, "tinyllama-1.1b"), h100)
    e = r.extra["engine_host"]
    assert e["host_bound_decode_steps"] == 1.0 and e["host_s"] == pytest.approx(hand_host_s(128, v1=True))


@pytest.mark.parametrize("stack", ["torch-eager", "torch-cudagraph", None])
def test_plain_torch_has_no_engine(stack):
    h100 = load_machine("h100_sxm")
    m = mapper_for(h100, workload(stack), load_model("llama2-7b"))
    assert m.step_overhead is None and m.engine_host_s(16) == 0.0
    r = simulate(workload(stack), h100)
    assert "engine_host" not in r.extra
    assert not any(o.kind == "engine" for o in r.decode_ops)


def test_report_timeline_shows_the_host_task():
    h100 = load_machine("h100_sxm")
    r = simulate(workload("vllm-v0", 16), h100)
    ops = [o for o in r.decode_ops if o.kind == "engine"]
    assert len(ops) == 1 and ops[0].end_s - ops[0].start_s == pytest.approx(hand_host_s(16))
    kernels = [o for o in r.decode_ops if o.kind != "engine" and o.unit != "host"]
    assert min(o.start_s for o in kernels) >= ops[0].end_s     # serial: the kernels wait for it


def test_exact_iteration_cost_adds_the_host_work():
    f = serve_file("vllm-v0")
    cost = ExactCost(load_machine("a6000"), f, load_model("llama2-7b"))
    it = features([(1, 300)] * 12 + [(64, 64)])
    d, c = cost.device(it), cost(it)
    assert c[0] == pytest.approx(d[0] + hand_host_s(13))
    assert c[2 + cost.keys.index("host")] == pytest.approx(hand_host_s(13))


def serve_file(stack):
    # 60 requests: the exact run costs every iteration, and 120 spent 2.4-2.5 s of CPU per stack on the same
    # comparison (60: 1.35-1.47 s). Measured worst stat (sur/exact - 1) at 120 and 60 requests: vllm-v0
    # +0.25% and -0.14% (TTFT mean), vllm +0.16% and +0.43% (TTFT p99); host utilisation within 0.012%.
    s = dict(arrivals=dict(process="poisson", rate=6.0, num_requests=60, seed=5),
             lengths=dict(prompt=dict(dist="uniform", low=32, high=512), output=dict(dist="uniform", low=4, high=32)),
             scheduler=dict(kind="sarathi", max_num_batched_tokens=512))
    return validate_mapping(ServeFile, dict(name="t", model="llama2-7b", flash_attention=True, stack=stack,
                                            serving=s), "t.yaml", "a serving file")


@pytest.mark.parametrize("stack", ["vllm-v0", "vllm"])
def test_surrogate_within_one_percent_of_exact_with_the_engine(stack):
    a6000 = load_machine("a6000")
    _, exact = serve(serve_file(stack), a6000, exact=True)
    _, sur = serve(serve_file(stack), a6000)
    for m in ("ttft", "tpot"):
        for stat in ("mean", "p99"):
            assert sur["latency"][m][stat] == pytest.approx(exact["latency"][m][stat], rel=0.01), (m, stat)
    assert sur["utilization"]["host"] == pytest.approx(exact["utilization"]["host"], rel=0.01)
    if stack == "vllm-v0":   # serial: TPOT at least the host work of the smallest batch (one sequence)
        assert exact["latency"]["tpot"]["mean"] > hand_host_s(1)


@pytest.mark.parametrize("entry, key", [
    ("{seconds: [1 ms, 3 ms, 2 ms, 4 ms]}", "step_overhead.seconds: must not fall"),
    ("{seconds: [-1 ms, 1 ms, 2 ms, 3 ms]}", "step_overhead.seconds: must not be negative"),
    ("{seqs: [8, 8, 64, 128]}", "step_overhead.seqs: must be positive and strictly increasing"),
    ("{seqs: [8, 32, 64]}", "step_overhead: seqs has 3 points, seconds 4"),
    ("{tp_extra_s: -1 ms}", "step_overhead.tp_extra_s"),
    ("{overlap: sometimes}", "step_overhead.overlap"),
])
def test_bad_step_overhead_is_one_line(tmp_path, entry, key):
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\nbase: vllm\nstep_overhead: {entry}\n")
    with pytest.raises(ConfigError) as exc:
        load_stack(str(path))
    assert str(exc.value).startswith(f"{path}: ") and key in str(exc.value)


def test_bad_base_and_cli_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nbase: nosuch\n")
    with pytest.raises(ConfigError, match=rf"{path}: base: .*unknown software stack 'nosuch'"):
        load_stack(str(path))
    path.write_text("name: bad\nbase: vllm\nstep_overhead: {seconds: [1 ms, 3 ms, 2 ms, 4 ms]}\n")
    # In process (main()): exit 2 and one stderr line without a traceback, as a `sim` process gives.
    line = refused(capsys, ["run", str(ROOT / "workloads/llama2_7b_decode.yaml"), "--hw", "h100_sxm",
                            "--set", f"stack={path}", "-q"])
    assert "step_overhead.seconds" in line


def test_attention_groups_pay_the_host_work_once():
    """Data-parallel attention (sim.apps.serve.attention_dp): the groups' device costs combine
    (slowest group + experts), then one host term for all the instance's sequences, serial."""
    from types import SimpleNamespace
    from sim.apps.serve.attention_dp import GroupedCost
    so = load_stack("vllm-v0").step_overhead
    dense = SimpleNamespace(keys=["gpu"], op_level=False, device=lambda it: (1e-3 * len(it.seqs), 0.0, 1e-3 * len(it.seqs)),
                            cap=lambda t, e, busy: (0.0, 0.0, 1.0))   # no board limit
    mapper = SimpleNamespace(expert_part=lambda most, total: (2e-3, 0.0, {"gpu": 2e-3}), power_j=lambda b, w: 0.0, gap_j=lambda w: 0.0,
                             engine_host_s=lambda n: so.host_s(n, 2), step_overhead=so)
    groups = (features([(1, 100)] * 3), features([(1, 100)] * 5))
    g = GroupedCost(dense, mapper)
    c = g(groups)
    assert c[0] == pytest.approx(5e-3 + 2e-3 + hand_host_s(8, devices=2))
    busy = dict(zip(g.keys, c[2:]))
    assert busy["host"] == pytest.approx(hand_host_s(8, devices=2)) and busy["gpu"] == pytest.approx(7e-3)


def test_curve_extends_past_its_last_point_with_its_last_segment():
    """Kills StepOverhead.host_s__mutmut_33 (`y[+2]`: the slope taken from the third point). Host seconds 1, 2,
    3, 5, 9 ms at 1, 2, 4, 8, 16 sequences: past 16 the last segment's slope (9 - 5) / 8 = 0.5 ms a sequence,
    so 20 sequences take 9 + 4 x 0.5 = 11 ms; below the first point the first segment's 1 ms a sequence,
    never below 0 (0 sequences: 0 ms)."""
    curve = StepOverhead(cite="hand", overlap=False, seqs=[1, 2, 4, 8, 16], seconds=[1e-3, 2e-3, 3e-3, 5e-3, 9e-3])
    assert curve.host_s(20) == pytest.approx(11e-3, rel=1e-12)
    assert curve.host_s(16) == pytest.approx(9e-3, rel=1e-12) and curve.host_s(0) == 0.0

"""The board-power model (issue 33, hw_models/power.py): hand-derived power of a memory-bound
decode, the stretch of a binding cap, and the monotone properties a reader expects."""

from __future__ import annotations

import math

import pytest

from hw_models.clock import ClockWork
from hw_models.ideal import ideal
from hw_models.machine import load_machine, machine_from_dict, raw_machine
from hw_models.power import BoardPower
from hw_models.registry import mapper_for, simulate
from sim.core.errors import ConfigError
from sim.core.results import StepResult
from sim.core.workload import workload_from_dict
from tests.conftest import ROOT

IDLE_W, ACTIVE_W = 80.0, 120.0
GDDR_J_PER_BYTE = 7.0e-11    # a6000.yaml
BW = 768e9                   # a6000.yaml, efficiency 1 under ideal()


def _machine(j_per_flop: float = 0.0, limit_w: float | None = None):
    """a6000 with efficiencies 1 and no overheads (ideal), board power idle + activity + dynamic."""
    raw = raw_machine("a6000")
    u = raw["units"]["gpu"]
    u.update(idle_power_w=IDLE_W, active_power_w=ACTIVE_W, energy_j_per_flop={"fp16": j_per_flop, "vector": j_per_flop})
    m = ideal(machine_from_dict(raw, "test"))   # ideal() lifts the cap: a limit under test is put back after it
    if limit_w is None:
        return m
    return m.model_copy(update={"units": {**m.units, "gpu": m.units["gpu"].model_copy(update={"power_limit_w": limit_w})}})


def _mapper(machine, **kw):
    w = workload_from_dict({**dict(model="llama2-7b", batch=1, prompt_len=1024, gen_len=8), **kw}, "test")
    return mapper_for(machine, w, w.model_config_())


def _power_w(mapper, step) -> float:
    return (step.energy_j + mapper.power_j(step.busy_s, step.time_s)) / step.time_s


def test_memory_bound_decode_draws_idle_plus_active_plus_bytes_at_bandwidth():
    """Llama-2-7B decode, batch 1, fp16, on an ideal a6000: every op streams its bytes at 768 GB/s and the
    GPU is busy throughout, so P = idle + active + J/byte x bandwidth = 80 + 120 + 7e-11 x 768e9 = 253.76 W,
    and the step's dynamic energy is its bytes x 7e-11 J (no FLOP energy)."""
    m = _mapper(_machine())
    step = m.step("decode", 1, 1024)
    assert step.busy_s["gpu"] == pytest.approx(step.time_s, rel=1e-9)
    assert _power_w(m, step) == pytest.approx(IDLE_W + ACTIVE_W + GDDR_J_PER_BYTE * BW, rel=1e-6)
    # bytes / bandwidth = time (the roofline of test_gpu_sim), so the bytes' energy is J/byte x BW x time
    assert step.energy_j == pytest.approx(GDDR_J_PER_BYTE * BW * step.time_s, rel=1e-6)


def test_binding_cap_slows_the_clock_bound_ops_by_the_predicted_factor():
    """A compute-bound prefill (2048 tokens) at 2 pJ/FLOP draws ~420 W uncapped. Under a 300 W cap the SM clock
    falls to the ratio r at which idle + (active x r x (busy + added) + dynamic) / (t + added) = 300 W, where the
    compute-bound ops' compute c slows to c / r and the memory-bound ops keep DRAM's pace until their compute
    outgrows it (hw_models.clock; here one bin of them, near the ridge, does): times r, a quadratic in r, solved
    here by hand region by region. The step then averages exactly 300 W, and
    takes less than the whole step stretched alike (the earlier model: s = (active x busy + dynamic) / (t x 220))."""
    free = _mapper(_machine(2e-12, limit_w=1e6), prompt_len=2048)
    capped = _mapper(_machine(2e-12, limit_w=300.0), prompt_len=2048)
    a, b = free.step("prefill", 2048, 2048), capped.step("prefill", 2048, 2048)
    assert _power_w(free, a) > 300.0
    work = ClockWork.read(a.counters)
    sm, mem = work.sm_s, sum(work.mem_s)
    assert 0.5 * a.time_s < sm < a.time_s and mem > 0.0      # mostly compute-bound, some memory-bound ops
    t, busy, dyn, head = a.time_s, a.busy_s["gpu"], a.energy_j, 300.0 - IDLE_W
    # the bins of memory-bound ops whose compute outgrows their DRAM time at r join the clock-bound part: added =
    # x / r - y, x and y the compute-bound seconds plus those bins' compute and memory seconds
    bins = sorted(((c / m, m, c) for m, c in zip(work.mem_s, work.mem_sm_s) if m), reverse=True)
    turned = 0
    while True:
        x, y = sm + sum(c for _, _, c in bins[:turned]), sm + sum(m for _, m, _ in bins[:turned])
        qa, qb, qc = ACTIVE_W * (busy - y), ACTIVE_W * x + dyn - head * (t - y), head * x
        r = (-qb + math.sqrt(qb * qb + 4 * qa * qc)) / (2 * qa)
        if turned == len(bins) or r >= bins[turned][0]:
            break
        turned += 1
    assert turned < len(bins) and r < 1.0                      # some memory-bound ops stay so at r
    assert b.time_s == pytest.approx(t + x / r - y, rel=1e-9)
    assert b.time_s < t * (ACTIVE_W * busy + dyn) / (t * head)
    # the FLOPs and bytes cost what they cost; the memory-bound ops' cycles at clock r draw r x their activity
    assert b.energy_j == pytest.approx(dyn - ACTIVE_W * (busy * (1 - r) - r * (b.time_s - t)), rel=1e-9)
    assert _power_w(capped, b) == pytest.approx(300.0, rel=1e-9)
    assert b.counters["power_cap_s"] == pytest.approx(b.time_s - a.time_s)


# By hand: 100 W idle, 200 W activity, a 500 W limit (400 W of headroom); a 1 s step busy throughout with 600 J of
# FLOP and byte energy draws 100 + 200 + 600 = 900 W at full clock.
HAND = BoardPower(idle_w=100.0, active_w=200.0, limit_w=500.0)


def test_a_clock_bound_step_stretches_as_a_whole():
    """All of it compute-bound: 200 r (1 + (1/r - 1)) + 600 = 400 / r -> r = 400 / 800 = 0.5, the step 1 s longer,
    the same s = 2 as the whole step stretched alike (every cycle kept, no activity saved)."""
    assert HAND.under_cap(1.0, 200.0, 600.0, ClockWork(sm_s=1.0)) == pytest.approx((1.0, 0.0, 0.5))
    assert HAND.under_cap(1.0, 200.0, 600.0, None) == pytest.approx((1.0, 0.0, 0.5))


def test_memory_bound_ops_keep_drams_pace_under_a_cap():
    """Half compute-bound (0.5 s), half memory-bound (0.5 s of DRAM, 0.1 s of compute): the memory half's time stays
    while r >= 0.1 / 0.5, so 200 r (1 + 0.5 (1/r - 1)) + 600 = 400 (1 + 0.5 (1/r - 1)), i.e.
    100 r^2 + 500 r - 200 = 0, r = (-500 + sqrt(500^2 + 4 x 100 x 200)) / 200 = 0.3723: 0.843 s added (2 s under the
    whole-step stretch), and 200 x (1 - r) - 200 r x 0.843 = 62.2 J of activity saved; 900 J - 62.2 J over 1.843 s
    = ... the limit, 400 W above idle."""
    r = (-500 + math.sqrt(500**2 + 4 * 100 * 200)) / 200
    added, saved, clock = HAND.under_cap(1.0, 200.0, 600.0, ClockWork(sm_s=0.5, mem_s=(0.5,), mem_sm_s=(0.1,)))
    assert clock == pytest.approx(r, rel=1e-12)
    assert added == pytest.approx(0.5 * (1 / r - 1), rel=1e-12) and added == pytest.approx(0.843, abs=5e-4)
    assert saved == pytest.approx(200 * (1 - r) - 200 * r * added, rel=1e-12)
    assert (200 + 600 - saved) / (1 + added) == pytest.approx(400.0, rel=1e-12)


def test_memory_bound_ops_turn_clock_bound_below_their_compute_share():
    """The same, with 0.45 s of compute in the memory half: at the 0.372 above its compute (0.45 / 0.372 s) would
    outgrow its DRAM time, so both halves are clock-bound: 0.95 / r - 1 added, 200 (0.95 + r (1 - 1)) + 600 =
    400 x 0.95 / r -> r = 380 / 790 = 0.481, 0.975 s added."""
    added, saved, clock = HAND.under_cap(1.0, 200.0, 600.0, ClockWork(sm_s=0.5, mem_s=(0.5,), mem_sm_s=(0.45,)))
    assert clock == pytest.approx(380 / 790, rel=1e-12)
    assert added == pytest.approx(0.95 / (380 / 790) - 1.0, rel=1e-12)
    assert (200 + 600 - saved) / (1 + added) == pytest.approx(400.0, rel=1e-12)


def test_near_ridge_ops_turn_clock_bound_before_the_rest():
    """Two memory-bound kinds of op, as a decode step has: GEMMs near the ridge (0.5 s of DRAM, 0.4 s of compute) and
    attention far below it (0.5 s, 0.01 s). Kept apart (hw_models.clock.MEM_BINS) the GEMMs turn clock-bound below
    r = 0.8: 200 (0.4 + r (1 - 0.5)) + 600 = 400 (1 - 0.5 + 0.4 / r), i.e. 100 r^2 + 480 r - 160 = 0, r = 0.3129,
    0.4 / r - 0.5 = 0.778 s added; pooled (0.41 s over 1 s) they would turn only below 0.41 and read 0.705 s."""
    work = ClockWork(sm_s=0.0, mem_s=(0.5, 0.5), mem_sm_s=(0.01, 0.4))
    r = (-480 + math.sqrt(480**2 + 4 * 100 * 160)) / 200
    added, saved, clock = HAND.under_cap(1.0, 200.0, 600.0, work)
    assert clock == pytest.approx(r, rel=1e-12) and added == pytest.approx(0.4 / r - 0.5, rel=1e-12)
    assert added == pytest.approx(0.778, abs=5e-4)
    pooled = HAND.under_cap(1.0, 200.0, 600.0, ClockWork(sm_s=0.0, mem_s=(1.0,), mem_sm_s=(0.41,)))[0]
    assert pooled == pytest.approx(0.41 / (164 / 682) - 1.0, rel=1e-12) and pooled < added
    assert (200 + 600 - saved) / (1 + added) == pytest.approx(400.0, rel=1e-12)


def test_a_tiny_clock_bound_part_keeps_the_root_exact():
    """A surrogate can interpolate a few attoseconds of compute-bound work: the root's other form keeps the limit
    (a review: 2c / (b + sqrt(D)) cancelled to r = 0.412 for 0.441, 6.6 W under the limit)."""
    for tiny in (1e-18, 1e-15, 1e-12):
        added, saved, _ = HAND.under_cap(1.0, 200.0, 300.0, ClockWork(sm_s=tiny, mem_s=(1.0,), mem_sm_s=(0.0,)))
        assert (200 + 300 - saved) / (1 + added) == pytest.approx(400.0, rel=1e-9)


def test_a_clock_lock_slows_what_the_clock_paces_and_saves_activity():
    """An SM clock locked at half (nvidia-smi --lock-gpu-clocks; units.gpu.sm_clock_fraction) with 100 J of bytes and
    FLOPs (400 W at full clock, under the 500 W limit): the compute-bound half takes 0.5 / 0.5 = 1 s, 0.5 s added, the
    memory-bound half (0.1 s of compute) keeps its 0.5 s; activity 200 x 0.5 x 1.5 = 150 J of 200, 50 J saved. With
    600 J the 500 W limit lowers the clock further, to the 0.3723 of the unlocked case."""
    work = ClockWork(sm_s=0.5, mem_s=(0.5,), mem_sm_s=(0.1,))
    locked = BoardPower(idle_w=100.0, active_w=200.0, limit_w=500.0, clock=0.5)
    assert locked.under_cap(1.0, 200.0, 100.0, work) == pytest.approx((0.5, 50.0, 0.5))
    assert locked.under_cap(1.0, 200.0, 600.0, work) == pytest.approx(HAND.under_cap(1.0, 200.0, 600.0, work))
    assert locked.under_cap(1.0, 200.0, 100.0, None) == pytest.approx((1.0, 0.0, 0.5))   # no split: all of it at 1/2


def test_a_locked_clock_keeps_a_memory_bound_decode_s_time_and_cuts_its_energy():
    """Llama-2-13B decode at batch 1 on h100_sxm with its SM clock locked at 60%: its ops are memory-bound far below
    that clock (GEMVs at one row), so TPOT stays what it is at full clock and the decode energy per token falls (the
    activity power is an energy per cycle), the direction Ma et al. measure on an H200 (arXiv:2605.11999: up to 32% of
    decode energy at minimal throughput loss); the compute-bound prefill slows. The note says it is a lock."""
    from sim.core.workload import load_workload

    w = load_workload(ROOT / "workloads" / "llama13b_decode.yaml")
    full = simulate(w, load_machine("h100_sxm"))
    lock = simulate(w, load_machine("h100_sxm", {"units.gpu.sm_clock_fraction": 0.6}))
    assert lock.tpot_s == pytest.approx(full.tpot_s, rel=1e-9) and lock.ttft_s > 1.1 * full.ttft_s
    assert lock.decode_energy_per_token_j < 0.9 * full.decode_energy_per_token_j
    cap = lock.extra["power_cap"]
    assert cap["clock_lock"] == 0.6 and cap["decode_clock"] == pytest.approx(0.6) and cap["prefill_clock"] == pytest.approx(0.6)
    assert any(n.startswith("clock lock: the SM clock is locked at 60% of full") for n in lock.notes)


def test_a_lock_alone_runs_the_op_records_at_the_locked_clock():
    """A review: the records took the clock the limit would leave (none at 700 W), so a decode locked at 20% read its
    records ending at 11.24 ms against a 13.10 ms TPOT. They now end where the locked step does, prefill and decode."""
    import warnings

    w = workload_from_dict(dict(model="llama3-8b", batch=64, prompt_len=512, gen_len=4), "t")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = simulate(w, load_machine("h100_sxm", {"units.gpu.sm_clock_fraction": 0.2}))
    assert max(o.end_s for o in r.prefill_ops) == pytest.approx(r.ttft_s, rel=1e-9)
    assert max(o.end_s for o in r.decode_ops) == pytest.approx(r.decode_timeline.makespan_s, rel=1e-9)
    assert r.extra["power_cap"]["decode_clock"] == pytest.approx(0.2)


def test_an_offload_block_under_a_lock_slows_its_gpu_work_alone():
    """A review: a FlexGen OPT-30B block whose GPU works 6% of the step ran 2x slower at a 50% lock, its host
    attention and PCIe copies stretched with the SMs. The GPU's busy seconds alone now take 1/r as long."""
    from sim.core.workload import load_workload

    w = load_workload(ROOT / "workloads" / "opt30b_flexgen.yaml")
    full = simulate(w, load_machine("h100_offload"), detail=False)
    half = simulate(w, load_machine("h100_offload", {"units.gpu.sm_clock_fraction": 0.5}), detail=False)
    assert full.tpot_s < half.tpot_s < 1.2 * full.tpot_s


def test_ideal_lifts_a_clock_lock_as_it_lifts_the_cap():
    m = ideal(load_machine("h100_sxm", {"units.gpu.sm_clock_fraction": 0.5}))
    assert m.units["gpu"].sm_clock_fraction == 1.0 and m.board_power().clock == 1.0


def test_a_clock_lock_without_the_board_model_is_refused():
    with pytest.raises(ConfigError, match="sm_clock_fraction 0.5: this unit has no board-power model"):
        load_machine("l40s", {"units.gpu.sm_clock_fraction": 0.5})
    for bad in (0.0, 1.5):
        with pytest.raises(ConfigError, match="sm_clock_fraction"):
            load_machine("h100_sxm", {"units.gpu.sm_clock_fraction": bad})


def test_a_memory_bound_step_meets_a_cap_at_a_lower_clock_in_the_same_time():
    """All of it DRAM's pace (1 s, no compute to slow): with 300 J of bytes 200 r + 300 = 400 -> r = 0.5, no time
    added and 100 J of activity saved; with 500 J of bytes no clock meets 500 W (the bytes alone draw 600 W), and the
    step stretches as a whole, s = (200 + 500) / 400."""
    mem_only = ClockWork(sm_s=0.0, mem_s=(1.0,), mem_sm_s=(0.0,))
    assert HAND.under_cap(1.0, 200.0, 300.0, mem_only) == pytest.approx((0.0, 100.0, 0.5))
    assert HAND.under_cap(1.0, 200.0, 500.0, mem_only) == pytest.approx((0.75, 0.0, 1 / 1.75))
    assert HAND.under_cap(1.0, 200.0, 100.0, mem_only) == (0.0, 0.0, 1.0)   # 400 W: the limit does not bind


def test_cap_that_does_not_bind_changes_nothing():
    """The decode above draws 254 W: a 300 W cap leaves it alone."""
    a = _mapper(_machine(limit_w=1e6)).step("decode", 1, 1024)
    b = _mapper(_machine(limit_w=300.0)).step("decode", 1, 1024)
    assert b.time_s == a.time_s and "power_cap_s" not in b.counters


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_lower_power_limit_never_shortens_a_step(phase):
    """h100_sxm, Llama-3-8B batch 64: step times under 700 ... 150 W never fall as the limit falls."""
    times = []
    for limit in (700, 600, 500, 450, 400, 300, 200, 150):
        m = load_machine("h100_sxm", {"units.gpu.power_limit_w": limit})
        w = workload_from_dict(dict(model="llama3-8b", batch=64, prompt_len=512, gen_len=2), "test")
        mapper = mapper_for(m, w, w.model_config_())
        times.append(mapper.step(phase, 512 if phase == "prefill" else 1, 512).time_s)
    assert all(b >= a for a, b in zip(times, times[1:]))
    assert times[-1] > times[0]          # and 150 W binds for both phases


def test_energy_per_token_falls_with_batch_until_compute_bound():
    """h100_sxm, Llama-3-8B decode: J per token falls as the batch grows (the weights' bytes and the static
    power are shared) up to the compute-bound knee (~300 sequences: 989 TFLOP/s x 0.8 / (2 x 3.35 TB/s x
    0.85 / 2 B)); past it, it stays within 5% (compute energy per token is constant)."""
    def jpt(batch: int) -> float:
        w = workload_from_dict(dict(model="llama3-8b", batch=batch, prompt_len=256, gen_len=4, stack="vllm"), "t")
        r = simulate(w, load_machine("h100_sxm"), detail=False)
        return r.decode_energy_per_token_j
    batches = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    e = [jpt(b) for b in batches]
    assert all(b < a for a, b in zip(e, e[1:]))
    assert jpt(512) == pytest.approx(e[-1], rel=0.05) or jpt(512) < e[-1]


def test_power_limit_below_idle_plus_active_is_refused_in_one_line():
    raw = raw_machine("h100_sxm")
    raw["units"]["gpu"]["power_limit_w"] = 100
    with pytest.raises(ConfigError, match="power_limit_w 100 W: must exceed idle_power_w"):
        machine_from_dict(raw, "test")


def test_a_power_limit_above_the_tdp_is_said(capsys):
    """An energy researcher's trial: --set hw.units.gpu.power_limit_w=1500 on h100_sxm (700 W TDP, the highest
    limit its board takes) ran a 2048-token prefill uncapped (607.6 ms against 773.5 ms at 700 W) without a word.
    A limit at or below the TDP is no note."""
    from sim.apps.cli import main
    from tests.conftest import ROOT

    wl = str(ROOT / "workloads/llama13b_decode.yaml")
    assert main(["run", wl, "--hw", "h100_sxm", "-q", "--set", "hw.units.gpu.power_limit_w=1500"]) == 0
    err = capsys.readouterr().err
    assert "units.gpu.power_limit_w: 1500 W is above power_w (700 W, the board's TDP and highest settable limit)" in err
    assert main(["run", wl, "--hw", "h100_sxm", "-q", "--set", "hw.units.gpu.power_limit_w=700"]) == 0
    assert "power_limit_w" not in capsys.readouterr().err


def test_board_power_formula():
    """The stretch by hand: 100 W idle, 500 W limit, 800 J of activity + dynamic energy over 1 s ->
    s = 800 / (1 x 400) = 2 (then 100 + 800 / 2 = 500 W)."""
    bp = BoardPower(idle_w=100.0, active_w=200.0, limit_w=500.0)
    assert bp.stretch(1.0, 800.0) == pytest.approx(2.0)
    assert bp.stretch(1.0, 300.0) == 1.0
    assert BoardPower(100.0).stretch(1.0, 1e9) == 1.0    # no limit, no cap
    assert bp.average_w(2.0, 1.0, 100.0) == pytest.approx(100 + 100 + 50)


def test_pim_arithmetic_energy_is_its_flops_at_the_cited_figure():
    """Llama-2-13B decode, batch 1, on hbm_pim: every GEMV and the attention run on PIM, so its MAC energy
    per token is 2 x (40 x (4 x 5120^2 + 3 x 5120 x 13824) + 5120 x 32000) weight FLOPs + 2 x 2 x 40 x 5120 x
    ~1028 attention FLOPs = 26.54e9 FLOPs x 0.75 pJ (Horowitz ISSCC 2014 fp16 MAC) = 19.9 mJ."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = simulate(workload_from_dict(dict(model="llama2-13b", batch=1, prompt_len=1024, gen_len=8), "t"),
                     load_machine("hbm_pim", {"pim.pim_capacity_bytes_per_stack": None}))   # all on PIM dies
    flops = 2 * (40 * (4 * 5120**2 + 3 * 5120 * 13824) + 5120 * 32000) + 2 * 2 * 40 * 5120 * 1028
    assert r.metrics()["pim.mac_energy_j_per_token"] == pytest.approx(flops * 0.75e-12, rel=0.01)


def test_pim_host_ops_charge_their_flops_as_the_gpu_kind_does():
    """hbm_pim's host is an A100: a prefill GEMM it runs costs its bytes at the HBM2's J/byte plus its FLOPs at the
    host's J/FLOP, as a100_80g charges the same op (before, the host's FLOPs drew nothing: a prefill on hbm_pim read
    0.026 J per prompt token against a100_80g's 0.046). The PIM report's DRAM split keeps the bytes alone."""
    from sim.core.graph import GEMM
    from sim.core.lowering import FormatPolicy, lower
    from sim.core.model import load_model

    pim = load_machine("hbm_pim")
    w = workload_from_dict(dict(name="t", model="llama2-7b", batch=1, prompt_len=256, gen_len=2), "t.yaml")
    m = mapper_for(pim, w, w.model_config_())
    graph = lower(load_model("llama2-7b"), "prefill", 1, 256, 256, FormatPolicy("fp16", "fp16", "fp16", ()), False)
    op = next(o for o in graph.ops() if o.kind == GEMM)
    j_per_byte = pim.memory[pim.units["gpu"].memory].energy_j_per_byte
    assert m.host_cost(op).energy_j == pytest.approx(op.bytes * j_per_byte + op.flops * 0.772e-12, rel=1e-12)
    r = simulate(w.model_copy(update={"prompt_len": 1024}), pim)
    a100 = simulate(w.model_copy(update={"prompt_len": 1024}), load_machine("a100_80g"))
    # the same die and J/FLOP; HBM2's J/byte (28.7 against 40 pJ) and bandwidth keep them apart by a few %
    assert r.prefill_energy_per_token_j == pytest.approx(a100.prefill_energy_per_token_j, rel=0.05)


def test_a100_saturated_gemm_draws_its_board_limit():
    """a100_80g's J/FLOP (scripts/fit_energy.py GEMM_AT_LIMIT): cuBLAS bf16 8192^3 on random data runs at 257 TFLOP/s
    on an A100, clock-throttled at its 400 W limit (H. He, thonking.ai, 2024), so idle + activity + its FLOPs and
    its 3 x 8192^2 x 2 bytes of HBM traffic over 2 x 8192^3 / 257e12 s draw 400 W (to the preset's three figures:
    0.772 pJ +-0.0005 is +-0.13 W); the 400 W cap then never binds below that rate (the survey's A100 2048-token
    first token held at +30% by the old scaled 1.25 pJ)."""
    u = load_machine("a100_80g").units["gpu"]
    n, rate = 8192, 257e12
    t = 2 * n**3 / rate
    draw = 66.9 + 131.0 + (2 * n**3 * u.energy_j_per_flop["bf16"] + 3 * n * n * 2 * 40e-12) / t
    assert u.idle_power_w == 66.9 and u.active_power_w == 131.0
    assert draw == pytest.approx(400.0, abs=0.2)
    r = simulate(workload_from_dict(dict(model="llama2-7b", batch=1, prompt_len=2048, gen_len=2,
                                         flash_attention=True), "t.yaml"), load_machine("a100_80g"))
    assert "power cap" not in " ".join(r.notes)


def test_a6000_saturated_gemm_draws_its_board_limit():
    """a6000's J/FLOP (scripts/fit_energy.py GEMM_AT_LIMIT): Llama-2-7B's fused gate/up projection at 4096 tokens
    (M 4096, K 4096, N 22016, fp16) takes 6.096 ms on an RTX A6000 (vidur profiler, shared/validation/vidur/a6000),
    121.2 TFLOP/s; idle 50.2 W (117.1 x 300 / 700) + activity 98.6 W (230 x 300 / 700) + its FLOPs and its
    (M K + K N + M N) x 2 bytes of GDDR6 at 70 pJ over that time draw the 300 W limit (1.21 pJ +-0.005 is +-0.6 W).
    The README's first command then reads no note about its energy, and its power stays under the limit."""
    u = load_machine("a6000").units["gpu"]
    m, k, n, t = 4096, 4096, 22016, 6.096e-3
    draw = 50.2 + 98.6 + (2 * m * n * k * u.energy_j_per_flop["fp16"] + (m * k + k * n + m * n) * 2 * 70e-12) / t
    assert u.idle_power_w == 50.2 and u.active_power_w == 98.6
    assert draw == pytest.approx(300.0, abs=0.7)
    from hw_models.registry import simulate
    from sim.core.workload import load_workload
    from tests.conftest import ROOT
    r = simulate(load_workload(ROOT / "workloads" / "llama13b_decode.yaml"), load_machine("a6000"))
    assert not [n for n in r.notes if n.startswith("energy:")]
    assert 50.2 + 98.6 < r.metrics()["avg_power_per_device_w"] < 300


def test_serial_engine_gap_draws_activity_power_in_a_run():
    """`sim run` under a serial engine (vllm-v0: host + device): the GPU waits through the host's work at boost
    clock, so the step's energy grows by active_power_w x the gap (idle power over it is charged with the
    wall time), hw_models.base.Mapper.with_engine / gap_active_j."""
    h100 = load_machine("h100_sxm")
    w = workload_from_dict(dict(name="t", model="llama2-7b", batch=16, prompt_len=256, gen_len=16,
                                flash_attention=True, stack="vllm-v0"), "t.yaml")
    m = mapper_for(h100, w, w.model_config_())
    device = StepResult("decode", 300, 5e-3, {"gpu": 5e-3}, 1.0)    # 5 ms of kernels, 1 J of dynamic energy
    step = m.with_engine(device, 16)
    gap = m.engine_host_s(16)
    assert gap > 0 and step.time_s == pytest.approx(5e-3 + gap, rel=1e-12)
    assert step.energy_j == pytest.approx(1.0 + h100.units["gpu"].active_power_w * gap, rel=1e-12)
    assert step.busy_s["gpu"] == 5e-3     # the kernels' busy time is unchanged: the gap is not busy


def test_tp_collective_time_draws_activity_power():
    """A TP rank's all-reduce is a kernel on its SMs, so its time on the link draws activity power like the rank's
    other kernels (hw_models.gpu.parallel power_j): TP 2 on h100_sxm, 3 ms of kernels and 1 ms of collectives
    in a 4 ms step, each of the 2 devices draws idle + activity over all 4 ms."""
    h100 = load_machine("h100_sxm")
    w = workload_from_dict(dict(name="t", model="llama2-7b", batch=8, prompt_len=256, gen_len=4,
                                parallel=dict(tp=2, topology="dgx_h100")), "t.yaml")
    m = mapper_for(h100, w, w.model_config_())
    u = h100.units["gpu"]
    assert m.power_j({"gpu": 3e-3, "link": 1e-3}, 4e-3) == pytest.approx(2 * (u.idle_power_w + u.active_power_w) * 4e-3,
                                                                          rel=1e-12)
    # without the collective the last millisecond is idle power only
    assert m.power_j({"gpu": 3e-3}, 4e-3) == pytest.approx(2 * (u.idle_power_w * 4e-3 + u.active_power_w * 3e-3),
                                                           rel=1e-12)


def test_engine_gap_under_a_low_limit_draws_the_limit():
    """Under a 250 W limit (below idle + activity, 117.1 + 230 W) the clock drops through the gap until the board
    meets the limit: the gap adds (250 - 117.1) W x its time, not the activity power."""
    h100 = load_machine("h100_sxm", {"units.gpu.power_limit_w": 250})
    w = workload_from_dict(dict(name="t", model="llama2-7b", batch=16, prompt_len=256, gen_len=16,
                                flash_attention=True, stack="vllm-v0"), "t.yaml")
    m = mapper_for(h100, w, w.model_config_())
    step = m.with_engine(StepResult("decode", 300, 5e-3, {"gpu": 5e-3}, 1.0), 16)
    assert step.energy_j == pytest.approx(1.0 + (250 - h100.units["gpu"].idle_power_w) * m.engine_host_s(16), rel=1e-12)


def test_a_busy_time_preset_says_its_energy_is_not_comparable():
    """l40s keeps the busy-time energy model (no idle_power_w): Llama-2-13B decode averages 396 W against its
    350 W TDP, which no cap holds there, and the run says so (a6000 did, at 340 W against 300, until stop 67 gave it
    the A100's rule). Every busy-time run says its J/token does not compare
    with a board-power preset's (an architect's trial: PIM, groq_lpu and flexgen_t4 said nothing, and a J/token
    comparison across kinds mixed the models); a board-power preset (h100_sxm; a100_80g, hbm_pim and a6000 since the
    A100 rule) never gets the note, and a run below its TDP gets it without the TDP clause."""
    from hw_models.power import busy_time_note
    from hw_models.registry import simulate
    from sim.core.workload import load_workload
    from tests.conftest import ROOT

    w = load_workload(ROOT / "workloads" / "llama13b_decode.yaml")
    l40s = load_machine("l40s")
    r = simulate(w, l40s)
    avg_w = r.energy_per_token_j * w.batch * w.gen_len / r.e2e_s   # the run total over its time
    assert avg_w > 350
    (note,) = [n for n in r.notes if n.startswith("energy:")]
    assert f"averages {avg_w:.0f} W per device, above its 350 W TDP" in note and "does not compare" in note
    below = busy_time_note(l40s, 349.0 * 2.0, 2.0, 1)
    assert "does not compare with a board-power preset's" in below and "TDP" not in below
    # a spatial run averages every chip's power_w exactly: 215.0000000012 W read "above its 215 W TDP"
    assert "TDP" not in busy_time_note(l40s, 350.0 * (1 + 1e-12) * 2.0, 2.0, 1)
    small = w.model_copy(update={"model": "tinyllama-1.1b", "prompt_len": 128, "gen_len": 4})   # aim_gddr6: 12.9 GB
    for hw in ("h100_sxm", "a100_80g", "hbm_pim", "a6000", "aim_gddr6"):
        assert not [n for n in simulate(small if hw == "aim_gddr6" else w, load_machine(hw)).notes
                    if n.startswith("energy:")], hw
    for hw, how in (("rtx4090", "over busy time"), ("groq_lpu", "every chip's power_w over the whole run")):
        (note,) = [n for n in simulate(small if hw == "rtx4090" else w, load_machine(hw)).notes
                   if n.startswith("energy:")]
        assert how in note


def test_aim_gddr6_without_pim_is_the_a6000_it_is_built_on():
    """An architect's trial: the same bf16 decode with pim_policy none read 1.89 J/token on aim_gddr6 (busy-time power)
    and 1.04 on a6000, the two energy models and not the hardware. Its host now carries a6000's board figures, so
    with PIM off the run is the a6000's, time and energy, to the last digit; with PIM on it is cheaper."""
    raw = dict(model="tinyllama-1.1b", batch=1, prompt_len=128, gen_len=8,
               formats=dict(weights="bf16", activations="bf16", kv_cache="bf16"))
    w = workload_from_dict(raw, "t")
    plain = simulate(w, load_machine("a6000"))
    off = simulate(workload_from_dict({**raw, "pim_policy": "none"}, "t"), load_machine("aim_gddr6"))
    assert (off.tpot_s, off.energy_per_token_j) == pytest.approx((plain.tpot_s, plain.energy_per_token_j), rel=1e-9)
    on = simulate(w, load_machine("aim_gddr6"))
    assert on.tpot_s < plain.tpot_s and on.energy_per_token_j < plain.energy_per_token_j


def test_attacc_dgx_is_eight_a100_boards_in_one_unit():
    """attacc_dgx models its 8 A100a GPUs as one unit: its board figures are 8 a100_80g boards' (idle and activity;
    the J/FLOP is per FLOP), the 3.2 kW limit theirs together. The shipped OPT-175B run had read 3,300 W "per
    device" above that limit (busy-time power); a run now averages between the eight boards' idle and that limit."""
    a100, dgx = (load_machine(p).units["gpu"] for p in ("a100_80g", "attacc_dgx"))
    assert dgx.idle_power_w == pytest.approx(8 * a100.idle_power_w) and dgx.power_w == 8 * a100.power_w
    assert dgx.active_power_w == pytest.approx(8 * a100.active_power_w)
    assert dgx.energy_j_per_flop["fp16"] == a100.energy_j_per_flop["fp16"]
    twelve = dict(name="twelve-heads", hidden_size=1536, intermediate_size=4096, num_hidden_layers=4,
                  num_attention_heads=12, vocab_size=32000)   # 12 heads: attacc's 12 head groups divide them
    w = workload_from_dict(dict(model=twelve, batch=8, prompt_len=512, gen_len=4), "t")
    r = simulate(w, load_machine("attacc_dgx"))
    avg_w = r.energy_per_token_j * r.batch * 4 / r.e2e_s
    assert 8 * a100.idle_power_w < avg_w <= dgx.power_w
    assert not [n for n in r.notes if n.startswith("energy:")]


def test_diff_and_sweep_say_where_the_energy_models_differ():
    """sim diff of an h100_sxm run against an hbm_pim one printed PIM at 0.2x the energy per token, a ratio of two
    bookkeepings (an architect's trial): the diff says so when one side only has the board-power model, and a sweep
    row carries which model its J/token is."""
    from hw_models.machine import load_machine
    from sim.apps.diff import energy_footing
    from sim.apps.sweep.point import run_point

    busy = {"hardware": "hbm_pim", "notes": ["energy: hbm_pim has no board-power model (idle_power_w): ... does not "
                                             "compare with a board-power preset's"]}
    board = {"hardware": "h100_sxm", "notes": []}
    assert "hbm_pim counts busy-time power only" in energy_footing(board, busy)
    assert energy_footing(board, board) is None and energy_footing(busy, busy) is None
    # an architecture trial: a Groq run counts every chip over the whole run, which the diff had called busy time;
    # and a PIM run's J/token, beside a GPU's, lacks its PIM units' own power
    groq = {"hardware": "groq_lpu", "notes": ["energy: groq_lpu has no board-power model (idle_power_w): its J/token "
                                              "counts every chip's power_w over the whole run (no J/byte or J/FLOP in the "
                                              "preset); it does not compare with a board-power preset's"]}
    assert energy_footing(board, groq).startswith("energy_per_token_j: groq_lpu counts every chip's power_w over the "
                                                  "whole run (no board-power model)")
    pim = {"hardware": "hbm_pim", "notes": [], "extra": {"pim": {}}}
    assert "hbm_pim's PIM units draw no static or activity power here" in energy_footing(board, pim)
    assert energy_footing(pim, pim) is None
    served = {"hardware": "hbm_pim", "hw_figures": {"kind": "pim"}}   # a serve summary: no extra, its figures' kind
    assert "hbm_pim's PIM units draw no static" in energy_footing(board, served)
    l40s = {"hardware": "l40s", "notes": ["energy: l40s has no board-power model (idle_power_w): its J/token counts "
                                          "power_w over busy time, nothing between, plus bytes; it does not compare "
                                          "with a board-power preset's"]}
    assert "groq_lpu counts every chip's power_w" in energy_footing(groq, l40s)
    assert "l40s counts busy-time power only" in energy_footing(groq, l40s)
    w = dict(name="t", model="tinyllama-1.1b", batch=1, prompt_len=32, gen_len=2)
    for hw, model in (("h100_sxm", 1.0), ("l40s", 0.0)):
        m = load_machine(hw)
        row = run_point(dict(workload=w, workload_source="t.yaml", machine=m.model_dump(mode="json", exclude={"source"}),
                             machine_source=m.source))
        assert row["status"] == "ok" and row["metrics"]["energy_board_model"] == model


def test_a_sweep_across_energy_models_says_so(tmp_path, capsys):
    """An architect's trial: a sweep's energy_per_token_j mixed the board-power and busy-time models without a word,
    and an offload point's batch axis did not reach the model (batch 64 ran as its policy's block). The rows carry
    energy_board_model and batch_simulated, and the sweep says where either differs."""
    import csv

    import yaml

    from sim.apps.cli import main
    from tests.conftest import ROOT

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(dict(name="s", workload=str(ROOT / "workloads/llama13b_decode.yaml"), hw="a6000",
                                        axes={"hw": ["h200", "flexgen_t4"], "workload.batch": [64],
                                              "workload.gen_len": [4]})))
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "1"]) == 0
    err = capsys.readouterr().err
    [note] = [line for line in err.splitlines() if " two energy models: 1 row(s)" in line]
    assert "energy_per_token_j" in note.partition(" two energy models")[0]   # the ranked figures, named
    # ranked among the board-power rows only (a busy-time row reads several times low)
    [best] = [line for line in err.splitlines() if "energy per token (board-power rows)" in line]
    assert "h200" in best and "flexgen_t4" not in best
    assert "1 point(s) simulated a smaller batch than their workload.batch" in err
    rows = {r["hw"]: r for r in csv.DictReader(open(tmp_path / "o" / "results.csv"))}
    assert float(rows["h200"]["batch_simulated"]) == 64 and float(rows["flexgen_t4"]["batch_simulated"]) < 64


def test_sweep_data_formats(tmp_path, capsys):
    """An architect's trial: `sim sweep --format json` printed nothing on stdout (the table went to stderr) and
    export had no JSON. --format json|csv prints the best-points table as data on stdout; export --json writes one
    object per point; an export flag on a run is refused (it would be ignored)."""
    import json

    import yaml

    from sim.apps.cli import main
    from tests.conftest import ROOT

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(dict(name="s", workload=str(ROOT / "workloads/llama13b_decode.yaml"), hw="a6000",
                                        axes={"workload.gen_len": [2, 4]})))
    out = tmp_path / "o"
    assert main(["sweep", str(spec), "--out", str(out), "--workers", "1", "--format", "json", "-q"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["title"].startswith("s: best points") and table["rows"]
    assert main(["sweep", "export", str(out), "--json", str(tmp_path / "r.json")]) == 0
    rows = json.loads((tmp_path / "r.json").read_text())
    assert len(rows) == 2 and all(isinstance(r["tpot_s"], float) for r in rows)
    assert main(["sweep", str(spec), "--out", str(out), "--json", str(tmp_path / "x.json")]) == 2


def test_a_scale_axis_multiplies_each_machines_own_value(tmp_path, capsys):
    """An architect's trial: "what if the memory were twice as fast" across presets of different memories needed each
    machine's baseline by hand (zip mode cannot cross batch). `hw.<field>: {scale: [...]}` takes each machine's own
    value times the factor: the point's preset holds a6000's 768 GB/s x 2 and h100_sxm's 3.35 TB/s x 2 (the CSV keeps
    the factor, the plots label it so), and a decode step is about memory-bound, so TPOT falls with it."""
    import csv

    import yaml

    from hw_models.machine import load_machine
    from sim.apps.cli import main
    from sim.apps.sweep.expand import expand
    from sim.apps.sweep.spec import load_spec
    from tests.conftest import ROOT

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(dict(name="s", workload=str(ROOT / "workloads/llama13b_decode.yaml"), hw="a6000",
                                        axes={"hw": ["a6000", "h100_sxm"], "workload.gen_len": [2],
                                              "hw.memory.@device.bandwidth_bytes_per_s": {"scale": [1, 2]}})))
    by = {(p.axes["hw"], p.axes["hw.memory.@device.bandwidth_bytes_per_s"]): p for p in expand(load_spec(path))}
    for hw in ("a6000", "h100_sxm"):
        m = load_machine(hw)
        own = m.memory[m.device_tier].bandwidth_bytes_per_s
        tier = by[(hw, 2)].config["machine"]["memory"][m.device_tier]
        assert tier["bandwidth_bytes_per_s"] == pytest.approx(2 * own)
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--workers", "1", "-q"]) == 0
    rows = {(r["hw"], float(r["hw.memory.@device.bandwidth_bytes_per_s"])): float(r["tpot_s"])
            for r in csv.DictReader(open(tmp_path / "o" / "results.csv"))}
    assert rows[("a6000", 2.0)] < 0.6 * rows[("a6000", 1.0)]
    bad = tmp_path / "b.yaml"
    bad.write_text(path.read_text().replace("hw.memory.@device.bandwidth_bytes_per_s", "workload.batch"))
    assert main(["sweep", str(bad), "--out", str(tmp_path / "p")]) == 2
    assert "scale: factors of a machine's own value, for a hw.<field> axis only" in capsys.readouterr().err
    # Two axes naming one field (the @device alias and the tier's own name): one silently won, by axis order, and
    # the record showed both; refused in one line before any point runs (a DSE trial).
    twice = tmp_path / "t.yaml"
    twice.write_text(yaml.safe_dump(dict(name="s", workload=str(ROOT / "workloads/llama13b_decode.yaml"), hw="h100_sxm",
                                         axes={"hw.memory.@device.bandwidth_bytes_per_s": {"scale": [0.5, 1]},
                                               "hw.memory.hbm.bandwidth_bytes_per_s": [1e12]})))
    assert main(["sweep", str(twice), "--out", str(tmp_path / "q")]) == 2
    assert ("hw.memory.@device.bandwidth_bytes_per_s and hw.memory.hbm.bandwidth_bytes_per_s name the same field "
            "of h100_sxm (hw.memory.hbm.bandwidth_bytes_per_s); keep one axis") in capsys.readouterr().err
    assert not (tmp_path / "q").exists()
    # A bad factor list is told against `scale:` itself, not against a range's missing `min` (a DSE trial)
    for factors in ([0, 1], [], [-1, 2]):
        zero = tmp_path / "z.yaml"
        zero.write_text(yaml.safe_dump(dict(name="s", workload=str(ROOT / "workloads/llama13b_decode.yaml"),
                                            hw="a6000", axes={"hw.memory.@device.bandwidth_bytes_per_s":
                                                              {"scale": factors}})))
        assert main(["sweep", str(zero), "--out", str(tmp_path / "z")]) == 2
        err = capsys.readouterr().err
        assert (f"axes: hw.memory.@device.bandwidth_bytes_per_s: scale: {factors!r}: factors of each machine's own "
                "value, a list of positive numbers") in err and "min" not in err


def test_ideal_is_the_roofline_without_the_power_cap():
    """A numerics researcher's trial: `--ideal` ("the pure roofline") kept the board's power limit, so where it bound
    the ideal prefill was 41-55% over `sim roofline` (a100_80g, Llama-2-7B, 1024 tokens: 72.7 against 47.0 ms) and
    format speedups depended on the power model. The ideal machine has no cap; its prefill is the roofline's sum."""
    from hw_models.ideal import ideal
    from hw_models.registry import simulate
    from sim.apps.roofline_rows import roofline_rows
    from sim.core.workload import load_workload
    from tests.conftest import ROOT

    a100 = load_machine("a100_80g")
    assert a100.board_power().limit_w == 400 and ideal(a100).board_power().limit_w is None
    w = load_workload(ROOT / "workloads/llama2_7b_decode.yaml").model_copy(update={"gen_len": 2,
                                                                                 "flash_attention": True})
    r = simulate(w, ideal(a100))
    roofline_s = sum(row["roofline_s"] * row["count"] for row in roofline_rows(w, a100, "prefill", w.prompt_len, w.prompt_len))
    assert r.ttft_s == pytest.approx(roofline_s, rel=1e-6)   # 46.976 ms (`sim roofline`'s total)


def test_a_sweep_whose_spatial_chips_follow_the_points_says_so(tmp_path, capsys):
    """An architect's trial read ipu_bow's TPOT falling with context: each point had sized its own chip count
    (spatial.chips 80 -> 728). The sweep now says so, and an axis pinning hw.spatial.chips silences it."""
    import yaml

    from sim.apps.cli import main
    from tests.conftest import ROOT

    spec = tmp_path / "s.yaml"
    axes = {"workload.prompt_len": [128, 4000]}
    spec.write_text(yaml.safe_dump(dict(name="s", workload=str(ROOT / "workloads/llama2_7b_groq_2k.yaml"),
                                        hw="groq_lpu", axes=axes, metrics=["tpot_s"])))
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "1", "--no-plots"]) == 0
    assert "note: the spatial chip count follows each point (groq_lpu 36-46 chips)" in capsys.readouterr().err
    spec.write_text(yaml.safe_dump(dict(name="s", workload=str(ROOT / "workloads/llama2_7b_groq_2k.yaml"),
                                        hw="groq_lpu", axes={**axes, "hw.spatial.chips": [64]}, metrics=["tpot_s"])))
    assert main(["sweep", str(spec), "--out", str(tmp_path / "p"), "--workers", "1", "--no-plots"]) == 0
    assert "spatial chip count follows" not in capsys.readouterr().err


@pytest.mark.parametrize("hw", ["hbm_pim", "h100_offload"])
def test_a_binding_cap_is_in_extra_on_every_kind(hw):
    """`extra.power_cap` (docs/energy.md) was dropped by the pim and offload kinds, which replaced the figures'
    extra with their own (an energy researcher's trial): the note said the cap bound, the JSON did not."""
    import warnings

    w = workload_from_dict(dict(model="llama2-13b", batch=1, prompt_len=1024, gen_len=8), "t")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = simulate(w, load_machine(hw, {"units.gpu.power_limit_w": 200}))
    cap = r.extra["power_cap"]
    assert cap["limit_w"] == 200 and cap["prefill_stretch"] > 0
    assert any(n.startswith("power cap") for n in r.notes)


def test_a_limit_near_idle_says_no_clock_floor_is_modelled():
    """A 120 W limit on an H100 (117.1 W idle) stretched a prefill 245x: the note says the model has no clock floor
    past a 3x stretch (an energy researcher's trial), and stays as it was at a stretch below it."""
    import warnings

    w = workload_from_dict(dict(model="llama2-13b", batch=32, prompt_len=1024, gen_len=4), "t")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        low = simulate(w, load_machine("h100_sxm", {"units.gpu.power_limit_w": 120}))
        usual = simulate(w, load_machine("h100_sxm"))
    assert any("below a third of the full clock no clock floor is modelled" in n for n in low.notes)
    assert not any("no clock floor" in n for n in usual.notes)
    # an energy trial read utilization.gpu 11% at 150 W as an idle GPU: the note says it is the full-clock work
    # over the stretched time, and the figure is that
    [note] = [n for n in low.notes if n.startswith("power cap:")]
    assert "utilisation is the work at full clock over the stretched time" in note
    assert "op records (--json ops, --chrome-trace) run at the lowered clock" in note   # since stop 69
    assert low.utilization["gpu"] == pytest.approx(usual.utilization["gpu"] * usual.e2e_s / low.e2e_s, rel=0.02)


def test_a_scale_axis_reads_a_kind_section_and_keeps_a_count_whole(tmp_path):
    """The sweep's `scale:` and `--set hw.X=Nx` are one rule (sim.core.settings.scaled): a kind section's quantity as
    written ('2 GiB') is read, and a count stays an int (pim.stacks x 2 was 10.0, which the schema refuses), or is
    refused in one line where the factor leaves it fractional."""
    import yaml

    from sim.apps.sweep.expand import expand
    from sim.apps.sweep.spec import load_spec
    from sim.core.errors import ConfigError
    from tests.conftest import ROOT

    def points(axes):
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(dict(name="s", workload=str(ROOT / "workloads/llama13b_decode.yaml"),
                                            hw="hbm_pim", axes=axes)))
        return expand(load_spec(path))

    [p] = points({"hw.pim.stacks": {"scale": [2]}, "hw.pim.pim_capacity_bytes_per_stack": {"scale": [0.5]}})
    pim = p.config["machine"]["pim"]
    assert pim["stacks"] == 10 and isinstance(pim["stacks"], int)
    assert pim["pim_capacity_bytes_per_stack"] == 2 ** 30
    with pytest.raises(ConfigError, match=r"hw\.pim\.stacks: scale: hbm_pim's value 5 x 0\.5 is 2\.5, not a whole"):
        points({"hw.pim.stacks": {"scale": [0.5]}})


@pytest.mark.parametrize("stack", [None, "vllm", "vllm-v0"])
def test_capped_op_records_end_where_the_step_does(stack):
    """Under a binding limit the step's op records run at the lowered clock: the prefill's last record ends at the
    TTFT and the decode step's at its time, the engine's host work at its own speed, serial (vllm-v0) or
    overlapped (vllm) (they had stayed at full clock, ending 10-200% before the step). A pipeline, whose stages are
    capped apart, keeps them at full clock and its note says so."""
    import warnings

    from sim.core.workload import load_workload

    w = load_workload(ROOT / "workloads" / "llama13b_decode.yaml", overrides={"batch": 32, **({"stack": stack} if stack else {})})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = simulate(w, load_machine("h100_sxm", {"units.gpu.power_limit_w": 300}))
    cap = r.extra["power_cap"]
    # both phases bound (their boards would draw more than 300 W); the decode step's memory-bound ops keep their time
    assert cap["prefill_stretch"] > 1.0 and cap["decode_board_w"] > 300.0 and cap["decode_stretch"] < cap["prefill_stretch"]
    assert max(o.end_s for o in r.prefill_ops) == pytest.approx(r.ttft_s, rel=1e-9)
    assert max(o.end_s for o in r.decode_ops) == pytest.approx(r.decode_timeline.makespan_s, rel=1e-12)
    assert any("op records (--json ops, --chrome-trace) run at the lowered clock" in n for n in r.notes)

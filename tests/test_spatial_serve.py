"""Serving on the spatial kind (issue 29 item 6): a serving iteration's cost on a chip pipeline is
its occupancy with its micro-batches in flight, not the sum of their latencies."""

from __future__ import annotations

import json

import pytest
import yaml

from hw_models.pipeline_period import iteration_period_s
from hw_models.spatial.pipeline import decode_period_s, prefill_makespan_s
from sim.apps.cli import main
from tests.conftest import ROOT, write_serving_file
from tests.robust_helpers import refused
from tests.test_robust_serve import SERVE

# Two chips, a hop between them and the sampled token's return: 2 + 1 + 3 + 0.5 s.
STATIONS = [("chip0", 2.0), ("c2c0", 1.0), ("chip1", 3.0), ("c2c.return", 0.5)]


@pytest.mark.parametrize("m, period", [
    (1, 6.5),   # one micro-batch: its fill latency, 2 + 1 + 3 + 0.5
    (2, 6.5),   # two in flight: chip1 works 2 x 3 = 6 s < the 6.5 s a micro-batch takes to come back
    (3, 9.0),   # three: chip1's 3 x 3 = 9 s of work sets the period, not 3 x 6.5 s of latencies
])
def test_iteration_period_by_hand(m, period):
    assert iteration_period_s([STATIONS] * m) == pytest.approx(period)
    # The closed-loop engine simulation of the same micro-batches agrees (alike micro-batches: exact).
    assert decode_period_s(STATIONS, m, exhaustive=True) == pytest.approx(period)


def test_unlike_micro_batches_by_hand():
    """A prefill chunk (chip times 4 and 5) beside one decode group: chip1 carries 3 + 5 = 8 s of work,
    less than the chunk's own fill, 4 + 1 + 5 = 10 s; beside two, chip1's 3 + 3 + 5 = 11 s sets it."""
    chunk = [("chip0", 4.0), ("c2c0", 1.0), ("chip1", 5.0)]
    assert iteration_period_s([STATIONS, chunk]) == pytest.approx(10.0)
    assert iteration_period_s([STATIONS, STATIONS, chunk]) == pytest.approx(11.0)   # chip1: 3 + 3 + 5


@pytest.mark.parametrize("copies, period", [
    (1, 6.5),
    # three compiled chunks of one prompt, back to back: the last leaves 6.5 + 2 x 3 s (chip1) after the
    # first entered, more than chip1's 9 s of work: its first token waits for the last chunk
    (3, 12.5),
])
def test_chunks_of_one_prompt_by_hand(copies, period):
    assert iteration_period_s([STATIONS], [copies]) == pytest.approx(period)
    # the same as the engine's open pipeline of that many chunks (sim run's prefill)
    assert prefill_makespan_s(STATIONS, copies, exhaustive=True) == pytest.approx(period)


def _edit(s):
    s["arrivals"].update(num_requests=8)


def test_groq_serves(tmp_path):
    out = tmp_path / "r.json"
    f = write_serving_file(tmp_path, SERVE, _edit)
    assert main(["serve", str(f), "--hw", "groq_lpu", "--set", "hw.spatial.chips=64", "--json", str(out)]) == 0
    s = json.loads(out.read_text())
    s = s.get("summary", s)
    assert s["completed"] == 8
    # An architect's trial: `sim run` charges every chip its 215 W (power_w, no board-power model) for the whole run,
    # bubbles included, while serving drew 0 W between iterations (178 W average at 83% busy). Now the chips draw
    # it between iterations too: the average is at least power_w (plus the SRAM/C2C bytes' dynamic energy), and
    # the run says its J/token is of that model.
    e = s["energy"]
    assert e["devices"] == 64 and e["avg_power_per_device_w"] >= 215.0 * (1 - 1e-9)
    assert "every chip's power_w over the whole run" in e["note"]


def test_groq_iteration_is_its_micro_batches_occupancy(tmp_path):
    """The mapper's iteration: decode sequences in micro-batches, each prefill chunk its own, the
    period of those stations (not their summed latencies)."""
    from hw_models.machine import load_machine
    from hw_models.registry import mapper_for
    from sim.apps.serve.spec import load_serve_file
    f = load_serve_file(write_serving_file(tmp_path, SERVE, _edit))
    m = load_machine("groq_lpu", {"spatial.chips": 64})
    mp = mapper_for(m, f, f.model_config_())
    seqs = ((1, 100),) * (2 * mp.cfg.microbatch_size) + ((32, 32),)
    step = mp.iteration(seqs, device_only=True)
    mbs = mp._microbatches(seqs)
    assert len(mbs) == 3 and [b[4] for b in mbs] == [1, 1, 1]   # a 32-token prompt: one compiled chunk
    st = [mp._serving_costs(*b[:4]).stations() for b in mbs]
    assert step.time_s == pytest.approx(iteration_period_s(st))
    assert step.time_s < sum(sum(t for _, t in s) for s in st)   # in flight together
    share = mp.device_share()
    assert share.devices == 64 and 0 < share.kv < 1 and share.reserved_bytes == 0.0


def test_spatial_kv_in_dram_is_refused(tmp_path, capsys):
    f = write_serving_file(tmp_path, SERVE, _edit)
    line = refused(capsys, ["serve", str(f), "--hw", "ipu_bow", "--set", "hw.spatial.kv_cache=dram",
                            "--set", "hw.spatial.chips=8"], tmp_path)
    assert "spatial.kv_cache: dram: sim serve sizes the KV pool in the chips' SRAM" in line


def test_spatial_auto_chips_is_refused(tmp_path, capsys):
    """chips: auto fills the chips with one batch's KV: no pool is left to serve from."""
    f = write_serving_file(tmp_path, SERVE, _edit)
    line = refused(capsys, ["serve", str(f), "--hw", "groq_lpu"], tmp_path)
    assert "spatial.chips: auto sizes the pipeline to just hold one batch's KV" in line
    assert "--set hw.spatial.chips=" in line


def test_a_prompt_runs_as_the_pipelines_compiled_chunks(tmp_path):
    """A 300-token prompt chunk after 100 cached tokens, with 128-token compiled chunks: 3 chunks (the last
    padded, as sim run prefills) at the mean context 100 + 128 x (3 + 1) / 2 = 356 keys, pipelined."""
    from hw_models.machine import load_machine
    from hw_models.registry import mapper_for
    from sim.apps.serve.spec import load_serve_file
    f = load_serve_file(write_serving_file(tmp_path, SERVE, _edit))
    m = load_machine("groq_lpu", {"spatial.chips": 64, "spatial.prefill_chunk_tokens": 128})
    mp = mapper_for(m, f, f.model_config_())
    assert mp._microbatches(((300, 400),)) == [("prefill", 1, 128, 356, 3)]
    st = mp._serving_costs("prefill", 1, 128, 356).stations()
    assert mp.iteration(((300, 400),), device_only=True).time_s == pytest.approx(
        prefill_makespan_s(st, 3, exhaustive=True))


def test_lone_request_ttft_is_sim_runs_prefill(tmp_path):
    """One client, nothing else in flight: a request's TTFT under sim serve is the pipelined prefill that
    sim run reports for the same prompt on the same chips (before this, serving sent the whole prompt
    through as one micro-batch: 7.7x sim run's on Llama-2-70B, 1024 tokens, 355 chips)."""
    chips = ["--set", "hw.spatial.chips=64"]

    def one_client(s):
        s["arrivals"] = dict(process="closed", concurrency=1, num_requests=2)
        s["lengths"] = dict(prompt=dict(dist="fixed", value=512), output=dict(dist="fixed", value=4))
    f = write_serving_file(tmp_path, SERVE, one_client)
    out = tmp_path / "serve.json"
    assert main(["serve", str(f), "--hw", "groq_lpu", *chips, "--json", str(out), "-q"]) == 0
    served = json.loads(out.read_text())["benchmark"]   # the closed loop's means
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump(dict(model="tinyllama-1.1b", batch=1, prompt_len=512, gen_len=4)))
    ran = tmp_path / "run.json"
    assert main(["run", str(run_file), "--hw", "groq_lpu", *chips, "--json", str(ran), "-q"]) == 0
    ttft_run = json.loads(ran.read_text())["ttft_s"]
    assert served["ttft_s"] == pytest.approx(ttft_run, rel=1e-3)


def test_memory_table_says_whose_bytes(tmp_path, capsys):
    """The peak-memory table of a chip pipeline is one chip's (the fullest, which may hold no KV: a slice
    without attention); its caption names the chip and what all chips hold together."""
    wl = tmp_path / "w.yaml"
    wl.write_text(yaml.safe_dump(dict(model="tinyllama-1.1b", batch=1, prompt_len=512, gen_len=4)))
    out = tmp_path / "r.json"
    assert main(["run", str(wl), "--hw", "groq_lpu", "--set", "hw.spatial.chips=64", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    sp = data["extra"]["spatial"]
    assert data["memory_scope"].startswith("one chip, the fullest (chip")
    assert f" of {sp['chips']}); all chips together hold weights " in data["memory_scope"]
    assert data["memory_scope"] in " ".join(capsys.readouterr().out.split())


def test_speculative_decoding_is_refused_with_the_reason(tmp_path, capsys):
    # It charged the whole draft to every chip and then failed on serving.scheduler.gpu_memory_utilization,
    # a knob the spatial kind does not have.
    def spec(s):
        s["speculative"] = dict(draft="tinyllama-1.1b", k=4, alpha=0.7)
    f = write_serving_file(tmp_path, SERVE, spec)
    line = refused(capsys, ["serve", str(f), "--hw", "groq_lpu", "--set", "hw.spatial.chips=64", "-q"], tmp_path)
    assert line == (f"error: {f}: serving.speculative: not modelled on groq_lpu (kind spatial): a draft model would "
                    "need chips of its own (its weights resident in SRAM beside the target's, its own pipeline), and "
                    "the spatial kind places one model over its chips; serve the draft and target as separate runs "
                    "to compare them")


def test_serving_iterations_draw_the_board_power_model_as_a_run_does():
    """With idle + activity figures a chip draws idle_w + active_w x its busy share, in a serving iteration as in
    `sim run`'s figures; the iteration had charged the 215 W TDP over its period, 10x the run (a code review)."""
    from hw_models.machine import load_machine
    from hw_models.registry import mapper_for
    from sim.core.workload import load_workload
    w = load_workload(ROOT / "workloads" / "llama2_7b_groq_2k.yaml")
    m = mapper_for(load_machine("groq_lpu", {"spatial.chips": 64, "units.chip.idle_power_w": 20,
                                             "units.chip.active_power_w": 30}), w, w.model_config_())
    step = m.iteration([(1, 2000)])
    per_chip_w = step.energy_j / step.time_s / m.devices
    run = m.simulate(detail=False)
    run_w = run.energy_per_token_j * run.batch * run.gen_len / run.e2e_s / m.devices
    assert 20 <= per_chip_w <= 50 and per_chip_w == pytest.approx(run_w, rel=0.05)


@pytest.mark.parametrize("key, value", [("sm_clock_fraction", "0.5"), ("power_limit_w", "150")])
def test_a_clock_lock_or_power_limit_on_a_spatial_preset_is_refused(capsys, key, value):
    """The spatial kind runs one chip clock (spatial.pe_array.clock_hz) and caps no step, so a lock or a limit on a
    preset with a board-power model had run unlocked without a word (stop 74's note)."""
    w = str(ROOT / "workloads" / "llama2_7b_groq_2k.yaml")
    assert main(["run", w, "--hw", "groq_lpu", "--set", "hw.units.chip.idle_power_w=100",
                 "--set", f"hw.units.chip.{key}={value}", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"units.chip.{key} {value}: the spatial kind models no board power limit or clock lock" in err
    assert "spatial.pe_array.clock_hz" in err and "Traceback" not in err


def test_the_kv_pool_fills_the_sram_the_compiler_may_use(tmp_path, capsys):
    """A chip's pool is its usable SRAM (spatial.usable_fraction) less its weights and activations, not the
    allocator's 0.9 of the whole SRAM: usable_fraction 0.5 had given more blocks than 0.9 (a code review). A file's
    gpu_memory_utilization is then not read, and said."""
    from hw_models.machine import load_machine
    from sim.apps.serve.instance import prepare
    from sim.apps.serve.spec import load_serve_file
    f = write_serving_file(tmp_path, {**SERVE, "formats": {"weights": "int8"}},
                           lambda srv: srv["scheduler"].update(gpu_memory_utilization=0.8))
    filled = {}
    for uf in (0.9, 0.5):
        m = load_machine("groq_lpu", {"spatial.chips": 16, "spatial.usable_fraction": uf})
        s = prepare(load_serve_file(f), m)
        sram = m.memory[m.device_tier].capacity_bytes
        filled[uf] = (s.total_blocks * s.block_bytes + s.weights_bytes + s.activation_bytes) / sram
    assert filled[0.9] == pytest.approx(0.9, abs=0.01) and filled[0.5] == pytest.approx(0.5, abs=0.01)
    assert main(["serve", str(f), "--hw", "groq_lpu", "--set", "hw.spatial.chips=16", "-q"]) == 0
    assert "serving.scheduler.gpu_memory_utilization: not read on groq_lpu (kind spatial)" in capsys.readouterr().err

"""Top-p sampling's GPU work (hw_models.stack.sampler, the vllm stack's top_p_sampler): the shipped figures
are the fit's on the published timings, a step's sampler time and energy by hand, where it applies and
where it does not, and a bad `sampling` in one line."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from hw_models.registry import mapper_for
from hw_models.stack.sampler import SEGMENTED_ROWS
from hw_models.stack.sampler_fit import PUBLISHED, fit
from hw_models.stack.spec import load_stack
from sim.apps.serve.run import serve
from sim.apps.serve.spec import ServeFile
from sim.apps.serve.iteration import features
from sim.apps.serve.stepcost import ExactCost
from sim.core.model import load_model
from sim.core.schema import validate_mapping
from sim.core.workload import workload_from_dict
from tests.robust_helpers import refused

H100_BW = 3.35e12          # h100_sxm.yaml
H100_IDLE_W, H100_ACTIVE_W = 117.1, 230.0
HBM_J_PER_BYTE = 4.0e-11
LLAMA3_VOCAB = 128256
# vllm.yaml as shipped
FIXED_S, BYTES, BLOCK_S, DRAW_BYTES, DRAM_BYTES = 0.114e-3, 443.0, 31.0e-9, 46.0, 260.0


def test_shipped_figures_are_the_fit():
    f, s = fit(), load_stack("vllm").top_p_sampler
    assert (s.fixed_s, s.bytes_per_logit, s.block_s_per_logit) == (FIXED_S, BYTES, BLOCK_S)
    assert f.fixed_s == pytest.approx(FIXED_S, abs=0.5e-6)          # printed to 0.001 ms
    assert f.bytes_per_logit == pytest.approx(BYTES, abs=0.5)
    assert f.block_s_per_logit == pytest.approx(BLOCK_S, abs=0.05e-9)


def test_fit_residuals_on_the_published_timings():
    """vllm.yaml quotes them: +2.3, +2.3, +9.5, -21.6, 0.0, +1.8% (the 64-row H200 point is the worst)."""
    f = fit()
    errs = sorted(abs(f.seconds(t) / t.seconds - 1.0) for t in PUBLISHED)
    assert errs[-1] < 0.22 and errs[len(errs) // 2] < 0.03


def test_seconds_by_hand():
    s = load_stack("vllm").top_p_sampler
    assert s.draw_bytes_per_logit == DRAW_BYTES
    draw = LLAMA3_VOCAB * DRAW_BYTES / H100_BW   # the rest of the sampler, per row
    # 64 rows, the device-wide sort: fixed + rows x vocab x (bytes + draw bytes) / rate
    assert s.seconds(64, LLAMA3_VOCAB, H100_BW) == pytest.approx(FIXED_S + 64 * LLAMA3_VOCAB * BYTES / H100_BW + 64 * draw)
    assert s.seconds(64, LLAMA3_VOCAB, H100_BW) == pytest.approx(1.3122e-3, rel=1e-3)
    # 200 rows, the segmented sort still in its one wave: the floor (3.976 ms) above the stream (3.392 ms)
    assert s.seconds(200, LLAMA3_VOCAB, H100_BW) == pytest.approx(FIXED_S + LLAMA3_VOCAB * BLOCK_S + 200 * draw)
    assert s.seconds(0, LLAMA3_VOCAB, H100_BW) == 0.0
    assert s.seconds(1, LLAMA3_VOCAB, H100_BW) == pytest.approx(FIXED_S + LLAMA3_VOCAB * BYTES / H100_BW + draw)
    assert s.dram_bytes(64, LLAMA3_VOCAB) == 64 * LLAMA3_VOCAB * DRAM_BYTES
    assert s.dram_bytes(0, LLAMA3_VOCAB) == 0.0 and s.dram_bytes(-1, LLAMA3_VOCAB) == 0.0


def test_never_falls_with_rows_and_jumps_where_torch_changes_sort():
    s = load_stack("vllm").top_p_sampler
    t = [s.seconds(r, LLAMA3_VOCAB, H100_BW) for r in range(1, 1025)]
    assert all(b >= a for a, b in zip(t, t[1:]))
    assert t[SEGMENTED_ROWS - 1] > 1.5 * t[SEGMENTED_ROWS - 2]


def serve_file(stack: str, sampling: str, tp: int = 1, pp: int = 1) -> ServeFile:
    s = dict(arrivals=dict(process="poisson", rate=6.0, num_requests=4, seed=5),
             lengths=dict(prompt=dict(dist="uniform", low=32, high=64), output=dict(dist="uniform", low=4, high=8)))
    return validate_mapping(ServeFile, dict(name="t", model="llama3-8b", flash_attention=True, stack=stack,
                                            sampling=sampling, parallel=dict(tp=tp, pp=pp, **({"topology": "dgx_h100"} if tp * pp > 1 else {})),
                                            serving=s), "t.yaml",
                            "a serving file")


@pytest.mark.parametrize("rows", [64, 200])
def test_a_top_p_step_adds_the_sampler_serially_with_its_energy(rows):
    """vllm-v0 (serial host): the iteration grows by the sampler's seconds, its energy by idle + activity
    power over them and the DRAM bytes at the HBM's energy per byte."""
    h100 = load_machine("h100_sxm")
    it = features([(1, 300)] * rows)
    greedy = ExactCost(h100, serve_file("vllm-v0", "greedy"), load_model("llama3-8b"))(it)
    top_p = ExactCost(h100, serve_file("vllm-v0", "top_p"), load_model("llama3-8b"))(it)
    s = load_stack("vllm").top_p_sampler.seconds(rows, LLAMA3_VOCAB, H100_BW)
    assert top_p[0] - greedy[0] == pytest.approx(s, rel=1e-9)
    joules = (H100_IDLE_W + H100_ACTIVE_W) * s + rows * LLAMA3_VOCAB * DRAM_BYTES * HBM_J_PER_BYTE
    assert top_p[1] - greedy[1] == pytest.approx(joules, rel=1e-9)


def test_every_tp_rank_of_the_last_stage_samples_the_whole_vocabulary():
    h100 = load_machine("h100_sxm")
    one = mapper_for(h100, serve_file("vllm", "top_p"), load_model("llama3-8b")).sampler(96)
    two = mapper_for(h100, serve_file("vllm", "top_p", tp=2), load_model("llama3-8b")).sampler(96)
    assert two[0] == pytest.approx(one[0]) and two[1] == pytest.approx(2 * one[1])
    # Two pipeline stages: only the last one samples; the first idles through it (at activity power, as any
    # in-loop gap): the DRAM energy is one device's.
    staged = mapper_for(h100, serve_file("vllm", "top_p", pp=2), load_model("llama3-8b"))
    t, j = staged.sampler(96)
    dram = 96 * LLAMA3_VOCAB * DRAM_BYTES * HBM_J_PER_BYTE
    assert t == pytest.approx(one[0]) and j == pytest.approx(2 * H100_ACTIVE_W * t + dram)


@pytest.mark.parametrize("stack, sampling", [("vllm", "greedy"), ("vllm", "random"), ("sglang", "top_p"),
                                             ("trtllm", "top_p")])
def test_no_sampler_work_where_none_is_modelled(stack, sampling):
    m = mapper_for(load_machine("h100_sxm"), serve_file(stack, sampling), load_model("llama3-8b"))
    assert m.sampler(128) == (0.0, 0.0)


def test_sim_run_decode_step_carries_it():
    h100 = load_machine("h100_sxm")
    wl = {s: workload_from_dict(dict(name="t", model="llama3-8b", batch=64, prompt_len=128, gen_len=8,
                                     flash_attention=True, stack="vllm-v0", sampling=s), "t.yaml")
          for s in ("greedy", "top_p")}
    steps = {s: mapper_for(h100, w, load_model("llama3-8b")).step("decode", 1, 200) for s, w in wl.items()}
    s = load_stack("vllm").top_p_sampler.seconds(64, LLAMA3_VOCAB, H100_BW)
    assert steps["top_p"].time_s - steps["greedy"].time_s == pytest.approx(s, rel=1e-9)
    assert steps["top_p"].counters["sampler_s"] == pytest.approx(s)


@pytest.mark.parametrize("key, value", [("sampling", "nucleus"), ("penalties", "1.1")])
def test_bad_sampling_is_one_line(tmp_path, capsys, key, value):
    """An unknown sampling, or a penalty value where `penalties` is a switch (tests/test_penalties.py)."""
    path = tmp_path / "w.yaml"
    path.write_text(f"model: llama3-8b\n{key}: {value}\n")
    line = refused(capsys, ["run", str(path), "--hw", "h100_sxm"], tmp_path)
    assert key in line and str(path) in line


def test_serving_reports_the_sampler_busy_time():
    """One request, so every iteration samples one row: the `sampler` utilisation x the run's span is the
    iterations x the one-row time; a greedy run has no such entry."""
    h100 = load_machine("h100_sxm")
    one = dict(arrivals=dict(process="poisson", rate=6.0, num_requests=1, seed=5),
               lengths=dict(prompt=dict(dist="uniform", low=32, high=64), output=dict(dist="uniform", low=4, high=8)))
    runs = {s: serve(validate_mapping(ServeFile, dict(name="t", model="llama3-8b", flash_attention=True, stack="vllm-v0",
                                                      sampling=s, serving=one), "t.yaml", "a serving file"), h100)[1]
            for s in ("greedy", "top_p")}
    top = runs["top_p"]
    t1 = load_stack("vllm").top_p_sampler.seconds(1, LLAMA3_VOCAB, H100_BW)
    assert top["utilization"]["sampler"] * top["duration_s"] == pytest.approx(top["iterations"] * t1, rel=1e-9)
    assert "sampler" not in runs["greedy"]["utilization"]
    assert top["duration_s"] == pytest.approx(runs["greedy"]["duration_s"] + top["iterations"] * t1, rel=1e-9)


def test_top_p_on_a_stack_without_the_sampler_warns(tmp_path, capsys):
    """trtllm models no top-p sampler: the run goes on, with one warning naming the file and key."""
    from sim.apps.cli import main
    path = tmp_path / "w.yaml"
    path.write_text("model: llama3-8b\nbatch: 4\ngen_len: 4\nstack: trtllm\nsampling: top_p\n")
    capsys.readouterr()
    assert main(["run", str(path), "--hw", "h100_sxm", "-q"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"warning: {path}: sampling: top_p costs nothing here: stack 'trtllm' has no top_p_sampler "
                   "(the vllm stacks model vLLM's sort-based sampler, hw_models/stack/sampler.py)"]
    path.write_text("model: llama3-8b\nbatch: 4\ngen_len: 4\nstack: vllm\nsampling: top_p\n")
    assert main(["run", str(path), "--hw", "h100_sxm", "-q"]) == 0
    assert capsys.readouterr().err.strip() == ""


def test_the_warning_reads_the_stack_as_the_preset_runs_it():
    """A preset that drops the sampler from its vllm stack (`stacks:`) charges none and is warned about, as the
    mapper sees the stack (stack_for), not the stack file alone."""
    from sim.apps.checks import unused_settings
    h100 = load_machine("h100_sxm", {"stacks": {"vllm": {"top_p_sampler": None}}})
    w = workload_from_dict(dict(name="t", model="llama3-8b", stack="vllm", sampling="top_p"), "t.yaml")
    assert mapper_for(h100, w, load_model("llama3-8b")).sampler(64) == (0.0, 0.0)
    assert [n for n in unused_settings(w, h100, load_model("llama3-8b")) if "sampling" in n]
    assert not unused_settings(w, load_machine("h100_sxm"), load_model("llama3-8b"))

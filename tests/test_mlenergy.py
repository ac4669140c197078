"""ML.ENERGY replay (issue 33): the assumed chat prompt lengths are the published statistics'
arithmetic, the fit recovers known figures by hand, the shipped presets are scripts/fit_energy.py's
output, and `sim validate-energy` replays a slice of the measured runs (bad input: one line, exit 2)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from sim.apps.cli import main
from sim.apps.serve import mlenergy as M
from sim.apps.serve import mlenergy_fit as F
from sim.apps.serve import mlenergy_inputs as I
from tests.conftest import ROOT


# One replayable row of the runs table (M.COLUMNS), as the published CSV has it
ROW = ["mlenergy-v3", "H100", "meta-llama/Llama-3.1-8B-Instruct", "bfloat16", "lm-arena-chat",
       "1", "1", "1", "1", "1", "8", "404.2", "0.4548", "486.4", "1077.0"]


def _run(power_w: float, **kw) -> M.Run:
    base = dict(gpu="H100", model="meta-llama/Llama-3.1-8B-Instruct", precision="bfloat16", task="lm-arena-chat",
                num_gpus=1, tp=1, ep=1, max_num_seqs=8, avg_output_tokens=400.0, j_per_token=0.5,
                power_per_gpu_w=power_w, throughput_tok_s=1000.0)
    return M.Run(**{**base, **kw})


def test_chat_prompt_is_the_published_arena_figures_with_history():
    # By hand: 1.2 turns x 52.3 tokens + 0.2 x 189.5 response tokens + 30 template = 130.66 (arXiv:2309.11998).
    assert I.request_prompt_tokens(I.CHATBOT_ARENA_33K) == pytest.approx(130.66)
    assert M.INPUT_MEAN["lm-arena-chat"] == 131
    # The closed form against the sum it stands for: geometric turns of mean m, request k carries k prompts and
    # k - 1 responses; mean over requests = sum_t P(t) sum_k (k p + (k-1) r) / E[T], series cut where P < 1e-30.
    for s in (I.CHATBOT_ARENA_33K, I.LMSYS_CHAT_1M):
        q = 1.0 - 1.0 / s.turns
        pt = [(1.0 - q) * q ** (t - 1) for t in range(1, 200)]
        total = sum(w * sum(k * s.prompt_tokens + (k - 1) * s.response_tokens for k in range(1, t + 1))
                    for t, w in zip(range(1, 200), pt))
        turns = sum(t * w for t, w in zip(range(1, 200), pt))
        assert I.request_prompt_tokens(s, 0.0) == pytest.approx(total / turns, rel=1e-9)


def test_prefix_cache_skips_all_but_one_turn_in_m():
    # Request k recomputes only its prompt and the previous response: p + r (m-1)/m = (m p + (m-1) r) / m,
    # so a perfect prefix cache skips 1 - 1/m of the history tokens: 1/6 at the Arena's 1.2 turns, 1/2 at 2.0.
    assert I.prefix_cached_share(I.CHATBOT_ARENA_33K) == pytest.approx(1.0 / 6.0)
    assert I.prefix_cached_share(I.LMSYS_CHAT_1M) == pytest.approx(0.5)


def test_fit_recovers_the_figures_that_made_the_powers():
    # Powers made by hand from active 300 W, 0.5 pJ/FLOP and 60 pJ/byte: P = p0 + 300 busy + 0.5e-12 per_j
    # + 60e-12 per_b (per_b: HBM bytes a second), all below 0.97 x 700 W (510-640 W).
    parts = [(120.0, 1.0, 2e14, 2e12), (150.0, 0.9, 2e14, 1e12), (100.0, 1.0, 1e14, 3e12), (130.0, 0.8, 1e14, 1.5e12),
             (110.0, 0.95, 3e14, 0.5e12)]
    comps = [F.Components(_run(p0 + 300.0 * b + 0.5e-12 * q + 60e-12 * y, max_num_seqs=i), p0, b, q, 1000.0, y)
             for i, (p0, b, q, y) in enumerate(parts)]
    # A run measured at the cap (700 W: above 0.97 x 700) says only the limit; left out, it cannot pull the fit.
    comps.append(F.Components(_run(695.0, max_num_seqs=99), 150.0, 1.0, 9e14, 1000.0, 1e12))
    for held in (None, 60e-12):   # the HBM's figure fitted too, or held at the one that made the powers
        fit = F.fit(comps, 700.0, held)
        assert (fit.active_power_w, fit.fp16_j_per_flop, fit.hbm_j_per_byte, fit.runs, fit.left_out) == \
            (300.0, 0.5e-12, 60e-12, 5, 1)
        assert fit.power_mape < 1e-9
    # Held at a wrong figure, the other two absorb what they can and the error shows it.
    assert F.fit(comps, 700.0, 20e-12).power_mape > 0.01


def test_fit_keeps_every_figure_non_negative():
    # Powers made with a negative activity power (-50 W) cannot be met: the fit holds it at 0 and the others absorb.
    parts = [(120.0, 1.0, 2e14, 2e12), (150.0, 1.0, 4e14, 1e12), (100.0, 1.0, 5e14, 3e12)]
    comps = [F.Components(_run(p0 - 50.0 * b + 0.5e-12 * q + 60e-12 * y, max_num_seqs=i), p0, b, q, 1000.0, y)
             for i, (p0, b, q, y) in enumerate(parts)]
    fit = F.fit(comps, 700.0, None)
    assert fit.active_power_w == 0.0 and fit.fp16_j_per_flop >= 0 and fit.hbm_j_per_byte >= 0


def test_predict_is_power_times_gpus_over_throughput():
    c = F.Components(_run(500.0, num_gpus=4), 100.0, 0.5, 1e14, 2000.0, 1e12)
    x = F.predict(c, 200.0, 1e-12, 50e-12)
    assert x.power_per_gpu_w == pytest.approx(100.0 + 100.0 + 100.0 + 50.0)
    assert x.j_per_token == pytest.approx(350.0 * 4 / 2000.0)


def test_shipped_power_figures_are_the_fit(shared_validation):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "fit_energy.py"), "--check"], capture_output=True,
                       text=True, env={"SIM_SHARED_VALIDATION": str(shared_validation), "PATH": "/usr/bin:/bin",
                                       "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout + r.stderr


def _slice(shared, tmp_path, n: int = 1):
    """The smallest H100 Llama-3.1-8B chat runs of the shared CSV, as a CSV of their rows (a test input)."""
    with open(shared / M.CSV_NAME, newline="") as f:
        rows = list(csv.DictReader(f))
    pick = sorted((r for r in rows if r["source_id"] == "mlenergy-v3" and r["gpu"] == "H100"
                   and r["model"] == "meta-llama/Llama-3.1-8B-Instruct" and r["task"] == "lm-arena-chat"),
                  key=lambda r: int(r["max_num_seqs"]))[:n]
    path = tmp_path / "slice.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(pick)
    return path


def test_validate_energy_replays_a_slice(shared_validation, tmp_path, capsys):
    out = tmp_path / "e.json"
    assert main(["validate-energy", str(_slice(shared_validation, tmp_path)), "--hw", "h100_sxm",
                 "--json", str(out)]) == 0
    assert "MAPE (1 runs)" in capsys.readouterr().out
    d = json.loads(out.read_text())
    (x,) = d["runs"]
    assert x["run"]["max_num_seqs"] == 8
    assert x["j_per_token"] == pytest.approx(x["power_per_gpu_w"] / x["throughput_tok_s"])
    # In sample (the fit's H100 runs): the power per GPU within the H100 target, 10%.
    assert abs(x["power_error"]) <= 0.10
    assert x["in_fit"] is True   # the smallest run of its sweep: the fit's first sample of it, marked so


def test_the_runs_the_fit_used_are_the_library_s(shared_validation):
    """scripts/fit_energy.py and `sim validate-energy`'s 'fit' column read one rule (mlenergy.fit_runs): on the
    published table, 19 H100 runs (docs/energy.md: the fit used 19, one of them left out at the 700 W cap), every
    4th of each chat and code sweep to 512 sequences, none of another GPU (an energy researcher's trial: the table
    did not say which rows were in sample)."""
    runs = M.load_runs(shared_validation)
    fit = M.fit_runs(runs)
    assert len(fit) == 19 and {r.gpu for r in fit} == {"H100"}
    # The models added after the fit are replayable but held out by model: the fit's runs are those of FIT_MODELS.
    assert {r.model for r in fit} <= M.FIT_MODELS < {r.model for r in runs}
    assert {"Qwen/Qwen3-14B", "meta-llama/Llama-3.1-405B-Instruct"} <= {r.model for r in runs}
    assert all(r.max_num_seqs <= 512 and r.task in ("lm-arena-chat", "sourcegraph-fim") for r in fit)


def test_validate_energy_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    other = tmp_path / "x.csv"
    other.write_text("a,b\n1,2\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    for argv in ([str(tmp_path / "none.csv")], [str(other)], [str(empty)], [str(other), "--hw", "h200"]):
        assert main(["validate-energy", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err and "\n" not in err and "Traceback" not in err, argv


def test_a_truncated_runs_table_names_the_line_and_column(tmp_path, capsys):
    """A replayable row cut short (a truncated file: its last columns empty) is one line naming where, exit 2."""
    header = ",".join(M.COLUMNS)
    row = dict(zip(M.COLUMNS, ROW))
    full = ",".join(row.values())
    cut = full[:full.index(",8,") + 2]          # ends with max_num_seqs
    path = tmp_path / "runs.csv"
    path.write_text(f"{header}\n{full}\n{cut}\n")
    cells = cut.count(",") + 1
    with pytest.raises(ValueError, match=rf"line 3 has {cells} of the header's {len(M.COLUMNS)} columns \(a truncated"):
        M.read_runs(path)
    assert main(["validate-energy", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "line 3 has" in err and "\n" not in err and "Traceback" not in err
    # cut inside the model's name (a hostile-input trial): the row matched no model and was dropped without a word
    path.write_text(f"{header}\n{full}\n{full[:full.index('Llama') + 3]}\n")
    with pytest.raises(ValueError, match="line 3 has .* columns"):
        M.read_runs(path)
    path.write_text(f"{header}\n{full}\n")
    (run,) = M.read_runs(path)
    assert (run.max_num_seqs, run.avg_output_tokens, run.throughput_tok_s) == (8, 404.2, 1077.0)


@pytest.mark.parametrize("col, value, want", [
    ("num_gpus", "0", "a whole number >= 1"), ("tensor_parallel", "1.5", "a whole number >= 1"),
    ("max_num_seqs", "0", "a whole number >= 1"), ("avg_output_tokens", "0", "a positive number"),
    ("energy_per_output_token_j", "nan", "a positive number"), ("energy_per_output_token_j", "inf", "a positive number"),
    ("avg_power_per_gpu_w", "-400", "a positive number"), ("output_throughput_tok_s", "0", "a positive number")])
def test_a_cell_no_run_can_have_is_one_line_naming_it(tmp_path, capsys, col, value, want):
    """A zero, negative or non-finite measurement, or a fractional GPU or sequence count, is refused where it is
    (it had crashed with a ZeroDivisionError, or been replayed into a NaN MAPE or truncated to an int)."""
    row = dict(zip(M.COLUMNS, ROW))
    path = tmp_path / "runs.csv"
    path.write_text(",".join(M.COLUMNS) + "\n" + ",".join({**row, col: value}.values()) + "\n")
    assert main(["validate-energy", str(path), "--hw", "h100_sxm"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {path}: line 2: {col} is '{value}': expected {want}"


def test_a_gzipped_runs_table_reads_as_the_plain_one(tmp_path):
    import gzip
    text = ",".join(M.COLUMNS) + "\n" + ",".join(ROW) + "\n"
    plain, gz = tmp_path / "runs.csv", tmp_path / "runs.csv.gz"
    plain.write_text(text)
    gz.write_bytes(gzip.compress(text.encode()))
    assert M.read_runs(gz) == M.read_runs(plain) and len(M.read_runs(gz)) == 1
    gz.write_bytes(gzip.compress(text.encode())[:40])        # cut short
    assert main(["validate-energy", str(gz)]) == 2


def test_the_replay_samples_top_p_as_the_benchmark_client_does():
    """ml-energy/benchmark's client sends top_p 0.95 at temperature 0.8 and repetition_penalty 1.1 (sim.apps.serve.
    mlenergy module doc); `sampling` is the what-if."""
    assert M.serve_file(_run(500.0)).sampling == "top_p" and M.serve_file(_run(500.0)).penalties
    assert M.serve_file(_run(500.0), sampling="greedy").sampling == "greedy"


def test_validate_energy_greedy_what_if_is_faster(shared_validation, tmp_path):
    """Without the sampler's GPU work the same run reads more tokens/s (at 8 sequences the sampler is ~0.26 ms
    of a ~7.5 ms step)."""
    path = _slice(shared_validation, tmp_path)
    out = {}
    for s in ("top_p", "greedy"):
        assert main(["validate-energy", str(path), "--hw", "h100_sxm", "--sampling", s, "-q",
                     "--json", str(tmp_path / f"{s}.json")]) == 0
        out[s] = json.loads((tmp_path / f"{s}.json").read_text())
    assert out["greedy"]["sampling"] == "greedy"
    assert out["greedy"]["runs"][0]["throughput_tok_s"] > out["top_p"]["runs"][0]["throughput_tok_s"]



def test_the_cli_selects_the_runs_of_the_docs_table(shared_validation, capsys):
    """`sim validate-energy --every 2 --task lm-arena-chat --task sourcegraph-fim` takes docs/energy.md's 32 H100
    runs (scripts/energy_mlenergy.py's selection): it had filtered by max_num_seqs before sampling, so every sweep's
    512-sequence run joined as its largest, 37 runs (an energy researcher's trial); and it names the assumed prompts."""
    import argparse

    from sim.apps.serve.mlenergy_cli import _inputs_line, _runs

    args = argparse.Namespace(hw="h100_sxm", path=str(shared_validation), every=2, max_num_seqs=512, limit=None,
                              task=["lm-arena-chat", "sourcegraph-fim"])
    runs, _ = _runs(args)
    assert len(runs) == 70   # 32 of the fit's models, 38 of the models added at stop 72 (FIT_MODELS)
    assert sum(r.model in M.FIT_MODELS for r in runs) == 32
    assert runs == M.select(M.load_runs(shared_validation), "H100", 2, 512, ("lm-arena-chat", "sourcegraph-fim"))
    assert "lm-arena-chat 262" in _inputs_line(2.0) and "--input-scale 2" in _inputs_line(2.0)


def test_validate_energy_groups_by_model_and_fit_with_signed_medians():
    """An energy trial: one MAPE over every model hid the 8B's error growing with max_num_seqs (-6 to -31% inside an
    8% MAPE), and the JSON held only the overall MAPE. The table and the JSON now give each (model, GPUs) its MAPE
    and signed median, and the in-fit / not-in-fit split where both occur."""
    from collections import namedtuple
    from types import SimpleNamespace

    from sim.apps.serve.mlenergy_cli import _errors, _groups

    run = namedtuple("Run", "model num_gpus j")   # hashable, as the runs are

    def x(model: str, gpus: int, j: float) -> SimpleNamespace:
        return SimpleNamespace(run=run(f"meta-llama/{model}", gpus, j), j_error=j, power_error=j / 2,
                               throughput_error=-j)

    from sim.apps.serve.mlenergy_cli import _median

    b8, b70 = "Llama-3.1-8B-Instruct", "Llama-3.1-70B-Instruct"   # two of the fit's models (mlenergy.FIT_MODELS)
    xs = [x(b8, 1, -0.06), x(b8, 1, -0.19), x(b8, 1, -0.31), x(b70, 4, 0.02), x(b70, 4, -0.04)]
    groups = _groups(xs, {xs[0].run, xs[3].run})
    assert [label for label, _, _ in groups] == ["", " in the power fit", " of its models not in the power fit",
                                                 f": {b70}, 4 GPUs", f": {b8}, 1 GPU"]
    assert groups[4][1] == {"runs_of": "model", "model": b8, "gpus": 1} and groups[1][1]["in_fit"] is True
    eight = groups[4][2]
    assert _median(eight) == pytest.approx(-0.19) and _errors(eight)["j_per_token"] == pytest.approx(0.56 / 3)
    assert _errors(xs)["j_per_token"] == pytest.approx(0.62 / 5) and _errors(xs)["power_per_gpu"] == pytest.approx(0.31 / 5)
    assert [label for label, _, _ in _groups(xs[:3], set())] == [""]   # one model, none in the fit: the overall row


def test_fp8_checkpoints_replay_as_stored_and_new_models_group_apart():
    """Stop 72's models: the FP8 checkpoints keep what they store in 16 bits (Qwen's block-FP8: lm_head and the
    router; Meta's FP8 405B: the attention and lm_head, Llama 3 paper section 6.2) with bf16 activations and cache
    (vLLM's W8A8 Linear quantizes its input: the stack's FP8 family), and `sim validate-energy` gives the runs of
    models the fit did not see (mlenergy.FIT_MODELS) their own MAPE row."""
    from types import SimpleNamespace

    from sim.apps.serve.mlenergy_cli import _groups

    def run(model: str, precision: str = "fp8") -> M.Run:
        return M.Run("H100", model, precision, "lm-arena-chat", 8, 8, 1, 8, 400.0, 1.0, 500.0, 100.0)

    llama = M.serve_file(run("meta-llama/Llama-3.1-405B-Instruct-FP8")).formats
    assert (llama.weights, llama.activations, llama.kv_cache) == ("fp8_e4m3", "bf16", "bf16")
    assert llama.overrides == dict.fromkeys(("q_proj", "k_proj", "v_proj", "o_proj", "lm_head"), "bf16")
    qwen = M.serve_file(run("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8")).formats
    assert qwen.weights == "fp8_block128" and qwen.overrides == {"router": "bf16", "lm_head": "bf16"}
    plain = M.serve_file(run("Qwen/Qwen3-14B", "bfloat16")).formats
    assert (plain.weights, plain.activations, plain.kv_cache, plain.overrides) == ("bf16", "bf16", "bf16", {})
    xs = [SimpleNamespace(run=run(m, "bfloat16"), j_error=e, power_error=e, throughput_error=e)
          for m, e in (("meta-llama/Llama-3.1-8B-Instruct", 0.1), ("Qwen/Qwen3-14B", -0.3), ("Qwen/Qwen3-8B", -0.2))]
    unseen = [g for g in _groups(xs, set()) if g[1] == {"runs_of": "unseen_models"}]
    assert len(unseen) == 1 and [x.run.model for x in unseen[0][2]] == ["Qwen/Qwen3-14B", "Qwen/Qwen3-8B"]


def test_validate_energy_takes_a_hardware_file_and_hw_settings(shared_validation, tmp_path, capsys):
    """An energy trial: a copy of h100_sxm (a power model to check against the measurements) was refused, and no
    --set could change one. A file whose preset name begins with a GPU of the runs replays them; hw.* settings apply;
    a workload setting is refused (the runs say the workload)."""
    import shutil

    data = _slice(shared_validation, tmp_path)
    copy = tmp_path / "mine.yaml"
    shutil.copy(ROOT / "hw_models" / "presets" / "h100_sxm.yaml", copy)   # its preset name: h100_sxm
    got = {}
    for name, argv in (("file", ["--hw", str(copy)]), ("set", ["--set", "hw.units.gpu.active_power_w=330"])):
        out = tmp_path / f"{name}.json"
        assert main(["validate-energy", str(data), *argv, "--json", str(out), "-q"]) == 0
        got[name] = json.loads(out.read_text())["runs"][0]["power_per_gpu_w"]
    assert main(["validate-energy", str(data), "--json", str(tmp_path / "base.json"), "-q"]) == 0
    base = json.loads((tmp_path / "base.json").read_text())["runs"][0]
    assert got["file"] == pytest.approx(base["power_per_gpu_w"], rel=1e-9)
    assert got["set"] > base["power_per_gpu_w"] + 50   # 100 W more activity power over a mostly busy step
    capsys.readouterr()
    assert main(["validate-energy", str(data), "--set", "batch=3"]) == 2
    assert "only hw.* settings apply here" in capsys.readouterr().err
    assert main(["validate-energy", str(data), "--hw", "h100_offload"]) == 2   # an h100_ name, not a GPU preset
    assert capsys.readouterr().err.startswith("error: --hw h100_offload: ML.ENERGY has runs on")

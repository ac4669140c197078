"""Serving validation's error figures worked by hand (issue 32: survivors of the mutation job in
sim.apps.serve.validate): the signed error of each metric measured, and the mean absolute error per
(GPU, engine, model) and over all runs."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from hw_models.machine import load_machine
from sim.apps.serve import overhead_fit as F
from sim.apps.serve.simulator import DONE, REJECTED
from sim.apps.serve.validate import Result, Run, group_key, layout_features, mape, overall, run_file, signed_errors, step_features


def result(name: str, model: str, error: dict[str, float]) -> Result:
    return Result(Run(name, "h100_sxm", "vllm", model, 1024, 128, 16), {}, error, {})


def test_signed_errors_by_hand():
    """Kills validate.signed_errors__mutmut_3. sim 0.12 s against 0.10 s measured is +20 %, 0.008 against 0.010
    is -20 %; a metric not simulated, measured as 0 or not finite has no error."""
    got = signed_errors({"ttft_s": 0.12, "tpot_s": 0.008, "e2e_s": 1.0},
                        {"ttft_s": 0.10, "tpot_s": 0.010, "req_s": 2.0, "e2e_s": 0.0})
    assert got == pytest.approx({"ttft_s": 0.2, "tpot_s": -0.2}, rel=1e-12)
    assert signed_errors({"ttft_s": 1.0}, {"ttft_s": float("nan")}) == {}


def test_mean_absolute_errors_per_group_and_overall():
    """Kills validate.group_key__mutmut_3, mape__mutmut_3/13 and overall__mutmut_3. Three runs, two of
    Qwen/Qwen3-32B (TTFT errors +10 % and -30 %: MAPE 20 %; TPOT measured in one, -4 %) and one of
    meta-llama/Llama-3.1-8B (TTFT +50 %). Groups by (GPU, engine, the model's last path part), sorted;
    overall TTFT (10 + 30 + 50) / 3 = 30 %, TPOT 4 %, E2E and req/s measured nowhere: NaN."""
    rs = [result("a", "Qwen/Qwen3-32B", {"ttft_s": 0.1}), result("b", "Qwen/Qwen3-32B", {"ttft_s": -0.3, "tpot_s": -0.04}),
          result("c", "meta-llama/Llama-3.1-8B", {"ttft_s": 0.5})]
    assert group_key(rs[0]) == ("h100_sxm", "vllm", "Qwen3-32B")
    assert group_key(result("d", "llama2-7b", {}))[2] == "llama2-7b"   # a name without an organisation
    got = mape(rs)
    assert list(got) == [("h100_sxm", "vllm", "Llama-3.1-8B"), ("h100_sxm", "vllm", "Qwen3-32B")]
    qwen = got[("h100_sxm", "vllm", "Qwen3-32B")]
    assert qwen["runs"] == 2 and qwen["ttft_s"] == pytest.approx(0.2, rel=1e-12)
    assert qwen["tpot_s"] == pytest.approx(0.04, rel=1e-12) and math.isnan(qwen["e2e_s"])
    assert got[("h100_sxm", "vllm", "Llama-3.1-8B")]["runs"] == 1
    o = overall(rs)
    assert o["ttft_s"] == pytest.approx(0.3, rel=1e-12) and o["tpot_s"] == pytest.approx(0.04, rel=1e-12)
    assert math.isnan(o["e2e_s"]) and math.isnan(o["req_s"])


def _served():
    """Four iterations of 1 s each (ending at 1, 2, 3, 4 s) running 1, 2, 2, 1 sequences (cumulative 0, 1, 3, 5, 6).
    A: sent at 0, first token at 2, last at 3 (an iteration's end, exactly), 3 tokens; B: sent at 1 (an end: that
    iteration is not its), one token at 3; C rejected (left out)."""
    iterations = {"start_s": np.array([0.0, 1.0, 2.0, 3.0]), "duration_s": np.ones(4), "seqs": np.array([1, 2, 2, 1])}
    requests = {"status": np.array([DONE, DONE, REJECTED]), "arrival_s": np.array([0.0, 1.0, 0.0]),
                "first_token_s": np.array([2.0, 3.0, 9.0]), "finish_s": np.array([3.0, 3.0, 9.0]),
                "output_tokens": np.array([3, 1, 9])}
    return SimpleNamespace(iterations=iterations, requests=requests)


def test_step_features_by_hand():
    """Kills validate.step_features__mutmut_13/23/33/43. TTFT: A waits on iterations 1-2 (steps 2, seqs 1 + 2 = 3),
    B on 1-3 (steps 3, seqs 5): means 2.5 and 4. TPOT over the requests with a gap (A's 2 gaps): iteration 3
    (ending at its last token, 3 s; one ending a second later is not its) is 1 step / 2 = 0.5 and 2 seqs / 2 = 1.
    A front end of 1.5 s: A reaches the engine at 1.5 (iteration 1 before it: steps 1, seqs 2), B at 2.5 (steps 1,
    seqs 2): both TTFT means 1 and 2, TPOT unchanged."""
    assert step_features(_served()) == pytest.approx(
        {"ttft_steps": 2.5, "ttft_seqs": 4.0, "tpot_steps": 0.5, "tpot_seqs": 1.0}, rel=1e-12)
    assert step_features(_served(), front_end_s=1.5) == pytest.approx(
        {"ttft_steps": 1.0, "ttft_seqs": 2.0, "tpot_steps": 0.5, "tpot_seqs": 1.0}, rel=1e-12)


def test_layout_features_of_a_tp2_llama_8b():
    """Kills validate.layout_features__mutmut_13. Llama-3.1-8B on 2 GPUs: 32 layers x 2 all-reduces (after the
    attention output and the MLP down projection) + the vocabulary-parallel embedding's and the logits' = 66 TP
    collectives per iteration (test_engine_overheads' 66 for TP2), and 2 ranks."""
    file = run_file(Run("tp2", "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B", 128, 16, 2, tp=2))
    assert layout_features(file, load_machine("h100_sxm")) == {"collectives": 66.0, "ranks": 2.0}


def _feature_rows() -> list[dict]:
    feats = dict(ttft_steps=2.0, ttft_seqs=3.0, tpot_steps=0.5, tpot_seqs=1.0, collectives=66.0, ranks=2.0)
    rs = [Result(Run(n, "h100_sxm", e, "meta-llama/Llama-3.1-8B", 128, 16, 2), {"ttft_s": 0.1, "tpot_s": 0.01}, {},
                 feats) for n, e in (("a", "sglang"), ("b", "vllm"))]
    return F.feature_rows(rs, {"sglang": 7e-5})


def test_feature_rows_take_their_engines_front_end():
    """Kills overhead_fit.feature_rows__mutmut_13: each row takes its own engine's front-end time per token
    (70 us given for sglang; vllm not given: 0)."""
    assert [r[F.FRONT] for r in _feature_rows()] == [7e-5, 0.0]


def test_features_csv_keeps_the_id_column(tmp_path):
    """Kills overhead_fit.write_features__mutmut_13: the CSV's first column is `id`, and read_features gives
    the rows back, every feature a float."""
    rows = _feature_rows()
    F.write_features(rows, tmp_path / "f.csv")
    assert (tmp_path / "f.csv").read_text().split(",", 1)[0] == "id"
    assert F.read_features(tmp_path / "f.csv") == rows

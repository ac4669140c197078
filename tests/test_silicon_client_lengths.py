"""The silicon sample's InferenceX runs (dated ids) are replayed with the lengths InferenceX's client drew
(validate_readers.SILICON_RANGE_RATIO: prompt and output uniform on the integers [int(0.8 L), L]), their
simulated E2E derived from the means as the measured one is (TTFT + TPOT x (osl - 1)); the other rows keep
their recorded lengths."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hw_models.machine import load_machine
from sim.apps.serve.arrivals import make_requests
from sim.apps.serve.validate import Run, client_range, run_file, simulate
from sim.apps.serve.validate_readers import SILICON_RANGE_RATIO, read_silicon

INFX = "2026_04_06_llama_3_1_70b_h100_sxm_vllm_fp8_agg_1024x1024_c16_tp4_ep1_260"
ROW = dict(id=INFX, backend="vllm", model_path="meta-llama/Llama-3.1-8B-Instruct", system="h100_sxm", mode="agg",
           isl=1024, osl=128, gemm_quant_mode=None, batch_size=4, tp_size=1, pp_size=1, attention_dp_size=None,
           silicon_ttft_ms=50.0, silicon_tpot_ms=8.0)


def test_client_range_is_benchmark_serving_s_integer_bounds():
    # int(1024 x 0.8) = int(819.2) = 819; int(128 x 0.8) = int(102.4) = 102; the upper bound is L itself
    assert client_range(1024, 0.8) == (819, 1024)
    assert client_range(128, 0.8) == (102, 128)
    assert client_range(1, 0.8) == (1, 1)          # int(0.8) = 0: a length is at least one token
    assert client_range(1000, 1.0) == (1000, 1000)  # ratio 1: fixed lengths


def test_silicon_rows_carry_the_client_ratio_and_replay_its_lengths(tmp_path):
    path = tmp_path / "s.csv"
    aic = "meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_vllm_agg_1024x128_c4_tp1_epnone_1"
    pd.DataFrame([ROW, {**ROW, "id": aic}]).to_csv(path, index=False)
    (run, other), _ = read_silicon(path, {"h100_sxm"})
    assert run.range_ratio == SILICON_RANGE_RATIO == 0.8
    assert other.range_ratio is None   # aiconfigurator's own collection: lengths as recorded
    assert run_file(other).serving.lengths.prompt.dist == "fixed"
    lengths = run_file(run).serving.lengths
    assert (lengths.prompt.dist, lengths.prompt.low, lengths.prompt.high) == ("uniform", 819, 1024)
    assert (lengths.output.dist, lengths.output.low, lengths.output.high) == ("uniform", 102, 128)
    # served as collected: InferenceX's rows by `vllm serve` itself, aiconfigurator's behind Dynamo
    assert (run.deployment, other.deployment) == ("direct", "dynamo")
    assert (run_file(run).serving.deployment, run_file(other).serving.deployment) == ("direct", "dynamo")
    # without a client ratio: the prompt as given, outputs +-10% around osl (Engine.output_spread)
    plain = run_file(Run("p", "h100_sxm", "vllm", ROW["model_path"], 1024, 128, 4)).serving.lengths
    assert (plain.prompt.dist, plain.prompt.value) == ("fixed", 1024)
    assert (plain.output.low, plain.output.high) == (115, 141)


def test_drawn_lengths_have_the_uniform_s_mean():
    f = run_file(Run("r", "h100_sxm", "vllm", ROW["model_path"], 1024, 128, 100, range_ratio=0.8, num_requests=4000))
    reqs = make_requests(f)   # seeded (serving.arrivals.seed): the same lengths every run
    p, o = np.asarray(reqs.prompt_len), np.asarray(reqs.output_len)
    assert p.min() >= 819 and p.max() <= 1024 and o.min() >= 102 and o.max() <= 128
    # mean of the integers [819, 1024] is 921.5 (sd 59.5, so the mean of 4000 is within 3 sd = 2.8 of it)
    assert abs(p.mean() - 921.5) < 3.0
    assert abs(o.mean() - 115.0) < 1.0   # [102, 128]: 115, sd 7.5


def test_simulated_e2e_is_derived_like_the_measured_one(tmp_path):
    path = tmp_path / "s.csv"
    pd.DataFrame([{**ROW, "isl": 128, "osl": 8, "batch_size": 2}]).to_csv(path, index=False)
    runs, _ = read_silicon(path, {"h100_sxm"})
    machine = load_machine("h100_sxm")
    (res,), failed = simulate(runs, lambda gpu: machine, requests_per_client=2)
    assert not failed
    assert np.isclose(res.sim["e2e_s"], res.sim["ttft_s"] + res.sim["tpot_s"] * 7)


def test_silicon_rows_are_sampled_as_their_server_did(tmp_path):
    """InferenceX's client sends temperature 0 (greedy); aiconfigurator's own collection sends no sampling
    parameter, and Dynamo's vLLM worker then samples with the model's generation_config.json (Qwen3-32B: top-k 20
    with top-p 0.95), which the vllm stack prices as its top-p sampler; other engines' rows stay greedy
    (validate_readers.silicon_sampling)."""
    path = tmp_path / "s.csv"
    aic = "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_{}_agg_1024x128_c8_tp2_epnone_1"
    qwen = {**ROW, "model_path": "Qwen/Qwen3-32B", "tp_size": 2}
    rows = [{**qwen, "id": INFX}, {**qwen, "id": aic.format("vllm")},
            {**qwen, "id": aic.format("trtllm"), "backend": "trtllm"}]
    pd.DataFrame(rows).to_csv(path, index=False)
    infx, vllm, trtllm = read_silicon(path, {"h100_sxm"})[0]
    assert (infx.sampling, vllm.sampling, trtllm.sampling) == ("greedy", "top_p", "greedy")
    assert run_file(vllm).sampling == "top_p" and run_file(infx).sampling == "greedy"

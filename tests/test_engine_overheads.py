"""Engine overheads (hw_models.stack.engine_overheads) on tiny hand-worked cases: each fitted term moves
what it should by exactly its size; async scheduling holds a request that reaches a busy engine
one step longer; the NNLS procedure recovers terms it was given; the shipped stack files are the
fit script's output (scripts/fit_engine_overheads.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hw_models.machine import load_machine
from hw_models.stack.spec import STACK_DIR, load_stack, stack_for
from sim.apps.serve import overhead_fit as F
from sim.apps.serve.arrivals import make_requests
from sim.apps.serve.simulator import ServeSim
from sim.apps.serve.instance import prepare
from sim.apps.serve.spec import serve_file_from_dict
from sim.apps.serve.iteration import features
from sim.apps.serve.stepcost import ExactCost
from sim.apps.serve.validate import ENGINES, Run, run_file
from sim.apps.serve.validate_readers import read_silicon
from sim.core.errors import ConfigError

BASE = {"model": "tinyllama-1.1b", "formats": {"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"},
        "flash_attention": True, "stack": "vllm"}


def h100(**terms):
    return load_machine("h100_sxm", {"stacks": {"vllm": {"engine_overheads": terms}}})


def serve_file(arrivals: dict, prompt: int = 200, output: int = 40):
    return serve_file_from_dict({**BASE, "serving": {
        "arrivals": arrivals, "lengths": {"prompt": {"dist": "fixed", "value": prompt},
                                          "output": {"dist": "fixed", "value": output}}}}, "t.yaml")


def test_step_and_sequence_terms_add_to_the_iteration():
    f = serve_file({"process": "poisson", "rate": 1, "num_requests": 1})
    it = features([(1, 100)] * 4)
    plain = ExactCost(h100(step_s=0.0, per_seq_s=0.0), f, f.model_config_())(it)[0]
    more = ExactCost(h100(step_s=300e-6, per_seq_s=20e-6), f, f.model_config_())(it)[0]
    assert more - plain == pytest.approx(300e-6 + 4 * 20e-6, rel=1e-9)


@pytest.mark.parametrize("tp", [1, 2])
def test_collective_term_adds_once_per_tp_collective(tp):
    # tinyllama has 22 layers: under TP each runs two all-reduces (after o_proj and down_proj), plus the
    # embedding's all-reduce and the logits' all-gather: 2 x 22 + 2 = 46 collectives an iteration; none on one GPU.
    f = serve_file_from_dict({**BASE, "parallel": {"tp": tp, "topology": "dgx_h100"}, "serving": {
        "arrivals": {"process": "poisson", "rate": 1, "num_requests": 1},
        "lengths": {"prompt": {"dist": "fixed", "value": 200}, "output": {"dist": "fixed", "value": 40}}}}, "t.yaml")
    it = features([(1, 100)] * 4)
    plain = ExactCost(h100(per_collective_s=0.0), f, f.model_config_())(it)[0]
    more = ExactCost(h100(per_collective_s=10e-6), f, f.model_config_())(it)[0]
    assert more - plain == pytest.approx((46 if tp > 1 else 0) * 10e-6, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_extra_rank_term_adds_once_per_worker_beyond_the_first(tp):
    # One GPU runs its worker in process (vLLM's UniProcExecutor): no hand-off, 0. TP 2 and 4 hand the
    # batch to 2 and 4 worker processes: 1 and 3 extra ranks, so 1 x 50 us and 3 x 50 us an iteration,
    # whatever the batch; step_s (here 0.2 ms) is paid at every TP alike.
    f = serve_file_from_dict({**BASE, "parallel": {"tp": tp, "topology": "dgx_h100"}, "serving": {
        "arrivals": {"process": "poisson", "rate": 1, "num_requests": 1},
        "lengths": {"prompt": {"dist": "fixed", "value": 200}, "output": {"dist": "fixed", "value": 40}}}}, "t.yaml")
    for seqs in (1, 6):
        it = features([(1, 100)] * seqs)
        plain = ExactCost(h100(step_s=0.0, per_extra_rank_s=0.0), f, f.model_config_())(it)[0]
        more = ExactCost(h100(step_s=200e-6, per_extra_rank_s=50e-6), f, f.model_config_())(it)[0]
        assert more - plain == pytest.approx(200e-6 + (tp - 1) * 50e-6, rel=1e-9)


def test_front_end_adds_once_to_ttft_and_e2e():
    f = serve_file({"process": "constant", "rate": 0.5, "num_requests": 3})   # 2 s apart: the engine idles between
    runs = {fe: ServeSim(prepare(f, h100(per_request_s=fe)), make_requests(f)).run().requests for fe in (0.0, 0.005)}
    a, b = runs[0.0], runs[0.005]
    np.testing.assert_allclose((b["first_token_s"] - b["arrival_s"]) - (a["first_token_s"] - a["arrival_s"]), 0.005)
    np.testing.assert_allclose((b["finish_s"] - b["arrival_s"]) - (a["finish_s"] - a["arrival_s"]), 0.005)


@pytest.mark.parametrize("async_on", [False, True])
def test_async_scheduling_holds_a_new_request_one_step(async_on):
    # Request 0 at t = 0 decodes alone; request 1 arrives during one of its decode steps.
    f = serve_file({"process": "constant", "rate": 1 / 0.0301, "num_requests": 2})
    sim = ServeSim(prepare(f, h100(async_scheduling=async_on, per_request_s=0.0)), make_requests(f))
    res = sim.run()
    it, r = res.iterations, res.requests
    ends = it["start_s"] + it["duration_s"]
    k = int(np.searchsorted(ends, r["arrival_s"][1]))   # the step running when it arrived
    assert it["start_s"][k] < r["arrival_s"][1] < ends[k]
    # Synchronous: scheduled into the next step, at the end of step k. Async: step k + 1 had been
    # scheduled when step k began, so it waits for k + 1 to end.
    assert r["scheduled_s"][1] == pytest.approx(ends[k + 1] if async_on else ends[k], rel=1e-12)


def test_async_scheduling_leaves_an_idle_engine_alone():
    f = serve_file({"process": "constant", "rate": 0.5, "num_requests": 2})
    r = {a: ServeSim(prepare(f, h100(async_scheduling=a, per_request_s=0.0)), make_requests(f)).run().requests for a in (False, True)}
    np.testing.assert_allclose(r[True]["first_token_s"], r[False]["first_token_s"], rtol=1e-12)


def _run_id(i: int, direct: bool) -> str:
    """A silicon-sample-like id: InferenceX's rows are dated (the engine's own server), the rest Dynamo's."""
    return f"2026_04_06_run_{i}" if direct else f"run_{i}"


def test_nnls_recovers_the_terms_it_was_built_from():
    f_s, g_s, t_s, u_s, c_s, r_s = 0.004, 0.03, 0.0006, 0.00002, 0.000008, 0.0002
    rng = np.random.default_rng(1)
    rows, measured = [], {}
    for i in range(40):
        ranks, direct = float(rng.choice([1, 2, 4, 8])), bool(i % 3)
        x = dict(ttft_steps=rng.uniform(1, 10), ttft_seqs=rng.uniform(5, 500), tpot_steps=1.0,
                 tpot_seqs=rng.uniform(1, 128), sim_ttft_s=rng.uniform(0.05, 1), sim_tpot_s=rng.uniform(0.005, 0.05),
                 collectives=0.0 if ranks == 1 else float(rng.choice([66, 130, 162])), ranks=ranks)
        rid = _run_id(i, direct)
        rows.append({"id": rid, "engine": "vllm", **x})
        step = t_s + c_s * x["collectives"] + r_s * (ranks - 1)
        measured[rid] = {"ttft_s": x["sim_ttft_s"] + (f_s if direct else g_s) + step * x["ttft_steps"]
                         + u_s * x["ttft_seqs"],
                         "tpot_s": x["sim_tpot_s"] + step * x["tpot_steps"] + u_s * x["tpot_seqs"]}
    (fit,) = F.fit(rows, measured, rank_term="joint")
    assert fit.terms == pytest.approx({"per_request_s": f_s, "dynamo_per_request_s": g_s, "step_s": t_s,
                                       "per_seq_s": u_s, "per_collective_s": c_s, "per_extra_rank_s": r_s,
                                       "front_end_output_token_s": 0.0}, rel=1e-6)
    # each training run gives a TTFT and a TPOT row; Fit.runs counts runs (overhead_fit.fit__mutmut_103)
    assert fit.runs == sum(F.in_training(r["id"]) for r in rows) > 0
    # runs of one deployment only: the other deployment's delay cannot be told apart, so it takes the same figure
    dynamo = [r for r in rows if not r["id"].startswith("2026")]
    (only,) = F.fit(dynamo, measured, rank_term="joint")
    assert only.terms["per_request_s"] == only.terms["dynamo_per_request_s"] == pytest.approx(g_s, rel=1e-6)


def test_staged_tp_terms_fit_only_what_the_flat_terms_leave():
    """Every run TP >= 2 (vLLM's training rows): a flat step and a cost per collective or per rank cannot be told
    apart in one solve. "staged" keeps the TP-free fit's terms exactly and puts on the two TP terms the
    non-negative least squares of what they leave (by hand: the best non-negative subset solution);
    "off" leaves them at 0; a bad name is an error."""
    rng = np.random.default_rng(2)
    rows, measured = [], {}
    for i in range(40):
        ranks = float(rng.choice([2, 4, 8]))
        x = dict(ttft_steps=rng.uniform(1, 10), ttft_seqs=rng.uniform(5, 500), tpot_steps=1.0,
                 tpot_seqs=rng.uniform(1, 128), sim_ttft_s=rng.uniform(0.05, 1), sim_tpot_s=rng.uniform(0.005, 0.05),
                 collectives=float(rng.choice([66, 130])), ranks=ranks)
        rows.append({"id": str(i), "engine": "vllm", **x})
        step = 0.0004 + 0.0001 * (ranks - 1) + 2e-6 * x["collectives"]
        measured[str(i)] = {"ttft_s": x["sim_ttft_s"] + 0.01 + step * x["ttft_steps"],
                            "tpot_s": x["sim_tpot_s"] + step * x["tpot_steps"]}
    (off,), (staged,) = F.fit(rows, measured, "off"), F.fit(rows, measured, "staged")
    assert off.terms["per_extra_rank_s"] == off.terms["per_collective_s"] == 0.0
    tp = ("per_collective_s", "per_extra_rank_s")
    assert {k: v for k, v in staged.terms.items() if k not in tp} == {k: v for k, v in off.terms.items() if k not in tp}
    X, r = [], []
    for row in (row for row in rows if F.in_training(row["id"])):
        m, t = measured[row["id"]], off.terms
        for key, fixed, steps, seqs in (("ttft_s", 1.0, "ttft_steps", "ttft_seqs"), ("tpot_s", 0.0, "tpot_steps", "tpot_seqs")):
            left = m[key] - row["sim_" + key] - fixed * t["dynamo_per_request_s"] - t["step_s"] * row[steps] \
                - t["per_seq_s"] * row[seqs]
            X.append([row["collectives"] * row[steps] / m[key], (row["ranks"] - 1) * row[steps] / m[key]])
            r.append(left / m[key])
    X, r = np.array(X), np.array(r)
    # two unknowns: NNLS is the best of the least-squares solutions on each subset of columns that is >= 0
    candidates = [np.zeros(2)]
    for cols in ([0], [1], [0, 1]):
        sol = np.zeros(2)
        sol[cols] = np.linalg.solve(X[:, cols].T @ X[:, cols], X[:, cols].T @ r)
        if (sol >= 0).all():
            candidates.append(sol)
    by_hand = min(candidates, key=lambda sol: np.linalg.norm(r - X @ sol))
    assert [staged.terms[k] for k in tp] == pytest.approx(list(by_hand), rel=1e-9, abs=1e-15)
    assert by_hand[1] > 0
    assert staged.residual <= off.residual
    with pytest.raises(ValueError, match="rank_term 'both'"):
        F.fit(rows, measured, "both")


def test_a_dynamo_deployment_pays_its_own_request_delay():
    """`serving.deployment` picks the stack's delay per request: the engine's own server's or Dynamo's
    (None: the same), and the first token moves by exactly the difference."""
    f = serve_file({"process": "constant", "rate": 0.5, "num_requests": 2})
    dyn = f.model_copy(update={"serving": f.serving.model_copy(update={"deployment": "dynamo"})})
    m = h100(per_request_s=0.005, dynamo_per_request_s=0.030)
    first = {d: ServeSim(prepare(x, m), make_requests(x)).run().requests["first_token_s"]
             for d, x in (("direct", f), ("dynamo", dyn))}
    np.testing.assert_allclose(first["dynamo"] - first["direct"], 0.025, rtol=1e-9)
    # TensorRT-LLM's runs all came behind Dynamo: its own server is its Dynamo delay less the Dynamo path's cost
    # that vLLM's runs, served both ways, show (overhead_fit.unseen_deployments)
    eo, v = load_stack("trtllm").engine_overheads, load_stack("vllm").engine_overheads
    path = v.request_delay_s("dynamo") - v.request_delay_s("direct")
    assert eo.request_delay_s("direct") == pytest.approx(eo.request_delay_s("dynamo") - path, abs=1e-5)
    unset = stack_for("vllm", h100(per_request_s=0.005, dynamo_per_request_s=None)).engine_overheads
    assert unset.request_delay_s("dynamo") == unset.request_delay_s("direct") == 0.005


def test_a_deployment_no_run_came_through_takes_the_dynamo_path_of_the_families_served_both_ways():
    """By hand: vLLM 5 ms direct and 45 ms behind Dynamo (the path costs 40 ms); TensorRT-LLM only behind Dynamo at
    80 ms is 40 ms direct; a family at 30 ms behind Dynamo is 0 direct, never below; one seen only direct at 10 ms
    is 50 ms behind Dynamo. Without a family seen both ways each takes the other deployment's figure."""
    fit = lambda e, d, y: F.Fit(e, {"per_request_s": d, "dynamo_per_request_s": y}, 1)
    both, dyn, direct = {"direct", "dynamo"}, {"dynamo"}, {"direct"}
    out = F.unseen_deployments([(fit("vllm", 0.005, 0.045), both), (fit("trtllm", 0.0, 0.080), dyn),
                                (fit("sglang", 0.0, 0.030), dyn), (fit("x", 0.010, 0.0), direct)])
    got = [(f.engine, f.terms["per_request_s"], f.terms["dynamo_per_request_s"]) for f in out]
    want = [("vllm", 0.005, 0.045), ("trtllm", 0.040, 0.080), ("sglang", 0.0, 0.030), ("x", 0.010, 0.050)]
    for g, w in zip(got, want, strict=True):
        assert g[0] == w[0] and g[1:] == pytest.approx(w[1:], abs=1e-12)
    (alone,) = F.unseen_deployments([(fit("trtllm", 0.0, 0.080), dyn)])
    assert alone.terms["per_request_s"] == alone.terms["dynamo_per_request_s"] == 0.080


def test_async_scheduling_is_on_by_default_under_vllm_and_off_under_v0():
    assert load_stack("vllm").engine_overheads.async_scheduling
    assert not load_stack("vllm-v0").engine_overheads.async_scheduling


def test_shipped_stack_terms_are_the_fit_scripts_output(shared_validation):
    features = Path(__file__).parent / "data" / "engine_overheads_features.csv"
    runs, _ = read_silicon(shared_validation / "aic" / "silicon_sample_h100.csv.gz", F.TRAINING_SYSTEMS)
    fits = F.fit(F.read_features(features), {r.name: r.measured for r in runs})
    assert {f.engine for f in fits} == set(ENGINES)
    for f in fits:
        stack_file = STACK_DIR / f"{ENGINES[f.engine].stack}.yaml"
        assert F.shipped_block(stack_file) == F.block(f, "silicon_sample_h100.csv.gz"), \
            f"{stack_file.name}: run scripts/fit_engine_overheads.py --write"


def test_replayed_run_file_is_a_closed_loop_of_the_runs_concurrency():
    run = Run("r", "h100_sxm", "trtllm", "Qwen/Qwen3-32B", 1024, 128, 16, tp=2, quant="fp8")
    f = run_file(run)
    assert f.serving.arrivals.concurrency == 16 and f.serving.arrivals.num_requests == 160   # 10 per client
    out = f.serving.lengths.output
    assert (out.low, out.high) == (115, 141)   # 128 +- 10% under mixed batching (validate.ENGINES, lock-step note)
    assert f.stack == "trtllm" and f.formats.weights == "fp8_e4m3" and f.section("parallel")["tp"] == 2
    assert f.formats.kv_cache == "fp8_e4m3" and f.serving.scheduler.kind == "trtllm"   # FP8 checkpoint: FP8 KV
    bf16 = run_file(Run("b", "h100_sxm", "trtllm", "Qwen/Qwen3-32B", 1024, 128, 16))
    vllm_fp8 = run_file(Run("v", "h100_sxm", "vllm", "Qwen/Qwen3-32B", 1024, 128, 16, quant="fp8"))
    assert bf16.formats.kv_cache == "bf16" and vllm_fp8.formats.kv_cache == "bf16"   # vLLM: the model dtype
    sg = run_file(Run("s", "h100_sxm", "sglang", "Qwen/Qwen3-32B", 1024, 128, 16)).serving
    assert sg.scheduler.kind == "sglang" and sg.lengths.output.dist == "fixed" and sg.lengths.output.value == 128


@pytest.mark.parametrize("engine, family", [("trtllm", "trtllm_fp8_per_tensor"), ("vllm", "vllm_fp8_per_tensor")])
def test_fp8_run_gemms_are_the_engines_w8a8_kernels(engine, family):
    # The engines quantize bf16 activations per Linear call, so the replay keeps activations bf16 and every
    # FP8 GEMM of an iteration is priced by the stack's fitted W8A8 family (quantize kernel + scaled GEMM),
    # not by the plain roofline at the FP8 peak.
    f = run_file(Run("r", "h100_sxm", engine, "Qwen/Qwen3-32B", 1024, 128, 16, quant="fp8"))
    assert f.formats.weights == "fp8_e4m3" and f.formats.activations == "bf16"
    paths = {}

    def busy(tl):
        paths.update({i.task: getattr(i.tag, "path", None) for i in tl.intervals if i.task.endswith("_proj")})
        return {}
    ExactCost(load_machine("h100_sxm"), f, f.model_config_()).mapper.iteration(((1, 1100),) * 8, busy=busy,
                                                                                 device_only=True)
    gemms = {k: v for k, v in paths.items() if k.split(".")[-1] in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")}
    assert gemms and set(gemms.values()) == {family}


def test_genai_perf_export_becomes_a_closed_loop_run():
    from sim.apps.serve.bench_logs import read_bench_json

    # A hand-made profile_export_genai_perf.json: 4 clients, 40 requests of 1024 -> 128 tokens, TTFT 85 ms,
    # ITL 9.173 ms, so latency 85 + 127 x 9.173 = 1250 ms and 4 / 1.25 s = 3.2 requests/s.
    path = Path(__file__).parent / "data" / "genai_perf" / "profile_export_genai_perf.json"
    run = read_bench_json(path, "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B-Instruct")
    assert (run.isl, run.osl, run.concurrency, run.num_requests) == (1024, 128, 4, 40)
    assert run.measured == pytest.approx({"ttft_s": 0.085, "tpot_s": 0.009173, "e2e_s": 1.25, "req_s": 3.2})
    assert run_file(run).serving.arrivals.num_requests == 40


def test_genai_perf_export_without_concurrency_is_refused(tmp_path):
    from sim.apps.serve.bench_logs import read_bench_json

    d = json.loads((Path(__file__).parent / "data" / "genai_perf" / "profile_export_genai_perf.json").read_text())
    del d["input_config"]["concurrency"]
    (tmp_path / "g.json").write_text(json.dumps(d))
    with pytest.raises(ConfigError, match="input_config.concurrency missing"):
        read_bench_json(tmp_path / "g.json", "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B-Instruct")
    d["input_config"]["concurrency"] = 4
    d["time_to_first_token"]["unit"] = "fortnights"
    (tmp_path / "g.json").write_text(json.dumps(d))
    with pytest.raises(ConfigError, match="time_to_first_token.unit 'fortnights'"):
        read_bench_json(tmp_path / "g.json", "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B-Instruct")


def test_aiperf_export_becomes_a_closed_loop_run(tmp_path):
    from sim.apps.serve.bench_logs import read_bench_json

    # A hand-made profile_export_aiperf.json (aiperf's JsonExportData: genai-perf's metrics at the top level, the
    # load under input_config.loadgen): 8 clients, 80 requests of 2048 -> 256 tokens after 16 warm-up requests,
    # TTFT 120 ms, ITL 10 ms, so latency 120 + 255 x 10 = 2670 ms and 8 / 2.67 s = 2.996 requests/s.
    path = Path(__file__).parent / "data" / "genai_perf" / "profile_export_aiperf.json"
    want = {"ttft_s": 0.120, "tpot_s": 0.010, "e2e_s": 2.670, "req_s": 2.996}
    run = read_bench_json(path, "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B-Instruct")
    assert (run.isl, run.osl, run.concurrency, run.num_requests) == (2048, 256, 8, 80)
    assert run.measured == pytest.approx(want)
    # aiperf's warm-up phase ends (every response back) before profiling starts its 8 clients at once: the
    # replay is the 80 measured sends from an idle engine, none dropped
    loop = run_file(run).serving.arrivals
    assert (loop.num_requests, loop.warmup_requests) == (80, 0)
    # the "records" layout of aiperf's export-level docs: metrics under records, TTFT as `ttft`, and the
    # count from the request_count metric when the load settings lack it
    d = json.loads(path.read_text())
    cfg = d.pop("input_config")
    del cfg["loadgen"]["request_count"]
    records = {("ttft" if k == "time_to_first_token" else k): v for k, v in d.items() if isinstance(v, dict)}
    (tmp_path / "r.json").write_text(json.dumps({"records": records, "input_config": cfg}))
    again = read_bench_json(tmp_path / "r.json", "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B-Instruct")
    assert (again.concurrency, again.num_requests) == (8, 80) and again.measured == pytest.approx(want)


def test_aiperf_export_refusals(tmp_path):
    from sim.apps.serve.bench_logs import read_bench_json

    d = json.loads((Path(__file__).parent / "data" / "genai_perf" / "profile_export_aiperf.json").read_text())
    cases = [("request_rate", lambda x: x["input_config"]["loadgen"].update(request_rate=5.0),
              "request_rate 5.0: a rate-driven run is not a closed loop"),
             ("no concurrency", lambda x: x["input_config"]["loadgen"].pop("concurrency"),
              r"input_config.loadgen.concurrency\)"),
             ("no TTFT", lambda x: x.pop("time_to_first_token"), "time_to_first_token missing")]
    for name, spoil, message in cases:
        bad = json.loads(json.dumps(d))
        spoil(bad)
        (tmp_path / "a.json").write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match=message):
            read_bench_json(tmp_path / "a.json", "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B-Instruct")


def test_vllm_benchmark_json_becomes_a_closed_loop_run(tmp_path):
    from sim.apps.serve.bench_logs import read_vllm_bench

    # The keys benchmark_serving.py --save-result writes (result_json), a made-up 3-request run.
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"max_concurrency": 2, "input_lens": [100, 120, 110], "output_lens": [10, 12, 11],
                                "mean_ttft_ms": 20.0, "mean_tpot_ms": 5.0, "mean_e2el_ms": 70.0,
                                "request_throughput": 9.5, "ttfts": [0.02] * 3}))
    run = read_vllm_bench(path, "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B")
    assert (run.isl, run.osl, run.concurrency, run.num_requests) == (110, 11, 2, 3)
    assert run.measured == {"ttft_s": 0.02, "tpot_s": 0.005, "e2e_s": 0.07, "req_s": 9.5}
    assert run_file(run).serving.arrivals.num_requests == 3
    path.write_text("{}")
    with pytest.raises(ConfigError, match="not a vLLM benchmark_serving result"):
        read_vllm_bench(path, "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B")


@pytest.mark.parametrize("text", ["[]", "{}", '{"mean_ttft_ms": 1}'])
def test_a_json_that_is_no_benchmark_result_says_so_before_asking_for_flags(tmp_path, capsys, text):
    """A serving trial: `[]` given to validate-serving was told to give --engine, and only with it that it was not
    a benchmark result. It is said first now, naming both layouts, exit 2."""
    from sim.apps.cli import main

    path = tmp_path / "x.json"
    path.write_text(text)
    assert main(["validate-serving", str(path), "--hw", "h100_sxm"]) == 2
    err = capsys.readouterr().err.strip()
    # a vLLM result short of one of its two means names the one missing (a serving trial), before any flag
    want = ("a vLLM benchmark_serving result without mean_tpot_ms" if "mean_ttft_ms" in text else
            "not a benchmark result: neither a vLLM benchmark_serving JSON")
    assert err.startswith(f"error: {path}: {want}")
    assert "--engine" not in err


def _vllm_result(tmp_path, **keys):
    """A made-up benchmark_serving result (vllm benchmarks/serve.py result_json keys): 4 requests, one failed."""
    d = {"model_id": "meta-llama/Llama-3.1-8B", "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 2,
         "completed": 3, "total_input_tokens": 600, "total_output_tokens": 90, "input_lens": [100, 200, 300, 400],
         "output_lens": [10, 30, 0, 50], "errors": ["", "", "timeout", ""], "mean_ttft_ms": 20.0, "mean_tpot_ms": 5.0}
    d.update(keys)
    path = tmp_path / "r.json"
    path.write_text(json.dumps({k: v for k, v in d.items() if v is not None}))
    return path


def test_vllm_result_lengths_rate_and_failures(tmp_path):
    from sim.apps.serve.bench_logs import read_vllm_bench

    # --save-detailed: the completed requests' own lengths in the order sent, the failed one (an error, no output)
    # left out; the means are theirs, (100 + 200 + 400) / 3 and (10 + 30 + 50) / 3
    run = read_vllm_bench(_vllm_result(tmp_path), "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B")
    assert run.lengths == ((100, 200, 400), (10, 30, 50)) and (run.isl, run.osl, run.num_requests) == (233, 30, 3)
    lengths = run_file(run).serving.lengths
    assert lengths.prompt.values == [100, 200, 400] and lengths.output.values == [10, 30, 50]
    # the default file (no --save-detailed): the means of its totals over the completed requests, 600 / 3, 90 / 3
    plain = _vllm_result(tmp_path, input_lens=None, output_lens=None, errors=None)
    run = read_vllm_bench(plain, "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B")
    assert (run.isl, run.osl, run.num_requests, run.lengths) == (200, 30, 3, None)
    # --request-rate 4 with no client cap: open-loop Poisson arrivals; burstiness 4: gamma gaps of cv 1/2
    run = read_vllm_bench(_vllm_result(tmp_path, request_rate=4.0, max_concurrency=None), "h100_sxm", "vllm",
                          "meta-llama/Llama-3.1-8B")
    assert run_file(run).serving.arrivals.process == "poisson" and run_file(run).serving.arrivals.rate == 4.0
    run = read_vllm_bench(_vllm_result(tmp_path, request_rate=4.0, burstiness=4.0, max_concurrency=None), "h100_sxm",
                          "vllm", "meta-llama/Llama-3.1-8B")
    assert run_file(run).serving.arrivals.cv == pytest.approx(0.5)
    for spoil, message in ((dict(request_rate=4.0), "request_rate 4 with max_concurrency 2"),
                           (dict(input_lens=None, total_input_tokens=None), "the lengths served are unknown"),
                           (dict(errors=["x"] * 4), "no request completed")):
        with pytest.raises(ConfigError, match=message):
            read_vllm_bench(_vllm_result(tmp_path, **spoil), "h100_sxm", "vllm", "meta-llama/Llama-3.1-8B")


def test_benchmark_json_names_its_model(tmp_path):
    from sim.apps.serve.bench_logs import logged_model, read_vllm_bench

    assert logged_model({"model_id": "m"}) == "m"
    assert logged_model({"input_config": {"model": ["g"]}}) == "g"
    assert logged_model({"input_config": {"endpoint": {"model_names": ["a"]}}}) == "a"
    assert logged_model({"input_config": {}}) is None
    from sim.apps.serve.bench_logs import logged_engine
    assert [logged_engine({"backend": b}) for b in ("vllm", "tensorrt-llm", "openai-chat")] == ["vllm", "trtllm", None]
    # --model takes a model preset or a config.json as well as the replayed tables' names
    assert read_vllm_bench(_vllm_result(tmp_path), "h100_sxm", "vllm", "mistral-7b").model == "mistral-7b"
    with pytest.raises(ConfigError, match="not a model of the replayed tables"):
        read_vllm_bench(_vllm_result(tmp_path), "h100_sxm", "vllm", "no-such-model")

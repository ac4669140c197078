"""`sim serve`: outputs, and bad input as one line naming the file and key, exit 2, nothing written."""

import json

import pandas as pd
import pytest

from sim.apps.cli import main
from tests.conftest import write_serving_file

BASE = dict(name="t", model="llama2-7b", flash_attention=True, serving=dict(
    arrivals=dict(process="poisson", rate=5, num_requests=30, seed=1),
    lengths=dict(prompt=dict(dist="uniform", low=16, high=128), output=dict(dist="fixed", value=8)),
    scheduler=dict(kind="vllm", max_num_batched_tokens=2048)))


def write(tmp_path, mutate=None, name="s.yaml"):
    return write_serving_file(tmp_path, BASE, mutate, name)


def test_outputs(tmp_path):
    f = write(tmp_path)
    rc = main(["serve", str(f), "--hw", "a6000", "-q", "--json", str(tmp_path / "o.json"),
               "--requests", str(tmp_path / "r.csv"), "--chrome-trace", str(tmp_path / "t.json")])
    assert rc == 0
    s = json.loads((tmp_path / "o.json").read_text())
    assert s["completed"] == 30 and s["latency"]["ttft"]["mean"] > 0
    assert s["deployment"] == "direct"   # the serving path the run was priced for (serving.deployment)
    df = pd.read_csv(tmp_path / "r.csv")
    assert len(df) == 30 and (df["output_tokens"] == 8).all() and (df["ttft_s"] > 0).all()
    tr = json.loads((tmp_path / "t.json").read_text())
    assert {e["name"] for e in tr["traceEvents"] if e.get("pid") == 2 and e["ph"] == "X"} >= {"prefill", "decode"}


def _trace(tmp_path, text, name="tr.csv"):
    (tmp_path / name).write_text(text)

    def m(s):
        s["arrivals"] = dict(process="trace")
        s["trace"] = dict(path=name)
        del s["lengths"]
    return m


BAD = {
    "zero rate": (lambda s: s["arrivals"].update(rate=0), "serving.arrivals.rate"),
    "negative length": (lambda s: s["lengths"]["output"].update(value=-3), "serving.lengths.output.value"),
    "zero block size": (lambda s: s["scheduler"].update(block_size=0), "serving.scheduler.block_size"),
    "unknown SLO metric": (lambda s: s.update(slo=dict(latency_p90=1.0)), "latency_p90"),
    "option of another scheduler": (lambda s: s["scheduler"].update(kind="orca", block_size=16),
                                     "serving.scheduler.block_size"),
    "draft vocabulary": (lambda s: s.update(speculative=dict(draft="llama3-8b")), "serving.speculative.draft"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input(tmp_path, capsys, case):
    mutate, key = BAD[case]
    f = write(tmp_path, mutate)
    out = tmp_path / "o.json"
    rc = main(["serve", str(f), "--hw", "a6000", "-q", "--json", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and str(f) in err and key in err, err
    assert not out.exists()


@pytest.mark.parametrize("text,key", [
    ("arrival_s,prompt_len\n0,10\n", "output_len"),
    ("arrival_s,prompt_len,output_len\n1,10,5\n0.5,10,5\n", "not sorted"),
    ("arrival_s,prompt_len,output_len\n-1,10,5\n", "negative"),
    ("arrival_s,prompt_len,output_len\n0,0,5\n", "prompt_len"),
    ("", "empty"),
])
def test_bad_trace(tmp_path, capsys, text, key):
    f = write(tmp_path, _trace(tmp_path, text))
    rc = main(["serve", str(f), "--hw", "a6000", "-q", "--json", str(tmp_path / "o.json")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "tr.csv" in err and key in err, err
    assert not (tmp_path / "o.json").exists()


def test_trace_layouts(tmp_path):
    from sim.apps.serve.traces import read_trace

    (tmp_path / "az.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                     "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.1805900,396,109\n")
    r = read_trace(tmp_path / "az.csv", time_scale=0.5)
    assert list(r.arrival_s) == pytest.approx([0.0, 1.75]) and list(r.prompt_len) == [374, 396]
    (tmp_path / "mc.jsonl").write_text('{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]}\n'
                                       '{"timestamp": 2500, "input_length": 500, "output_length": 7, "hash_ids": [1]}\n')
    r = read_trace(tmp_path / "mc.jsonl")
    assert list(r.arrival_s) == [0.0, 2.5] and r.hash_ids == [(1, 2), (1,)] and list(r.output_len) == [5, 7]
    # DistServe's request streams: one JSON array, start_time in seconds, named .exp
    (tmp_path / "vllm-2-1.exp").write_text('[{"prompt_len": 55, "output_len": 4, "start_time": 0.0}, '
                                           '{"prompt_len": 829, "output_len": 170, "start_time": 1.3806393593549728}]')
    r = read_trace(tmp_path / "vllm-2-1.exp")
    assert list(r.arrival_s) == [0.0, 1.3806393593549728] and list(r.prompt_len) == [55, 829]
    assert list(r.output_len) == [4, 170] and r.hash_ids is None


def test_a_json_array_trace_with_a_non_object_is_one_line(tmp_path, capsys):
    f = write(tmp_path, _trace(tmp_path, '[{"prompt_len": 5, "output_len": 2, "start_time": 0}, 7]', name="t.json"))
    assert main(["serve", str(f), "--hw", "a6000", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("t.json: item 2 of the array is not an object; expected objects such as "
                        '{"start_time": 0.0, "prompt_len": 100, "output_len": 20}'), err


def test_capacity_search(tmp_path):
    f = write(tmp_path, lambda s: s["arrivals"].update(num_requests=150))
    rc = main(["serve", str(f), "--hw", "a6000", "-q", "--find-capacity", "--slo", "ttft_p90=0.3",
               "--json", str(tmp_path / "c.json")])
    c = json.loads((tmp_path / "c.json").read_text())
    assert rc == 0 and c["limiting_metric"] == "ttft_p90"
    ok = [p for p in c["points"] if p["ok"]]
    bad = [p for p in c["points"] if not p["ok"]]
    assert max(p["rate"] for p in ok) == c["capacity_rate_req_s"] < min(p["rate"] for p in bad)


def test_serve_says_it_does_not_read_the_one_batch_fields(capsys):
    """`sim serve --set prompt_len=4000` changed nothing and said nothing (a trial found batch, prompt_len and
    gen_len silently ignored): each is now named as unread, except on the offload kind, whose block reads them."""
    from sim.apps.cli import main
    from tests.conftest import ROOT

    f = str(ROOT / "workloads/serve_llama3_8b_sharegpt.yaml")
    assert main(["serve", f, "--hw", "h100_sxm", "-q", "--set", "serving.arrivals.num_requests=8",
                 "--set", "prompt_len=4000"]) == 0
    err = capsys.readouterr().err
    assert "prompt_len: not read by sim serve" in err and "gen_len" not in err
    assert main(["serve", f, "--hw", "h100_sxm", "-q", "--set", "serving.arrivals.num_requests=8"]) == 0
    assert "not read by sim serve" not in capsys.readouterr().err


def test_the_summary_gives_the_prefix_cache_hit_share():
    """The hit rate was only in --requests (prefix_hit_tokens): the summary now gives the completed requests'
    cached prompt tokens over their prompt tokens, by hand on a three-request table."""
    import numpy as np
    from sim.apps.serve.metrics import DONE, prefix_hit_share

    r = {"status": np.array([DONE, DONE, DONE + 1]), "prompt_tokens": np.array([100, 300, 1000]),
         "prefix_hit_tokens": np.array([50, 150, 1000])}
    assert prefix_hit_share(r) == 0.5          # (50 + 150) / (100 + 300): the unfinished request left out


@pytest.mark.parametrize("sched, unit, label", [({"kind": "orca"}, 1, "KV tokens"),
                                                 ({"kind": "vllm", "block_size": 32}, 32, "KV blocks (32 tokens)")])
def test_an_unpaged_pool_is_counted_in_tokens(tmp_path, sched, unit, label):
    """Orca and static reserve KV per token (paged: False), so their pool's 'blocks' were tokens under a blocks
    label (a serving researcher's trial: '450,258 KV blocks' = 28,141 blocks x 16). The summary names the unit
    and the report labels the row by it."""
    from rich.console import Console

    from sim.apps.serve.report import print_report

    f = write(tmp_path, lambda s: s.update(scheduler=sched))
    assert main(["serve", str(f), "--hw", "a6000", "-q", "--json", str(tmp_path / "o.json")]) == 0
    s = json.loads((tmp_path / "o.json").read_text())
    assert s["kv_block_tokens"] == unit
    con = Console(record=True, width=200)
    print_report(s, "t", con)
    assert label in con.export_text()


def test_a_rejected_request_keeps_its_requested_length_and_replicas_are_named(tmp_path):
    """A rejected row read output_tokens 0 and lost the length asked for; behind a router, the table now
    says which replica served each request (round robin: 0, 1, 0, 1, ...)."""
    import pandas as pd

    # llama2-7b holds 4,096 positions: about half of these prompts cannot be served
    f = write(tmp_path, lambda s: s.update(router={"replicas": 2},
                                           lengths={"prompt": {"dist": "uniform", "low": 3000, "high": 5000},
                                                    "output": {"dist": "fixed", "value": 8}}))
    assert main(["serve", str(f), "--hw", "a6000", "-q", "--requests", str(tmp_path / "r.csv")]) == 0
    df = pd.read_csv(tmp_path / "r.csv")
    rejected = df[df["status"] == "rejected"]
    assert len(rejected) and (rejected["output_tokens"] == 0).all() and (rejected["requested_output_tokens"] == 8).all()
    assert df["instance"].tolist() == ["replica 0", "replica 1"] * 15


def test_a_stack_of_another_engine_than_the_scheduler_and_a_stream_all_rejected_are_said(tmp_path, capsys):
    """A serving researcher's trial: `kind: vllm` under `stack: sglang` ran without a word (SGLang's per-request
    delay on vLLM's batching), and a run that rejected every request exited 0 as if it had served. The first is a
    warning, the second an error (one line, exit 2, nothing written); the engine's own pair (vllm with vllm) and a
    torch stack say nothing."""
    f = write(tmp_path, lambda s: s.update(lengths={"prompt": {"dist": "fixed", "value": 5000},
                                                    "output": {"dist": "fixed", "value": 8}}))
    out = tmp_path / "s.json"
    assert main(["serve", str(f), "--hw", "a6000", "-q", "--set", "stack=sglang", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert "stack 'sglang' runs beside scheduler.kind 'vllm'" in err and "scheduler.kind: sglang is sglang's own" in err
    assert "error: " in err and "all 30 requests were rejected (30: " in err and not out.exists()
    for stack in ("vllm", "torch-eager"):
        assert main(["serve", str(write(tmp_path)), "--hw", "a6000", "-q", "--set", f"stack={stack}"]) == 0
        assert "runs beside" not in capsys.readouterr().err


def test_a_pim_machine_whose_units_compute_none_of_the_formats_is_said():
    """A hardware designer's trial: a bf16 stream on an fp16-only PIM preset served with the plain GPU's figures and
    no word (`sim run` says it per op). fp16 (the units' format) gets no note; fp16 activations with bf16 weights
    and KV leave nothing eligible either."""
    from hw_models.machine import load_machine
    from sim.apps.checks import pim_ineligible
    from sim.apps.serve.spec import load_serve_file
    from tests.conftest import ROOT

    pim, path = load_machine("hbm_pim"), ROOT / "workloads/serve_pim_vs_h200.yaml"
    assert pim_ineligible(load_serve_file(path, {}), pim) == []
    [note] = pim_ineligible(load_serve_file(path, {"formats.activations": "bf16"}), pim)
    assert "no op can run in hbm_pim's PIM units, which compute fp16 only (activations in bf16)" in note
    [note] = pim_ineligible(load_serve_file(path, {"formats.weights": "bf16", "formats.kv_cache": "bf16"}), pim)
    assert "(weights in bf16 and KV cache in bf16)" in note
    assert pim_ineligible(load_serve_file(path, {"formats.activations": "bf16"}), load_machine("h100_sxm")) == []


def test_vllm_s_budget_and_sequence_cap_follow_the_gpu():
    """A serving researcher's trial: `kind: vllm` ran 2048 tokens and 256 sequences on every preset, where vLLM's
    OpenAI server takes 8192 and 1024 on a GPU of at least 70 GiB that is not an A100 (EngineArgs.get_batch_defaults;
    docs/serving.md's own validation says "each engine's default on an 80 GB GPU"). h100_sxm (80 GiB) and h200 get
    them; a100_80g (an A100) and a6000 (48 GB) keep 2048 / 256; a value the file sets is kept; vllm-v0 is untouched."""
    from hw_models.machine import load_machine
    from sim.apps.serve.engine_defaults import with_engine_defaults
    from sim.apps.serve.spec import serve_file_from_dict

    def sched(hw, **given):
        raw = json.loads(json.dumps(BASE))
        raw["serving"]["scheduler"] = {"kind": "vllm", **given}
        s = with_engine_defaults(serve_file_from_dict(raw, "t.yaml"), load_machine(hw)).serving.scheduler
        return s.max_num_batched_tokens, s.max_num_seqs

    assert sched("h100_sxm") == sched("h200") == (8192, 1024)
    assert sched("a100_80g") == sched("a6000") == (2048, 256)
    assert sched("h100_sxm", max_num_batched_tokens=512) == (512, 1024)
    raw = json.loads(json.dumps(BASE))
    raw["serving"]["scheduler"] = {"kind": "vllm-v0", "max_num_batched_tokens": 1024}
    f = serve_file_from_dict(raw, "t.yaml")
    assert with_engine_defaults(f, load_machine("h100_sxm")) is f


def test_vllm_v0_without_a_budget_holds_steps_to_its_default():
    """vLLM V0's budget without one is max(max_model_len, 2048) (llama3-8b: 8192): it had sized the step-cost grid
    but the scheduler held no step to it, so a burst of three 5,000-token prompts ran as one 15,000-token step with
    one TTFT (a serving trial). Now one prompt a step: three TTFTs, each a prefill later, and the resolved budget
    in the file (so `--json` shows it)."""
    from hw_models.machine import load_machine
    from sim.apps.serve.engine_defaults import with_engine_defaults
    from sim.apps.serve.run import serve
    from sim.apps.serve.spec import serve_file_from_dict

    raw = dict(name="b3", model="llama3-8b", flash_attention=True, serving=dict(
        arrivals=dict(process="burst", size=3, interval_s=100, num_requests=3, seed=0),
        lengths=dict(prompt=dict(dist="fixed", value=5000), output=dict(dist="fixed", value=20)),
        scheduler=dict(kind="vllm-v0")))
    f = serve_file_from_dict(raw, "b3.yaml")
    for hw in ("h100_sxm", "a6000"):   # any device: V0's default is the context's, not vLLM V1's device table
        assert with_engine_defaults(f, load_machine(hw)).serving.scheduler.max_num_batched_tokens == 8192
    res, _ = serve(f, load_machine("h100_sxm"))
    ttft = sorted(res.requests["first_token_s"] - res.requests["arrival_s"])
    assert ttft[1] == pytest.approx(2 * ttft[0], rel=1e-6) and ttft[2] == pytest.approx(3 * ttft[0], rel=1e-6)


def test_a_stream_all_rejected_fails_and_its_energy_is_undefined(tmp_path, capsys):
    """A serving trial: --plots on a run that rejected every request crashed with a traceback; then it wrote every
    output and exited 0 as if it had served (a later trial). Now it fails in one line that gives the reasons, exit 2,
    nothing written; its figures, as the API returns them, hold energy per token and per request as null (of no
    output token)."""
    from hw_models.machine import load_machine
    from sim.apps.serve.run import serve
    from sim.apps.serve.spec import load_serve_file

    f = write(tmp_path, lambda s: s.update(lengths={"prompt": {"dist": "fixed", "value": 5000},
                                                    "output": {"dist": "fixed", "value": 8}}))
    out = tmp_path / "out"
    assert main(["serve", str(f), "--hw", "a6000", "--plots", str(out / "p"), "--chrome-trace", str(out / "t.json"),
                 "--requests", str(out / "r.csv"), "--json", str(out / "s.json"), "--slo", "ttft_p90=0.2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {f}: all 30 requests were rejected (30: ") and "\n" not in err
    assert not out.exists()
    _, s = serve(load_serve_file(f), load_machine("a6000"))
    undefined = [s["energy_per_token_j"], s["energy"]["per_output_token_j"], s["energy"]["per_request_j"]]
    assert s["completed"] == 0 and all(v is None or v != v for v in undefined)   # None, or NaN (null in JSON)


def test_a_shared_prefix_longer_than_every_prompt_is_said():
    """A serving trial: `shared_prefix.tokens: 500` over 100-token prompts gave no prefix hit, silently (a prompt
    shorter than the prefix holds none of it). Said now, with the longest prompt the lengths can draw; a prefix that
    some prompt reaches (uniform up to 600) says nothing."""
    from hw_models.machine import load_machine
    from sim.apps.checks import input_notes
    from sim.apps.serve.spec import serve_file_from_dict

    def notes(prompt: dict) -> list[str]:
        raw = dict(name="p", model="llama3-8b", serving=dict(
            arrivals=dict(process="poisson", rate=2.0, num_requests=4),
            lengths=dict(prompt=prompt, output=dict(dist="fixed", value=8)),
            prefix_caching=dict(enabled=True, shared_prefix=dict(tokens=500, groups=2))))
        return [n for n in input_notes(serve_file_from_dict(raw, "p.yaml"), load_machine("h100_sxm")) if "prefix" in n]

    assert notes(dict(dist="fixed", value=100)) == [
        "p.yaml: serving.prefix_caching.shared_prefix.tokens: 500 is longer than every prompt (at most 100 tokens): "
        "no request shares it"]
    assert notes(dict(dist="uniform", low=100, high=600)) == []
    assert notes(dict(dist="lognormal", mean=100, cv=1.0, max=400)) != []   # the clip bounds it


def test_narrow_activations_without_a_rate_are_said_in_serving():
    """A serving trial: NVFP4 activations on an H100 ran dequantized to 16 bits with no word in the serve report
    (`sim run`'s op table shows the path per op). Said where the main unit lists no rate for them; a B200 (native
    NVFP4) and FP8 on an H100 say nothing."""
    from hw_models.machine import load_machine
    from sim.apps.checks import emulated_activations
    from sim.apps.serve.spec import serve_file_from_dict

    def file(act: str):
        return serve_file_from_dict(dict(name="f", model="llama3-8b", formats=dict(weights=act, activations=act),
                                         serving=dict(arrivals=dict(process="poisson", rate=2.0, num_requests=4),
                                                      lengths=dict(prompt=dict(dist="fixed", value=64),
                                                                   output=dict(dist="fixed", value=8)))), "f.yaml")
    assert emulated_activations(file("nvfp4"), load_machine("h100_sxm")) == [
        "f.yaml: formats.activations: nvfp4 has no matrix rate on h100_sxm: its GEMMs run dequantized to 16 bits "
        "(sim run's op table shows each op's path)"]
    assert emulated_activations(file("nvfp4"), load_machine("b200")) == []
    assert emulated_activations(file("fp8_e4m3"), load_machine("h100_sxm")) == []


def test_capacity_progress_lines_are_not_wrapped_when_piped(capsys):
    """A newcomer piped --find-capacity through tail and its progress lines broke mid-sentence at 80 columns, where
    cli.md says the width is unbounded on a pipe: each point is one line, its stop reason on it."""
    from tests.conftest import ROOT
    assert main(["serve", str(ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml"), "--hw", "h100_sxm",
                 "--find-capacity", "--slo", "ttft_p90=0.05"]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    stopped = [ln for ln in lines if "stopped after" in ln]
    assert stopped and all(ln.strip().startswith("rate") and ln.rstrip().endswith("fails with certainty)")
                           for ln in stopped)
    # each step's verdict first: a pass at 0.9977 and a miss had both read "1.00x of limit" (a serving trial)
    steps = [ln for ln in lines if ln.strip().startswith("rate")]
    assert all(": fails: " in ln for ln in stopped) and any(": meets: " in ln for ln in steps)


def test_an_error_from_a_stack_or_topology_file_names_the_serving_file_and_machine(capsys):
    """A serving trial: FP8 weights on an A6000 under vllm, or TP 16 on an 8-GPU topology, were refused naming only
    sim's own stack / topology file. As `sim run` does, the line now starts with the user's file and the machine."""
    from pathlib import Path

    w = str(Path(__file__).parents[1] / "workloads" / "serve_llama3_8b_sharegpt.yaml")
    assert main(["serve", w, "--hw", "a6000", "-q", "--set", "stack=vllm", "--set", "formats.weights=fp8_e4m3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: {w} on ") and "presets/a6000.yaml: " in err
    # a plan past its topology is the serving file's own key since stop 72 (hw_models.network.topology.check_ranks):
    # the line starts there, naming the key and the topology, where it had put the key in the topology's file
    assert main(["serve", w, "--hw", "h100_sxm", "-q", "--set", "parallel={tp: 16, topology: dgx_h100}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: {w}: parallel.max(tp, ep) x pp: 16 ranks but dgx_h100 has 8 devices")


def test_the_report_says_what_was_modelled():
    """With and without `stack: vllm` a run had the same title (TPOT 8.5 against 9.7 ms), and the TP plan, the
    router, the pools' own busy shares and the draft's k and alpha were in the JSON only (a serving trial)."""
    from sim.apps.serve.report import _setup

    serving = {"scheduler": {"kind": "vllm", "max_num_seqs": 1024, "max_num_batched_tokens": 8192}}
    assert _setup({"stack": "vllm", "serving": serving}) == "stack vllm; max_num_seqs 1,024, max_num_batched_tokens 8,192"
    s = {"stack": "", "parallel": {"tp": 2, "topology": "dgx_h100"},
         "serving": {**serving, "router": {"replicas": 2, "policy": "round_robin"},
                     "speculative": {"draft": {"name": "llama3.2-1b"}, "k": 4, "alpha": 0.7}},
         "disaggregated": {"prefill": [{"hw": "h100_sxm", "busy": 0.2}, {"hw": "h100_sxm", "busy": 0.4}],
                           "decode": [{"hw": "h100_sxm", "busy": 0.999}], "transfer": {"count": 3}}}
    # a pool takes its own preset's scheduler defaults: the file's section is not shown beside pools (a trial)
    assert _setup(s) == ("no stack (each op one kernel at the preset's launch cost); tp 2 on dgx_h100; "
                         "2 replicas, round_robin router; "
                         "disaggregated: prefill 2 x h100_sxm busy 30%, decode 1 x h100_sxm busy 100%; "
                         "speculative: draft llama3.2-1b, k 4, alpha 0.7")
    # through a real summary: replicas from parallel.dp leave router.replicas out of the dump (it had read "None")
    assert _setup({"stack": "vllm", "parallel": {"dp": 2}, "serving": {"router": {"policy": "least_outstanding"}}}) \
        == "stack vllm; dp 2; least_outstanding router"

"""Outputs of a parallel plan (issue 14 part 6): one Chrome-trace lane per device and per
device link, and the report's plan / collectives / bubble / memory-per-device figures,
checked against the alpha-beta costs and footprints worked out by hand."""

import json

import pytest

from hw_models.machine import load_machine
from hw_models.network.topology import load_topology
from hw_models.registry import report_sections, simulate
from sim.apps.cli import main
from sim.apps.chrome_trace import chrome_trace
from sim.core.model import load_model
from sim.core.workload import Workload

B, PROMPT, GEN = 4, 64, 4
H, V, L = 4096, 32000, 32      # llama2-7b: hidden, vocabulary, layers (32 heads, 32 KV heads)


def _run(parallel, batch=B):
    w = Workload(model="llama2-7b", batch=batch, prompt_len=PROMPT, gen_len=GEN, flash_attention=True,
                 parallel=parallel)
    return simulate(w, load_machine("a100_80g"))


def _fit(kind, ranks):
    f = load_topology("dgx_a100").fitted[kind][ranks]   # the preset's fitted alpha and B
    return f.latency_s, f.bandwidth_bytes_per_s


def _ring_all_reduce_2(nbytes):
    a, bw = _fit("all_reduce", 2)
    return 2 * (2 - 1) * a + 2 * (2 - 1) / 2 * nbytes / bw     # 2(n-1) alpha + 2(n-1)/n S/B


def _ring_all_gather_2(nbytes):
    a, bw = _fit("all_reduce", 2)
    return (2 - 1) * a + (2 - 1) / 2 * nbytes / bw             # (n-1) alpha + (n-1)/n S/B


def _lanes(trace, pid):
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"
             and e["pid"] == pid}
    return [names[t] for t in sorted(names)]


def _slices(trace, pid):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == pid]


@pytest.fixture(scope="module")
def tp2():
    return _run({"tp": 2, "topology": "dgx_a100"})


def test_tp2_trace_lanes_and_collectives_by_hand(tp2):
    r = tp2
    trace = chrome_trace({"prefill": r.prefill_timeline, "decode": r.decode_timeline},
                         lanes=r.extra["parallel"]["lanes"])
    for pid in (1, 2):
        assert _lanes(trace, pid) == ["rank 0", "rank 1", "rank 0 link", "rank 1 link"]
    lanes = dict(enumerate(_lanes(trace, 2), start=1))
    dec = _slices(trace, 2)
    colls = [e for e in dec if e["cat"] in ("all_reduce", "all_gather")]
    # One embedding all-reduce, two per layer, the logits' all-gather: on both links, nowhere else.
    assert len(colls) == 2 * (1 + 2 * L + 1)
    assert {lanes[e["tid"]] for e in colls} == {"rank 0 link", "rank 1 link"}
    assert {lanes[e["tid"]] for e in dec if e["cat"] == "gemm"} == {"rank 0", "rank 1"}
    ar = _ring_all_reduce_2(B * H * 2) * 1e6             # fp16 hidden states of the batch, in us
    ag = _ring_all_gather_2(B * V * 2) * 1e6             # fp16 logits
    for e in colls:
        assert e["dur"] == pytest.approx(ag if e["cat"] == "all_gather" else ar, rel=1e-9)
    pre = [e for e in _slices(trace, 1) if e["name"] == "L0.o_proj.all_reduce"]
    assert [e["dur"] for e in pre] == pytest.approx([_ring_all_reduce_2(B * PROMPT * H * 2) * 1e6] * 2)


def test_tp2_report_figures_by_hand(tp2):
    par = tp2.extra["parallel"]
    json.dumps(par)   # plain JSON, so --json carries it
    dec = par["steps"]["decode"]
    coll = (1 + 2 * L) * _ring_all_reduce_2(B * H * 2) + _ring_all_gather_2(B * V * 2)
    assert dec["collective_s"] == pytest.approx(coll, rel=1e-9)
    assert dec["collective_share"] == pytest.approx(coll / tp2.decode_timeline.makespan_s, rel=1e-9)
    assert dec["bubble"] is None and par["steps"]["prefill"]["bubble"] is None   # one stage
    pre = par["steps"]["prefill"]
    assert pre["collective_s"] == pytest.approx((1 + 2 * L) * _ring_all_reduce_2(B * PROMPT * H * 2)
                                                + _ring_all_gather_2(B * V * 2), rel=1e-9)
    mem = par["memory_per_device"]
    m = load_model("llama2-7b")
    assert mem["weights"] == pytest.approx(m.params() * 2 / 2, rel=1e-9)   # fp16, halved (32 KV heads split)
    kv = B * (PROMPT + GEN) * L * 2 * H * 2 / 2                             # K and V, fp16, half the heads
    assert mem["kv_cache"] == pytest.approx(kv, rel=1e-9)
    assert mem["capacity"] == 80 * 2**30
    assert par["plan"] == dict(tp=2, pp=1, dp=1, ep=1, micro_batches=1, algorithm="ring", topology="dgx_a100",
                               devices_per_replica=2, devices=2, stage_layers=[L])
    titles = [s.title for s in report_sections(tp2)]
    assert titles == ["Parallel plan", "Collectives and pipeline bubble, one step in full", "Memory per device"]


def test_pp2_bubble_and_send_lanes_by_hand():
    """pp 2, 4 micro-batches, tp 1: stage 0 (16 layers + embedding) a, stage 1 (16 layers +
    head) b, send c = alpha + S/B. In-order streams from an empty pipeline: the step's schedule (the trace) ends
    at a + c + b + 3 max(a, b). In steady state the micro-batches stay in flight from step to step, so a decode
    step takes the closed pipeline's period max(a + c + b, 4 max(a, b)); each stage is busy 4 a (4 b) of it.
    Every send lies on stage 0's device link."""
    r = _run({"pp": 2, "micro_batches": 4, "topology": "dgx_a100"}, batch=8)
    tl = r.decode_timeline
    d = {i.task: i.duration_s for i in tl.intervals}
    a, b, c = d["mb0.stage0"], d["mb0.stage1"], d["mb0.send0"]
    alpha, bw = _fit("send_recv", 2)
    assert c == pytest.approx(alpha + (8 // 4) * 1 * H * 2 / bw, rel=1e-9)   # 2 tokens' fp16 hidden states
    assert tl.makespan_s == pytest.approx(a + c + b + 3 * max(a, b), rel=1e-9)
    span = max(a + c + b, 4 * max(a, b))
    step = r.extra["parallel"]["steps"]["decode"]
    assert step["step_s"] == pytest.approx(span, rel=1e-9)
    # the run's decode steps are those periods (their KV grows from the first step to the last), not the schedule's
    assert r.tpot_first_s <= span * (1 + 1e-9) and r.tpot_last_s >= span * (1 - 1e-9)
    assert r.tpot_last_s < tl.makespan_s
    assert step["stage_idle"] == pytest.approx([1 - 4 * a / span, 1 - 4 * b / span], rel=1e-9)
    assert step["bubble"] == pytest.approx(1 - 4 * (a + b) / (2 * span), rel=1e-9)
    # Stage 0 sends, stage 1 receives: both engaged 4 c.
    assert step["collective_s_per_stage"] == pytest.approx([4 * c, 4 * c], rel=1e-9)
    assert step["collective_s"] == pytest.approx(4 * c, rel=1e-9)
    trace = chrome_trace({"decode": tl}, lanes=r.extra["parallel"]["lanes"])
    lanes = dict(enumerate(_lanes(trace, 1), start=1))
    assert list(lanes.values()) == ["rank 0", "rank 1", "rank 0 link"]
    ev = _slices(trace, 1)
    assert {lanes[e["tid"]] for e in ev if e["cat"] == "send_recv"} == {"rank 0 link"}
    first = min(e["ts"] for e in ev if lanes[e["tid"]] == "rank 1")
    assert first == pytest.approx((a + c) * 1e6)   # stage 1 idles until micro-batch 0 arrives
    # The send of micro-batch 0 overlaps stage 0's compute of micro-batch 1.
    send0 = next(e for e in ev if e["name"] == "mb0.send0")
    stage1 = next(e for e in ev if e["name"] == "mb1.stage0")
    assert stage1["ts"] <= send0["ts"] < stage1["ts"] + stage1["dur"]


def test_single_device_has_no_parallel_section():
    r = _run({"tp": 1})
    assert report_sections(r) == [] and r.extra["parallel"]["lanes"] == {}


def test_cli_trace_and_json_carry_the_plan(tmp_path, capsys):
    wl = tmp_path / "tp2.yaml"
    wl.write_text(f"name: tp2\nmodel: llama2-7b\nbatch: {B}\nprompt_len: {PROMPT}\ngen_len: {GEN}\n"
                  "flash_attention: true\nparallel: {tp: 2, topology: dgx_a100}\n")
    out, trace = tmp_path / "r.json", tmp_path / "t.json"
    assert main(["run", str(wl), "--hw", "a100_80g", "--json", str(out), "--chrome-trace", str(trace)]) == 0
    assert "Memory per device" in capsys.readouterr().out
    assert json.loads(out.read_text())["extra"]["parallel"]["plan"]["tp"] == 2
    assert _lanes(json.loads(trace.read_text()), 2) == ["rank 0", "rank 1", "rank 0 link", "rank 1 link"]


def test_tp_collectives_inside_pipeline_stages_by_hand():
    """tp 2 x pp 2, 2 micro-batches of 2 sequences: a stage-0 device runs per micro-batch
    the embedding's and its 16 layers' 2 all-reduces, a stage-1 device its 16 layers' and
    the logits' all-gather; each also sends or receives the micro-batch's activations."""
    r = _run({"tp": 2, "pp": 2, "micro_batches": 2, "topology": "dgx_a100"})
    alpha, bw = _fit("send_recv", 2)
    mb = B // 2
    send = alpha + mb * H * 2 / bw
    ar, ag = _ring_all_reduce_2(mb * H * 2), _ring_all_gather_2(mb * V * 2)
    want = [2 * ((1 + 2 * 16) * ar + send), 2 * (2 * 16 * ar + ag + send)]
    assert r.extra["parallel"]["steps"]["decode"]["collective_s_per_stage"] == pytest.approx(want, rel=1e-9)
    trace = chrome_trace({"d": r.decode_timeline}, lanes=r.extra["parallel"]["lanes"])
    assert _lanes(trace, 1) == ["rank 0", "rank 1", "rank 2", "rank 3", "rank 0 link", "rank 1 link"]
    # A stage is one block in the trace; its slice carries the collectives inside it (µs).
    stage = {e["name"]: e["args"] for e in _slices(trace, 1)}
    assert stage["mb0.stage0"]["collective_us"] == pytest.approx((1 + 2 * 16) * ar * 1e6, rel=1e-9)
    assert stage["mb0.stage1"]["collective_us"] == pytest.approx((2 * 16 * ar + ag) * 1e6, rel=1e-9)


def test_energy_counts_every_device():
    """One rank per stage is simulated, but every device draws power: h200 (idle 117.1 W, measured)
    energy = idle x devices x end-to-end + dynamic. A pipeline moves the same ops onto other
    devices, so its dynamic energy equals one GPU's exactly; TP splits the GEMMs and attention
    and replicates the norms, residual adds and embedding on both ranks (a few percent more)."""
    def run(parallel):
        w = Workload(model="llama2-7b", batch=B, prompt_len=PROMPT, gen_len=GEN, flash_attention=True,
                     **({"parallel": {**parallel, "topology": "hgx_h200"}} if parallel else {}))
        # Activity power off (issue 33): it is charged per device's busy time, which TP does not halve.
        return simulate(w, load_machine("h200", {"units.gpu.active_power_w": 0.0}), detail=False)

    def dynamic(r, devices):
        return r.energy_per_token_j * B * GEN - 117.1 * devices * r.e2e_s

    one = dynamic(run(None), 1)
    assert dynamic(run({"pp": 2}), 2) == pytest.approx(one, rel=1e-9)
    tp2 = dynamic(run({"tp": 2}), 2)
    assert one < tp2 < 1.03 * one
    assert dynamic(run({"tp": 2, "pp": 2}), 4) == pytest.approx(tp2, rel=1e-9)


def test_energy_under_expert_and_data_parallelism_by_hand():
    """Mixtral-8x7B on h200 (HBM 4.0e-11 J/byte), batch 4, 4 generated tokens: 4 steps (the prefill and 3
    decodes). EP 2 over TP 1 (ep > tp: two attention groups, sim.apps.serve.attention_dp's split of the
    batch): every FLOP and every expert byte is done once over the two devices, the KV split with the
    batch, but each group reads the dense (non-expert) weights itself: one extra read of them per step,
    less the embedding table (a lookup of 4 rows, not a weight read). Dynamic energy = one GPU's + 4 x
    (dense - 32000 x 4096 x 2 bytes) x 4.0e-11 J + the all-to-all's link energy. DP 2: two independent replicas, each with its own
    batch: the energy per token is one replica's."""
    from hw_models.gpu.expert_parallel import expert_weight_bytes
    from sim.core.footprint import weight_bytes
    from sim.core.lowering import FormatPolicy

    def run(parallel):
        w = Workload(model="mixtral-8x7b", batch=B, prompt_len=PROMPT, gen_len=GEN, flash_attention=True,
                     **({"parallel": {**parallel, "topology": "hgx_h200"}} if parallel else {}))
        # Activity power off (issue 33): it is charged per device's busy time, not per op.
        return simulate(w, load_machine("h200", {"units.gpu.active_power_w": 0.0}), detail=False)

    def dynamic(r, devices):
        return r.energy_per_token_j * B * GEN - 117.1 * devices * r.e2e_s

    m, fmt = load_model("mixtral-8x7b"), FormatPolicy()
    dense_read = weight_bytes(m, fmt) - expert_weight_bytes(m, fmt) - 32000 * 4096 * 2
    single = run(None)
    one = dynamic(single, 1)
    # Plus the all-to-all's bytes over NVLink at hgx_h200's 10.4 pJ/B (issue 33), not derived here: under
    # 0.1% of the total (measured 1.5 mJ of 15.2 J).
    ep2 = dynamic(run({"ep": 2}), 2)
    assert one + GEN * dense_read * 4.0e-11 < ep2 < one + GEN * dense_read * 4.0e-11 + 1e-3 * one
    assert run({"dp": 2}).energy_per_token_j == pytest.approx(single.energy_per_token_j, rel=1e-12)


def test_the_throughput_line_says_it_is_one_replicas(capsys):
    """`parallel: {dp: 2}` simulates one replica (docs/parallelism.md): the report's throughput read like the
    deployment's (a trial: dp 2 and dp 1 printed the same 737.3 tokens/s). It now says per replica and gives dp x it."""
    from sim.apps.cli import main
    from tests.conftest import ROOT
    wl = str(ROOT / "workloads/llama2_7b_decode.yaml")
    assert main(["run", wl, "--hw", "h100_sxm", "--set", "batch=8", "--set", "parallel={dp: 2, topology: dgx_h100}"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "throughput" in x)
    one = float(line.split("tokens/s")[0].split()[-1].replace(",", ""))
    both = float(line.split("2 replicas:")[1].split("tokens/s")[0].replace(",", ""))
    # each printed to 0.1 token/s: twice the rounded one is within 0.1 of the rounded two
    assert "per replica; 2 replicas:" in line and both == pytest.approx(2 * one, abs=0.1 + 1e-9)


def test_the_json_of_replicas_gives_the_deployment_s_throughput_beside_the_replica_s(tmp_path):
    """A parallelism trial: under dp 2 the JSON's throughput_tok_s and devices are one replica's, which a sweep read
    as the deployment's. The JSON and the metrics carry `replicas` and the deployment's tokens/s beside them."""
    import json

    from sim.apps.cli import main
    from tests.conftest import ROOT
    wl, out = str(ROOT / "workloads/llama2_7b_decode.yaml"), tmp_path / "r.json"
    assert main(["run", wl, "--hw", "h100_sxm", "--set", "batch=8", "--set", "parallel={dp: 2, topology: dgx_h100}",
                 "--json", str(out), "-q"]) == 0
    d = json.loads(out.read_text())
    assert d["replicas"] == 2 and d["devices"] == 1
    assert d["throughput_all_replicas_tok_s"] == pytest.approx(2 * d["throughput_tok_s"], rel=1e-12)
    assert main(["run", wl, "--hw", "h100_sxm", "--set", "batch=8", "--json", str(out), "-q"]) == 0
    one = json.loads(out.read_text())   # one replica: the same figure, so a sweep over dp has its baseline (a review)
    assert one["replicas"] == 1 and one["throughput_all_replicas_tok_s"] == one["throughput_tok_s"]


def test_the_top_ops_of_a_pipelined_step_say_they_are_stages(capsys):
    """Under pp the op table lists every stage's ops, the stages on their own devices at once, whose shares add
    past 100% (a trial read 8 whole-stage rows at ~20% each); its caption says so, a run without pp has none."""
    from sim.apps.cli import main
    from tests.conftest import ROOT
    assert main(["run", str(ROOT / "workloads/llama70b_tp4_pp2.yaml"), "--hw", "h100_sxm"]) == 0
    assert "shares of the step add past 100%" in capsys.readouterr().out
    assert main(["run", str(ROOT / "workloads/llama13b_decode.yaml"), "--hw", "h100_sxm"]) == 0
    assert "shares of the step add past 100%" not in capsys.readouterr().out


def _gemm_and_attention_flops(batch: int, tokens: int, context: float, tp: int) -> float:
    """One rank's GEMM and attention FLOPs of a llama2-7b step by hand: per token 2 x (4 H^2 + 3 H I) per layer
    (32 KV heads: every projection splits over tp) and attention 4 H x the keys it reads; per sequence 2 V H for
    the LM head (the last token's logits only)."""
    inter = 11008
    per_token = L * (2 * (4 * H * H + 3 * H * inter) + 4 * H * context)
    return batch * (tokens * per_token + 2 * V * H) / tp


def test_a_pipelined_steps_ops_are_its_stages_ops(tmp_path):
    """A pp run's op records were its whole-stage tasks, with no FLOPs or bytes, so its JSON ops carried none
    and its roofline no point. Now each stage's task carries its ops (hw_models.gpu.stage_ops): every rank's op of
    every micro-batch, labelled mbI.stageJ., on the stage's resource. By hand: their FLOPs are the TP run's
    (the micro-batches split the batch), and the GEMMs' and attention's FLOPs of the step, within the elementwise
    ops' (norms, residuals, SiLU, RoPE: ~20 H + 5 I per token and layer against ~4e8 of GEMMs: < 0.1%).
    They fill each stage's task end to end; the schedule (the step's time) stays the stage tasks'."""
    from hw_models.roofs import roofs
    from sim.apps import plots

    pp = _run({"tp": 2, "pp": 2, "micro_batches": 2, "topology": "dgx_a100"})
    tp = _run({"tp": 2, "topology": "dgx_a100"})
    kv = pp.decode_kv_len
    by_hand = {"decode": _gemm_and_attention_flops(B, 1, kv, 2),
               # causal prefill: a query reads (its position + 1) keys, on average (PROMPT + 1) / 2
               "prefill": _gemm_and_attention_flops(B, PROMPT, (PROMPT + 1) / 2, 2)}
    for phase in ("decode", "prefill"):
        ops = getattr(pp, f"{phase}_ops")
        flops = sum(o.flops for o in ops)
        assert flops == pytest.approx(sum(o.flops for o in getattr(tp, f"{phase}_ops")), rel=1e-12)
        assert flops == pytest.approx(by_hand[phase], rel=2e-3)
        assert {o.unit for o in ops if o.kind == "gemm"} == {"gpu", "gpu.s1"}
        tl = getattr(pp, f"{phase}_timeline")
        for iv in (i for i in tl.intervals if ".stage" in i.task):
            mine = [o for o in ops if o.name.startswith(iv.task + ".")]
            assert {o.unit for o in mine} == {iv.resource}
            assert min(o.start_s for o in mine) == pytest.approx(iv.start_s, rel=1e-12)
            assert max(o.end_s for o in mine) == pytest.approx(iv.end_s, rel=1e-9)
            assert sum(o.duration_s for o in mine) == pytest.approx(iv.duration_s, rel=1e-9)
    # Stage 1 of micro-batch 0 runs layers 16-31 and the head, as its own layers.
    names = {o.name for o in pp.decode_ops if o.name.startswith("mb0.stage1.")}
    assert {"mb0.stage1.L16.q_proj", "mb0.stage1.L31.down_proj", "mb0.stage1.lm_head"} <= names
    assert not any(".L15." in n or "embed" in n for n in names)
    assert sum(o["flops"] for o in pp.to_json()["ops"]) == pytest.approx(by_hand["decode"], rel=2e-3)
    drawn = plots.drawn_roofs(pp, roofs(load_machine("a100_80g"), "fp16"))
    pts = plots.points(pp, drawn)
    assert {(p.phase, p.unit) for p in pts} == {(ph, u) for ph in ("decode", "prefill") for u in ("gpu", "gpu.s1")}
    assert [r.unit for r in drawn] == ["gpu"]


def test_sim_run_of_a_pp_workload_writes_its_ops_to_json_and_the_roofline(tmp_path):
    """The shipped pp example, as a user runs it (`--json`, `--plots`): its JSON ops held 8 stage blocks with
    0 FLOPs and its roofline.png no point. By hand, Llama-2-70B (H 8192, I 28672, 8 KV heads of 128, 80 layers,
    V 32000) at tp 4, batch 8: one rank's decode GEMMs and attention, each token 2 (2 H^2 + 2 H x 1024 + 3 H I)
    + 4 H kv_len per layer, and 2 V H per sequence for the LM head, over 4 ranks (elementwise ops < 0.1%)."""
    out, plots_dir = tmp_path / "out.json", tmp_path / "plots"
    from tests.conftest import ROOT
    assert main(["run", str(ROOT / "workloads/llama70b_tp4_pp2.yaml"), "--hw", "h100_sxm", "--json", str(out),
                 "--plots", str(plots_dir), "-q"]) == 0
    data = json.loads(out.read_text())
    h, inter, kv = 8192, 28672, data["decode_kv_len"]
    by_hand = 8 * (80 * (2 * (2 * h * h + 2 * h * 1024 + 3 * h * inter) + 4 * h * kv) + 2 * V * h) / 4
    assert sum(o["flops"] for o in data["ops"]) == pytest.approx(by_hand, rel=2e-3)
    gemms = [o for o in data["ops"] if o["kind"] == "gemm"]
    assert all(o["flops"] > 0 and o["bytes"] > 0 for o in gemms) and {o["unit"] for o in gemms} == {"gpu", "gpu.s1"}
    points = json.loads((plots_dir / "roofline.json").read_text())["points"]
    assert {(p["phase"], p["unit"]) for p in points} == {(ph, u) for ph in ("decode", "prefill") for u in ("gpu", "gpu.s1")}


def test_a_pipelined_step_s_dataframe_names_each_record_s_op():
    """to_pandas' `op` column is the op a record works for: a pipelined step's mb0.stage1.L40.q_proj is q_proj, as
    a one-device run's L40.q_proj is (it read mb0.stage1.L40.q_proj, which groups nothing)."""
    from sim.core.workload import load_workload
    from tests.conftest import ROOT

    run = simulate(load_workload(ROOT / "workloads" / "llama70b_tp4_pp2.yaml"), load_machine("h100_sxm"))
    df = run.to_pandas("decode")
    q = df[df["name"].str.endswith(".L40.q_proj")]
    assert len(q) and set(q["op"]) == {"q_proj"} and not df["op"].str.contains(r"stage\d").any()


def test_captions_say_what_adds_past_the_step():
    """A kernel trial: under `stack: vllm` the top-ops shares added to 109.7% (the overlapped engine.host row beside the
    device's), and the collectives table read a 516 ms prefill against a 563 ms TTFT (the binding power cap's
    stretch). The top-ops caption says the host overlaps; the collectives caption says its times are at full clock."""
    from sim.apps.report import host_caption
    from sim.core.workload import load_workload
    from tests.conftest import ROOT

    w = load_workload(ROOT / "workloads" / "llama70b_decode.yaml", overrides={
        "parallel": {"tp": 4, "topology": "dgx_h100"}, "stack": "vllm", "batch": 8, "gen_len": 8})
    r = simulate(w, load_machine("h100_sxm"))
    assert r.extra["engine_host"]["overlap"] and "add past 100%" in host_caption(r)
    # since stop 69 a TP step's records run at the capped clock: the table's prefill is the TTFT, and says nothing
    assert r.extra.get("power_cap") and r.ttft_s == pytest.approx(r.extra["parallel"]["steps"]["prefill"]["step_s"])
    coll = next(s for s in report_sections(r) if s.title.startswith("Collectives"))
    assert "times at full clock" not in coll.caption
    # a pipeline's stages are capped apart: its records stay at full clock, and the caption says so
    pp = simulate(load_workload(ROOT / "workloads" / "llama70b_decode.yaml", overrides={
        "parallel": {"tp": 2, "pp": 2, "topology": "dgx_h100"}, "batch": 8, "gen_len": 8}), load_machine("h100_sxm"))
    assert pp.extra.get("power_cap") and pp.ttft_s > pp.extra["parallel"]["steps"]["prefill"]["step_s"]
    assert "times at full clock" in next(s for s in report_sections(pp) if s.title.startswith("Collectives")).caption
    plain = simulate(load_workload(ROOT / "workloads" / "llama70b_decode.yaml", overrides={
        "parallel": {"tp": 4, "topology": "dgx_h100"}, "batch": 8, "gen_len": 8}), load_machine("h100_sxm"))
    assert host_caption(plain) is None

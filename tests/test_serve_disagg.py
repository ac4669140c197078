"""Disaggregated prefill and decode (sim/apps/serve/disagg.py), by hand on one request."""

import numpy as np
import pytest

from hw_models.machine import load_machine
from sim.apps.serve.run import serve
from sim.apps.serve.instance import prepare
from sim.apps.serve.spec import ServeFile
from sim.apps.serve.iteration import features
from sim.core.errors import ConfigError
from sim.core.schema import validate_mapping

CACHE: dict = {}
PROMPT, OUT = 512, 16
KV_PER_TOKEN = 2 * 32 * 4096 * 2          # llama2-7b: K and V, 32 layers, 4096 wide, fp16


def _file(n=1, rate=1.0, transfer=None, prefill="h100_sxm", decode="a6000", replicas=1) -> ServeFile:
    serving = dict(arrivals=dict(process="constant", rate=rate, num_requests=n, seed=0),
                   lengths=dict(prompt=dict(dist="fixed", value=PROMPT), output=dict(dist="fixed", value=OUT)),
                   scheduler=dict(kind="sarathi", max_num_batched_tokens=1024),
                   disaggregated=dict(prefill=dict(hw=prefill, replicas=replicas), decode=dict(hw=decode),
                                      transfer=transfer or {"bandwidth_bytes_per_s": 50e9, "latency_s": 10e-6}))
    raw = dict(name="t", model="llama2-7b", flash_attention=True, serving=serving)
    return validate_mapping(ServeFile, raw, "test.yaml", "a serving file")


def test_one_request_by_hand():
    """Prompt 512 on h100_sxm, KV = 512 x 524,288 B = 268,435,456 B over 50 GB/s + 10 us =
    5.3787 ms, then 15 decode steps on a6000. TTFT = the prefill iteration; the second token
    comes one transfer and one decode iteration (1 token over 513 keys) later."""
    f = _file()
    res, s = serve(f, load_machine("a6000"), cache=CACHE)
    t = s["disaggregated"]["transfer"]
    want = 10e-6 + PROMPT * KV_PER_TOKEN / 50e9
    assert t["count"] == 1 and t["bytes_mean"] == PROMPT * KV_PER_TOKEN
    assert t["time_mean_s"] == pytest.approx(want, rel=1e-12)
    pre = prepare(f, load_machine("h100_sxm"), cache=CACHE)
    dec = prepare(f, load_machine("a6000"), cache=CACHE)
    ttft = pre.target_cost(features([(PROMPT, PROMPT)]))[0]
    assert s["latency"]["ttft"]["mean"] == pytest.approx(ttft, rel=1e-9)
    steps = sum(dec.target_cost(features([(1, PROMPT + j)]))[0] for j in range(1, OUT))
    assert res.requests["finish_s"][0] == pytest.approx(ttft + want + steps, rel=1e-9)
    assert s["latency"]["tbt"]["max"] == pytest.approx(want + dec.target_cost(features([(1, PROMPT + 1)]))[0])
    assert s["completed"] == 1 and res.tokens_out == OUT
    # Utilisation over the run (prefill, transfer, decodes back to back): the prefill replica's link is
    # busy for the one transfer, its gpu for the prefill's busy seconds; the decode replica's gpu for the
    # 15 steps. Busy seconds are counted at full clock (hw_models.base.Mapper.capped): where the board's
    # power limit binds (this 512-token prefill on h100_sxm) the step stretches, the work does not, so the
    # prefill's busy share is the cost vector's own gpu entry (index 2: time, joules, then busy per resource).
    span = res.makespan_s
    pre_u, dec_u = s["disaggregated"]["prefill"][0]["utilization"], s["disaggregated"]["decode"][0]["utilization"]
    assert pre_u["kv_transfer"] == pytest.approx(want / span, rel=1e-9)
    assert pre.target_cost.keys[0] == "gpu"
    pre_busy = pre.target_cost(features([(PROMPT, PROMPT)]))[2]
    assert pre_busy <= ttft
    assert pre_u["gpu"] == pytest.approx(pre_busy / span, rel=1e-9) and dec_u["gpu"] == pytest.approx(steps / span, rel=1e-9)
    assert "kv_transfer" not in dec_u


def test_transfer_over_a_topology_and_pool_figures():
    """dgx_h100's fitted send/recv (its YAML, 2 ranks: alpha 8.1 us, B 3.62e11 B/s); two prefill replicas
    share the requests round-robin; every output token is counted once."""
    res, s = serve(_file(n=8, rate=4.0, transfer={"topology": "dgx_h100"}, replicas=2),
                   load_machine("a6000"), cache=CACHE)
    d = s["disaggregated"]
    assert d["transfer"]["time_mean_s"] == pytest.approx(8.1e-6 + PROMPT * KV_PER_TOKEN / 3.62e11)
    assert [p["requests"] for p in d["prefill"]] == [4, 4] and d["decode"][0]["requests"] == 8
    assert res.tokens_out == 8 * OUT and s["completed"] == 8
    assert 0 < d["decode"][0]["busy"] <= 1 and np.isnan(res.requests["first_token_s"]).sum() == 0


@pytest.mark.parametrize("kw,match", [
    (dict(prefill="h100_q"), "serving.disaggregated.prefill.hw: "),
    (dict(transfer={"topology": "dgx_q"}), "serving.disaggregated.transfer.topology: unknown topology 'dgx_q'"),
])
def test_bad_disaggregated_sections(kw, match):
    with pytest.raises(ConfigError, match=match):
        serve(_file(**kw), load_machine("a6000"), cache=CACHE)


def test_transfer_needs_one_link():
    with pytest.raises(ConfigError, match="give topology or bandwidth_bytes_per_s"):
        _file(transfer={"latency_s": 1e-6})


def test_disaggregated_pools_draw_idle_power_between_iterations():
    """Each replica's idle power over its own idle seconds (issue 33): h100_sxm's 117.1 W for the prefill
    replica, b200's 167.3 W for the decode one; the run's energy is the iterations' plus those."""
    from sim.apps.serve.energy import energy_summary, total_energy_j

    res, s = serve(_file(n=4, rate=2.0, decode="b200"), load_machine("h100_sxm"), cache=CACHE)
    span = res.makespan_s
    (pre,), (dec,) = s["disaggregated"]["prefill"], s["disaggregated"]["decode"]
    assert pre["busy"] < 1 and dec["busy"] < 1   # both pools wait for work here
    want = res.energy_j + 117.1 * (1 - pre["busy"]) * span + 167.3 * (1 - dec["busy"]) * span
    assert total_energy_j(res) == pytest.approx(want, rel=1e-9)
    assert energy_summary(res)["by_phase_j"]["idle"] == pytest.approx(want - res.energy_j, rel=1e-9)


def test_sim_serve_names_the_pools_not_hw(tmp_path, capsys):
    """The pools run on their own presets: the title and the JSON say which, --hw is not needed (given, it
    is said to be unused, as it was silently before while the title read 'on h200'), --set hw.* is refused,
    and the Chrome trace draws each pool's iterations on its own named track instead of one overlapping lane."""
    import json

    import yaml

    from sim.apps.cli import main

    raw = dict(name="t", model="llama2-7b", flash_attention=True)
    raw["serving"] = dict(arrivals=dict(process="constant", rate=4.0, num_requests=3, seed=0),
                          lengths=dict(prompt=dict(dist="fixed", value=PROMPT), output=dict(dist="fixed", value=OUT)),
                          disaggregated=dict(prefill=dict(hw="h100_sxm", replicas=2), decode=dict(hw="a6000"),
                                             transfer={"bandwidth_bytes_per_s": 50e9}))
    f = tmp_path / "d.yaml"
    f.write_text(yaml.safe_dump(raw))
    out, trace = tmp_path / "o.json", tmp_path / "t.json"
    assert main(["serve", str(f), "--hw", "h200", "-q", "--json", str(out), "--chrome-trace", str(trace)]) == 0
    assert "--hw h200 is not used" in capsys.readouterr().err
    s = json.loads(out.read_text())
    assert s["hardware"] == "prefill h100_sxm x2, decode a6000 x1" and s["energy"]["devices"] == 3
    ev = json.loads(trace.read_text())["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert names == {1: "prefill 0 (h100_sxm)", 2: "prefill 1 (h100_sxm)", 3: "decode 0 (a6000)"}
    iters = [e for e in ev if e["pid"] == 1 and e["ph"] == "X"]
    assert {e["tid"] for e in iters} == {1, 2, 3}
    for tid in (1, 2, 3):   # no two iterations of one instance overlap on its track
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in iters if e["tid"] == tid)
        assert all(b[0] >= a[1] - 1e-6 for a, b in zip(spans, spans[1:]))
    assert main(["serve", str(f), "-q"]) == 0   # no --hw needed
    assert main(["serve", str(f), "-q", "--set", "hw.memory.hbm.capacity_bytes=1e9"]) == 2
    assert "--set hw.memory.hbm.capacity_bytes: serving.disaggregated runs each pool" in capsys.readouterr().err
    raw["serving"].pop("disaggregated")
    f.write_text(yaml.safe_dump(raw))
    assert main(["serve", str(f), "-q"]) == 2
    assert "--hw: required" in capsys.readouterr().err


def test_pools_of_different_plans_report_power_per_own_device():
    """A TP 2 prefill pool (h100_sxm, dgx_h100) beside a one-GPU a6000 decode pool: each iteration's power is
    divided by its own pool's devices. The board's devices are the pools' mean (1.5), which read a TP 2 prefill
    iteration's 2 x ~700 W as ~930 W a device, over the H100's 700 W limit."""
    from sim.apps.serve.energy import energy_summary, power_trace

    f = _file(n=4, rate=2.0)
    d = f.serving.disaggregated
    f = f.model_copy(update={"serving": f.serving.model_copy(update={"disaggregated": d.model_copy(update={
        "prefill": d.prefill.model_copy(update={"parallel": {"tp": 2, "topology": "dgx_h100"}})})})})
    res, s = serve(f, load_machine("a6000"), cache=CACHE)
    it = res.iterations
    own = np.where(it["instance"] == 0, 2, 1)
    watts = it["energy_j"] / it["duration_s"] / own
    assert s["energy"]["devices"] == 3 and res.board.devices == 1.5
    assert s["energy"]["peak_power_per_device_w"] == pytest.approx(watts.max(), rel=1e-12)
    assert energy_summary(res)["peak_power_per_device_w"] <= 700.0 + 1e-6   # h100_sxm's board limit (a6000: 300 W)
    # the trace is all 3 devices' draw over 3: it integrates to the run's energy, below the peak iteration's own
    trace_t, trace_w = power_trace(res)
    assert np.sum(trace_w[:-1] * np.diff(trace_t)) * 3 == pytest.approx(s["energy"]["total_j"], rel=1e-9)
    assert max(trace_w) <= watts.max()


def test_a_pool_changes_its_preset_by_hw_overrides():
    """A new user's trial: a pool on a spatial preset that needed a chip count was told `--set hw.spatial.chips=N`,
    which a disaggregated file refuses, and a pool had no way to change its preset. `hw_overrides` changes the
    pool's preset as --set hw.* changes --hw's, and the advice names it. A decode pool on an a6000 whose DRAM
    runs at half its 768 GB/s decodes slower (memory-bound steps), its prefill pool untouched."""
    slow = _file(n=2, decode="a6000")
    pools = slow.serving.disaggregated
    slow = slow.model_copy(update={"serving": slow.serving.model_copy(update={"disaggregated": pools.model_copy(
        update={"decode": pools.decode.model_copy(update={"hw_overrides": {"memory.@device.bandwidth_bytes_per_s": 384e9}})})})})
    _, plain = serve(_file(n=2, decode="a6000"), load_machine("h100_sxm"), cache=CACHE)
    _, halved = serve(slow, load_machine("h100_sxm"), cache=CACHE)
    assert halved["latency"]["tpot"]["mean"] > 1.6 * plain["latency"]["tpot"]["mean"]
    assert halved["latency"]["ttft"]["mean"] == pytest.approx(plain["latency"]["ttft"]["mean"], rel=1e-9)
    with pytest.raises(ConfigError, match=r"serving.disaggregated.decode.hw_overrides: \{spatial.chips: \d+\}"):
        serve(_file(n=1, decode="groq_lpu"), load_machine("h100_sxm"), cache=CACHE)


def test_a_prefill_pool_holds_the_kv_until_it_is_sent():
    """A serving researcher's trial: the prefill pool freed a request's KV at its first token, before the transfer,
    so at 1 GB/s 46 requests' KV (6x the pool) were "in flight" with the pool at 2% and TTFT unmoved. The blocks stay
    until the link has sent them: a 100-block pool holds three 528-token requests (33 blocks each); each transfer
    takes 512 x 524,288 B / 1 GB/s = 0.268 s, so the prefill pool waits on the link and TTFT grows with it."""
    def run(bandwidth):
        f = _file(n=12, rate=50.0, transfer={"bandwidth_bytes_per_s": bandwidth, "latency_s": 10e-6})
        sched = f.serving.scheduler.model_copy(update={"num_gpu_blocks_override": 100})
        f = f.model_copy(update={"serving": f.serving.model_copy(update={"scheduler": sched})})
        return serve(f, load_machine("h100_sxm"), cache=CACHE)
    (_, fast), (_, slow) = run(50e9), run(1e9)
    assert slow["completed"] == fast["completed"] == 12
    assert slow["latency"]["ttft"]["mean"] > 5 * fast["latency"]["ttft"]["mean"]
    # at 1 GB/s, 12 transfers one at a time take 12 x 0.268 s; the last first token waits for most of them
    assert slow["latency"]["ttft"]["max"] > 8 * 0.268


def _tp(f: ServeFile, **pools) -> ServeFile:
    d = f.serving.disaggregated
    upd = {k: getattr(d, k).model_copy(update={"parallel": {"tp": tp, "topology": "dgx_h100"}}) for k, tp in pools.items()}
    return f.model_copy(update={"serving": f.serving.model_copy(update={"disaggregated": d.model_copy(update=upd)})})


@pytest.mark.parametrize("pools, share", [({"prefill": 2}, 1.0), ({"prefill": 2, "decode": 2}, 0.5),
                                          ({"decode": 4}, 1.0)])
def test_tensor_parallel_pools_send_their_kv_shards_at_once(pools, share):
    """Each device of a TP pool holds 1/TP of llama2-7b's 32 KV heads and sends it over its own link (a
    serving researcher's trial: a TP 2 pool moved the whole KV over one link, 5.3787 ms). The busiest link
    carries the larger per-device share of the two sides: TP 2 to TP 2 halves it, 134,217,728 B over
    50 GB/s + 10 us = 2.6944 ms; TP 2 to one device (or one to TP 4) carries the whole KV at one end."""
    f = _tp(_file(decode="h100_sxm"), **pools)
    _, s = serve(f, load_machine("h100_sxm"), cache=CACHE)
    t = s["disaggregated"]["transfer"]
    assert t["bytes_mean"] == PROMPT * KV_PER_TOKEN   # the request's KV, all of it, moves
    assert t["time_mean_s"] == pytest.approx(10e-6 + share * PROMPT * KV_PER_TOKEN / 50e9, rel=1e-12)


def test_a_transfer_topology_neither_pool_runs_on_is_said():
    """dgx_h100's NVLink between an h100_sxm prefill pool and an a6000 decode pool (which has none) was priced
    without a word; both pools on h100_sxm need no note, and a plain link is never checked."""
    from sim.apps.serve.disagg import transfer_notes

    [note] = transfer_notes(_file(transfer={"topology": "dgx_h100"}))
    assert note == ("test.yaml: serving.disaggregated.transfer.topology: dgx_h100 links h100_sxm devices, but decode "
                    "runs on a6000: the KV transfer is priced at dgx_h100's send/recv all the same; give transfer: "
                    "{bandwidth_bytes_per_s, latency_s} for the link the pools share (PCIe, a NIC)")
    assert transfer_notes(_file(transfer={"topology": "dgx_h100"}, decode="h100_sxm")) == []
    assert transfer_notes(_file()) == []
    # Pools past one node (a parallelism trial: 2 x TP 4 prefill and 2 x TP 8 decode H100s, 24 devices, priced at
    # one NVLink hop): said, with the fabric link to give. 9 single-GPU prefill replicas and a decode one: 10 > 8.
    [big] = transfer_notes(_file(transfer={"topology": "dgx_h100"}, decode="h100_sxm", replicas=9))
    assert big.startswith("test.yaml: serving.disaggregated.transfer.topology: dgx_h100: the pools hold 10 devices, one "
                          "node of it 8: a transfer between replicas on two nodes crosses the fabric")
    # the plan is not checked yet when the notes are made: a value that is no whole number counts 1 (a review: `tp:
    # two` had raised int()'s ValueError, a traceback, before the plan's own one-line error)
    from sim.apps.serve.disagg_files import pool_devices

    pool = _file().serving.disaggregated.decode
    assert pool_devices(pool.model_copy(update={"parallel": {"tp": "two", "pp": 2, "topology": "dgx_h100"}})) == 2


def test_the_request_table_names_each_request_s_instances_and_transfer(tmp_path):
    """A serving researcher's trial: the per-request table could not be attributed to replicas or pools and
    dropped the transfer. Two prefill replicas round-robin (requests 0, 2, .. on prefill 0), one decode replica;
    each row's transfer is 512 x 524,288 B over 50 GB/s + 10 us, and its wait + time fit between its first
    token and its second."""
    from sim.apps.serve.output import request_table

    res, _ = serve(_file(n=4, rate=2.0, replicas=2), load_machine("a6000"), cache=CACHE)
    df = request_table(res)
    assert df["prefill_instance"].tolist() == ["prefill 0 (h100_sxm)", "prefill 1 (h100_sxm)"] * 2
    assert set(df["instance"]) == {"decode 0 (a6000)"}
    assert df["kv_transfer_s"].tolist() == pytest.approx([10e-6 + PROMPT * KV_PER_TOKEN / 50e9] * 4, rel=1e-12)
    assert (df["kv_transfer_wait_s"] >= 0).all() and (df["requested_output_tokens"] == OUT).all()


def test_pools_under_their_own_plans_need_no_file_level_plan():
    """A capacity planner's trial: two TP 4 pools of Llama-3-70B (141 GB of bf16 weights, 35 GB a device) with no
    file-level `parallel:` were refused as one TP 1 H100 ("no room for KV blocks"): the run's setup was sized on the
    prefill GPU under the file's plan, which the pools replace. Each pool's own plan sizes it now."""
    serving = dict(arrivals=dict(process="poisson", rate=4.0, num_requests=6, seed=0),
                   lengths=dict(prompt=dict(dist="fixed", value=256), output=dict(dist="fixed", value=8)),
                   scheduler=dict(kind="vllm", max_num_seqs=64, max_num_batched_tokens=8192),
                   disaggregated={k: dict(hw="h100_sxm", parallel=dict(tp=4, topology="dgx_h100"))
                                  for k in ("prefill", "decode")} | {"transfer": {"topology": "dgx_h100"}})
    f = validate_mapping(ServeFile, dict(name="t", model="llama3-70b", flash_attention=True, serving=serving),
                         "test.yaml", "a serving file")
    _, s = serve(f, load_machine("h100_sxm"), cache=CACHE)
    assert s["completed"] == 6


def test_a_pool_plan_is_told_at_its_own_key_and_a_file_plan_is_said_unread():
    """A capacity planner's trial: a file-level `parallel: {tp: 2}` beside pools without one was dropped in silence
    (the pools served on one GPU each); a pool plan without its topology was told as
    `serving.disaggregated.decode.hw: <file>: serving.disaggregated.decode.parallel: ...` (file twice, the wrong key);
    `micro_batches` in a pool's plan read "does not divide batch 1" where the file-level key is refused plainly."""
    from sim.apps.serve.disagg import pool_setup, unread_plan
    from sim.apps.serve.spec import serve_file_from_dict

    f = _file(decode="h100_sxm")
    assert unread_plan(f) == []
    planned = f.model_copy(update={"sections": {**f.sections, "parallel": {"tp": 2}}})
    [note] = unread_plan(planned)
    assert note.startswith("test.yaml: parallel: not read under serving.disaggregated")
    raw = dict(name="t", model="llama2-7b", serving=dict(
        arrivals=dict(process="poisson", rate=1.0, num_requests=2, seed=0),
        lengths=dict(prompt=dict(dist="fixed", value=64), output=dict(dist="fixed", value=4)),
        disaggregated=dict(prefill=dict(hw="h100_sxm"), decode=dict(hw="h100_sxm", parallel=dict(tp=2)),
                           transfer=dict(bandwidth_bytes_per_s=50e9))))
    with pytest.raises(ConfigError) as err:
        pool_setup(serve_file_from_dict(raw, "d.yaml"), "decode", False, None)
    assert str(err.value).startswith("d.yaml: serving.disaggregated.decode.parallel: parallel.topology: needed")
    raw["serving"]["disaggregated"]["decode"]["parallel"] = dict(tp=2, pp=2, micro_batches=4, topology="dgx_h100")
    with pytest.raises(ConfigError, match=r"^d\.yaml: serving\.disaggregated\.decode\.parallel\.micro_batches: 4: sim "
                                          r"serve cuts each iteration into pp micro-batches"):
        serve_file_from_dict(raw, "d.yaml")
    # A plan past its node (a parallelism trial): told at the pool's plan, with the pool's own nodes key to set, where
    # it read `decode.hw: ... more nodes: parallel.nodes: 2` (a key the file does not take)
    raw["serving"]["disaggregated"]["decode"]["parallel"] = dict(tp=16, topology="dgx_h100")
    with pytest.raises(ConfigError) as err:
        pool_setup(serve_file_from_dict(raw, "d.yaml"), "decode", False, None)
    assert str(err.value).startswith("d.yaml: serving.disaggregated.decode.parallel: ")
    assert str(err.value).endswith("more nodes: serving.disaggregated.decode.parallel.nodes: 2")


def test_a_disaggregated_run_holds_the_stack_s_request_delay():
    """The pools' router dropped the stack's per-request delay (vllm: 5.322 ms, hw_models/stack/presets/vllm.yaml)
    while the report said TTFT held it: one request now reaches the prefill engine no sooner than that after it was
    sent."""
    f = _file()
    staged = f.model_copy(update={"stack": "vllm", "sections": {**f.sections, "stack": "vllm"}})
    res, s = serve(staged, load_machine("a6000"), cache=CACHE)
    delay = s["request_delay_s"]
    assert delay == pytest.approx(5.322e-3, rel=1e-9)
    assert res.requests["scheduled_s"][0] - res.requests["arrival_s"][0] >= delay - 1e-12


def test_each_pool_takes_vllm_s_defaults_for_its_own_gpu():
    """vLLM's token budget and sequence cap follow the GPU (sim.apps.serve.engine_defaults: 8192 and 1024 on >= 70 GiB,
    else 2048 and 256); a disaggregated file's pools kept the small defaults on every GPU (a serving trial: an H100
    prefill pool at 2048 tokens an iteration). Each pool takes its own preset's now; a value the file sets is kept."""
    from sim.apps.serve.disagg import pool_setup
    from sim.apps.serve.spec import serve_file_from_dict

    raw = dict(name="t", model="llama2-7b", serving=dict(
        arrivals=dict(process="poisson", rate=1.0, num_requests=2, seed=0),
        lengths=dict(prompt=dict(dist="fixed", value=64), output=dict(dist="fixed", value=4)),
        disaggregated=dict(prefill=dict(hw="h100_sxm"), decode=dict(hw="a6000"),
                           transfer=dict(bandwidth_bytes_per_s=50e9))))
    got = {k: pool_setup(serve_file_from_dict(raw, "d.yaml"), k, False, None)[0].file.serving.scheduler
           for k in ("prefill", "decode")}
    assert (got["prefill"].max_num_batched_tokens, got["prefill"].max_num_seqs) == (8192, 1024)
    assert (got["decode"].max_num_batched_tokens, got["decode"].max_num_seqs) == (2048, 256)
    raw["serving"]["scheduler"] = dict(kind="vllm", max_num_batched_tokens=4096)
    pre = pool_setup(serve_file_from_dict(raw, "d.yaml"), "prefill", False, None)[0].file.serving.scheduler
    assert (pre.max_num_batched_tokens, pre.max_num_seqs) == (4096, 1024)


def test_speculative_decoding_in_pools_is_refused_before_a_pool_checks_its_draft():
    """A serving trial: a draft of another vocabulary in a disaggregated file was refused as
    `serving.disaggregated.prefill.parallel: serving.speculative.draft: ...`, a key the file never set, where the
    whole `serving.speculative` is not modelled with pools: that is said first, for the file's own key."""
    f = _file()
    raw = f.model_dump(mode="json", exclude={"source"}, exclude_none=True)
    raw["serving"]["speculative"] = {"draft": "tinyllama-1.1b", "k": 4, "alpha": 0.7}
    with pytest.raises(ConfigError, match=r"^test\.yaml: serving\.speculative: not modelled with serving\.disagg"):
        serve(validate_mapping(ServeFile, raw, "test.yaml", "a serving file"), load_machine("a6000"), cache=CACHE)


def test_a_pools_dp_is_refused_for_its_replicas():
    """`parallel: {tp: 4, dp: 2}` on a pool ran one instance without a word (a many-device trial); a pool's copies
    are its `replicas`."""
    from pydantic import ValidationError

    from sim.apps.serve.disagg_spec import Pool
    with pytest.raises(ValidationError, match=r"parallel.dp: 2: a pool's instances are its `replicas` \(replicas: 2\)"):
        Pool(hw="h100_sxm", parallel={"tp": 4, "dp": 2})
    with pytest.raises(ValidationError, match=r"\(replicas: 6\)"):   # each of its 3 replicas doubled
        Pool(hw="h100_sxm", replicas=3, parallel={"dp": 2})
    assert Pool(hw="h100_sxm", parallel={"tp": 4, "dp": 1}).replicas == 1

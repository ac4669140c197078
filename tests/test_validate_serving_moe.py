"""The silicon sample's MoE rows (Qwen3-235B-A22B-FP8 under TensorRT-LLM, MiniMax-M2.5 under vLLM): read with their
expert-parallel ways, their checkpoints' block-FP8 weights and 16-bit router and LM head, and replayed so."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from hw_models.machine import load_machine
from sim.apps.cli import main
from sim.apps.serve.overhead_fit import in_training
from sim.apps.serve.serving_mapper import serving_mapper
from sim.apps.serve.validate import Run, machine_loader, run_file, simulate
from sim.apps.serve.validate_readers import read_silicon

QWEN = "Qwen/Qwen3-235B-A22B-FP8"
ROW = dict(id="m1", backend="trtllm", model_path=QWEN, system="h100_sxm", mode="agg", isl=512, osl=128,
           gemm_quant_mode="fp8_block", moe_quant_mode="fp8_block", batch_size=8, tp_size=8, pp_size=1,
           attention_dp_size=None, moe_tp_size=1, moe_ep_size=8, silicon_ttft_ms=190.0, silicon_tpot_ms=13.0)


def test_moe_rows_carry_their_expert_ways_and_the_checkpoints_block_format(tmp_path):
    rows = [ROW,
            # the same checkpoint, labelled fp8 by a later collection (TensorRT-LLM 1.2): its weights are still blocks
            {**ROW, "id": "m2", "gemm_quant_mode": "fp8", "tp_size": 4, "moe_ep_size": 4},
            {**ROW, "id": "m3", "tp_size": 4, "moe_tp_size": 2, "moe_ep_size": 2},
            # a dense model's moe_ep_size means nothing: one way
            {**ROW, "id": "d1", "model_path": "Qwen/Qwen3-32B", "gemm_quant_mode": "fp8", "moe_ep_size": 8}]
    path = tmp_path / "s.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    runs, skipped = read_silicon(path, {"h100_sxm"})
    got = {r.name: (r.tp, r.ep, r.quant) for r in runs}
    assert got == {"m1": (8, 8, "fp8_block"), "m2": (4, 4, "fp8_block"), "d1": (8, 1, "fp8")}
    assert dict(skipped)["m3"].startswith("experts split by tensor parallelism (moe_tp_size 2)")


def test_gpt_oss_rows_run_the_checkpoints_mxfp4_experts_split_over_the_tp_group(tmp_path):
    """gpt-oss-120b's vLLM rows are labelled nvfp4, but its checkpoint stores the routed experts in MXFP4 and the rest
    in bf16: the replay serves that, whatever the label; vLLM without expert parallelism splits each expert over the
    TP group (moe_tp_size = tp_size, moe_ep_size 1: parallel.ep 1). Other engines' MXFP4 experts have no family."""
    oss = dict(ROW, model_path="openai/gpt-oss-120b", backend="vllm", gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4",
               tp_size=4, moe_tp_size=4, moe_ep_size=1)
    path = tmp_path / "s.csv"
    pd.DataFrame([{**oss, "id": "g1"}, {**oss, "id": "g2", "backend": "trtllm", "gemm_quant_mode": "fp8"},
                  {**oss, "id": "g3", "moe_tp_size": 2, "moe_ep_size": 2}]).to_csv(path, index=False)
    runs, skipped = read_silicon(path, {"h100_sxm"})
    assert [(r.name, r.tp, r.ep, r.quant) for r in runs] == [("g1", 4, 1, "mxfp4")]
    assert dict(skipped)["g2"].startswith("trtllm's mxfp4 experts: no kernel family here")
    assert dict(skipped)["g3"].startswith("experts split by tensor parallelism (moe_tp_size 2)")
    f = run_file(runs[0])
    policy = f.formats.policy()
    assert [policy.weight_format(op) for op in ("L0.router", "lm_head", "L0.qkv_proj", "L1.expert_up", "L35.expert_down")] \
        == ["bf16", "bf16", "bf16", "mxfp4", "mxfp4"] and f.formats.kv_cache == "bf16"
    assert (f.sections["parallel"]["tp"], f.sections["parallel"]["ep"]) == (4, 1)
    assert f.model_config_().num_experts == 128


def test_a_moe_replay_has_the_model_card_size_ep_devices_and_a_16_bit_router():
    f = run_file(Run("m", "h100_sxm", "trtllm", QWEN, 512, 128, 8, tp=8, quant="fp8_block", ep=8))
    model = f.model_config_()
    # Qwen3-235B-A22B model card: 235B parameters in all, 22B active per token.
    assert model.params() / 1e9 == pytest.approx(235.1, abs=0.1)
    assert model.params(active=True) / 1e9 == pytest.approx(22.2, abs=0.1)
    assert f.sections["parallel"]["ep"] == 8
    assert serving_mapper(load_machine("h100_sxm"), f, model).devices == 8
    policy = f.formats.policy()
    assert [policy.weight_format(op) for op in ("L0.router", "lm_head", "L0.expert_up", "L0.qkv_proj")] == \
        ["bf16", "bf16", "fp8_block128", "fp8_block128"]
    # The checkpoint names no KV quantization: TensorRT-LLM's `auto` keeps bf16, where a ModelOpt FP8 one is FP8.
    assert f.formats.kv_cache == "bf16"
    dense = run_file(Run("d", "h100_sxm", "trtllm", "Qwen/Qwen3-32B", 512, 128, 8, quant="fp8"))
    assert dense.formats.kv_cache == "fp8_e4m3" and not dense.formats.overrides


def test_a_moe_run_replays_and_more_expert_ways_cut_its_decode_time():
    """Spreading the experts over twice the devices (and TP over them) cannot make the memory-bound decode slower."""
    runs = [Run(f"ep{n}", "h100_sxm", "trtllm", QWEN, 128, 16, 2, tp=n, quant="fp8_block", ep=n,
                measured={"ttft_s": 0.1, "tpot_s": 0.01}) for n in (4, 8)]
    results, failed = simulate(runs, machine_loader(), requests_per_client=2)
    assert not failed
    tpot = {r.run.name: r.sim["tpot_s"] for r in results}
    assert 0 < tpot["ep8"] < tpot["ep4"]


def test_measured_qwen3_235b_rows_replay_within_the_documented_band(shared_validation):
    """Four of the silicon sample's Qwen3-235B-A22B-FP8 rows at low load (1024 x 128, 4 and 8 clients, TP/EP 4 and 8;
    none fitted on: the engine terms predate the MoE rows). docs/serving.md ("MoE rows") reports TPOT MAPE 9.5% over
    all 125 rows, -16% at worst in this slice: each TPOT within 20%, their E2E MAPE within 15%."""
    runs, _ = read_silicon(shared_validation / "aic" / "silicon_sample_h100.csv.gz", {"h100_sxm"})
    pick = [r for r in runs if r.model == QWEN and (r.isl, r.osl) == (1024, 128) and r.concurrency in (4, 8)]
    assert sorted((r.tp, r.ep, r.concurrency) for r in pick) == [(4, 4, 4), (4, 4, 8), (8, 8, 4), (8, 8, 8)]
    results, failed = simulate(pick, machine_loader(), jobs=2)
    assert not failed
    tpot = [r.error["tpot_s"] for r in results]
    assert max(map(abs, tpot)) < 0.20, tpot
    assert sum(abs(r.error["e2e_s"]) for r in results) / len(results) < 0.15


def test_a_moe_benchmark_json_replays_its_checkpoint_at_the_given_layout(tmp_path):
    """A user's own vLLM run of the block-FP8 checkpoint: --tp/--ep give the layout, the checkpoint its weights."""
    path, out = tmp_path / "r.json", tmp_path / "o.json"
    path.write_text(json.dumps({"model_id": QWEN, "max_concurrency": 2, "input_lens": [100, 200, 300],
                                "output_lens": [10, 30, 50], "errors": ["", "", ""], "mean_ttft_ms": 150.0,
                                "mean_tpot_ms": 12.0}))
    assert main(["validate-serving", str(path), "--hw", "h100_sxm", "--engine", "vllm", "--tp", "8", "--ep", "8",
                 "--json", str(out), "--workers", "1", "-q"]) == 0
    run = json.loads(out.read_text())["runs"][0]
    assert (run["tp"], run["ep"], run["quant"]) == (8, 8, "fp8_block") and run["sim"]["tpot_s"] > 0


def test_hostile_layout_cells_skip_the_row_with_their_reason(tmp_path):
    """A MoE row's expert ways must be whole and multiply with moe_tp_size to tp_size (the engines' layout); a row
    that says otherwise was replayed as something else (an empty or bad moe_ep_size as ep 1, 8 ways on 4 GPUs as
    attention groups, 4.5 as 4)."""
    bad = {"e_empty": dict(moe_ep_size=None), "e_zero": dict(moe_ep_size=0), "e_text": dict(moe_ep_size="four"),
           "e_frac": dict(moe_ep_size=4.5), "e_over": dict(moe_ep_size=16), "e_under": dict(moe_ep_size=4),
           "t_frac": dict(tp_size=8.5), "b_frac": dict(batch_size=2.5), "m_frac": dict(moe_tp_size=1.5),
           "m_text": dict(moe_tp_size="two"), "q_w4": dict(moe_quant_mode="w4afp8")}
    rows = [{**ROW, "id": "ok", "moe_tp_size": None}] + [{**ROW, "id": k, **v} for k, v in bad.items()]
    path = tmp_path / "s.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    runs, skipped = read_silicon(path, {"h100_sxm"})
    assert [(r.name, r.tp, r.ep) for r in runs] == [("ok", 8, 8)]     # an empty moe_tp_size is 1
    why = dict(skipped)
    assert set(why) == set(bad)
    assert "moe_ep_size 16 x moe_tp_size 1 is not tp_size 8" in why["e_over"]
    assert "moe_ep_size 4 x moe_tp_size 1 is not tp_size 8" in why["e_under"]
    assert all("a MoE row needs whole, positive ways" in why[k] for k in ("e_empty", "e_zero", "e_text", "e_frac",
                                                                          "m_frac", "m_text"))
    assert "not whole numbers" in why["t_frac"] and "not whole numbers" in why["b_frac"]
    assert why["q_w4"] == "quantization w4afp8 not replayed (GEMM or MoE)"


def test_a_table_without_the_optional_columns_reads_them_as_empty(tmp_path, capsys):
    """pp_size, attention_dp_size, the MoE columns and the quantization ones may be absent (a traceback each before);
    id is required, and a table without it is named as not a silicon table, with the columns it needs."""
    dense = {k: v for k, v in ROW.items() if k not in ("pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size",
                                                      "gemm_quant_mode", "moe_quant_mode")}
    path = tmp_path / "s.csv"
    pd.DataFrame([{**dense, "model_path": "Qwen/Qwen3-32B"}]).to_csv(path, index=False)
    runs, skipped = read_silicon(path, {"h100_sxm"})
    assert [(r.tp, r.ep, r.quant) for r in runs] == [(8, 1, None)] and not skipped
    pd.DataFrame([{**dense, "model_path": QWEN}]).to_csv(path, index=False)   # a MoE row without its ways: skipped
    assert "a MoE row needs whole, positive ways" in dict(read_silicon(path, {"h100_sxm"})[1])["m1"]
    assert main(["validate-serving", str(path), "--hw", "h100_sxm"]) == 2
    err = capsys.readouterr().err
    assert "1 row(s) skipped: 1 x moe_ep_size" in err and "\n" not in err.strip()
    pd.DataFrame([{k: v for k, v in dense.items() if k != "id"}]).to_csv(path, index=False)
    assert main(["validate-serving", str(path), "--hw", "h100_sxm"]) == 2
    assert "expected columns backend, batch_size, id," in capsys.readouterr().err


def test_the_run_table_shows_the_expert_ways_and_held_out_counts_what_it_left_out(tmp_path, capsys):
    rows = [{**ROW, "id": f"m{i}", "isl": 128, "osl": 8, "batch_size": 2, "silicon_ttft_ms": 150.0 + i} for i in range(6)]
    path = tmp_path / "s.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert main(["validate-serving", str(path), "--hw", "h100_sxm", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "| TP (/EP) |" in out and "| 8/8 |" in out
    fitted = sum(in_training(r["id"]) for r in rows)
    assert 0 < fitted < len(rows)   # the ids straddle the hash's halves
    assert main(["validate-serving", str(path), "--hw", "h100_sxm", "--workers", "1", "--held-out", "--summary"]) == 0
    assert f"{fitted} rows of the fit's training half left out (--held-out)" in capsys.readouterr().out


def test_multi_gpu_rows_of_b200_and_rtx_pro_6000_have_their_node():
    for gpu, node in (("b200_sxm", "hgx_b200"), ("rtx_pro_6000", "rtx_pro_6000_x8_pcie")):
        f = run_file(Run("d", gpu, "vllm", "Qwen/Qwen3-32B", 512, 16, 4, tp=2))
        assert f.sections["parallel"]["topology"] == node

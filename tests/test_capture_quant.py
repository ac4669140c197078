"""capture_trace --weights (issue 28): quantized projections in the captured model, the meta.json that says so, and
the simulator reading it back (embed and lm_head stay in dtype); measure_decode_power's dry run on the CPU."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_capture import _load_script  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# K of every projection a multiple of tinygemm's group of 128
QUANT_TINY = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64}


def _relative_error(linear, w, x) -> float:
    ref = x.float() @ w.float().t()
    return float((linear(x).float() - ref).norm() / ref.norm())


def test_quantized_linears_quantize():
    """Output error against the bf16 product, for uniform weights and normal activations:
    * FP8 W8A8: the weight and the activation each rounded to e4m3 (3 mantissa bits, relative rounding error at
      most 2^-4 each): at most 2 x 2^-4, and far above bf16's own 2^-9 (the product really went through e4m3);
    * int4 W4A16: 16 levels over each group's range, so the weight error's RMS is step / sqrt(12) of a uniform
      weight whose RMS is range / sqrt(12): 1/15 = 6.7% relative; allowed 3-8%."""
    mod = _load_script()
    gen = torch.Generator().manual_seed(0)
    w = ((torch.rand(256, 512, generator=gen) * 2 - 1) / 22).to(torch.bfloat16)
    x = torch.randn(4, 512, generator=gen).to(torch.bfloat16)
    fp8 = _relative_error(mod.Fp8Linear(w), w, x)
    int4 = _relative_error(mod.Int4Linear(w), w, x)
    assert 2 ** -9 < fp8 < 2 * 2 ** -4
    assert 0.03 < int4 < 0.08


@pytest.mark.parametrize("weights", ["fp8_e4m3", "int4"])
def test_capture_quantized_is_read_back(tmp_path, weights):
    """The meta names the projections' format; the simulator lowers the projections in it, embed and lm_head in
    the capture's dtype."""
    from sim.apps.trace.parser import load_trace
    from sim.apps.trace.shapes import step_graph

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(QUANT_TINY))
    out = _load_script().main(["--model", str(cfg), "--prompt", "4", "--decode-steps", "1", "--threads", "1",
                               "--dtype", "bf16", "--weights", weights, "--flash", "--no-trace",
                               "--out", str(tmp_path / "run")])
    meta = json.loads(out["meta"].read_text())
    assert meta["weights"] == weights and meta["dtype"] == "bf16"
    with open(out["ops"], newline="") as fh:
        assert {r["op"] for r in csv.DictReader(fh)} >= {"L0.q_proj", "L0.down_proj", "lm_head"}
    trace = load_trace(out["ops"])[0]
    assert trace.weights == weights
    graph = step_graph(trace, trace.steps[1])
    weight_fmt = {op.name: next(t.fmt for t in op.reads if t.role == "weight") for op in graph.ops()
                  if any(t.role == "weight" and len(t.shape) > 1 for t in op.reads)}
    assert weight_fmt["L0.q_proj"] == weight_fmt["L0.down_proj"] == weights
    assert weight_fmt["lm_head"] == weight_fmt["embed"] == "bf16"


def test_weights_need_bf16(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        _load_script().parse_args(["--model", "llama2-7b", "--weights", "int4", "--dtype", "fp16"])
    assert exc.value.code == 2
    assert "--weights int4 needs --dtype bf16" in capsys.readouterr().err


def test_a_meta_naming_an_unknown_weight_format_is_one_line(tmp_path):
    from sim.apps.trace.parser import load_trace
    from sim.core.errors import ConfigError

    src = ROOT / "traces" / "h200" / "quant" / "llama2-7b_L4_bf16-wint4_b1_p1024_d8_cuda_flash"
    meta = json.loads(Path(f"{src}.meta.json").read_text())
    meta["weights"] = "int3"
    (tmp_path / "run.meta.json").write_text(json.dumps(meta))
    (tmp_path / "run.ops.csv").write_text(Path(f"{src}.ops.csv").read_text())
    with pytest.raises(ConfigError, match=r"run.ops.csv: weights in its .meta.json: .*int3"):
        load_trace(tmp_path / "run.ops.csv")


def test_measure_decode_power_dry_run(tmp_path, monkeypatch):
    """Without a GPU the script runs the cases eagerly and writes their times (no power, no graph)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("measure_decode_power", ROOT / "scripts" / "measure_decode_power.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)   # its dataclass resolves its module by name
    spec.loader.exec_module(mod)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(QUANT_TINY))
    out = tmp_path / "p.json"
    result = mod.main(["--model", str(cfg), "--device", "cpu", "--out", str(out),
                       "--case", "decode:int4:2:8", "--case", "prefill:bf16:1:8"])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert [c["case"] for c in result["cases"]] == ["decode:int4:2:8", "prefill:bf16:1:8"]
    assert all(c["step_s"] > 0 and not c["graph"] for c in result["cases"])
    with pytest.raises(Exception, match="PHASE:FORMAT:BATCH:TOKENS"):
        mod.parse_case("decode:bf16:8")
    with pytest.raises(Exception, match="format must be bf16"):
        mod.parse_case("decode:int3:8:512")


@pytest.mark.parametrize("fmt, family, worst", [("fp8_e4m3", "fp8_scaled_mm", 0.04), ("int4", "tinygemm", 0.02)])
def test_torch_quant_families_are_the_fit_of_the_captures(fmt, family, worst):
    """kernel_families.yaml's floor and weight stream of the torch families are scripts/fit_torch_quant.py's output
    on the committed captures, and fit their seven projections within what it reports (FP8 3.2%: down_proj's split-K
    reduction, which the family does not model, is the worst at ~10%; int4 0.5%)."""
    import importlib.util
    from hw_models.stack.kernel_families import families
    spec = importlib.util.spec_from_file_location("fit_torch_quant", ROOT / "scripts" / "fit_torch_quant.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    floor, eff, err = mod.fit(fmt)
    fam = families()[family]
    assert (fam.floor_s, fam.weight_stream_efficiency) == (floor, eff)
    assert err < worst


def test_h200_batch1_quantized_decode_within_the_issues_8pct():
    """Issue 28's target on the H200's own measurement, held out (scripts/validation_h200_graph.py): whole Llama-2-7B
    and -13B decode steps at batch 1 with FP8 (W8A8) and int4 (W4A16) weights, replayed from a CUDA graph, against
    the h200 preset under torch-cudagraph: each within 8% (measured at this commit: -3.7, -1.3, -1.1, -4.8%)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("validation_h200_graph", ROOT / "scripts" / "validation_h200_graph.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = {k: c for k, c in mod.cases("steps").items()
            if c["phase"] == "decode" and c["batch"] == 1 and c["weights"] != "bf16"}
    assert len(rows) == 4
    for (model, _), c in rows.items():
        sim_s, _ = mod.simulated(model, c)
        assert abs(sim_s / c["step_s"] - 1) < 0.08, (model, c["case"], sim_s, c["step_s"])


def test_measure_power_micro_dry_run(tmp_path, monkeypatch):
    """The power microbenchmark's CPU dry run (small buffers): every case runs once, and each case's bytes and FLOPs
    per call are the hand counts its power fit divides by: a 256-square bf16 GEMV streams 2 x 256^2 B of weights and
    does 2 x 256^2 FLOPs, its FP8 twin half the bytes; a 256-cubed GEMM 2 x 256^3 FLOPs; the L2 copy no DRAM bytes."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("measure_power_micro", ROOT / "scripts" / "measure_power_micro.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)   # its dataclass resolves its module by name
    spec.loader.exec_module(mod)
    out = tmp_path / "p.json"
    result = mod.main(["--device", "cpu", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    c = result["cases"]
    assert set(c) == {"l2_copy", "hbm_copy", "hbm_read", "gemv_bf16", "gemv_fp8", "gemm_bf16", "gemm_fp8"}
    assert all("error" not in r and r["call_s"] > 0 for r in c.values()), c
    assert c["gemv_bf16"]["dram_bytes"] == 2 * 256 ** 2 == 2 * c["gemv_fp8"]["dram_bytes"]
    assert c["gemv_bf16"]["flops"] == c["gemv_fp8"]["flops"] == 2 * 256 ** 2
    assert c["gemm_bf16"]["flops"] == c["gemm_fp8"]["flops"] == 2 * 256 ** 3
    assert c["l2_copy"]["dram_bytes"] == 0 and c["hbm_copy"]["dram_bytes"] == 2 * 2 ** 20
    with pytest.raises(SystemExit, match="unknown case 'nope'"):
        mod.main(["--device", "cpu", "--out", str(tmp_path / "q.json"), "--only", "nope"])


@pytest.mark.parametrize("argv, line", [
    (["--model", "nonexist"], "capture_trace: error: --model unknown model 'nonexist'; presets: "),
    (["--model", "tinyllama-1.1b", "--layers", "0"], "capture_trace: error: --layers must be in 1..22"),
])
def test_a_users_mistake_is_one_line_and_status_2(tmp_path, capsys, argv, line):
    """An unknown --model printed a traceback, and --layers 0 exited 1 where argparse's refusals exit 2 (a trial)."""
    pytest.importorskip("torch")
    with pytest.raises(SystemExit) as exc:
        _load_script().main([*argv, "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(line)

"""scripts/capture_trace.py on a tiny inline LLaMA config: files, op names, counts."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "capture_trace.py"
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64}
PER_LAYER = ["attn_norm", "q_proj", "k_proj", "v_proj", "rope", "kv_append", "qk", "softmax", "av",
             "o_proj", "attn_residual", "mlp_norm", "gate_proj", "up_proj", "act", "down_proj", "mlp_residual"]
META_KEYS = {"device", "device_name", "cuda_version", "driver_version", "torch_version", "cpu_model", "threads",
             "dtype", "model", "layers", "batch", "prompt", "decode_steps", "date"}


def _load_script():
    spec = importlib.util.spec_from_file_location("capture_trace", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _capture(tmp_path, *extra):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    mod = _load_script()
    threads = torch.get_num_threads()
    try:
        return mod.main(["--model", str(cfg), "--batch", "2", "--prompt", "5", "--decode-steps", "2",
                         "--threads", "1", "--out", str(tmp_path / "run"), *extra])
    finally:
        torch.set_num_threads(threads)


def test_capture_tiny(tmp_path):
    out = _capture(tmp_path)
    steps, layers = 3, 2  # one prefill + 2 decode steps
    expected = ["embed"] + [f"L{i}.{o}" for i in range(layers) for o in PER_LAYER] + ["final_norm", "lm_head"]
    assert len(expected) == layers * 17 + 3

    trace = tmp_path / "run.trace.json.gz"
    assert out["trace"] == trace and trace.exists()
    with gzip.open(trace, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    names = Counter(e.get("name") for e in events if e.get("ph") == "X")
    for name in expected:
        assert names[name] == steps, (name, names[name])
    assert names["step0.prefill"] == 1 and names["step1.decode"] == 1 and names["step2.decode"] == 1
    assert names["step3.decode"] == 0

    meta = json.loads((tmp_path / "run.meta.json").read_text())
    assert META_KEYS <= set(meta)
    assert meta["model"]["hidden_size"] == 64 and meta["model"]["num_kv_heads"] == 2
    assert (meta["layers"], meta["batch"], meta["prompt"], meta["decode_steps"]) == (2, 2, 5, 2)
    assert meta["device"] == "cpu" and meta["threads"] == 1 and meta["dtype"] == "fp32"

    with open(tmp_path / "run.ops.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["step", "phase", "op", "layer", "cpu_time_us", "device_time_us", "batch", "q_len",
                             "kv_len"]
    assert len(rows) == steps * len(expected)
    for j in range(steps):
        got = [r for r in rows if int(r["step"]) == j]
        assert [r["op"] for r in got] == expected  # one row per op, in execution order
        phase, q_len, kv_len = ("prefill", 5, 5) if j == 0 else ("decode", 1, 5 + j)
        assert {(r["phase"], int(r["batch"]), int(r["q_len"]), int(r["kv_len"])) for r in got} == \
            {(phase, 2, q_len, kv_len)}
        assert all(float(r["cpu_time_us"]) > 0 for r in got)
        assert {r["layer"] for r in got if r["op"].startswith("L1.")} == {"1"}
        assert {r["layer"] for r in got if not r["op"].startswith("L")} == {""}
    from sim.core.lowering import lower
    from sim.core.model import load_model
    graph = lower(load_model(dict(TINY)), "decode", 2, 1, 7)
    assert sorted(expected) == sorted(op.name for op in graph.ops())


def test_capture_flash_matches_lowering(tmp_path):
    """--flash: one `attention` op per layer, and the op names match sim.core.lowering's graph."""
    from sim.core.lowering import lower
    from sim.core.model import load_model

    _capture(tmp_path, "--flash", "--no-trace", "--dtype", "bf16")
    with open(tmp_path / "run.ops.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    model = load_model(dict(TINY))
    for j, (phase, q_len, kv_len) in enumerate([("prefill", 5, 5), ("decode", 1, 6), ("decode", 1, 7)]):
        graph = lower(model, phase, 2, q_len, kv_len, flash_attention=True)
        ops = [r["op"] for r in rows if int(r["step"]) == j]
        assert sorted(ops) == sorted(op.name for op in graph.ops())
        assert sum(o.endswith(".attention") for o in ops) == 2
        assert not any(o.endswith((".qk", ".softmax", ".av")) for o in ops)


def test_output_paths(tmp_path):
    mod = _load_script()
    assert mod.output_paths(str(tmp_path / "a.json.gz"), "n", "cpu") == (tmp_path / "a", tmp_path / "a.json.gz")
    assert mod.output_paths(str(tmp_path / "a.trace.json.gz"), "n", "cpu") == \
        (tmp_path / "a", tmp_path / "a.trace.json.gz")
    assert mod.output_paths(str(tmp_path), "n", "cpu") == (tmp_path / "n", tmp_path / "n.trace.json.gz")
    assert mod.output_paths(str(tmp_path / "p"), "n", "cpu") == (tmp_path / "p", tmp_path / "p.trace.json.gz")
    assert mod.expected_ops(1, flash=True)[1:-2] == [f"L0.{o}" for o in mod.FLASH_LAYER_OPS]
    assert len(mod.expected_ops(3)) == 3 * 17 + 3

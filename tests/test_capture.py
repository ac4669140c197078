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


def test_capture_carries_no_machine_path(tmp_path):
    """Issue 18: two captures of the same run into different directories. The
    trace bytes name no directory of this machine, and the meta files differ
    only in the fields documented as varying (date, load average, timings)."""
    from sim.apps.trace.scrub import VARYING_META_FIELDS

    mod = _load_script()
    cfg = tmp_path / "cfg" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(dict(TINY, name="tiny")))
    metas = []
    threads = torch.get_num_threads()
    try:
        for d in ("first_capture_dir", "second_capture_dir"):
            (tmp_path / d).mkdir()
            out = mod.main(["--model", str(cfg), "--batch", "1", "--prompt", "3", "--decode-steps", "1",
                            "--threads", "1", "--out", str(tmp_path / d) + "/"])
            raw = gzip.decompress(out["trace"].read_bytes())
            for name in (tmp_path.name, d, "cfg", "tmp"):
                assert ("/" + name).encode() not in raw, name
            assert json.loads(raw)["traceName"] == out["trace"].name[: -len(".gz")]
            assert b'"host_name"' not in raw
            gz = out["trace"].read_bytes()
            assert gz[4:8] == b"\0\0\0\0" and gz[3] & 0x08 == 0  # gzip header: mtime 0, no file name
            meta_text = out["meta"].read_text()
            assert str(tmp_path) not in meta_text and "/tmp" not in meta_text
            metas.append(json.loads(meta_text))
    finally:
        torch.set_num_threads(threads)
    a, b = metas
    assert a["argv"][a["argv"].index("--model") + 1] == "config.json"
    assert a["argv"][a["argv"].index("--out") + 1] == "first_capture_dir/"
    assert b["argv"][b["argv"].index("--out") + 1] == "second_capture_dir/"
    a["argv"] = b["argv"] = None  # the --out directory names differ by construction of this test
    differ = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    assert differ <= set(VARYING_META_FIELDS), differ
    assert [(s["step"], s["phase"]) for s in a["steps"]] == [(s["step"], s["phase"]) for s in b["steps"]]


def test_scrub_rewrites_old_captures(tmp_path):
    """scripts/scrub_trace.py on a trace and meta file in the old form: traceName and
    host_name fixed, argv made portable, trace events untouched; a second run changes nothing."""
    from sim.apps.trace.scrub import scrub_chrome_text, scrub_meta_file, scrub_trace_file

    events = [{"ph": "X", "name": "embed", "ts": 1.5, "dur": 2, "pid": 7, "tid": 7,
               "args": {"note": "/work/x/\"traceName\": \"keep\""}}]
    body = json.dumps({"traceEvents": events}, indent=1)[1:-1]
    old = ('{\n  "schemaVersion": 1,\n  "host_name": "vm",\n' + body
           + ',"traceName": "/home/someone/repo/traces/cpu/tmp_ab12.json" }').encode()
    trace = tmp_path / "run.trace.json.gz"
    trace.write_bytes(gzip.compress(old))
    assert scrub_trace_file(trace)
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    assert doc["traceName"] == "run.trace.json" and "host_name" not in doc and doc["traceEvents"] == events
    assert not scrub_trace_file(trace)
    with pytest.raises(ValueError):
        scrub_chrome_text(b'{"hello": 1}', "x")
    meta = tmp_path / "run.meta.json"
    root = Path(__file__).resolve().parent.parent
    meta.write_text(json.dumps({"argv": ["--model", "/abs/elsewhere/config.json", "--batch", "2", "--out",
                                         str(root / "traces" / "cpu") + "/"], "date": "d"}))
    assert scrub_meta_file(meta, root)
    assert json.loads(meta.read_text())["argv"] == ["--model", "config.json", "--batch", "2", "--out", "traces/cpu/"]
    assert not scrub_meta_file(meta, root)

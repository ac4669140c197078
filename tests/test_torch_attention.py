"""PyTorch's SDPA decode on the H200 (issue 28): cuDNN's fused flash kernel as a measured attention family
(`torch_cudnn_sdpa`, hw_models/stack/attention_kernels_torch.yaml, scripts/fit_torch_attention.py), the split rule
read off the kernels this project's captures recorded, and the tier's datasheet peak as the cap of a fitted stream."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from hw_models.machine import Tier, load_machine
from hw_models.stack.attention_kernels import Decode, attention_cost, attention_families
from hw_models.stack.spec import load_stack
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import load_model

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import fit_torch_attention as fit  # noqa: E402


def _decode_op(model: str, batch: int, kv_len: int):
    return lower(load_model(model), "decode", batch, 1, kv_len, FormatPolicy("bf16", "bf16", "bf16"), True, 1).op("L0.attention")


def _h200_cost(op, machine: str = "h200"):
    m = load_machine(machine)
    u = m.units[m.main_unit]
    return attention_cost(op, u, m.main_unit, m.memory[u.memory], "torch_cudnn_sdpa")


def test_decode_by_hand_on_the_h200():
    """Llama-2-7B (32 heads, 32 KV heads, head_dim 128), 4096 cached tokens. Batch 1: 32 pairs, 2 x 32 = 64 <= 132
    SMs and >= 1024 tokens, so the call splits and pays the merge: fixed + KV / (4.13 TB/s x memory_max 1.0 x
    efficiency) + combine, KV = 4096 x 2 (K, V) x 32 x 128 x 2 B = 67.1 MB. Batch 4: 128 pairs, 256 > 132: no merge."""
    d = attention_families()["torch_cudnn_sdpa"].decode["bf16"]
    for batch, merge in ((1, d.combine_s), (4, 0.0)):
        kv = batch * 4096 * 2 * 32 * 128 * 2
        c = _h200_cost(_decode_op("llama2-7b", batch, 4096))
        assert c.duration_s == pytest.approx(d.fixed_s + kv / (4.13e12 * d.kv_stream_efficiency) + merge, rel=1e-9)
    # the shipped figures (the fit's, test_the_shipped_file_is_the_fit): a merge of ~2-3 us, a stream 1.10 x the
    # preset's 4.13 TB/s (4.55 TB/s: below the 4.8 TB/s datasheet peak that caps it), a fixed cost of ~6.5 us
    assert 2e-6 < d.combine_s < 3e-6 and 1.05 < d.kv_stream_efficiency < 1.15 and 6e-6 < d.fixed_s < 7e-6


def test_the_split_rule_matches_every_measured_call():
    """cuDNN adds its lean_reduction kernel exactly where 2 x (sequence, KV head) pairs fit the 132 SMs and the cache
    holds >= 1024 tokens: every row of the H200 SDPA sweep (kernels per call) and every flash capture of traces/h200
    (a reduction kernel per decode call or none)."""
    d = attention_families()["torch_cudnn_sdpa"].decode["bf16"]
    for r in fit.rows():
        split = d.launch(r["batch"], r["heads"], r["kv_heads"], 132, r["kv_len"])[1] > 1
        assert split == (r["kernels_per_call"] == 2), r
    for path in fit.CAPTURES:
        meta = json.loads(Path(str(path).replace(".trace.json.gz", ".meta.json")).read_text())
        args = dict(zip(meta["argv"][::2], meta["argv"][1::2]))
        model = load_model(args["--model"])
        with gzip.open(path, "rt") as f:
            reductions = f.read().count("lean_reduction_kernel")
        split = d.launch(int(args["--batch"]), model.num_heads, model.num_kv_heads, 132,
                         int(args["--prompt"]))[1] > 1
        assert split == (reductions > 0), path.name


def test_never_faster_with_more_work():
    c = [_h200_cost(_decode_op("llama2-7b", b, kv)).duration_s for b in (1, 2, 4, 16) for kv in (256, 1024, 4096)]
    by_batch = [c[i::3] for i in range(3)]
    assert all(x <= y for row in by_batch for x, y in zip(row, row[1:]))
    assert all(c[i] <= c[i + 1] for i in range(0, len(c), 3)) and all(c[i + 1] <= c[i + 2] for i in range(0, len(c), 3))


def test_the_shipped_file_is_the_fit():
    """scripts/fit_torch_attention.py --check: the shipped file is the script's output on the committed sweep."""
    assert fit.MEASURED_FILE.read_text() == fit.render(fit.fit())


def test_torch_stacks_run_it_on_sm90_only():
    for stack in ("torch-eager", "torch-cudagraph"):
        s = load_stack(stack)
        assert s.attention_family(9.0, "bf16") == "torch_cudnn_sdpa"
        assert s.attention_family(8.6, "bf16") is None and s.attention_family(9.0, "fp8_e4m3") is None
    # the A6000 (SM 8.6) keeps the roofline: attention_cost is never asked, the stack names no family there


def test_held_out_captures_decode_attention_within_the_issue_target():
    """Issue 28: decode attention <= 12%. The six flash captures (torch eager, kernel device times) are held out: the
    family is fitted on the sweep alone. Before it (the roofline): 17.0% MAPE, batch 1 -22%."""
    errs = [e for _, es in fit.held_out() for e in es]
    assert len(errs) == 176
    assert sum(abs(e) for e in errs) / len(errs) < 0.12


def test_a_fitted_stream_is_capped_at_the_tier_peak():
    """A family's KV stream may beat the tier's (measured) bandwidth x memory_max up to the datasheet peak: 1 GB at
    1.5 x 1 TB/s would take 667 us, the 1.2 TB/s peak caps it at 833 us; a tier without a peak caps at its bandwidth
    (1000 us); a what-if bandwidth above the peak raises the cap with it."""
    d = Decode(fixed_s=0, cta_s=0, mha_cta_s=0, kv_stream_efficiency=1.5)
    assert d.memory_s(1e9, 100, 1e12, peak=1.2e12) == pytest.approx(1e9 / 1.2e12)
    assert Tier(capacity_bytes=1e9, bandwidth_bytes_per_s=1e12).peak_bytes_per_s == 1e12
    assert Tier(capacity_bytes=1e9, bandwidth_bytes_per_s=1e12, peak_bandwidth_bytes_per_s=1.2e12).peak_bytes_per_s == 1.2e12
    assert Tier(capacity_bytes=1e9, bandwidth_bytes_per_s=1e12, peak_bandwidth_bytes_per_s=0.9e12).peak_bytes_per_s == 1e12
    assert load_machine("h200").memory["hbm"].peak_bytes_per_s == 4.8e12
    assert load_machine("h200", {"memory.hbm.bandwidth_bytes_per_s": 8e12}).memory["hbm"].peak_bytes_per_s == 8e12


def _prefill_op(model: str, batch: int, tokens: int):
    return lower(load_model(model), "prefill", batch, tokens, tokens, FormatPolicy("bf16", "bf16", "bf16"), True,
                 1).op("L0.attention")


def test_prefill_by_hand_on_the_h200():
    """Llama-2-7B, batch 2, a 2048-token causal prefill: 2 x 32 heads x 2048 x 2049 / 2 scores, each 4 x 128 FLOPs
    of QK and AV plus 5 of softmax = 69.42 GFLOP. At 2048 (a swept length) the fraction is the fitted one; the call
    is fixed + FLOPs / (989.4 TFLOP/s x fraction) + 2048 keys of the last query tile's walk. At 2896 (~2048 x
    sqrt 2, between the sweep's 2048 and 4096) the fraction is the power law's geometric mean of the two."""
    pf = attention_families()["torch_cudnn_sdpa"].prefill
    pts = dict(pf.rate_points)
    for tokens, frac in ((2048, pts[2048]), (2896, (pts[2048] * pts[4096]) ** 0.5)):
        flops = 2 * 32 * tokens * (tokens + 1) / 2 * (4 * 128 + 5)
        c = _h200_cost(_prefill_op("llama2-7b", 2, tokens))
        assert c.duration_s == pytest.approx(pf.fixed_s + flops / (989.4e12 * frac) + tokens * pf.walk_s_per_token,
                                             rel=2e-3)
    # the shipped figures (the fit's): a ~5 us floor, cuDNN's causal kernel at ~0.18 of the bf16 peak at 128 tokens
    # rising to ~0.6 from 4K on (the measured 2 x 32 x 2048 call: 0.144 ms, 0.49 of the peak with its floor)
    assert 3e-6 < pf.fixed_s < 8e-6 and 0.15 < pts[128] < 0.25 and 0.55 < pts[16384] < 0.65


def test_prefill_never_faster_with_more_work():
    """Longer prompts (across and between the swept lengths) and more sequences never take less time."""
    by_len = [_h200_cost(_prefill_op("llama3-8b", 1, s)).duration_s for s in range(100, 9000, 350)]
    assert all(x < y for x, y in zip(by_len, by_len[1:]))
    by_batch = [_h200_cost(_prefill_op("llama3-8b", b, 1500)).duration_s for b in (1, 2, 3, 8, 32)]
    assert all(x < y for x, y in zip(by_batch, by_batch[1:]))


def test_held_out_captures_prefill_attention_within_the_issue_target():
    """Issue 28: prefill attention <= 12%. The six flash captures' prefill calls (4 layers each; torch eager, kernel
    device times) are held out: the curve is fitted on the causal SDPA sweep alone. Before it (the roofline at 0.80
    of the bf16 peak): 45.3% MAPE, every call fast (-23% .. -52% median per capture)."""
    errs = [e for _, es in fit.held_out("prefill") for e in es]
    assert len(errs) == 24
    assert sum(abs(e) for e in errs) / len(errs) < 0.12

"""Attention kernel families (hw_models.stack.attention_kernels): decode = fixed + per-CTA + KV stream,
prefill = fixed + FLOPs at a fraction of the bf16 peak that grows with the sequence length."""

from __future__ import annotations

import pytest

from hw_models.stack.fa3_splits import fa3_num_splits, static_splits
from hw_models.stack.flashinfer_splits import flashinfer_chunks
from hw_models.stack.xqa_splits import xqa_multi_block_count
from hw_models.stack.attention_kernels import (AttentionFamily, AttentionKernels, Decode, Prefill, PrefillCurves,
                                               attention_cost, attention_families)
from hw_models.machine import load_machine
from sim.core.errors import ConfigError
from sim.core.lowering import FormatPolicy, lower
from sim.core.model import load_model

MODEL = {"name": "t", "hidden_size": 4096, "intermediate_size": 14336, "num_layers": 1, "num_heads": 32,
         "num_kv_heads": 8, "head_dim": 128, "vocab_size": 32000, "max_position_embeddings": 1 << 20}


def _op(phase: str, batch: int, q_len: int, kv_len: int, kv: str = "bf16", q: str = "bf16"):
    graph = lower(load_model(MODEL), phase, batch, q_len, kv_len, FormatPolicy("bf16", q, kv), True, 1)
    return graph.op("L0.attention")


def _cost(op, family: str, preset: str = "h100_sxm", overrides: dict | None = None):
    m = load_machine(preset, overrides)
    u = m.units[m.main_unit]
    return attention_cost(op, u, m.main_unit, m.memory[u.memory], family)


def test_decode_by_hand():
    """8 us + 3 us x (132 x 8 CTAs / 132 SMs) + 1 GB / (1 TB/s x 0.5) = 8 + 24 + 2000 us;
    an MHA model (heads == kv_heads) pays mha_cta_s per CTA instead."""
    d = Decode(fixed_s=8e-6, cta_s=3e-6, mha_cta_s=1e-6, kv_stream_efficiency=0.5)
    assert d.time_s(132, 32, 8, 1e9, 132, 1e12) == pytest.approx(2032e-6)
    assert d.time_s(132, 8, 8, 1e9, 132, 1e12) == pytest.approx(2016e-6)


def test_decode_cycles_and_ramp_by_hand():
    """20,000 cycles at 2 GHz = 10 us on top of fixed_s; the KV stream with kv_ramp_ctas 2 and 1 x 2 CTAs
    runs at half its many-CTA rate: 1 GB / (1 TB/s x 0.5) x (1 + 2 / 2) = 4000 us. At 1 GHz the cycles
    cost 20 us: the fixed part falls with the clock."""
    d = Decode(fixed_s=1e-6, fixed_cycles=20000, cta_s=0, mha_cta_s=0, kv_stream_efficiency=0.5, kv_ramp_ctas=2)
    assert d.time_s(1, 8, 2, 1e9, 132, 1e12, 2e9) == pytest.approx(11e-6 + 4000e-6)
    assert d.overhead_s(1, 8, 2, 132, 1e9) == pytest.approx(21e-6)
    assert d.memory_s(1e9, 200, 1e12) == pytest.approx(2000e-6 * 1.01)


def test_mha_kernel_stream_by_hand():
    """A family whose MHA calls run another kernel (TensorRT-LLM's masked MHA, not XQA) streams them at its
    own figures: 1 GB / (1 TB/s x 0.25) x (1 + 6 / 2 CTAs) = 16,000 us where heads == kv_heads (8 / 8, 1 x 8
    CTAs: x (1 + 6 / 8) = 7000 us), the grouped figures (0.5, ramp 2) elsewhere; without MHA figures both
    layouts take the grouped ones."""
    d = Decode(fixed_s=0, cta_s=0, mha_cta_s=0, kv_stream_efficiency=0.5, kv_ramp_ctas=2,
               mha_kv_stream_efficiency=0.25, mha_kv_ramp_ctas=6)
    assert d.memory_s(1e9, 2, 1e12, mha=True) == pytest.approx(16000e-6)
    assert d.time_s(1, 8, 8, 1e9, 132, 1e12) == pytest.approx(7000e-6)
    assert d.time_s(1, 32, 8, 1e9, 132, 1e12) == pytest.approx(2000e-6 * 1.25)
    plain = Decode(fixed_s=0, cta_s=0, mha_cta_s=0, kv_stream_efficiency=0.5, kv_ramp_ctas=2)
    assert plain.time_s(1, 8, 8, 1e9, 132, 1e12) == plain.time_s(1, 32, 8, 1e9, 132, 1e12)


def test_mha_kernel_fixed_cost_by_hand():
    """That kernel's own fixed cost (`mha_fixed_s`: TensorRT-LLM's FP8-KV masked MHA) is paid by MHA calls only:
    6 us + 3 us + 1 SM-us x 8 CTAs / 132 SMs where heads == kv_heads, 6 us + 2 SM-us x 8 / 132 where they differ;
    the shipped H100 FP8 figure is 3.06 us (docs/validation.md), none for a 16-bit cache."""
    d = Decode(fixed_s=6e-6, cta_s=2e-6, mha_cta_s=1e-6, kv_stream_efficiency=1, mha_fixed_s=3e-6)
    assert d.overhead_s(1, 8, 8, 132) == pytest.approx(9e-6 + 1e-6 * 8 / 132)
    assert d.overhead_s(1, 32, 8, 132) == pytest.approx(6e-6 + 2e-6 * 8 / 132)
    trt = attention_families()["trtllm_attention"].decode
    assert trt["fp8_e4m3"].mha_fixed_s > 0 and trt["bf16"].mha_fixed_s == 0


def test_kv_walk_by_hand():
    """A kernel that walks the cache unsplit: 10 ns per token x 32,768 tokens = 327.68 us, whatever the batch
    (1 or 4) and KV heads, while the stream is shorter (1 GB / (1 TB/s x 0.5) = 2000 us takes over at batch 8
    x 8 KV heads: the larger of the two); an MHA call (heads == kv_heads) never walks. Never faster with more
    tokens: the walk and the stream both grow with kv_len."""
    d = Decode(fixed_s=0, cta_s=0, mha_cta_s=0, kv_stream_efficiency=0.5, kv_walk_s_per_token=10e-9)
    assert d.walk_s(32768) == pytest.approx(327.68e-6) and d.walk_s(32768, mha=True) == 0.0
    assert d.time_s(1, 8, 1, 1e6, 132, 1e12, kv_len=32768) == pytest.approx(327.68e-6)
    assert d.time_s(4, 32, 8, 1e6, 132, 1e12, kv_len=32768) == pytest.approx(327.68e-6)
    assert d.time_s(8, 32, 8, 1e9, 132, 1e12, kv_len=32768) == pytest.approx(2000e-6)
    assert d.time_s(1, 8, 8, 1e6, 132, 1e12, kv_len=32768) == pytest.approx(2e-6)
    times = [d.time_s(1, 8, 1, 2 * n * 128 * 2.0, 132, 1e12, kv_len=n) for n in (1, 512, 4096, 32768, 131072)]
    assert times == sorted(times)


def test_prefill_by_hand():
    """10 us + 1 TFLOP / (1000 TFLOP/s x fraction) + the critical path, 2048 keys x 5 ns = 10.24 us; the fraction is
    a power law between the fitted lengths: halfway between 1024 (0.4) and 4096 (0.6) in log q_len is 2048 ->
    sqrt(0.4 x 0.6) = 0.48990 (the geometric mean), flat past the ends."""
    p = Prefill(fixed_s=10e-6, rate_points=[(1024, 0.4), (4096, 0.6)], walk_s_per_token=5e-9)
    assert p.fraction(2048) == pytest.approx(0.24 ** 0.5, rel=1e-12)
    assert p.fraction(1) == pytest.approx(0.4, rel=1e-12) and p.fraction(1 << 20) == pytest.approx(0.6, rel=1e-12)
    assert p.time_s(1e12, 2048, 1e15, 2048) == pytest.approx(10e-6 + 1e12 / (1e15 * 0.24 ** 0.5) + 10.24e-6)
    assert p.time_s(1e12, 2048, 1e15) == pytest.approx(10e-6 + 1e12 / (1e15 * 0.24 ** 0.5))   # no keys, no walk
    with pytest.raises(ValueError):
        Prefill(fixed_s=0, rate_points=[(1024, 0.5), (4096, 0.4)])   # falls with a longer sequence


def test_a_chunk_over_a_longer_cache_reads_the_curve_at_the_prompt_of_as_many_pairs():
    """Every measured row is a whole prompt (kv_len = q_len). A speculative verify of 2 tokens over 1,000 keys read
    the curve at q_len 2, its lowest fraction, on FLOPs that grow with kv_len: 798 us a layer under trtllm_attention
    on H100 (Llama-3-70B TP4), 90x the same step's decode attention. It reads it now at the whole prompt with as many
    causal pairs: n (n + 1) / 2 = 2 x (1000 - 1/2) = 1999, n = 62.73: fixed + the walk of 1000 keys + FLOPs / (peak x
    fraction(62.73)); a whole prompt (kv_len = q_len) reads q_len itself."""
    pf = attention_families()["trtllm_attention"].prefill_for("bf16", "bf16", 9.0)
    op = _op("prefill", 1, 2, 1000)
    c = _cost(op, "trtllm_attention")
    n = (-1 + (1 + 8 * 1999) ** 0.5) / 2
    assert n == pytest.approx(62.7317, rel=1e-5)
    assert c.compute_s == pytest.approx(op.flops / (989.4e12 * pf.fraction(n)), rel=1e-12)
    assert c.overhead_s == pytest.approx(pf.fixed_s + 1000 * pf.walk_s_per_token, rel=1e-12)
    assert c.duration_s < 3 * _cost(_op("decode", 1, 1, 1000), "trtllm_attention").duration_s
    whole = _op("prefill", 1, 4096, 4096)
    w = _cost(whole, "trtllm_attention")
    assert w.compute_s == pytest.approx(whole.flops / (989.4e12 * pf.fraction(4096)), rel=1e-12)
    assert w.memory_s == 0.0 and w.bound == "compute"   # the kernel's work is its math (two CI mutation survivors)


@pytest.mark.parametrize("family", ["trtllm_attention", "flash_attn", "flashinfer"])
def test_a_chunk_never_takes_less_time_with_more_queries_or_more_keys(family):
    """The chunk's length (the whole prompt of as many causal pairs) keeps the time as monotone in each as the curve
    is in its length (read at kv_len alone, 2 queries over 32 keys took less than over 16: the fraction grows ~x4 a
    doubling there; read at sqrt(q_len x kv_len), 16 queries over 64 keys took more than 64 over 64)."""
    for kv in (64, 1000, 8192):
        t = [_cost(_op("prefill", 1, q, kv), family).duration_s for q in (2, 3, 6, 16, 64) if q <= kv]
        assert t == sorted(t)
    for q in (2, 16, 128):
        t = [_cost(_op("prefill", 1, q, kv), family).duration_s for kv in (128, 256, 1024, 4096, 32768)]
        assert t == sorted(t)


def test_prefill_walk_is_the_critical_path_of_few_ctas():
    """The walk term is what sets a call of few CTAs apart: one sequence, 32 heads at 16K tokens on the A100 under
    trtllm_attention's SM 8.0 curve pays 16,384 x walk_s_per_token on top of fixed + FLOPs / (peak x f), whatever
    the batch; at batch 8 the FLOPs' share grows 8x and the walk's stays."""
    fam = attention_families()["trtllm_attention"]
    pf = fam.prefill_for("bf16", "bf16", 8.0)
    assert pf is fam.prefill_sm[8.0].prefill and pf.walk_s_per_token > 0
    for batch in (1, 8):
        op = _op("prefill", batch, 16384, 16384)
        c = _cost(op, "trtllm_attention", "a100_80g")
        assert c.overhead_s == pytest.approx(pf.fixed_s + 16384 * pf.walk_s_per_token, rel=1e-12)
        assert c.compute_s == pytest.approx(op.flops / (312e12 * pf.fraction(16384)), rel=1e-12)


def test_prefill_curves_per_architecture_by_hand():
    """A GPU takes its compute capability's curve of the (query, KV) pair, else the family's own curve of that pair,
    else the broader curves in the same order (module doc): SM 9.0 has its own 16-bit curve only."""
    one = {"fixed_s": 1e-6}
    own, sm90 = Prefill(**one, rate_points=[(1, 0.25)]), Prefill(**one, rate_points=[(1, 0.4)])
    kv8 = Prefill(**one, rate_points=[(1, 0.2)])
    fam = AttentionFamily(cite="test", prefill=own, prefill_kv={"fp8": kv8},
                          prefill_sm={9.0: PrefillCurves(prefill=sm90)})
    assert fam.prefill_for("bf16", "bf16", 9.0) is sm90
    assert fam.prefill_for("bf16", "bf16", 8.0) is own and fam.prefill_for("bf16", "bf16") is own
    assert fam.prefill_for("fp8_e4m3", "bf16", 9.0) is kv8       # the pair's own curve before SM 9.0's 16-bit one
    assert fam.prefill_for("fp8_e4m3", "fp8_e4m3", 9.0) is kv8   # no FP8-math curve anywhere: the KV format's


def test_vllm_flashinfer_decode_is_fitted_on_vllms_own_rows():
    """vLLM's FlashInfer decode rows take longer at small caches than SGLang's (2.5 us more fixed cost, fitted):
    the family has its own FP8-KV decode figures, split as FlashInfer's partition-kv, and its own prefill curves."""
    fams = attention_families()
    own, sglang = fams["vllm_flashinfer"].decode["fp8_e4m3"], fams["flashinfer"].decode["fp8_e4m3"]
    assert own.split == "flashinfer" and own.rows > 0 and own != sglang
    assert own.fixed_s > sglang.fixed_s
    assert fams["vllm_flashinfer"].prefill_kv["fp8_e4m3"] != fams["flashinfer"].prefill_kv["fp8_e4m3"]


@pytest.mark.parametrize("stack", ["vllm", "trtllm", "sglang", "torch-cudagraph"])
def test_an_fp16_cache_runs_the_bf16_kernels(stack):
    """fp16 and bf16 run the same attention kernels at the same bytes (prefill_curves.SAME_KERNELS): a kernel
    trial's fp16 cache (the shipped llama*_decode workloads' format) had found no family and kept the roofline,
    27-46% faster than the bf16 op on H100/A100. Under every stack, the fp16 op now costs what the bf16 one does,
    prefill and decode, by the family the stack names for bf16."""
    from hw_models.registry import simulate
    from sim.core.workload import workload_from_dict

    def attention(fmt: str, prompt: int, gen: int):
        w = workload_from_dict(dict(name="t", model="llama3-8b", batch=8, prompt_len=prompt, gen_len=gen,
                                    flash_attention=True, formats=dict(weights=fmt, activations=fmt, kv_cache=fmt),
                                    stack=stack), "t")
        r = simulate(w, load_machine("h100_sxm"))
        return [(o.end_s - o.start_s, o.path) for o in (*r.prefill_ops, *r.decode_ops) if o.name == "L0.attention"]

    bf16, fp16 = attention("bf16", 512, 2), attention("fp16", 512, 2)
    assert len(bf16) == 2 and all(path.endswith(("prefill", "decode")) for _, path in bf16)
    assert fp16 == bf16


def test_an_fp16_key_that_would_never_be_read_is_refused():
    """A review: since fp16 takes the bf16 figures, a rule `kv: [fp16]` could never match and an `fp16:` entry never
    be read; both are refused, naming the key to write."""
    from pydantic import ValidationError

    from hw_models.stack.attention_kernels import AttentionRule

    with pytest.raises(ValidationError, match="fp16: takes the bf16 figures"):
        AttentionRule(family="flash_attn", kv=["fp16"])
    with pytest.raises(ValidationError, match="fp16: takes the bf16 figures"):
        PrefillCurves(prefill_kv={"fp16": {"fixed_s": 0, "rate_points": [[1, 0.5]]}})


def test_prefill_from_takes_every_curve_of_the_other_family():
    """prefill_from copies prefill, prefill_kv, prefill_fp8_query and prefill_sm; naming no family, a family
    without curves, or giving curves itself is refused. Shipped: flash_attn2 differs from flash_attn in decode only."""
    curve = {"fixed_s": 1e-6, "rate_points": [[1, 0.5]]}
    base = {"cite": "t", "decode": {"bf16": {"fixed_s": 0, "cta_s": 0, "mha_cta_s": 0, "kv_stream_efficiency": 1}},
            "prefill": curve, "prefill_sm": {8.0: {"prefill": {**curve, "fixed_s": 2e-6}}}}
    fams = AttentionKernels(families={"a": base, "b": {"cite": "t", "prefill_from": "a"}}).families
    assert fams["b"].prefill == fams["a"].prefill and fams["b"].prefill_sm == fams["a"].prefill_sm
    assert fams["b"].prefill_for("bf16", capability=8.0).fixed_s == 2e-6 and not fams["b"].decode
    for bad in ({"cite": "t", "prefill_from": "nope"}, {"cite": "t", "prefill_from": "a", "prefill": curve}):
        with pytest.raises(ValueError, match="prefill_from"):
            AttentionKernels(families={"a": base, "b": bad})
    with pytest.raises(ValueError, match="prefill_from"):
        AttentionKernels(families={"a": {"cite": "t"}, "b": {"cite": "t", "prefill_from": "a"}})
    shipped = attention_families()
    assert shipped["flash_attn2"].prefill_sm == shipped["flash_attn"].prefill_sm
    assert shipped["flash_attn2"].decode["bf16"] != shipped["flash_attn"].decode["bf16"]


def test_shipped_decode_floor_and_stream_on_h100():
    """The shipped figures on the H100 preset: floor = fixed + cycles / 1.98 GHz + per-CTA x 8 KV heads x splits /
    132 SMs at batch 1 (+ combine_s where split); the stream term = 2 x kv x 8 x 128 x 2 B / (3.35 TB/s x
    memory_max 0.85 x efficiency) x (1 + kv_ramp_ctas / (8 x splits) CTAs). Splits: 1, but for FlashAttention-2's
    family, whose heuristic splits this call 32 ways (test_fa2_splits_by_hand), FlashAttention-3's SM 8.x build,
    13 ways (test_fa3_splits_by_hand), TensorRT-LLM's multi-block mode, 16 sub-sequences whose merge is paid but whose
    CTAs are not counted (test_xqa_multi_block_by_hand), cuDNN's SDPA, 2 (8 pairs, 4096 tokens:
    tests/test_torch_attention.py), and FlashInfer's, whose grid decides (test_flashinfer_chunks_by_hand)."""
    for name, fam in attention_families().items():
        if "bf16" not in fam.decode:    # vllm_flashinfer: FP8 KV only (vLLM runs FlashAttention on 16-bit caches)
            continue
        d = fam.decode["bf16"]
        c = _cost(_op("decode", 1, 1, 4096), name)
        kv_bytes = 2 * 4096 * 8 * 128 * 2
        s = {"none": 1, "fa2": 32, "fa3": 13, "xqa": 16, "cudnn": 2}.get(d.split) or flashinfer_chunks(1, 8, 132, 4096,
                                                                                          d.blocks_per_sm)
        assert d.launch(1, 32, 8, 132, 4096)[1] == s
        per_cta = 8 if d.split in ("fa3", "xqa") else 8 * s    # FA3's and XQA's count (sequence, KV head) pairs
        ramp_ctas = 8 if d.split == "xqa" else 8 * s             # XQA's sub-sequences: merged, not counted
        assert c.overhead_s == pytest.approx(d.fixed_s + d.fixed_cycles / 1.98e9 + d.cta_s * per_cta / 132
                                             + (d.combine_s if s > 1 else 0.0))
        assert c.memory_s == pytest.approx(kv_bytes / (3.35e12 * 0.85 * d.kv_stream_efficiency)
                                           * (1 + d.kv_ramp_ctas / ramp_ctas))   # grouped (32 / 8): not the MHA figures
        assert c.duration_s == pytest.approx(c.overhead_s + c.memory_s)


def test_fa2_splits_by_hand():
    """FlashAttention-2's heuristic (flash_api.cpp num_splits_heuristic: 2 x SMs slots, 128-token key blocks at
    head_dim 128, at most 128 splits, the fewest eligible splits within 85% of the best wave efficiency).
    - 1 CTA, 108 SMs, 131,072 tokens: 1024 blocks, up to 128 splits, efficiency s / 216, best 128 / 216 = 0.593;
      0.85 of it needs s >= 108.8, and the first s that changes ceil(1024 / s) from there is 114 (9 blocks each).
    - 8 CTAs, 132 SMs, 4096 tokens: 32 blocks; eligible 1-8, 11, 16, 32; 32 splits fill 256 of 264 slots (0.97),
      16 fill 0.48 < 0.85 x 0.97: 32.
    - 8 CTAs, 108 SMs, 4096 tokens: 16 splits (128 / 216 = 0.593) tie 32 (256 / 216: 1.185 waves, 0.593): 16.
    - 173 CTAs on 108 SMs (>= 0.8 x 216), or a cache of one 128-token block: no split."""
    from hw_models.stack.fa2_splits import fa2_num_splits
    assert fa2_num_splits(1, 108, 131072) == 114
    assert fa2_num_splits(8, 132, 4096) == 32
    assert fa2_num_splits(8, 108, 4096) == 16
    assert fa2_num_splits(173, 108, 131072) == 1 and fa2_num_splits(172, 108, 131072) > 1
    assert fa2_num_splits(1, 108, 128) == 1 and fa2_num_splits(1, 108, 129) == 2


def test_fa3_splits_by_hand():
    """FlashAttention-3's varlen split on SM 8.x (fa3_splits: a bound from num_splits_heuristic over the KV heads, then
    ceil(n-blocks / ceil(batch x n-blocks x 1.1 x KV heads / SMs)) per sequence, capped by it; 112-token key blocks
    where the bound splits, 64 where it does not).
    - batch 1, 8 KV heads, 132 SMs, 4096 tokens: 37 blocks; the bound's efficiency 8s / 132 peaks at s = 33 (2
      waves, 1.0) and first passes 0.85 at s = 15 (0.91); per SM ceil(37 x 1.1 x 8 / 132) = 3 blocks: 13 splits.
    - batch 1, 4 KV heads (MHA 4/4), 108 SMs, 32,768 tokens: 293 blocks, bound 23 (92 / 108 = 0.85); per SM
      ceil(293 x 1.1 x 4 / 108) = 12: ceil(293 / 12) = 25, capped at 23.
    - batch 8, 1 KV head, 108 SMs, 65,536 tokens: 586 blocks, bound 92; per SM 48: 13 splits.
    - batch 64, 8 KV heads, 108 SMs, 4096 tokens: bound 12, per SM 193 blocks: 1 split.
    - 256 tokens: 3 blocks of 112 (<= 4): no split."""
    assert static_splits(8, 132, 37) == 15 and fa3_num_splits(1, 8, 132, 4096) == 13
    assert static_splits(4, 108, 293) == 23 and fa3_num_splits(1, 4, 108, 32768) == 23
    assert fa3_num_splits(8, 1, 108, 65536) == 13
    assert static_splits(8, 108, 37) == 12 and fa3_num_splits(64, 8, 108, 4096) == 1
    assert fa3_num_splits(1, 4, 108, 256) == 1
    d = Decode(fixed_s=0, cta_s=1e-6, mha_cta_s=2e-6, kv_stream_efficiency=1, split="fa3", combine_s=3e-6)
    assert d.launch(1, 4, 4, 108, 32768) == (4 * 23, 23, True)   # MHA calls split too (packed GQA of one head)
    # the per-CTA cost counts the 4 (sequence, KV head) pairs, not the 92 split CTAs; the combine is paid
    assert d.overhead_s(1, 4, 4, 108, kv_len=32768) == pytest.approx(2e-6 * 4 / 108 + 3e-6)


def test_xqa_multi_block_by_hand():
    """TensorRT-LLM's multi-block count (xqa_splits: history // 128, at most round(sqrt(8 n)), cut back past 8 waves,
    within 6000 sub-sequences over the batch).
    - batch 1, 8 KV heads, 132 SMs, 4096 tokens: history 4095 -> 31, sqrt(248) = 15.7 -> 16; 8 x 16 / 132 = 0.97 wave.
    - 256 tokens: history 255 -> 1: no multi-block; 257 tokens: 2 (sqrt(16) = 4 does not bind).
    - batch 256, 8 KV heads, 132 SMs, 4096 tokens: 16 -> 248 waves / 8 = 31 -> floor(16 / 31) = 0 -> 1.
    - batch 64, 1 KV head, 132 SMs, 65,536 tokens: 511 -> round(sqrt(4088)) = 64; 31 waves / 8 -> floor(64 / 3.88) = 16.
    - batch 2048, 1 KV head, 10,000 SMs, 131,072 tokens: 1023 -> 90; 18.4 waves / 8 -> floor(90 / 2.30) = 39; the
      workspace: 6000 // 2048 = 2."""
    assert xqa_multi_block_count(1, 8, 132, 4096) == 16
    assert xqa_multi_block_count(1, 8, 132, 256) == 1 and xqa_multi_block_count(1, 8, 132, 257) == 2
    assert xqa_multi_block_count(256, 8, 132, 4096) == 1
    assert xqa_multi_block_count(64, 1, 132, 65536) == 16
    assert xqa_multi_block_count(2048, 1, 10_000, 131072) == 2
    d = Decode(fixed_s=0, cta_s=1e-6, mha_cta_s=2e-6, kv_stream_efficiency=1, split="xqa", combine_s=3e-6)
    assert d.launch(1, 32, 8, 132, 4096) == (8, 16, False)   # one CTA per (sequence, KV head) counted
    assert d.overhead_s(1, 32, 8, 132, kv_len=4096) == pytest.approx(1e-6 * 8 / 132 + 3e-6)
    assert d.overhead_s(1, 32, 8, 132, kv_len=256) == pytest.approx(1e-6 * 8 / 132)   # no merge


def test_one_token_context_call_runs_the_context_kernel_where_the_engine_does():
    """A prefill step of one new token: TensorRT-LLM's op sends it to its context FMHA (context_kernel), priced by the
    family's prefill curve (fixed cost + FLOPs at the curve's q_len-1 fraction + the walk); vLLM's FlashAttention
    runs it as any one-token varlen call, priced by the decode figures, as the same call in a decode step is."""
    pre, dec = _op("prefill", 4, 1, 1), _op("decode", 4, 1, 1)
    assert dict(pre.dims)["context"] == 1 and dict(dec.dims)["context"] == 0
    trt = attention_families()["trtllm_attention"]
    assert trt.context_kernel and not attention_families()["flash_attn"].context_kernel
    pf = trt.prefill_for("bf16", "bf16", 9.0)
    c = _cost(pre, "trtllm_attention")
    assert c.path.endswith("prefill")
    assert c.duration_s == pytest.approx(pf.time_s(pre.flops, 1, 989.4e12, 1))   # h100_sxm.yaml bf16 peak
    assert _cost(dec, "trtllm_attention").path.endswith("decode")
    assert _cost(pre, "flash_attn").duration_s == _cost(dec, "flash_attn").duration_s


def test_fa2_family_splits_grouped_calls_and_walks_mha_ones():
    """Split-KV runs only where the query heads are swapped into rows (one query token, more query than KV heads:
    flash_api.cpp mha_varlen_fwd), so an MHA call keeps one CTA per (sequence, head) and walks the whole cache:
    1 x 8 CTAs at 131,072 tokens and 20 ns a token = 2.62 ms, far above its 537 MB stream at 1 TB/s x (1 + 2 / 8).
    A grouped call of the same cache pays combine_s once it splits (114 ways), none at 128 tokens (one block)."""
    d = Decode(fixed_s=0, cta_s=0, mha_cta_s=0, kv_stream_efficiency=1.0, kv_ramp_ctas=2,
               mha_kv_walk_s_per_token=20e-9, split="fa2", combine_s=4e-6)
    assert d.launch(1, 8, 8, 108, 131072) == (8, 1, True) and d.launch(1, 8, 1, 108, 131072) == (114, 114, False)
    assert d.time_s(1, 8, 8, 537e6, 108, 1e12, kv_len=131072) == pytest.approx(131072 * 20e-9)
    assert d.time_s(1, 8, 1, 67e6, 108, 1e12, kv_len=131072) == pytest.approx(4e-6 + 67e6 / 1e12 * (1 + 2 / 114))
    assert d.time_s(1, 8, 1, 65536.0, 108, 1e12, kv_len=128) == pytest.approx(65536 / 1e12 * 3)
    plain = d.model_copy(update={"split": "none"})
    assert plain.launch(1, 8, 1, 108, 131072) == (1, 1, False)


def test_fa2_counts_query_tiles_past_64_grouped_heads():
    """FA2 swaps a KV head's query heads into rows of 64-row tiles: 128 query heads on one KV head are 2 tiles, so
    one sequence is 2 CTAs before the split. On 108 SMs (216 slots) at 131,072 tokens (1024 blocks), 2 x s / 216
    peaks among the eligible splits at s = 103 (0.954); the first eligible s with 0.85 of that (s >= 87.6) is 94
    (ceil(1024 / 94) = 11 against 12 at 93). Counting one tile, as for <= 64 heads, would give 114."""
    d = Decode(fixed_s=0, cta_s=0, mha_cta_s=0, kv_stream_efficiency=1.0, split="fa2")
    assert d.launch(1, 128, 1, 108, 131072) == (94, 94, False)
    assert d.launch(1, 64, 1, 108, 131072) == (114, 114, False)


def test_fa2_key_block_follows_the_ops_head_dim():
    """FA2's key blocks are 256 tokens at head_dim <= 64 and 128 at head_dim 128 (flash_api.cpp set_params_splitkv): a
    200-token cache is one block at head_dim 64 (no split, no combine kernel) and two at 128 (split in two on the
    A100's 216 slots). attention_cost reads the op's head_dim."""
    d = attention_families()["flash_attn2"].decode["bf16"]
    assert d.launch(1, 32, 8, 108, 200, 64)[1] == 1 and d.launch(1, 32, 8, 108, 200, 128)[1] == 2
    narrow = {**MODEL, "hidden_size": 2048, "head_dim": 64}
    graph = lower(load_model(narrow), "decode", 1, 1, 200, FormatPolicy("bf16", "bf16", "bf16"), True, 1)
    c = _cost(graph.op("L0.attention"), "flash_attn2", "a100_80g")
    assert c.overhead_s == pytest.approx(d.launch_overhead_s(d.launch(1, 32, 8, 108, 200, 64), 108, 1.41e9))


def test_kv_stream_never_passes_the_tiers_peak():
    """The fitted efficiency may pass 1 (it is against memory_max), never the DRAM peak: 1 GB at 0.85 TB/s x 1.4 =
    1.19 TB/s would pass a 1 TB/s peak, so it streams at 1 TB/s (1 ms x (1 + 2 / 100)); without a peak, 0.84 ms. On
    the h200 preset (memory_max 1.0 over its measured 4.13 TB/s) a shipped efficiency above 1 streams at 4.13 TB/s x
    that efficiency, under the 4.8 TB/s datasheet peak (Tier.peak_bandwidth_bytes_per_s) that caps it; before the
    preset named its peak, the measured 4.13 TB/s was the cap."""
    d = Decode(fixed_s=0, cta_s=0, mha_cta_s=0, kv_stream_efficiency=1.4, kv_ramp_ctas=2)
    assert d.kv_s(1e9, 100, 0.85e12, 1, False, peak=1e12) == pytest.approx(1e-3 * 1.02)
    assert d.kv_s(1e9, 100, 0.85e12, 1, False) == pytest.approx(1e9 / 1.19e12 * 1.02)
    fam = attention_families()["flash_attn"]
    eff, ramp = fam.decode["bf16"].stream()
    assert eff > 1.0
    op = _op("decode", 64, 1, 8192)
    kv_bytes = 2 * 64 * 8192 * 8 * 128 * 2
    c = _cost(op, "flash_attn", "h200")
    assert 4.13e12 * eff < 4.8e12
    assert c.memory_s == pytest.approx(kv_bytes / (4.13e12 * eff) * (1 + ramp / (64 * 8)))
    fast = fam.decode["bf16"].model_copy(update={"kv_stream_efficiency": 1.3})   # 5.37 TB/s: the peak binds
    assert fast.memory_s(kv_bytes, 64 * 8, 4.13e12, peak=4.8e12) == pytest.approx(kv_bytes / 4.8e12 * (1 + ramp / (64 * 8)))


def test_flashinfer_chunks_by_hand():
    """FlashInfer's plan (scheduler.cuh): 188 SMs x 2 blocks = 376 CTAs of room. One sequence of 8 KV heads leaves
    room for 47 chunks each: 131,072 tokens in chunks of ceil(131072 / 47) = 2789 tokens, 47 chunks; 128 tokens stay
    one chunk (the 128-token floor), 129 make two; 47 sequences x 8 heads fill the grid: no split, nor at 46 (368
    CTAs: no room for a second chunk each), where 23 leave room for two. A split MHA call
    pays combine_s like a grouped one (FlashInfer splits both)."""
    assert flashinfer_chunks(1, 8, 188, 131072, 2) == 47
    assert flashinfer_chunks(1, 8, 188, 128, 2) == 1 and flashinfer_chunks(1, 8, 188, 129, 2) == 2
    assert flashinfer_chunks(47, 8, 188, 131072, 2) == 1 and flashinfer_chunks(46, 8, 188, 131072, 2) == 1
    assert flashinfer_chunks(23, 8, 188, 131072, 2) == 2     # 184 CTAs: room for two chunks a sequence
    d = Decode(fixed_s=0, cta_s=0, mha_cta_s=0, kv_stream_efficiency=1.0, split="flashinfer", combine_s=2e-6,
               blocks_per_sm=2)
    assert d.launch(1, 8, 8, 188, 131072) == (8 * 47, 47, True)
    assert d.overhead_s(1, 8, 8, 188, kv_len=129) == pytest.approx(2e-6)
    assert d.overhead_s(1, 8, 8, 188, kv_len=128) == 0.0


def test_decode_fixed_cost_falls_with_the_clock():
    """Same family, same shape: the A100 (1.41 GHz) pays more fixed cost than the RTX PRO 6000 (2.617 GHz)
    by exactly fixed_cycles x (1/1.41 - 1/2.617) GHz^-1 plus the per-CTA term's SM-count difference."""
    for name, fam in attention_families().items():
        if "bf16" not in fam.decode:    # vllm_flashinfer: FP8 KV only (vLLM runs FlashAttention on 16-bit caches)
            continue
        d = fam.decode["bf16"]
        a, p = (_cost(_op("decode", 1, 1, 16), name, preset).overhead_s for preset in ("a100_80g", "rtx_pro_6000"))
        assert a - p == pytest.approx(d.fixed_cycles * (1 / 1.41e9 - 1 / 2.617e9) + d.cta_s * 8 * (1 / 108 - 1 / 188))


@pytest.mark.parametrize("family", sorted(attention_families()))
@pytest.mark.parametrize("kv", ["bf16", "fp8_e4m3"])
def test_decode_never_faster_with_more_work(family, kv):
    if kv not in attention_families()[family].decode:
        pytest.skip(f"{family} has no {kv} figures")
    for preset in ("h100_sxm", "a100_80g", "rtx_pro_6000"):
        for batch in (1, 8, 64, 512):
            t = [_cost(_op("decode", batch, 1, n, kv), family, preset).duration_s for n in (2, 64, 1024, 8192, 65536)]
            assert t == sorted(t)
        for n in (2, 4096):
            t = [_cost(_op("decode", b, 1, n, kv), family, preset).duration_s for b in (1, 4, 32, 256, 2048)]
            assert t == sorted(t)


@pytest.mark.parametrize("family", sorted(attention_families()))
@pytest.mark.parametrize("q, kv", [("bf16", "bf16"), ("bf16", "fp8_e4m3"), ("fp8_e4m3", "fp8_e4m3")])
def test_prefill_never_faster_with_more_work(family, q, kv):
    for preset in ("h100_sxm", "a100_80g", "rtx_pro_6000", "l40s", "b200"):   # each curve of SM 8.0 / 8.9 / 9.0 / 12.0
        m = load_machine(preset)
        if attention_families()[family].prefill_for(kv, q, m.units[m.main_unit].efficiency.compute_capability) is None:
            continue   # no curve for this pair (vllm_flashinfer has FP8-KV ones only)
        t = [_cost(_op("prefill", 1, n, n, kv, q), family, preset).duration_s
             for n in (16, 20, 24, 32, 48, 64, 128, 1024, 4096, 16384)]   # inside segments too
        assert t == sorted(t)
        t = [_cost(_op("prefill", b, 2048, 2048, kv, q), family, preset).duration_s for b in (1, 2, 8)]
        assert t == sorted(t)


def test_prefill_curve_per_query_and_kv_format_by_hand():
    """A family with three curves: 16-bit KV -> `prefill`; FP8 KV, 16-bit query -> prefill_kv; FP8 query on
    FP8 KV -> prefill_fp8_query (FP8 FMHA math); same FLOPs and peak, so the compute time scales as 1 / f."""
    one = {"fixed_s": 1e-6}
    fam = AttentionFamily(cite="test", prefill=Prefill(**one, rate_points=[(1, 0.25)]),
                          prefill_kv={"fp8": Prefill(**one, rate_points=[(1, 0.2)])},
                          prefill_fp8_query=Prefill(**one, rate_points=[(1, 0.5)]))
    assert fam.prefill_for("bf16", "bf16").fraction(2048) == 0.25
    assert fam.prefill_for("fp8_e4m3", "bf16").fraction(2048) == 0.2
    assert fam.prefill_for("fp8_e4m3", "fp8_e4m3").fraction(2048) == 0.5
    assert fam.prefill_for("bf16", "fp8_e4m3").fraction(2048) == 0.25   # FP8 math needs both operands in FP8
    bare = AttentionFamily(cite="test", prefill=Prefill(**one, rate_points=[(1, 0.25)]))
    assert bare.prefill_for("fp8_e4m3", "fp8_e4m3") is bare.prefill     # no curve of its own: the 16-bit one
    # Shipped: TensorRT-LLM on SM 12.x, 16K tokens: the FP8-math curve takes the bf16 one's time x f_bf16 / f_fp8.
    sm120 = attention_families()["trtllm_attention_sm120"]
    a, b = (_cost(_op("prefill", 1, 16384, 16384, kv, q), "trtllm_attention_sm120", "rtx_pro_6000")
            for q, kv in (("bf16", "bf16"), ("fp8_e4m3", "fp8_e4m3")))
    assert b.compute_s / a.compute_s == pytest.approx(
        sm120.prefill.fraction(16384) / sm120.prefill_fp8_query.fraction(16384))
    assert b.compute_s < 0.7 * a.compute_s   # measured ~0.54x at 16K (ctx_attn_rtx_pro_6000, trtllm fp8/fp8)


def test_no_sm_count_keeps_the_roofline():
    """A GPU whose SM count is not given (parallel_units unset): the decode CTA term cannot be placed."""
    op = _op("decode", 8, 1, 4096)
    assert _cost(op, "flash_attn", "b200") is not None   # 148 SMs (b200.yaml)
    assert _cost(op, "flash_attn", "b200", {"units.gpu.efficiency.parallel_units": None}) is None


def test_unknown_family_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown kernel family"):
        _cost(_op("decode", 1, 1, 16), "nope")


def test_shipped_sm120_fp8_walk_on_rtx_pro_6000():
    """trtllm_attention_sm120's FP8-KV grouped decode on the RTX PRO 6000 at batch 1, 32,768 tokens, 32 / 8 heads:
    the walk (32,768 x kv_walk_s_per_token, ~311 us) outlasts the 67 MB stream (~160 us with its ramp at 8 CTAs), so
    the call is the overhead (~8.3 us) plus the walk; aic measured 320 us (gen_attn_rtx_pro_6000, TensorRT-LLM
    1.3.0rc20; the family's fit MAPE is 10%, the row itself within 5%)."""
    d = attention_families()["trtllm_attention_sm120"].decode["fp8_e4m3"]
    c = _cost(_op("decode", 1, 1, 32768, "fp8_e4m3"), "trtllm_attention_sm120", "rtx_pro_6000")
    assert c.memory_s == pytest.approx(32768 * d.kv_walk_s_per_token)
    assert c.duration_s == pytest.approx(320e-6, rel=0.05)


def test_shipped_sm89_fp8_walk_on_l40s():
    """trtllm_attention_sm89's FP8-KV grouped decode on the L40S at batch 1, 32,768 tokens, 32 / 8 heads: aic
    measured 532.8 us, and 532.5-533.0 us for every head layout from 4 / 1 to 64 / 8 (gen_attn_l40s, TensorRT-LLM
    1.3.0rc20): one CTA per (sequence, KV head) walks the whole cache, 16.3 ns a token. The shipped walk outlasts
    the 67 MB stream (~93 us at 864 GB/s), so the call is the overhead plus the walk, within 5% of the row; at
    8,192 tokens (139.4 us measured) a quarter of the walk."""
    d = attention_families()["trtllm_attention_sm89"].decode["fp8_e4m3"]
    c = _cost(_op("decode", 1, 1, 32768, "fp8_e4m3"), "trtllm_attention_sm89", "l40s")
    assert c.memory_s == pytest.approx(32768 * d.kv_walk_s_per_token)
    assert c.duration_s == pytest.approx(532.8e-6, rel=0.05)
    assert _cost(_op("decode", 1, 1, 8192, "fp8_e4m3"), "trtllm_attention_sm89", "l40s").duration_s == \
        pytest.approx(139.4e-6, rel=0.08)


def test_l2_stream_by_hand():
    """A single-layer replay re-reads a resident cache from the L2 (kills Decode.l2_memory_s__mutmut_13 and
    kv_s__mutmut_13): 1 MB / (10 TB/s x l2_stream_efficiency 0.25) x (1 + kv_ramp_ctas 2 / 4 CTAs) = 0.4 x 1.5
    = 0.6 us, where the DRAM stream takes 1 MB / (1 TB/s x 0.5) x 1.5 = 3 us; no CTA counts as one: x (1 + 2),
    1.2 us. The unsplit walk of 100 tokens x 10 ns = 1 us outlasts the L2 stream, so kv_s takes it; 10 tokens
    (0.1 us) do not."""
    d = Decode(fixed_s=0, cta_s=0, mha_cta_s=0, kv_stream_efficiency=0.5, kv_ramp_ctas=2, l2_stream_efficiency=0.25,
               kv_walk_s_per_token=1e-8)
    assert d.l2_memory_s(1e6, 4, 1e13) == pytest.approx(0.6e-6, rel=1e-12)
    assert d.l2_memory_s(1e6, 0, 1e13) == pytest.approx(1.2e-6, rel=1e-12)
    assert d.kv_s(1e6, 4, 1e12, 10, False, l2_bandwidth=1e13) == pytest.approx(0.6e-6, rel=1e-12)
    assert d.kv_s(1e6, 4, 1e12, 10, False) == pytest.approx(3e-6, rel=1e-12)
    assert d.kv_s(1e6, 4, 1e12, 100, False, l2_bandwidth=1e13) == pytest.approx(1e-6, rel=1e-12)


def test_prefill_needs_a_bf16_peak():
    """The prefill curve is a fraction of the bf16 peak (module doc): on the T4 (fp16, int8, int4, fp32 tensor
    rates; no bf16) a prefill call keeps the roofline (None), as on the H100 it does not (kills
    attention_cost__mutmut_143, `or` -> `and`)."""
    op = _op("prefill", 1, 128, 128)
    assert _cost(op, "trtllm_attention") is not None
    assert _cost(op, "trtllm_attention", "flexgen_t4") is None

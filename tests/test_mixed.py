"""Mixed-batch lowering: a 2-sequence Llama-2-7B fp16 iteration, FLOPs and bytes derived by hand."""

import networkx as nx
import pytest

from sim.core.lowering import FormatPolicy, lower
from sim.core.mixed import lower_iteration
from sim.core.model import load_model

M = load_model("llama2-7b")
H, F, V, L, HEADS, D = 4096, 11008, 32000, 32, 32, 128
# A prefill chunk of 3 tokens after a cached prefix of 2 (kv 5), and a decode sequence at kv 8.
SEQS = ((3, 5), (1, 8))
T = 4  # tokens in the iteration


@pytest.fixture(scope="module")
def it():
    return lower_iteration(M, SEQS)


def test_gemms_run_over_all_tokens(it):
    assert it.op("L0.q_proj").flops == 2 * T * H * H
    assert it.op("L0.q_proj").bytes_by_role() == dict(weight=H * H * 2, activation=2 * T * H * 2, kv=0)
    assert it.op("L3.down_proj").flops == 2 * T * F * H
    assert it.op("lm_head").flops == 2 * 2 * H * V          # one sampled row per sequence


def test_attention_is_ragged(it):
    # Prefill chunk: 32 heads x 3 queries x 5 keys = 480 pairs; decode: 32 x 1 x 8 = 256.
    assert it.op("L0.qk.prefill").flops == 2 * 480 * D
    assert it.op("L0.softmax.prefill").flops == 5 * 480
    assert it.op("L0.av.decode").flops == 2 * 256 * D
    assert it.op("L0.qk.prefill").bytes_by_role() == dict(kv=5 * H * 2, activation=3 * H * 2 + 480 * 2, weight=0)
    assert it.op("L0.qk.decode").bytes_by_role() == dict(kv=8 * H * 2, activation=1 * H * 2 + 256 * 2, weight=0)


def test_kv_totals(it):
    # Per layer: K and V read over 5 + 8 keys, and 4 new K and V rows appended.
    assert it.bytes_by_role()["kv"] == L * (2 * 13 * H * 2 + 2 * T * H * 2)


def test_flash_counts_causal_keys():
    it = lower_iteration(M, SEQS, flash_attention=True, num_layers=1)
    # Prefill: each of 3 queries sees on average 5 - (3 - 1)/2 = 4 keys -> 32 x 3 x 4 = 384; decode 256.
    assert it.op("L0.attention.prefill").flops == 384 * (4 * D + 5)
    assert it.op("L0.attention.decode").flops == 256 * (4 * D + 5)


def test_dag_waits_for_both_attention_kernels(it):
    assert nx.is_directed_acyclic_graph(it.dag.to_networkx())
    assert set(it.deps("L0.o_proj")) == {"L0.av.prefill", "L0.av.decode"}
    assert set(it.deps("L0.qk.decode")) == {"L0.rope", "L0.kv_append"}
    # The prefill kernel is issued after the decode kernel.
    assert set(it.deps("L0.qk.prefill")) == {"L0.rope", "L0.kv_append", "L0.av.decode"}


@pytest.mark.parametrize("phase,batch,q,kv", [("decode", 4, 1, 300), ("prefill", 2, 64, 64)])
@pytest.mark.parametrize("flash", [False, True])
def test_uniform_batch_matches_lower(phase, batch, q, kv, flash):
    fmt = FormatPolicy()
    a = lower(M, phase, batch, q, kv, fmt, flash, num_layers=2)
    b = lower_iteration(M, ((q, kv),) * batch, fmt, flash, num_layers=2)
    assert len(a) == len(b)
    assert b.flops == pytest.approx(a.flops, rel=1e-12)
    assert b.bytes_by_role() == a.bytes_by_role()


def test_bad_sequence():
    with pytest.raises(ValueError):
        lower_iteration(M, ((4, 3),))

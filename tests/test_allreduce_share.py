"""scripts/allreduce_share.py (issue 28): the table-implied all-reduce share of a TP decode step, on a slice.

The expected figures are aiconfigurator's H100 rows, read by hand from shared/validation/aic (TRT-LLM
1.3.0rc20 bf16 `torch_flow` GEMMs at M = 8, its decode attention, its custom all-reduce, NCCL 2.29.2)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("allreduce_share", ROOT / "scripts" / "allreduce_share.py")
share = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = share   # its dataclasses look their module up while being defined
spec.loader.exec_module(share)

LLAMA70 = "meta-llama/Llama-3.1-70B"


@pytest.fixture
def tables(shared_validation: Path, monkeypatch):
    if not (shared_validation / "aic" / "comm_h100.csv.gz").is_file():
        pytest.skip("shared/validation/aic is not present")
    monkeypatch.setattr(share, "SHARED", shared_validation)
    share.table.cache_clear()
    yield
    share.table.cache_clear()


def test_layer_composed_from_the_rows(tables):
    # Llama-70B at TP4, batch 8: QKV (2560, 8192) 20.171 us, O (8192, 2048) 15.285, gate-up N = 14336 halfway
    # between the measured 12288 (77.344) and 16384 (95.648), down (8192, 7168) 43.467; attention 16 / 2 heads,
    # batch 8, step 1023: 12.795; two custom all-reduces of 8 x 8192 x 2 = 131072 B at 4 GPUs: 4.263 each.
    layer = share.table_layer(share.Case(LLAMA70, 4, "trtllm", 8, 1024))
    assert layer["gemm"] == pytest.approx(20.171 + 15.285 + (77.344 + 95.648) / 2 + 43.467, rel=1e-9)
    assert layer["attention"] == pytest.approx(12.795, rel=1e-9)
    assert layer["all_reduce"] == pytest.approx(2 * 4.263, rel=1e-9)


def test_engine_hands_large_messages_to_nccl(tables):
    # TRT-LLM's workspace is 8 MiB above two ranks: 16 MiB at 4 GPUs is NCCL's row (99.01 us), 1 MiB its own
    us, source = share.all_reduce_us(share.ENGINES["trtllm"], 16 * 1024 * 1024, 4)
    assert (source, us) == ("nccl", pytest.approx(99.01))
    assert share.all_reduce_us(share.ENGINES["trtllm"], 1024 * 1024, 4)[1] == "trtllm_custom_ar"


def test_sim_share_within_target_on_a_slice(tables):
    # the target (20%) on one case each of TP4 and TP8: this fails if sim's collective or GEMM costs drift
    machine = share.load_machine("h100_sxm")
    for case in (share.Case(LLAMA70, 4, "trtllm", 8, 1024), share.Case(LLAMA70, 8, "vllm", 32, 1024)):
        r = share.row(case, machine)
        assert 0 < r["table_share"] < 1 and abs(r["rel"]) <= 0.20, (case, r)


def test_bad_model_is_one_line_exit_2(capsys):
    assert share.main(["--models", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown model or engine 'nope'") and err.count("\n") == 1

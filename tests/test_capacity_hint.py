"""The hint of a CapacityError follows what overflows (found by a new-user trial: a run with int4
weights whose KV cache did not fit was told to try int4 weights, and an H100 user to try
--hw a6000_offload)."""

from hw_models.capacity_hint import capacity_hint
from hw_models.machine import load_machine
from sim.apps.cli import main
from sim.core.workload import Workload
from tests.conftest import ROOT

GB = 1e9


def _wl(weights="int4", kv="bf16", **kw) -> Workload:
    return Workload(model="llama3-8b", formats={"weights": weights, "activations": "bf16", "kv_cache": kv}, **kw)


def test_a_kv_cache_overflow_is_not_told_to_narrow_int4_weights():
    hint = capacity_hint(load_machine("h100_sxm"), _wl(), {"weights": 4 * GB, "kv_cache": 270 * GB, "activations": 1 * GB})
    assert "formats.weights" not in hint
    assert "shorter context" in hint and "formats.kv_cache=fp8_e4m3" in hint
    assert "--hw h100_offload" in hint and "a6000_offload" not in hint      # the offload preset of this GPU


def test_an_8bit_kv_cache_is_not_suggested_twice():
    hint = capacity_hint(load_machine("h100_sxm"), _wl(kv="fp8_e4m3"), {"weights": 4 * GB, "kv_cache": 270 * GB})
    assert "formats.kv_cache" not in hint


def test_weights_overflow_suggests_a_narrower_format_and_more_gpus():
    hint = capacity_hint(load_machine("rtx4090"), _wl("bf16"), {"weights": 141 * GB, "kv_cache": 0.2 * GB})
    assert "narrower weight format than bf16" in hint and "parallel:" in hint
    assert "a6000_offload, h100_offload" in hint          # no RTX 4090 offload preset: the list


def test_activations_overflow_suggests_fused_attention_where_off():
    roles = {"weights": 4 * GB, "kv_cache": 270 * GB, "activations": 1100 * GB}
    assert "flash_attention=true" in capacity_hint(load_machine("h100_sxm"), _wl(), roles)
    assert "flash_attention" not in capacity_hint(load_machine("h100_sxm"), _wl(flash_attention=True), roles)


def test_the_hint_reaches_the_one_line_error(capsys):
    assert main(["run", str(ROOT / "workloads/llama13b_decode.yaml"), "--hw", "h100_sxm", "--set", "batch=256",
                 "--set", "prompt_len=8000", "--set", "flash_attention=true", "--set", "formats.weights=int4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "KV cache is the largest part" in err[0] and "formats.weights=int4" not in err[0]

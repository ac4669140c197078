"""A stack's quantized-GEMM family that needs a tensor-core rate the GPU lacks: the error names the workload's weight
format and a way out that works (a trial's `--set stack=trtllm --set formats.weights=mxfp4` on an H100 read "needs a
native nvfp4 rate ... use an emulated family", naming neither the mxfp4 it was given nor a family)."""

from sim.apps.cli import main
from tests.conftest import ROOT

W13 = str(ROOT / "workloads" / "llama13b_decode.yaml")


def test_mxfp4_under_trtllm_on_hopper_names_the_format_and_the_way_out(tmp_path, capsys):
    args = ["run", W13, "--hw", "h100_sxm", "--set", "formats.weights=mxfp4", "--set", "flash_attention=true", "-q"]
    assert main([*args, "--set", "stack=trtllm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "mxfp4 weights run quant_gemm family blackwell_block_scaled, priced at the nvfp4 tensor-core rate" in err
    assert "`base: trtllm` and quant_gemm mapping mxfp4 to an emulated family (fp4_marlin_emulated" in err
    stack = tmp_path / "trt_emulated.yaml"   # the way out the message names
    stack.write_text("name: trt_emulated\nbase: trtllm\nquant_gemm:\n  mxfp4: fp4_marlin_emulated\n")
    assert main([*args, "--set", f"stack={stack}"]) == 0

"""Repetition / frequency / presence penalties' GPU work (hw_models.stack.sampler.PenaltyPass, the vllm stack's
`penalties`): the pass by hand from the bytes counted in vLLM's code, where it applies and where it does not, the
ML.ENERGY replay asking for it (tests/test_mlenergy.py) and a bad value (tests/test_sampler.py)."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from hw_models.registry import mapper_for
from hw_models.stack.spec import load_stack
from sim.apps.serve.iteration import features
from sim.apps.serve.spec import ServeFile
from sim.apps.serve.stepcost import ExactCost
from sim.core.model import load_model
from sim.core.schema import validate_mapping

H100_BW = 3.35e12          # h100_sxm.yaml
H100_IDLE_W, H100_ACTIVE_W = 117.1, 230.0
HBM_J_PER_BYTE = 4.0e-11
LLAMA3_VOCAB = 128256
# vllm.yaml: 15 kernels at ~2 us; 85 bytes an entry: prompt and output bin counts 2 x (8 zeroed + 8 read + 1
# mask), the repetition kernel 4 + 1 + 1 + 4, frequency 8 + 4 and 4 + 4 + 4, presence 1 + 4 and 4 + 4 + 4
FIXED_S, BYTES = 30e-6, 85.0


def test_shipped_figures_are_the_count():
    p = load_stack("vllm").penalties
    assert p.fixed_s == pytest.approx(FIXED_S) and p.bytes_per_logit == 2 * (8 + 8 + 1) + 10 + 12 + 12 + 5 + 12
    assert load_stack("vllm-v0").penalties == p         # V0 runs the same apply_penalties
    assert load_stack("sglang").penalties is None and load_stack("trtllm").penalties is None


def test_seconds_by_hand():
    p = load_stack("vllm").penalties
    # 96 rows of Llama-3's vocabulary: 30 us + 96 x 128,256 x 85 B / 3.35 TB/s = 30 + 312.4 us
    assert p.seconds(96, LLAMA3_VOCAB, H100_BW) == pytest.approx(FIXED_S + 96 * LLAMA3_VOCAB * BYTES / H100_BW)
    assert p.seconds(96, LLAMA3_VOCAB, H100_BW) == pytest.approx(342.4e-6, rel=1e-3)
    assert p.seconds(0, LLAMA3_VOCAB, H100_BW) == 0.0
    assert p.dram_bytes(96, LLAMA3_VOCAB) == 96 * LLAMA3_VOCAB * BYTES and p.dram_bytes(-1, LLAMA3_VOCAB) == 0.0
    t = [p.seconds(r, LLAMA3_VOCAB, H100_BW) for r in range(0, 1025)]
    assert all(b > a for a, b in zip(t, t[1:]))        # every row adds its vocabulary's passes


def serve_file(stack: str, sampling: str = "greedy", penalties: bool = True, tp: int = 1) -> ServeFile:
    s = dict(arrivals=dict(process="poisson", rate=6.0, num_requests=4, seed=5),
             lengths=dict(prompt=dict(dist="uniform", low=32, high=64), output=dict(dist="uniform", low=4, high=8)))
    return validate_mapping(ServeFile, dict(name="t", model="llama3-8b", flash_attention=True, stack=stack,
                                            sampling=sampling, penalties=penalties,
                                            parallel=dict(tp=tp, **({"topology": "dgx_h100"} if tp > 1 else {})),
                                            serving=s), "t.yaml", "a serving file")


def test_a_penalised_step_adds_the_pass_serially_with_its_energy():
    """vllm-v0 (serial host): a greedy iteration of 96 sequences grows by the pass's seconds, its energy by idle +
    activity power over them and its DRAM bytes at the HBM's energy per byte."""
    h100, model, it = load_machine("h100_sxm"), load_model("llama3-8b"), features([(1, 300)] * 96)
    plain = ExactCost(h100, serve_file("vllm-v0", penalties=False), model)(it)
    pen = ExactCost(h100, serve_file("vllm-v0"), model)(it)
    t = FIXED_S + 96 * LLAMA3_VOCAB * BYTES / H100_BW
    assert pen[0] - plain[0] == pytest.approx(t, rel=1e-9)
    assert pen[1] - plain[1] == pytest.approx((H100_IDLE_W + H100_ACTIVE_W) * t
                                              + 96 * LLAMA3_VOCAB * BYTES * HBM_J_PER_BYTE, rel=1e-9)


def test_top_p_and_penalties_add():
    h100, model = load_machine("h100_sxm"), load_model("llama3-8b")
    both = mapper_for(h100, serve_file("vllm", "top_p"), model).sampler(64)
    top_p = mapper_for(h100, serve_file("vllm", "top_p", penalties=False), model).sampler(64)
    pen = mapper_for(h100, serve_file("vllm"), model).sampler(64)
    assert both[0] == pytest.approx(top_p[0] + pen[0]) and both[1] == pytest.approx(top_p[1] + pen[1])
    # every TP rank applies them to the whole vocabulary (the logits are all-gathered first)
    two = mapper_for(h100, serve_file("vllm", tp=2), model).sampler(64)
    assert two[0] == pytest.approx(pen[0]) and two[1] > pen[1]


@pytest.mark.parametrize("stack, penalties", [("vllm", False), ("sglang", True), ("trtllm", True)])
def test_no_penalty_work_where_none_is_asked_or_modelled(stack, penalties):
    m = mapper_for(load_machine("h100_sxm"), serve_file(stack, penalties=penalties), load_model("llama3-8b"))
    assert m.sampler(128) == (0.0, 0.0)


def test_penalties_on_a_stack_without_the_pass_warn(tmp_path, capsys):
    from sim.apps.cli import main
    path = tmp_path / "w.yaml"
    path.write_text("model: llama3-8b\nbatch: 4\ngen_len: 4\nstack: trtllm\npenalties: true\n")
    capsys.readouterr()
    assert main(["run", str(path), "--hw", "h100_sxm", "-q"]) == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        f"warning: {path}: penalties: true costs nothing here: stack 'trtllm' models no penalty pass "
        "(the vllm stacks model vLLM's, hw_models/stack/sampler.py)"]
    path.write_text("model: llama3-8b\nbatch: 4\ngen_len: 4\nstack: vllm\npenalties: true\n")
    assert main(["run", str(path), "--hw", "h100_sxm", "-q"]) == 0
    assert capsys.readouterr().err.strip() == ""

"""scripts/distserve_predictions.py: each DistServe input stream becomes the serving file its system implies
(vLLM 0.2.3: the V0 scheduler under vllm-v0-eager on one GPU; DistServe: a TP-2 prefill pool and a TP-1 decode
pool), and a two-request stream replays to completion without shared data."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from sim.apps.serve.spec import serve_file_from_dict

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("distserve_predictions", ROOT / "scripts" / "distserve_predictions.py")
ds = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = ds
spec.loader.exec_module(ds)

STREAM = ('[{"prompt_len": 55, "output_len": 4, "start_time": 0.0}, '
          '{"prompt_len": 829, "output_len": 17, "start_time": 0.25}]')


def test_streams_become_their_systems_serving_files(tmp_path):
    path = tmp_path / "vllm-2-8.exp"
    path.write_text(STREAM)
    vllm = serve_file_from_dict(ds.workload(path, "vllm"), path.name)
    assert vllm.stack == "vllm-v0-eager" and vllm.serving.disaggregated is None
    sched = vllm.serving.scheduler
    assert (sched.kind, sched.max_num_seqs, sched.max_num_batched_tokens, sched.gpu_memory_utilization) == \
        ("vllm-v0", 1024, 16384, 0.95)
    dist = serve_file_from_dict(ds.workload(path, "distserve-c21d11"), path.name)
    pools = dist.serving.disaggregated
    assert dist.stack == "vllm-v0" and pools.prefill.parallel == {"tp": 2, "topology": "dgx_a100"}
    assert pools.decode.parallel is None and pools.transfer.topology == "dgx_a100"


def test_a_stream_replays_to_completion(tmp_path):
    path = tmp_path / "vllm-2-8.exp"
    path.write_text(STREAM)
    for system in ("vllm", "distserve-c21d11"):
        p = ds.predict(path, system)
        assert p["completed"] == 2 and 0 < p["ttft"]["mean"] < p["e2e"]["mean"] and p["tpot"]["mean"] > 0

#!/usr/bin/env python3
"""Write tests/data/synthetic_cuda_L1.{trace.json,meta.json}: a small CUDA-like
Chrome trace laid out as scripts/capture_trace.py --device cuda lays one out,
with every time chosen by hand so tests can check the parser and timing rules.

Model: one Llama-2-7B layer, bf16, batch 1, prompt 8, 2 decode steps (the
unfused-attention op names of sim.core.lowering, 20 ops a step). Host thread
(pid 1, tid 1): each op is a `record_function` range holding one
`cudaLaunchKernel` (cuda_runtime, with a correlation id); the device (pid 0,
tid 7) runs one kernel per op. Times in us:

  prefill (step0, starts at 1000): op i at +2+12i for 10, launch at op+2,
      kernel 50 us starting 5 us after its launch or when the previous one ends
      (the device is the bottleneck: the kernels run back to back from 1009);
      step annotation 1010 long (until the last kernel ends + 1).
      -> device 20 x 50 = 1000, host launch 20 x 10 = 200, busy span 1000, wall 1010.
  decode (step1 at 3000, step2 at 4000): op i at +2+35i for 30, launch at op+5,
      kernel 4 us starting 2 us after its launch (the device waits for the host);
      step annotation 700 long.
      -> device 20 x 4 = 80, host launch 20 x 30 = 600 (7.5x: launch-bound),
         busy span (35 x 19 + 4) = 669, wall 700.

    python scripts/make_synthetic_cuda_trace.py   # rewrites the two files
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "scripts"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from capture_trace import expected_ops  # noqa: E402  (scripts/, beside this file)
from sim.core.model import load_model  # noqa: E402
from sim.apps.script_help import no_options  # noqa: E402

PREFIX = ROOT / "tests" / "data" / "synthetic_cuda_L1"
OPS = expected_ops(1)
# (step start, op pitch, op range, launch offset in op, kernel delay after launch, kernel, step length)
STEPS = [(1000, 12, 10, 2, 5, 50, 1010), (3000, 35, 30, 5, 2, 4, 700), (4000, 35, 30, 5, 2, 4, 700)]
HOST, DEVICE = dict(pid=1, tid=1), dict(pid=0, tid=7)


def events() -> list[dict]:
    ev, corr = [], 0
    for j, (start, pitch, rng, launch_at, delay, kern, length) in enumerate(STEPS):
        phase = "prefill" if j == 0 else "decode"
        ev.append(dict(ph="X", cat="user_annotation", name=f"step{j}.{phase}", ts=start, dur=length, **HOST))
        free = 0.0
        for i, name in enumerate(OPS):
            corr += 1
            t = start + 2 + pitch * i
            ev.append(dict(ph="X", cat="user_annotation", name=name, ts=t, dur=rng, **HOST))
            ev.append(dict(ph="X", cat="cuda_runtime", name="cudaLaunchKernel", ts=t + launch_at, dur=3,
                           args=dict(correlation=corr), **HOST))
            k0 = max(t + launch_at + delay, free)
            free = k0 + kern
            ev.append(dict(ph="X", cat="kernel", name=f"kernel_{name}", ts=k0, dur=kern,
                           args=dict(correlation=corr), **DEVICE))
    return ev


def meta() -> dict:
    return {"tool": "scripts/capture_trace.py", "note": "synthetic: scripts/make_synthetic_cuda_trace.py",
            "device": "cuda", "device_name": "NVIDIA H200", "dtype": "bf16", "flash": False,
            "model": load_model("llama2-7b").to_dict(), "layers": 1, "batch": 1, "prompt": 8, "decode_steps": 2,
            "steps": [{"step": j, "phase": "prefill" if j == 0 else "decode", "wall_us": s[-1]}
                      for j, s in enumerate(STEPS)]}


def main() -> None:
    no_options(__doc__)
    doc = {"schemaVersion": 1, "deviceProperties": [{"name": "NVIDIA H200"}], "traceEvents": events(),
           "traceName": PREFIX.name + ".trace.json"}
    PREFIX.with_name(PREFIX.name + ".trace.json").write_text(json.dumps(doc, indent=0) + "\n")
    PREFIX.with_name(PREFIX.name + ".meta.json").write_text(json.dumps(meta(), indent=1) + "\n")
    print(f"wrote {PREFIX}.trace.json and .meta.json")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Tensor parallelism against measurements (docs/parallelism.md):

1. vidur's per-op tables (shared/validation/vidur/a100/*/mlp.csv, PROVENANCE §1.1): the
   a100_80g preset calibrated on the TP1 rows only (every A100 model), then each TP 2/4/8
   row costed on the per-rank graph hw_models.gpu.tensor_parallel.shard makes from the
   TP1 layer: per-op MAPE out of sample. Twice: with no stack (`sim calibrate`) and under
   the sarathi stack, the kernels vidur profiled (`sim calibrate --stack sarathi`).
2. splitwise's Llama-2-70B prompt and token times on DGX-A100 / DGX-H100 at TP 2/4/8
   (shared/validation/splitwise-sim/perf_model.csv, PROVENANCE §3): simulated TTFT and
   TPOT with parallel: {tp, topology} vs the median of the repetitions.

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/parallel_validation.py
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dataclasses  # noqa: E402

import pandas as pd  # noqa: E402

from hw_models.gpu.mapper import GpuMapper  # noqa: E402
from hw_models.gpu.tensor_parallel import shard  # noqa: E402
from hw_models.machine import load_machine  # noqa: E402
from hw_models.registry import simulate  # noqa: E402
from sim.apps.trace.calibrate import calibrate  # noqa: E402
from sim.apps.script_help import no_options  # noqa: E402
from sim.apps.trace.parser import load_trace  # noqa: E402
from sim.apps.trace.shapes import vidur_layer  # noqa: E402
from sim.apps.trace.stack_calibrate import calibrate_stack  # noqa: E402
from sim.apps.trace.validate import trace_workload  # noqa: E402
from sim.core.errors import SimError  # noqa: E402
from sim.core.workload import Workload  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402

SHARED = shared_validation_dir()
# vidur's layer leaves attention out: its output (ctx) and the q/k slice RoPE reads enter sharded.
VIDUR_SHARDED = frozenset({"ctx", "qkv.qk"})
SPLITWISE_HW = {"a100-80gb": ("a100_80g", "dgx_a100"), "h100-80gb": ("h100_sxm", "dgx_h100")}


def vidur_tp(machine_name: str = "a100_80g", stack: str | None = None, every: int = 1) -> pd.DataFrame:
    """Per-op error of the TP > 1 rows (every `every`-th), `machine_name` calibrated on the TP1 rows only
    (under `stack`)."""
    traces = [t for p in sorted((SHARED / "vidur" / "a100").glob("*/mlp.csv")) for t in load_trace(p)]
    base = load_machine(machine_name)
    if stack is None:
        cal = calibrate(traces, base, use_step=lambda t, s: s.tp == 1).machine
    else:
        tp1 = [dataclasses.replace(t, ops=[o for o in t.ops if t.steps[o.step].tp == 1]) for t in traces]
        cal = calibrate_stack(tp1, base, stack).cal.machine
    rows = []
    for trace in traces:
        per_step = {}   # a step's ops share one sharded layer: built once, not per op
        # One mapper per trace: GpuMapper.cost reads the machine, the workload's compute settings and its
        # stack, the same for every step of a trace, never the step's batch or lengths.
        mapper = None
        for m in trace.medians()[::every]:
            step = trace.steps[m.step]
            if step.tp == 1 or m.duration_s <= 0:
                continue
            if m.step not in per_step:
                per_step[m.step] = shard(vidur_layer(trace.model, step.tokens, 1), trace.model, step.tp,
                                         VIDUR_SHARDED)[0]
            mapper = mapper or GpuMapper(cal, trace_workload(trace, step, stack), trace.model)
            sim = mapper.cost(per_step[m.step].op(m.name)).duration_s
            rows.append(dict(model=Path(trace.source).parent.name, tp=step.tp, op=m.name, tokens=step.tokens,
                             measured_s=m.duration_s, simulated_s=sim))
    d = pd.DataFrame(rows)
    d["abs_err"] = (d.simulated_s / d.measured_s - 1).abs()
    return d


def splitwise_measured() -> pd.DataFrame:
    """Median prompt and token time per (hw, tp, prompt, batch) of Llama-2-70B on the two DGX
    nodes (every prompt length and batch the file has; token_size only sets how many steps
    were averaged). Rows whose prompt time falls as the batch grows (TP2 batch 64 on both
    nodes, PROVENANCE §3 "filter outliers") are dropped."""
    d = pd.read_csv(SHARED / "splitwise-sim" / "perf_model.csv")
    d = d[(d.model == "llama2-70b") & d.hardware.isin(SPLITWISE_HW)]
    keys = ["hardware", "tensor_parallel", "prompt_size", "batch_size"]
    m = d.groupby(keys).agg(prompt_meas_ms=("prompt_time", "median"), token_meas_ms=("token_time", "median"),
                            gen=("token_size", "median")).reset_index().sort_values(keys)
    prev = m.groupby(keys[:3]).prompt_meas_ms.cummax().groupby([m[k] for k in keys[:3]]).shift()
    return m[~(m.prompt_meas_ms < prev)].rename(columns={"hardware": "hw", "tensor_parallel": "tp",
                                                          "prompt_size": "prompt", "batch_size": "batch"})


def splitwise(stack: str | None = None, hws: tuple[str, ...] = tuple(SPLITWISE_HW)) -> pd.DataFrame:
    """Simulated TTFT and TPOT (flash attention, fp16, fitted collectives, `stack`) vs measured,
    on the nodes `hws` (perf_model.csv hardware names)."""
    rows = []
    m = splitwise_measured()
    for r in m[m.hw.isin(hws)].itertuples(index=False):
        device, topo = SPLITWISE_HW[r.hw]
        w = Workload(name="splitwise", model="llama2-70b", batch=int(r.batch), prompt_len=int(r.prompt),
                     gen_len=int(r.gen), flash_attention=True, stack=stack,
                     parallel={"tp": int(r.tp), "topology": topo})
        try:
            res = simulate(w, load_machine(device), detail=False)
        except SimError as e:
            print(f"skipped {r}: {str(e)[:80]}")
            continue
        rows.append(dict(r._asdict(), prompt_sim_ms=res.ttft_s * 1e3, token_sim_ms=res.tpot_s * 1e3))
    out = pd.DataFrame(rows)
    out["prompt_err"] = out.prompt_sim_ms / out.prompt_meas_ms - 1
    out["token_err"] = out.token_sim_ms / out.token_meas_ms - 1
    out["batches"] = pd.cut(out.batch, [0, 1, 8, 64], labels=["1", "2-8", "16-64"])
    return out


def regimes(stacks=(None, "vllm", "vllm-v0", "torch-eager", "vllm-v0-eager")) -> pd.DataFrame:
    """MAPE per regime (node, phase, tp, batch range) under each stack: one column per stack."""
    cols = {}
    for stack in stacks:
        s = splitwise(stack)
        long = pd.concat([s.assign(phase=ph, err=s[f"{ph}_err"].abs()) for ph in ("prompt", "token")])
        cols[stack or "none"] = long.groupby(["hw", "phase", "tp", "batches"], observed=True).err.mean()
        cols[(stack or "none") + " all"] = long.groupby(["hw", "phase"]).err.mean()
    return pd.DataFrame({k: v for k, v in cols.items() if not k.endswith(" all")}), \
        pd.DataFrame({k[:-4]: v for k, v in cols.items() if k.endswith(" all")})


def main() -> int:
    no_options(__doc__)
    if not SHARED.is_dir():
        print(f"{SHARED} not found")
        return 0
    warnings.simplefilter("ignore")
    for stack in (None, "sarathi"):
        v = vidur_tp(stack=stack)
        print(f"vidur A100 per-op MAPE, TP 2/4/8 (calibrated on TP1 rows only), stack {stack or 'none'}:")
        print(v.pivot_table(index="model", columns="tp", values="abs_err", aggfunc="mean").map("{:.1%}".format))
        print("by op:", v.pivot_table(index="op", columns="tp", values="abs_err", aggfunc="mean")
              .map("{:.1%}".format).to_string())
        print(f"all TP>1 rows: {v.abs_err.mean():.1%} MAPE over {len(v)} ops\n")
    pd.set_option("display.width", 200)
    per_regime, overall = regimes()
    print("splitwise Llama-2-70B MAPE per regime (columns: the workload's stack):")
    print(per_regime.map("{:.1%}".format).to_string())
    print(overall.map("{:.1%}".format).to_string())
    print(splitwise().round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The H200 section of docs/validation.md (called by scripts/validation_report.py).

The uncalibrated `h200` preset (datasheet figures) against the H200 captures
committed under traces/h200 (scripts/capture_trace.py --device cuda on one
H200; traces/README.md). Nothing is fitted here: every figure is the
datasheet model's error, per op by kind and per step from device time
(sim.apps.trace.timing), with the host wall time beside it, not compared.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from hw_models.machine import load_machine
from sim.apps.trace.parser import load_trace
from sim.apps.trace.records import Trace
from sim.apps.trace.plots import scatter
from sim.apps.trace.replay import replay
from sim.apps.trace.timing import step_timings
from sim.apps.trace.validate import Validation, mape, validate
from md_table import pct as _pct, table as _table  # scripts/, beside this file
from validation_h200_stacks import stacks_section

ROOT = Path(__file__).resolve().parent.parent
H200_DIR = ROOT / "traces" / "h200"
REPLAY_TARGET = "h100_sxm"


def _stem(t: Trace) -> str:
    return Path(t.source).name.split(".")[0]


def _kind_rows(v: Validation) -> list[list[str]]:
    rows = []
    for kind, m in v.mape_by_kind().items():
        errs = [r.error for r in v.ops if r.kind == kind]
        rows.append([kind, str(len(errs)), _pct(m), f"{statistics.median(errs):+.1%}"])
    rows.append(["**overall**", str(len(v.ops)), f"**{_pct(v.mape)}**", f"{statistics.median(r.error for r in v.ops):+.1%}"])
    return rows


def _trace_rows(traces: list[Trace], v: Validation) -> list[list[str]]:
    rows = []
    for t in traces:
        ops = [r for r in v.ops if r.source == t.source]
        steps = [s for s in v.steps if s.source == t.source]
        pre = [s for s in steps if s.step.endswith("prefill")]
        dec = [s for s in steps if s.step.endswith("decode")]
        tm = [x for x in step_timings(t) if x.phase == "decode"]
        wall = statistics.median(x.host_wall_s for x in tm)
        dev = statistics.median(x.ops_s for x in tm)
        launch = statistics.median(x.launch_factor for x in tm)
        rows.append([_stem(t), str(len(ops)), _pct(mape(ops)), f"{pre[0].error:+.1%}", _pct(mape(dec)),
                     f"{max(abs(s.error) for s in dec):.1%}", f"{dev * 1e3:.2f}", f"{wall * 1e3:.1f}", f"{launch:.1f}x"])
    return rows


def _replay_rows(traces: list[Trace]) -> tuple[list[list[str]], dict]:
    target = load_machine(REPLAY_TARGET)
    rows, figures = [], {}
    for t in traces:
        r = replay(t, target)
        wall = sum(s.timing.host_wall_s for s in r.steps)
        rows.append([_stem(t), f"{r.measured_s * 1e3:.1f}", f"{wall * 1e3:.1f}", f"{r.predicted_s * 1e3:.1f}",
                     f"{r.speedup('predicted'):.2f}x", f"{r.scaled_s * 1e3:.1f}", f"{r.speedup('scaled'):.2f}x"])
        figures[f"h200.replay_{REPLAY_TARGET}_scaled_speedup.{_stem(t)}"] = r.speedup("scaled")
    return rows, figures


def h200_section(img: Path) -> tuple[str, dict]:
    traces = [load_trace(p)[0] for p in sorted(H200_DIR.glob("*.trace.json.gz"))]
    machine = load_machine("h200")
    v = validate(traces, machine)
    scatter(v.ops, "H200 (uncalibrated h200 preset): simulated vs measured device time", img / "validation_h200.png")
    pre = [s for s in v.steps if s.step.endswith("prefill")]
    dec = [s for s in v.steps if s.step.endswith("decode")]
    figures = {"h200.op_mape": v.mape, "h200.prefill_step_mape": mape(pre), "h200.decode_step_mape": mape(dec)}
    figures.update({f"h200.op_mape.{k}": m for k, m in v.mape_by_kind().items()})
    replay_rows, replay_figures = _replay_rows(traces)
    figures.update(replay_figures)
    stacks_text, stacks_figures = stacks_section(traces)
    figures.update(stacks_figures)
    text = f"""## H200: this project's captures (traces/h200), uncalibrated preset

Data: traces/h200 -- `scripts/capture_trace.py --device cuda` on one NVIDIA H200 SXM (132 SMs, driver 580.159.04,
CUDA 13.0, torch 2.11.0+cu130; traces/README.md), {len(traces)} Chrome traces of 4-layer Llama-2-7B/13B/70B and
Llama-3-8B stacks, fp16/bf16, batch 1-32, prompt 128-4096, one prefill + 4-8 decode steps, unfused (`qk`/`softmax`/`av`)
and `--flash` attention. The model is the **uncalibrated `h200` preset** (datasheet peaks, the survey's 0.80/0.85
efficiency caps, 3 us launch overhead per op): nothing is fitted to these traces, so every figure is out of sample.
An op's measured time is its kernels' device time (correlation ids, as for the A6000 traces); a step's is the sum of
its ops' device times, compared with the sum of the same ops simulated. The host wall time of a step is shown, not
compared: in these eager captures under the profiler a decode step's wall time is the host launching kernels.
The 32-layer `llama2-7b_L32_fp16_b1_p512_d8_cuda` run has only an `ops.csv`, whose CUDA device times come from the
profiler's event API and disagree with the Chrome trace's kernels where both exist (some ops missing -- `L3.qk`,
`L3.av` in every step --, some counted twice); it is left out.

### MAPE by op kind (device time)

{_table(["op kind", "ops", "MAPE", "median error"], _kind_rows(v))}

### Per trace: ops, and steps from device time

"Launch" = median decode step's host launch time (sum of its op ranges) over its device time: above 1x the capture
was launch-bound (the device waited for the host).

{_table(["trace", "ops", "per-op MAPE", "prefill step error", "decode step MAPE", "max decode step error",
         "median decode device (ms)", "median decode host wall (ms)", "launch"], _trace_rows(traces, v))}

Per step from device time: prefill MAPE {_pct(mape(pre))} ({len(pre)} steps), decode MAPE {_pct(mape(dec))}
({len(dec)} steps, max {max(abs(s.error) for s in dec):.1%}).

### Replay onto {REPLAY_TARGET}

`sim replay TRACE --hw {REPLAY_TARGET}` (source inferred as `h200` from the trace's device name). "Measured" is
the device time over all steps; "host wall" the steps' wall times (what the replay used to call measured).
Predicted = the {REPLAY_TARGET} model alone; scaled = each measured op x {REPLAY_TARGET} / h200 predicted.
The H100 SXM has the H200's compute and 3.35 instead of 4.8 TB/s, so it should not come out faster.

{_table(["trace", "measured device (ms)", "host wall (ms)", "predicted (ms)", "speed-up", "scaled (ms)",
         "speed-up"], replay_rows)}

![H200 scatter](img/validation_h200.png)

{stacks_text}"""
    return text, figures

"""Per-machine tables under software stacks for docs/validation.md (issue 15 item 7):
the RTX A6000 (vidur's profiler traces, MaverIQ) and this machine's CPU (traces/cpu),
called by scripts/validation_report.py with the calibration / test split its
sections already use. Every figure is out of sample (the test set only).

Per configuration (preset x stack): per-op MAPE by op kind, the per-layer error
(per step and decoder layer, the sum of the layer's measured ops against the sum
of the same ops simulated) and the per-step error (validate's step rows).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

from hw_models.machine import Machine
from sim.apps.trace.records import Trace
from sim.apps.trace.stack_calibrate import StackCalibration, calibrate_stack
from sim.apps.trace.validate import OpRow, Validation, mape, validate
from md_table import pct as _pct, table as _table   # scripts/, beside this file

LAYER = re.compile(r"^L(\d+)\.")


@dataclass(frozen=True)
class Config:
    label: str
    validation: Validation


def layer_sums(ops: list[OpRow], whole_step: bool = False) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(measured, simulated) sums per (trace, step, decoder layer). An op belongs to layer n when
    its name starts with `Ln.`; ops outside the layers (embed, final_norm, lm_head) are left out.
    `whole_step`: every op of a step is one layer (a trace of one layer without `Ln.` names)."""
    out: dict[tuple[str, str, str], tuple[float, float]] = {}
    for r in ops:
        hit = LAYER.match(r.op)
        if hit is None and not whole_step:
            continue
        key = (r.source, r.step, "step" if whole_step else hit.group(1))
        m, s = out.get(key, (0.0, 0.0))
        out[key] = (m + r.measured_s, s + r.simulated_s)
    return out


def layer_errors(v: Validation, whole_step: bool = False) -> list[float]:
    return [(s - m) / m for m, s in layer_sums(v.ops, whole_step).values() if m > 0]


def kind_rows(configs: list[Config]) -> list[list[str]]:
    """Per op kind: ops, then each configuration's MAPE; an overall row last."""
    first = configs[0].validation
    rows = [[k, str(sum(r.kind == k for r in first.ops)), *(_pct(c.validation.mape_by_kind()[k]) for c in configs)]
            for k in first.mape_by_kind()]
    return rows + [["**overall**", str(len(first.ops)), *(f"**{_pct(c.validation.mape)}**" for c in configs)]]


def error_rows(configs: list[Config], whole_step: bool = False) -> list[list[str]]:
    """Per configuration: per-layer MAPE and max |error|, per-step MAPE and max |error|."""
    rows = []
    for c in configs:
        lay = [abs(e) for e in layer_errors(c.validation, whole_step)]
        st = [abs(s.error) for s in c.validation.steps]
        rows.append([c.label, str(len(lay)), _pct(statistics.fmean(lay)), _pct(max(lay)), str(len(st)),
                     _pct(mape(c.validation.steps)), _pct(max(st))])
    return rows


ERROR_HEAD = ["preset, stack", "layers", "per-layer MAPE", "max layer error", "steps", "per-step MAPE",
              "max step error"]


def _figures(prefix: str, configs: list[Config], keys: list[str]) -> dict[str, float]:
    return {f"{prefix}.op_mape.{k}": c.validation.mape for k, c in zip(keys, configs)}


# --------------------------------------------------------------------------- A6000

def a6000_configs(fit: list[Trace], test: list[Trace], base: Machine, cal: Machine) -> tuple[list[Config], str]:
    """a6000 / a6000_calibrated without a stack, a6000 under torch-eager and sarathi as filed,
    and sarathi calibrated on the fit traces (`sim calibrate --stack sarathi`)."""
    sc = calibrate_stack(fit, base, "sarathi", name="a6000_sarathi")
    return [Config("a6000, no stack (before)", validate(test, base)),
            Config("a6000_calibrated, no stack", validate(test, cal)),
            Config("a6000, torch-eager (as filed)", validate(test, base, stack="torch-eager")),
            Config("a6000, sarathi (as filed)", validate(test, base, stack="sarathi")),
            Config("a6000 + sarathi calibrated", validate(test, sc.cal.machine, stack="sarathi"))], sc.note()


def a6000_stacks(fit: list[Trace], test: list[Trace], base: Machine, cal: Machine) -> tuple[str, dict]:
    configs, note = a6000_configs(fit, test, base, cal)
    tokens = [t.steps[0].tokens for t in test]
    per_tokens = [[c.label, *(f"{s.error:+.1%}" for s in c.validation.steps)] for c in configs]
    text = f"""### Under software stacks, out of sample

These traces ran sarathi-serve's kernels, not plain PyTorch eager: kernel_summary.csv names
`sarathi::rms_norm_kernel` (one kernel per norm), `sarathi::rotary_embedding_kernel` and
`sarathi::silu_and_mul_kernel` (hw_models/stack/presets/sarathi.yaml, whose kernel counts were read off these
traces; its timing figures are start values, not fitted here). `torch-eager` (8 kernels per norm, 10 per
RoPE, figures fitted on the H200) is shown for comparison: its kernel model does not describe these traces.
"sarathi calibrated" = `sim calibrate --stack sarathi` on the same calibration traces
({sorted(t.steps[0].tokens for t in fit)} tokens): the GEMM curves on the GEMMs, the stack's kernel
figures on the rest. Reported on {sorted(tokens)} tokens.

{_table(["op kind", "ops", *(c.label for c in configs)], kind_rows(configs))}

Each trace is one decoder layer at one token count, so a step is a layer: per-layer = per-step here
(all the layer's ops, embedding included, as in the table above).

{_table(["preset, stack", *(f"layer {n} tokens" for n in tokens)], per_tokens)}

{_table(ERROR_HEAD, error_rows(configs, whole_step=True))}

{_a6000_verdict(configs)}

Fitted under sarathi (calibration traces):

```
{note}
```
"""
    return text, _figures("a6000", configs, ["before", "calibrated", "torch_eager", "sarathi", "sarathi_calibrated"])


def _a6000_verdict(configs: list[Config]) -> str:
    """How the sarathi calibration compares with the no-stack one, per kind, from the table's own figures."""
    plain, stack = configs[1].validation, configs[4].validation
    pk, sk = plain.mape_by_kind(), stack.mape_by_kind()
    worse = [f"{k} {_pct(pk[k])} -> {_pct(sk[k])}" for k in pk if sk[k] > pk[k] + 0.005]
    lay = [statistics.fmean(abs(e) for e in layer_errors(v, True)) for v in (plain, stack)]
    return (f"Per-op, sarathi calibrated ({_pct(stack.mape)}) is {'better' if stack.mape < plain.mape else 'worse'} "
            f"than a6000_calibrated without a stack ({_pct(plain.mape)}); per-layer {_pct(lay[1])} against "
            f"{_pct(lay[0])}. Worse under the stack: {', '.join(worse) or 'none'}. Each small-op spec is fitted "
            "on 4-8 calibration ops with one floor and one bandwidth, where the no-stack curves have a memory ramp."
            + (" a6000_calibrated (no stack) stays the A6000's preset." if stack.mape >= plain.mape else ""))


# --------------------------------------------------------------------------- CPU

FLOOR_BOUND_S = 1e-4   # sim.apps.trace.stack_fit's upper bound on a kernel floor (10 ** -4.0 s)


def cpu_configs(fit: list[Trace], test: list[Trace], base: Machine, cal: Machine, gemv
                ) -> tuple[list[Config], StackCalibration]:
    """cpu_host / cpu_host_calibrated without a stack; torch-eager as filed (H200 figures) and
    torch-eager's kernel model fitted on the CPU calibration traces (same GEMM small-M choice)."""
    sc = calibrate_stack(fit, base, "torch-eager", name="cpu_host_torch_eager", gemv_max_m=gemv)
    return [Config("cpu_host, no stack (before)", validate(test, base)),
            Config("cpu_host_calibrated, no stack", validate(test, cal)),
            Config("cpu_host, torch-eager (as filed)", validate(test, base, stack="torch-eager")),
            Config("cpu_host + torch-eager fitted on CPU", validate(test, sc.cal.machine, stack="torch-eager"))], sc


def cpu_stacks(fit: list[Trace], test: list[Trace], base: Machine, cal: Machine, gemv) -> tuple[str, dict]:
    configs, sc = cpu_configs(fit, test, base, cal, gemv)
    plain, fitted = configs[1].validation, configs[3].validation
    at_bound = [f.key for f in sc.fits if f.floor_s is not None and f.floor_s >= 0.99 * FLOOR_BOUND_S]
    text = f"""### Under software stacks, out of sample

The captures ran PyTorch eager (scripts/capture_trace.py), the code `torch-eager`'s kernel counts were read
from, so its op structure (aten ops per op, their extra passes) is the same on this CPU. Its figures are
not: they are GPU kernel figures (a 1-2 us device floor per kernel, bandwidth efficiencies against the
H200's HBM, a 5 us host launch the device overlaps), fitted on H200 traces. On a CPU the "kernel" runs on
the host thread that dispatched it, and an eager op's floor is tens of microseconds (dispatch, OpenMP
fork/join, profiler bookkeeping). "torch-eager (as filed)" runs the stack as is; "torch-eager fitted on CPU"
refits its per-kernel floor and bandwidth (stack_fit: one floor and one bandwidth per op kind, no memory
ramp, the fit's bounds sized for GPUs -- floor <= 100 us, efficiency <= 1.5) on the calibration traces, the
GEMMs on the same curves as cpu_host_calibrated (with its small-M choice). Same split as above.

{_table(["op kind", "ops", *(c.label for c in configs)], kind_rows(configs))}

Per-layer: each decoder layer's ops (`Ln.*`) summed per step; per-step: the step's wall time against the
simulated makespan (as above).

{_table(ERROR_HEAD, error_rows(configs))}

{_cpu_verdict(plain, fitted, at_bound)}

```
{sc.note()}
```
"""
    return text, _figures("cpu", configs, ["before", "calibrated", "torch_eager", "torch_eager_fitted"])


def _cpu_verdict(plain: Validation, fitted: Validation, at_bound: list[str]) -> str:
    bound = (f"the fitted floors of {', '.join(at_bound)} sit on the fit's GPU-sized upper bound "
             f"({FLOOR_BOUND_S * 1e6:.0f} us)" if at_bound else "no fitted floor sits on the fit's bounds")
    if fitted.mape < plain.mape:
        return (f"Refitted on the calibration traces, torch-eager's kernel model predicts the held-out ops at "
                f"{_pct(fitted.mape)} against {_pct(plain.mape)} without a stack ({bound}).")
    return (f"**The GPU stack's kernel model does not apply here.** Refitted on the calibration traces it "
            f"predicts the held-out ops at {_pct(fitted.mape)} against {_pct(plain.mape)} without a stack: "
            f"{bound}, and one floor plus one bandwidth per op kind cannot hold both the decode ops' floors and "
            "the prefill ops, which the no-stack curves' memory ramp does. No `cpu-eager` stack was built: "
            "cpu_host_calibrated without a stack stays this machine's model.")

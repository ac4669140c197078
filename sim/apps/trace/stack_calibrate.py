"""Calibration under a software stack, and the held-out check that guards writing.

`sim calibrate --stack NAME` splits the measured ops by who costs them under that
stack (hw_models.stack.cost): the ops the stack leaves to the preset's roofline
(GEMMs without a kernel family, SDPA attention under torch-eager) fit the preset's
efficiency curves (sim.apps.trace.calibrate); the stack's own kernels (norms,
RoPE, adds, ...) fit the stack's floor and memory efficiency per spec
(sim.apps.trace.stack_fit), on the calibrated machine, and go into the preset's
`stacks: {NAME: ...}` section, so they apply where this machine runs this stack
and nowhere else. Specs the data cannot constrain keep the stack file's figures.

`--held-out TRACE...` compares the per-op MAPE on traces the fit never saw,
before (the base preset) and after (the calibrated one), both under the stack;
a calibration that made it worse is refused (ConfigError: one line, exit 2,
nothing written).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from hw_models.machine import Machine, machine_from_dict
from hw_models.stack.spec import Stack, load_stack
from sim.apps.trace.calibrate import FIT_HIGH, FIT_LOW, PARAMS, Calibration, calibrate
from sim.apps.trace.records import Trace
from sim.apps.trace.replay import names_device
from sim.apps.trace.stack_fit import SpecFit, fit_stack
from sim.apps.trace.validate import validate
from sim.core import graph as g
from sim.core.errors import ConfigError
from sim.core.graph import Op


def leaves_to_roofline(stack: Stack):
    """Whether `stack` costs an op with the preset's plain roofline (no spec, no kernel family)."""
    def keep(op: Op) -> bool:
        if stack.spec(op) is not None:
            return False
        w = next((t.fmt for t in op.reads if t.role == "weight" and len(t.shape) > 1), None)
        return not (op.kind == g.GEMM and w is not None and w != op.compute_format and stack.family(w))
    return keep


def spec_overrides(fits: list[SpecFit]) -> dict:
    """The constrained fits as a preset's `stacks.<name>` mapping ("softmax.prefill" nests)."""
    out: dict = {}
    for f in fits:
        if f.floor_s is None:
            continue
        parts = f.key.split(".")
        section, parts = (("names", parts[1:]) if parts[0] == "names" else ("ops", parts))
        node = out.setdefault(section, {})
        for p in parts:
            node = node.setdefault(p, {})
        node.update(floor_s=float(f"{f.floor_s:.3g}"), memory_efficiency=float(f"{f.memory_efficiency:.3g}"))
        if f.serial_per_s is not None:
            node["serial"] = {"per_s": float(f"{f.serial_per_s:.3g}")}
    return out


@dataclass
class StackCalibration:
    cal: Calibration
    stack: str
    fits: list[SpecFit]

    def note(self) -> str:
        """Header lines for the preset: which stack figures were fitted, which kept."""
        fitted = [f"{f.key} (floor {f.floor_s * 1e6:.3g} us, memory efficiency {f.memory_efficiency:.3g}, "
                  + ("" if f.serial_per_s is None else f"serial step {f.serial_per_s * 1e9:.3g} ns, ")
                  + f"MAPE {f.mape:.1%} over {f.n} ops)" for f in self.fits if f.floor_s is not None]
        kept = [f"{f.key} ({f.n} ops)" for f in self.fits if f.floor_s is None]
        return "\n".join([f"Under stack {self.stack}: the efficiency curves are fitted on the ops it leaves to the "
                          "roofline; its kernels' figures (stacks." + self.stack + ") on the rest:",
                          *[f"  {x}" for x in fitted],
                          *([f"  not constrained by the data, kept at the stack file's: {', '.join(kept)}"]
                            if kept else [])])


def calibrate_stack(traces: list[Trace], base: Machine, stack_name: str, per_kind: bool = True,
                    name: str | None = None, min_traces: int = 1,
                    gemv_max_m: Iterable[int | None] | None = None) -> StackCalibration:
    """`gemv_max_m`: the small-M GEMM thresholds the roofline fit chooses from (calibrate's)."""
    stack = load_stack(stack_name)
    cal = calibrate(traces, base, per_kind=per_kind, name=name, use_op=leaves_to_roofline(stack),
                    min_traces=min_traces, gemv_max_m=gemv_max_m)
    fits = fit_stack(traces, cal.machine, stack)
    over = spec_overrides(fits)
    if over:
        cal.raw["stacks"] = {**cal.raw.get("stacks", {}), stack.name: over}
        cal.machine = machine_from_dict(cal.raw, f"calibrated from {base.name}")
    return StackCalibration(cal, stack.name, fits)


def calibrate_for(traces: list[Trace], base: Machine, stack: str | None, per_kind: bool = True,
                  name: str | None = None, min_traces: int = 1,
                  gemv_max_m: Iterable[int | None] | None = None) -> tuple[Calibration, str]:
    """The calibration (under `stack` when given) and the preset header note it adds; `gemv_max_m` as calibrate's."""
    if stack is None:
        cal, note = calibrate(traces, base, per_kind=per_kind, name=name, min_traces=min_traces,
                              gemv_max_m=gemv_max_m), ""
    else:
        sc = calibrate_stack(traces, base, stack, per_kind, name, min_traces, gemv_max_m)
        cal, note = sc.cal, sc.note()
    return cal, "\n".join(filter(None, (note, foreign_devices(traces, base))))


def foreign_devices(traces: list[Trace], base: Machine) -> str:
    """The header line of a fit on another GPU's captures: its efficiencies carry that device's difference from the
    base preset, which the calibrate-time warning said once and the written preset had not (an A6000's traces fitted
    into h200 read a 42.9 ms TPOT against h200's 10.1, with nothing in the file: a trace trial)."""
    others = sorted({t.device_name for t in traces if t.device_name and not names_device(base.name, t.device_name)})
    return (f"FITTED ON ANOTHER DEVICE'S TRACES ({', '.join(others)}), not {base.name}'s: its efficiencies carry that "
            f"device's difference from {base.name} (sim replay maps a trace onto other hardware)") if others else ""


@dataclass(frozen=True)
class HeldOut:
    n_ops: int
    before: float     # per-op MAPE of the base preset
    after: float      # of the calibrated one
    base: str = ""
    stack: str | None = None
    # op kinds whose per-op MAPE the calibration makes worse: (kind, before, after)
    worse_kinds: tuple[tuple[str, float, float], ...] = ()

    @property
    def worse(self) -> bool:
        return self.after > self.before

    def kinds_warning(self) -> str | None:
        """The warning where the fit makes some op kinds worse on these traces though the whole got better (a trace
        trial: attn_score 89.6% -> 256.2% on its own capture, written without a word)."""
        if not self.worse_kinds or self.worse:
            return None
        return ("warning: the fit makes these op kinds worse on its own traces: " + ", ".join(
            f"{k} {b:.1%} with {self.base} -> {a:.1%}" for k, b, a in self.worse_kinds))

    def line(self) -> str:
        return (f"held-out per-op MAPE {self.before:.1%} with {self.base} -> {self.after:.1%} calibrated, over "
                f"{self.n_ops} ops{f', stack {self.stack}' if self.stack else ''}")


def held_out(traces: list[Trace], base: Machine, calibrated: Machine, stack: str | None,
             refuse: bool = True) -> HeldOut:
    """Per-op MAPE on traces the fit did not see, before and after; with `refuse`, refuses
    (ConfigError) a calibration that made it worse."""
    before = validate(traces, base, stack=stack)
    after = validate(traces, calibrated, stack=stack)
    kb, ka = before.mape_by_kind(), after.mape_by_kind()
    h = HeldOut(len(after.ops), before.mape, after.mape, base.name, stack,
                tuple((k, kb[k], ka[k]) for k in ka if k in kb and ka[k] > kb[k] * 1.01))
    if refuse and h.worse:
        raise ConfigError(f"--held-out: the calibration makes the held-out per-op MAPE worse ({h.line()}); preset not written "
                          "(--report shows the comparison, --force writes it anyway)")
    return h



def _edge(name: str, v: float) -> bool:
    """Whether fitted figure `name` ended on the fit space's edge (sim.apps.trace.calibrate FIT_LOW / FIT_HIGH): a
    maximum at its top (the peak itself), an overhead at its floor (log10, 1 ns): where the data pushed past what
    the model can say."""
    i = PARAMS.index(name)
    return v >= FIT_HIGH[i] - 1e-6 if name.endswith("_max") else v <= 10 ** FIT_LOW[i] * (1 + 1e-6)


AT_BOUND = ("compute_max", "memory_max", "overhead_s")


def at_bounds(cal) -> str | None:
    """The warning where fitted figures ended on an edge of the fit space, kind by kind, or None: a trace trial's
    table in seconds where microseconds belong fitted every maximum to 1 and every overhead to 1 ns, written without
    a word; a kind fitted so says its data are not the model's to explain."""
    hits = [f"{kind} {name}" for kind, f in {"all ops": cal.overall, **cal.by_kind}.items()
            for name in AT_BOUND if name in f.params and name not in f.fixed and _edge(name, f.params[name])]
    return (f"warning: fitted at the edge of what the model can say (the data push past it: other units, or ops the "
            f"model does not explain): {', '.join(hits)}") if hits else None

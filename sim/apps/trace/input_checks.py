"""Checks of a trace against what the command was told (sim validate, calibrate): the device it was measured on
against --hw, and --model / --tokens against what the file itself says."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from sim.apps.trace.replay import names_device
from sim.core.errors import ConfigError


def same_device(trace, machine, sets: list[str] | None = None) -> str | None:
    """A trace compared with (or fitted into) a preset of another kind of device is refused: a CPU capture fitted
    into `h200` wrote a GPU preset 139x slower, without a word. A GPU trace on another GPU's preset: the warning to
    print (sim replay is the command that maps one device onto another), once per file (_load); `sets`: the --set
    items that changed the preset (a trial gave an A40's figures to a6000 as docs/validation.md does, and read that the
    errors held the two GPUs' whole difference)."""
    kind = {"cpu": "cpu", "cuda": "gpu"}.get(trace.device)
    if kind is not None and (machine.kind == "cpu") != (kind == "cpu"):
        raise ConfigError(f"{trace.source}: measured on a {kind.upper()} ({trace.device_name or trace.device}), but --hw "
                          f"{machine.name} is a {machine.kind} preset: give a {kind} preset (sim replay maps a trace "
                          "onto other hardware)")
    if kind == "gpu" and trace.device_name and not names_device(machine.name, trace.device_name):
        changed = f" as {', '.join(sets)} changed it" if sets else ""
        return (f"warning: {str(trace.source).split('#')[0]}: measured on {trace.device_name}, compared with --hw "
                f"{machine.name}{changed}, another GPU: the errors include "
                + ("what those figures leave of the two devices' difference" if sets else "the two devices' difference")
                + " (sim replay maps a trace onto other hardware)")
    return None


def overridden(trace, model: str | None, tokens: int | None) -> None:
    """--model and --tokens fill in what a file does not say; where it says otherwise, they win, and the user is told
    (a trace workflow trial: a TinyLlama capture re-costed as Llama-2-70B, a 512-token trace as 4096, silently)."""
    own = (trace.meta or {}).get("model") if isinstance(getattr(trace, "meta", None), dict) else None
    own_name = own.get("name") if isinstance(own, dict) else None
    if model and own_name not in (None, model):
        used = getattr(trace.model, "name", None)
        print(f"warning: {trace.source}: " + (f"--model {model} replaces the capture's own {own_name}" if used != own_name
              else f"--model {model} does not apply: the file names its own model, {own_name}"), file=sys.stderr)
    named = re.search(r"num_tokens_0*(\d+)", Path(trace.source).name)
    if tokens is not None and named and int(named.group(1)) != tokens:
        print(f"warning: {trace.source}: --tokens {tokens} replaces the {named.group(1)} its name says", file=sys.stderr)


# A CPU capture is contended when the 1-minute load average (before or after it, .meta.json) exceeds its own torch
# threads by more than this: its threads account for a load of up to their count, while one more runnable process
# steals whole time slices from them (scripts/validation_report.py leaves such captures out of the CPU figures).
CPU_EXTRA_LOAD_LIMIT = 0.5


def capture_load(trace) -> float:
    """The higher of the 1-minute load averages before and after the capture (inf if unrecorded)."""
    vals = [v for v in ((trace.meta or {}).get("loadavg_1m") or {}).values() if isinstance(v, (int, float))]
    return max(vals) if vals else float("inf")


def load_limit(trace) -> float:
    return float((trace.meta or {}).get("threads") or 1) + CPU_EXTRA_LOAD_LIMIT


def contended(trace) -> None:
    """A CPU capture taken under load is said (a trace workflow trial: captures up to 75x inflated by the load
    alone were validated and fitted without a word)."""
    load = capture_load(trace)
    if trace.device == "cpu" and load != float("inf") and load > load_limit(trace):
        print(f"warning: {trace.source}: captured at a load of {load:.2f} on {int(load_limit(trace) - CPU_EXTRA_LOAD_LIMIT)} "
              "thread(s): its timings are likely contended (other processes took time slices)", file=sys.stderr)


def truncated(trace) -> None:
    """A capture (its ops table or its Chrome trace) holding fewer ops than it wrote (`ops_per_step` a step over
    `steps`, .meta.json) is said: a cut file validated its first rows against whole steps without a word (a trace
    workflow trial), and a Chrome trace missing an op's annotations dropped it silently where its ops table warned
    (a trace trial)."""
    meta = trace.meta or {}
    per, steps = meta.get("ops_per_step"), meta.get("steps")
    if not str(trace.source).endswith(CAPTURE_SUFFIXES) or not isinstance(per, int) or not isinstance(steps, list):
        return
    counts = [sum(1 for o in trace.ops if o.step == i) for i in range(len(steps))]
    short = [i for i, n in enumerate(counts) if 0 < n < per]
    missing = [i for i, n in enumerate(counts) if n == 0]
    if short or missing:
        # A cut file loses its last rows: the last step it holds is partial, or later ones are missing. Steps short
        # all through are ops the profiler did not record (traces/README.md: CUDA captures drop some), not a cut.
        last = max((i for i, n in enumerate(counts) if n), default=-1)
        cut = bool(missing) or (last in short and counts[last] < min(counts[:last], default=per))
        what = (f"{trace.source}: fewer ops than its capture wrote ({per} a step over {len(steps)} steps): "
                + "; ".join(x for x in (f"step(s) {', '.join(map(str, short))} partial" if short else "",
                                        f"{len(missing)} step(s) missing" if missing else "") if x))
        if cut:   # a file cut short is refused, not validated in part (a hostile-input trial: a warning, exit 0)
            raise ConfigError(f"{what}: a truncated file (its .meta.json says what the capture wrote); capture again "
                              "or restore the file")
        why = ("the op labels sim does not model, said above" if getattr(trace, "unknown_ops", None) else
               "ops the profiler did not record; traces/README.md")
        print(f"warning: {what} ({why})", file=sys.stderr)


CAPTURE_SUFFIXES = (".ops.csv", ".trace.json", ".trace.json.gz")
# A CPU step's ops run one after another inside its wall time: their sum past it (give or take timer rounding), or
# a thousandth of it, is not a measurement of that step
WALL_SLACK, WALL_FLOOR = 1.05, 1e-3


def inconsistent(trace) -> None:
    """A capture's ops that cannot be what it measured are refused (a trace trial: a duplicated row was averaged
    into its op, a step whose annotation repeated another's label dropped 37 ops, and times written in seconds
    where microseconds belong validated at 21,049,431% and calibrated a preset at its bounds, all exit 0): an op
    recorded twice in one step, and on a CPU, a step whose ops sum past its wall time or to a thousandth of it."""
    if not str(trace.source).split("#")[0].endswith(CAPTURE_SUFFIXES):   # vidur's tables repeat each op by design
        return
    again = next((o for o in trace.ops if o.repeat), None)   # the loaders number an op's instances in its step
    if again is not None:
        n = 1 + max(o.repeat for o in trace.ops if (o.step, o.name) == (again.step, again.name))
        raise ConfigError(f"{trace.source}: {again.name} appears {n} times in {trace.steps[again.step].label}: a capture "
                          "records each op once a step (a duplicated row, or two steps under one label)")
    for j, shape in enumerate(trace.steps if trace.device == "cpu" else ()):
        ops_s = sum(o.duration_s for o in trace.ops if o.step == j)
        if shape.wall_s and ops_s and not WALL_FLOOR * shape.wall_s <= ops_s <= WALL_SLACK * shape.wall_s:
            raise ConfigError(f"{trace.source}: {shape.label}'s ops sum to {ops_s:.4g} s in a step of {shape.wall_s:.4g} s "
                              "wall: not its measurement (times in another unit, or ops added)")


def fitted_on(machine) -> list[str]:
    """The traces a `sim calibrate` preset names under its header's "Fitted on:" (calibrate_preset.write_preset), as written."""
    source = getattr(machine, "source", None)
    if not source or not Path(source).is_file():
        return []
    out, inside = [], False
    for line in Path(source).read_text(errors="replace").splitlines():
        if not line.startswith("#"):
            break
        if line.rstrip().endswith("Fitted on:"):
            inside = True
        elif inside and line.startswith("#   "):
            out.append(line[4:].strip())
        elif inside:
            break
    return out


def in_sample(traces, machine) -> None:
    """A trace the preset was calibrated on is said: its errors are the fit's residuals, not a check (a trace trial
    read a calibrated preset's in-sample 32.5% and its held-out 82.9% alike)."""
    def capture(path: str) -> str:   # a capture's .ops.csv and .trace.json.gz are one measurement
        name = Path(path.split("#")[0]).name
        return next((name[:-len(x)] for x in CAPTURE_SUFFIXES if name.endswith(x)), name)
    names = {capture(f) for f in fitted_on(machine)}
    for t in traces:
        name = Path(str(t.source).split("#")[0]).name
        if capture(str(t.source)) in names:
            print(f"note: {name} is one of the traces {machine.name} was calibrated on (its header's Fitted on): "
                  "these errors are in sample", file=sys.stderr)


def unmodelled(trace) -> None:
    """Op labels the trace holds that sim does not model are named as they are left out (a trace trial: renamed ops
    were read as ops the profiler did not record, or dropped without a word)."""
    if trace.unknown_ops:
        names = sorted(trace.unknown_ops)
        print(f"warning: {trace.source}: {len(names)} op label(s) sim does not model, left out: "
              f"{', '.join(names[:6])}{' ...' if len(names) > 6 else ''}", file=sys.stderr)


def capture_key(trace) -> tuple:
    """What identifies one capture whatever file holds it: capture_trace.py's .meta.json (its date, arguments and wall
    time; an .ops.csv and its .trace.json.gz share it), else the measured ops themselves, to the nanosecond."""
    meta = trace.meta or {}
    if meta.get("date") and meta.get("argv") is not None:
        return ("meta", json.dumps([meta["date"], meta["argv"], meta.get("wall_s")], sort_keys=True, default=str))
    return ("ops", tuple((o.step, o.name, round(o.duration_s * 1e9)) for o in trace.ops))


def repeated_captures(traces, others=()) -> list[tuple[str, str]]:
    """(later, earlier) source pairs that are one capture: within `traces`, or of `traces` in `others`."""
    seen = {capture_key(t): str(t.source) for t in others}
    out = []
    for t in traces:
        key = capture_key(t)
        if key in seen:
            out.append((str(t.source), seen[key]))
        else:
            seen[key] = str(t.source)
    return out

"""torch Chrome traces (`.json` / `.json.gz`, from `torch.profiler`): CPU ops, GPU
kernels and `record_function` annotations, in microseconds.

A GPU kernel belongs to the op annotation whose CPU-side launch (the
`cuda_runtime` event with the same correlation id) falls inside it, as vidur's
record_function tracer does; without a launch record, to the annotation whose
GPU-side projection (`gpu_user_annotation`) covers it. An op's time is its
kernels' summed time on a GPU trace, its annotation's duration on a CPU-only one.
Project labels count only inside a step annotation; vidur's all belong to one step."""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.core.errors import ConfigError
from sim.apps.trace.labels import SIM_OP_RE, STEP_RE, VIDUR_KINDS, VIDUR_RE, sim_label, step_index
from sim.apps.trace.meta import measured, meta_beside, meta_path_beside, read_json, sim_trace_shape
from sim.apps.trace.records import MeasuredOp, Trace
from sim.apps.trace.vidur import vidur_trace_shape

_KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")

Event = dict[str, Any]


@dataclass
class _Annotations:
    """The trace's record_function labels, each list in start order."""

    ops: list[Event] = field(default_factory=list)
    steps: list[Event] = field(default_factory=list)
    vocabulary: str | None = None   # "sim" or "vidur", from the op labels


@dataclass
class _Kernels:
    """The GPU kernels attributed to one op annotation (trace microseconds)."""

    time_us: float = 0.0
    count: int = 0
    span_us: tuple[float, float] | None = None   # first start, last end

    def add(self, kernel: Event) -> None:
        start, dur = float(kernel["ts"]), float(kernel.get("dur", 0.0))
        self.time_us += dur
        self.count += 1
        a, b = self.span_us or (start, start + dur)
        self.span_us = (min(a, start), max(b, start + dur))


MAX_SPAN_US = 24 * 3600e6   # microseconds: a day, far beyond any profiled run


def load_chrome_trace(p: Path, model: str | None = None, tokens: int | None = None) -> Trace:
    """One torch profiler trace -> one Trace. `model` and `tokens` fill in what a
    vidur trace does not record; the project's traces take them from PREFIX.meta.json."""
    data = read_json(p)
    spans = _spans(p, _events(p, data))
    labels = _annotations(p, spans)
    kernels = [e for e in spans if e.get("cat") in _KERNEL_CATS]
    per_op = _attribute_kernels(spans, kernels, labels.ops)
    trace = _shaped_trace(p, data, labels.vocabulary, "cuda" if kernels else "cpu", model, tokens)
    _add_step_walls(p, trace, labels.steps)
    _add_ops(trace, labels, per_op, t0_us=min(e["ts"] for e in spans))
    if not trace.ops:
        raise ConfigError(f"{p}: no labelled op falls inside a step annotation")
    return trace


def _events(p: Path, data: Any) -> list[Any]:
    """The trace's event list: `traceEvents` of an object, or the file's top-level array."""
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ConfigError(f"{p}: not a torch Chrome trace: no traceEvents list")
    return events


def _spans(p: Path, events: list[Any]) -> list[Event]:
    """The complete ('X') events, with `ts` and `dur` checked and made floats; at least one."""
    out, wheres = [], []
    for i, e in enumerate(events):
        if not (isinstance(e, dict) and e.get("ph") == "X" and "ts" in e):
            continue
        where = f"{p}: traceEvents[{i}] ({str(e.get('name', ''))[:40]!r})"
        ts = measured(e["ts"], f"{where}: ts")
        dur = measured(e.get("dur", 0.0), f"{where}: dur")
        out.append({**e, "ts": ts, "dur": dur})
        wheres.append(where)
    if not out:
        raise ConfigError(f"{p}: torch Chrome trace has no complete ('X') events")
    # A kernel is found by its launch's correlation id, not its time: a ts of 1e300 was accepted and
    # stretched the device span. A profiled run of a few steps spans seconds, never a day.
    t0 = min(e["ts"] for e in out)
    ends = [e["ts"] + e["dur"] - t0 for e in out]
    far = max(range(len(out)), key=ends.__getitem__)
    if not ends[far] <= MAX_SPAN_US:
        raise ConfigError(f"{wheres[far]}: ends {ends[far] / 1e6:.3g} s after the trace's first event; a profiled "
                          f"run spans less than {MAX_SPAN_US / 3.6e9:g} hours (a corrupt ts or dur?)")
    return out


def _annotations(p: Path, spans: list[Event]) -> _Annotations:
    """The step and op labels among the user annotations; all op labels in one vocabulary."""
    out = _Annotations()
    for e in spans:
        if e.get("cat") != "user_annotation":
            continue
        name = str(e.get("name", ""))
        if STEP_RE.match(name):
            out.steps.append(e)
        elif SIM_OP_RE.match(name) or VIDUR_RE.match(name):
            this = "vidur" if name.startswith("vidur_") else "sim"
            if out.vocabulary and this != out.vocabulary:
                raise ConfigError(f"{p}: trace mixes vidur_<op> and simulator op labels")
            out.vocabulary = this
            out.ops.append(e)
    if not out.ops:
        raise ConfigError(f"{p}: no record_function op labels (neither `L<i>.<op>` nor `vidur_<op>`) in the trace")
    out.ops.sort(key=lambda e: e["ts"])
    out.steps.sort(key=lambda e: e["ts"])
    return out


def _attribute_kernels(spans: list[Event], kernels: list[Event], ops: list[Event]) -> dict[int, _Kernels]:
    """id(op annotation) -> its kernels; a kernel no annotation owns counts nowhere."""
    launch_at: dict[Any, tuple[Any, float]] = {}   # correlation id -> (launching thread, launch time)
    for e in spans:
        if e.get("cat") in _LAUNCH_CATS:
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launch_at[corr] = ((e.get("pid"), e.get("tid")), float(e["ts"]))
    by_thread: dict[Any, list[Event]] = {}
    for e in ops:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    starts = {k: [float(e["ts"]) for e in v] for k, v in by_thread.items()}
    gpu_ann = sorted((e for e in spans if e.get("cat") == "gpu_user_annotation"), key=lambda e: float(e["ts"]))
    per_op: dict[int, _Kernels] = {}
    for k in kernels:
        owner = _owner_by_launch(k, launch_at, by_thread, starts)
        if owner is None:
            owner = _owner_by_gpu_annotation(k, gpu_ann, by_thread)
        if owner is not None:
            per_op.setdefault(id(owner), _Kernels()).add(k)
    return per_op


def _owner_by_launch(k: Event, launch_at: dict, by_thread: dict, starts: dict) -> Event | None:
    """The op annotation on the launching thread that contains the launch time."""
    corr = (k.get("args") or {}).get("correlation")
    if corr not in launch_at:
        return None
    thread, t = launch_at[corr]
    anns = by_thread.get(thread)
    if not anns:
        return None
    i = bisect.bisect_right(starts[thread], t) - 1
    while i >= 0:  # nested labels: the innermost one started last
        e = anns[i]
        if float(e["ts"]) <= t <= float(e["ts"]) + float(e.get("dur", 0.0)):
            return e
        i -= 1
        if i >= 0 and float(anns[i]["ts"]) + float(anns[i].get("dur", 0.0)) < t:
            # annotations on one thread do not overlap unless nested; an earlier one ending before t cannot hold it
            break
    return None


def _owner_by_gpu_annotation(k: Event, gpu_ann: list[Event], by_thread: dict) -> Event | None:
    """Fallback without a launch record: the GPU-side projection of an annotation
    (gpu_user_annotation, same External id) that covers the kernel."""
    ts = float(k["ts"])
    for a in gpu_ann:
        if float(a["ts"]) <= ts <= float(a["ts"]) + float(a.get("dur", 0.0)):
            ext = (a.get("args") or {}).get("External id")
            for anns in by_thread.values():
                for e in anns:
                    if (e.get("args") or {}).get("External id") == ext and e.get("name") == a.get("name"):
                        return e
    return None


def _shaped_trace(p: Path, data: Any, vocabulary: str | None, device: str,
                  model: str | None, tokens: int | None) -> Trace:
    """A Trace without ops, with the run's device, model and step shapes: vidur's from
    the arguments or the file layout, the project's from the .meta.json beside the trace."""
    meta = meta_beside(p)
    trace = Trace(str(p), vocabulary or "sim", device, meta.get("device_name", ""))
    props = data.get("deviceProperties") if isinstance(data, dict) else None
    if props and not trace.device_name:
        trace.device_name = str(props[0].get("name", ""))
    if vocabulary == "vidur":
        vidur_trace_shape(trace, p, model, tokens)
    else:
        sim_trace_shape(trace, meta, model)
        _meta_agrees(p, meta, events := _events(p, data))
        if model is None:   # --model re-costs a capture as another model on purpose, and says so (overridden)
            _width_agrees(p, trace, events)
    return trace


def _width_agrees(p: Path, trace: Trace, events: list[Any]) -> None:
    """The meta's model against the width the capture's first projection took
    (aten::linear's input [tokens, hidden]): a meta naming Llama-2-13B beside a 7B capture costed every projection
    +56%, silently (a trace trial)."""
    hidden = getattr(trace.model, "hidden_size", None)
    dims = next((e["args"]["Input Dims"] for e in events if isinstance(e, dict) and e.get("name") == "aten::linear"
                 and isinstance(e.get("args"), dict) and isinstance(e["args"].get("Input Dims"), list)), None)
    first = dims[0] if dims and isinstance(dims[0], list) and dims[0] else None
    if hidden and first and isinstance(first[-1], int) and first[-1] != hidden:
        raise ConfigError(f"{p}: the model costed, {trace.model.name}, is {hidden} wide, but the capture's first "
                          f"projection takes {first[-1]}-wide inputs: its meta.json names another model (--model NAME re-costs it as one)")


def _meta_agrees(p: Path, meta: dict, events: list[Any]) -> None:
    """The .meta.json's batch and prompt against the tokens the capture's embedding looked up (aten::embedding's
    flattened ids: batch x prompt at the prefill, batch a decode step): a meta copied from another capture had
    validated silently (a trace trial: `batch: 8` on a batch-1 capture, 83.4% where its own gives 88.5%)."""
    looked = [e["args"]["Input Dims"][1] for e in events if isinstance(e, dict) and e.get("name") == "aten::embedding"
              and isinstance(e.get("args"), dict) and isinstance(e["args"].get("Input Dims"), list)
              and len(e["args"]["Input Dims"]) > 1 and isinstance(e["args"]["Input Dims"][1], list)]
    if len(looked) < 2 or not all(len(x) == 1 and isinstance(x[0], int) for x in looked[:2]) or not meta:
        return   # no record_shapes, or not this project's capture layout: nothing to compare
    batch, prompt = meta.get("batch"), meta.get("prompt")
    if (looked[0][0], looked[1][0]) != (batch * prompt, batch):
        raise ConfigError(f"{meta_path_beside(p)}: batch {batch}, prompt {prompt}, but the trace's embedding looked up "
                          f"{looked[0][0]} tokens at the prefill and {looked[1][0]} a decode step: the meta describes "
                          "another capture")


def _add_step_walls(p: Path, trace: Trace, steps: list[Event]) -> None:
    """Each step's measured wall time, from its annotation."""
    if steps and not trace.steps:
        meta = meta_path_beside(p)
        raise ConfigError(f"{p}: step annotations but no {meta.name if meta else 'PREFIX.meta.json'} beside the "
                          "trace to give the run's shapes")
    for s_ev in steps:
        j = step_index(s_ev["name"])
        if j < len(trace.steps):
            trace.steps[j] = dataclasses.replace(trace.steps[j], wall_s=float(s_ev["dur"]) * 1e-6)


def _add_ops(trace: Trace, labels: _Annotations, per_op: dict[int, _Kernels], t0_us: float) -> None:
    """A MeasuredOp per modelled op label, in start order, times relative to the first event."""
    step_starts = [e["ts"] for e in labels.steps]
    seen: dict[tuple[int, str], int] = {}
    for e in labels.ops:
        placed = _place(e, trace.vocabulary, labels.steps, step_starts)
        if placed is None:
            if trace.vocabulary == "sim" and sim_label(str(e["name"])) is None:   # a layer op sim does not model
                trace.unknown_ops.add(str(e["name"]))
            continue
        op, kind, layer, step = placed
        repeat = seen.get((step, op), 0)
        seen[(step, op)] = repeat + 1
        ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
        k = per_op.get(id(e), _Kernels())
        time_us = k.time_us if trace.device == "cuda" else dur
        span = ((k.span_us[0] - t0_us) * 1e-6, (k.span_us[1] - t0_us) * 1e-6) if k.span_us else None
        trace.ops.append(MeasuredOp(op, kind, layer, step, time_us * 1e-6, trace.device, (ts - t0_us) * 1e-6,
                                    dur * 1e-6, k.count, repeat, span))


def _place(e: Event, vocabulary: str, steps: list[Event],
           step_starts: list[float]) -> tuple[str, str, int | None, int] | None:
    """(op name, kind, layer, step) of an op label; None for an op the simulator does not
    model (e.g. vidur's attention wrappers) or a project label outside every step (warm-up)."""
    name = str(e["name"])
    if vocabulary == "vidur":
        op = name.removeprefix("vidur_")
        kind = VIDUR_KINDS.get(op)
        return None if kind is None else (op, kind, 0, 0)
    label = sim_label(name)
    if label is None:
        return None
    layer, kind = label
    i = bisect.bisect_right(step_starts, e["ts"]) - 1
    if i < 0 or e["ts"] > step_starts[i] + float(steps[i]["dur"]):
        return None
    return name, kind, layer, step_index(steps[i]["name"])

"""Read measured runs into the simulator's own vocabulary.

Three inputs, one result (`Trace`: a list of `MeasuredOp` plus the shapes of
each step, enough to rebuild the simulated op graph):

* torch Chrome traces (`.json` / `.json.gz`, from `torch.profiler`): CPU ops,
  GPU kernels and `record_function` annotations. A GPU kernel belongs to the
  annotation whose CPU-side launch (the `cuda_runtime` event with the same
  correlation id) falls inside it, as vidur's record_function tracer does.
  On a CPU-only trace an op's time is its annotation's duration.
* the project's normalized op tables (`PREFIX.ops.csv` of
  scripts/capture_trace.py, with `PREFIX.meta.json` beside it);
* vidur's profiled per-op tables (`mlp.csv`: `time_stats.<op>.median` in ms per
  `num_tokens` and `num_tensor_parallel_workers`, model columns).

Labels understood: the simulator's op names (`L3.q_proj`, `embed`, `lm_head`)
inside step annotations (`step0.prefill`, `step5.decode`), and vidur's
`vidur_<op>` names, which keep vidur's fused ops (QKV in one GEMM, gate+up in
one GEMM); sim.apps.trace.shapes builds those fused shapes.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import json
import re
import statistics
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.core import graph as g
from sim.core.engine import Interval, Timeline
from sim.core.errors import ConfigError
from sim.core.formats import get_format
from sim.core.model import ModelConfig, from_mapping, load_model
from sim.apps.trace.meta import check_meta, measured

# vidur op -> simulator op kind (sim.core.graph). QKV and gate+up are single fused GEMMs.
VIDUR_KINDS = {
    "emb": g.EMBED, "input_layernorm": g.NORM, "attn_pre_proj": g.GEMM, "attn_rope": g.ROPE,
    "attn_post_proj": g.GEMM, "post_attention_layernorm": g.NORM, "mlp_up_proj": g.GEMM,
    "mlp_act": g.ELEMENTWISE, "mlp_down_proj": g.GEMM, "add": g.ELEMENTWISE,
}
# simulator op base name -> kind, for the project's labels (same as sim.core.lowering).
SIM_KINDS = {
    "embed": g.EMBED, "final_norm": g.NORM, "lm_head": g.GEMM,
    "attn_norm": g.NORM, "mlp_norm": g.NORM, "q_proj": g.GEMM, "k_proj": g.GEMM, "v_proj": g.GEMM,
    "o_proj": g.GEMM, "gate_proj": g.GEMM, "up_proj": g.GEMM, "down_proj": g.GEMM, "fc1": g.GEMM,
    "fc2": g.GEMM, "rope": g.ROPE, "kv_append": g.KV_APPEND, "qk": g.ATTN_SCORE, "softmax": g.SOFTMAX,
    "av": g.ATTN_CONTEXT, "attention": g.ATTENTION, "attn_residual": g.ELEMENTWISE,
    "mlp_residual": g.ELEMENTWISE, "act": g.ELEMENTWISE,
}
_SIM_OP_RE = re.compile(r"^(?:L(\d+)\.(\w+)|(embed|final_norm|lm_head))$")
_STEP_RE = re.compile(r"^step(\d+)\.(prefill|decode)$")
_VIDUR_RE = re.compile(r"^vidur_(\w+)$")
_KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
_VIDUR_DTYPE = "fp16"   # vidur profiles with dummy fp16 weights (shared/validation/PROVENANCE.md §1.1)


@dataclass(frozen=True)
class MeasuredOp:
    """One measured instance of one logical op."""

    name: str               # simulator name ("L3.q_proj") or vidur op ("attn_pre_proj")
    kind: str               # sim.core.graph kind
    layer: int | None
    step: int               # index into Trace.steps
    duration_s: float       # GPU: summed kernel time; CPU: annotation wall time
    device: str             # "cuda" or "cpu"
    start_s: float = 0.0    # relative to the trace's first event
    cpu_duration_s: float = 0.0
    kernels: int = 0
    repeat: int = 0         # n-th instance of the same (step, name): vidur runs each op ~20 times
    device_span_s: tuple[float, float] | None = None   # first kernel start, last kernel end (Chrome GPU traces)


@dataclass(frozen=True)
class StepShape:
    """What the step computed, enough to lower it again."""

    label: str              # "step0.prefill", "tokens=128 tp=1"
    phase: str              # "prefill" or "decode"
    batch: int
    q_len: int
    kv_len: int
    tp: int = 1
    wall_s: float | None = None   # measured end-to-end time of the step, when the trace has it

    @property
    def tokens(self) -> int:
        return self.batch * self.q_len


@dataclass
class Trace:
    source: str
    vocabulary: str                 # "sim" (project labels) or "vidur"
    device: str                     # "cuda" or "cpu"
    device_name: str = ""
    model: ModelConfig | None = None
    dtype: str = "fp16"
    num_layers: int | None = None   # layers in the traced run (sim vocabulary)
    flash: bool = False
    steps: list[StepShape] = field(default_factory=list)
    ops: list[MeasuredOp] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def medians(self) -> list[MeasuredOp]:
        """One op per (step, name): the median over repeats (vidur's statistic), in first-seen order."""
        groups: dict[tuple[int, str], list[MeasuredOp]] = {}
        for op in self.ops:
            groups.setdefault((op.step, op.name), []).append(op)
        out = []
        for ops in groups.values():
            first = ops[0]
            out.append(MeasuredOp(first.name, first.kind, first.layer, first.step,
                                  statistics.median(o.duration_s for o in ops), first.device, first.start_s,
                                  statistics.median(o.cpu_duration_s for o in ops), first.kernels, len(ops)))
        return out

    def timeline(self) -> Timeline:
        """The measured ops as an engine Timeline (resource = device), tags are MeasuredOps."""
        return Timeline([Interval(f"{self.steps[o.step].label}/{o.name}#{o.repeat}" if self.steps else o.name,
                                  o.device, o.start_s, o.start_s + o.duration_s, o) for o in self.ops])


# --------------------------------------------------------------------------- loading

def load_trace(path: str | Path, model: str | None = None, tokens: int | None = None) -> list[Trace]:
    """Any supported file. A vidur table gives one Trace per (model, TP) with one
    step per row; a Chrome trace or ops table gives one Trace. `model` and
    `tokens` fill in what a vidur Chrome trace does not record."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: trace file not found")
    try:
        return _load_trace(p, model, tokens)
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a trace: binary data (not UTF-8 text)") from None


def _load_trace(p: Path, model: str | None, tokens: int | None) -> list[Trace]:
    name = p.name
    if name.endswith(".csv"):
        with open(p, newline="") as fh:
            header = next(csv.reader(fh), [])
        if any(h.startswith("time_stats.") for h in header):
            return load_vidur_table(p)
        if "op" in header and "cpu_time_us" in header:
            return [load_ops_table(p)]
        raise ConfigError(f"{p}: CSV is neither a vidur profile (time_stats.<op>.median columns) "
                          "nor a capture_trace ops table (op, cpu_time_us columns)")
    return [load_chrome_trace(p, model, tokens)]


def _read_json(p: Path, what: str = "a torch Chrome trace") -> Any:
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except (EOFError, OSError, zlib.error) as exc:
        raise ConfigError(f"{p}: not a readable gzip file ({exc}); truncated?") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not {what}: binary data, not JSON") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: not {what}: malformed JSON at line {exc.lineno}, "
                          f"column {exc.colno} ({exc.msg}); truncated?") from None


def _meta_beside(p: Path) -> dict[str, Any]:
    for suffix in (".trace.json.gz", ".trace.json", ".json.gz", ".json", ".ops.csv"):
        if p.name.endswith(suffix):
            meta = p.with_name(p.name[: -len(suffix)] + ".meta.json")
            if meta.is_file():
                return check_meta(_read_json(meta, "a capture_trace .meta.json"), str(meta))
    return {}


def _model_from_name(text: str) -> ModelConfig | None:
    """Hugging Face folder names as vidur writes them -> simulator presets:
    Llama-2-7b-hf -> llama2-7b, CodeLlama-34b-Instruct-hf -> codellama-34b, Meta-Llama-3-8B -> llama3-8b."""
    key = text.lower().removeprefix("meta-").replace("-instruct", "").removesuffix("-hf")
    key = re.sub(r"llama-(\d)", r"llama\1", key)
    try:
        return load_model(key)
    except ConfigError:
        return None


def _sim_steps_from_meta(meta: dict[str, Any]) -> list[StepShape]:
    """capture_trace runs a prefill of `prompt` tokens, then 1-token decode steps."""
    prompt, batch = int(meta["prompt"]), int(meta.get("batch", 1))
    walls = {int(s["step"]): s.get("wall_us") for s in meta.get("steps", [])}
    n = int(meta.get("decode_steps", len(walls) - 1 if walls else 0)) + 1
    out, pos = [], 0
    for j in range(n):
        q = prompt if j == 0 else 1
        wall = walls.get(j)
        out.append(StepShape(f"step{j}.{'prefill' if j == 0 else 'decode'}", "prefill" if j == 0 else "decode",
                             batch, q, pos + q, 1, wall * 1e-6 if wall is not None else None))
        pos += q
    return out


def _sim_model(meta: dict[str, Any], source: str) -> ModelConfig | None:
    m = meta.get("model")
    if isinstance(m, dict):
        return from_mapping(m, str(m.get("name", "traced")), source)
    return None


def load_chrome_trace(p: Path, model: str | None = None, tokens: int | None = None) -> Trace:
    data = _read_json(p)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ConfigError(f"{p}: not a torch Chrome trace: no traceEvents list")
    spans = _spans(p, events)
    if not spans:
        raise ConfigError(f"{p}: torch Chrome trace has no complete ('X') events")
    t0 = min(float(e["ts"]) for e in spans)

    ops_ann, steps_ann = [], []
    vocab = None
    for e in spans:
        if e.get("cat") != "user_annotation":
            continue
        name = str(e.get("name", ""))
        if _STEP_RE.match(name):
            steps_ann.append(e)
        elif _SIM_OP_RE.match(name) or _VIDUR_RE.match(name):
            this = "vidur" if name.startswith("vidur_") else "sim"
            if vocab and this != vocab:
                raise ConfigError(f"{p}: trace mixes vidur_<op> and simulator op labels")
            vocab = this
            ops_ann.append(e)
    if not ops_ann:
        raise ConfigError(f"{p}: no record_function op labels (neither `L<i>.<op>` nor `vidur_<op>`) in the trace")

    kernels = [e for e in spans if e.get("cat") in _KERNEL_CATS]
    device = "cuda" if kernels else "cpu"
    # kernel -> launching annotation, through the launch's correlation id
    launch_at: dict[Any, tuple[Any, float]] = {}
    for e in spans:
        if e.get("cat") in _LAUNCH_CATS:
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launch_at[corr] = ((e.get("pid"), e.get("tid")), float(e["ts"]))
    by_thread: dict[Any, list[dict]] = {}
    for e in sorted(ops_ann, key=lambda e: float(e["ts"])):
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    starts = {k: [float(e["ts"]) for e in v] for k, v in by_thread.items()}
    kernel_time: dict[int, float] = {}
    kernel_count: dict[int, int] = {}
    kernel_span: dict[int, tuple[float, float]] = {}
    gpu_ann = sorted((e for e in spans if e.get("cat") == "gpu_user_annotation"), key=lambda e: float(e["ts"]))
    for k in kernels:
        owner = _owner_by_launch(k, launch_at, by_thread, starts)
        if owner is None:
            owner = _owner_by_gpu_annotation(k, gpu_ann, by_thread)
        if owner is not None:
            kernel_time[id(owner)] = kernel_time.get(id(owner), 0.0) + float(k.get("dur", 0.0))
            kernel_count[id(owner)] = kernel_count.get(id(owner), 0) + 1
            ks, ke = float(k["ts"]), float(k["ts"]) + float(k.get("dur", 0.0))
            a, b = kernel_span.get(id(owner), (ks, ke))
            kernel_span[id(owner)] = (min(a, ks), max(b, ke))

    meta = _meta_beside(p)
    trace = Trace(str(p), vocab or "sim", device, meta.get("device_name", ""))
    props = data.get("deviceProperties") if isinstance(data, dict) else None
    if props and not trace.device_name:
        trace.device_name = str(props[0].get("name", ""))
    if vocab == "vidur":
        _vidur_trace_shape(trace, p, model, tokens)
    else:
        _sim_trace_shape(trace, meta, model)
    steps_ann.sort(key=lambda e: float(e["ts"]))
    step_starts = [float(e["ts"]) for e in steps_ann]
    if steps_ann and not trace.steps:
        raise ConfigError(f"{p}: step annotations but no {p.name.split('.')[0]}.meta.json beside the trace "
                          "to give the run's shapes")
    for s_ev in steps_ann:  # measured wall time of each step from its annotation
        j = int(_STEP_RE.match(s_ev["name"]).group(1))
        if j < len(trace.steps):
            s = trace.steps[j]
            trace.steps[j] = StepShape(s.label, s.phase, s.batch, s.q_len, s.kv_len, s.tp, float(s_ev["dur"]) * 1e-6)

    seen: dict[tuple[int, str], int] = {}
    for e in sorted(ops_ann, key=lambda e: float(e["ts"])):
        name = str(e["name"])
        ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
        if vocab == "vidur":
            op = name.removeprefix("vidur_")
            step, layer, kind = 0, 0, VIDUR_KINDS.get(op)
            if kind is None:
                continue  # a vidur op we do not model (e.g. attention wrappers)
        else:
            m = _SIM_OP_RE.match(name)
            layer = int(m.group(1)) if m.group(1) else None
            kind = SIM_KINDS.get(m.group(2) or m.group(3))
            if kind is None:
                continue
            i = bisect.bisect_right(step_starts, ts) - 1
            if i < 0 or ts > step_starts[i] + float(steps_ann[i]["dur"]):
                continue  # outside any step: warm-up or unlabelled
            step = int(_STEP_RE.match(steps_ann[i]["name"]).group(1))
            op = name
        repeat = seen.get((step, op), 0)
        seen[(step, op)] = repeat + 1
        measured = kernel_time.get(id(e), 0.0) if device == "cuda" else dur
        span = kernel_span.get(id(e))
        trace.ops.append(MeasuredOp(op, kind, layer, step, measured * 1e-6, device, (ts - t0) * 1e-6,
                                    dur * 1e-6, kernel_count.get(id(e), 0), repeat,
                                    ((span[0] - t0) * 1e-6, (span[1] - t0) * 1e-6) if span else None))
    if not trace.ops:
        raise ConfigError(f"{p}: no labelled op falls inside a step annotation")
    return trace


def _spans(p: Path, events: list[Any]) -> list[dict[str, Any]]:
    """The complete ('X') events, with `ts` and `dur` checked and made floats."""
    out = []
    for i, e in enumerate(events):
        if not (isinstance(e, dict) and e.get("ph") == "X" and "ts" in e):
            continue
        where = f"{p}: traceEvents[{i}] ({str(e.get('name', ''))[:40]!r})"
        ts = measured(e["ts"], f"{where}: ts")
        dur = measured(e.get("dur", 0.0), f"{where}: dur")
        out.append({**e, "ts": ts, "dur": dur})
    return out


def _owner_by_launch(k: dict, launch_at: dict, by_thread: dict, starts: dict) -> dict | None:
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


def _owner_by_gpu_annotation(k: dict, gpu_ann: list[dict], by_thread: dict) -> dict | None:
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


def _vidur_trace_shape(trace: Trace, p: Path, model: str | None, tokens: int | None) -> None:
    """vidur's traces record neither model nor token count: take them from the
    arguments, else from the file layout (<Model-hf>/..._num_tokens_<N>_...)."""
    cfg = load_model(model) if model else next(
        (c for c in (_model_from_name(d.name) for d in p.resolve().parents) if c), None)
    if cfg is None:
        raise ConfigError(f"{p}: vidur trace without a model: pass --model (e.g. llama2-7b)")
    if tokens is None:
        m = re.search(r"num_tokens_0*(\d+)", p.name)
        if not m:
            raise ConfigError(f"{p}: vidur trace without a token count in its name: pass --tokens N")
        tokens = int(m.group(1))
    tp = re.search(r"tp(\d+)_", p.name)
    trace.model, trace.dtype, trace.num_layers = cfg, _VIDUR_DTYPE, 1
    trace.steps = [StepShape(f"tokens={tokens}", "prefill", 1, tokens, tokens, int(tp.group(1)) if tp else 1)]


def _sim_trace_shape(trace: Trace, meta: dict[str, Any], model: str | None) -> None:
    if not meta:
        return
    trace.model = load_model(model) if model else _sim_model(meta, trace.source)
    trace.dtype = str(meta.get("dtype", "fp32"))
    try:
        get_format(trace.dtype)
    except ConfigError as exc:
        raise ConfigError(f"{trace.source}: dtype in its .meta.json: {exc}") from None
    trace.num_layers = int(meta["layers"]) if "layers" in meta else None
    trace.flash = bool(meta.get("flash", False))
    trace.device_name = trace.device_name or str(meta.get("device_name", ""))
    trace.meta = meta
    trace.steps = _sim_steps_from_meta(meta)


def load_ops_table(p: Path) -> Trace:
    """capture_trace's PREFIX.ops.csv (+ PREFIX.meta.json): one row per op per step."""
    meta = _meta_beside(p)
    if not meta:
        raise ConfigError(f"{p}: ops table without its .meta.json beside it")
    device = str(meta.get("device", "cpu"))
    trace = Trace(str(p), "sim", device)
    _sim_trace_shape(trace, meta, None)
    seen: dict[tuple[int, str], int] = {}
    t = 0.0
    with open(p, newline="") as fh:
        for i, row in enumerate(csv.DictReader(fh), start=2):
            try:
                name, step = row["op"], int(row["step"])
                if step < 0:
                    raise ValueError(f"step {step} is negative")
                us = measured(row["device_time_us"] if device == "cuda" else row["cpu_time_us"], f"{p}: line {i}")
                cpu_us = measured(row["cpu_time_us"], f"{p}: line {i}: cpu_time_us")
            except (KeyError, ValueError, TypeError) as exc:
                raise ConfigError(f"{p}: line {i}: bad ops-table row ({exc})") from None
            m = _SIM_OP_RE.match(name)
            kind = SIM_KINDS.get((m.group(2) or m.group(3)) if m else "")
            if kind is None:
                continue
            repeat = seen.get((step, name), 0)
            seen[(step, name)] = repeat + 1
            trace.ops.append(MeasuredOp(name, kind, int(m.group(1)) if m.group(1) else None, step, us * 1e-6,
                                        device, t, cpu_us * 1e-6, 0, repeat))
            t += us * 1e-6
    return trace


def load_vidur_table(p: Path) -> list[Trace]:
    """vidur's mlp.csv: per (num_tokens, TP) row, the median ms of each op.
    One Trace per TP degree, one step per row."""
    with open(p, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ConfigError(f"{p}: empty vidur table")
    need = ("num_tokens", "num_tensor_parallel_workers", "n_head", "n_embd", "n_expanded_embd")
    missing = [c for c in need if c not in rows[0]]
    if missing:
        raise ConfigError(f"{p}: vidur table lacks column(s) {', '.join(missing)}")
    ops = [op for op in VIDUR_KINDS if f"time_stats.{op}.median" in rows[0]]
    r0 = rows[0]
    try:
        cfg = from_mapping({"hidden_size": int(r0["n_embd"]), "intermediate_size": int(r0["n_expanded_embd"]),
                            "num_attention_heads": int(r0["n_head"]),
                            "num_key_value_heads": int(r0.get("n_kv_head") or r0["n_head"]),
                            "vocab_size": int(float(r0.get("vocab_size") or 32000)), "num_hidden_layers": 1},
                           p.parent.name, str(p))
    except ValueError as exc:
        raise ConfigError(f"{p}: line 2: bad model column ({exc})") from None
    named = _model_from_name(p.parent.name)
    if named is not None:  # keep the preset's name and vocabulary; shapes come from the table
        cfg = ModelConfig(named.name, cfg.hidden_size, cfg.intermediate_size, 1, cfg.num_heads,
                          cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size, named.max_position_embeddings)
    by_tp: dict[int, Trace] = {}
    seen: set[tuple[int, int]] = set()
    for i, row in enumerate(rows, start=2):
        try:
            tokens, tp = int(row["num_tokens"]), int(row["num_tensor_parallel_workers"])
            times = {op: measured(row[f"time_stats.{op}.median"], f"{p}: line {i}: time_stats.{op}.median") * 1e-3
                     for op in ops}
        except (KeyError, ValueError, TypeError) as exc:
            raise ConfigError(f"{p}: line {i}: bad vidur row ({exc})") from None
        if (tokens, tp) in seen:
            continue  # vidur's token ranges overlap at 2048 and 4096; keep the first
        seen.add((tokens, tp))
        tr = by_tp.setdefault(tp, Trace(f"{p}#tp{tp}", "vidur", "cuda", p.parent.parent.name, cfg,
                                        _VIDUR_DTYPE, 1))
        j = len(tr.steps)
        tr.steps.append(StepShape(f"tokens={tokens} tp={tp}", "prefill", 1, tokens, tokens, tp))
        for op, s in times.items():
            tr.ops.append(MeasuredOp(op, VIDUR_KINDS[op], 0, j, s, "cuda"))
    return [by_tp[k] for k in sorted(by_tp)]

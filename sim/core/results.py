"""Results of a run, derived from timelines by pure functions."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from sim.core.engine import Timeline
from sim.core.errors import SimError
from sim.core.frozen import frozen


@frozen
class OpRecord:
    name: str
    kind: str
    unit: str
    start_s: float
    end_s: float
    flops: float
    bytes: float
    bound: str
    path: str = ""
    energy_j: float = 0.0
    group: str = ""     # the execution this record is a piece of (its name when whole)
    op: str = ""        # the op it works for, across layers, sub-batches and head groups

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def base_name(self) -> str:
        return _without_layer(self.name)


def layer_of(name: str) -> int | None:
    """The layer an op works for, from its name (`L12.q_proj` -> 12: the lowering names layer ops `L<i>.<op>`);
    None for the embedding and the head."""
    head, _, tail = name.partition(".")
    return int(head[1:]) if head.startswith("L") and head[1:].isdigit() and tail else None


def _without_layer(name: str) -> str:
    """`L12.q_proj` -> `q_proj` (the lowering names layer ops `L<i>.<op>`)."""
    return name.partition(".")[2] if layer_of(name) is not None else name


def whole_op(name: str) -> str:
    """The op a part of it on one unit belongs to: a kind that splits an op over units running at once names
    each part `<op>@<unit>` (the PIM stacks, a spatial chip's resources): `L0.down_proj@stack3` -> `L0.down_proj`."""
    return name.partition("@")[0]


@frozen
class InnerOp:
    """One op of a task that stands for several run one after another (a pipeline stage of one micro-batch,
    hw_models.gpu.stage_ops): the schedule needs only the task, a report needs its ops. `offset_s` from the
    task's start; `tag` an OpCost or alike, read as a task's tag is."""

    name: str
    offset_s: float
    duration_s: float
    tag: Any = None


def _record(name: str, unit: str, start_s: float, end_s: float, c: Any, group: str, op_name: str) -> OpRecord:
    """A part of an op split over units that run at once (`<op>@<unit>`: a PIM stack's piece, a spatial chip's
    slice) carries its `fraction` of the op's FLOPs and bytes, so that a step's records sum to its ops'."""
    op = getattr(c, "op", None)
    share = getattr(c, "fraction", 1.0)
    return OpRecord(
        name=name, kind=op.kind if op is not None else getattr(c, "kind", "transfer"),
        unit=unit, start_s=start_s, end_s=end_s,
        flops=op.flops * share if op is not None else getattr(c, "flops", 0.0),
        bytes=float(op.bytes * share if op is not None else getattr(c, "bytes", 0.0)),
        bound=getattr(c, "bound", "link"), path=getattr(c, "path", ""),
        energy_j=getattr(c, "energy_j", 0.0), group=group, op=op_name)


def op_records(timeline: Timeline) -> list[OpRecord]:
    """Intervals whose tag is an OpCost (or has the same fields) become op records. A tag whose
    `inner_ops()` lists the ops its task ran one after another (InnerOp) gives one record per op
    instead, `<task>.<op>` on the task's resource (the op's own name, across tasks, for tables)."""
    out = []
    for i in timeline.intervals:
        inner = getattr(i.tag, "inner_ops", None)
        parts = inner() if callable(inner) else ()
        if not parts:
            out.append(_record(i.task, i.resource, i.start_s, i.end_s, i.tag, i.group or i.task,
                               i.op or i.group or i.task))
        for p in parts:
            name, start = f"{i.task}.{p.name}", i.start_s + p.offset_s
            out.append(_record(name, i.resource, start, start + p.duration_s, p.tag, name, p.name))
    return sorted(out, key=lambda o: (o.start_s, o.name))


@dataclass(frozen=True)
class StepResult:
    """One step of a run: its time, each resource's busy time, the energy its
    tasks reported, and extensive counters a kind keeps (bytes over a link)."""

    phase: str
    kv_len: int
    time_s: float
    busy_s: dict[str, float]
    energy_j: float = 0.0
    counters: dict[str, float] = field(default_factory=dict)


@dataclass
class RunResult:
    workload: str
    hardware: str
    kind: str                           # the hardware kind (hw_models.kinds) that ran it
    model: dict[str, Any]
    params: int
    batch: int
    prompt_len: int
    gen_len: int
    formats: dict[str, Any]
    ttft_s: float
    tpot_s: float
    tpot_first_s: float
    tpot_last_s: float
    e2e_s: float
    throughput_tok_s: float
    peak_memory_bytes: dict[str, float]
    memory_by_role: dict[str, dict[str, float]]
    utilization: dict[str, float]
    energy_per_token_j: float
    prefill_ops: list[OpRecord]
    decode_ops: list[OpRecord]          # one representative decode step, every op
    decode_kv_len: int
    prefill_timeline: Timeline
    decode_timeline: Timeline
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)   # kind-specific report sections
    simulated_steps: int = 0
    exhaustive: bool = False
    stack: str = ""                     # the software stack costed (hw_models/stack/presets); "" = none
    stack_ignored: str = ""             # one the workload named that this kind costs no stack under
    memory_scope: str = ""              # whose bytes memory_by_role counts (Footprint.scope)
    # Where the kind splits energy by phase: prefill J per prompt token, decode J per token a decode step
    # generates (the first token comes from prefill). None: the kind does not split it.
    prefill_energy_per_token_j: float | None = None
    decode_energy_per_token_j: float | None = None
    devices: int = 1                    # devices drawing the run's energy (a parallel plan's, a spatial kind's chips)
    power_includes: str = ""            # what the power holds beyond the devices' boards (offload: its host)

    @property
    def avg_power_per_device_w(self) -> float:
        """The run's energy over its time and its devices: the mean board power one device draws."""
        return self.energy_total_j / (self.e2e_s * self.devices) if self.e2e_s and self.devices else 0.0

    @property
    def energy_total_j(self) -> float:
        """The run's energy: its J per output token over its output tokens."""
        return self.energy_per_token_j * self.batch * self.gen_len

    @property
    def energy_by_phase_j(self) -> dict[str, float] | None:
        """The run's energy split by phase, as `sim serve` gives it (None without the split: a busy-time preset)."""
        if self.prefill_energy_per_token_j is None:
            return None
        prefill = self.prefill_energy_per_token_j * self.batch * self.prompt_len
        return {"prefill": prefill, "decode": self.energy_total_j - prefill}

    @property
    def replicas(self) -> int:
        """The plan's data-parallel replicas (1 without one): the run simulates one of them."""
        return int(((self.extra.get("parallel") or {}).get("plan") or {}).get("dp", 1))

    def to_json(self) -> dict[str, Any]:
        """What `sim run --json` writes (less the hardware figures, which the result does not keep): the inputs, every
        metric in SI units, `ops` (the middle decode step's records: name, kind, unit, start_s, end_s, flops, bytes,
        bound, path), `notes` and the kind's `extra` sections."""
        ops = [dict(name=o.name, kind=o.kind, unit=o.unit, start_s=o.start_s, end_s=o.end_s,
                    flops=o.flops, bytes=o.bytes, bound=o.bound, path=o.path)
               for o in (self.decode_ops if self.gen_len > 1 else [])]   # no decode step at gen_len 1 (to_pandas)
        return dict(
            workload=self.workload, hardware=self.hardware, kind=self.kind, stack=self.stack, model=self.model,
            params=self.params,
            batch=self.batch, prompt_len=self.prompt_len, gen_len=self.gen_len, formats=self.formats,
            ttft_s=self.ttft_s, tpot_s=_number(self.tpot_s), tpot_first_s=_number(self.tpot_first_s),
            tpot_last_s=_number(self.tpot_last_s), e2e_s=self.e2e_s, throughput_tok_s=self.throughput_tok_s,
            peak_memory_bytes=self.peak_memory_bytes, memory_by_role=self.memory_by_role,
            memory_scope=self.memory_scope, utilization=self.utilization, energy_per_token_j=self.energy_per_token_j,
            prefill_energy_per_token_j=self.prefill_energy_per_token_j,
            decode_energy_per_token_j=self.decode_energy_per_token_j, devices=self.devices,
            parallel=(self.extra.get("parallel") or {}).get("plan") or {},
            # dp replicas: the figures above are one replica's (its devices, its throughput), as the report says;
            # the deployment's beside them (a parallelism trial read the replica's tokens/s as the whole's)
            replicas=self.replicas, throughput_all_replicas_tok_s=self.replicas * self.throughput_tok_s,
            avg_power_per_device_w=self.avg_power_per_device_w,
            # the joules themselves, as `sim serve --json` gives them (an energy trial found only per-token figures)
            energy_total_j=self.energy_total_j, energy_by_phase_j=self.energy_by_phase_j,
            **({"power_includes": self.power_includes} if self.power_includes else {}),
            decode_kv_len=self.decode_kv_len, ops=ops, notes=self.notes,
            extra=self.extra,
            simulated_steps=self.simulated_steps, exhaustive=self.exhaustive,
            **({"stack_ignored": self.stack_ignored} if self.stack_ignored else {}))

    def to_pandas(self, what: str = "metrics"):
        """A pandas DataFrame, for notebooks: "metrics" (one row of metrics()), "decode" (the
        representative decode step, one row per op) or "prefill" (the prefill step's ops)."""
        import pandas as pd   # only here: the simulator itself does not need pandas

        if what == "metrics":
            return pd.DataFrame([dict(workload=self.workload, hardware=self.hardware, **self.metrics())])
        if what not in ("decode", "prefill"):
            raise ValueError(f"to_pandas({what!r}): 'metrics', 'decode' or 'prefill'")
        # no decode step runs at gen_len 1 (the first token is prefill's): the representative step the run costed
        # anyway is not one of its steps (a trial read a 603-op decode step of a prefill-only run)
        ops = (self.decode_ops if self.gen_len > 1 else []) if what == "decode" else self.prefill_ops
        # `op`: the op a record works for, without its layer (a pipelined step's records name their micro-batch and
        # stage too: mb0.stage1.L40.q_proj works for q_proj); `path`: how its format computed (`int4 -> fp16 dequant`)
        return pd.DataFrame([dict(name=o.name, op=_without_layer(o.op or o.name), kind=o.kind, unit=o.unit,
                                  start_s=o.start_s, end_s=o.end_s, duration_s=o.duration_s, flops=o.flops,
                                  bytes=o.bytes, bound=o.bound, path=o.path, energy_j=o.energy_j) for o in ops],
                            columns=["name", "op", "kind", "unit", "start_s", "end_s", "duration_s", "flops", "bytes",
                                     "bound", "path", "energy_j"])

    def metrics(self) -> dict[str, float]:
        """Flat scalar metrics, for sweeps and tables."""
        out = dict(ttft_s=self.ttft_s, tpot_s=self.tpot_s, tpot_first_s=self.tpot_first_s,
                   tpot_last_s=self.tpot_last_s, e2e_s=self.e2e_s, throughput_tok_s=self.throughput_tok_s,
                   energy_per_token_j=self.energy_per_token_j, avg_power_per_device_w=self.avg_power_per_device_w,
                   params=float(self.params),
                   # the batch the run simulated: the workload's, or (offload) the block its policy chose under it,
                   # so a sweep's row shows where a batch axis did not reach the model
                   batch_simulated=float(self.batch))
        # throughput_tok_s is one replica's (to_json); the deployment's at every dp, so a sweep over dp has its baseline
        out["throughput_all_replicas_tok_s"] = self.replicas * self.throughput_tok_s
        for phase in ("prefill", "decode"):   # only where split: old presets keep their keys
            value = getattr(self, f"{phase}_energy_per_token_j")
            if value is not None:
                out[f"{phase}_energy_per_token_j"] = value
        for tier, b in self.peak_memory_bytes.items():
            out[f"peak_memory_bytes.{tier}"] = b
        for res, u in self.utilization.items():
            out[f"utilization.{res}"] = u
        for k, v in self.extra.get("metrics", {}).items():
            out[k] = v
        return out


def check_finite(result: "RunResult", source: str) -> "RunResult":
    """A run whose times are NaN, infinite or negative came from hardware figures out of
    any physical range (a bandwidth of 1e-300 B/s); say so instead of reporting it."""
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        value = getattr(result, key)
        if key == "tpot_s" and result.gen_len <= 1:
            continue   # no decode step: NaN says there is no TPOT
        if not (math.isfinite(value) and value >= 0):
            raise SimError(f"{source}: the simulated {key} is {value}: a rate or size in the hardware "
                           "is out of any physical range")
    return result


def pieces_of(ops: list[OpRecord]) -> dict[str, list[OpRecord]]:
    """The records of each execution (`group`, else the record's own name), in order."""
    groups: dict[str, list[OpRecord]] = {}
    for o in ops:
        groups.setdefault(o.group or o.name, []).append(o)
    return groups


def merge_pieces(ops: list[OpRecord]) -> list[OpRecord]:
    """Pieces of one execution that ran side by side (per stack, per chip) become one
    record spanning them, so a table counts the op's wall time once (and its pieces' FLOPs, bytes and energy)."""
    out = []
    for name, pieces in pieces_of(ops).items():
        first = pieces[0]
        out.append(first if len(pieces) == 1 else replace(
            first, name=name, start_s=min(p.start_s for p in pieces), end_s=max(p.end_s for p in pieces),
            flops=sum(p.flops for p in pieces), bytes=sum(p.bytes for p in pieces),
            energy_j=sum(p.energy_j for p in pieces)))
    return out


def group_name(o: OpRecord) -> str:
    """The name an op shares across layers, sub-batches, head groups and pieces."""
    return _without_layer(o.op or o.name)


def aggregate_by_name(ops: list[OpRecord]) -> list[tuple[str, str, float, str, int]]:
    """(base name, kind, total seconds, dominant bound, count) across layers (and GPU
    batches), slowest first."""
    acc: dict[str, list] = {}
    for o in merge_pieces(ops):
        a = acc.setdefault(group_name(o), [o.kind, 0.0, {}, 0])
        a[1] += o.duration_s
        a[2][o.bound] = a[2].get(o.bound, 0.0) + o.duration_s
        a[3] += 1
    rows = [(name, kind, t, max(b, key=b.get), n) for name, (kind, t, b, n) in acc.items()]
    return sorted(rows, key=lambda r: -r[2])


def time_by_bound(ops: list[OpRecord]) -> dict[str, float]:
    """Device seconds of a step's ops summed by what bounds each (OpCost.bound), largest first; the engine's host
    work, which overlaps the device's ops, left out. An execution's pieces count the time they cover, each piece its
    own bound: side by side (PIM stacks) once, one after another (a spatial op split over consecutive chips) each, and
    never the hop between them, which merge_pieces' span holds (a review read a Groq step's compute twice over)."""
    acc: dict[str, float] = {}
    for pieces in pieces_of([o for o in ops if o.kind != "engine"]).values():
        end = float("-inf")
        for p in sorted(pieces, key=lambda p: (p.start_s, p.end_s)):
            if p.end_s > end:
                acc[p.bound] = acc.get(p.bound, 0.0) + p.end_s - max(p.start_s, end)
                end = p.end_s
    return dict(sorted(acc.items(), key=lambda kv: -kv[1]))


def _number(v: float) -> float | None:
    """A figure for JSON: None where there is none (NaN: a run with no decode step has no TPOT)."""
    return None if math.isnan(v) else v

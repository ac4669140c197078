"""`sim diff A.json B.json`: what changed between two `sim run --json` results (the inputs that differ,
each hardware figure a `--set hw.*` or a hardware file changed among them, the headline metrics, and the
decode step op by op, each op summed over its layers, largest change first), or between two `sim serve --json`
summaries (the inputs a summary records, the hardware, and the serving metrics: latency means and tails,
throughput, goodput, energy)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from rich.console import Console
from rich.table import Table

from sim.core import tables
from sim.core.errors import ConfigError
from hw_models.gpu.stage_ops import split_stage
from hw_models.power import limit_binds
from hw_models.registry import HW_FIGURES, HW_OVERRIDES
from sim.core.results import _without_layer, whole_op
from sim.core.schema import require_file, validation_error
from sim.core.settings import dotted_items
from sim.core.units import fmt_time

METRICS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s", "energy_per_token_j", "decode_energy_per_token_j",
           "prefill_energy_per_token_j", "avg_power_per_device_w", "devices")
TIMES = ("ttft_s", "tpot_s", "e2e_s")
INPUTS = ("workload", "hardware", "kind", "stack", "batch", "prompt_len", "gen_len", "formats", "parallel", "model",
          "decode_kv_len", "exhaustive")
# A serve summary records no serving file and none of its --set items (arrival rate, lengths): these are the
# inputs it holds (sim.apps.serve.cli adds the first five to the stream's figures).
SERVE_INPUTS = ("hardware", "model", "stack", "formats", "parallel", "scheduler", "deployment", "exact", "slo",
                "requests", "instances", "kv_block_tokens")
SERVE_METRICS = (*(f"latency.{m}.{s}" for m in ("ttft", "tpot", "tbt", "e2e", "queue") for s in ("mean", "p90", "p99")),
                 "throughput_req_s", "throughput_tok_s", "goodput_req_s", "goodput_tok_s", "energy_per_token_j",
                 "energy.avg_power_per_device_w", "energy.peak_power_per_device_w", "energy.total_j", "completed",
                 "rejected", "preemptions",
                 "duration_s")
SERVE_UNRECORDED = ("a serve summary of an older sim records its hardware, model, scheduler, deployment, SLO and request "
                    "count, not its serving section (arrival rate, lengths): those are not compared")
HW_ROWS = 12   # hardware figures listed without --all: two presets of different kinds differ in dozens
# Words about the machine, not figures of it: `hardware` already shows the name, and a description is prose.
NOT_FIGURES = ("name", "description", "version")


@dataclass(frozen=True)
class Shape:
    """What sim diff compares of one kind of result."""

    what: str                    # how a message names it
    inputs: tuple[str, ...]
    metrics: tuple[str, ...]     # dotted paths into the JSON (latency.ttft.p90)
    times: tuple[str, ...]       # the metrics shown as times: these keys, or keys under them


class _Op(BaseModel):
    """What sim diff reads of a run's op record."""

    name: str
    kind: str
    start_s: float
    end_s: float


class _Extra(BaseModel):
    model_config = ConfigDict(extra="allow")
    power_cap: dict[str, Any] | None = None


class _Energy(BaseModel):
    model_config = ConfigDict(extra="allow")
    note: str | None = None


class _Fields(BaseModel):
    """The fields sim diff reads beyond the metrics (which it skips where they are not numbers), checked before it
    reads them: a hand-edited or corrupt file (`"ops": "x"`, `"notes": 5`) is refused in one line naming the key
    (a hostile-input trial had tracebacks on each)."""

    model_config = ConfigDict(extra="allow")
    notes: list[str] | None = None
    extra: _Extra | None = None
    energy: _Energy | None = None
    serving: dict[str, Any] | None = None
    hw_figures: dict[str, Any] | None = None
    hw_overrides: dict[str, Any] | None = None


class _RunFields(_Fields):
    ops: list[_Op]


RUN = Shape("a `sim run --json` result", INPUTS, METRICS, TIMES)
SERVE = Shape("a `sim serve --json` summary", SERVE_INPUTS, SERVE_METRICS, ("latency", "duration_s"))


def shape_of(path: str, data: Any) -> Shape:
    """Which kind of result `data` is; anything else is refused in one line that says what to give."""
    keys = set(data) if isinstance(data, dict) else set()
    if {"ops", "tpot_s"} <= keys:
        return RUN
    if {"latency", "requests"} <= keys:
        return SERVE
    if "summary" in keys and keys & {"capacity_rate_req_s", "capacity_clients"}:
        raise ConfigError(f"{path}: a `sim serve --find-capacity` result; sim diff compares two `sim serve --json` "
                          "summaries: rerun each at the rate (or clients) it found, with --json, and diff those")
    raise ConfigError(f"{path}: not a `sim run --json` result (no tpot_s and ops) or a `sim serve --json` summary "
                      "(no latency and requests); sim diff compares two runs' JSON, or two serve summaries")


def load_result(path: str) -> tuple[dict[str, Any], Shape]:
    """A `sim run --json` result or a `sim serve --json` summary, checked to be one, and which."""
    p = Path(path)
    require_file(p, expected="a `sim run --json` result or `sim serve --json` summary")
    try:
        data = json.loads(p.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({str(exc).splitlines()[0]})") from None
    shape = shape_of(path, data)
    try:
        (_RunFields if shape is RUN else _Fields).model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, path) from None
    return data, shape


def load_pair(a: str, b: str) -> tuple[dict[str, Any], dict[str, Any], Shape]:
    """Both results, refused in one line unless of one kind: a run's metrics are not a serve summary's."""
    (da, sa), (db, sb) = load_result(a), load_result(b)
    if sa != sb:
        raise ConfigError(f"{a} is {sa.what} and {b} {sb.what}: sim diff compares two of one kind "
                          "(two sim run --json results, or two sim serve --json summaries)")
    return da, db, sa


def ops_by_name(data: dict[str, Any]) -> dict[str, tuple[str, float]]:
    """Decode-step ops by name without the layer (L3.q_proj -> q_proj) or the pipeline stage: (kind, summed seconds).
    The parts of one op on units that run at once count once, from the first's start to the last's end: summed,
    a PIM run's five stacks read five times the op's time (a new user's diff of a GPU and a PIM run)."""
    spans: dict[str, tuple[str, float, float]] = {}
    for o in data["ops"]:
        one = whole_op(o["name"])
        kind, start, end = spans.get(one, (o["kind"], o["start_s"], o["end_s"]))
        spans[one] = (kind, min(start, o["start_s"]), max(end, o["end_s"]))
    out: dict[str, tuple[str, float]] = {}
    for one, (kind, start, end) in spans.items():
        name = _without_layer(split_stage(one)[1])
        kind, secs = out.get(name, (kind, 0.0))
        out[name] = (kind, secs + end - start)
    return out


def changed_inputs(a: dict[str, Any], b: dict[str, Any], keys: tuple[str, ...] = INPUTS) -> list[tuple[str, str, str]]:
    """(key, A, B) for each input that differs, nested mappings key by key (model.num_layers)."""
    rows = []
    for key in keys:
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            rows += [(f"{key}.{k}", str(x.get(k, "-")), str(y.get(k, "-")))
                     for k in sorted(set(x) | set(y), key=str) if x.get(k) != y.get(k)]
        elif x != y:
            rows.append((key, str(x), str(y)))
    return rows


def _ratio(x: float, y: float) -> str:
    return f"{y / x:.3g}x" if x else "-"


def _busy_time(data: dict[str, Any]) -> str | None:
    """What a result's J/token counts where its energy carries the busy-time note (a run among its notes, a serve
    summary under energy), hw_models.power.busy_time_note's words: "power_w over busy time, nothing between" or a
    spatial chip's "every chip's power_w over the whole run"; None where it has the board-power model."""
    notes = [*(data.get("notes") or []), (data.get("energy") or {}).get("note") or ""]
    for n in notes:
        if n.startswith("energy:") and "does not compare" in n:
            if "its J/token counts " not in n:
                return "busy-time power only"
            how = n.split("its J/token counts ", 1)[1].split(";")[0].split(", plus")[0].split(" (no J/")[0]
            return "busy-time power only" if how.startswith("power_w over busy time") else how
    return None


def energy_footing(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """A note where the two runs' energy models differ (a busy-time preset's note, hw_models.power.busy_time_note,
    on one side only), so the J/token ratio compares two bookkeepings, not two machines; and where a side is a PIM
    run, whose PIM units draw no static or activity power (hw_models/pim/report.py): its J/token is a lower bound."""
    busy = [(h, how) for h in (a, b) if (how := _busy_time(h))]
    notes = []
    if len(busy) == 1:   # an architecture trial: a Groq run, which counts every chip over the whole run, read "busy time"
        notes.append(f"energy_per_token_j: {busy[0][0].get('hardware')} counts {busy[0][1]} (no board-power model), "
                     "the other run idle + activity + dynamic power: the ratio mixes the two models (docs/energy.md)")
    elif len(busy) == 2 and busy[0][1] != busy[1][1]:   # two busy-time presets that count two ways (a review)
        notes.append("energy_per_token_j: " + "; ".join(f"{h.get('hardware')} counts {how}" for h, how in busy)
                     + " (no board-power model either): the ratio mixes two bookkeepings (docs/energy.md)")
    # a run's extra.pim, or a serve summary's hardware figures (it records no extra): the PIM kind
    pim = [h.get("hardware") for h in (a, b)
           if "pim" in (h.get("extra") or {}) or (h.get("hw_figures") or {}).get("kind") == "pim"]
    if pim and len(pim) < 2:   # a PIM-vs-GPU ratio read as PIM's win: part of it is power not modelled
        notes.append(f"energy_per_token_j: {pim[0]}'s PIM units draw no static or activity power here (not modelled, "
                     "docs/pim.md): its J/token is a lower bound beside the other run's")
    return "\n".join(notes) or None


def _at(data: dict[str, Any], path: str) -> Any:
    """The value at a dotted path (latency.ttft.p90), None where any step is missing."""
    for key in path.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _figure(figures: dict[str, Any], overrides: dict[str, Any], key: str) -> str:
    """One side's cell: the figure, marked where a --set gave it. A null figure takes the field's default
    (power_limit_w null: the TDP, power_w), which the machine's schema knows and the JSON does not."""
    if key not in figures:
        return "-"
    value = figures[key]
    text = "null (default)" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)
    return text + (" (--set)" if key in overrides else "")


def hardware_rows(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(hw.KEY, A, B) for each effective hardware figure (hw_models.registry.hardware_record) that differs;
    none where either side recorded no figures (hardware_note says so)."""
    if not (a.get(HW_FIGURES) and b.get(HW_FIGURES)):
        return []
    fa, fb = dict(dotted_items(a[HW_FIGURES])), dict(dotted_items(b[HW_FIGURES]))
    set_a, set_b = a.get(HW_OVERRIDES) or {}, b.get(HW_OVERRIDES) or {}
    keys = [k for k in sorted(set(fa) | set(fb))
            if k.split(".")[0] not in NOT_FIGURES and (k in fa, fa.get(k)) != (k in fb, fb.get(k))]
    # what a --set gave, then figures both machines have (a bandwidth), then parts one lacks (a link): the rows
    # without --all stop at the first few
    keys.sort(key=lambda k: (k not in set_a and k not in set_b, k not in fa or k not in fb))
    return [(f"hw.{k}", _figure(fa, set_a, k), _figure(fb, set_b, k)) for k in keys]


def hardware_note(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Where a side recorded no figures, that its --set hw.* and hardware file went uncompared."""
    missing = [name for name, data in (("A", a), ("B", b)) if not data.get(HW_FIGURES)]
    if not missing:
        return None
    return (f"hardware figures: not recorded in {' or '.join(missing)} (written by an older sim, the Python API or a "
            "disaggregated sim serve): --set hw.* and hardware-file changes are not compared, only the preset name")


def serving_rows(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(serving.KEY, A, B) for each setting of the serving sections that differs (arrivals.rate, lengths...)."""
    fa, fb = (dict(dotted_items(d.get("serving") or {})) for d in (a, b))
    return [(f"serving.{k}", str(fa.get(k, "-")), str(fb.get(k, "-"))) for k in sorted(set(fa) | set(fb))
            if fa.get(k) != fb.get(k)]


def input_rows(a: dict[str, Any], b: dict[str, Any], shape: Shape, every: bool) -> list[tuple[str, str, str]]:
    """The inputs that differ (a serve summary's serving settings among them), then the hardware figures (the
    first HW_ROWS unless `every`)."""
    hw = hardware_rows(a, b)
    more = [] if every or len(hw) <= HW_ROWS else [(f"(and {len(hw) - HW_ROWS} more hw.* figures; --all lists them)", "", "")]
    serving = serving_rows(a, b) if shape is SERVE else []
    return changed_inputs(a, b, shape.inputs) + serving + hw[: None if every else HW_ROWS] + more


def _inputs_table(rows: list[tuple[str, str, str]]) -> Table:
    table = Table(title="inputs that differ", title_justify="left")
    for col in ("input", "A", "B"):
        table.add_column(col)
    for row in rows or [("(none)", "", "")]:
        table.add_row(*row)
    return table


def _metrics_table(a: dict[str, Any], b: dict[str, Any], shape: Shape) -> Table:
    table = Table(title="metrics", title_justify="left")
    for col in ("metric", "A", "B", "B / A"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for m in shape.metrics:
        x, y = _at(a, m), _at(b, m)
        if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):   # None: not measured (no tokens)
            continue
        show = fmt_time if m.split(".")[0] in shape.times else (lambda v: f"{v:,.4g}")
        table.add_row(m, show(x), show(y), _ratio(x, y))
    return table


def _ops_table(a: dict[str, Any], b: dict[str, Any], every: bool) -> Table:
    oa, ob = ops_by_name(a), ops_by_name(b)
    # largest change first, then by name: ties keep one order from run to run
    names = sorted(set(oa) | set(ob), key=lambda n: (-abs(ob.get(n, ("", 0.0))[1] - oa.get(n, ("", 0.0))[1]), n))
    capped = [(tag, any("op records (--json ops, --chrome-trace) run at the lowered clock" in n for n in d.get("notes", [])))
              for tag, d in (("A", a), ("B", b))
              if ((d.get("extra") or {}).get("power_cap") or {}).get("decode_board_w") is not None]
    # a run's op records are at its capped clock where its note says so (hw_models.power.at_capped_clock; a docs trial
    # read "at full clock" over ops stretched 1.65x), a pipeline's stages at full clock
    said = [f"{tag}'s ops run at the clock its board power cap (or clock lock) leaves" if slow else
            f"{tag}'s ops at full clock: its board power cap stretches its decode step as a whole (the metrics above)"
            for tag, slow in capped]
    caption = ("each op summed over its layers (its parts on units that run at once counted once); largest change first"
               + "".join(f"; {x}" for x in said))
    ops = Table(title="decode step, op by op", caption=caption, title_justify="left", caption_justify="left")
    for col in ("op", "kind", "A", "B", "B - A", "B / A"):
        ops.add_column(col, justify="left" if col in ("op", "kind") else "right")
    for n in names[: None if every else 20]:
        kind, x = oa.get(n, (ob.get(n, ("", 0.0))[0], 0.0))
        y = ob.get(n, (kind, 0.0))[1]
        ops.add_row(n, kind, fmt_time(x) if n in oa else "absent", fmt_time(y) if n in ob else "absent",
                    ("+" if y >= x else "-") + fmt_time(abs(y - x)), _ratio(x, y))
    return ops


def cap_note(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Which run a binding board power limit slowed, and by how much: the metrics above include it, and a faster
    design whose TTFT read 1.26x worse gave no reason (an architecture trial: its 500 W cap stretched prefill +68%)."""
    said = []
    for tag, d in (("A", a), ("B", b)):
        run = (d.get("extra") or {}).get("power_cap") or {}
        serve = (d.get("energy") or {}).get("power_cap") or {}
        # a phase the limit bound: its board would have drawn more (a memory-bound one meets it in the same time)
        phases = [f"{p} +{run[p + '_stretch']:.1%}" for p in ("prefill", "decode")
                  if (run.get(p + "_s") or 0) > 0 or run.get(p + "_board_w") is not None]
        phases += [f"engine time +{serve['stretch']:.1%}"] if serve else []
        lock = run.get("clock_lock") or serve.get("clock_lock") or 1.0
        clocks = [serve.get("clock", 1.0)] if serve else [run.get(p + "_clock", 1.0) for p in ("prefill", "decode")]
        if phases and lock < 1.0 and not limit_binds(clocks, lock):   # a clock lock alone slowed it
            said.append(f"{tag}: its SM clock is locked at {lock:.0%} of full: {', '.join(phases)} (in the metrics "
                        "above; hw_models/power.py)")
        elif phases:
            said.append(f"{tag}: its {run.get('limit_w') or serve.get('limit_w'):g} W board power limit binds and "
                        f"lowers the clock{f' below its {lock:.0%} lock' if lock < 1.0 else ''}: {', '.join(phases)} "
                        "(in the metrics above; hw_models/power.py)")
    return "\n".join(said) or None


def _notes(console: Console, *notes: str | None) -> None:
    for note in notes:
        if note:
            console.print(note)


def cmd_diff(args: argparse.Namespace) -> int:
    a, b, shape = load_pair(args.a, args.b)
    console = tables.console()
    console.print(f"A: {args.a}\nB: {args.b}")
    console.print(_inputs_table(input_rows(a, b, shape, args.all)))
    unrecorded = shape is SERVE and not (a.get("serving") and b.get("serving"))
    _notes(console, SERVE_UNRECORDED if unrecorded else None, hardware_note(a, b))
    console.print(_metrics_table(a, b, shape))
    _notes(console, energy_footing(a, b), cap_note(a, b))
    if shape is RUN:
        console.print(_ops_table(a, b, args.all))
    return 0

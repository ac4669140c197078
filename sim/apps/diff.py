"""`sim diff A.json B.json`: what changed between two `sim run --json` results: the
inputs that differ, the headline metrics, and the decode step op by op (each op summed
over its layers), largest change first."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from sim.core import tables
from sim.core.errors import ConfigError
from hw_models.gpu.stage_ops import split_stage
from sim.core.results import _without_layer, whole_op
from sim.core.schema import require_file
from sim.core.units import fmt_time

METRICS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s", "energy_per_token_j")
TIMES = ("ttft_s", "tpot_s", "e2e_s")
INPUTS = ("workload", "hardware", "kind", "stack", "batch", "prompt_len", "gen_len", "formats", "model",
          "decode_kv_len", "exhaustive")


def load_result(path: str) -> dict[str, Any]:
    """A `sim run --json` file, checked to be one."""
    p = Path(path)
    require_file(p, expected="a `sim run --json` result")
    try:
        data = json.loads(p.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or "ops" not in data or "tpot_s" not in data:
        raise ConfigError(f"{path}: not a `sim run --json` result (no tpot_s and ops); "
                          "sim diff compares two runs' JSON")
    return data


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


def changed_inputs(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, A, B) for each input that differs, nested mappings key by key (model.num_layers)."""
    rows = []
    for key in INPUTS:
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            rows += [(f"{key}.{k}", str(x.get(k, "-")), str(y.get(k, "-")))
                     for k in sorted(set(x) | set(y), key=str) if x.get(k) != y.get(k)]
        elif x != y:
            rows.append((key, str(x), str(y)))
    return rows


def _ratio(x: float, y: float) -> str:
    return f"{y / x:.3g}x" if x else "-"


def energy_footing(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """A note where the two runs' energy models differ (a busy-time preset's note, hw_models.power.busy_time_note,
    on one side only), so the J/token ratio compares two bookkeepings, not two machines."""
    busy = [h for h in (a, b) if any(n.startswith("energy:") and "does not compare" in n for n in h.get("notes") or [])]
    if len(busy) != 1:
        return None
    return (f"energy_per_token_j: {busy[0].get('hardware')} counts busy-time power only (no board-power model), the other "
            "run idle + activity + dynamic power: the ratio mixes the two models (docs/energy.md)")


def cmd_diff(args: argparse.Namespace) -> int:
    a, b = load_result(args.a), load_result(args.b)
    console = tables.console()
    console.print(f"A: {args.a}\nB: {args.b}")
    inputs = Table(title="inputs that differ", title_justify="left")
    for col in ("input", "A", "B"):
        inputs.add_column(col)
    for row in changed_inputs(a, b) or [("(none)", "", "")]:
        inputs.add_row(*row)
    console.print(inputs)
    metrics = Table(title="metrics", title_justify="left")
    for col in ("metric", "A", "B", "B / A"):
        metrics.add_column(col, justify="left" if col == "metric" else "right")
    for m in METRICS:
        x, y = a.get(m), b.get(m)
        if x is None or y is None:
            continue
        show = fmt_time if m in TIMES else (lambda v: f"{v:,.4g}")
        metrics.add_row(m, show(x), show(y), _ratio(x, y))
    console.print(metrics)
    if note := energy_footing(a, b):
        console.print(note)
    oa, ob = ops_by_name(a), ops_by_name(b)
    names = sorted(set(oa) | set(ob), key=lambda n: -abs(ob.get(n, ("", 0.0))[1] - oa.get(n, ("", 0.0))[1]))
    ops = Table(title="decode step, op by op", caption="each op summed over its layers (its parts on units that run at once counted once); largest change first",
                title_justify="left", caption_justify="left")
    for col in ("op", "kind", "A", "B", "B - A", "B / A"):
        ops.add_column(col, justify="left" if col in ("op", "kind") else "right")
    for n in names[: None if args.all else 20]:
        kind, x = oa.get(n, (ob.get(n, ("", 0.0))[0], 0.0))
        y = ob.get(n, (kind, 0.0))[1]
        ops.add_row(n, kind, fmt_time(x) if n in oa else "absent", fmt_time(y) if n in ob else "absent",
                    ("+" if y >= x else "-") + fmt_time(abs(y - x)), _ratio(x, y))
    console.print(ops)
    return 0

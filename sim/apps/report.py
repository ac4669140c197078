"""The human-readable report of a run (rich tables)."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hw_models.base import Section
from hw_models.gpu.plan import is_pipelined
from hw_models.machine import Machine
from hw_models.registry import report_sections
from hw_models.stack.spec import load_stack
from sim.apps.utilization import utilization
from sim.core import tables
from sim.core.formats import rate_unit
from sim.core.results import RunResult, aggregate_by_name, group_name, time_by_bound
from sim.core.units import fmt_bytes, fmt_capacity, fmt_percent, fmt_rate, fmt_time


def render_section(s: Section) -> Table:
    """A kind's report section (data) as a rich table: a key-value list without columns."""
    if not s.columns:
        return _kv_table(s.title, s.rows)
    # A caption wider than a narrow table (the offload policy's four columns) wraps into a column of its own width:
    # the table is at least as wide as its caption, up to a line.
    t = Table(title=s.title, title_justify="left", caption=s.caption or None, caption_justify="left",
              min_width=min(len(s.caption), 110) if s.caption else None)
    for i, col in enumerate(s.columns):
        t.add_column(col, justify="left" if i == 0 or not _numeric(s.rows, i) else "right")
    for row in s.rows:
        t.add_row(*(escape(str(x)) for x in row))
    return t


def _numeric(rows: list[tuple[str, ...]], i: int) -> bool:
    """A column of figures (digits, units, percentages) is right-aligned."""
    cells = [str(r[i]) for r in rows if i < len(r) and str(r[i]) not in ("", "-")]
    return bool(cells) and all(c[:1].isdigit() for c in cells)


def _kv_table(title: str, rows: list[tuple[str, str]]) -> Table:
    t = Table(title=title, show_header=False, title_justify="left", box=None, padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    for k, v in rows:
        t.add_row(k, v)
    return t


def _per_replica(result: RunResult) -> str:
    """Under a plan with dp replicas one replica is simulated (docs/parallelism.md): its figures are one
    replica's, which the throughput line says with the deployment's total beside it."""
    dp = result.replicas
    return f" per replica; {dp} replicas: {fmt_rate(dp * result.throughput_tok_s)} tokens/s" if dp > 1 else ""


def _paths(paths) -> str:
    """The compute paths of an op's instances: one, or each with its count where layers differ
    (formats.overrides on some layers: "int4 -> bf16 dequant x30, bf16 native x2")."""
    counts = Counter(paths).most_common()
    return counts[0][0] if len(counts) == 1 else ", ".join(f"{p} x{n}" for p, n in counts)


def top_ops_table(title: str, ops, total_s: float, layers: int, n: int = 8, caption: str | None = None) -> Table:
    t = Table(title=title, title_justify="left", caption_justify="left", caption=caption)
    for col in ("op", "kind", "count", "time", "share", "bound", "path"):
        t.add_column(col, justify="right" if col in ("count", "time", "share") else "left")
    for name, kind, secs, bound, count in aggregate_by_name(ops)[:n]:
        path = _paths(o.path for o in ops if group_name(o) == name)
        t.add_row(name, kind, str(count), fmt_time(secs), f"{100 * secs / total_s:.1f}%" if total_s else "-", bound, path)
    return t


def bound_caption(ops) -> str | None:
    """The step's device time by what bounds each op (an architecture trial asked why twice the bandwidth gave 1.56x:
    the ops bound by their launch, floor or fill, which the top rows hide, do not shrink with it); None for one bound."""
    by = time_by_bound(ops)
    total = sum(by.values())
    by = {b: t for b, t in by.items() if t >= 0.005 * total}   # a bound of under half a percent says nothing
    if len(by) < 2 or not total:
        return None
    # each op counts under what bounds most of its time: the launch and ramp of a memory-bound op are in `memory`, so
    # the fixed part of a step is more than this row (a physics audit: 2.1 ms here, 4.3 ms of the A6000 decode step)
    why = {"overhead": " (ops bound by their launch, floor or fill: neither a faster memory nor compute shrinks them; "
                       "the other ops' launches and ramps count under their own bound)",
           "weight install": " (the PE arrays loading weight tiles: pe_array.weight_install_bytes_per_cycle)",
           "dequant": " (the vector units widening stored weights for the arrays: docs/spatial.md)"}
    return "device time by bound: " + ", ".join(f"{b} {fmt_time(t)} ({t / total:.0%}){why.get(b, '')}"
                                                for b, t in by.items())


def pipeline_caption(result: RunResult) -> str | None:
    """Under a pipelined plan the op rows are every stage's ops for every micro-batch (hw_models.gpu.stage_ops), the
    stages on their own devices at once: their shares of the step add past 100% (a trial read 8 whole-stage rows at
    ~20% each as one device's ops summing to 160%), and an op's count is its layers' times the micro-batches."""
    plan = result.extra.get("parallel", {}).get("plan")
    if not plan or not is_pipelined(plan["pp"], plan["micro_batches"]):
        return None
    return (f"stages on their own devices at once: shares of the step add past 100%; one rank's ops of each of "
            f"{plan['pp']} stage(s) for each of {plan['micro_batches']} micro-batch(es) (count: layers x micro-batches)")


def host_caption(result: RunResult) -> str | None:
    """Where the engine's host work overlaps the device's (max(host, device)), its row's share is of the same step
    the device rows share: together they add past 100% (a kernel trial read 109.7%; 98.1% on the host's row alone)."""
    eng = result.extra.get("engine_host") or {}
    if not eng.get("overlap") or not eng.get("host_s"):
        return None
    return ("engine.host runs beside the device's ops (overlapped: the step is the longer of the two), so its share and "
            "theirs add past 100%")


def stack_line(spec: str) -> str:
    """The software stack a run was costed under, as one line of the report."""
    if not spec:
        return "none (every op one kernel with the preset's launch overhead)"
    stack = load_stack(spec)
    launch = "hidden by CUDA graphs" if stack.graphs else f"{stack.host_launch_s * 1e6:.3g} us per kernel"
    return f"{stack.name} ({stack.description}; host launch {launch})"


def _phase_energy(result: RunResult) -> str:
    if result.prefill_energy_per_token_j is None:
        return ""
    dec = result.decode_energy_per_token_j
    return (f" (prefill {result.prefill_energy_per_token_j:.4f} J per prompt token, decode "
            + (f"{dec:.3f} J per token" if dec is not None else "-: no decode step")
            + "; board power as idle + activity while busy + per-FLOP and per-byte energy)")


def _memory_table(result: RunResult, machine: Machine) -> Table:
    """Peak bytes per tier by role: the three every run has, then any a kind adds (offload's streaming buffers)."""
    mem = Table(title="Peak memory per tier", title_justify="left", caption=result.memory_scope or None,
                caption_justify="left")
    roles_seen = ["weights", "kv_cache", "activations"] + sorted(
        {r for roles in result.memory_by_role.values() for r in roles} - {"weights", "kv_cache", "activations"})
    for col in ("tier", *(r.replace("_", " ").replace("kv", "KV") for r in roles_seen), "total", "capacity", "used"):
        mem.add_column(col, justify="left" if col == "tier" else "right")
    for t, roles in result.memory_by_role.items():
        cap = machine.memory[t].capacity_bytes
        total = sum(roles.values())
        mem.add_row(t, *(fmt_bytes(roles.get(r, 0)) for r in roles_seen), fmt_bytes(total), fmt_bytes(cap),
                    f"{100 * total / cap:.0f}%")
    return mem


def _print_ops_tables(c: Console, result: RunResult) -> None:
    """The top ops of a decode step and of the prefill, with what their shares mean and, for decode, the step's
    device time by bound."""
    layers = result.model["num_layers"]
    pipeline = pipeline_caption(result)
    staged = "; ".join(c for c in (pipeline, host_caption(result)) if c) or None
    # gen_len 1 runs no decode step (the first token is prefill's): the table is the step a longer run would take
    decode = "one decode step" if result.gen_len > 1 else "a decode step (none ran: gen_len 1), as a next token's"
    by_bound = None if pipeline else bound_caption(result.decode_ops)
    c.print(top_ops_table(f"Top ops, {decode} (kv_len {result.decode_kv_len}), summed over {layers} layers",
                          result.decode_ops, result.decode_timeline.makespan_s, layers,
                          caption="; ".join(c for c in (staged, by_bound) if c) or None))
    c.print(top_ops_table("Top ops, prefill", result.prefill_ops, result.ttft_s, layers, n=5, caption=staged))


def print_report(result: RunResult, machine: Machine, console: Console | None = None) -> None:
    c = console or tables.console()
    m = result.model
    c.print(_kv_table("Model", [
        ("name", m["name"]),
        ("parameters", f"{result.params:,} ({result.params / 1e9:.2f} B)"),
        ("layers / hidden", f"{m['num_layers']} / {m['hidden_size']}"),
        ("heads / KV heads", f"{m['num_heads']} / {m['num_kv_heads']} (head_dim {m['head_dim']})"),
    ]))
    f = result.formats
    c.print(_kv_table("Workload", [
        ("name", result.workload),
        ("batch / prompt / new tokens", f"{result.batch} / {result.prompt_len} / {result.gen_len}"),
        ("formats", f"weights {f['weights']}, activations {f['activations']}, KV cache {f['kv_cache']}"
         + (f", overrides {f['overrides']}" if f.get("overrides") else "")),
        ("software stack", f"{result.stack_ignored}: ignored (a {result.kind} preset costs no software stack)"
         if result.stack_ignored else stack_line(result.stack)),
    ]))
    unit = machine.units[machine.main_unit]
    c.print(_kv_table("Hardware", [
        ("preset", f"{machine.name} ({machine.kind}): {machine.description}"),
        ("memory", ", ".join(f"{n} {fmt_capacity(t.capacity_bytes)} @ {t.bandwidth_bytes_per_s / 1e9:.0f} GB/s"
                             for n, t in machine.memory.items())),
        ("compute", ", ".join(f"{k} {v / 1e12:.1f} {rate_unit(k)}" for k, v in unit.peak_flops_per_s.items())),
    ]))
    rows = [
        ("TTFT (prefill)", fmt_time(result.ttft_s)),
        ("TPOT mean / first / last", f"{fmt_time(result.tpot_s)} / {fmt_time(result.tpot_first_s)} / {fmt_time(result.tpot_last_s)}"
         if result.gen_len > 1 else "- (gen_len 1: the one token comes from prefill, no decode step)"),
        ("end-to-end", fmt_time(result.e2e_s)),
        ("throughput", f"{fmt_rate(result.throughput_tok_s)} tokens/s ({result.batch} x {result.gen_len} tokens over "
                       "the end-to-end time, prefill included)"
         + _per_replica(result)),
        # "per output token" said: a prefill-heavy run's figure is the whole run's over few output tokens (a trial)
        ("energy per token", f"{result.energy_per_token_j:.3f} J per output token, the whole run's"
         + _phase_energy(result)),
        ("power per device", f"{result.avg_power_per_device_w:,.1f} W average over the run ({result.devices} "
         f"device{'s' if result.devices > 1 else ''}{', with the ' + result.power_includes if result.power_includes else ''}"
         # a unit of several boards (attacc_dgx: 8 A100s) read as one 1.7 kW device in a cross-kind table (a trial)
         + (f"; each a unit of {unit.boards} boards: {result.avg_power_per_device_w / unit.boards:,.1f} W a board"
            if unit.boards > 1 else "") + ")"),
        *([("power figures", unit.power_source)] if unit.power_source else []),   # fitted, or assumed by a rule
        # Numbered families (40 PIM stacks) as one entry, their mean: pim.stack0-39.
        ("utilization", ", ".join(f"{r} {fmt_percent(u)}" for r, u in utilization(result.utilization, 1.0).items())),
    ]
    c.print(_kv_table("Results", rows))
    c.print(_memory_table(result, machine))
    _print_ops_tables(c, result)
    for section in report_sections(result):
        c.print(render_section(section))
    for note in result.notes:
        c.print(Text.assemble(("warning:", "yellow"), f" {note}"))
    decode = result.simulated_steps - 1   # the prefill and the sampled decode steps (generation.py)
    c.print(Text(f"{result.simulated_steps} steps simulated (the prefill and {decode} decode step{'s' * (decode != 1)})"
                 f"{' exhaustively' if result.exhaustive else ' (identical layers folded, decode steps interpolated; --exhaustive to check)'}",
                 style="dim"))

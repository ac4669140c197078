"""The rich report of a serving run."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hw_models.power import FLOOR_STRETCH, NO_CLOCK_FLOOR, limit_binds
from sim.core import tables
from sim.core.units import fmt_time


def _kv_label(s: dict[str, Any]) -> str:
    """An unpaged pool (orca, static) is counted in tokens: its 'blocks' are one token each."""
    size = s.get("kv_block_tokens", 16)
    return "KV tokens" if size == 1 else f"KV blocks ({size} tokens)" if size else "KV blocks"


def _kv_blocks(s: dict[str, Any]) -> str:
    pools = "the pool" if s.get("instances", 1) == 1 else f"{s['instances']} instances' pools (summed)"
    return (f"{s['kv_blocks_total']:,} in {pools}, peak {s['kv_blocks_peak']:,} "
            f"({s['kv_blocks_peak'] / max(s['kv_blocks_total'], 1):.0%}), mean use {s['kv_usage_mean']:.0%}")


def _optional_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary rows only some runs have: the engine's host work, a closed loop's means, the prefix cache,
    speculative decoding."""
    out: list[tuple[str, str]] = []
    if s.get("host_per_iteration_s"):
        out.append(("host per iteration", f"{fmt_time(s['host_per_iteration_s'])} mean (the engine's work: "
                                          "schedule, inputs, sampling, outputs; and kernel launches)"))
    if s.get("benchmark"):   # a closed loop (sim.apps.serve.closed): the means a benchmark client prints
        b = s["benchmark"]
        t = {k: "- (one-token outputs)" if b[k] != b[k] else fmt_time(b[k]) for k in ("tpot_s", "itl_s")}   # NaN
        out.append(("closed loop (means)", f"TTFT {fmt_time(b['ttft_s'])}, TPOT {t['tpot_s']}, "
                                           f"ITL {t['itl_s']}, E2E {fmt_time(b['e2e_s'])}; "
                                           f"{b['req_s']:.3f} requests/s, {b['out_tok_s_per_gpu']:,.1f} output "
                                           f"tokens/s/{b.get('device', 'GPU')} over {b['completed']} requests"
                                           # the warm-up sends are left out here only (a serving trial read the
                                           # other tables' means, every request's, as contradicting this row)
                                           + (f" after {b['warmup_requests']} warm-up sends (every other figure "
                                              "of this report counts every request)" if b.get("warmup_requests") else "")))
        if b.get("client_pool"):   # serving.arrivals.max_connections: waits the client's clock counted
            p = b["client_pool"]
            out.append(("client pool", f"{p['connections']} connections: {p['waited']} sends waited for one, "
                                       f"{fmt_time(p['wait_s'])} mean over every send (inside its TTFT and E2E)"))
    if s.get("prefix_hit_share"):
        out.append(("prefix cache", f"{s['prefix_hit_share']:.1%} of the prompt tokens served from cached blocks "
                                     "(not computed)"))
    if s.get("spec_tokens_per_step"):
        out.append(("speculative", f"{s['spec_tokens_per_step']:.3f} tokens per verify step"))
    return out


def _total(j: float) -> str:
    """A run's joules in one style at any size: whole joules with separators from 100 J (an energy trial read
    '4561 J' in one run and '1.541e+04 J' in the next), three figures below."""
    return f"{j:,.0f}" if j >= 100 else f"{j:.3g}"


def _joules(j: float, fmt: str, unit: str, none: str) -> str:
    """An energy figure, or `- (none)` where it is undefined (NaN: no token out, no request finished)."""
    return f"{j:{fmt}} J{unit}" if np.isfinite(j) else f"- ({none})"


def _energy_rows(e: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The report's energy rows past J/token: per request and the run's split, power per device, a binding cap."""
    if not e or not e["total_j"]:
        return []
    ph = e["by_phase_j"]
    per_request = f"{_total(e['per_request_j'])} J" if np.isfinite(e["per_request_j"]) else "- (none finished)"
    rows = [("energy per request", f"{per_request}; run total "
                                   f"{_total(e['total_j'])} J: prefill {ph['prefill'] / e['total_j']:.0%}, decode "
                                   f"{ph['decode'] / e['total_j']:.0%}, idle {ph['idle'] / e['total_j']:.0%}"),
            ("power per device" + (f" (with the {e['power_includes']})" if e.get("power_includes") else ""),
             f"{e['avg_power_per_device_w']:.0f} W average, {e['peak_power_per_device_w']:.0f} W "
             f"peak iteration ({e['devices']} device{'s' if e['devices'] != 1 else ''}"
             + (f"; each a unit of {k} boards: {e['avg_power_per_device_w'] / k:.0f} W a board average"
                if (k := e.get("boards_per_device", 1)) > 1 else "") + ")"
             + ("; the board limit binds the GPU alone" if e.get("power_includes") else "")),
            *([("power figures", e["power_source"])] if e.get("power_source") else [])]
    if cap := e.get("power_cap"):
        limit = (f"the {cap['limit_w']:g} W board limit binds" if cap["limit_w"] else "the board power limits bind") \
            + " and lowers the clock"
        if (lock := cap.get("clock_lock", 1.0)) < 1.0:   # hw_models.power.cap_note's wording
            limit = (f"the SM clock is locked at {lock:.0%} of full" if not limit_binds([cap["clock"]], lock)
                     else f"{limit} below the {lock:.0%} clock lock")
        # the clause sim run's note carries past 3x (a trial's 150 W limit read +909% here without a word)
        floor = f"; {NO_CLOCK_FLOOR}" if cap.get("clock", 1.0) < 1.0 / FLOOR_STRETCH else ""
        rows.append(("power cap", f"{limit}: engine time +{cap['stretch']:.{1 if cap['stretch'] >= 1e-3 else 3}%} "
                                  f"({fmt_time(cap['added_s'])} over the run; {cap.get('clocked_share', 1.0):.0%} of the "
                                  f"engine time at {cap.get('clock', 1.0):.0%} of the full clock on average{floor}; "
                                  "hw_models/power.py)"))
    return rows


def _setup(s: dict[str, Any]) -> str:
    """What was modelled, in one row: the stack (or none), the scheduler's limits, the plan, replicas, pools and the
    draft (a serving trial: a run with and without `stack: vllm` had the same title, 8.5 against 9.7 ms TPOT, and
    the TP plan, the draft's k and alpha and the router were in the JSON only)."""
    srv, par = s.get("serving") or {}, s.get("parallel") or {}
    sch = srv.get("scheduler") or {}
    out = [f"stack {s['stack']}" if s.get("stack") else "no stack (each op one kernel at the preset's launch cost)"]
    pools = {k: v for k, v in (s.get("disaggregated") or {}).items() if isinstance(v, list) and v}
    # a pool takes its own preset's scheduler defaults: the file's section is not what its engines ran (a trial)
    limits = [f"{k} {sch[k]:,}" for k in ("max_num_seqs", "max_num_batched_tokens") if isinstance(sch.get(k), int)]
    out += [", ".join(limits)] if limits and not pools else []
    plan = [f"{k} {par[k]}" for k in ("tp", "pp", "ep", "dp") if isinstance(par.get(k), int) and par[k] > 1]
    out += [" ".join(plan) + (f" on {par['topology']}" if isinstance(par.get("topology"), str) else "")] if plan else []
    if r := srv.get("router"):   # replicas left out: parallel.dp's, which the plan already names (a review: "None")
        out.append(f"{r['replicas']} replicas, {r.get('policy')} router" if r.get("replicas") else
                   f"{r.get('policy')} router")
    if pools:   # each pool's busy share: the "engine busy" row blends them (decode 99.9%, prefill 21%: 60%)
        out.append("disaggregated: " + ", ".join(
            f"{name} {len(ins)} x {ins[0].get('hw')} busy {sum(i.get('busy', 0.0) for i in ins) / len(ins):.0%}"
            for name, ins in pools.items()))
    if sp := srv.get("speculative"):
        draft = sp.get("draft")
        out.append(f"speculative: draft {draft.get('name') if isinstance(draft, dict) else draft}, k {sp.get('k')}, "
                   f"alpha {sp.get('alpha')}")
    return "; ".join(out)


def print_report(s: dict[str, Any], title: str, console: Console | None = None) -> None:
    console = console or tables.console(markup=True)
    head = Table(title=Text(title), show_header=False, title_justify="left")   # a name like [/b]x stays literal
    rows = [
        ("setup", _setup(s)),
        ("requests", f"{s['completed']} completed, {s['rejected']} rejected of {s['requests']}"
                     + (" (" + "; ".join(f"{n}: {why}" for why, n in s.get("rejected_reasons", {}).items()) + ")"
                        if s["rejected"] else "")),
        ("throughput", f"{s['throughput_tok_s']:,.1f} tokens/s, {s['throughput_req_s']:.3f} requests/s"),
        ("goodput", f"{s['goodput_tok_s']:,.1f} tokens/s, {s['goodput_req_s']:.3f} requests/s"
         + (" (no SLO: all count)" if not s["slo"] else f" within {_slo(s['slo'])}")),
        ("preemptions", f"{s['preemptions']} ({s['swapped_out_blocks']} blocks swapped out)"),
        (_kv_label(s), _kv_blocks(s)),
        ("iterations", f"{s['iterations']:,}; engine busy {s['engine_busy']:.0%}"),
        *([("batch", s["placed"])] if s.get("placed") else []),   # a kind that placed its own batch (offload)
        ("energy", _joules(s["energy_per_token_j"], ".4g", " per output token", "no output token")),
    ]
    rows += _energy_rows(s.get("energy")) + _optional_rows(s)
    for k, v in rows:
        head.add_row(k, v)
    console.print(head)
    t = Table(title="latency (TBT: gaps between token emissions)", title_justify="left")
    for col in ("metric", "mean", "p50", "p90", "p99", "max"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for m in ("ttft", "tpot", "tbt", "e2e", "queue"):
        st = s["latency"][m]
        t.add_row(m.upper() if m != "queue" else "queueing", *(fmt_time(st[k]) if st[k] == st[k] else "-"
                                                              for k in ("mean", "p50", "p90", "p99", "max")))
    bt = Table(title="per iteration (time-weighted)", title_justify="left")
    for col in ("", "mean", "p50", "p90", "p99", "max"):
        bt.add_column(col, justify="right" if col else "left")
    for name, key in (("batch size", "batch_size"), ("tokens", "tokens_per_iteration")):
        st = s[key]
        if st:
            bt.add_row(name, *(f"{st[k]:.1f}" for k in ("mean", "p50", "p90", "p99", "max")))
    console.print(t)
    if s.get("placed"):   # an offload batch server (an offload trial read TTFT 374 s as what a client sees)
        console.print("TTFT and TPOT are when the block computes each token; FlexGen's generate() returns every "
                      "output at the block's end, so its clients see E2E only (docs/serving.md)")
    if s.get("request_delay_s"):   # the stack's fitted pure delay before the engine sees a request
        console.print(f"TTFT, E2E and queueing count from the send and hold the stack's {fmt_time(s['request_delay_s'])} "
                      "per-request delay before the engine sees a request (engine_overheads, docs/serving.md)")
    console.print(bt)
    if (s.get("energy") or {}).get("note"):
        console.print(s["energy"]["note"])
    if s.get("utilization"):
        console.print(utilization_table(s["utilization"], s.get("instances", 1)))
    if s["slo"]:
        met = ", ".join(f"{k} {of_limit(v)}" for k, v in s["slo_met"].items())
        console.print(f"SLO: {met}")


def of_limit(ratio: float) -> str:
    """A metric's share of its SLO limit; unbounded where rejected requests (never served) decide the percentile.
    A miss that two decimals round to 1.00 gets the digits that show it, and says so (a trial read a failing
    1.000053 and a passing 0.9977 both as "1.00x")."""
    if not np.isfinite(ratio):
        return "unbounded (rejected requests count as never served)"
    if ratio > 1.0 and f"{ratio:.2f}" == "1.00":
        return f"{ratio:.6f}".rstrip("0") + "x of limit (over)"
    return f"{ratio:.2f}x of limit"


def utilization_table(u: dict[str, float], instances: int = 1) -> Table:
    """One row per resource: busy (an op or a transfer on it), and for compute units the time their
    ops needed the compute pipes and the memory stream, each over the serving wall time."""
    mean = f", mean of {instances} instances" if instances > 1 else ""
    t = Table(title=f"utilisation (of the wall time{mean})", title_justify="left")
    for col in ("resource", "busy", "compute", "memory bandwidth"):
        t.add_column(col, justify="left" if col == "resource" else "right")
    for name in (k for k in u if not k.endswith((".compute", ".memory"))):
        t.add_row(name, *(f"{u[key]:.1%}" if key in u else "-"
                          for key in (name, f"{name}.compute", f"{name}.memory")))
    return t


def _slo(slo: dict[str, float]) -> str:
    return ", ".join(f"{k} <= {v:g} s" for k, v in slo.items())


def _per_device(summary: dict[str, Any], goodput_req_s: float, price: tuple[float | None, str]) -> str:
    """The goodput at capacity per device of the run and per $1,000 of the list price of the devices it spans
    (`price`: their total in USD and how it sums, from plan_price; None where a preset lists none, which is said):
    what a planner compares across plans (TP 4 against TP 2 x 2 replicas, disaggregated pools) and presets."""
    devices = (summary.get("energy") or {}).get("devices") or 0
    if devices < 1:
        return ""
    total, how = price
    per_price = f"; {goodput_req_s / (total / 1e3):.3g} per $1,000 of list price ({how})" if total else \
        f"; no per-$1,000 figure: {how}"
    return f"{goodput_req_s / devices:.4g} requests/s a device ({devices} of them){per_price}"


def plan_price(machines: list[tuple[str, Any, int]]) -> tuple[float | None, str]:
    """The list price of the devices a run spans, from (label, machine, devices) per pool ("" for a single
    instance): (total USD, how it sums: "2 x $30,000"; "prefill 1 x $30,000 + decode 2 x $15,000"), or (None, which
    preset lists no price_usd: a capacity planner's trial read no cost for b200 and l40s, and none for pools)."""
    missing = [m.name for _, m, _ in machines if m.price_usd is None]
    if missing:
        return None, f"{', '.join(dict.fromkeys(missing))} lists no price_usd"
    parts = [f"{label + ' ' if label else ''}{n} x ${m.price_usd:,.0f}" for label, m, n in machines]
    return sum(m.price_usd * n for _, m, n in machines), " + ".join(parts)


def print_capacity(c: dict[str, Any], console: Console | None = None,
                   price: tuple[float | None, str] = (None, "no price given")) -> None:
    console = console or tables.console(markup=True)
    clients = c.get("knob") == "concurrency"
    t = Table(title=f"capacity search (bisection on the {'client count' if clients else 'arrival rate'})",
              show_header=False, title_justify="left")
    # The rate as the search ran it, so that a rerun at the printed rate is that run (a trial's rerun at 59.06 of
    # 59.0625 missed the SLO); a transient capacity says so where it is read, not only in a warning below.
    transient = " (transient: the stream's start or end decides it; warning above)" if c.get("transient") else ""
    t.add_row(*(("most clients meeting the SLO", f"{c['rate']:d}{transient}") if clients
                else ("highest rate meeting the SLO", f"{c['rate']:.6g} requests/s{transient}")))
    t.add_row("goodput there", f"{c['goodput_req_s']:.4g} requests/s, {c['goodput_tok_s']:,.1f} tokens/s over the run's "
              f"{c['window_s']:.4g} s (first arrival to last completion"
              + ("" if clients else f"; arrivals span ~{c['arrival_window_s']:.4g} s") + "); "
              f"{c['within_slo']:.1%} of completed requests within the SLO")
    best = c.get("summary") or {}
    if best.get("rejected"):   # never served, each counts against the SLO (metrics.slo_stats)
        t.add_row("rejected there", f"{best['rejected']} of {best['requests']} requests ("
                  + ", ".join(f"{n}: {why}" for why, n in best["rejected_reasons"].items()) + "), each an SLO miss")
    at_least = "at least " if c.get("limit_settled") else ""   # that step stopped once it failed for certain
    t.add_row("limiting metric", f"{c['limiting']} ({at_least}{c['limit_ratio']:.2f}x of its limit just above)")
    if line := _per_device(best, c["goodput_req_s"], price):
        t.add_row("goodput per device", line)
    t.add_row("runs", str(len(c["points"])))
    if "requests_per_client" in c:
        k = c["requests_per_client"]
        t.add_row("requests per run", f"{k} per client, as in the file (num_requests / concurrency): {c['rate'] * k:,} "
                  "at the capacity found")
    console.print(t)

"""`sim hw`: list the presets (or, --topologies, the multi-device nodes), show one, and
check a preset of one's own (valid, simulates, every figure cited; docs/presets.md)."""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from sim.core import flags, tables
from sim.core.errors import SimError
from sim.core.formats import rate_unit
from sim.core.units import fmt_capacity

if TYPE_CHECKING:
    from hw_models.machine import Machine

# The presets, the kinds and rich's tables load inside each command: `sim --help` needs none of them.

# A YAML line that sets a number (with or without a unit), and the text of its comment if it has one.
_FIGURE = re.compile(r"^\s*([A-Za-z_][\w.]*):\s*[-+]?\d[\w.+\- /]*?\s*(?:#(.*))?$")
# Comment text that cites nothing: a placeholder for a source to come (`# TODO`, `# TBD: datasheet`, `# FIXME`).
# Text without a letter or digit (a bare `#`, `# ???`, `# ?`) cites nothing either.
_PLACEHOLDER = re.compile(r"\s*(TODO|TBD|FIXME)\b", re.IGNORECASE)
# The smoke run: small enough to fit every device sim ships, long enough to reach decode.
SMOKE = dict(name="hw_check", model="tinyllama-1.1b", batch=1, prompt_len=128, gen_len=4)


def smoke_workload(machine) -> dict:
    """SMOKE, or where the preset pipelines attention in G head groups (pim.head_groups, AttAcc's --pipeopt), which
    must divide the heads, a TinyLlama-sized LLaMA with 2G heads and G KV heads of 64 (attacc_dgx's 12 groups do
    not divide TinyLlama's 4 KV heads: its check failed, a docs trial)."""
    groups = (machine.section("pim") or {}).get("head_groups", 1)
    if groups == 1:
        return SMOKE
    hidden = 64 * 2 * groups
    return SMOKE | dict(model=dict(model_type="llama", hidden_size=hidden, intermediate_size=4 * hidden,
                                   num_hidden_layers=4, num_attention_heads=2 * groups, num_key_value_heads=groups,
                                   vocab_size=32000, max_position_embeddings=2048))


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _cites(comment: str) -> bool:
    """Comment text that could name a source: some words, not a placeholder for them."""
    return any(c.isalnum() for c in comment) and not _PLACEHOLDER.match(comment)


def _commented(lines: list[str], i: int) -> bool:
    """Line i carries a citing comment, or the line above is one. A figure's own line holds no `#` but its comment's
    (_FIGURE reads only numbers and units), nor does a parent key's; a comment line is all comment."""
    own = lines[i].partition("#")
    above = lines[i - 1].lstrip() if i > 0 else ""
    return bool(own[1]) and _cites(own[2]) or above.startswith("#") and _cites(above[1:])


def uncited(path: Path) -> list[tuple[int, str]]:
    """(line, key) of each figure in the file without a source comment: on its line, on the
    line above, or on its parent key (a comment block above `efficiency:` covers its fields)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        m = _FIGURE.match(line)
        if not m or m.group(1) == "version" or _commented(lines, i):
            continue
        parent = next((j for j in range(i - 1, -1, -1)
                       if lines[j].strip() and not lines[j].lstrip().startswith("#")
                       and _indent(lines[j]) < _indent(line)), None)
        if parent is None or not _commented(lines, parent):
            out.append((i + 1, m.group(1)))
    return out


# Below these a figure is almost surely a bare number meant in GB/s, GB or TFLOP/s (the schema reads SI units):
# the slowest memory sim ships (a disk) moves ~1e9 B/s, the smallest tier holds MBs, the slowest unit ~1e11 FLOP/s.
IMPLAUSIBLY_LOW = {"bandwidth_bytes_per_s": 1e8, "capacity_bytes": 1e6, "flops_per_s": 1e9}


def implausible(m: Machine) -> list[str]:
    """Figures far below any real device's: the likely unit slips, each named by its key."""
    out = []
    for name, tier in m.memory.items():
        for key in ("bandwidth_bytes_per_s", "capacity_bytes"):
            v = getattr(tier, key)
            if v < IMPLAUSIBLY_LOW[key]:
                out.append(f"memory.{name}.{key} {v:g}")
    for name, unit in m.units.items():
        for fmt, v in unit.peak_flops_per_s.items():
            if v < IMPLAUSIBLY_LOW["flops_per_s"]:
                out.append(f"units.{name}.peak_flops_per_s.{fmt} {v:g}")
    return out


def machine_rows(m: Machine) -> list[tuple[str, str]]:
    rows = [("name", m.name), ("kind", m.kind), ("description", m.description or "-")]
    for name, tier in m.memory.items():
        rows.append((f"memory {name}", f"{fmt_capacity(tier.capacity_bytes)} at "
                                       f"{tier.bandwidth_bytes_per_s / 1e9:,.0f} GB/s"))
    for name, unit in m.units.items():
        peaks = ", ".join(f"{k} {v / 1e12:,.1f} {rate_unit(k)}" for k, v in unit.peak_flops_per_s.items())
        rows.append((f"unit {name}", f"peak: {peaks or '-'}"))
    return rows


def _kind_section(machine) -> None:
    """A kind's own section (pim:, spatial:, host:) through its schema: a mistake there is one line naming its key
    (a hardware designer's trial: hw check printed "valid" and the error only in the smoke run's table cell)."""
    if machine.kind == "pim":
        from hw_models.pim.config import load_pim_config
        load_pim_config(machine.section("pim"), machine.source or machine.name)
    elif machine.kind == "spatial":
        from hw_models.spatial.config import spatial_config
        spatial_config(machine)
    elif machine.kind == "offload":
        from hw_models.offload.spec import host_spec
        host_spec(machine)


def cmd_hw_check(args: argparse.Namespace) -> int:
    from rich.table import Table

    from hw_models.machine import load_machine, resolve_path
    from hw_models.registry import simulate
    from sim.core.workload import Workload

    from hw_models.network.topology import is_topology_file, load_topology

    if is_topology_file(args.file):   # a node: its schema (and its device), drawn
        topo = load_topology(args.file)
        print(f"{args.file}: valid topology\n{topo.describe()}")
        return 0
    path = resolve_path(args.file)
    machine = load_machine(path)           # the schema: one line naming the key if anything is off
    _kind_section(machine)                 # and the kind's own section, read by its mapper otherwise
    t = Table(title=f"{path}: valid", show_header=False, title_justify="left")
    for k, v in machine_rows(machine):
        t.add_row(k, v)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            smoke = smoke_workload(machine)
            r = simulate(Workload(**smoke), machine, detail=False)
        name = smoke["model"] if isinstance(smoke["model"], str) else \
            f"a {smoke['model']['num_attention_heads']}-head LLaMA (pim.head_groups)"
        t.add_row("smoke run", f"{name} decode, batch 1: TTFT {r.ttft_s * 1e3:.3g} ms, TPOT {r.tpot_s * 1e3:.3g} ms")
    except SimError as exc:   # exit 2 with the reason on stderr too, and no "valid" title over it (a trial)
        t.title = f"{path}: the schema is valid; the smoke run failed"
        t.add_row("smoke run", f"failed: {exc}")
        if not getattr(args, "quiet", False):
            tables.console().print(t)
        print(f"error: {path}: smoke run failed: {exc}", file=sys.stderr)
        return 2
    low = implausible(machine)
    if low:
        t.add_row("plausibility", f"far below any real device (a unit slip? figures are SI: write '864 GB/s', "
                                  f"not 864): {', '.join(low)}")
    missing = uncited(path)
    t.add_row("citations", "every figure has a comment" if not missing else
              f"{len(missing)} figure(s) without a source comment: "
              + ", ".join(f"{k} (line {n})" for n, k in missing)
              + " (a bare #, ?, TODO, TBD or FIXME names no source)")
    tables.console().print(t)
    if (missing or low) and args.strict:
        _quiet_failure(args, f"{path}: --strict: " + "; ".join(
            ([f"{len(missing)} figure(s) without a source comment"] if missing else [])
            + ([f"far below any real device: {', '.join(low)}"] if low else [])))
        return 1
    return 0


def _quiet_failure(args: argparse.Namespace, line: str) -> None:
    """Under -q the table is not printed: a failing check still says why, in one line on stderr."""
    if getattr(args, "quiet", False):
        print(f"error: {line}", file=sys.stderr)


def cmd_topologies() -> int:
    from rich.table import Table

    from hw_models.network.topology import load_topology, preset_names as topology_names

    t = Table(title="Topology presets (multi-device nodes; `sim hw show NAME` draws one)")
    for col in ("name", "device", "devices", "interconnect", "per device", "fabric", "description"):
        t.add_column(col, justify="right" if col in ("devices", "per device") else "left")
    for name in topology_names():
        topo = load_topology(name)
        ic, f = topo.interconnect, topo.fabric
        t.add_row(name, topo.device, f"{topo.nodes} x {topo.devices_per_node}", ic.kind,
                  f"{ic.bandwidth_bytes_per_s / 1e9:,.0f} GB/s",
                  f"{f.name} {f.nics_per_node} x {f.bandwidth_bytes_per_s * 8 / 1e9:,.0f} Gb/s" if f else "-",
                  topo.description)
    tables.console().print(t)
    return 0


def cmd_hw_list(args: argparse.Namespace) -> int:
    from rich.table import Table
    from rich.text import Text

    from hw_models.machine import load_machine, preset_names

    if args.topologies:
        return cmd_topologies()
    rows = []
    for name in preset_names():
        try:
            m = load_machine(name)
        except SimError as exc:
            rows.append((name, "?", "", "", "", Text(str(exc), style="red")))
            continue
        tier = m.memory[m.device_tier]
        unit = m.units[m.main_unit]
        best = max(unit.peak_flops_per_s, key=unit.peak_flops_per_s.get)
        rows.append((name, m.kind, fmt_capacity(tier.capacity_bytes), f"{tier.bandwidth_bytes_per_s / 1e12:.2f} TB/s",
                     f"{unit.peak_flops_per_s[best] / 1e12:.0f} {rate_unit(best)} {best}", m.description))
    console = tables.console()
    t = Table(title="Hardware presets (memory and bandwidth of the main unit's tier; per chip for spatial; "
                    "GB = 10^9 bytes, binary size beside where whole)",
              show_edge=False, caption="multi-device nodes: sim hw list --topologies", caption_justify="left")
    cols = ("name", "kind", "memory", "bandwidth", "peak (best format)")
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    for col, w in zip(cols, widths):
        t.add_column(col, no_wrap=True, min_width=w)
    # In a narrow terminal the description gives way; rich would otherwise squeeze the
    # short columns to nothing. 3 characters of border and padding per column.
    room = console.width - sum(widths) - 3 * (len(cols) + 1) - 1
    if room >= 10:   # a pipe or a file has room for all of it
        t.add_column("description", overflow="ellipsis", no_wrap=True,
                     max_width=None if tables.full_width() else min(60, room))
    for r in rows:
        t.add_row(*r[: len(t.columns)])
    console.print(t)
    return 0


def cmd_hw_show(args: argparse.Namespace) -> int:
    from hw_models.machine import load_machine, resolve_path
    from hw_models.network.topology import is_topology_file, load_topology, preset_names as topology_names
    from hw_models.registry import machine_data
    from sim.core.settings import dotted_items

    if args.name in topology_names() or is_topology_file(args.name):      # a node of devices: draw it (text)
        topo = load_topology(args.name)
        data, text = topo.model_dump(), topo.describe()
    else:
        m = load_machine(args.name)
        data, text = machine_data(m), resolve_path(args.name).read_text()
    if args.json:
        flags.emit_json(args.json, data)
    elif args.format == "json":   # the validated figures as data, not the file's text (or the node's drawing)
        print(json.dumps(data, indent=1, default=float))
    elif args.format == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["key", "value"])
        # a tuple or list as its items joined (pim.formats had printed "('fp16',)", Python's repr: a docs trial)
        writer.writerows((k, ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v) for k, v in dotted_items(data))
    elif not args.quiet:
        print(text)
    return 0


def register(sub) -> None:
    hp = sub.add_parser("hw", help="hardware presets").add_subparsers(dest="hw_cmd", required=True)
    hl = hp.add_parser("list", help="list presets")
    hl.add_argument("--topologies", action="store_true", help="list the multi-device topology presets instead")
    hl.set_defaults(func=cmd_hw_list)
    hs = hp.add_parser("show", help="show a preset, or draw a topology (dgx_a100, dgx_h100, ...)")
    hs.add_argument("name", help="preset name, hardware YAML file, or topology preset")
    flags.json_option(hs, "the validated machine (default: print the YAML text)")
    hs.set_defaults(func=cmd_hw_show)
    c = hp.add_parser("check", help="check a hardware preset file: valid, simulates, every figure cited")
    c.add_argument("file", help="a hardware YAML file (or a preset name)")
    c.add_argument("--strict", action="store_true", help="exit 1 when a figure has no source comment")
    c.set_defaults(func=cmd_hw_check)


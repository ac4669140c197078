"""`sim offload search WORKLOAD --hw H`: the placement-policy search on its own. Beside the kind's
folder, not in it: importing hw_models.offload.cli would load the folder's __init__ (its mapper and
schedules) at every `sim` start-up, only to add this subcommand to the parser."""

from __future__ import annotations

import argparse
import sys

from sim.core.errors import ConfigError
from sim.core.units import fmt_bytes, parse_quantity


def register(subparsers) -> None:
    off = subparsers.add_parser("offload", help="offload (FlexGen-style) tools").add_subparsers(
        dest="offload_cmd", required=True)
    s = off.add_parser("search", help="search the placement policy and batch sizes (LP, confirmed by the DES)")
    s.add_argument("workload", help="workload YAML file (its batch bounds the effective batch)")
    s.add_argument("--hw", required=True, help="an offload preset (flexgen_t4, a6000_offload, h100_offload) or YAML")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a workload or hw.* field")
    s.add_argument("--objective", choices=("throughput", "latency"), default="throughput",
                   help="throughput: best tokens/s with an effective batch up to the workload's; "
                        "latency: best TPOT at the workload's batch")
    s.add_argument("--max-gpu-mem", metavar="BYTES", help="cap the GPU memory the policy may use, e.g. '12 GB'")
    s.add_argument("--json", metavar="PATH", help="write the search result as JSON")
    s.add_argument("-q", "--quiet", action="store_true", help="no table on stdout (with --json: the file only)")
    s.set_defaults(func=cmd_search)


def cmd_search(args: argparse.Namespace) -> int:
    from hw_models.machine import load_machine
    from hw_models.offload.mapper import OffloadMapper
    from hw_models.offload.search import search
    from hw_models.registry import mapper_for
    from sim.core.files import write_json
    from sim.core.settings import split_settings
    from sim.core.workload import load_workload

    from sim.core import tables

    sets = split_settings(args.set)
    workload = load_workload(args.workload, sets.workload)
    machine = load_machine(args.hw, sets.hw)
    mapper = mapper_for(machine, workload, workload.model_config_())
    if not isinstance(mapper, OffloadMapper):
        raise ConfigError(f"--hw {args.hw}: kind {machine.kind!r}; the policy search needs an offload preset")
    cap = None
    if args.max_gpu_mem is not None:
        try:
            cap = parse_quantity(args.max_gpu_mem, "bytes")
        except ValueError as exc:
            raise ConfigError(f"--max-gpu-mem {args.max_gpu_mem!r}: {exc}") from None
        if not 0 < cap < float("inf"):
            raise ConfigError(f"--max-gpu-mem {args.max_gpu_mem!r}: must be a positive, finite size, e.g. '12 GB'")
        device = machine.memory[machine.device_tier].capacity_bytes
        if cap > device:   # the search and the mapper take min(cap, device): say so
            print(f"warning: --max-gpu-mem {args.max_gpu_mem}: more than {machine.name}'s {fmt_bytes(device)}; "
                  "the GPU's own capacity is the cap", file=sys.stderr)
        mapper.gpu_capacity_limit = cap
    if mapper.spec.complete():   # nothing left to search: say how to search (an architect's trial read "1 candidates")
        print(f"note: {args.workload}: its policy fixes every placement key and both batch sizes, so the search has "
              "one candidate; --set policy=search (or leave keys out) to search", file=sys.stderr)
    result = search(mapper, mapper.spec, args.objective, cap)
    if args.json:
        write_json(args.json, result.summary())
    if args.quiet:
        return 0
    console = tables.console()
    console.print(result.table())
    console.print(f"best: {result.best.policy.describe()}")
    return 0

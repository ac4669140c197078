"""What a disaggregated serving file says about its pools before any is set up: each pool's machine (its errors
located at its key) and the notes `sim serve` prints on it. Apart from sim.apps.serve.disagg so that the input
checks every `sim run` loads (sim.apps.checks) need not import the serving engine (a performance trial: 60-90 ms
of every `sim run`'s start-up)."""

from __future__ import annotations

import re

from hw_models.machine import Machine, load_machine
from hw_models.network.topology import load_topology
from sim.apps.serve.spec import ServeFile
from sim.core.errors import ConfigError


def pool_machine(file: ServeFile, key: str) -> Machine:
    """The preset of pool `key` (prefill or decode) with its hw_overrides, its errors located at its key; advice to
    `--set hw.X=V` (which a disaggregated file does not take) says the pool's own setting instead."""
    pool = getattr(file.serving.disaggregated, key)
    try:
        return load_machine(pool.hw, pool.hw_overrides)
    except ConfigError as exc:
        raise ConfigError(f"{file.source}: serving.disaggregated.{key}.hw: {pool_advice(exc, key)}") from None


def pool_advice(exc: ConfigError, key: str) -> str:
    """`exc`'s message with its `--set hw.X=V` advice (no flag a pool takes) as the pool's own setting."""
    return re.sub(r"--set hw\.([\w.@]+)=(\S+)", rf"serving.disaggregated.{key}.hw_overrides: {{\1: \2}}", str(exc))


def unread_plan(file: ServeFile) -> list[str]:
    """A file-level `parallel:` beside serving.disaggregated is not read (each pool runs its own plan, none unless
    given): said, where it was dropped in silence and two pools meant for TP 4 served on one GPU each."""
    if file.serving.disaggregated is None or "parallel" not in file.sections:
        return []
    return [f"{file.source}: parallel: not read under serving.disaggregated, whose pools each run their own plan "
            "(serving.disaggregated.prefill.parallel, .decode.parallel; one device where a pool gives none)"]


def transfer_notes(file: ServeFile) -> list[str]:
    """A transfer topology whose device neither pool runs on is still priced as that topology's send/recv:
    say so (an A6000 has no NVLink to an H100, and an H100-to-A6000 transfer at NVLink 4 rates went unremarked)."""
    d = file.serving.disaggregated
    if d is None or d.transfer.topology is None:
        return []
    topo = load_topology(d.transfer.topology, file.source, "serving.disaggregated.transfer.topology")
    off = [f"{k} runs on {name}" for k in ("prefill", "decode") if (name := pool_machine(file, k).name) != topo.device]
    if not off:
        return []
    return [f"{file.source}: serving.disaggregated.transfer.topology: {topo.name} links {topo.device} devices, but "
            f"{' and '.join(off)}: the KV transfer is priced at {topo.name}'s send/recv all the same; give "
            "transfer: {bandwidth_bytes_per_s, latency_s} for the link the pools share (PCIe, a NIC)"]

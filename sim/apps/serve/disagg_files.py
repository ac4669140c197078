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
    """`exc`'s message with its `--set hw.X=V` advice (no flag a pool takes) as the pool's own setting, and a plan's
    `parallel.nodes: N` advice as the pool's plan key (a parallelism trial read a file-level key it does not take)."""
    msg = re.sub(r"--set hw\.([\w.@]+)=(\S+)", rf"serving.disaggregated.{key}.hw_overrides: {{\1: \2}}", str(exc))
    return re.sub(r"more nodes: parallel\.", f"more nodes: serving.disaggregated.{key}.parallel.", msg)


def plan_error(msg: str) -> bool:
    """Whether a pool's error is of its `parallel:` plan (its ranks, its topology), not of its preset."""
    return bool(re.search(r"(^|[\s:])parallel\.", msg))


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
    where = f"{file.source}: serving.disaggregated.transfer.topology: {topo.name}"
    give = "give transfer: {bandwidth_bytes_per_s, latency_s} for the link the pools share"
    off = [f"{k} runs on {name}" for k in ("prefill", "decode") if (name := pool_machine(file, k).name) != topo.device]
    notes = [f"{where} links {topo.device} devices, but {' and '.join(off)}: the KV transfer is priced at "
             f"{topo.name}'s send/recv all the same; {give} (PCIe, a NIC)"] if off else []
    # Pools past one node: some transfers cross the fabric, priced as one node's send/recv (a parallelism trial: 24
    # H100s' transfers at one NVLink hop, 240 us for 84 MB, where a 400 Gb/s NIC takes ~1.7 ms).
    devices = sum(pool_devices(getattr(d, k)) for k in ("prefill", "decode"))
    if devices > topo.devices_per_node:
        notes.append(f"{where}: the pools hold {devices} devices, one node of it {topo.devices_per_node}: a transfer "
                     f"between replicas on two nodes crosses the fabric, priced here as one node's send/recv; {give} "
                     "(a NIC's, e.g. 400 Gb/s: bandwidth_bytes_per_s: 5e10)")
    return notes


def pool_devices(pool) -> int:
    """Devices of a pool: its replicas' each, tp (or ep, the larger) x pp of its plan (one device without one). The
    plan is not checked yet (its errors come with the pool's setup): a value that is not a whole number counts 1."""
    plan = pool.parallel or {}
    ways = {k: v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 1
            for k, v in ((k, plan.get(k, 1)) for k in ("tp", "ep", "pp"))}
    return pool.replicas * max(ways["tp"], ways["ep"]) * ways["pp"]

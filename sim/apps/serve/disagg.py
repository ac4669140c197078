"""Disaggregated prefill and decode (Splitwise, DistServe): a prefill pool and a decode pool,
each of its own hardware preset, parallel plan and replica count, in one simpy environment.

    serving:
      disaggregated:
        prefill: {hw: h100_sxm, replicas: 2, parallel: {tp: 2, topology: dgx_h100}}
        decode:  {hw: hbm_pim, replicas: 1}
        transfer: {topology: dgx_h100}          # or {bandwidth_bytes_per_s: 50 GB/s, latency_s: 10 us}

A request goes to a prefill replica (the serving.router policy), which computes its prompt
and emits the first token. Its KV cache (prompt tokens x KV bytes per token of the model,
every layer) then crosses to a decode replica: time = the topology's fitted send/recv
(hw_models.network.collectives, alpha + S/B) or latency + S / bandwidth; one prefill
replica's transfers go one at a time over its link, and its blocks stay in the prefill pool until
its transfer is done (PrefillReplica.in_transfer). Under tensor parallelism each device holds its
share of the KV heads and sends it over its own link, as vLLM's and Mooncake's connectors do, the
devices at once: S is the larger of a prefill device's share and a decode device's (the side with
fewer shards sends or receives more per link). The decode replica admits the request
with its prompt already computed (KV blocks for prompt + 1 tokens) and generates the rest;
the gap from the first to the second token includes the transfer. Requests with one output
token end at the prefill pool.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import simpy

from hw_models.machine import Machine
from hw_models.network.collectives import SEND_RECV, collective_s
from hw_models.network.topology import load_topology
from sim.apps.serve.engine_defaults import pool_defaults
from sim.apps.serve.energy import instance_board, pools_board
from sim.apps.serve.simulator import REJECTED, ServeResult
from sim.apps.serve.metrics import utilization
from sim.apps.serve.router import Replica, choose, merge, policy_of, stream
from sim.apps.serve.schedulers import Request
from sim.apps.serve.instance import Setup, prepare
from sim.apps.serve.serving_mapper import serving_mapper
from sim.apps.serve.spec import ServeFile
from sim.apps.serve.traces import Requests
from sim.apps.serve.disagg_files import (pool_advice, pool_machine, plan_error, transfer_notes,  # noqa: F401
                                          unread_plan)  # (re-exported)
from sim.core.errors import ConfigError, SimError


class PrefillReplica(Replica):
    def __init__(self, setup: Setup, reqs: Requests, index: int, on_done: Callable[["PrefillReplica", int], None],
                 decode_refusal: Callable[[int], str | None], goes_on: np.ndarray):
        super().__init__(setup, reqs, index)
        self.goes_on = goes_on   # per request: it continues in the decode pool (more than one output token)
        self.on_done = on_done
        self.decode_refusal = decode_refusal
        self.link: simpy.Resource | None = None
        self.sched.in_transfer = {}   # requests whose KV the link has not sent yet (they hold their blocks)

    def refusal(self, req: Request) -> str | None:
        # One the decode pool can never take is refused before its prefill (it was prefilled, its
        # first token emitted, and then dropped by the decode pool).
        return super().refusal(req) or self.decode_refusal(req.idx)

    def _finish(self, r: Request, now: float) -> None:
        # A request that goes on to the decode pool keeps its prompt's KV blocks here until the transfer has sent
        # them (the prefill instance frees a cache once the decode side has it: Splitwise, DistServe); a slow or busy
        # link then fills this pool and stalls prefill (a serving researcher's trial: they were freed at the first
        # token, so 46 requests' KV, 6x the pool, sat "in flight" with the pool at 2%).
        keep = bool(self.goes_on[r.idx])
        blocks, shared = r.blocks, r.shared
        r.blocks, r.shared = 0, ()
        super()._finish(r, now)   # the scheduler lets the request go, freeing nothing yet
        r.blocks, r.shared = blocks, shared
        if keep:
            self.sched.in_transfer[r.idx] = r
        else:
            self.sched.free(r)
        self.on_done(self, r.idx)

    def sent(self, i: int) -> None:
        """Request i's KV has reached the decode pool: its blocks are free here."""
        self.sched.free(self.sched.in_transfer.pop(i))
        self.poke()


class DecodeReplica(Replica):
    def take_prefilled(self, i: int, scheduled_s: float, first_token_s: float) -> None:
        """Request i with its prompt computed elsewhere and its first token out."""
        r = self.reqs
        req = Request(i, float(r.arrival_s[i]), int(r.prompt_len[i]), int(r.output_len[i]))
        req.computed, req.generated = req.prompt, 1
        req.sched_at, req.first_at, req.last_at = scheduled_s, first_token_s, first_token_s
        self.rec["scheduled_s"][i], self.rec["first_token_s"][i] = scheduled_s, first_token_s
        self.routed += 1
        self.arrived += 1
        self.admit_or_reject(req)
        self.poke()


def pools_devices(file: ServeFile) -> list[tuple[str, Machine, int]]:
    """(pool, its machine, its devices: replicas x its plan's, as its mapper spans them) of a disaggregated file, for
    what the pools cost."""
    out = []
    for key in ("prefill", "decode"):
        machine, pool_file = pool_machine(file, key), _pool_file(file, key)
        devices = serving_mapper(machine, pool_file, pool_file.model_config_()).devices
        out.append((key, machine, getattr(file.serving.disaggregated, key).replicas * devices))
    return out


def _pool_file(file: ServeFile, key: str) -> ServeFile:
    """The file as pool `key` serves it: the pool's own parallel plan for the file's (none: one device)."""
    pool = getattr(file.serving.disaggregated, key)
    sections = {k: v for k, v in file.sections.items() if k != "parallel"}
    if pool.parallel is not None:
        sections["parallel"] = pool.parallel
    return file.model_copy(update={"sections": sections, "source": f"{file.source}: serving.disaggregated.{key}.parallel"})





def pool_setup(file: ServeFile, key: str, exact: bool, cache: dict | None) -> tuple[Setup, str]:
    if file.serving.speculative is not None:   # before a pool checks the draft (a trial: its vocabulary was refused
        # as a key of the prefill pool's plan, `serving.disaggregated.prefill.parallel: serving.speculative.draft`)
        raise ConfigError(f"{file.source}: serving.speculative: not modelled with serving.disaggregated")
    where = f"{file.source}: serving.disaggregated.{key}"
    machine = pool_machine(file, key)
    # the engine of each pool takes vLLM's device-derived defaults from its own preset (engine_defaults)
    pool_file = pool_defaults(_pool_file(file, key), machine)
    try:
        return prepare(pool_file, machine, exact=exact, cache=cache), machine.name
    except SimError as exc:   # the pool's preset or plan, as set, cannot serve the file: say which pool
        msg = pool_advice(exc, key)   # an error of the pool's plan names its key already (its source is it)
        raise type(exc)(msg if msg.startswith(where) else
                        f"{where}.{'parallel' if plan_error(msg) else 'hw'}: {msg}") from None


def instance_setup(file: ServeFile, machine: Machine, exact: bool, cache: dict | None = None) -> Setup:
    """The setup a run is built around: the file's instance, or a disaggregated file's prefill pool under its own
    plan (a capacity planner's trial: the file-level plan, often none, was sized on the prefill GPU first, and
    two TP 4 pools of Llama-3-70B were refused as one TP 1 GPU's)."""
    if file.serving.disaggregated is None:
        return prepare(file, machine, exact=exact, cache=cache)
    return pool_setup(file, "prefill", exact, cache)[0]


def pools_label(figures: dict[str, Any]) -> str:
    """What a disaggregated run ran on, from its summary's `disaggregated` figures (Disagg.figures: each replica's
    machine), for a report's title: "prefill h100_sxm x2, decode a6000 x1"."""
    return ", ".join(f"{k} {figures[k][0]['hw']} x{len(figures[k])}" for k in ("prefill", "decode"))


def transfer_s(file: ServeFile, nbytes: float) -> float:
    t = file.serving.disaggregated.transfer
    if t.topology is not None:
        topo = load_topology(t.topology, file.source, "serving.disaggregated.transfer.topology")
        return collective_s(topo, SEND_RECV, nbytes, 2)
    return t.latency_s + nbytes / t.bandwidth_bytes_per_s


class Disagg:
    """The two pools, the router in front of the prefill pool, and the KV transfers."""

    def __init__(self, file: ServeFile, reqs: Requests, exact: bool, cache: dict | None):
        d = file.serving.disaggregated
        self.file, self.reqs, self.policy = file, reqs, policy_of(file)
        (ps, self.prefill_hw), (ds, self.decode_hw) = (pool_setup(file, k, exact, cache) for k in ("prefill", "decode"))
        one = Requests(reqs.arrival_s, reqs.prompt_len, np.ones_like(reqs.output_len), reqs.hash_ids,
                       reqs.hash_block_tokens)
        self.prefill = [PrefillReplica(ps, one, k, self._prefilled, self._decode_refusal, reqs.output_len > 1)
                        for k in range(d.prefill.replicas)]
        self.decode = [DecodeReplica(ds, reqs, k) for k in range(d.decode.replicas)]
        self.boards = [instance_board(ps)] * d.prefill.replicas + [instance_board(ds)] * d.decode.replicas
        self.kv_per_token = ds.kv_bytes_per_token
        self.link_share = max(ps.kv_share, ds.kv_share)   # of a request's KV, what the busiest device link carries
        self.where = np.zeros(len(reqs), dtype=np.int64)    # index into prefill + decode replicas
        self.transfers: list[tuple[float, float, float]] = []   # (bytes, wait s, transfer s)
        # per request: its prefill replica, and its KV transfer's wait for the link and time on it (NaN: none)
        self.prefill_of = np.zeros(len(reqs), dtype=np.int64)
        self.transfer_wait_s, self.transfer_time_s = np.full(len(reqs), np.nan), np.full(len(reqs), np.nan)

    def _route(self, i: int) -> None:
        k = self.where[i] = self.prefill_of[i] = choose(self.policy, i, self.prefill)
        for r in self.prefill:
            r.take(i) if r.index == k else r.skip()
        if self.prefill[k].rec["status"][i] == REJECTED:
            self._skip_decode()

    def _decode_refusal(self, i: int) -> str | None:
        """Why no decode instance could ever hold request i (they are alike: one preset, one setup)."""
        r = self.reqs
        why = self.decode[0].refusal(Request(i, float(r.arrival_s[i]), int(r.prompt_len[i]), int(r.output_len[i])))
        return f"decode pool: {why}" if why else None

    def _skip_decode(self) -> None:
        for r in self.decode:
            r.skip()

    def _prefilled(self, rep: PrefillReplica, i: int) -> None:
        if self.reqs.output_len[i] <= 1:
            self._skip_decode()
            return
        rep.env.process(self._transfer(rep, i))

    def _transfer(self, rep: PrefillReplica, i: int):
        env, nbytes = rep.env, float(self.reqs.prompt_len[i]) * self.kv_per_token
        asked = env.now
        with rep.link.request() as slot:
            yield slot
            start = env.now
            dur = transfer_s(self.file, nbytes * self.link_share)
            yield env.timeout(dur)
        rep.busy["kv_transfer"] = rep.busy.get("kv_transfer", 0.0) + dur   # its link's busy time
        self.transfers.append((nbytes, start - asked, dur))
        self.transfer_wait_s[i], self.transfer_time_s[i] = start - asked, dur
        rep.sent(i)
        k = choose(self.policy, i, self.decode)
        self.where[i] = len(self.prefill) + k
        for r in self.decode:
            if r.index == k:
                r.take_prefilled(i, float(rep.rec["scheduled_s"][i]), float(rep.rec["first_token_s"][i]))
            else:
                r.skip()

    def run(self) -> tuple[ServeResult, dict[str, Any]]:
        env = simpy.Environment()
        env.process(stream(env, self.reqs, self._route, self.prefill[0].front_end_s))
        for r in (*self.prefill, *self.decode):
            r.start(env)   # each instance's API server: the prefill pool's take requests in, the decode pool's stream
            if isinstance(r, PrefillReplica):
                r.link = simpy.Resource(env, capacity=1)
            env.process(r._engine(env))
        env.run()
        results = [r.result(env.now) for r in (*self.prefill, *self.decode)]
        res = merge(results, self.where)
        res.requests |= {"requested_output_tokens": self.reqs.output_len.astype(float),   # the prefill pool's is 1
                         "prefill_instance": self.prefill_of.astype(float),
                         "kv_transfer_wait_s": self.transfer_wait_s, "kv_transfer_s": self.transfer_time_s}
        res.board = pools_board(results, self.boards, env.now)   # the pools' idle power between iterations
        # per iteration its pool's devices: the board's are the pools' mean (a TP 2 prefill beside a TP 1 decode)
        res.iterations["devices"] = np.array([b.devices for b in self.boards], dtype=np.int64)[res.iterations["instance"]]
        res.instance_names = [f"prefill {r.index} ({self.prefill_hw})" for r in self.prefill] + \
                             [f"decode {r.index} ({self.decode_hw})" for r in self.decode]
        return res, self.figures(results, env.now)

    def figures(self, results: list[ServeResult], span: float) -> dict[str, Any]:
        """Per pool: each replica's requests, busy fraction and utilisation per resource; the KV transfers."""
        def pool(reps, hw, offset):
            return [dict(replica=r.index, hw=hw, requests=r.routed,
                         busy=float(results[offset + r.index].iterations["duration_s"].sum()) / span if span else 0.0,
                         utilization=utilization(results[offset + r.index].busy_s, span))
                    for r in reps]
        t = np.array(self.transfers).reshape(-1, 3)
        transfer = dict(count=len(t), bytes_mean=float(t[:, 0].mean()) if len(t) else 0.0,
                        time_mean_s=float(t[:, 2].mean()) if len(t) else 0.0,
                        time_max_s=float(t[:, 2].max()) if len(t) else 0.0,
                        wait_mean_s=float(t[:, 1].mean()) if len(t) else 0.0)
        return dict(disaggregated=dict(prefill=pool(self.prefill, self.prefill_hw, 0),
                                       decode=pool(self.decode, self.decode_hw, len(self.prefill)),
                                       transfer=transfer))

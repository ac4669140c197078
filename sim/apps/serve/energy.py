"""Energy of a serving run (issue 33): joules per output token and per request, average
and peak power per device, energy by phase (prefill, decode, idle), and power over time.

Each iteration's joules come from the step cost (dynamic energy of its ops + the units'
idle and activity power over it, hw_models.power). Between iterations an engine waits
for work and its devices draw their idle power: that is the `idle` phase. An iteration
that mixes prefill chunks and decodes (chunked prefill) is split between the two phases by
its tokens: a decode sequence is one token, the rest of the iteration's tokens are prefill
(a token share, not a FLOP share: attention over a long prompt costs a prefill token more,
so the prefill share is a lower bound).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hw_models.power import CAP_ADDED, CAP_CLOCK, CAP_CLOCKED, Board, board_of
from sim.apps.serve.simulator import DONE, ServeResult


def instance_board(setup: Any) -> Board:
    """The board figures of `setup`'s instance (sim.apps.serve.instance.Setup): the mapper behind its step cost
    (exact, interpolated or split over attention groups) knows the devices its plan spans."""
    cost = setup.target_cost
    mapper = getattr(cost, "mapper", None) or getattr(getattr(cost, "exact", None), "mapper", None)
    return mapper.serving_board() if mapper is not None else board_of(setup.machine, 1)


def pools_board(results: list[ServeResult], boards: list[Board], span_s: float) -> Board:
    """One Board for instances of different boards (disaggregated pools; `boards[k]` is `results[k]`'s):
    devices per instance averaged, idle power per device weighted by each instance's idle seconds over
    `span_s`, so that idle_w x devices x the instances' summed idle seconds (total_energy_j) is the sum of
    each instance's idle power over its own idle seconds."""
    idle = [max(span_s - float(r.iterations["duration_s"].sum()), 0.0) for r in results]
    devices = sum(b.devices for b in boards) / len(boards)
    weights = idle if sum(idle) > 0 else [1.0] * len(boards)
    joules = sum(b.idle_w * b.devices * s for b, s in zip(boards, weights))
    limits = {b.limit_w for b in boards}
    return Board(joules / sum(weights) / devices, devices, limits.pop() if len(limits) == 1 else None,
                 source="; ".join(dict.fromkeys(b.source for b in boards if b.source)))


def phase_split(res: ServeResult) -> tuple[np.ndarray, np.ndarray]:
    """Per iteration: (prefill joules, decode joules), its energy split by tokens (module doc)."""
    it = res.iterations
    tokens = np.maximum(it["tokens"], 1.0)
    decode_tokens = np.clip(it["seqs"] - it["prefill_seqs"], 0.0, tokens)
    pre = it["energy_j"] * (1.0 - decode_tokens / tokens)
    return pre, it["energy_j"] - pre


def idle_s(res: ServeResult) -> float:
    """Seconds the instances' engines waited for work over the run (summed over instances)."""
    return max(res.makespan_s * res.instances - float(res.iterations["duration_s"].sum()), 0.0)


def total_energy_j(res: ServeResult) -> float:
    """The run's energy: its iterations' and the devices' idle power between them."""
    return res.energy_j + res.board.idle_w * res.board.devices * idle_s(res)


def energy_summary(res: ServeResult) -> dict[str, Any]:
    """The run's energy figures (plain data for the JSON and the report)."""
    b, it = res.board, res.iterations
    devices = round(b.devices * res.instances)   # pools average their devices per instance: the total is whole
    pre, dec = phase_split(res)
    total = total_energy_j(res)
    done = int((res.requests["status"] == DONE).sum())
    dur = it["duration_s"]
    # Peak: the most any iteration drew per device (its energy over its time); idle power when none ran.
    per_device_w = np.where(dur > 0, it["energy_j"] / np.where(dur > 0, dur, 1.0) / iteration_devices(res), 0.0)
    return dict(
        total_j=total,
        # undefined (JSON null, `-` in the report) where no token came out or no request finished, not 0 J
        per_output_token_j=total / res.tokens_out if res.tokens_out else float("nan"),
        per_request_j=total / done if done else float("nan"),
        devices=devices,
        avg_power_per_device_w=total / (res.makespan_s * devices) if res.makespan_s else 0.0,
        peak_power_per_device_w=_at_most_limit(float(per_device_w.max()), b.limit_w) if len(per_device_w) else b.idle_w,
        by_phase_j=dict(prefill=float(pre.sum()), decode=float(dec.sum()), idle=total - res.energy_j),
        power_cap=cap_summary(res),
        **({"power_includes": b.with_host} if b.with_host else {}),   # beyond the device's board (offload's host)
        **({"power_source": b.source} if b.source else {}),   # what the board figures rest on, as sim run says
        **({"boards_per_device": b.boards} if b.boards > 1 else {}),   # a unit of several boards (attacc_dgx)
    )


def _at_most_limit(peak_w: float, limit_w: float | None) -> float:
    """A capped iteration draws the limit exactly, which energy over time returns a rounding error above (a trial's
    script read 700.0000000000244 W against a 700 W limit): such a peak is the limit. Beyond rounding it stays (the
    offload kind's host draws beside a board the limit binds)."""
    return limit_w if limit_w is not None and limit_w < peak_w <= limit_w * (1.0 + 1e-9) else peak_w


def cap_summary(res: ServeResult) -> dict[str, Any] | None:
    """How much the board power limit slowed the run's iterations (hw_models.power: the clock drops until the
    board meets the limit), None where it never bound: the seconds it added over the run (all instances), the
    engine time's stretch (added over what the same iterations would have taken at full clock), the share of the
    engine time run at a lowered clock (a memory-bound iteration meets a limit there in the same time), and that
    clock's mean ratio to full there."""
    added, clocked = float(res.busy_s.get(CAP_ADDED, 0.0)), float(res.busy_s.get(CAP_CLOCKED, 0.0))
    if clocked <= 0.0:
        return None
    engine_s = float(res.iterations["duration_s"].sum())
    return dict(limit_w=res.board.limit_w, added_s=added, **({"clock_lock": res.board.clock_lock}
                                                             if res.board.clock_lock < 1.0 else {}),
                stretch=added / (engine_s - added) if engine_s > added else float("inf"),
                clocked_share=min(clocked / engine_s, 1.0) if engine_s > 0.0 else 0.0,
                clock=float(res.busy_s.get(CAP_CLOCK, 0.0)) / clocked)


def iteration_devices(res: ServeResult) -> np.ndarray:
    """The devices each iteration ran on: its instance's (disaggregated pools of different plans record them,
    `iterations["devices"]`), else the board's."""
    it = res.iterations
    return np.asarray(it["devices"], dtype=float) if "devices" in it else np.full(len(it["duration_s"]), res.board.devices)


def power_trace(res: ServeResult) -> tuple[np.ndarray, np.ndarray]:
    """Power per device over the run as a step function (times, watts from each time to the next, the last
    time the run's end): all devices' draw over their count, so it integrates to the run's energy. An instance
    draws idle power between its iterations and its iteration's own power during one; several instances'
    iterations overlap and add (replicas on one track had read each iteration's own devices in turn, which
    neither one device's power nor the mean)."""
    it, b = res.iterations, res.board
    devices = b.devices * res.instances
    idle_w = b.idle_w * b.devices   # an instance's draw at rest, as total_energy_j charges it
    dur = np.asarray(it["duration_s"], dtype=float)
    above = np.where(dur > 0, np.asarray(it["energy_j"], dtype=float) / np.where(dur > 0, dur, 1.0) - idle_w, 0.0)
    start = np.asarray(it["start_s"], dtype=float)
    t = np.concatenate([[0.0], start, start + dur])
    order = np.argsort(t, kind="stable")
    t, level = t[order], np.cumsum(np.concatenate([[idle_w * res.instances], above, -above])[order])
    last = np.append(t[1:] != t[:-1], True)   # the level once every change at one instant is in
    t, level = t[last], level[last]
    end = max(res.makespan_s, float(t[-1]))
    return np.append(t, end), np.append(level, level[-1]) / devices


def energy_window(res: ServeResult, t0: float, t1: float) -> tuple[float, float]:
    """(joules, output tokens) between times t0 and t1: iterations pro rata by overlap (their power is
    flat over them), idle gaps at idle power (one instance), each request's tokens spread evenly from
    its first token to its last. For a steady-state window as ML.ENERGY's (scripts/energy_mlenergy.py)."""
    it, b = res.iterations, res.board
    s, d = it["start_s"], it["duration_s"]
    overlap = np.clip(np.minimum(s + d, t1) - np.maximum(s, t0), 0.0, None)
    joules = float(np.sum(np.where(d > 0, it["energy_j"] * overlap / np.where(d > 0, d, 1.0), 0.0)))
    if res.instances == 1:
        joules += b.idle_w * b.devices * max((t1 - t0) - float(overlap.sum()), 0.0)
    r = res.requests
    ok = r["status"] == DONE
    first, fin, out = r["first_token_s"][ok], r["finish_s"][ok], r["output_tokens"][ok]
    span = fin - first
    inside = np.clip(np.minimum(fin, t1) - np.maximum(first, t0), 0.0, None)
    tokens = np.where(span > 0, (out - 1) * inside / np.where(span > 0, span, 1.0), 0.0)
    tokens += (first >= t0) & (first < t1)   # the first token, emitted at first_token_s
    return joules, float(tokens.sum())

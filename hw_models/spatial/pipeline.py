"""Micro-batches flowing through the chip pipeline, in the engine.

Each chip's compute and each chip-to-chip hop is an engine resource (a
station); a micro-batch visits the stations in order. Prefill is open: all
prompt chunks enter at time 0 and the step ends when the last leaves the last
chip. Decode is closed: micro-batch i's next token cannot enter the first chip
before its previous token has left the last chip and its sampled id has come
back (the return hop), so with m micro-batches the pipeline holds at most m
tokens. The decode step time is the steady-state period, measured between the
last two of `ROUNDS` simulated rounds.

Folding (the default; `exhaustive=True` turns it off): every station has a
deterministic service time and every micro-batch visits the stations in the
same FIFO order, so the tandem is equivalent, customer by customer, to its
slowest station preceded and followed by pure delays that sum the other
stations' times (Friedman, "Reduction methods for tandem queuing systems",
Operations Research 13(1), 1965; in max-plus form the departure of customer n
is max over k <= n of [arrival(k) + sum of all times + (n - k) * slowest], which
depends on the stations only through their sum and their maximum). The
equivalence holds for any arrival sequence, so also with the decode feedback.
A pipeline of 600 chips then costs 3 engine tasks per micro-batch instead of
1,200; tests/test_spatial.py checks it against the exhaustive simulation.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.core import engine
from sim.core.engine import Task, Timeline

ROUNDS = 3
DELAY = "pipeline.delay"   # an unlimited resource standing for stations folded into a delay


@dataclass(frozen=True)
class StationTag:
    kind: str        # "stage", "transfer" or "delay"
    bytes: float = 0.0
    bound: str = "link"
    path: str = ""
    energy_j: float = 0.0


def _fold(stations: list[tuple[str, float]]) -> list[tuple[str, float]]:
    if not stations:
        return []
    slow = max(range(len(stations)), key=lambda q: stations[q][1])
    pre = sum(t for _, t in stations[:slow])
    post = sum(t for _, t in stations[slow + 1:])
    return [(DELAY, pre), stations[slow], (DELAY, post)]


def _tag(resource: str) -> StationTag:
    if resource == DELAY:
        return StationTag("delay", bound="folded stations")
    if resource.startswith(("chip", "group")):   # a chip, or a tensor-parallel group of chips
        return StationTag("stage", bound="stage")
    return StationTag("transfer")


def _tasks(stations: list[tuple[str, float]], customers: int, rounds: int, closed: bool) -> list[Task]:
    tasks: list[Task] = []
    last = stations[-1][0]
    for r in range(rounds):
        for i in range(customers):
            prev = f"r{r - 1}.m{i}.{len(stations) - 1}.{last}" if closed and r > 0 else None
            for q, (res, t) in enumerate(stations):
                tid = f"r{r}.m{i}.{q}.{res}"
                tasks.append(Task(tid, res, t, (prev,) if prev else (), tag=_tag(res)))
                prev = tid
    return tasks


def run_stations(stations: list[tuple[str, float]], customers: int, rounds: int, closed: bool,
                 exhaustive: bool) -> tuple[Timeline, str]:
    """Run `customers` micro-batches over `stations`; returns the timeline and
    the id of the last station so callers can read completion times."""
    st = stations if exhaustive else _fold(stations)
    tl = engine.run(_tasks(st, customers, rounds, closed), {DELAY: customers})
    return tl, f"{len(st) - 1}.{st[-1][0]}"


def decode_period_s(stations: list[tuple[str, float]], microbatches: int, exhaustive: bool = False) -> float:
    """Steady-state time between two tokens of the same sequence."""
    tl, last = run_stations(stations, microbatches, ROUNDS, closed=True, exhaustive=exhaustive)
    ends = tl.by_task()
    m = microbatches - 1
    return ends[f"r{ROUNDS - 1}.m{m}.{last}"].end_s - ends[f"r{ROUNDS - 2}.m{m}.{last}"].end_s


def prefill_makespan_s(stations: list[tuple[str, float]], chunks: int, exhaustive: bool = False) -> float:
    tl, _ = run_stations(stations, chunks, 1, closed=False, exhaustive=exhaustive)
    return tl.makespan_s

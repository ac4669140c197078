"""The discrete-event engine: tasks with dependencies on shared resources.

It knows nothing about LLMs. A task occupies one resource (a compute unit, a
link, a PIM array) for a fixed duration once all its dependencies are done; it
may also take space in capacity containers (memory tiers) before it starts and
give space back when it ends, so prefetching runs ahead only as far as buffer
space allows. Every interval lands in an append-only Timeline.

simpy orders same-time events by insertion, and tasks are created in the order
given, so a run repeats exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import simpy

from sim.core.errors import CapacityError
from sim.core.frozen import frozen


@frozen
class Task:
    id: str
    resource: str
    duration_s: float
    deps: tuple[str, ...] = ()
    acquire: tuple[tuple[str, float], ...] = ()   # (container, bytes) taken before start
    release: tuple[tuple[str, float], ...] = ()   # (container, bytes) returned at the end
    tag: Any = None                               # opaque to the engine: carried into the timeline
    # Reporting only, set by the planner (empty: the task's own id). `group`: one
    # execution that this task is a piece of (pieces side by side merge into one
    # record); `op`: the piece of work it belongs to across layers, sub-batches and
    # head groups (tables sum by it).
    group: str = ""
    op: str = ""


@dataclass(slots=True)   # not frozen: a frozen dataclass's __init__ costs ~2x, and every task makes one
class Interval:
    task: str
    resource: str
    start_s: float
    end_s: float
    tag: Any = None
    group: str = ""
    op: str = ""

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class Timeline:
    intervals: list[Interval] = field(default_factory=list)
    peak_used: dict[str, float] = field(default_factory=dict)   # container -> peak bytes in use
    # container -> (time, amount in use) after each change, for counter tracks in a trace
    levels: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    @property
    def makespan_s(self) -> float:
        return max((i.end_s for i in self.intervals), default=0.0)

    def busy_s(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for i in self.intervals:
            out[i.resource] = out.get(i.resource, 0.0) + i.duration_s
        return out

    def utilization(self) -> dict[str, float]:
        span = self.makespan_s
        return {r: (b / span if span else 0.0) for r, b in self.busy_s().items()}

    def by_task(self) -> dict[str, Interval]:
        return {i.task: i for i in self.intervals}


def run(tasks: Iterable[Task], resources: dict[str, int] | None = None,
        containers: dict[str, float] | None = None, in_order: bool = False) -> Timeline:
    """Simulate `tasks`. `resources` gives the capacity (parallel slots) of each
    resource; resources not listed have one slot. `containers` gives the
    capacity in bytes of each memory container, all initially free.

    With `in_order`, each resource is an in-order queue, like a CUDA stream or
    a DMA engine: it runs its tasks one at a time in the order given, each
    once its dependencies are done. That is both the hardware's semantics for
    streams and about 3x cheaper to simulate (one timeout per task instead of
    a process, a request and a timeout)."""
    tasks = list(tasks)
    if in_order:
        return _run_in_order(tasks, containers or {})
    env = simpy.Environment()
    slots = dict(resources or {})
    res = {name: simpy.Resource(env, capacity=slots.get(name, 1))
           for name in dict.fromkeys(t.resource for t in tasks)}
    cont = {name: simpy.Container(env, capacity=cap, init=cap) for name, cap in (containers or {}).items()}
    peak = dict.fromkeys(cont, 0.0)
    done: dict[str, simpy.Event] = {t.id: env.event() for t in tasks}
    timeline = Timeline()
    note = _recorder(env, cont, timeline)

    _check(tasks, cont, done)

    def proc(t: Task):
        if t.deps:
            yield env.all_of([done[d] for d in t.deps])
        for name, amount in t.acquire:
            if amount > 0:
                yield cont[name].get(amount)
                peak[name] = max(peak[name], note(name))
        with res[t.resource].request() as req:
            yield req
            start = env.now
            if t.duration_s > 0:
                yield env.timeout(t.duration_s)
            timeline.intervals.append(Interval(t.id, t.resource, start, env.now, t.tag, t.group or t.id, t.op or t.group or t.id))
        for name, amount in t.release:
            if amount > 0:
                yield cont[name].put(amount)
                note(name)
        done[t.id].succeed()

    for t in tasks:
        env.process(proc(t))
    return _finish(env, tasks, done, timeline, peak)


def _recorder(env: simpy.Environment, cont: dict[str, simpy.Container], timeline: Timeline):
    """A function that appends a container's amount in use, now, to the timeline's levels."""
    def note(name: str) -> float:
        used = cont[name].capacity - cont[name].level
        timeline.levels.setdefault(name, []).append((env.now, used))
        return used
    return note


def _check(tasks: list[Task], cont: dict[str, simpy.Container], done: dict[str, simpy.Event]) -> None:
    for t in tasks:
        for name, amount in t.acquire:
            if name not in cont:
                raise KeyError(f"task {t.id}: unknown container {name!r}")
            if amount > cont[name].capacity:
                raise CapacityError(f"{t.id} needs {amount:.3g} bytes of {name}, which holds only {cont[name].capacity:.3g}")
        missing = [d for d in t.deps if d not in done]
        if missing:
            raise KeyError(f"task {t.id}: unknown dependencies {missing}")


def _finish(env: simpy.Environment, tasks: list[Task], done: dict[str, simpy.Event], timeline: Timeline,
            peak: dict[str, float]) -> Timeline:
    env.run()
    unfinished = [t.id for t in tasks if not done[t.id].triggered]
    if unfinished:
        raise RuntimeError(f"deadlock: {len(unfinished)} tasks never ran, first {unfinished[0]!r} "
                           "(a dependency cycle, or a container that is never refilled)")
    timeline.peak_used = peak
    return timeline


def _one_plain_stream(tasks: list[Task]) -> bool:
    """Whether `tasks` are one in-order stream with no container traffic, each depending only on tasks before it:
    then every task starts when the one before it ends (its dependencies ended no later), which _run_one_stream
    computes without an event loop."""
    seen: set[str] = set()
    first = tasks[0].resource if tasks else None
    for t in tasks:
        if t.resource != first or t.acquire or t.release or t.id in seen or not seen.issuperset(t.deps):
            return False
        seen.add(t.id)
    return True


def _run_one_stream(tasks: list[Task], containers: dict[str, float]) -> Timeline:
    """_run_in_order's timeline of a plain stream (_one_plain_stream), to the bit: simpy's clock starts at the int 0
    (a leading zero-length task's start and end stay ints in --json) and a timeout ends at now + duration, the same
    float sum (a performance trial: the event loop was 37% of a sweep point; tests/test_engine.py compares both
    paths, types included)."""
    timeline = Timeline()
    record = timeline.intervals.append
    now: float = 0
    for t in tasks:
        start = now
        if t.duration_s > 0:
            now = start + t.duration_s
        record(Interval(t.id, t.resource, start, now, t.tag, t.group or t.id, t.op or t.group or t.id))
    timeline.peak_used = dict.fromkeys(containers, 0.0)
    return timeline


def _run_in_order(tasks: list[Task], containers: dict[str, float]) -> Timeline:
    if _one_plain_stream(tasks):
        return _run_one_stream(tasks, containers)
    env = simpy.Environment()
    cont = {name: simpy.Container(env, capacity=cap, init=cap) for name, cap in containers.items()}
    peak = dict.fromkeys(cont, 0.0)
    done: dict[str, simpy.Event] = {t.id: env.event() for t in tasks}
    _check(tasks, cont, done)
    queues: dict[str, list[Task]] = {}
    for t in tasks:
        queues.setdefault(t.resource, []).append(t)
    timeline = Timeline()
    record = timeline.intervals.append
    note = _recorder(env, cont, timeline)

    def stream(queue: list[Task]):
        for t in queue:
            pending = [done[d] for d in t.deps if not done[d].triggered]
            if len(pending) == 1:
                yield pending[0]
            elif pending:
                yield env.all_of(pending)
            for name, amount in t.acquire:
                if amount > 0:
                    yield cont[name].get(amount)
                    peak[name] = max(peak[name], note(name))
            start = env.now
            if t.duration_s > 0:
                yield env.timeout(t.duration_s)
            record(Interval(t.id, t.resource, start, env.now, t.tag, t.group or t.id, t.op or t.group or t.id))
            for name, amount in t.release:
                if amount > 0:
                    yield cont[name].put(amount)
                    note(name)
            done[t.id].succeed()

    for queue in queues.values():
        env.process(stream(queue))
    return _finish(env, tasks, done, timeline, peak)

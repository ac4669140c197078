"""The board power limit under a pipeline (hw_models.power): each device is capped on its own power
while it works. A pipeline's stages work in turn (one sequence: stage 0, then stage 1), so the mean
over the devices of a step halves under pp = 2 and would never bind while each board, in its turn,
draws what one GPU running those layers draws. Each stage task is stretched by its own devices' s over
the time it runs, and the schedule is run again: a stretched stage delays the stages that wait for it,
and a bubble gives a device no headroom to spend later."""

from __future__ import annotations

from dataclasses import replace

from hw_models.gpu.schedule import StageCost, steady_period_s
from hw_models.clock import ClockWork
from hw_models.power import BoardPower, with_cap
from sim.core import engine
from sim.core.engine import Task, Timeline
from sim.core.graph import OpGraph
from sim.core.results import StepResult


def stage_caps(tasks: list[Task], bp: BoardPower) -> tuple[list[Task], tuple[float, float, float] | None, float]:
    """`tasks` with each stage task slowed by its devices' cap: a device draws idle + (active x d + its dynamic
    joules) / d through a stage task of d seconds, and the clock that meets the limit (or a clock lock) slows the
    task's ops as it paces them (BoardPower.under_cap over d, the task's split by bound: hw_models.clock); the
    hottest stage device's clocked joules, working seconds and mean clock over the step, None where no stage
    binds; and one rank's activity joules the lower clocks save, over every stage task."""
    out, work, bound, saved = [], {}, False, 0.0
    for task in tasks:
        if isinstance(task.tag, StageCost):
            d, active_j = task.duration_s, bp.active_w * task.duration_s
            clocked_j = active_j + task.tag.energy_j   # one rank's, as the tags hold
            added, saved_j, r = bp.under_cap(d, active_j, task.tag.energy_j, ClockWork.read(task.tag.clock or {}))
            bound, saved = bound or r < 1.0, saved + saved_j
            j, w, c = work.get(task.resource, (0.0, 0.0, 0.0))
            work[task.resource] = (j + clocked_j, w + d, c + r * d)
            task = replace(task, duration_s=d + added)
        out.append(task)
    hot = max(work.values(), key=lambda jwc: jwc[0] / jwc[1] if jwc[1] else 0.0, default=None)
    return out, (hot[0], hot[1], hot[2] / hot[1]) if bound and hot[1] else None, saved


class PipelinePower:
    """The cap of hw_models.gpu.parallel.ParallelGpuMapper's pipelined steps (module doc); its TP-only
    steps keep Mapper.capped (a TP group's ranks work at once, so each draws the mean)."""

    def graph_step(self, phase: str, kv_len: int, graph: OpGraph, busy=Timeline.busy_s) -> StepResult:
        """Mapper.graph_step with each stage capped (stage_step)."""
        if not self.plan.pipelined:
            return super().graph_step(phase, kv_len, graph, busy)
        return self.stage_step(phase, kv_len, self.plan_step(graph), busy)

    def stage_step(self, phase: str, kv_len: int, tasks: list[Task], busy=Timeline.busy_s) -> StepResult:
        """`tasks` (the stage and send tasks of micro-batches `mb<i>.*`) as one step of `phase` (step_span_s), each
        stage capped; busy times stay those at full clock, the activity the lower clocks save taken off the energy
        (every rank of a stage saves what its tag's one rank does), as Mapper.capped does."""
        free = engine.run(tasks, self.resources(), self.containers(), self.in_order)
        step = StepResult(phase, kv_len, self.step_span_s(phase, free), busy(free), self.energy_j(free))
        bp = self.machine.board_power()
        slowed, hot, saved_j = stage_caps(tasks, bp) if bp is not None and bp.acts else (tasks, None, 0.0)
        if hot is None:
            return step
        t = self.step_span_s(phase, engine.run(slowed, self.resources(), self.containers(), self.in_order))
        # The fold runs the same schedule for any layer count (pipeline_tasks), so these counters fold to themselves;
        # the clock is the hottest stage device's (the step's makespan grew by more or less than its own stretch)
        return replace(step, time_s=t, energy_j=step.energy_j - self.plan.stage_width * saved_j,
                       counters=with_cap(step.counters, t - step.time_s, *hot))

    @staticmethod
    def step_span_s(phase: str, tl: Timeline) -> float:
        """A pipelined step's time: a prefill fills and drains the pipeline once (the schedule's makespan); a decode
        step's micro-batches, and a serving iteration's, stay in flight from step to step (schedule.steady_period_s),
        as an engine keeps them."""
        return tl.makespan_s if phase == "prefill" else steady_period_s(tl)

    def capped(self, step: StepResult) -> StepResult:
        """A pipelined step is capped stage by stage already (graph_step)."""
        return step if self.plan.pipelined else super().capped(step)

    @property
    def caps_whole_steps(self) -> bool:
        return not self.plan.pipelined

"""The board power limit under a pipeline (hw_models.power): each device is capped on its own power
while it works. A pipeline's stages work in turn (one sequence: stage 0, then stage 1), so the mean
over the devices of a step halves under pp = 2 and would never bind while each board, in its turn,
draws what one GPU running those layers draws. Each stage task is stretched by its own devices' s over
the time it runs, and the schedule is run again: a stretched stage delays the stages that wait for it,
and a bubble gives a device no headroom to spend later."""

from __future__ import annotations

from dataclasses import replace

from hw_models.gpu.schedule import StageCost, steady_period_s
from hw_models.power import BoardPower, with_cap
from sim.core import engine
from sim.core.engine import Task, Timeline
from sim.core.graph import OpGraph
from sim.core.results import StepResult


def stage_caps(tasks: list[Task], bp: BoardPower) -> tuple[list[Task], tuple[float, float] | None]:
    """`tasks` with each stage task stretched by its devices' cap: a device draws idle + (active x d + its
    dynamic joules) / d through a stage task of d seconds (BoardPower.stretch over d); and the hottest stage
    device's clocked joules and working seconds over the step, None where no stage binds."""
    out, work, bound = [], {}, False
    for task in tasks:
        if isinstance(task.tag, StageCost):
            clocked_j = bp.active_w * task.duration_s + task.tag.energy_j   # one rank's, as the tags hold
            s = bp.stretch(task.duration_s, clocked_j)
            bound |= s > 1.0
            j, d = work.get(task.resource, (0.0, 0.0))
            work[task.resource] = (j + clocked_j, d + task.duration_s)
            task = replace(task, duration_s=task.duration_s * s)
        out.append(task)
    hot = max(work.values(), key=lambda jd: jd[0] / jd[1] if jd[1] else 0.0, default=None)
    return out, hot if bound else None


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
        stage capped; busy times and energy stay those at full clock (they charge the activity and dynamic energy,
        as Mapper.capped keeps them)."""
        free = engine.run(tasks, self.resources(), self.containers(), self.in_order)
        step = StepResult(phase, kv_len, self.step_span_s(phase, free), busy(free), self.energy_j(free))
        bp = self.machine.board_power()
        slowed, hot = stage_caps(tasks, bp) if bp is not None and bp.limit_w is not None else (tasks, None)
        if hot is None:
            return step
        t = self.step_span_s(phase, engine.run(slowed, self.resources(), self.containers(), self.in_order))
        # The fold runs the same schedule for any layer count (pipeline_tasks), so these counters fold to themselves.
        # the hottest stage device's clock: 1/s of its own stretch (the step's makespan grew by more or less than it)
        return replace(step, time_s=t, counters=with_cap(step.counters, t - step.time_s, *hot,
                                                         clock=1.0 / bp.stretch(hot[1], hot[0])))

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

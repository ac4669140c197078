"""How a step's time answers the GPU's SM clock: the lever the board power limit pulls (hw_models.power).

Lowering the SM clock to a ratio r (< 1) of its boost slows what the SMs' cycles pace and nothing else:

    compute-bound op:  d(r) = d + c (1/r - 1)              its compute pipes run r times as fast
    memory-bound op:   d(r) = d + max(c / r, m) - m        DRAM keeps its pace (HBM has its own clock, which the
                                                           board limit leaves alone) until the op's compute,
                                                           slowed by 1/r, outgrows its memory time
    anything else:     d(r) = d                            launch gaps and floors, link-bound collectives

with c and m the op's compute and memory seconds at full clock (OpCost.compute_s, memory_s). Measured: a memory-
bound decode on an H200 keeps its throughput when its SM clock is locked well below boost (Ma et al. 2026,
arXiv:2605.11999, "minimal throughput loss"), where a compute-bound prefill slows with the clock.

A folded step keeps three sums of its main unit's ops (ClockWork, extensive like every counter): the compute-bound
ops' compute seconds, the memory-bound ops' memory seconds and their compute seconds. Its memory-bound part at r is
max(sum c / r, sum m): the sum of the ops' own max() where they share one ratio c / m (a decode step's GEMVs share
its batch), and below it otherwise, where some turn clock-bound before the rest (a 300 W limit on an H100's 13B
prefill: 1.2% below the ops' own sum). The op records follow the sums (op_added_s), so that they end where the
step does.

Activity energy (active_power_w: the clock tree and leakage at boost, an energy per cycle) over a span of d(r)
seconds at clock r is active_w x r x d(r): unchanged for compute-bound work (the same cycles), r times smaller
for memory-bound work (fewer cycles while the SMs wait on DRAM). The FLOPs' and bytes' energies are held at their
full-clock figures, as hw_models.power holds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import sqrt
from typing import Any, Iterable, Mapping

# The counters a step keeps of ClockWork (StepResult.counters; a serving cost vector's entries beside the busy times)
CLOCK_COUNTERS = ("clock_sm_bound_s", "clock_mem_bound_s", "clock_mem_bound_sm_s")


def op_added_s(cost: Any, r: float, turned: bool) -> float:
    """Seconds an op (an OpCost) gains at SM clock ratio r, as its step's sums count it (ClockWork.added_s): a
    memory-bound op keeps its time until the step's memory-bound ops together turn clock-bound (`turned`), and then
    takes its compute's c / r, so that a step's op records end where its time does."""
    if cost.bound == "compute":
        return cost.compute_s * (1.0 / r - 1.0)
    if cost.bound == "memory" and turned:
        return cost.compute_s / r - cost.memory_s
    return 0.0


def clock_counters(costs: Iterable[Any], unit: str) -> dict[str, float]:
    """The counters (CLOCK_COUNTERS) of the OpCosts in `costs` that ran on `unit` (one device's ops)."""
    sm = mem = mem_sm = 0.0
    for c in costs:
        if getattr(c, "unit", None) != unit:
            continue
        if c.bound == "compute":
            sm += c.compute_s
        elif c.bound == "memory":
            mem, mem_sm = mem + c.memory_s, mem_sm + c.compute_s
    return dict(zip(CLOCK_COUNTERS, (sm, mem, mem_sm)))


@dataclass(frozen=True)
class ClockWork:
    """One device's seconds of a step by how they answer its SM clock (module doc)."""

    sm_s: float            # compute-bound ops' compute seconds: 1/r as long at clock r
    mem_s: float           # memory-bound ops' memory seconds: DRAM's pace, whatever the SM clock
    mem_sm_s: float = 0.0  # those ops' compute seconds: they turn clock-bound below r = mem_sm_s / mem_s

    @classmethod
    def read(cls, counters: Mapping[str, float]) -> ClockWork | None:
        """The split a step's counters hold; None where they hold none (a kind that caps its steps as wholes)."""
        if CLOCK_COUNTERS[0] not in counters:
            return None
        return cls(*(counters.get(k, 0.0) for k in CLOCK_COUNTERS))

    def turned(self, r: float) -> bool:
        """Whether the memory-bound ops, together, are clock-bound at ratio r."""
        return self.mem_sm_s > r * self.mem_s

    def added_s(self, r: float) -> float:
        """Seconds the step gains at SM clock ratio r (<= 1)."""
        return self.sm_s * (1.0 / r - 1.0) + max(self.mem_sm_s / r - self.mem_s, 0.0)

    def ratio(self, headroom_w: float, active_w: float, time_s: float, busy_s: float, dynamic_j: float) -> float | None:
        """The clock ratio r at which one device's mean power over the step, minus idle, is `headroom_w` (the limit
        less idle): active_w x r x (busy_s + added_s(r)) + dynamic_j = headroom_w x (time_s + added_s(r)). The left
        side's rate rises with r and the time falls, so the root is unique. None where no clock meets it (every op's
        time is DRAM's, or a link's, and their bytes alone draw more than the limit)."""
        # Where the memory-bound ops stay memory-bound (r >= mem_sm_s / mem_s): added = sm_s / r - sm_s; below it
        # they join the clock-bound part: added = (sm_s + mem_sm_s) / r - (sm_s + mem_s). Each is x / r - y.
        turn = self.mem_sm_s / self.mem_s if self.mem_s > 0.0 else 0.0
        for x, y in ((self.sm_s, self.sm_s), (self.sm_s + self.mem_sm_s, self.sm_s + self.mem_s)):
            # active_w (x + r (busy - y)) + dynamic_j = headroom_w (time - y + x / r), times r: a r^2 + b r - c = 0
            a, b, c = active_w * max(busy_s - y, 0.0), active_w * x + dynamic_j - headroom_w * (time_s - y), headroom_w * x
            r = _positive_root(a, b, c)
            if r is not None and (r >= turn or x == self.sm_s + self.mem_sm_s):
                return min(r, 1.0)
        return None


def _positive_root(a: float, b: float, c: float) -> float | None:
    """The positive root of a r^2 + b r - c = 0 (a, c >= 0), in the form that stays exact as a -> 0; None if none."""
    if c > 0.0:
        den = b + sqrt(b * b + 4.0 * a * c)
        return 2.0 * c / den if den > 0.0 else None
    return -b / a if a > 0.0 and b < 0.0 else None

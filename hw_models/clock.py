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

A folded step keeps sums of its main unit's ops (ClockWork, extensive like every counter): the compute-bound ops'
compute seconds, and the memory-bound ops' memory and compute seconds in bins of their ratio c / m (MEM_BINS). A
bin's part at r is max(sum c / r, sum m): the sum of its ops' own max() where they share one ratio, and a little
below it otherwise. One pool of every memory-bound op had hidden a decode's near-ridge GEMMs behind its attention's
tiny ratio (a review: Llama-3-8B at batch 256 on an H100 read no slowdown at 400 W, +11.7% op by op). The op
records carry the step's added time, each memory-bound op's share as its own max() says (at_capped_clock).

Activity energy (active_power_w: the clock tree and leakage at boost, an energy per cycle) over a span of d(r)
seconds at clock r is active_w x r x d(r): unchanged for compute-bound work (the same cycles), r times smaller
for memory-bound work (fewer cycles while the SMs wait on DRAM). The FLOPs' and bytes' energies are held at their
full-clock figures, as hw_models.power holds them.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from math import sqrt
from typing import Any, Iterable, Mapping

# Upper edges of the bins of memory-bound ops by their ratio c / m (the last bin runs to 1, where an op is no
# longer memory-bound): narrow enough that a decode's GEMMs, its attention and its elementwise ops fall apart.
MEM_BINS = (0.1, 0.25, 0.45, 0.7)
# The counters a step keeps of ClockWork (StepResult.counters; a serving cost vector's entries beside the busy times):
# the compute-bound seconds, then each bin's memory seconds and compute seconds.
CLOCK_COUNTERS = ("clock_sm_bound_s", *(f"clock_mem{b}_{part}_s" for b in range(len(MEM_BINS) + 1) for part in ("m", "c")))


def op_added_s(cost: Any, r: float) -> float:
    """Seconds an op (an OpCost) gains at SM clock ratio r, by its own bound (module doc)."""
    if cost.bound == "compute":
        return cost.compute_s * (1.0 / r - 1.0)
    if cost.bound == "memory":
        return max(cost.compute_s / r - cost.memory_s, 0.0)
    return 0.0


def clock_counters(costs: Iterable[Any], unit: str) -> dict[str, float]:
    """The counters (CLOCK_COUNTERS) of the OpCosts in `costs` that ran on `unit` (one device's ops)."""
    out = dict.fromkeys(CLOCK_COUNTERS, 0.0)
    for c in costs:
        if getattr(c, "unit", None) != unit:
            continue
        if c.bound == "compute":
            out[CLOCK_COUNTERS[0]] += c.compute_s
        elif c.bound == "memory" and c.memory_s > 0.0:
            b = bisect_right(MEM_BINS, c.compute_s / c.memory_s)
            out[CLOCK_COUNTERS[1 + 2 * b]] += c.memory_s
            out[CLOCK_COUNTERS[2 + 2 * b]] += c.compute_s
    return out


@dataclass(frozen=True)
class ClockWork:
    """One device's seconds of a step by how they answer its SM clock (module doc)."""

    sm_s: float                          # compute-bound ops' compute seconds: 1/r as long at clock r
    mem_s: tuple[float, ...] = ()        # memory-bound ops' memory seconds by bin: DRAM's pace at any clock
    mem_sm_s: tuple[float, ...] = ()     # their compute seconds: a bin turns clock-bound below r = mem_sm_s / mem_s

    @classmethod
    def read(cls, counters: Mapping[str, float]) -> ClockWork | None:
        """The split a step's counters hold; None where they hold none (a kind that caps its steps as wholes)."""
        if CLOCK_COUNTERS[0] not in counters:
            return None
        v = [counters.get(k, 0.0) for k in CLOCK_COUNTERS]
        return cls(v[0], tuple(v[1::2]), tuple(v[2::2]))

    def added_s(self, r: float) -> float:
        """Seconds the step gains at SM clock ratio r (<= 1)."""
        return self.sm_s * (1.0 / r - 1.0) + self.mem_added_s(r)

    def mem_added_s(self, r: float) -> float:
        """The memory-bound bins' part of added_s: each bin's compute, slowed, past its DRAM time."""
        return sum(max(c / r - m, 0.0) for m, c in zip(self.mem_s, self.mem_sm_s))

    def ratio(self, headroom_w: float, active_w: float, time_s: float, busy_s: float, dynamic_j: float) -> float | None:
        """The clock ratio r at which one device's mean power over the step, minus idle, is `headroom_w` (the limit
        less idle): active_w x r x (busy_s + added_s(r)) + dynamic_j = headroom_w x (time_s + added_s(r)). The left
        side's rate rises with r and the time falls, so the root is unique. None where no clock meets it (every op's
        time is DRAM's, or a link's, and their bytes alone draw more than the limit)."""
        # Between two bins' turning points (c / m, highest first) the turned bins are clock-bound: added = x / r - y
        # with x = sm_s + their compute, y = sm_s + their memory seconds. The first region whose root lies in it.
        turns = sorted(((c / m, m, c) for m, c in zip(self.mem_s, self.mem_sm_s) if m > 0.0), reverse=True)
        x = y = self.sm_s
        for k in range(len(turns) + 1):
            if k:
                x, y = x + turns[k - 1][2], y + turns[k - 1][1]
            low = turns[k][0] if k < len(turns) else 0.0
            # active_w (x + r (busy - y)) + dynamic_j = headroom_w (time - y + x / r), times r: a r^2 + b r - c = 0
            r = _positive_root(active_w * max(busy_s - y, 0.0), active_w * x + dynamic_j - headroom_w * (time_s - y),
                               headroom_w * x)
            if r is not None and r >= low:
                return min(r, 1.0)
        return None


def _positive_root(a: float, b: float, c: float) -> float | None:
    """The positive root of a r^2 + b r - c = 0 (a, c >= 0), each form where it does not cancel; None if none."""
    if c > 0.0:
        d = sqrt(b * b + 4.0 * a * c)
        if b >= 0.0:
            return 2.0 * c / (b + d)
        return (d - b) / (2.0 * a) if a > 0.0 else None
    return -b / a if a > 0.0 and b < 0.0 else None

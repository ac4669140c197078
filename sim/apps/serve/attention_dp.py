"""Serving under data-parallel attention (a `parallel:` plan with ep = g x tp, g > 1):
g attention groups of tp devices, each with its own sequences and KV cache, and the
routed experts spread over all ep devices (hw_models/gpu/expert_parallel.py).

Assignment. A request belongs to one group for its whole life, as a data-parallel
router pins a request to one DP rank (vLLM's DP coordinator, SGLang's DP attention):
request i of the stream (in arrival order) goes to group i mod g, round-robin.

Cost of an iteration. The scheduler picks one batch for the instance; its entries
split by group. Every MoE layer synchronises the groups at the dispatch and the
combine, and idle groups run empty (dummy) batches, so the iteration takes

    max over groups a of D(a) + X(T_max, T)

D(a): group a's own ops (attention, dense layers, router, the all-gather after the
combine) on its sequences: the mapper's iteration with the routed experts and their
all-to-alls taking no time (Mapper.iteration with experts=False), through the usual
surrogate or exact cost. X: the routed experts of the busiest rank over all T tokens of
the iteration plus the all-to-alls, whose buffer is the larger of what the group with
the most tokens (T_max) sends and what the busiest rank receives
(ParallelGpuMapper.expert_part; exact, cached per (T_max, T)). The decomposition is
exact where the rank's ops run one after another (the experts wait for the dispatch,
the combine for the experts); it leaves out any overlap of one group's host launches
with another's experts.

The engine's host work (the stack's step_overhead) is paid once for the instance's whole
batch, after the groups' device costs combine.

Busy times and energy are one device's, the straggler group's (as for every plan, one
rank stands for its group).
"""

from __future__ import annotations

from functools import lru_cache

from hw_models.base import Mapper
from hw_models.power import CAP_ADDED, CAP_CLOCK, CAP_CLOCKED
from hw_models.stack.step_overhead import HOST
from sim.apps.serve.iteration import Iteration, features
from sim.apps.serve.stepcost import Cost, StepCost

Entries = list  # [(Request, new tokens)]


def split(entries: Entries, groups: int) -> tuple[Iteration, ...]:
    """The iteration of each attention group: request i runs on group i mod `groups`."""
    seqs: list[list[tuple[int, int]]] = [[] for _ in range(groups)]
    for r, q in entries:
        seqs[r.idx % groups].append((q, r.computed + q))
    return tuple(features(s) for s in seqs if s)


class GroupedCost:
    """The cost of a batch split over attention groups (module doc). `dense` costs one
    group's own ops (a Surrogate or ExactCost built with experts=False)."""

    def __init__(self, dense: StepCost, mapper: Mapper):
        self.dense, self.mapper = dense, mapper
        self.op_level = dense.op_level
        self._extra: list[str] = []
        self._experts = lru_cache(maxsize=4096)(self._expert_part)

    @property
    def keys(self) -> list[str]:
        return self.dense.keys + [k for k in self._extra if k not in self.dense.keys]

    def _expert_part(self, most: int, total: int) -> tuple[float, float, tuple[tuple[str, float], ...]]:
        s, j, busy = self.mapper.expert_part(most, total)
        return s, j + self.mapper.power_j(busy, s), tuple(busy.items())

    def __call__(self, groups: tuple[Iteration, ...]) -> Cost:
        costs = [self.dense.device(it) for it in groups]   # the engine's host work once, below
        slow = max(costs, key=lambda c: c[0])
        busy = dict(zip(self.dense.keys, slow[2:]))
        s, j, extra = self._experts(max(it.tokens for it in groups), sum(it.tokens for it in groups))
        t, j = slow[0] + s, slow[1] + j
        # the instance's step under its board limit, as ExactCost.capped: the slowest group's ops and the experts'
        # (expert_part's busy entries hold their split by what the SM clock paces, hw_models.clock)
        whole = dict(busy)
        for k, v in extra:
            whole[k] = whole.get(k, 0.0) + v
        added, saved_j, clock = self.dense.cap(t, j, whole)
        if clock < 1.0:
            t, j = t + added, j + self.mapper.power_j({}, added) - saved_j
            extra = (*extra, (CAP_ADDED, added), (CAP_CLOCKED, t), (CAP_CLOCK, t * clock))
        host = self.mapper.engine_host_s(sum(len(it.seqs) for it in groups))   # one scheduler for the instance
        if host:
            wall = self.mapper.step_overhead.step_s(t, host)
            t, j, extra = wall, j + self.mapper.gap_j(wall - t), (*extra, (HOST, host))
        for k, v in extra:
            busy[k] = busy.get(k, 0.0) + v
            if k not in self.dense.keys and k not in self._extra:
                self._extra.append(k)
        return (t, j, *(busy.get(k, 0.0) for k in self.keys))

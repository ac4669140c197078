"""What the PIM mapper plans with: an op's pieces per stack, their costs, the
placement decision, and the step schedule (AttAcc's rewrites) the decisions are
made in. Plain values: a schedule is returned by PimMapper.schedule and passed
along, never kept on the mapper, so a report cannot change a later run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hw_models.op_cost import OpCost
from hw_models.pim.pipeline import HOST, PIM
from sim.core import graph as g
from sim.core.frozen import frozen
from sim.core.graph import Op, OpGraph

ATTN_KINDS = (g.ATTN_SCORE, g.ATTN_CONTEXT, g.ATTENTION)   # matrix attention ops (softmax aside)


@frozen
class Piece:
    """One op's share of work on one stack."""

    stack: int
    stream_bytes: float      # read from the banks by the PIM units (re-read once per input row)
    flops: float
    in_bytes: float          # input vectors written through the stack's pins
    out_bytes: float         # results / partial sums read back through the pins
    extra_s: float = 0.0     # buffer-die work at the pin rate (softmax)
    extra_bytes: float = 0.0
    imbalance: float = 1.0   # busiest pseudo-channel / average


@frozen
class PimOpCost(OpCost):
    """An OpCost for one stack's piece, with the parts the report explains."""

    stack: int = 0
    transfer_s: float = 0.0
    mode_switch_s: float = 0.0
    stream_bytes: float = 0.0
    energy_internal_j: float = 0.0
    energy_external_j: float = 0.0
    energy_mac_j: float = 0.0      # the PIM units' arithmetic (PimConfig.energy_j_per_flop)
    fraction: float = 1.0          # the piece's share of the op's work (its FLOPs over the op's), for op records


@dataclass(frozen=True)
class Decision:
    op: Op
    where: str               # "host" or "pim"
    why: str
    host: OpCost
    pim_s: float | None      # predicted, slowest stack, with both mode switches
    pieces: tuple[Piece, ...] = ()


@dataclass(frozen=True)
class Allocation:
    """Where the data PIM would read lies (hw_models.pim.reach): ops by key (`Op.base_name` of the op they were cut
    from) on the host, and the op split between the two."""
    reach_bytes: float
    placed_bytes: float                         # what the policy put on PIM, over the whole model
    host: frozenset[str] = frozenset()
    split: tuple[str, int, int] | None = None   # (key, its columns or sequences on PIM, of how many)
    moved_bytes: float = 0.0                    # of `placed_bytes`, on the host now

    @property
    def fits(self) -> bool:
        return self.placed_bytes <= self.reach_bytes


@dataclass(frozen=True)
class Schedule:
    """One step's op graph as the PIM mapper runs it, with what its rewrites decided."""

    graph: OpGraph | None
    forced: dict[str, str] = field(default_factory=dict)          # op -> "host" | "pim" (a shared GEMM's parts)
    continuations: frozenset[str] = frozenset()                    # ops inside an earlier op's kernel: no launch
    head_group: dict[str, int] = field(default_factory=dict)      # slice of a pipelined block -> its head group
    why: dict[str, str] = field(default_factory=dict)             # a forced op's reason, where not GEMM sharing
    reach: Allocation | None = None                                # the data in PIM dies (hw_models.pim.reach)


    def origin(self, name: str) -> str:
        """The model op a scheduled op works for: a shared GEMM's part or a head group's
        slice belongs to the op it was cut from (for reports that sum by op)."""
        base = name.removesuffix(HOST).removesuffix(PIM) if name in self.forced else name
        k = self.head_group.get(base)
        return base.removesuffix(f".h{k}") if k is not None else base


SERIAL = Schedule(None)   # no rewrites: every op its own kernel, no forced placement

"""HBM-PIM (and GDDR6-AiM) model: a host GPU whose DRAM stacks carry
multiply-accumulate units beside the banks.

Op by op the mapper predicts the time on the host (the GPU roofline, through
the stacks' pins) and on PIM (row-buffer streaming at the internal bandwidth,
plus writing the input vector through the pins, reading results or partial
sums back, mode switches and the host's launch overhead) and places the op by
the workload's `pim_policy`:

  auto              any op PIM can run goes where it is predicted faster;
  attention_only    attention (score, context; softmax when the buffer die
                    can run it) on PIM, the rest on the host (AttAcc);
  fc_and_attention  FC GEMVs and attention on PIM;
  none              everything on the host (the same GPU without PIM).

Engine resources: the host unit, and `pim.stack<i>` per stack. An op on PIM is
split into one task per stack by data layout: FC weights are interleaved over
every stack, and the KV cache of one (request, KV head), or of one request, on
one stack, so a request's attention runs where its KV lives. In blocked mode
(no dual row buffer) banks in PIM mode cannot serve the host, so every host op
that touches DRAM holds a one-slot lock container per stack, and a PIM task
holds its stack's lock: the engine, not a formula, keeps them apart.

With `pim.sub_batches` > 1 a decode step runs as that many sub-batch op chains
(NeuPIMs' sub-batch interleaving), each lowered at its own batch size, so one
chain's attention on the stacks overlaps another's FC on the host wherever the
engine finds the resources free; each chain's FCs re-read the weights.
`pim.head_groups` and `pim.gemm_sharing` are AttAcc's two overlaps, as graph
rewrites (hw_models/pim/pipeline.py).
"""

from __future__ import annotations

from dataclasses import replace

from hw_models.base import Mapper
from hw_models.op_cost import OpCost, bound_of
from hw_models.cost import roofline_cost
from hw_models.machine import load_machine
from hw_models.pim.config import Geometry, load_pim_config, pim_policy
from hw_models.pim.pipeline import ATTENTION_FAMILY, HOST, PIM, pipeline_heads, share_ops
from hw_models.pim import report
from hw_models.pim.layout import Layout
from hw_models.pim import reach
from hw_models.pim.plan import SERIAL, Allocation, Decision, Piece, PimOpCost, Schedule
from sim.core import graph as g
from sim.core.engine import Task, Timeline
from sim.core.generation import Generation, RunFigures, generate
from sim.core.errors import ConfigError
from sim.core.graph import Op, OpGraph
from sim.core.lowering import lower
from sim.core.units import fmt_bytes


class PimMapper(Mapper):
    kind = "pim"
    # A GEMV re-streams its matrix once per row in the banks, so past a few rows (4 of Llama-3-8B's on hbm_pim)
    # it runs faster on the host; the host then draws its power and a step's energy jumps ~7x at that count.
    serving_dense_decodes = 32

    @property
    def serving_dense_kv(self) -> bool:
        """Past what the PIM dies hold, attention's sequences move to the host (hw_models.pim.reach): a kink in KV."""
        return self.cfg.pim_capacity_bytes_per_stack is not None

    def __init__(self, machine, workload, model):
        super().__init__(machine, workload, model)
        src = machine.source or machine.name
        self.cfg = cfg = load_pim_config(machine.section("pim"), src)
        self.host_name = machine.main_unit
        self.host = machine.units[self.host_name]
        if cfg.tier not in machine.memory:
            raise ConfigError(f"{src}: pim.tier: no memory tier named {cfg.tier!r}")
        if self.host.memory != cfg.tier:
            raise ConfigError(f"{src}: pim.tier: the host unit {self.host_name} streams from {self.host.memory!r}; "
                              f"the PIM stacks must be that tier ({cfg.tier!r})")
        self.tier = machine.memory[cfg.tier]
        reach = cfg.pim_capacity_bytes_per_stack
        if reach is not None and reach * cfg.stacks > self.tier.capacity_bytes * (1 + 1e-9):
            # more PIM dies than the stacks hold: it ran as `null` (every die PIM) without a word (an architect's trial)
            raise ConfigError(f"{src}: pim.pim_capacity_bytes_per_stack: {fmt_bytes(reach)} x {cfg.stacks} stacks is "
                              f"more than memory.{cfg.tier}'s {fmt_bytes(self.tier.capacity_bytes)}; at most "
                              f"{fmt_bytes(self.tier.capacity_bytes / cfg.stacks)} a stack (null: every die has PIM units)")
        if self.tier.energy_j_per_byte is None:
            raise ConfigError(f"{src}: memory.{cfg.tier}.energy_j_per_byte: required for a pim machine "
                              "(the external DRAM energy per byte)")
        self.geo = Geometry(cfg, self.tier.bandwidth_bytes_per_s / cfg.stacks)
        self.layout = Layout(cfg, self.geo, model.num_kv_heads)
        self.policy = pim_policy(workload, cfg, machine.name)
        self.stack_names = [f"pim.stack{i}" for i in range(cfg.stacks)]
        self.locks = [f"{s}.banks" for s in self.stack_names]
        self._baseline: dict[bool, tuple[Generation, Timeline]] = {}
        H, KV = model.num_heads, model.num_kv_heads
        if H % cfg.head_groups or KV % cfg.head_groups:
            fits = [g for g in range(1, KV + 1) if H % g == 0 and KV % g == 0]
            raise ConfigError(f"{src}: pim.head_groups: {cfg.head_groups} groups do not divide "
                              f"{model.name}'s {H} heads and {KV} KV heads; groups that do: "
                              f"{', '.join(map(str, fits))} (--set hw.pim.head_groups=N)")

    @property
    def in_order(self) -> bool:
        """One op chain: the host and every stack take their work in program order, as a
        command queue would, so the engine's cheaper in-order streams apply (~2x faster at
        40 stacks). Interleaved sub-batch chains need tasks that overtake each other."""
        return self.cfg.sub_batches == 1

    @property
    def blocked(self) -> bool:
        return not self.cfg.dual_row_buffer

    def containers(self) -> dict[str, float]:
        return {lock: 1.0 for lock in self.locks} if self.blocked and self.policy != "none" else {}

    def capacity_hint(self, roles: dict[str, float]) -> str:
        """Fused attention where unfused scores are the largest part; the plain GPU of the same memory (A6000 GDDR6,
        A100 HBM) only where it holds the run (a trial: 137 GB of 32k-token scores was sent to a100_80g)."""
        fused = "fused attention, which keeps no score matrix (--set flash_attention=true), or " if roles and max(
            roles, key=roles.get) == "activations" and not self.workload.flash_attention else ""
        plain = load_machine("a6000" if self.machine.device_tier == "gddr" else "a100_80g")
        fits = plain.memory[plain.device_tier].capacity_bytes >= sum(roles.values())
        return (f"PIM memory gives up capacity for logic ({self.machine.description or self.machine.name}): try "
                f"{fused}a smaller model, batch or context" + (f", or a plain-{'GDDR6' if plain.name == 'a6000' else 'HBM'}"
                                                              f" preset such as --hw {plain.name}." if fits else "."))

    # -- costs -------------------------------------------------------------
    def launch_s(self, op: Op, s: Schedule = SERIAL) -> float:
        return 0.0 if op.name in s.continuations else self.host.launch_overhead_s

    def host_cost(self, op: Op, s: Schedule = SERIAL) -> OpCost:
        # the host GPU's op as the gpu kind costs it: its bytes over the pins and its FLOPs at the host's J/FLOP
        return roofline_cost(op, self.host, self.host_name, self.tier, self.workload.compute,
                             steady=op.name in s.continuations)

    def piece_cost(self, op: Op, p: Piece, switches: int, s: Schedule = SERIAL) -> PimOpCost:
        geo, cfg = self.geo, self.cfg
        memory_s = p.stream_bytes / geo.internal_bytes_per_s * p.imbalance
        compute_s = p.flops / geo.flops_per_s * p.imbalance
        transfer_s = (p.in_bytes + p.out_bytes) / geo.stack_external_bytes_per_s
        switch_s = switches * cfg.mode_switch_s
        overhead_s = self.launch_s(op, s) + switch_s
        # The input must be in the units before the MACs start and results are read after: serial.
        duration = overhead_s + max(memory_s, compute_s) + transfer_s + p.extra_s
        e_int = p.stream_bytes * cfg.energy_internal_j_per_byte
        e_ext = (p.in_bytes + p.out_bytes + p.extra_bytes) * self.tier.energy_j_per_byte
        e_mac = p.flops * cfg.energy_j_per_flop
        bound = bound_of(compute_s, memory_s, overhead_s, transfer_s + p.extra_s)
        return PimOpCost(op, self.stack_names[p.stack], duration, compute_s, memory_s, overhead_s, bound,
                         f"PIM ({cfg.placement})", e_int + e_ext + e_mac, p.stack, transfer_s, switch_s,
                         p.stream_bytes, e_int, e_ext, e_mac, p.flops / op.flops if op.flops else 1.0)

    # -- what PIM can run (hw_models.pim.layout) --------------------------------
    def split(self, op: Op, s: Schedule = SERIAL) -> tuple[Piece, ...] | str:
        """The op's pieces per stack, or why PIM cannot run it."""
        return self.layout.split(op, s)

    # -- placement -------------------------------------------------------------
    def decide(self, op: Op, s: Schedule = SERIAL) -> Decision:
        """Where `op` runs, and why, within the step schedule `s`."""
        host = self.host_cost(op, s)
        if self.policy == "none":
            return Decision(op, "host", "policy none", host, None)
        forced = s.forced.get(op.name)
        if forced == "host" and op.name in s.why:   # beyond the PIM dies' reach: what PIM would have taken
            placed = self.decide(op, replace(s, forced={}))
            return Decision(op, "host", s.why[op.name], host, placed.pim_s)
        if forced == "host":
            return Decision(op, "host", "GEMM sharing: host columns", host, None)
        if forced == "pim":   # pim_columns and the reach split only split ops that split_gemm / split accept
            pieces = self.layout.split_gemm(op, any_rows=True) if op.kind == g.GEMM else self.split(op, s)
            pim_s = max(self.piece_cost(op, p, 2, s).duration_s for p in pieces)
            return Decision(op, "pim", s.why.get(op.name, "GEMM sharing: PIM columns"), host, pim_s, pieces)
        pieces = self.split(op, s)
        if isinstance(pieces, str):
            return Decision(op, "host", pieces, host, None)
        costs = [self.piece_cost(op, p, 2, s) for p in pieces]
        pim_s = max(c.duration_s for c in costs)
        attention = op.kind in ATTENTION_FAMILY
        if self.policy == "attention_only":
            if attention:
                return Decision(op, "pim", "policy attention_only", host, pim_s, pieces)
            return Decision(op, "host", "policy attention_only", host, pim_s)
        if self.policy == "fc_and_attention":
            if attention or op.kind == g.GEMM:
                return Decision(op, "pim", "policy fc_and_attention", host, pim_s, pieces)
            return Decision(op, "host", "policy fc_and_attention", host, pim_s)
        if pim_s < host.duration_s:
            return Decision(op, "pim", f"{host.duration_s / pim_s:.1f}x faster than host", host, pim_s, pieces)
        worst = max(costs, key=lambda c: c.duration_s)
        if worst.memory_s >= worst.duration_s / 2 and worst.stream_bytes:
            rows = op.dims.get("m", 1)
            cause = f"re-streams the matrix for {rows} rows" if rows > 1 else "streams slower than the host"
        else:
            cause = "overheads (launch, mode switch, transfers) dominate"
        return Decision(op, "host", f"PIM {pim_s / host.duration_s:.1f}x slower: {cause}", host, pim_s)

    def _switches(self, decisions: list[Decision]) -> dict[tuple[int, int], int]:
        """Mode switches per (op index, stack): entering PIM mode when the stack last served the
        host, leaving it when the host comes next. With dual row buffers host accesses do not
        need the banks out of PIM mode, so a stack enters once and leaves once per step."""
        out: dict[tuple[int, int], int] = {}
        for s in range(self.cfg.stacks):
            seq = []
            for i, d in enumerate(decisions):
                if d.where == "pim" and any(p.stack == s for p in d.pieces):
                    seq.append((i, "pim"))
                elif d.where == "host" and self.blocked and d.op.bytes:
                    seq.append((i, "host"))
            pim_at = [j for j, (_, w) in enumerate(seq) if w == "pim"]
            for j in pim_at:
                i = seq[j][0]
                prev = seq[j - 1][1] if j > 0 else "host"
                nxt = seq[j + 1][1] if j + 1 < len(seq) else "host"
                out[(i, s)] = (prev == "host") + (nxt == "host")
        return out

    def sub_batch_sizes(self, graph: OpGraph) -> list[int]:
        """How the step's batch splits into interleaved sub-batches: decode only (prefill attention
        is a wide GEMM on the host, nothing to overlap), as even as possible, none empty. Policy none
        (the same GPU without PIM) has nothing to overlap either and runs the whole batch."""
        if graph.phase != "decode" or self.policy == "none":
            return [graph.batch]
        n = min(self.cfg.sub_batches, graph.batch)
        return [graph.batch // n + (k < graph.batch % n) for k in range(n)]

    def pim_columns(self, op: Op, s: Schedule = SERIAL) -> int:
        """GEMM sharing: the output columns PIM takes so that both sides finish together
        (shares in inverse proportion to their predicted times for the whole GEMM), or 0
        when the split would not beat the op placed whole by the policy."""
        pieces = self.layout.split_gemm(op, any_rows=True)
        if isinstance(pieces, str):
            return 0
        whole = self.decide(op, s)
        t_host = whole.host.duration_s
        t_pim = max(self.piece_cost(op, p, 0, s).duration_s for p in pieces)
        n = op.dims["n"]
        n_pim = round(n * t_host / (t_host + t_pim))
        if not 0 < n_pim < n:
            return 0
        host_part = self.host_cost(g.column_share(op, n - n_pim, op.name), s).duration_s
        pim_part = max(self.piece_cost(op, p, 0, s).duration_s
                       for p in self.layout.split_gemm(g.column_share(op, n_pim, op.name), any_rows=True))
        return n_pim if max(host_part, pim_part) < (whole.pim_s if whole.where == "pim" else t_host) else 0

    def schedule(self, graph: OpGraph, alloc: Allocation | None = None) -> Schedule:
        """The step's graph rewritten for AttAcc's overlaps (head groups, GEMM sharing) and for the data the PIM
        dies reach (`alloc`, default: this step's own), with the forced placements and continuations the planning
        then uses."""
        cfg = self.cfg
        if self.policy == "none":
            return Schedule(graph)
        decode = graph.phase == "decode"
        s = Schedule(graph)
        if decode and cfg.head_groups > 1:
            G, m = cfg.head_groups, self.model
            layers = len({op.layer for op in graph.ops() if op.layer is not None})
            head_slice = lower(replace(m, num_heads=m.num_heads // G, num_kv_heads=m.num_kv_heads // G),
                               graph.phase, graph.batch, graph.q_len, graph.kv_len, self.formats,
                               self.workload.flash_attention, num_layers=layers)
            graph, head_group = pipeline_heads(graph, head_slice, G)
            s = Schedule(graph, continuations=frozenset(n for n, k in head_group.items() if k), head_group=head_group)
        if decode and cfg.gemm_sharing:
            graph, forced = share_ops(s.graph, lambda op: self.pim_columns(op, s))
            # Both parts of a later head group's GEMM continue their side's kernel.
            continuations = s.continuations | {n for n in forced if n.rsplit("~", 1)[0] in s.continuations}
            s = replace(s, graph=graph, forced=forced, continuations=continuations)
        return self.within_reach(s, alloc)   # GEMM sharing's PIM columns read their weights in the PIM dies too

    def within_reach(self, s: Schedule, alloc: Allocation | None = None) -> Schedule:
        """`s` with the ops whose data the PIM dies cannot hold moved to the host (hw_models.pim.reach)."""
        if self.cfg.pim_capacity_bytes_per_stack is None:
            return s
        return reach.apply(s, alloc or self.allocation([s]), lambda op: self.op_key(s, op))

    def allocation(self, chains: list[Schedule]) -> Allocation:
        """What the PIM dies hold for these op chains together (one per sub-batch: they share the weights)."""
        decisions = [[(self.decide(op, c), self.op_key(c, op)) for op in c.graph.ops()] for c in chains]
        return reach.allocate(decisions, self.cfg.pim_capacity_bytes_per_stack * self.cfg.stacks,
                              self.model.num_layers, frozenset(n for c in chains for n in c.forced))

    @staticmethod
    def op_key(s: Schedule, op: Op) -> str:
        """The model op `op` works for, without its layer: one key for that op in every layer."""
        origin = s.origin(op.name)
        return origin.split(".", 1)[1] if op.layer is not None else origin

    def decisions(self, graph: OpGraph) -> list[Decision]:
        """Placement of every op of `graph` as scheduled (decided)."""
        return self.decided(self.schedule(graph))

    def decided(self, s: Schedule) -> list[Decision]:
        """Placement of every op of schedule `s`; of a pipelined attention block only the first head group (the
        others are alike)."""
        return [self.decide(op, s) for op in s.graph.ops() if op.name not in s.continuations]

    def plan_step(self, graph: OpGraph) -> list[Task]:
        sizes = self.sub_batch_sizes(graph)
        if len(sizes) == 1:
            return self.plan_chain(self.schedule(graph))
        # Sub-batch interleaving (NeuPIMs, hardware.md §4.4): each sub-batch is its own op chain,
        # lowered at its own batch size, so every FC of every sub-batch reads the layer's weights
        # again (NeuPIMs issues one GEMM per sub-batch; a layer's weights do not fit the GPU's L2).
        # Each chain is one host stream; the host unit and the stacks are shared resources, so the
        # engine runs one chain's attention on PIM while another's FC holds the host.
        layers = len({op.layer for op in graph.ops() if op.layer is not None})
        w = self.workload
        return self.plan_interleaved([lower(self.model, graph.phase, b, graph.q_len, graph.kv_len, self.formats,
                                            w.flash_attention, num_layers=layers) for b in sizes])

    def plan_interleaved(self, graphs: list[OpGraph]) -> list[Task]:
        """Independent op chains, one per sub-batch graph, sharing the host and the stacks; the PIM dies hold the
        weights once and every chain's KV, as each chain places its ops. Tasks are listed chain by chain: at equal
        ready times the host serves the lower chain."""
        chains = [Schedule(sub) for sub in graphs]
        alloc = self.allocation(chains) if self.cfg.pim_capacity_bytes_per_stack is not None else None
        return [t for k, c in enumerate(chains) for t in self.plan_chain(self.within_reach(c, alloc), f".b{k}")]

    def plan_chain(self, s: Schedule, suffix: str = "") -> list[Task]:
        """One op chain's tasks (ids end in `suffix`: ".b1" for sub-batch 1)."""
        graph = s.graph
        decisions = [self.decide(op, s) for op in graph.ops()]
        # Mode switches are counted in this chain's program order; with interleaved chains in
        # blocked mode the stacks may alternate more often than that (dual_row_buffer: exact).
        switches = self._switches(decisions)
        use_locks = bool(self.containers()) and any(d.where == "pim" for d in decisions)
        all_locks = tuple((lock, 1.0) for lock in self.locks)
        ids: dict[str, list[str]] = {}
        on_stack: dict[str, dict[int, str]] = {}   # attention-family op on PIM -> its piece per stack
        tasks: list[Task] = []
        last_host: str | None = None
        for i, d in enumerate(decisions):
            op = d.op
            preds = graph.deps(op.name)
            deps = tuple(t for p in preds for t in ids[p])
            if d.where == "host":
                # One stream on the host per chain: ops run in program order, so a host op never
                # holds the stack locks while it waits for its own chain's previous op.
                tid = op.name + suffix
                hdeps = deps + ((last_host,) if last_host and last_host not in deps else ())
                if self.blocked and (twin := op.name.removesuffix(HOST) + PIM) in ids and op.name.endswith(HOST):
                    # Blocked banks: a split op's two parts cannot overlap, and the host part, holding every
                    # stack's lock as it came free, would leave some stacks idle behind it: it waits instead.
                    hdeps += tuple(ids[twin])
                locks = all_locks if use_locks and op.bytes else ()
                tasks.append(Task(tid, self.host_name, d.host.duration_s, hdeps, locks, locks, tag=d.host,
                                  op=s.origin(op.name)))
                ids[op.name], last_host = [tid], tid
                continue
            ids[op.name] = []
            attention = op.kind in ATTENTION_FAMILY
            for p in d.pieces:
                c = self.piece_cost(op, p, switches.get((i, p.stack), 0), s)
                lock = ((self.locks[p.stack], 1.0),) if use_locks else ()
                tid = f"{op.name}{suffix}@stack{p.stack}"
                # Attention after attention on PIM (score -> softmax -> context) keeps each
                # request's KV groups on the same stack, so a piece waits only for its own
                # stack's piece of the previous op; anything else waits for all of it.
                pdeps = deps
                if attention and preds and all(q in on_stack and p.stack in on_stack[q] for q in preds):
                    pdeps = tuple(on_stack[q][p.stack] for q in preds)
                tasks.append(Task(tid, c.unit, c.duration_s, pdeps, lock, lock, tag=c, group=op.name + suffix,
                                  op=s.origin(op.name)))
                ids[op.name].append(tid)
                if attention:
                    on_stack.setdefault(op.name, {})[p.stack] = tid
        return tasks

    # -- the run's figures -----------------------------------------------------
    def figures(self, gen: Generation, decode_tl: Timeline | None) -> RunFigures:
        """The default figures plus PIM's own, from the representative decode step;
        with detail (a report), also against the same GPU without PIM."""
        fig = super().figures(gen, decode_tl)
        tl = decode_tl if decode_tl is not None else self.step_timeline("decode", 1, gen.rep_kv)
        w = self.workload
        s = self.schedule(self.step_graph("decode", 1, gen.rep_kv, num_layers=1))   # its placement and reach
        decisions = self.decided(s)
        metrics = report.pim_metrics(tl, decisions, self.cfg, self.geo, w.batch, self.tier.energy_j_per_byte)
        if decode_tl is not None:
            base, base_tl = self.baseline(gen.exhaustive)
            metrics.update(report.baseline_metrics(gen, base, base_tl, w.batch, self.tier.energy_j_per_byte))
        summary = report.summary(self.cfg, self.geo, self.policy, report.schedule_line(self.cfg, decisions, w.batch),
                                 self.tier.energy_j_per_byte)
        fig.extra |= dict(metrics=metrics, pim=dict(metrics=metrics, placement=report.placement(decisions),
                                                    summary=summary))
        if note := report.reach_note(s.reach):
            fig.notes.append(note)
        return fig

    def baseline(self, exhaustive: bool = False) -> tuple[Generation, Timeline]:
        """The same workload on the same GPU without PIM (policy none): its generation
        and representative decode step. Simulated on first use, then kept."""
        key = bool(exhaustive)
        if key not in self._baseline:
            plain = self if self.policy == "none" else PimMapper(
                self.machine, self.workload.with_section("pim_policy", "none"), self.model)
            gen = generate(plain, exhaustive)
            self._baseline[key] = gen, plain.step_timeline("decode", 1, gen.rep_kv)
        return self._baseline[key]


MAPPER = PimMapper

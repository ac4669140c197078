"""Tensor and pipeline parallelism on the gpu kind: the workload's `parallel:`
section, its checks, and a mapper that runs one TP rank's graph with its
collectives on the node's link, and pipeline stages over micro-batches.

    parallel: {tp: 8, pp: 1, dp: 1, ep: 1, micro_batches: 1, topology: dgx_a100,
               algorithm: ring}

* TP (hw_models.gpu.tensor_parallel): every rank of a group does the same work, so
  one rank is simulated: its kernels on the GPU stream, each all-reduce/all-gather a
  task on the `link` resource between the op that produces the data and the ops that
  read it (alpha-beta, hw_models.network.collectives, fitted per node where measured).
* PP: contiguous stages of num_layers / pp layers (the embedding on the first, the
  final norm and LM head on the last), the batch cut into `micro_batches`; stage j of
  micro-batch i waits for stage j-1 of i (an activation send/recv on link `link.j`)
  and for stage j of i-1 (in-order streams). A decode step takes the closed pipeline's period
  (schedule.steady_period_s: the micro-batches stay in flight from step to step). The bubble is what the schedule leaves
  idle, not a formula. A stage's time per micro-batch is its layers' times: one
  layer's TP tasks run on their own, times the layers in the stage. Its task carries
  those TP tasks for the report's op records (hw_models.gpu.stage_ops).
* DP: replicas; one replica is simulated (throughput per replica); the serving
  router (sim.apps.serve.router) runs dp replicas.
* MoE models (hw_models.gpu.expert_parallel): experts TP-split (ep = 1), expert
  parallel with data-parallel attention (tp = 1, ep = n; all-to-all dispatch and
  combine), or expert parallel inside the TP group (tp = ep).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import accumulate

from hw_models.base import DeviceShare
from hw_models.clock import CLOCK_COUNTERS, clock_counters
from hw_models.gpu.expert_parallel import EXPERT_OPS, expert_weight_bytes, moe_rank
from hw_models.gpu.mapper import GpuMapper
from hw_models.gpu.plan import load_plan
from hw_models.gpu.report import parallel_data
from hw_models.gpu.schedule import LINK, StageCost, StageParts, split_micro_batches, stage_resource
from hw_models.gpu.stage_ops import StageOps, StageTemplate, part_of
from hw_models.gpu.stage_power import PipelinePower
from hw_models.gpu.tensor_parallel import Collective, kv_fraction, shard, weight_fraction
from hw_models.network.collectives import ALL_TO_ALL, SEND_RECV, alpha_beta, collective_j, collective_s
from hw_models.network.sharding import CollectiveCost   # the tag op_records reads for link and stage tasks
from hw_models.stack.fuse import fused_aliases
from sim.core import engine
from sim.core.engine import Task, Timeline
from sim.core.errors import ConfigError
from sim.core.footprint import Footprint, activation_peak_bytes, kv_bytes, layer_weight_bytes, weight_bytes
from sim.core.generation import Generation, RunFigures, layer_fold
from sim.core.graph import OpGraph
from sim.core.lowering import lower, repeating_from
from sim.core.mixed import lower_iteration
from sim.core.results import StepResult


class ParallelGpuMapper(PipelinePower, GpuMapper):
    kind = "gpu"

    def __init__(self, machine, workload, model):
        super().__init__(machine, workload, model)
        self.plan, self.topo = load_plan(workload.section("parallel"), workload.source, model, machine)
        self.devices = self.plan.instance_devices   # the engine's host work grows past one device
        self.full_steps: dict[str, Timeline] = {}   # phase -> its last step simulated in full
        src, p = workload.source or "workload", self.plan
        if p.micro_batches > 1 and p.pp == 1:
            # nothing to overlap: each micro-batch would read every weight again, one after another (a trial's
            # sweep over tp x pp on workloads/llama70b_tp4_pp2.yaml ranked TP 8 at 4x its time)
            raise ConfigError(f"{src}: parallel.micro_batches: {p.micro_batches} with pp 1: micro-batches fill pipeline "
                              "stages, and one stage would run them in turn, reading every weight each time; set "
                              "micro_batches: 1 (or pp > 1)")
        if workload.batch % p.micro_batches:
            raise ConfigError(f"{src}: parallel.micro_batches: {p.micro_batches} does not divide batch {workload.batch}")
        # Serving under data-parallel attention (sim.apps.serve.attention_dp) costs an iteration in two
        # parts: each group's own ops (iteration(experts=False): the routed experts and their all-to-alls
        # take no time while `_experts_off`) and the experts' part over the whole EP group's tokens
        # (expert_part).
        self._experts_off = False

    @property
    def algorithm(self) -> str:
        """The collective algorithm: the plan's, else the stack's engine's own (issue 28), else the ring."""
        return self.plan.algorithm or (self.stack.all_reduce if self.stack is not None else None) or "ring"

    def group_batch(self) -> int:
        """Sequences of one attention group: B / (ep / tp), each group an even share (a generation's
        batch; a serving iteration splits its own way, sim.apps.serve.attention_dp)."""
        w, p = self.workload, self.plan
        if w.batch % (p.attention_dp * p.micro_batches):
            raise ConfigError(f"{w.source or 'workload'}: parallel.ep: batch {w.batch} does not split over "
                              f"{p.attention_dp} attention groups (ep / tp) x {p.micro_batches} micro-batches")
        return w.batch // p.attention_dp

    def step_graph(self, phase: str, q_len: int, kv_len: int, num_layers: int | None = None) -> OpGraph:
        """One rank's own batch: its attention group's B / (ep / tp) sequences."""
        w = self.workload
        return lower(self.model, phase, self.group_batch(), q_len, kv_len, self.formats, w.flash_attention, num_layers)

    def rank_graph(self, graph: OpGraph) -> tuple[OpGraph, list[Collective]]:
        if self.model.is_moe and self.plan.stage_width > 1:
            return moe_rank(graph, self.model, self.plan.tp, self.plan.ep)
        return shard(graph, self.model, self.plan.tp)

    # -- tensor parallelism -------------------------------------------------
    def _collective(self, tasks: list[Task], c: Collective, prefix: str, dep: str, link: str) -> None:
        """The collective's task on `link` after `dep`; under a host-launched stack the NCCL
        kernel is one more launch on the host, in issue order after the producing op's."""
        dur = self.collective_time_s(c)
        dur = 0.0 if self._experts_off and c.kind == ALL_TO_ALL else dur
        ranks = c.ranks or self.plan.tp
        joules = 0.0 if not dur else collective_j(self.topo, c.kind, c.bytes, ranks, self.algorithm)
        tag = CollectiveCost(c.name, c.kind, c.bytes, dur, path=f"{self.topo.name} {self.algorithm}", energy_j=joules)
        host_s = self.stack.host_launch_s if self.stack else 0.0
        tasks.append(Task(prefix + c.name, link, dur, self.launched(tasks, prefix + c.name, host_s, (dep,)), tag=tag))

    def collective_time_s(self, c: Collective) -> float:
        """One collective over its group (the TP group unless it names another) on the plan's topology."""
        return collective_s(self.topo, c.kind, c.bytes, c.ranks or self.plan.tp, self.algorithm)

    def collective_roofline_s(self, c: Collective) -> float:
        """The collective's bytes over its link at the datasheet bandwidth, no latency (a ring's bytes per rank:
        `sim roofline`'s pure line for it)."""
        ranks = c.ranks or self.plan.tp
        return alpha_beta(c.kind, "ring", ranks)[1] * c.bytes / self.topo.ring_bandwidth(ranks)

    def tp_tasks(self, graph: OpGraph, prefix: str = "", resource: str | None = None,
                 link: str = LINK) -> list[Task]:
        """One TP rank's kernels on its stream and its collectives on `link`; the
        readers of a reduced output wait for its collective. Under a stack without CUDA
        graphs each kernel and collective first waits for its launch on the host (as on
        one device, GpuMapper.plan_step): every rank's host issues its own kernels, so a
        launch-bound step does not shrink with tp."""
        rank, colls = self.rank_graph(graph)
        after = {c.after: c for c in colls}
        waits = {op: c.name for c in colls for op in c.before}
        fused = self.fused(rank)
        ready: dict[str, str] = fused_aliases(fused)   # a fused GEMM's task carries its own name
        tasks = []
        for op in rank.ops():
            c = self.stream_cost(op, fused)
            if self._experts_off and op.base_name in EXPERT_OPS:
                c = replace(c, duration_s=0.0, compute_s=0.0, memory_s=0.0, overhead_s=0.0, energy_j=0.0)
            deps = tuple(prefix + ready.get(d, d) for d in rank.deps(op.name))
            if op.name in waits:
                deps = (*deps, prefix + waits[op.name])
            name = ready.get(op.name, op.name) if op.name not in after else op.name
            deps = self.launched(tasks, prefix + name, self.launch_s(op, fused), deps)
            tasks.append(Task(prefix + name, resource or self.unit_name, c.duration_s, deps, tag=c))
            if op.name in after:
                self._collective(tasks, after[op.name], prefix, prefix + op.name, link)
                ready[op.name] = after[op.name].name
        return tasks

    @property
    def serving_exact(self) -> bool:
        """A pipelined iteration's period is the larger of a micro-batch's fill and the busiest stage's load, which
        the surrogate's interpolation over canonical mixed batches does not follow (a multi-GPU planner's trial: 3
        prompts of 2,000 tokens split 4,000 / 2,000 read TTFT 216 ms against 284 exact): costed exactly."""
        return self.plan.pp > 1

    def iteration(self, seqs, logits=None, exhaustive=False, busy=Timeline.busy_s, device_only=False,
                  experts=True) -> StepResult:
        """Mapper.iteration; `experts=False` costs one attention group's own ops, the routed experts
        and their all-to-alls taking no time (their part is expert_part); under pipeline parallelism its
        micro-batches in flight (pipelined_iteration)."""
        if self.plan.pp > 1:
            if logits is not None or not experts:
                raise ConfigError(f"{self.workload.source or 'workload'}: parallel.pp: {self.plan.pp}: speculative "
                                  "decoding and data-parallel attention are not modelled under pipeline parallelism")
            step = self.pipelined_iteration(seqs, busy)
            return step if device_only else self.with_engine(step, len(seqs))
        self._experts_off = not experts
        try:
            return super().iteration(seqs, logits, exhaustive, busy, device_only)
        finally:
            self._experts_off = False

    def collectives_per_iteration(self) -> int:
        """The TP/EP collectives of one rank's iteration (two all-reduces a layer, the embedding's and the
        logits' gather under TP): the same for any batch, so counted once on a one-sequence iteration."""
        if self.plan.stage_width == 1:
            return 0
        if not hasattr(self, "_collectives"):   # extensive in the layers: folded as a step is (a 94-layer graph
            # sharded whole took ~45 ms, once per mapper: a validation table builds two mappers a run)
            def count(n: int | None) -> int:
                graph = lower_iteration(self.model, ((1, 1),), self.formats, self.workload.flash_attention, n)
                return len(self.rank_graph(graph)[1])
            fold = layer_fold(self.model.num_layers, self.fold_from, self.model.layer_period)
            if fold is None:
                self._collectives = count(None)
            else:
                a = count(fold[0])
                self._collectives = a + fold[2] * (count(fold[1]) - a)
        return self._collectives

    def device_share(self) -> DeviceShare:
        """One device of the busiest stage (as footprint): its share of the weights and of each
        token's KV bytes (its KV heads, its stage's layers)."""
        p, m = self.plan, self.model
        share = self._weights_per_device() / weight_bytes(m, self.formats)
        kv = kv_fraction(m, p.tp) * max(self.stage_layers()) / m.num_layers
        return DeviceShare(p.instance_devices, share, kv, p.tp, p.ep, p.pp, p.attention_dp)

    def rank_activation_bytes(self, graph: OpGraph) -> float:
        return float(activation_peak_bytes(self.rank_graph(graph)[0]))

    def _weights_per_device(self) -> float:
        """Dense weights x weight_fraction(tp) (K/V projections replicated past the KV heads),
        experts / max(tp, ep), in the fullest stage: the layers' bytes by stage (formats may differ
        by layer), the embedding and the head spread over the stages."""
        p, m = self.plan, self.model
        experts = expert_weight_bytes(m, self.formats)
        outside, layers = layer_weight_bytes(m, self.formats)
        in_layers = sum(layers)
        stage = max(sum(layers[a:a + n]) for a, n in self.stage_spans()) / in_layers
        return outside * weight_fraction(m, p.tp) / p.pp + stage * (
            (in_layers - experts) * weight_fraction(m, p.tp) + experts / p.stage_width)

    def expert_part(self, group_tokens: int, total_tokens: int) -> tuple[float, float, dict[str, float]]:
        """Seconds, joules and busy seconds per resource (as sim.apps.serve.stepcost reads them) of the
        routed experts and their all-to-alls over every MoE layer, on the busiest rank of the straggler
        group (`group_tokens` tokens) of an EP group routing `total_tokens` per layer. Serial on the
        rank's stream and link (the experts wait for the dispatch, the combine for the experts). The joules are
        every rank's (each holds its share of the experts, balanced), as an iteration's dense energy counts every
        rank (a review: one rank's read an 8-decode step 2.5 J, 15%, under `sim run`'s, and the cap saw it)."""
        m, first = self.model, self.model.first_dense_layers
        graph = lower_iteration(m, ((group_tokens, group_tokens),), self.formats, self.workload.flash_attention,
                                first + 1)
        rank, colls = moe_rank(graph, m, self.plan.tp, self.plan.ep, total_tokens)
        fused, unit = self.fused(rank), self.unit_name
        busy = {unit: 0.0, unit + ".compute": 0.0, unit + ".memory": 0.0, LINK: 0.0}
        joules, costs = 0.0, []
        for op in rank.ops():
            if op.layer == first and op.base_name in EXPERT_OPS:
                costs.append(c := self.stream_cost(op, fused))
                busy[unit] += c.duration_s
                busy[unit + ".compute"] += c.compute_s
                busy[unit + ".memory"] += c.memory_s
                joules += c.energy_j
        busy.update(clock_counters(costs, self.machine.main_unit))   # what the SM clock paces (the cap reads it)
        busy[LINK] = sum(collective_s(self.topo, c.kind, c.bytes, c.ranks, self.algorithm)
                         for c in colls if c.kind == ALL_TO_ALL and c.after.startswith(f"L{first}."))
        layers = m.num_layers - first
        return ((busy[unit] + busy[LINK]) * layers, joules * layers * self.plan.stage_width,
                {k: v * layers for k, v in busy.items()})

    # -- pipeline parallelism -----------------------------------------------
    def _stage_parts(self, graph_of: Callable[[int], OpGraph]) -> StageParts:
        """Seconds of one micro-batch (`graph_of(layers)`: its graph of that many layers) on one rank, by part
        (embedding; "layer", one repeating layer; each layer unlike the rest by its index; final norm + LM head):
        in all, of that in TP/EP collectives (the report's time in collectives), and the rank's dynamic energy
        (joules); and the timeline they were summed from, by part, for the stages' op records
        (hw_models.gpu.stage_ops)."""
        # Layer 0 warms up unless it is unlike the rest; "layer" is the mean of one period of the
        # repeating layers (period 1 but for models whose layers alternate, as Gemma-2's local and
        # global attention do).
        period, unlike = self.model.layer_period, repeating_from(self.model, self.formats)
        start = max(1, unlike)
        graph_p = graph_of(min(self.model.num_layers, start + period))
        tl = engine.run(self.tp_tasks(graph_p), {}, {}, True)
        parts: dict[str | int, float] = {"embed": 0.0, "layer": 0.0, "head": 0.0, **dict.fromkeys(range(unlike), 0.0)}
        links, joules = dict(parts), dict(parts)
        tags: dict[str | int, list] = {k: [] for k in parts}   # each part's ops, for the stage cap's split (stage_power)
        for iv in tl.intervals:
            key = part_of(iv.task)
            part = key if isinstance(key, str) else "layer" if key >= start else key if key < unlike else None
            if part is not None:
                share = 1.0 / period if part == "layer" else 1.0
                parts[part] += iv.duration_s * share
                links[part] += iv.duration_s * share if iv.resource == LINK else 0.0
                joules[part] += getattr(iv.tag, "energy_j", 0.0) * share
                tags[part].append(iv.tag)
        clocks = {p: {k: v / period if p == "layer" else v for k, v in clock_counters(ts, self.unit_name).items()}
                  for p, ts in tags.items()}
        return parts, links, joules, StageTemplate.of(tl, start, period, unlike), clocks

    def stage_layers(self) -> list[int]:
        L, pp = self.model.num_layers, self.plan.pp
        return [L // pp + (1 if j < L % pp else 0) for j in range(pp)]

    def stage_spans(self) -> list[tuple[int, int]]:
        """Each stage's first layer and layer count."""
        return list(zip(accumulate(self.stage_layers(), initial=0), self.stage_layers()))

    def pipeline_tasks(self, graph: OpGraph) -> list[Task]:
        m, w = self.plan.micro_batches, self.workload
        mb = graph.batch // m
        parts = self._stage_parts(lambda n: lower(self.model, graph.phase, mb, graph.q_len, graph.kv_len, self.formats,
                                                  w.flash_attention, num_layers=n))
        act_bytes = mb * graph.q_len * self.model.hidden_size * 2   # activations between stages
        return [t for i in range(m) for t in self._micro_batch_tasks(f"mb{i}", parts, act_bytes)]

    def _micro_batch_tasks(self, name: str, parts: StageParts, act_bytes: float) -> list[Task]:
        """One micro-batch through the stages: stage j's task (its layers' parts) after the activation send
        from stage j - 1 (`act_bytes` on link.s<j-1>)."""
        pp = self.plan.pp
        times, links, joules, template, clocks = parts
        send_s = collective_s(self.topo, SEND_RECV, act_bytes, 2) if pp > 1 else 0.0
        tasks = []
        for j, (first, layers) in enumerate(self.stage_spans()):
            def of(x: dict[str | int, float]) -> float:
                return (sum(x.get(k, x["layer"]) for k in range(first, first + layers))
                        + (x["embed"] if j == 0 else 0.0) + (x["head"] if j == pp - 1 else 0.0))
            deps = (f"{name}.send{j - 1}",) if j else ()
            ops = StageOps(template, first, layers, j == 0, j == pp - 1)   # the report's records, not the time
            clock = {k: of({p: c[k] for p, c in clocks.items()}) for k in CLOCK_COUNTERS}
            tasks.append(Task(f"{name}.stage{j}", stage_resource(self.unit_name, j), of(times), deps,
                              tag=StageCost(f"{name}.stage{j}", of(times), of(links), energy_j=of(joules), ops=ops,
                                            clock=clock)))
            if j < pp - 1:
                tag = CollectiveCost(f"{name}.send{j}", SEND_RECV, act_bytes, send_s, path=self.topo.name)
                tasks.append(Task(f"{name}.send{j}", f"{LINK}.s{j}", send_s, (f"{name}.stage{j}",), tag=tag))
        return tasks

    def pipelined_iteration(self, seqs, busy=Timeline.busy_s) -> StepResult:
        """A serving iteration under pipeline parallelism: its sequences as pp micro-batches (vLLM keeps pp
        batches in flight, VllmConfig.max_concurrent_batches: "PP requires PP-size concurrent
        batches to fill the pipeline"), each through every stage; the iteration takes the closed pipeline's
        period (hw_models.pipeline_period), not a fill and drain: the other micro-batches fill the bubble."""
        flash, tasks = self.workload.flash_attention, []
        for i, group in enumerate(split_micro_batches(seqs, self.plan.pp)):
            parts = self._stage_parts(lambda n, g=group: lower_iteration(self.model, g, self.formats, flash, n))
            tasks += self._micro_batch_tasks(f"mb{i}", parts, sum(q for q, _ in group) * self.model.hidden_size * 2)
        return self.stage_step("iteration", 0, tasks, busy)

    def plan_step(self, graph: OpGraph) -> list[Task]:
        if not self.plan.pipelined:
            return self.tp_tasks(graph)
        # Stage times come from whole layers: the graph's layer count (the generation loop's
        # fold lowers 2 and 3) does not change the schedule, so the fold adds nothing per layer.
        return self.pipeline_tasks(graph)

    @property
    def records_at_capped_clock(self) -> bool:
        """A pipeline's stages are capped apart (stage_power): its records stay at full clock, as its note says."""
        return not self.plan.pipelined

    def step_timeline(self, phase: str, q_len: int, kv_len: int) -> Timeline:
        """One step in full; kept for the report's figures (time in collectives, bubble)."""
        tl = self.full_steps[phase] = super().step_timeline(phase, q_len, kv_len)
        return tl

    # Energy: one rank per stage is simulated, but every device of the instance draws power. The
    # ranks of a stage do the same work (under ep > tp the busiest rank is simulated: an upper bound).
    def energy_j(self, tl: Timeline) -> float:
        return self.plan.stage_width * super().energy_j(tl)

    def power_j(self, busy_s: dict[str, float], wall_s: float | None = None) -> float:
        """Static energy of every device: each stage's ranks as busy as its simulated one. A TP/EP collective is a
        kernel on the ranks' SMs (NCCL's and the engines' custom all-reduce alike: vllm csrc/custom_all_reduce.cuh),
        so its time on the link draws the unit's activity power too (capped at the wall time: the two run one after
        the other in a step); a pipelined step's stage tasks hold their collectives already (pipeline_tasks)."""
        wall = max(busy_s.values(), default=0.0) if wall_s is None else wall_s
        one_device = super().power_j
        stages = [{u: busy_s.get(stage_resource(u, j), 0.0) for u in self.machine.units} for j in range(self.plan.pp)]
        main = self.unit_name
        stages[0][main] = min(stages[0][main] + busy_s.get(LINK, 0.0), max(wall, stages[0][main]))
        return self.plan.stage_width * sum(one_device(b, wall) for b in stages)

    def figures(self, gen: Generation, decode_tl: Timeline | None) -> RunFigures:
        fig = super().figures(gen, decode_tl)
        kv = {"prefill": self.workload.prompt_len, "decode": gen.rep_kv}
        steps = {ph: (kv[ph], self.full_steps[ph]) for ph in kv if ph in self.full_steps} if decode_tl is not None else {}
        fig.extra["parallel"] = parallel_data(self, steps)
        return fig

    def footprint(self) -> Footprint:
        """One device: its share of the dense weights (1/tp, K/V projections replicated past
        the KV heads) and of the experts (1 / max(tp, ep)), for its stage's layers; the
        KV cache of its KV heads and of its own sequences (B / ep under data-parallel attention)."""
        w, p, m = self.workload, self.plan, self.model
        fp, tier = Footprint(), self.machine.device_tier
        fp.add(tier, "weights", self._weights_per_device())
        kv = kv_bytes(m, self.formats, self.group_batch(), w.prompt_len + w.gen_len)
        fp.add(tier, "kv_cache", kv * kv_fraction(m, p.tp) * max(self.stage_layers()) / m.num_layers)
        prefill = lower(m, "prefill", self.group_batch() // p.micro_batches, w.prompt_len, w.prompt_len,
                        self.formats, w.flash_attention, num_layers=m.layers_of_each_kind)
        fp.add(tier, "activations", activation_peak_bytes(self.rank_graph(prefill)[0]))
        fp.scope = f"one device of {self.devices} (tp={p.tp} pp={p.pp} ep={p.ep}): the fullest stage's share"
        self.check_fits(fp, f"Parallel plan tp={p.tp} pp={p.pp} ep={p.ep}: try a larger tp, pp or ep, "
                            "or a narrower format.")
        return fp


def MAPPER(machine, workload, model) -> GpuMapper:
    """The gpu kind's mapper: the single-device one unless the workload has a `parallel:` section."""
    if workload.section("parallel") is None:
        return GpuMapper(machine, workload, model)
    return ParallelGpuMapper(machine, workload, model)


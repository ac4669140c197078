"""What every hardware model provides: a Mapper turns a step's op graph into engine tasks on the machine's
resources, and checks that the run fits.

A mapper is chosen by the machine's `kind` (hw_models.registry). The generation loop (prefill, then decode steps
over a growing KV cache, with the shortcuts for identical layers and steps) lives once in sim.core.generation; a
mapper is its `StepModel`: the hooks below (`step`, `step_timeline`, `footprint`, `figures`) have defaults for
kinds whose steps are planned op by op onto the engine, and a kind whose schedule crosses steps (offload's block
schedule, a spatial pipeline) overrides `step` and `step_timeline`, never the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Callable

from hw_models.capacity_hint import capacity_hint
from hw_models.machine import Machine
from hw_models.clock import clock_counters
from hw_models.power import at_capped_clock, board_of, busy_time_note, cap_figures, cap_note, capped_step
from hw_models.stack.engine_data import engine_data
from hw_models.stack.sampler import step_sampling
from hw_models.stack.step_overhead import HOST, EngineHost, StepOverhead
from sim.core import engine
from sim.core.engine import Task, Timeline
from sim.core.errors import CapacityError, ConfigError
from sim.core.footprint import Footprint, activation_peak_bytes, kv_bytes, weight_bytes
from sim.core.generation import Generation, RunFigures, fold_layers, simulate_generation
from sim.core.graph import OpGraph
from sim.core.lowering import lower, repeating_from
from sim.core.mixed import lower_iteration
from sim.core.model import ModelConfig
from sim.core.results import RunResult, StepResult
from sim.core.units import fmt_bytes
from sim.core.workload import Workload


@dataclass(frozen=True)
class Roof:
    """One roof of a roofline plot: the peak a unit computes at and the bandwidth it streams operands at.
    `unit` names an engine resource or a numbered family of them ("pim.stack" stands for pim.stack0, ...;
    "chip" for chip0, ...), and its later pipeline stages (gpu.s1, ...: gpu.schedule.stage_resource)."""

    unit: str
    label: str
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float

    def covers(self, resource: str) -> bool:
        tail = resource[len(self.unit):].removeprefix(".s")   # a later pipeline stage runs on the same hardware
        return resource.startswith(self.unit) and (tail == "" or tail.isdigit())

    @property
    def knee_flop_per_byte(self) -> float:
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s


def timeline_energy_j(tl: Timeline) -> float:
    """Energy the tasks of a timeline report in their tags (OpCost.energy_j)."""
    return sum(getattr(i.tag, "energy_j", 0.0) for i in tl.intervals)


@dataclass(frozen=True)
class DeviceShare:
    """What the busiest device of one serving instance holds under the workload's parallel plan (Mapper.device_share),
    as fractions of the whole model's figures. A kind without a plan, or without parallelism, serves on one device."""

    devices: int = 1            # devices of one instance
    weights: float = 1.0        # of the model's weight bytes
    kv: float = 1.0             # of each token's KV bytes
    tp: int = 1
    ep: int = 1
    pp: int = 1
    groups: int = 1             # attention groups (ep / tp): each holds its own sequences' KV
    reserved_bytes: float | None = None   # the runtime's reserve per device; None: the serving engine's default
    usable_bytes: float | None = None     # what a device may fill; None: gpu_memory_utilization of its memory


@dataclass(frozen=True)
class OwnPool:
    """A batch a kind places itself (Mapper.serving_pool): its sequences and the longest prompt and context each
    may have; a serving run refuses longer requests on arrival."""

    sequences: int
    prompt_tokens: int
    context_tokens: int
    describe: str = ""   # how the kind places it, for the report (offload: the policy)


@dataclass(frozen=True)
class Section:
    """A report section as data: a title, rows of cells, optional column names and a caption. The application
    layer renders it (rich tables, JSON); mappers never build tables. Without columns the rows are (key, value)."""

    title: str
    rows: list[tuple[str, ...]]
    columns: tuple[str, ...] = ()
    caption: str = ""


class Mapper:
    kind = "base"
    # Whether each engine resource runs its tasks in the order planned (a CUDA stream, a DMA queue) rather than in
    # whatever order they become ready. Whether `capped` caps a whole serving iteration (a pipeline caps its stages).
    in_order, caps_whole_steps = False, True
    # Layers simulated (and one more) before extrapolating identical layers (sim.core.generation.fold_layers): how
    # far back the schedule's overlap reaches.
    fold_layers = 2
    # The engine's host work per iteration (the workload stack's step_overhead; None: no engine,
    # as under plain torch or no stack) and the devices one instance spans (its TP/EP x PP group).
    step_overhead: StepOverhead | None = None
    devices = 1
    power_includes = ""   # what the devices' power holds beyond their boards (offload: its host)

    def __init__(self, machine: Machine, workload: Workload, model: ModelConfig):
        self.machine = machine
        self.workload = workload
        self.model = model
        self.formats = workload.formats.policy()

    # -- what a hardware model must provide -------------------------------
    def plan_step(self, graph: OpGraph) -> list[Task]:
        raise NotImplementedError

    def resources(self) -> dict[str, int]:
        """Parallel slots per engine resource (default one)."""
        return {}

    def containers(self) -> dict[str, float]:
        return {}

    # -- shared behaviour ---------------------------------------------------
    def footprint(self) -> Footprint:
        """Everything on the main unit's memory tier; raises CapacityError if it does not fit."""
        w = self.workload
        fp = Footprint()
        tier = self.machine.device_tier
        fp.add(tier, "weights", weight_bytes(self.model, self.formats))
        fp.add(tier, "kv_cache", kv_bytes(self.model, self.formats, w.batch, w.prompt_len + w.gen_len))
        prefill = lower(self.model, "prefill", w.batch, w.prompt_len, w.prompt_len, self.formats,
                        w.flash_attention, num_layers=1)
        fp.add(tier, "activations", activation_peak_bytes(prefill))
        self.check_fits(fp)
        return fp

    def check_fits(self, fp: Footprint, hint: str | None = None) -> None:
        for tier, roles in fp.tiers.items():
            need, have = fp.total(tier), self.machine.memory[tier].capacity_bytes
            if need > have:
                hint = hint or self.capacity_hint(roles)
                raise CapacityError(
                    f"{self.model.name} ({self.workload.formats.weights} weights, batch {self.workload.batch}, "
                    f"{self.workload.prompt_len}+{self.workload.gen_len} tokens) needs {fmt_bytes(need)} in "
                    f"{self.machine.name}.{tier} ({fp.describe(tier)}) but it holds {fmt_bytes(have)}: "
                    f"short by {fmt_bytes(need - have)}. {hint}")

    def capacity_hint(self, roles: dict[str, float]) -> str:
        """What to try, given the bytes per role of the tier that overflows (hw_models.capacity_hint)."""
        return capacity_hint(self.machine, self.workload, roles)

    # -- the generation loop's hooks (sim.core.generation.StepModel) -------------
    @property
    def hardware_name(self) -> str:
        return self.machine.name

    @property
    def hardware_kind(self) -> str:
        return self.machine.kind

    def step_graph(self, phase: str, q_len: int, kv_len: int, num_layers: int | None = None) -> OpGraph:
        w = self.workload
        return lower(self.model, phase, w.batch, q_len, kv_len, self.formats, w.flash_attention, num_layers)

    def run_graph(self, graph: OpGraph) -> Timeline:
        return engine.run(self.plan_step(graph), self.resources(), self.containers(), self.in_order)

    def energy_j(self, tl: Timeline) -> float:
        """Dynamic energy of a simulated step: its tasks' (a kind simulating one of several devices scales it)."""
        return timeline_energy_j(tl)

    def device_step(self, phase: str, q_len: int, kv_len: int, exhaustive: bool = False) -> StepResult:
        """One step on the devices at full clock, identical layers folded: no power cap, no host work."""
        return self._folded(phase, kv_len, lambda n: self.step_graph(phase, q_len, kv_len, n), exhaustive)

    def step(self, phase: str, q_len: int, kv_len: int, exhaustive: bool = False) -> StepResult:
        """One step, identical layers folded, under the power cap, with the engine's host work (with_engine)."""
        return self.with_engine(self.capped(self.device_step(phase, q_len, kv_len, exhaustive)), self.workload.batch)

    def engine_host_s(self, n_seqs: int) -> float:
        """Host seconds the engine spends on an iteration of `n_seqs` sequences (0 without one)."""
        so = self.step_overhead
        return so.host_s(n_seqs, self.devices) if so is not None else 0.0

    def sampler(self, n_seqs: int) -> tuple[float, float]:
        """Device seconds and activity + DRAM joules of one step's top-p sort and penalty pass over `n_seqs`
        sequences, as the workload asks and the stack models (hw_models.stack.sampler; else none). The last stage's
        devices all sample the whole vocabulary, in step (vLLM V1 all-gathers the logits); other stages wait."""
        stack, tier = getattr(self, "stack", None), self.machine.memory[self.machine.device_tier]
        t, dram = step_sampling(getattr(stack, "top_p_sampler", None) if self.workload.sampling == "top_p" else None,
                                getattr(stack, "penalties", None) if self.workload.penalties else None,
                                n_seqs, self.model.vocab_size, tier.bandwidth_bytes_per_s)
        if not t:
            return 0.0, 0.0
        plan = getattr(self, "plan", None)
        samplers = plan.stage_width if plan is not None else self.devices
        return t, self.gap_active_j(t) + samplers * dram * (tier.energy_j_per_byte or 0.0)

    def with_engine(self, device: StepResult, n_seqs: int) -> StepResult:
        """`device` (the step's kernels, folded) with the engine's host work of `n_seqs` sequences:
        serial, the step takes host + device; overlapped, max(host, device) (hw_models.stack.step_overhead).
        Applied after the layer fold: a max() is not linear in the layer count. The host's busy time
        grows by the host work; `engine_host_s` in the counters. The devices draw activity power through the
        gap the host leaves them (gap_active_j), charged in the step's energy; idle power over it in `figures`."""
        sample_s, sample_j = self.sampler(n_seqs)
        if sample_s:   # the sampler's kernels follow the step's on the device, before the host reads the ids
            device = StepResult(device.phase, device.kv_len, device.time_s + sample_s, device.busy_s,
                                device.energy_j + sample_j, {**device.counters, "sampler_s": sample_s})
        host = self.engine_host_s(n_seqs)
        if not host:
            return device
        busy = {**device.busy_s, HOST: device.busy_s.get(HOST, 0.0) + host}
        wall = self.step_overhead.step_s(device.time_s, host)
        return StepResult(device.phase, device.kv_len, wall, busy, device.energy_j + self.gap_active_j(wall - device.time_s),
                          {**device.counters, "engine_host_s": host})

    def _folded(self, phase: str, kv_len: int, graph_of: Callable[[int | None], OpGraph],
                exhaustive: bool, busy: Callable[[Timeline], dict[str, float]] = Timeline.busy_s) -> StepResult:
        """Run `graph_of(layers)` (None: all layers) in the engine, identical layers folded;
        `busy` reads the busy times off each timeline (they fold like the time)."""
        L = self.model.num_layers

        def run(n: int) -> StepResult:
            return self.graph_step(phase, kv_len, graph_of(None if n == L else n), busy)

        return fold_layers(run, L, self.fold_from, exhaustive, self.model.layer_period)

    def graph_step(self, phase: str, kv_len: int, graph: OpGraph,
                   busy: Callable[[Timeline], dict[str, float]] = Timeline.busy_s) -> StepResult:
        """`graph` run in the engine as a step: the fold's unit (a pipeline caps its stages here), with its ops' split
        by what the SM clock paces (hw_models.clock: the cap reads it)."""
        tl = self.run_graph(graph)
        return StepResult(phase, kv_len, tl.makespan_s, busy(tl), self.energy_j(tl),
                          clock_counters((i.tag for i in tl.intervals), self.machine.main_unit))

    @property
    def fold_from(self) -> int:
        """Layers simulated before the fold extrapolates: `fold_layers`, and at least one past the last layer unlike
        those after it (sim.core.lowering.repeating_from), so the marginal layer is like every layer it stands for."""
        return max(self.fold_layers, repeating_from(self.model, self.formats) + 1)

    # The serving schedulers (spec kinds) that can drive this kind in `sim serve`, None: every one; and why (check_kind)
    serving_schedulers: tuple[str, ...] | None = None
    serving_schedulers_why = ""
    # Why this kind cannot serve with a draft model (serving.speculative), "" where it can: the draft's
    # weights and KV are placed whole on every device (sim.apps.serve.instance), as an engine runs a small draft.
    serving_speculative_why = ""
    # Whether a serving run costs every iteration exactly: a kind whose iteration is not the surrogate's canonical
    # mixed batch (sim.apps.serve.stepcost) cannot be tabulated by it. The surrogate's denser grids, where a kind's
    # placement of an op switches between units and its cost (its energy above all) is not linear across the switch:
    # every decode count up to serving_dense_decodes (PIM past a few rows), KV lengths every 25% (PIM dies' reach).
    serving_exact = False
    serving_dense_decodes = 0
    serving_dense_kv = False

    # -- the serving hooks (sim.apps.serve.stepcost and .placement read only these) ----------
    def device_share(self) -> DeviceShare:
        """The busiest device's share of the weights and KV under the workload's parallel plan; by default a whole device."""
        return DeviceShare()

    def serving_pool(self) -> OwnPool | None:
        """The KV cache a kind keeps where its own placement puts it, which a serving run's pool then holds exactly;
        None: the serving engine sizes the pool from the device tier's free memory (sim.apps.serve.instance)."""
        return None

    def rank_activation_bytes(self, graph: OpGraph) -> float:
        """Peak activation bytes of one device running its share of `graph` (a profiling pass)."""
        return float(activation_peak_bytes(graph))

    def swap_bytes_per_s(self) -> float | None:
        """The rate a serving engine swaps KV blocks to the host at: the first link that ends at
        the device's memory tier; None when the preset has none."""
        dev = self.machine.device_tier
        for link in self.machine.links.values():
            if dev in (link.src, link.dst):
                return link.bandwidth_bytes_per_s
        return None

    def expert_part(self, group_tokens: int, total_tokens: int) -> tuple[float, float, dict[str, float]]:
        """The routed experts' part of an iteration split over attention groups (seconds, joules,
        busy seconds per resource); only a kind with expert parallelism has one."""
        raise ConfigError(f"{self.workload.source or 'workload'}: kind {self.machine.kind}: no data-parallel "
                          "attention groups to split an iteration over")

    def iteration(self, seqs: tuple[tuple[int, int], ...], logits: int | None = None,
                  exhaustive: bool = False, busy: Callable[[Timeline], dict[str, float]] = Timeline.busy_s,
                  device_only: bool = False, experts: bool = True) -> StepResult:
        """One serving iteration: prefill chunks and decode sequences of different lengths,
        each (q_len, kv_len), lowered by sim.core.mixed, identical layers folded, under the power cap and with
        the engine's host work for len(seqs) sequences unless `device_only` (ExactCost caps it). The step-cost
        oracle of the request-level simulation (sim.apps.serve); `busy` as in _folded.
        `experts=False`: one attention group's own ops only, the routed experts left to
        `expert_part` (a kind with expert parallelism overrides this)."""
        if not experts:
            self.expert_part(0, 0)   # the refusal of a kind without expert groups
        flash = self.workload.flash_attention
        step = self._folded("iteration", 0, lambda n: lower_iteration(self.model, seqs, self.formats, flash, n,
                                                                       logits), exhaustive, busy)
        return step if device_only else self.with_engine(self.capped(step), len(seqs))

    def collectives_per_iteration(self) -> int:
        """Collectives one serving iteration runs between devices (hw_models.stack.engine_overheads'
        per_collective_s scales with it); a kind on one device runs none."""
        return 0

    def power_j(self, busy_s: dict[str, float], wall_s: float | None = None) -> float:
        """Static energy over a span of `wall_s` seconds (default: the longest busy time): a unit's
        idle board power over the whole span where the preset gives it (board power as idle +
        dynamic, the dynamic part in the tasks' energy), else its power_w over its busy time."""
        wall = max(busy_s.values(), default=0.0) if wall_s is None else wall_s
        return sum(u.idle_power_w * wall + u.active_power_w * busy_s.get(name, 0.0) if u.idle_power_w is not None
                   else (u.power_w or 0.0) * busy_s.get(name, 0.0) for name, u in self.machine.units.items())

    def gap_active_j(self, gap_s: float) -> float:
        """Activity energy of the devices over an engine gap of `gap_s` seconds inside the serving loop (the host's
        serial work, the engine's fitted idle terms): sub-millisecond to millisecond gaps between an engine's
        back-to-back iterations leave the GPU at its boost clock and voltage (the driver lowers clocks only once
        "nothing is running on the GPU", NVML's GpuIdle event reason, and a clock change has a switching latency of
        its own, measured on GH200 and A100 by Velicka et al., arXiv:2502.20075; we read the abstract, not their
        figures), so the clock tree and the leakage at boost voltage that `active_power_w` stands for keep drawing
        (hw_models.power). Idle power over the gap: `power_j({}, gap_s)`; between requests it stays at idle power."""
        bp = self.machine.board_power()
        if bp is None or gap_s <= 0.0:
            return 0.0
        # Under a power limit below idle + activity the clock drops until the board meets it (nothing to stretch).
        # Under a clock lock the clock tree runs at the locked clock (its activity an energy per cycle).
        headroom = bp.active_w * bp.clock if bp.limit_w is None else min(bp.active_w * bp.clock, bp.limit_w - bp.idle_w)
        return self.devices * headroom * gap_s

    def gap_j(self, gap_s: float) -> float:
        """Board energy of the devices over an engine gap inside the serving loop: idle + activity (gap_active_j),
        both linear in the gap: its watts once per mapper (a serving run asks for every iteration)."""
        return gap_s * self._gap_w if gap_s > 0.0 else 0.0

    @cached_property
    def _gap_w(self) -> float:
        return self.power_j({}, 1.0) + self.gap_active_j(1.0)

    def capped(self, step: StepResult) -> StepResult:
        """`step` under the main unit's board power limit (hw_models.power.capped_step): where each device's power
        over it would exceed the limit, the clock drops until it does not, and the step slows as that clock paces
        its ops (the devices do the same work at once: each draws the mean; a pipeline caps its stages in
        graph_step). Applied after the fold, like the host's max()."""
        return capped_step(self, step)

    records_at_capped_clock = True   # step_timeline's records at a binding cap's clock (power.at_capped_clock)
    caps_by_bound = True             # its cap slows ops as the clock paces them (hw_models.clock), not whole steps

    def step_timeline(self, phase: str, q_len: int, kv_len: int) -> Timeline:
        """One step in full, every op, for the report, the Gantt chart and the trace; the
        engine's host work a task on the host (serial: every first kernel waits for it)."""
        tasks = at_capped_clock(self, self.plan_step(self.step_graph(phase, q_len, kv_len)), phase, q_len, kv_len)
        host = self.engine_host_s(self.workload.batch)
        if host:
            first = () if self.step_overhead.overlap else (EngineHost.NAME,)
            tasks = [Task(EngineHost.NAME, HOST, host, (), tag=EngineHost(host))] + [
                t if t.deps or t.resource == HOST else replace(t, deps=first) for t in tasks]
        return engine.run(tasks, self.resources(), self.containers(), self.in_order)

    def figures(self, gen: Generation, decode_tl: Timeline | None) -> RunFigures:
        """Utilisation of each resource over the run, and energy: what the tasks reported plus each unit's power while
        it was busy. `decode_tl` is the representative decode step in full, None when the run skips detail."""
        busy, e2e = gen.busy_s, gen.e2e_s
        total = gen.energy_j + self.power_j(busy, e2e)
        fig = RunFigures(self.workload.batch, {r: b / e2e for r, b in busy.items()} if e2e else {}, total)
        if any(u.idle_power_w is not None for u in self.machine.units.values()):
            # Board power as idle + dynamic: energy splits by phase (prefill vs decode steps).
            pre = gen.prefill.energy_j + self.power_j(gen.prefill.busy_s, gen.prefill.time_s)
            fig.energy_by_phase_j = {"prefill": pre, "decode": total - pre}
        if (eng := engine_data(self, gen)) is not None:
            fig.extra["engine_host"] = eng
        bp = self.machine.board_power()
        if bp is not None and (cap := cap_figures(gen, bp)):
            fig.extra["power_cap"] = cap
            fig.notes.append(cap_note(cap, self.records_at_capped_clock, self.caps_by_bound))
        if note := busy_time_note(self.machine, total, e2e, self.devices):   # with the model: unpriced_board_note
            fig.notes.append(note)
        return fig

    def serving_board(self):
        """The idle draw serving charges between this mapper's iterations (hw_models.power.Board)."""
        return board_of(self.machine, self.devices)

    def simulate(self, exhaustive: bool = False, detail: bool = True) -> RunResult:
        return simulate_generation(self, exhaustive=exhaustive, detail=detail)


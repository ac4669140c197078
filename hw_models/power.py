"""Board power of a device (issue 33): static, activity and dynamic power, and the board
power limit as a cap that stretches a step when it binds.

A device's power over a step of `t` seconds in which its kernels run `busy` seconds:

    P = idle_power_w                      static: the board at rest (leakage, fans, VRM, HBM refresh)
      + active_power_w x busy / t         activity: what running any kernel adds at boost clock
                                          (clock tree, SM/L2/NoC leakage at boost voltage), whatever it computes
      + dynamic_j / t                     FLOPs x energy_j_per_flop[format] + bytes x tier energy_j_per_byte
                                          + link bytes x link energy_j_per_byte (the tasks' OpCost.energy_j)

The activity term is why a memory-bound decode draws far more than idle + bytes x J/byte: a
GPU running a GEMV keeps every SM clocked (ML.ENERGY's H100 Llama-3.1-8B at batch 8 draws
486 W per GPU, docs/energy.md).

The cap: when P exceeds the board power limit L (power_limit_w, else the TDP power_w), the
GPU lowers its SM clock until it does not. What that clock paces slows, what DRAM paces does
not (hw_models.clock): at a clock ratio r the step takes t + added(r) and its activity energy
is active_w x r x (busy + added(r)) (an energy per cycle); its FLOPs' and bytes' energies are
held at their full-clock figures (C V^2 each at full voltage), while idle power keeps drawing:

    idle + (active_w x r x (busy + added(r)) + dynamic_j) / (t + added(r)) = L

solved for r (hw_models.clock.ClockWork.ratio). A step whose ops were not split by bound (an
offload block) stretches as a whole, s = 1/r, every cycle kept:

    idle + (active_w x busy + dynamic_j) / (s t) = L   =>   s = (active_w x busy + dynamic_j) / (t (L - idle))

Holding the energy per op fixed ignores the lower voltage at a lower clock (which cuts it
~V^2), so the energy under a cap is an upper bound; the ML.ENERGY runs, which never sit at the
cap for long, cannot constrain the difference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, Any

from pydantic import AfterValidator

from hw_models.clock import ClockWork, op_added_s
from sim.core.generation import Generation
from sim.core.results import StepResult
from sim.core.schema import Quantity


# Above these no device spends (the presets' largest: 20 pJ a FLOP, 1.9 nJ a disk byte): a bare number read in joules
# where pJ were meant (an energy trial's `fp16: 0.7` ran a TTFT of 3.2e10 s without a word).
MAX_J_PER_FLOP, MAX_J_PER_BYTE = 1e-9, 1e-6


def plausible_joules(what: str, joules: float, ceiling: float, per: str) -> float:
    """`joules` a FLOP or byte, refused when negative or above `ceiling` (a unit left out: '0.7' for '0.7 pJ')."""
    where = f"{what}: " if what else ""   # the field's own name where pydantic does not give it (a dict's key)
    if joules < 0:
        raise ValueError(f"{where}must be >= 0")
    if joules > ceiling:
        raise ValueError(f"{where}{joules:g} J a {per}, more than any device spends ({ceiling:g} J); a figure in pJ "
                         "or nJ needs its unit ('0.7 pJ')")
    return joules


# Every energy field of a preset, read through plausible_joules (a review: the PIM MACs' `energy_j_per_flop: 0.75`
# ran 9.6e9 J/token, the link and PIM J/byte fields were unguarded, the memory tiers' refusal said a bare bound).
JPerFlop = Annotated[Quantity, AfterValidator(lambda v: plausible_joules("", v, MAX_J_PER_FLOP, "FLOP"))]
JPerByte = Annotated[Quantity, AfterValidator(lambda v: plausible_joules("", v, MAX_J_PER_BYTE, "byte"))]


@dataclass(frozen=True)
class BoardPower:
    """Per-device power figures (W) of one unit; `limit_w` None: no cap; `clock` the SM clock locked at that share
    of full (nvidia-smi --lock-gpu-clocks), which the limit may lower further."""

    idle_w: float
    active_w: float = 0.0
    limit_w: float | None = None
    clock: float = 1.0

    @property
    def acts(self) -> bool:
        """Whether a limit or a clock lock can slow a step."""
        return self.limit_w is not None or self.clock < 1.0

    def static_w(self, busy_fraction: float) -> float:
        """Power without the dynamic part, at a share `busy_fraction` of the time running kernels."""
        return self.idle_w + self.active_w * busy_fraction

    def stretch(self, time_s: float, clocked_j: float) -> float:
        """The factor (>= 1) the cap stretches a step of `time_s` seconds by, given one device's energy
        that scales with its clock over it (`clocked_j`: activity + dynamic); 1.0 when the cap does not bind."""
        if self.limit_w is None or time_s <= 0.0 or clocked_j <= 0.0:
            return 1.0
        # limit_w > idle_w is checked where the unit is read (Unit._power_limit), so the headroom is positive.
        return max(1.0, clocked_j / (time_s * (self.limit_w - self.idle_w)))

    def under_cap(self, time_s: float, active_j: float, dynamic_j: float,
                  work: ClockWork | None) -> tuple[float, float, float]:
        """What the cap does to one device's step of `time_s` seconds drawing `active_j` activity and `dynamic_j`
        dynamic joules at full clock: the seconds it adds, its ops slowed as the clock that meets the limit paces
        them (`work`: their split by bound), or the whole step stretched (no split, or no clock meets the limit:
        ClockWork.ratio); and the activity joules the lower clock saves (fewer cycles while memory-bound ops wait
        on DRAM: hw_models.clock; none where the whole step stretches, every cycle kept); and the clock ratio.
        (0, 0, 1) where it does not bind. Either way the device then draws the limit over the step. Under a clock
        lock (`clock` < 1) the same at that clock where the limit does not lower it further."""
        if time_s <= 0.0:
            return 0.0, 0.0, 1.0
        locked = self.at_clock(self.clock, time_s, active_j, work)
        added, saved_j, _ = locked
        if self.limit_w is None or self.idle_w + (active_j + dynamic_j - saved_j) / (time_s + added) <= self.limit_w:
            return locked
        r = self.clock_ratio(time_s, active_j, dynamic_j, work)
        if r is None:
            s = self.stretch(time_s, active_j + dynamic_j)
            return time_s * (s - 1.0), 0.0, 1.0 / s
        return self.at_clock(r, time_s, active_j, work)

    def at_clock(self, r: float, time_s: float, active_j: float, work: ClockWork | None) -> tuple[float, float, float]:
        """under_cap's figures of one device's step at SM clock ratio r: its ops slowed as r paces them and the
        activity the fewer cycles save (`work` None: the whole step stretched by 1/r, every cycle kept)."""
        if r >= 1.0:
            return 0.0, 0.0, 1.0
        if work is None:   # its busy seconds (the SMs' work) 1/r as long; an offload block's host and PCIe time stay
            busy = active_j / self.active_w if self.active_w > 0.0 else time_s
            return min(busy, time_s) * (1.0 / r - 1.0), 0.0, r
        added = work.added_s(r)
        return added, active_j * (1.0 - r) - self.active_w * r * added, r

    def clock_ratio(self, time_s: float, active_j: float, dynamic_j: float, work: ClockWork | None) -> float | None:
        """The SM clock ratio (<= 1) the limit leaves one device's step (under_cap's arguments); None where the
        step stretches as a whole."""
        if work is None:
            return None
        busy = active_j / self.active_w if self.active_w > 0.0 else 0.0
        return work.ratio(self.limit_w - self.idle_w, self.active_w, time_s, busy, dynamic_j)

    def average_w(self, time_s: float, busy_s: float, dynamic_j: float) -> float:
        """Average power of one device over a step (the formula above)."""
        return self.static_w(busy_s / time_s) + dynamic_j / time_s if time_s > 0 else self.idle_w


@dataclass(frozen=True)
class Board:
    """What a serving instance draws when it has no work: `idle_w` per device, `devices` per instance (a
    mean, not whole, where pools of different instances share one Board: sim.apps.serve.energy.pools_board)."""

    idle_w: float = 0.0
    devices: float = 1
    limit_w: float | None = None   # the board power limit a serving report names when the cap binds
    # what else a "device"'s energy holds besides its board: the offload kind's host CPU and disk draw for the GPU
    # they serve, so its power per device can read above the board's own limit (which binds the GPU alone)
    with_host: str = ""
    clock_lock: float = 1.0   # the SM clock locked at this share of full (Unit.sm_clock_fraction)
    source: str = ""   # what the board figures rest on (the unit's power_source: fitted, or assumed by a rule)
    boards: int = 1    # boards one device stands for (Unit.boards: attacc_dgx's 8 A100s); the report gives a board's


def busy_time_note(machine: Any, total_j: float, wall_s: float, devices: int, whole_run: bool = False) -> str | None:
    """The note every run on a preset without the board-power model (no idle_power_w) carries: its energy is
    power_w x busy time (`whole_run`: the spatial kind's chips, over the whole run) plus bytes and FLOPs, no idle
    draw between busy spans, so its J/token does not compare with a board-power preset's (docs/energy.md); and
    where it averages more than that power_w, the board's TDP, no cap binds: an upper bound. With the model, the
    note of a figure it lacks (unpriced_board_note), if any."""
    u = machine.units[machine.main_unit]
    if u.idle_power_w is not None:
        return unpriced_board_note(machine)
    if not u.power_w:
        return None
    how = ("every chip's power_w over the whole run, bubbles included (an upper bound)" if whole_run
           else "power_w over busy time, nothing between")
    # "plus bytes and FLOPs" only where the preset prices them (groq_lpu's chips have neither: a trial)
    dynamic = [w for w, priced in (("bytes", any(m.energy_j_per_byte for m in machine.memory.values())),
                                   ("FLOPs", bool(u.energy_j_per_flop))) if priced]
    note = (f"energy: {machine.name} has no board-power model (idle_power_w): its J/token counts {how}"
            f"{', plus ' + ' and '.join(dynamic) if dynamic else ' (no J/byte or J/FLOP in the preset)'}; it does not "
            "compare with a board-power preset's (h100_sxm, h200, b200, a100_80g, a6000; docs/energy.md)")
    avg_w = total_j / wall_s / max(devices, 1) if wall_s > 0.0 else 0.0
    if avg_w > u.power_w * (1 + 1e-9):   # a spatial run averages its chips' power_w exactly, give or take rounding
        note += (f"; it averages {avg_w:.0f} W per device, above its {u.power_w:.0f} W TDP, which no cap holds here "
                 "(the busy spans overcount; the idle ones, at 0 W, undercount)")
    return note


def unpriced_board_note(machine: Any) -> str | None:
    """The note a run on a preset whose board-power model (idle_power_w) lacks one of its other figures carries:
    the activity power, the J/FLOP, or the main unit's memory J/byte, each then 0 (an energy trial: h100_sxm copies
    without one read 2.8-5.7 J/token against 5.9, silently, under the report's full-model wording). None where the
    model is whole or absent (busy_time_note)."""
    u = machine.units[machine.main_unit]
    if u.idle_power_w is None:
        return None
    tier = f"memory.{u.memory}.energy_j_per_byte"
    missing = [k for k, given in ((f"units.{machine.main_unit}.active_power_w", "active_power_w" in u.model_fields_set),
                                  (f"units.{machine.main_unit}.energy_j_per_flop", bool(u.energy_j_per_flop)),
                                  (tier, machine.memory[u.memory].energy_j_per_byte is not None)) if not given]
    if not missing:
        return None
    return (f"energy: {machine.name} has a board-power model (idle_power_w) without {', '.join(missing)}: "
            f"{'each counts' if len(missing) > 1 else 'it counts'} 0, so its J/token and power leave that part out "
            "(docs/energy.md lists the figures of the model)")


def board_columns(machine: Any) -> dict[str, float]:
    """What a run records of its machine's power model (RunResult.metrics, every sweep row): which energy model its
    J/token is (1: idle + activity + dynamic; 0: busy-time power only), so rows across kinds show where
    energy_per_token_j mixes the two (busy_time_note); and with the model, the board power limit (power_limit_w,
    else the TDP) that power_cap_binds says bound or not."""
    board = machine.board_power()
    return {"energy_board_model": float(board is not None),
            **({"power_cap_limit_w": board.limit_w} if board is not None and board.limit_w is not None else {})}


def board_of(machine: Any, devices: int) -> Board:
    """A machine's idle board figures: its main unit's idle power (0 without one), `devices` per instance,
    and its board power limit (None without the board-power model: no cap binds there)."""
    bp = machine.board_power()
    unit = machine.units[machine.main_unit]
    return Board(bp.idle_w if bp else 0.0, devices, bp.limit_w if bp else None,
                 source=unit.power_source if bp else "", boards=unit.boards, clock_lock=bp.clock if bp else 1.0)


# A binding cap's counters on a step (extensive): the seconds it added, one device's clocked joules, their window,
# and the window times the clock ratio the limit left (their ratio: the mean clock, as a share of full).
CAP_COUNTERS = ("power_cap_s", "power_cap_clocked_j", "power_cap_window_s", "power_cap_clock_s")
# The entry a serving step cost (sim.apps.serve.stepcost) books the cap's added seconds under, beside the
# resources' busy seconds: the cost vector is what the surrogate interpolates and the table cache stores, so the
# added time travels with the step's time through both; it is not a resource (utilization skips it).
CAP_ADDED = "power_cap"
# Beside it, the seconds of iterations the limit ran at a lowered clock: a memory-bound step meets a limit at a lower
# clock in the same time (hw_models.clock), so a cap can bind and add nothing.
CAP_CLOCKED = "power_cap_clocked"
CAP_CLOCK = "power_cap_clock"   # those seconds times the clock ratio: over CAP_CLOCKED, the mean clock there


def with_cap(counters: dict[str, float], added_s: float, clocked_j: float, window_s: float,
             clock: float | None = None) -> dict[str, float]:
    """A capped step's counters (extensive, so they fold over layers and sum over steps): the seconds the cap
    added, one device's clocked joules over the window it was averaged on (what its board would draw at full
    clock: idle + clocked_j / window_s), and the clock ratio the limit left (None: the whole window stretched
    alike, at window / (window + added))."""
    r = window_s / (window_s + added_s) if clock is None else clock
    out = dict(counters)
    for key, v in zip(CAP_COUNTERS, (added_s, clocked_j, window_s, window_s * r)):
        out[key] = out.get(key, 0.0) + v
    return out


# No clock floor is modelled: near the idle power the clock falls without bound (a trial's 120 W limit on an
# H100 stretched a prefill 201x), where a real board stops at its lowest clock, and a memory-bound kernel's loads
# need the SMs' cycles too; runs say so below a third of the full clock (a step stretched alike past 3x).
FLOOR_STRETCH = 3.0
NO_CLOCK_FLOOR = ("below a third of the full clock no clock floor is modelled (a real board stops at its lowest "
                  "clock, and memory-bound kernels slow too): a clock this low (a limit this close to the idle power, "
                  "or a lock this low) is outside the model")


def limit_binds(clocks: list[float], lock: float = 1.0) -> bool:
    """Whether the board limit lowered any of these clocks (shares of full) below the clock lock (1: none)."""
    return any(c < lock * (1.0 - 1e-9) for c in clocks)


def cap_note(cap: dict, split: bool = True, by_bound: bool = True) -> str:
    """The run's note where the board power limit bound (cap_figures' figures). `split`: the step's op records run at
    the lowered clock, else (a pipeline's stages, an offload block, capped apart) at full clock. `by_bound`: the ops
    slowed as the lowered clock paces them (hw_models.clock), else (an offload block) the capped part stretched as a
    whole, a memory-bound step's stretch an upper bound (its HBM keeps its own clock), which the note says."""
    bound = [p for p in ("prefill", "decode") if cap[p + "_board_w"] is not None]
    lock = cap.get("clock_lock", 1.0)
    if limit_binds([cap[p + "_clock"] for p in bound], lock):   # the limit lowers the clock (below any lock)
        head = (f"power cap: the {cap['limit_w']:.0f} W board limit binds and lowers the SM clock"
                + (f" below its {lock:.0%} lock" if lock < 1.0 else ""))
    else:
        head = f"clock lock: the SM clock is locked at {lock:.0%} of full (units.@main.sm_clock_fraction)"
    phases = ", ".join(f"{p} {cap[p + '_stretch']:+.1%} at {cap[p + '_clock']:.0%} of the full clock (the board would "
                       f"draw {cap[p + '_board_w']:.0f} W at full clock"
                       + ("; an upper bound: every op stretched alike, though memory-bound ones wait on DRAM, whose "
                          "clock the cap does not lower" if p == "decode" and not by_bound else "") + ")" for p in bound)
    floor = f"; {NO_CLOCK_FLOOR}" if any(cap[p + "_clock"] < 1.0 / FLOOR_STRETCH for p in bound) else ""
    return (f"{head}: {phases}{floor}; "
            + ("compute-bound ops slow with the clock, memory-bound ones keep DRAM's pace until their compute "
               "outgrows it, and draw less activity power (hw_models/clock.py); " if by_bound else "")
            + "each op's FLOP and byte joules are kept at full clock, so the energy under a cap is an upper bound (a "
            "lower clock lowers the voltage too), "
            + ("the step's op records (--json ops, --chrome-trace) run at the lowered clock, the engine's host work "
               "at its own speed, " if split else
               "the step's op records (--json ops, --chrome-trace) are its ops at full clock (its parts are capped "
               "apart), the stretch on the step as a whole, ")
            + "and utilisation is the work at full clock over the stretched time (a GPU the cap keeps busy reads "
            "below 100%); hw_models/power.py, --set hw.units.@main.power_limit_w=W for another limit")


def cap_figures(gen: Generation, board: BoardPower) -> dict | None:
    """How far the board power limit (or an SM clock lock: `clock_lock`) stretched a run's steps (their `with_cap`
    counters), None where it never bound: each phase's added time over its time at full clock, the power a board
    would have drawn, and the clock the limit left (a share of full: its mean over the phase's capped time at full
    clock)."""
    steps = {"prefill": ([gen.prefill], 1.0), "decode": (gen.sampled, gen.share)}
    sums = {ph: {k: float(sum(st.counters.get(k, 0.0) for st in ss) * w)
                 for k in CAP_COUNTERS} for ph, (ss, w) in steps.items()}
    if not any(v["power_cap_window_s"] > 0.0 for v in sums.values()):   # a cap can bind and add no time
        return None
    phase_s = {"prefill": gen.prefill.time_s, "decode": float(gen.decode_times_s.sum())}
    out: dict = {"limit_w": board.limit_w, **({"clock_lock": board.clock} if board.clock < 1.0 else {})}
    for ph, v in sums.items():
        added, bound = v["power_cap_s"], v["power_cap_window_s"] > 0.0
        out[f"{ph}_s"] = added
        out[f"{ph}_stretch"] = added / (phase_s[ph] - added) if added else 0.0
        out[f"{ph}_board_w"] = board.idle_w + v["power_cap_clocked_j"] / v["power_cap_window_s"] if bound else None
        out[f"{ph}_clock"] = v["power_cap_clock_s"] / v["power_cap_window_s"] if bound else 1.0
    return out


def capped_step(mapper: Any, step: StepResult) -> StepResult:
    """`step` under its mapper's board power limit (Mapper.capped): slowed by what the limit adds (under_cap), its
    busy times those at full clock, the activity the lower clock saves taken off its energy."""
    bp = mapper.machine.board_power()
    if bp is None or not bp.acts or step.time_s <= 0.0:
        return step
    t, active_j, dynamic_j, work = device_power(mapper, step)
    added, saved_j, clock = bp.under_cap(t, active_j, dynamic_j, work)
    if clock == 1.0:
        return step
    return StepResult(step.phase, step.kv_len, t + added, step.busy_s, step.energy_j - mapper.devices * saved_j,
                      with_cap(step.counters, added, active_j + dynamic_j, t, clock))


def device_power(mapper: Any, step: StepResult) -> tuple[float, float, float, ClockWork | None]:
    """What the cap reads of a step at full clock, one device's: its seconds, activity and dynamic joules (the
    mapper's units over its busy times, the tasks' energy; a mapper simulating one of several devices scales both
    to all, so both are divided back), and its ops' split by what paces them (None: not split)."""
    n, t = mapper.devices, step.time_s
    active_j = mapper.power_j(step.busy_s, t) - mapper.power_j({}, t)
    return t, active_j / n, step.energy_j / n, ClockWork.read(step.counters)


def at_capped_clock(mapper: Any, tasks: list, phase: str, q_len: int, kv_len: int) -> list:
    """A step's device tasks at the clock its board power limit (or a clock lock) leaves (Mapper.capped): each op
    slowed as that clock paces it (hw_models.clock.op_added_s, the memory-bound ops' share scaled to what the step's
    sums add), or, where the step stretches as a whole (under_cap), each task `s` times as long, s the step's
    stretch, so its op records end where its time does. The clock is the folded step's, which the run's TTFT and
    TPOT carry (no second run of the whole step). The caller adds the engine's host work after, at its own speed; a
    kind whose parts are capped apart (a pipeline's stages) keeps them at full clock (records_at_capped_clock
    False)."""
    bp = mapper.machine.board_power()
    if bp is None or not bp.acts or not mapper.records_at_capped_clock:
        return tasks
    full = mapper.device_step(phase, q_len, kv_len)
    time_s, active_j, dynamic_j, work = device_power(mapper, full)
    added, _, r = bp.under_cap(time_s, active_j, dynamic_j, work)   # the clock the limit or a lock leaves
    if added <= 0.0:
        return tasks
    if work is None or abs(work.added_s(r) - added) > 1e-9 * time_s:   # the whole step stretched (under_cap)
        s = 1.0 + added / time_s
        return [replace(t, duration_s=t.duration_s * s) for t in tasks]
    unit = mapper.machine.main_unit
    own = [op_added_s(t.tag, r) if getattr(t.tag, "unit", None) == unit and hasattr(t.tag, "bound") else 0.0
           for t in tasks]
    # the memory-bound ops' own slowdowns, scaled to what the step's bins add (hw_models.clock), so that the records
    # end where the step does; the compute-bound ones' are the step's already
    mem_own = sum(a for a, t in zip(own, tasks) if a and t.tag.bound == "memory")
    scale = work.mem_added_s(r) / mem_own if mem_own > 0.0 else 0.0
    return [replace(t, duration_s=t.duration_s + (a * scale if t.tag.bound == "memory" else a)) if a else t
            for a, t in zip(own, tasks)]

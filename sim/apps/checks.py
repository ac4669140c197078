"""Checks at the command line's edge: settings that are valid on their own but have no
effect with this hardware or model, or contradict its software stack. They warn (on stderr) rather than refuse, because one
workload file is meant to run on every kind of preset."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from hw_models.compute_path import native_pair_rate
from hw_models.kinds import KINDS, section_owners
from hw_models.machine import Machine, machine_aliases, PRESET_DIR
from hw_models.offload.spec import host_spec
from hw_models.pim.config import load_pim_config
from hw_models.stack.cost import widens
from hw_models.stack.kernel_families import families
from hw_models.stack.spec import stack_for
from sim.apps.serve.disagg_files import transfer_notes, unread_plan
from sim.core.errors import ConfigError, SimError
from sim.core.formats import get_format
from sim.core.lowering import lower, override_matches
from sim.core.model import ModelConfig
from sim.core.settings import resolve_aliases
from sim.core.workload import Workload


def stack_runs(kind: str) -> bool:
    """Whether presets of `kind` cost ops under the workload's software stack (hw_models.kinds)."""
    entry = KINDS.get(kind)
    return entry is not None and entry.runs_stack


def unused_settings(workload: Workload, machine: Machine, model: ModelConfig) -> list[str]:
    """One line per setting this run ignores, naming the workload file and key."""
    src = workload.source or "workload"
    stack = None   # the stack as this machine runs it, read once for the checks below
    if workload.stack and stack_runs(machine.kind):
        try:   # an unknown stack is the workload's key: say which file (stack_for knows only the name)
            stack = stack_for(workload.stack, machine)
        except ConfigError as exc:
            raise ConfigError(f"{src}: {exc}") from None
    notes = []
    for key in workload.sections:
        owners = section_owners(key, "workload")
        if machine.kind not in owners:
            notes.append(f"{src}: {key}: only {' and '.join(owners)} presets read it; {machine.name} is kind "
                         f"{machine.kind!r}, so it is ignored")
    if workload.stack and not stack_runs(machine.kind):
        notes.append(f"{src}: stack: {workload.stack!r} is ignored: only gpu and cpu presets cost ops under a "
                     f"software stack; {machine.name} is kind {machine.kind!r}")
    if workload.sampling == "top_p" and stack_runs(machine.kind) and getattr(stack, "top_p_sampler", None) is None:
        notes.append(f"{src}: sampling: top_p costs nothing here: stack {workload.stack!r} has no top_p_sampler "
                     "(the vllm stacks model vLLM's sort-based sampler, hw_models/stack/sampler.py)")
    if workload.penalties and stack_runs(machine.kind) and getattr(stack, "penalties", None) is None:
        notes.append(f"{src}: penalties: true costs nothing here: stack {workload.stack!r} models no penalty pass "
                     "(the vllm stacks model vLLM's, hw_models/stack/sampler.py)")
    if (stack is not None and not workload.flash_attention
            and "flash_attention" in workload.model_fields_set and stack.runs_fused_attention):
        notes.append(f"{src}: flash_attention: false lowers attention as separate qk, softmax and av kernels, which "
                     f"stack {workload.stack!r} never launches (its attention is one fused kernel, "
                     "hw_models/stack/attention_kernels.yaml); --set flash_attention=true prices the engine's own "
                     "(left out, the stack sets it)")
    if workload.formats.overrides:
        # One layer of a decode step names every op kind the model has (layers repeat); an override may
        # name the ops of any layer (L31.*), so each layer's names are matched.
        ops = list(lower(model, "decode", 1, 1, 2, workload.formats.policy(), workload.flash_attention,
                         num_layers=model.layers_of_each_kind).ops())
        # an override sets a weight matrix's format (norms' 1-D weights stay in theirs)
        weighted = {op.name.split(".", 1)[-1] for op in ops if any(t.role == "weight" and len(t.shape) > 1
                                                                    for t in op.reads)}
        kinds = sorted(weighted)
        names = [(op.name, op.name.split(".", 1)[-1] in weighted) for op in ops if op.layer is None] + [
            (f"L{i}.{op.name.split('.', 1)[1]}", op.name.split(".", 1)[1] in weighted)
            for op in ops if op.layer is not None for i in range(model.num_layers)]
        for pattern in workload.formats.overrides:
            hits = [has_weight for n, has_weight in names if override_matches(pattern, n)]
            if not any(hits):   # an op without a weight matrix (qk, softmax, a norm) keeps its formats
                what = ("only ops without a weight matrix, which an override does not change (formats.activations "
                        "and formats.kv_cache set theirs)") if hits else "no op"
                notes.append(f"{src}: formats.overrides.{pattern}: matches {what}; the ops it can set in {model.name}: "
                             f"{', '.join(kinds)} (L0. to L{model.num_layers - 1}. for one layer's)")
    return notes + checkpoint_formats(workload, model) + limits_above_tdp(machine) + pim_ineligible(workload, machine)


def unshared_prefix(workload: Workload) -> list[str]:
    """A generated stream's shared prefix longer than every prompt it can draw: no request shares it (a prompt
    shorter than the prefix holds none of it, sim.apps.serve.arrivals.shared_prefix_hashes), which ran silently."""
    serving = getattr(workload, "serving", None)
    pc = serving.prefix_caching if serving is not None else None
    if pc is None or not pc.enabled or pc.shared_prefix is None or serving.lengths is None:
        return []
    most = serving.lengths.prompt.most
    if pc.shared_prefix.tokens <= most:
        return []
    return [f"{workload.source or workload.name}: serving.prefix_caching.shared_prefix.tokens: "
            f"{pc.shared_prefix.tokens} is longer than every prompt (at most {most} tokens): no request shares it"]


def emulated_activations(workload: Workload, machine: Machine) -> list[str]:
    """Narrow activations the machine's main unit has no matrix rate for: its GEMMs dequantize to 16 bits, as `sim
    run`'s op table shows per op and a serving report did not (a serving trial: NVFP4 W4A4 on an H100)."""
    act = get_format(workload.formats.activations)
    unit = machine.units.get(machine.main_unit)
    # on its element format, as the GEMMs run it (fp8_block128 on the fp8_e4m3 MMA: a review's false warning)
    if unit is None or act.bits >= 16 or not unit.peak_flops_per_s or native_pair_rate(unit, "unit", act.name, act.name):
        return []
    return [f"{workload.source or workload.name}: formats.activations: {act.name} has no matrix rate on "
            f"{machine.name}: its GEMMs run dequantized to 16 bits (sim run's op table shows each op's path)"]


def stack_widens_native(workload: Workload, machine: Machine) -> list[str]:
    """Weights the stack runs through a family that widens them to a 16-bit rate beside narrow activations the GPU has a
    native pairing for (vllm's MXFP4 experts with MXFP8 activations on a B200: its weight-only FP4 family, Blackwell's
    native MXFP4 MoE not modelled), said where only a stack preset's comment had said it (a many-device trial). A
    weight-only run with 16-bit activations is what the engines run, and W8A8 / W4A4 pairs take their own kernels."""
    stack = stack_for(workload.stack, machine) if stack_runs(machine.kind) else None
    unit, act = machine.units.get(machine.main_unit), get_format(workload.formats.activations)
    if stack is None or unit is None or act.bits >= 16:
        return []
    moe = workload.model_config_().is_moe
    given = [(workload.formats.weights, False)] + [(f, moe and "expert" in str(role))
                                                  for role, f in (workload.formats.overrides or {}).items()]
    out = []
    for fmt, experts in dict.fromkeys((get_format(f).name, e) for f, e in given):
        name = stack.family(fmt, unit.efficiency.compute_capability, experts) if fmt != act.name else None
        fam = families()[name] if name else None
        if fam and widens(fmt, fam) and native_pair_rate(unit, "unit", fmt, act.name):
            out.append(f"{workload.source or workload.name}: formats: {fmt}{' experts' if experts else ''} x "
                       f"{act.name}: stack {stack.name} runs them as {name}, widened to its {fam.rate_format} rate, though "
                       f"{machine.name} pairs them natively: that engine path is not modelled "
                       f"(hw_models/stack/presets/{stack.name}.yaml)")
    return out


def checkpoint_formats(workload: Workload, model: ModelConfig) -> list[str]:
    """A quantized checkpoint's config.json (quantization_config) run with the default 16-bit weights: sim costs the
    workload's formats, not the checkpoint's, which ran silently (a trial: an FP8 checkpoint costed as fp16)."""
    quant = model.checkpoint_quant
    if quant is None or "weights" in workload.formats.model_fields_set:
        return []
    fix = quant.fix(model.is_moe)
    return [f"{workload.source or workload.name}: model: {model.name}'s config.json is quantized ({quant.described}); "
            f"its weights cost as {workload.formats.weights} here: {fix}"]


def run_notes(workload: Workload, machine: Machine) -> list[str]:
    """The notes on a workload's settings and formats every run prints (`sim run`'s CLI adds the --ideal and --set
    ones): narrow activations without a rate too (`sim run` had said it per op only, `sim serve` in a line: a trial)."""
    return (unused_settings(workload, machine, workload.model_config_()) + stack_widens_native(workload, machine)
            + emulated_activations(workload, machine))


def input_notes(workload: Workload, machine: Machine) -> list[str]:
    """Every warning a run of `workload` on `machine` prints before it starts: `sim run`'s, and a serving file's as
    `sim serve` adds them. sim sweep gathers them over its points, which run with warnings off."""
    notes = run_notes(workload, machine) + ideal_unit(machine)
    if getattr(workload, "serving", None) is not None:
        notes += (unused_in_serving(workload, machine) + unread_plan(workload) + transfer_notes(workload)
                  + engine_mismatch(workload) + unshared_prefix(workload) + idle_clients(workload))
    return notes


def ideal_unit(machine: Machine) -> list[str]:
    """A gpu or cpu preset whose main unit gives neither `efficiency` nor `launch_overhead_s` runs at the ideal roofline
    (their defaults): said, as `--ideal` says it (a preset author's trial read such a run as a prediction)."""
    unit = machine.units[machine.main_unit]
    if machine.kind not in ("gpu", "cpu") or {"efficiency", "launch_overhead_s"} & unit.model_fields_set:
        return []
    return [f"{machine.source or machine.name}: units.{machine.main_unit} gives no efficiency or launch_overhead_s: "
            "the ideal roofline (every cap 1.0, no ramp, no launch), as --ideal runs; copy a similar GPU's figures "
            "(docs/presets.md)"]


def idle_clients(workload: Workload) -> list[str]:
    """A closed loop with more clients than requests: only num_requests are ever in flight (a trial ran 100 clients
    over 10 requests without a word)."""
    a, src = workload.serving.arrivals, workload.source or workload.name
    if getattr(a, "process", None) != "closed":
        return []
    notes = [f"{src}: serving.arrivals.concurrency {a.concurrency} exceeds num_requests {a.num_requests}: only "
             f"{a.num_requests} clients ever send; raise num_requests to load the engine with {a.concurrency}"] \
        if a.concurrency > a.num_requests else []
    if a.max_connections is not None and a.max_connections >= min(a.concurrency, a.num_requests):
        notes.append(f"{src}: serving.arrivals.max_connections {a.max_connections} holds every client's request "
                     f"({a.concurrency} clients): the pool never binds")
    lengths = workload.serving.lengths
    if a.concurrency > 1 and lengths is not None and lengths.prompt.dist == lengths.output.dist == "fixed":
        # A trial: 8 clients of 1024 + 128 tokens read TTFT 221 ms, every request alike, against 68 ms with outputs
        # of 115-141 tokens; `sim validate-serving` spreads a run's outputs for that reason (docs/serving.md).
        notes.append(f"{src}: serving.lengths: every request is the same length, so the {a.concurrency} clients run "
                     "in lock-step waves (their prompts prefill together, each TTFT a whole wave's); a measured "
                     "engine's lengths vary: give the output a spread (uniform low/high) to compare with one")
    return notes


def ignored_hw_overrides(machine: Machine, hw: dict) -> list[str]:
    """`--set hw.memory.<tier>.latency_s` where nothing reads it: only the offload kind's disk tier prices an access
    latency (offload.sched: a disk read's latency before its bytes); every other tier's streams start at the unit's
    memory_ramp_s (efficiency), so the run was the same and said nothing (a trial set 1 s on an a6000)."""
    disk = None
    if machine.kind == "offload":
        try:
            disk = host_spec(machine).disk_name
        except ConfigError:
            return []
    notes = []
    aliases = machine_aliases(machine)
    for key in hw:
        parts = resolve_aliases(key, aliases).split(".")
        if len(parts) != 3 or parts[0] != "memory" or parts[2] != "latency_s":
            continue
        if parts[1] != disk:
            notes.append(f"--set hw.{key}: no effect on {machine.name} ({machine.kind} kind): only an offload "
                         "preset's disk tier reads latency_s; a memory's ramp is its unit's efficiency.memory_ramp_s")
    return notes


def limits_above_tdp(machine: Machine) -> list[str]:
    """A power limit above the board's TDP runs uncapped up to it, an operating point no board offers: a
    datacenter GPU's maximum power limit is its TDP (nvidia-smi -q -d POWER: Max Power Limit 700 W on an
    H100 SXM). Said, not refused: a designer may mean a board of more power."""
    return [f"{machine.source or machine.name}: units.{name}.power_limit_w: {u.power_limit_w:g} W is above power_w "
            f"({u.power_w:g} W, the board's TDP and highest settable limit): the board runs as if uncapped to "
            f"{u.power_limit_w:g} W; raise power_w too for a board of more power"
            for name, u in machine.units.items() if u.power_limit_w and u.power_w and u.power_limit_w > u.power_w]


# The engines whose stack and scheduler are one program: a stack of one beside another's scheduler prices its
# kernels and per-request costs under a batching it does not run (sglang's ~110 ms per-request delay on vLLM's).
ENGINE_SCHEDULERS = {"vllm": ("vllm",), "vllm-v0": ("vllm-v0",), "vllm-v0-eager": ("vllm-v0",),
                     "sarathi": ("sarathi",), "sglang": ("sglang",), "trtllm": ("trtllm",)}


def engine_mismatch(workload: Workload) -> list[str]:
    """A serving file whose engine stack and scheduler are two engines': said (a serving researcher's trial ran
    `kind: vllm` under `stack: sglang` without a word). The torch stacks and no stack go with any scheduler."""
    serving, stack = getattr(workload, "serving", None), workload.stack
    want = ENGINE_SCHEDULERS.get(stack) if isinstance(stack, str) else None   # a stack file's engine is its own
    if serving is None or want is None or serving.scheduler.kind in want or serving.disaggregated is not None:
        return []
    return [f"{workload.source or workload.name}: stack {stack!r} runs beside scheduler.kind "
            f"{serving.scheduler.kind!r}: the {stack} engine's kernels and per-request costs priced under "
            f"another engine's batching; scheduler.kind: {want[0]} is {stack}'s own"]


def pim_ineligible(workload: Workload, machine: Machine) -> list[str]:
    """A PIM machine whose units compute none of this run's formats serves everything on its host, silently the
    plain GPU's figures (a hardware designer's trial: bf16 on an fp16-only PIM); `sim run` says it per op too (an
    architecture trial: fp16 on AiM's bf16 units ran at 1.00x without a warning)."""
    if machine.kind != "pim":
        return []
    pim = load_pim_config(machine.section("pim"), machine.source or machine.name).formats
    f = workload.formats
    act, weights, kv = (get_format(x).name for x in (f.activations, f.weights, f.kv_cache))
    if act in pim and (weights in pim or kv in pim):
        return []
    why = (f"activations in {act}" if act not in pim else f"weights in {weights} and KV cache in {kv}")
    return [f"{workload.source or workload.name}: formats: no op can run in {machine.name}'s PIM units, which compute "
            f"{'/'.join(pim)} only ({why}): every op runs on the host, as the GPU alone would"]


# What a serving run takes from its request stream instead of the workload's one batch; the offload kind
# reads them (a FlexGen block is one padded batch), the others do not.
PER_REQUEST = ("batch", "prompt_len", "gen_len")
BLOCK_KINDS = ("offload",)


def unused_in_serving(workload: Workload, machine: Machine) -> list[str]:
    """Workload fields a serving file sets that `sim serve` does not read on this machine's kind."""
    src = workload.source or workload.name
    if machine.kind in BLOCK_KINDS:   # the block is placed for them: defaults the file never set are named
        serving = getattr(workload, "serving", None)
        if serving is not None and serving.scheduler.kind != "static":
            return []   # refused in one line (the kind serves under static only): no note before it
        unset = [f"{k} {getattr(workload, k)}" for k in PER_REQUEST if k not in workload.model_fields_set]
        return [f"{src}: the {machine.kind} block is placed for {', '.join(unset)} (defaults, which the file does not set); "
                "requests past them are rejected: set them to the stream's longest"] if unset else []
    notes = [f"{src}: {key}: not read by sim serve (each request's lengths come from serving.lengths or the trace, "
             "the batch from the scheduler); only the offload kind's block reads it"
             for key in PER_REQUEST if key in workload.model_fields_set]
    serving = getattr(workload, "serving", None)
    if machine.kind == "spatial" and serving is not None and "gpu_memory_utilization" in serving.scheduler.model_fields_set:
        notes.append(f"{src}: serving.scheduler.gpu_memory_utilization: not read on {machine.name} (kind spatial): a "
                     "chip's KV pool fills the SRAM its compiler may use, spatial.usable_fraction (--set "
                     "hw.spatial.usable_fraction=...)")
    return notes


# sim's own preset files (hardware, stack, topology) live under this folder
PACKAGED = str(PRESET_DIR.parent)


@contextmanager
def naming(workload, machine, hw: dict | None = None, packaged_only: bool = False) -> Iterator[None]:
    """A SimError raised while simulating (the model does not fit, no native rate) names
    the workload file and the hardware it ran on, when the message does not already; a kind's section
    (host, pim, spatial) is checked only when the run builds it, so a bad `--set hw.<key>` read as the preset's
    own mistake (a trial): the key's --set is named. `packaged_only` (sim serve, whose inputs name themselves:
    a request trace's row, a pool's key): only a message that starts at one of sim's own files (a stack or topology
    preset) gets them."""
    try:
        yield
    except SimError as exc:
        msg, wl = str(exc), workload.source or workload.name
        if workload.source and workload.source in msg or packaged_only and not msg.startswith(PACKAGED):
            raise
        if machine.source and machine.source in msg:
            hit = next((k for k in hw or {} if f": {k}:" in msg), None)
            raise type(exc)(f"{msg} (workload {wl}{f'; from --set hw.{hit}' if hit else ''})") from None
        raise type(exc)(f"{wl} on {machine.source or machine.name}: {msg}") from None

"""Everything a serving run needs before its first event: the models, the KV pool
size, the step costs, the scheduler.

KV pool = device capacity x gpu_memory_utilization - weights - peak activations -
the runtime's own memory (RUNTIME_RESERVED_BYTES), the way vLLM sizes its cache (it profiles one forward pass of max_num_batched_tokens
tokens over max_num_seqs sequences and gives the rest of its memory share to blocks). Under a
`parallel:` plan each term is one device's (sim.apps.serve.placement), in blocks of that device's
share of the KV layout; Setup's weights, activations and block bytes are per device, its
kv_bytes_per_token the whole instance's (what a disaggregated transfer moves).
"""

from __future__ import annotations

from dataclasses import dataclass

from hw_models.base import OwnPool
from hw_models.machine import Machine
from sim.apps.serve import spec as s
from sim.apps.serve.attention_dp import GroupedCost
from sim.apps.serve.placement import device_share
from sim.apps.serve.schedulers import Scheduler, scheduler_class
from sim.apps.serve import tablecache
from sim.apps.serve.tablecache import MemoryStore, TableStore
from sim.apps.serve.serving_mapper import check_kind, check_speculative, serving_mapper
from sim.apps.serve.stepcost import ExactCost, StepCost, Surrogate
from sim.apps.serve.traces import Requests
from sim.core.errors import CapacityError, ConfigError
from sim.core.footprint import kv_bytes, weight_bytes
from sim.core.mixed import lower_iteration
from sim.core.model import ModelConfig, load_model
from sim.core.units import fmt_bytes


GRID_MAX_TOKENS = 16384
# Device memory a serving process keeps from KV besides weights and the profiled activations: the CUDA
# context, library workspaces, CUDA-graph pools, the sampler's buffers, and what the card reports short of
# its datasheet capacity. Calibrated on one measured case, vLLM 0.19 on an RTX 4090 (2,588 KV blocks of
# Llama-3.1-8B at gpu_memory_utilization 0.9: shared/validation/serving/llmservingsim/RTX4090_Llama-3.1-8B/
# vllm/meta.json; scripts/serving_validation.py recomputes it). Not a per-machine figure; see docs/serving.md.
RUNTIME_RESERVED_BYTES = 1.528e9


@dataclass
class Setup:
    file: s.ServeFile
    machine: Machine
    model: ModelConfig
    draft: ModelConfig | None
    target_cost: StepCost
    draft_cost: StepCost | None
    kv_bytes_per_token: float
    block_bytes: float
    total_blocks: int
    weights_bytes: float
    activation_bytes: float
    swap_bytes_per_s: float | None
    max_tokens: int
    max_seqs: int
    max_model_len: int
    groups: int = 1                  # attention groups (sim.apps.serve.attention_dp)
    max_prompt: int | None = None    # longest prompt a kind that places its own KV was placed for
    placed: str = ""                 # how that kind placed it (OwnPool.describe), for the report
    kv_share: float = 1.0            # the share of a token's KV one device holds (1 / TP where the KV heads split)

    def scheduler(self, requests: Requests) -> Scheduler:
        cfg = self.file.serving.scheduler
        pc = self.file.serving.prefix_caching
        block = cfg.block_tokens
        unit = -(-requests.hash_block_tokens // block) if requests.hash_ids else 1
        cls = scheduler_class(cfg)
        pool = cls.pool_class(self.total_blocks, block, unit, bool(pc and pc.enabled and cfg.paged))
        spec = self.file.serving.speculative
        lookahead = spec.k if spec else 0
        sched = cls(cfg, pool, lookahead, self.max_tokens if cls.whole_prompts else None)
        sched.max_model_len = self.max_model_len
        sched.max_seqs = self.max_seqs   # the settings' figure, or the block of a kind that places its own KV
        sched.max_prompt = self.max_prompt
        return sched


def _kv_per_token(m: ModelConfig, file: s.ServeFile) -> float:
    return kv_bytes(m, file.formats.policy(), 1, 1)


def _pool_blocks(file, machine: Machine, model: ModelConfig, share, held: tuple[float, float], block_bytes: float
                 ) -> int:
    """KV blocks of the instance: each device's room after its weights and activations (`held`) and the
    runtime's reserve, in blocks, over its attention groups. A kind's own usable share (spatial.usable_fraction:
    what a chip's compiler may fill) stands for the serving engine's allocator share (a spatial pool had filled 0.9
    of the SRAM at usable_fraction 0.5, a code review)."""
    cfg, tier = file.serving.scheduler, machine.memory[machine.device_tier]
    reserved = RUNTIME_RESERVED_BYTES if share.reserved_bytes is None else share.reserved_bytes
    usable, of = ((share.usable_bytes, "the device's usable memory") if share.usable_bytes is not None else
                  (tier.capacity_bytes * cfg.gpu_memory_utilization, f"{cfg.gpu_memory_utilization:g} of "
                   f"{fmt_bytes(tier.capacity_bytes)} per device (serving.scheduler.gpu_memory_utilization)"))
    room = usable - sum(held) - reserved
    if room < block_bytes:
        raise CapacityError(f"{file.source}: {model.name} on {machine.name}: weights {fmt_bytes(held[0])} + activations "
                            f"{fmt_bytes(held[1])} + runtime {fmt_bytes(reserved)} leave no room for KV blocks in "
                            f"{fmt_bytes(usable) + ', ' if share.usable_bytes is not None else ''}{of}")
    return int(room // block_bytes) * share.groups


def prepare(file: s.ServeFile, machine: Machine, exact: bool = False, cache: dict | None = None) -> Setup:
    """`cache` (a dict the caller keeps) shares surrogate tables between runs of one model and machine."""
    check_kind(machine, file)
    check_speculative(machine, file)
    model = file.model_config_()
    srv = file.serving
    fmt = file.formats.policy()
    draft = _draft(file, model) if srv.speculative else None
    cfg = srv.scheduler
    max_model_len = cfg.context_len or model.max_position_embeddings
    max_seqs = cfg.max_seqs
    max_tokens = cfg.token_budget or max(max_model_len, 2048)
    # Per device of the instance (sim.apps.serve.placement): the parallel plan's share of the
    # target's weights, KV heads and layers, and the rank's activations. The draft runs under the same plan
    # (vLLM's draft TP defaults to the target's; its step cost is priced so, _costs), so its share is its own
    # plan's: its weights and KV heads sharded as its step is.
    mapper = serving_mapper(machine, file, model)
    share = device_share(file, mapper)
    dshare = (serving_mapper(machine, draft_file(file, draft), draft).device_share()
              if draft else None)
    weights = weight_bytes(model, fmt) * share.weights + (weight_bytes(draft, fmt) * dshare.weights if draft else 0)
    per_token = _kv_per_token(model, file) + (_kv_per_token(draft, file) if draft else 0)
    rank_token = _kv_per_token(model, file) * share.kv + (_kv_per_token(draft, file) * dshare.kv if draft else 0)
    act = _profile_activations(mapper, min(max_tokens, max_seqs * max_model_len), max_seqs)
    block = cfg.block_tokens
    max_prompt: int | None = None
    own = mapper.serving_pool()
    if own is not None:   # the kind places its KV itself (offload: the policy's block, on GPU, CPU or disk)
        _check_block(file, machine, own)
        max_seqs, max_model_len, max_prompt = own.sequences, own.context_tokens, own.prompt_tokens
        total_blocks = max_seqs * -(-max_model_len // block)
    else:
        total_blocks = cfg.blocks_override or _pool_blocks(file, machine, model, share, (weights, act),
                                                           rank_token * block)
    sp = srv.speculative
    # By content, not id(machine): an id is reused once its machine is collected, and a cache keyed by it would
    # hand another machine this one's step costs. The file's part: every field a step cost reads (the stack, the
    # parallel plan among the sections), and the loaded model's and draft's configs: a config.json whose content
    # changed at the same path is another model.
    used = {"model", "formats", "flash_attention", "compute", "stack", "sections", "moe"}
    exact = exact or mapper.serving_exact
    key = (machine.model_dump_json(), file.model_dump_json(include=used | ({"batch", "prompt_len", "gen_len"} if own else set())),
           repr(model), repr(draft), exact, max_tokens, max_seqs, max_model_len, sp.model_dump_json() if sp else None)
    costs = cache.get(key) if cache is not None else None
    if costs is None:
        costs = _costs(file, machine, model, draft, exact, max_tokens, max_seqs, max_model_len, share.groups)
        if cache is not None:
            cache[key] = costs
    return Setup(file, machine, model, draft, costs[0], costs[1], per_token, rank_token * block, total_blocks,
                 weights, act, _swap_rate(file, mapper) if cfg.swaps else None,
                 max_tokens, max_seqs, max_model_len, share.groups, max_prompt, own.describe if own else "",
                 share.kv)


def _check_block(file: s.ServeFile, machine: Machine, own: OwnPool) -> None:
    """A static batch size, where given, must be the block the kind places (offload: the workload's batch and
    policy, as `sim run` reads them)."""
    cfg = file.serving.scheduler
    if "batch_size" in cfg.model_fields_set and cfg.batch_size != own.sequences:
        raise ConfigError(f"{file.source}: serving.scheduler.batch_size: {cfg.batch_size}, but kind {machine.kind} "
                          f"runs blocks of {own.sequences} sequences (the workload's batch and policy); set one to "
                          "the other or leave batch_size out")


def _costs(file, machine, model, draft, exact, max_tokens, max_seqs, max_model_len, groups=1):
    spec = file.serving.speculative
    q = spec.k + 1 if spec else 1
    # Under attention groups the target costs each group's own ops; the experts' part is GroupedCost's.
    target = ExactCost(machine, file, model, experts=groups == 1)
    # The engine's host work is paid once per iteration, with the target's verify step.
    dcost = ExactCost(machine, draft_file(file, draft), draft,
                      host=False) if draft else None
    # Decode tokens of a speculative iteration are verify rows, k + 1 per sequence.
    # The grid stops at GRID_MAX_TOKENS: larger iterations (an unlimited token budget) are costed exactly.
    top = min(max_tokens + max_seqs * q, GRID_MAX_TOKENS)
    store = _store(file, machine, model, groups == 1)
    dense = dict(dense_decodes=target.mapper.serving_dense_decodes, dense_kv=target.mapper.serving_dense_kv)
    if groups > 1:   # each attention group's own ops, then the shared experts (sim.apps.serve.attention_dp)
        return GroupedCost(target if exact else Surrogate(target, top, min(max_seqs, top), max_model_len, store=store,
                                                          **dense), target.mapper), None
    if exact:
        return target, dcost
    sur = Surrogate(target, top, min(max_seqs, top // q), max_model_len, q, store=store, **dense)
    return sur, (Surrogate(dcost, top, min(max_seqs, top), max_model_len, 1,
                           store=_store(draft_file(file, draft), machine,
                                        draft, True), **dense) if dcost else None)


# ServeFile fields no step cost reads; every other field (formats, stack, the parallel plan among the
# sections, ...) is part of the persistent tables' key, so a field added later is keyed by default.
_NOT_COSTED = {"name", "source", "batch", "prompt_len", "gen_len", "serving"}


def _store(file: s.ServeFile, machine: Machine, model: ModelConfig, experts: bool) -> TableStore | MemoryStore:
    """The store of one step cost's surrogate points (sim.apps.serve.tablecache): on disk, or in this
    process only when the persistent cache is off."""
    key = tablecache.make_key(machine.model_dump_json(), file.model_dump_json(exclude=_NOT_COSTED), model, experts)
    return TableStore(key) if tablecache.enabled() else MemoryStore(key)


def _profile_activations(mapper, tokens: int, seqs: int) -> float:
    """One device's activation peak over vLLM's profiling pass (one layer of `seqs` equal prompts)."""
    n = max(1, min(seqs, tokens))
    q = tokens // n
    graph = lower_iteration(mapper.model, ((q, q),) * n, mapper.formats, mapper.workload.flash_attention, 1)
    return mapper.rank_activation_bytes(graph)


def draft_file(file: s.ServeFile, draft: ModelConfig) -> s.ServeFile:
    """The serving file the draft's steps are costed under: the target's, the draft its model. A dense draft of a MoE
    target keeps the tensor parallelism and drops the expert ways (it has no experts to place; speculation with
    ep > tp, attention groups, is refused before this: sim.apps.serve.placement)."""
    f = file.model_copy(update={"model": file.serving.speculative.draft})
    par = f.sections.get("parallel")
    if draft.is_moe or not isinstance(par, dict) or par.get("ep", 1) == 1:
        return f
    return f.model_copy(update={"sections": {**f.sections, "parallel": {**par, "ep": 1}}})


def _draft(file: s.ServeFile, model: ModelConfig) -> ModelConfig:
    d = file.serving.speculative.draft
    try:
        draft = load_model(d, file.source or None)
    except ConfigError as exc:   # load_model names `model:`, the target's key (a trial's unknown draft read so)
        src = f"{file.source}: " if file.source else ""
        msg = str(exc)
        raise ConfigError(f"{src}serving.speculative.draft: {msg.removeprefix(f'{src}model: ')}"
                          if msg.startswith(f"{src}model: ") else msg) from None
    if draft.vocab_size != model.vocab_size:
        raise ConfigError(f"{file.source}: serving.speculative.draft: {draft.name} has a vocabulary of "
                          f"{draft.vocab_size} tokens, {model.name} of {model.vocab_size}; a draft must share "
                          "the target's tokenizer")
    return draft


def _swap_rate(file: s.ServeFile, mapper) -> float:
    cfg = file.serving.scheduler
    if cfg.swap_bandwidth_bytes_per_s:
        return cfg.swap_bandwidth_bytes_per_s
    rate = mapper.swap_bytes_per_s()
    if rate is not None:
        return rate
    raise ConfigError(f"{file.source}: serving.scheduler.preemption: swap needs a host link, and {mapper.machine.name} "
                      "has none; set serving.scheduler.swap_bandwidth_bytes_per_s (e.g. 25 GB/s for PCIe 4.0 x16)")

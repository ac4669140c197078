"""The workload's `parallel:` section (hw_models.gpu.parallel's module doc) and its checks
against the model and the node's topology."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictInt

from hw_models.network.topology import Topology, load_topology, preset_names as topology_names
from sim.core.errors import ConfigError
from sim.core.schema import Strict, validate_mapping


def is_pipelined(pp: int, micro_batches: int) -> bool:
    """Whether a plan of `pp` stages and `micro_batches` runs as a pipeline: ParallelPlan.pipelined, and the reports'
    reading of a plan's record (its to_dict) by the same rule."""
    return pp > 1 or micro_batches > 1


class ParallelPlan(Strict):
    # StrictInt: `tp: true` or `tp: "4"` are refused, not read as 1 or 4.
    tp: StrictInt = Field(default=1, gt=0)
    pp: StrictInt = Field(default=1, gt=0)
    dp: StrictInt = Field(default=1, gt=0)
    ep: StrictInt = Field(default=1, gt=0)
    micro_batches: StrictInt = Field(default=1, gt=0)
    topology: str | None = None
    nodes: StrictInt | None = Field(default=None, gt=0)   # nodes of the topology (None: its preset's; a fabric joins them)
    # network.collectives; None: the stack's `all_reduce` (the engine's own), else ring
    algorithm: Literal["ring", "tree", "nccl", "trtllm_custom", "vllm_custom", "sglang_custom"] | None = None
    source: str = Field(default="", exclude=True)

    @property
    def stage_width(self) -> int:
        """Devices of one pipeline stage: the larger of the TP and EP groups."""
        return max(self.tp, self.ep)

    @property
    def instance_devices(self) -> int:
        """Devices of one replica: a stage's devices times the stages."""
        return self.stage_width * self.pp

    @property
    def devices(self) -> int:
        return self.instance_devices * self.dp

    @property
    def pipelined(self) -> bool:
        """Whether a step runs as pipeline stages over micro-batches (ParallelGpuMapper.pipeline_tasks)."""
        return is_pipelined(self.pp, self.micro_batches)

    @property
    def attention_dp(self) -> int:
        """Ranks of an EP group that split the batch for attention (tp = 1, ep = n)."""
        return max(1, self.ep // self.tp)


def load_plan(raw: dict[str, Any] | None, source: str, model, machine) -> tuple[ParallelPlan, Topology | None]:
    """The workload's `parallel:` section, checked against the model and the topology."""
    src, m = source or "workload", model
    plan = validate_mapping(ParallelPlan, raw or {}, f"{src}: parallel", "a mapping of parallel fields")

    def bad(key: str, why: str) -> ConfigError:
        return ConfigError(f"{src}: parallel.{key}: {why}")

    if m.num_heads % plan.tp or m.hidden_size % plan.tp:
        raise bad("tp", f"{plan.tp} does not divide {m.name}'s {m.num_heads} heads and hidden size {m.hidden_size}")
    if m.num_kv_heads % plan.tp and plan.tp % m.num_kv_heads:
        raise bad("tp", f"{plan.tp} neither divides nor is a multiple of {m.name}'s {m.num_kv_heads} KV heads")
    if plan.pp > m.num_layers:
        raise bad("pp", f"{plan.pp} stages but {m.name} has {m.num_layers} layers")
    if plan.ep > 1:
        _check_ep(plan, m, bad)
    topo = None
    if plan.instance_devices > 1:
        if plan.topology is None:
            raise bad("topology", f"needed when a replica spans devices: one of {', '.join(topology_names())} "
                                  "(sim hw list --topologies), or a topology YAML file")
        topo = load_topology(plan.topology, src, "parallel.topology")
        if plan.nodes is not None:
            if plan.nodes > 1 and topo.fabric is None:
                raise bad("nodes", f"{plan.nodes}, but {topo.name} has no fabric between nodes")
            topo = topo.model_copy(update={"nodes": plan.nodes})
        # the node's GPU, or a preset of it (h200_calibrated on hgx_h200): the names' first word
        if topo.device.split("_")[0] != machine.name.split("_")[0]:
            raise bad("topology", f"{topo.name} holds {topo.device} devices, not {machine.name}")
        topo.check_ranks(plan.instance_devices, "parallel.max(tp, ep) x pp", src)
        if plan.nodes is not None and plan.devices > topo.devices:   # nodes stated: the replicas must fit them too
            raise bad("nodes", f"{plan.nodes} node(s) of {topo.devices_per_node} hold {topo.devices} devices, but dp "
                               f"{plan.dp} x {plan.instance_devices} devices per replica need {plan.devices}; "
                               f"parallel.nodes: {-(-plan.devices // topo.devices_per_node)}")
    return plan, topo


def _check_ep(plan: ParallelPlan, m, bad) -> None:
    """ep ranks hold the experts; ep / tp attention groups of tp ranks each (module doc)."""
    if not m.is_moe:
        raise bad("ep", f"{plan.ep}, but {m.name} is a dense model (no experts to place)")
    if plan.ep > m.num_experts:
        raise bad("ep", f"{plan.ep} ranks but {m.name} has {m.num_experts} experts")
    if m.num_experts % plan.ep:
        raise bad("ep", f"{plan.ep} does not divide {m.name}'s {m.num_experts} experts")
    if plan.ep % plan.tp:
        raise bad("ep", f"{plan.ep} is not a multiple of tp {plan.tp}: the ep ranks form ep / tp "
                  "attention groups of tp ranks")

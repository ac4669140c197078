"""What one device of a serving instance holds under the file's parallel plan (issue 14):
its share of the weights, of each token's KV cache and of the profiled activations.

An instance of tp x pp devices (max(tp, ep) x pp for MoE) keeps every KV block on all the
devices of its attention group at once, each device the block's share of its own KV heads
(replicated past the model's KV heads) and of its stage's layers. So a group's pool, in
blocks, is what every device can hold: min over devices of (capacity x gpu_memory_utilization - that device's weights -
its activations - the runtime's reserve) / that device's bytes per block. The devices of a
plan are alike except for how many layers a stage has; the busiest stage sets the pool.
Under data-parallel attention (ep = g x tp, g > 1; sim.apps.serve.attention_dp) the g
groups each hold their own sequences' KV, so the instance's pool is g times a group's:
one pool of g x (blocks per device), shared by the scheduler; a request's blocks sit on
its group's devices, and a group may take more than its 1/g of the pool while the
others hold less (round-robin assignment keeps the groups' request counts within one).
Weights per device follow ParallelGpuMapper.footprint: dense weights x weight_fraction(tp)
(K/V projections replicated past the KV heads), experts / max(tp, ep), over pp stages.
"""

from __future__ import annotations

from dataclasses import dataclass

from hw_models.gpu.expert_parallel import expert_weight_bytes, moe_rank
from hw_models.gpu.parallel import load_plan
from hw_models.gpu.tensor_parallel import kv_fraction, shard, weight_fraction
from hw_models.machine import Machine
from sim.core.errors import ConfigError
from sim.core.footprint import activation_peak_bytes, weight_bytes
from sim.core.graph import OpGraph
from sim.core.model import ModelConfig


@dataclass(frozen=True)
class DeviceShare:
    """Fractions of the whole model's figures that the busiest device of the instance holds."""

    devices: int = 1
    weights: float = 1.0        # of the weight bytes
    kv: float = 1.0             # of each token's KV bytes
    tp: int = 1
    ep: int = 1
    groups: int = 1             # attention groups (ep / tp): each holds its own sequences' KV

    def rank_graph(self, graph: OpGraph, model: ModelConfig) -> OpGraph:
        """One rank's share of a profiling iteration (for its activation peak)."""
        if model.is_moe and max(self.tp, self.ep) > 1:
            return moe_rank(graph, model, self.tp, self.ep)[0]
        return shard(graph, model, self.tp)[0]

    def activations(self, graph: OpGraph, model: ModelConfig) -> float:
        return float(activation_peak_bytes(self.rank_graph(graph, model)))


def device_share(file, machine: Machine, model: ModelConfig, fmt) -> DeviceShare:
    """The busiest device's share under `file`'s `parallel:` section (a whole device without one)."""
    raw = file.section("parallel")
    if raw is None or machine.kind not in ("gpu", "cpu"):
        return DeviceShare()
    plan, _ = load_plan(raw, file.source, model, machine)
    if plan.attention_dp > 1:
        _check_attention_dp(file, plan)
    if plan.pp > 1 or plan.micro_batches > 1:
        # A serving step is one mixed batch (prefills beside decodes); the pipeline schedule
        # (hw_models/gpu/parallel.py) splits prefill or decode graphs only: a ValueError before.
        key = "pp" if plan.pp > 1 else "micro_batches"
        raise ConfigError(f"{file.source or 'workload'}: parallel.{key}: {getattr(plan, key)}: serving is modelled "
                          "with pipeline parallelism off (pp 1, micro_batches 1); use tp, or replicas "
                          "(serving.router) for more devices")
    total = weight_bytes(model, fmt)
    experts = expert_weight_bytes(model, fmt)
    layers = -(-model.num_layers // plan.pp)           # the busiest stage's layers
    dense = (total - experts) * weight_fraction(model, plan.tp)
    weights = (dense + experts / max(plan.tp, plan.ep)) / plan.pp / total
    return DeviceShare(plan.instance_devices, weights, kv_fraction(model, plan.tp) * layers / model.num_layers,
                       plan.tp, plan.ep, plan.attention_dp)


def _check_attention_dp(file, plan) -> None:
    """What serving under data-parallel attention (sim.apps.serve.attention_dp) does not model: one line."""
    src, srv = file.source or "workload", file.serving
    if plan.pp > 1:
        raise ConfigError(f"{src}: parallel.pp: {plan.pp} with ep {plan.ep} > tp {plan.tp}: serving with "
                          "data-parallel attention is modelled with pp = 1")
    if srv.speculative is not None:
        raise ConfigError(f"{src}: serving.speculative: not modelled with ep {plan.ep} > tp {plan.tp} "
                          "(data-parallel attention)")
    if srv.scheduler.kind == "static":
        raise ConfigError(f"{src}: serving.scheduler.kind: static batches are not split over attention "
                          f"groups (ep {plan.ep} > tp {plan.tp}); use orca, vllm or sarathi")

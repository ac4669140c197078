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

The shares themselves are the hardware kind's (Mapper.device_share, rank_activation_bytes:
the gpu kind's follow ParallelGpuMapper.footprint); this module only refuses what serving
does not model under them.
"""

from __future__ import annotations

from hw_models.base import DeviceShare, Mapper
from sim.core.errors import ConfigError


def device_share(file, mapper: Mapper) -> DeviceShare:
    """The busiest device's share under `file`'s `parallel:` section (a whole device without one)."""
    share = mapper.device_share()
    if share.groups > 1:
        _check_attention_dp(file, share)
    if share.pp > 1 and file.serving.speculative is not None:
        raise ConfigError(f"{file.source or 'workload'}: serving.speculative: not modelled with parallel.pp "
                          f"{share.pp} (pipeline parallelism)")
    return share


def _check_attention_dp(file, share: DeviceShare) -> None:
    """What serving under data-parallel attention (sim.apps.serve.attention_dp) does not model: one line."""
    src, srv = file.source or "workload", file.serving
    if share.pp > 1:
        raise ConfigError(f"{src}: parallel.pp: {share.pp} with ep {share.ep} > tp {share.tp}: serving with "
                          "data-parallel attention is modelled with pp = 1")
    if srv.speculative is not None:
        raise ConfigError(f"{src}: serving.speculative: not modelled with ep {share.ep} > tp {share.tp} "
                          "(data-parallel attention)")
    if not srv.scheduler.splits_over_groups:
        raise ConfigError(f"{src}: serving.scheduler.kind: {srv.scheduler.kind} batches are not split over "
                          f"attention groups (ep {share.ep} > tp {share.tp}); use orca, vllm or sarathi")

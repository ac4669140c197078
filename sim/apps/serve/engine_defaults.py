"""Settings an engine derives from the GPU it runs on, where the serving file leaves them out.

vLLM V1's OpenAI server takes its token budget and sequence cap from the device (vllm/engine/arg_utils.py,
EngineArgs.get_batch_defaults): 8192 tokens and 1024 sequences on a GPU of at least 70 GiB that is not an A100
("Setting large max_num_batched_tokens for A100 reduces throughput", vLLM pull 17885), else 2048 and 256 (the
Vllm class's defaults). A file that sets either keeps it. vLLM V0's budget without one is max(max_model_len, 2048)
(vllm/config.py SchedulerConfig, V0 without chunked prefill), on any device.
"""

from __future__ import annotations

from hw_models.machine import Machine
from sim.apps.serve.spec import ServeFile

LARGE_GPU_BYTES = 70 * 2**30
LARGE_GPU_DEFAULTS = {"max_num_batched_tokens": 8192, "max_num_seqs": 1024}


def large_gpu(machine: Machine) -> bool:
    """vLLM's test: at least 70 GiB of device memory, and "a100" not in the device's name."""
    tier = machine.memory.get(machine.device_tier)
    return (machine.kind == "gpu" and tier is not None and tier.capacity_bytes >= LARGE_GPU_BYTES
            and "a100" not in f"{machine.name} {machine.description}".lower())


def with_engine_defaults(file: ServeFile, machine: Machine) -> ServeFile:
    """`file` with the engine's device-derived defaults filled in where it leaves them out (module doc). Pools of
    a disaggregated file run on machines of their own: left as written here, each pool's filled for its own preset
    (pool_defaults, from sim.apps.serve.disagg.pool_setup)."""
    return file if file.serving.disaggregated is not None else pool_defaults(file, machine)


def pool_defaults(file: ServeFile, machine: Machine) -> ServeFile:
    """`file`'s scheduler with vLLM's defaults for `machine` where the file leaves them out, whatever else it holds."""
    cfg = file.serving.scheduler
    if cfg.kind == "vllm-v0" and cfg.max_num_batched_tokens is None:   # V0: max(max_model_len, 2048) (SchedulerConfig)
        # it had sized the cost grid but never held a step to it (a serving trial: 15,000 tokens in one step)
        fill = {"max_num_batched_tokens": max(file.model_config_().max_position_embeddings, 2048)}
    elif cfg.kind != "vllm" or not large_gpu(machine):
        return file
    else:
        fill = {k: v for k, v in LARGE_GPU_DEFAULTS.items() if k not in cfg.model_fields_set}
    if not fill:
        return file
    scheduler = cfg.model_copy(update=fill)
    return file.model_copy(update={"serving": file.serving.model_copy(update={"scheduler": scheduler})})

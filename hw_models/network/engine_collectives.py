"""Collectives as the engines run them in one node: NCCL's protocols and the engines' custom all-reduce.

NCCL picks, per call, the algorithm and protocol its tuner predicts fastest (each an
alpha-beta line: LL for small messages, Simple for large). One alpha-beta line per group
size cannot follow both (a line through the large messages charges several times NCCL's
small-message latency), so algorithm `nccl` charges the faster of two fitted lines:
time = min_p (steps x alpha_p + factor x S / B_p), with the ring's steps and factor
(hw_models.network.collectives.alpha_beta).

TensorRT-LLM and vLLM run their own all-reduce below a size limit (peer-to-peer loads over
NVLink, one kernel) and NCCL above it:
* one-shot: every rank reads the whole buffer from each of its n-1 peers and reduces it:
  alpha_1 + (n-1) S / B_1;
* two-shot: a reduce-scatter then an all-gather through the same buffers:
  alpha_2 + 2 (n-1)/n S / B_2.
Which one runs, by group size and message bytes, is read from the engines' source:
* TensorRT-LLM cpp/tensorrt_llm/thop/allreduceOp.cpp (AllreduceOp::selectImplementation, AUTO
  strategy): 2 ranks one-shot; up to 4 ranks one-shot below 1e6 B, else two-shot; more ranks
  one-shot below 5e5 B, else two-shot; NCCL above the workspace
  (customAllReduceUtils::getMaxRequiredWorkspaceSize: 16 MiB up to 2 ranks, 8 MiB above);
* vLLM csrc/custom_all_reduce.cuh (CustomAllreduce::allreduce): 2 ranks one-shot
  (cross_device_reduce_1stage); with full NVLink one-shot below 512 KiB up to 4 ranks and
  below 256 KiB up to 8, else two-shot (cross_device_reduce_2stage); NCCL at or above
  custom_all_reduce.py's max_size (8 MiB);
* SGLang from 0.5.12 (sgl-project/sglang PR #24363, "Turn on JIT custom AR implementation by
  default") runs its own JIT kernel, CustomAllReduceV2
  (python/sglang/srt/distributed/device_communicators/custom_all_reduce_v2.py): one-shot up to
  THRESHOLD_2_SHOT_MAP's limit for the group size (non-SM100 map, "benchmarks on H200 GPUs": 2 ranks
  every size, 4 ranks 384 KiB, 8 ranks 160 KiB), two-shot above, NCCL above max_size (the 16 MiB
  pull buffer; should_custom_ar: size <= max_size). It needs full NVLink at every group size
  (can_use_custom_all_reduce_v2: can_use_custom_all_reduce_with_nvlink(...) is True). Without it
  SGLang 0.5.12 hands every message to NCCL (PR #24742 disabled the whole custom backend; issue
  #25649) and later releases fall back to the v1 kernel, vLLM's (PR #25650).
  SGLang before 0.5.12 runs the v1 kernel: vLLM's.
The fitted figures are in engine_collectives.yaml, written by scripts/fit_kernels.py from
aiconfigurator's measured tables of the in-sample GPUs (shared/validation/aic).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import Field

from sim.core.errors import ConfigError
from sim.core.schema import Quantity, Strict, read_yaml, validate_mapping

FITS_FILE = Path(__file__).parent / "engine_collectives.yaml"
ONE_SHOT, TWO_SHOT = "one_shot", "two_shot"
KiB, MiB = 1024, 1024 * 1024


class Line(Strict):
    """One alpha-beta line: latency + bytes moved / bandwidth."""

    latency_s: Quantity = Field(ge=0)
    bandwidth_bytes_per_s: Quantity = Field(gt=0)


class NodeFits(Strict):
    """A node topology's fits, by group size: NCCL's protocol lines per collective, and each
    engine's one-shot and two-shot lines."""

    fitted_on: str = ""                                      # the measured table fitted
    nccl: dict[str, dict[int, list[Line]]] = {}              # collective -> ranks -> lines (min of)
    custom: dict[str, dict[int, dict[str, Line]]] = {}       # engine -> ranks -> one_shot / two_shot


class Fits(Strict):
    nodes: dict[str, NodeFits]
    source: str = Field(default="", exclude=True)   # the file (validate_mapping)


@cache
def _load(path: Path, mtime_ns: int) -> dict[str, NodeFits]:
    return validate_mapping(Fits, read_yaml(path), str(path), "a mapping with `nodes:`").nodes


def node_fits(topology: str, path: Path = FITS_FILE) -> NodeFits | None:
    if not path.is_file():
        return None
    return _load(path, path.stat().st_mtime_ns).get(topology)


def nccl_s(topology: str, kind: str, nbytes: float, ranks: int, steps: float, factor: float,
           bandwidth_scale: float = 1.0) -> float | None:
    """NCCL's time for `kind` (ring steps and bandwidth factor given) from the fitted protocol
    lines, None where the topology has no fit for this collective and group size. `bandwidth_scale`
    multiplies the fitted bandwidths (a node taking another's fits: Topology.collectives_bandwidth_scale)."""
    fits = node_fits(topology)
    lines = fits.nccl.get(kind, {}).get(ranks) if fits else None
    if not lines:
        return None
    return min(steps * ln.latency_s + factor * nbytes / (ln.bandwidth_bytes_per_s * bandwidth_scale)
               for ln in lines)


# SGLang CustomAllReduceV2's one-shot limit per group size (THRESHOLD_2_SHOT_MAP, non-SM100: the
# push threshold; 4 ranks: push 384 KiB > pull 256 KiB, so one-shot push up to 384 KiB then two-shot)
SGLANG_V2_ONE_SHOT = {2: float("inf"), 3: 512 * KiB, 4: 384 * KiB, 5: 256 * KiB, 6: 192 * KiB, 7: 192 * KiB,
                      8: 160 * KiB}
SGLANG_V2_MAX = 16 * MiB          # max_pull_size default; should_custom_ar admits size <= max_size
SGLANG_V2_FROM = (0, 5, 12)       # PR #24363 in the 0.5.12 release
SGLANG_V1_FALLBACK_FROM = (0, 5, 13)   # PR #25650 (graceful fallback) after 0.5.12; the tables have 0.5.14


def release(version: str) -> tuple[int, ...]:
    """'0.5.6.post2' -> (0, 5, 6, 2): an engine release as a comparable tuple."""
    return tuple(int(p) for p in str(version).replace("rc", ".").replace("post", ".").split(".") if p.isdigit())


def sglang_algorithm(version: str, nvlink: bool) -> str:
    """The collective algorithm an SGLang release runs for all-reduce (module doc): the v1 kernel
    (vLLM's) before 0.5.12; CustomAllReduceV2 from then on, which without full NVLink is NCCL in
    0.5.12 and the v1 kernel after."""
    v = release(version)
    if v < SGLANG_V2_FROM:
        return "vllm_custom"
    if not nvlink and v < SGLANG_V1_FALLBACK_FROM:
        return "nccl"
    return "sglang_custom"


def custom_kernel(engine: str, nbytes: float, ranks: int) -> str | None:
    """ONE_SHOT, TWO_SHOT or None (the engine hands the message to NCCL): module doc."""
    if engine == "sglang":
        if ranks not in SGLANG_V2_ONE_SHOT or nbytes > SGLANG_V2_MAX:
            return None
        return ONE_SHOT if nbytes <= SGLANG_V2_ONE_SHOT[ranks] else TWO_SHOT
    if engine == "trtllm":
        if nbytes > (16 * MiB if ranks <= 2 else 8 * MiB):
            return None
        if ranks <= 2:
            return ONE_SHOT
        return ONE_SHOT if nbytes < (1e6 if ranks <= 4 else 5e5) else TWO_SHOT
    if engine == "vllm":
        if nbytes >= 8 * MiB:
            return None
        if ranks <= 2:
            return ONE_SHOT
        return ONE_SHOT if nbytes < (512 * KiB if ranks <= 4 else 256 * KiB) else TWO_SHOT
    raise ConfigError(f"unknown custom all-reduce {engine!r}; engines: trtllm, vllm, sglang")


def custom_allowed(engine: str, topo, ranks: int) -> bool:
    """Whether the engine runs its custom all-reduce on this node at all: both need peer access over
    NVLink. TensorRT-LLM's AUTO strategy returns NCCL without NVLink (allreduceOp.cpp:
    `if (isAuto && !mIsNVLINKSupported) return NCCL`); vLLM disables it on more than two PCIe-only
    GPUs (custom_all_reduce.py: full_nvlink required for world_size > 2); SGLang's
    CustomAllReduceV2 needs full NVLink at any group size."""
    if topo.interconnect.kind == "nvswitch":
        return True
    return engine == "vllm" and ranks == 2


def custom_all_reduce_s(topology: str, engine: str, nbytes: float, ranks: int,
                        bandwidth_scale: float = 1.0) -> float | None:
    """The engine's custom all-reduce time, None where it hands the message to NCCL or the
    topology has no fit for the engine at this group size (`bandwidth_scale`: as nccl_s)."""
    kernel = custom_kernel(engine, nbytes, ranks)
    fits = node_fits(topology)
    lines = fits.custom.get(engine, {}).get(ranks) if fits else None
    if kernel is None or not lines or kernel not in lines:
        return None
    ln = lines[kernel]
    moved = (ranks - 1) * nbytes if kernel == ONE_SHOT else 2 * (ranks - 1) / ranks * nbytes
    return ln.latency_s + moved / (ln.bandwidth_bytes_per_s * bandwidth_scale)

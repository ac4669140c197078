"""Alpha-beta costs of collectives over `n` ranks of a topology (S = bytes of the
whole buffer, alpha = latency of one message step, B = per-rank bandwidth per direction):

    ring all-reduce          2 (n-1) alpha + 2 (n-1)/n S/B   (reduce-scatter + all-gather)
    tree all-reduce          2 ceil(log2 n) alpha + 2 S/B     (reduce up and broadcast down a
                                                               pipelined binary tree)
    ring all-gather,
    reduce-scatter           (n-1) alpha + (n-1)/n S/B
    tree all-gather,
    reduce-scatter           ceil(log2 n) alpha + (n-1)/n S/B (recursive doubling/halving)
    all-to-all               (n-1) alpha + (n-1)/n S/B        (pairwise exchange, both algorithms)
    send/recv                alpha + S/B

With a fit for the group size (Topology.fitted, from NCCL measurements in one node)
alpha and B are the fitted ones: the all-reduce fit serves every ring/tree collective,
the send/recv fit point-to-point; a node naming another's measured collectives (`collectives_of`) takes
that node's alphas and its bandwidths at the two links' ratio; otherwise the interconnect's datasheet figures.

Algorithms `nccl`, `trtllm_custom`, `vllm_custom` and `sglang_custom` are the collectives as the engines
run them in one node (hw_models.network.engine_collectives): NCCL's fitted protocol
lines, and the engines' one-shot / two-shot custom all-reduce below their size limits;
each falls back to the ring where the topology has no such fit within a node, and past one node (no fit there) to
the faster of the ring and the tree per call, as NCCL's tuner picks.
"""

from __future__ import annotations

from hw_models.network.engine_collectives import custom_all_reduce_s, custom_allowed, nccl_s, node_fits
from hw_models.network.topology import Topology, log2_steps
from sim.core.errors import ConfigError

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, SEND_RECV = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
KINDS = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, SEND_RECV)
ALGORITHMS = ("ring", "tree", "nccl", "trtllm_custom", "vllm_custom", "sglang_custom")
# algorithm -> the custom kernels it may run, first that the node allows and has a fit for: SGLang's
# CustomAllReduceV2 needs full NVLink and falls back to the v1 kernel, vLLM's (engine_collectives doc)
CUSTOM = {"trtllm_custom": ("trtllm",), "vllm_custom": ("vllm",), "sglang_custom": ("sglang", "vllm")}


def _custom_s(topo: Topology, algorithm: str, nbytes: float, ranks: int) -> float | None:
    """The custom all-reduce's time, None where the message goes to NCCL."""
    for engine in CUSTOM[algorithm]:
        if not custom_allowed(engine, topo, ranks):
            continue
        fits = node_fits(topo.collectives_node)
        if fits is None or ranks not in fits.custom.get(engine, {}):
            continue   # no fit for this kernel here: the next one
        return custom_all_reduce_s(topo.collectives_node, engine, nbytes, ranks, topo.collectives_bandwidth_scale)
    return None


def alpha_beta(kind: str, algorithm: str, ranks: int) -> tuple[float, float]:
    """(steps, bandwidth factor): time = steps x alpha + factor x S / B."""
    n = ranks
    if kind == SEND_RECV:
        return 1.0, 1.0
    if n <= 1:
        return 0.0, 0.0
    if kind == ALL_REDUCE:
        return (2.0 * log2_steps(n), 2.0) if algorithm == "tree" else (2.0 * (n - 1), 2.0 * (n - 1) / n)
    if kind in (ALL_GATHER, REDUCE_SCATTER):
        return (float(log2_steps(n)) if algorithm == "tree" else float(n - 1)), (n - 1) / n
    if kind == ALL_TO_ALL:
        return float(n - 1), (n - 1) / n
    raise ConfigError(f"unknown collective {kind!r}; collectives: {', '.join(KINDS)}")


def _ring_fit(topo: Topology, kind: str, ranks: int):
    """The fitted ring line for `kind` over `ranks` devices (the node's own, or the node it takes its collectives
    of), None where there is none."""
    return topo.ring_fitted.get(SEND_RECV if kind == SEND_RECV else ALL_REDUCE, {}).get(2 if kind == SEND_RECV else ranks)


def parameters(topo: Topology, kind: str, ranks: int) -> tuple[float, float]:
    """(alpha seconds, B bytes/s) for `kind` over `ranks` devices of `topo`."""
    fit = _ring_fit(topo, kind, ranks)
    if fit is not None and ranks <= topo.devices_per_node:
        scale = topo.own_fit_bandwidth_scale if topo.fitted else topo.collectives_bandwidth_scale
        return fit.latency_s, fit.bandwidth_bytes_per_s * scale
    return topo.step_latency(ranks), topo.ring_bandwidth(2 if kind == SEND_RECV else ranks)


def collective_j(topo: Topology, kind: str, nbytes: float, ranks: int, algorithm: str = "ring") -> float:
    """Link energy one rank spends on a collective of `nbytes`: the bytes it sends (the bandwidth term's
    factor x nbytes) at the interconnect's energy_j_per_byte."""
    past = _past_node(topo, kind, nbytes, ranks, algorithm)   # the algorithm collective_s times
    return alpha_beta(kind, past[0] if past else algorithm, ranks)[1] * nbytes * topo.interconnect.energy_j_per_byte


def collective_s(topo: Topology, kind: str, nbytes: float, ranks: int, algorithm: str = "ring") -> float:
    """Seconds for one collective of `nbytes` over `ranks` devices."""
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown collective algorithm {algorithm!r}; algorithms: {', '.join(ALGORITHMS)}")
    in_node = 1 < ranks <= topo.devices_per_node and kind != SEND_RECV
    if in_node and algorithm in CUSTOM and kind == ALL_REDUCE:
        custom = _custom_s(topo, algorithm, nbytes, ranks)
        if custom is not None:
            return custom
    ring = "tree" if algorithm == "tree" else "ring"
    steps, factor = alpha_beta(kind, ring, ranks)
    # NCCL's measured lines also stand in for the ring where the node has no fitted ring of its own (its datasheet
    # latency is unverified: a parallelism trial's 8-GPU PCIe all-reduce at 5x the measured, TP8 slower than TP4)
    measured_ring = algorithm == "ring" and _ring_fit(topo, kind, ranks) is None
    if in_node and (algorithm != ring or measured_ring):   # nccl, or a custom all-reduce handing the message to NCCL
        fitted = nccl_s(topo.collectives_node, kind, nbytes, ranks, steps, factor, topo.collectives_bandwidth_scale)
        if fitted is not None:
            return fitted
    past = _past_node(topo, kind, nbytes, ranks, algorithm)
    return past[1] if past else _alpha_beta_s(topo, kind, nbytes, ranks, ring)


def _alpha_beta_s(topo: Topology, kind: str, nbytes: float, ranks: int, algorithm: str) -> float:
    """The alpha-beta time of `algorithm` (ring or tree) on the topology's line for `kind` and `ranks`."""
    steps, factor = alpha_beta(kind, algorithm, ranks)
    alpha, bw = parameters(topo, kind, ranks)
    return steps * alpha + factor * nbytes / bw


def _past_node(topo: Topology, kind: str, nbytes: float, ranks: int, algorithm: str) -> tuple[str, float] | None:
    """Past one node NCCL's tuner picks the faster of its ring and tree per call (module doc of engine_collectives), as
    it does within one by the fitted lines: the one `nccl` and the custom algorithms (which hand such messages to NCCL)
    run there, with its time; None elsewhere. A flat ring had paid the fabric's latency on each of its 2(n - 1) steps, 301 us for a
    16 KiB all-reduce over 2 x 8 H100s (a parallelism trial)."""
    if algorithm in ("ring", "tree") or kind == SEND_RECV or ranks <= topo.devices_per_node:
        return None
    return min(((a, _alpha_beta_s(topo, kind, nbytes, ranks, a)) for a in ("ring", "tree")), key=lambda x: x[1])

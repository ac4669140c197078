"""The offload figures and report sections of a run: the placement policy, the
links in one decode step, and the policy search's candidates (as data)."""

from __future__ import annotations

from typing import Any

from hw_models.base import Section
from hw_models.offload import sched
from hw_models.offload.search import search_title
from hw_models.offload.spec import Policy
from sim.core.results import RunResult, StepResult
from sim.core.units import fmt_bytes, fmt_time, whole_percents


def offload_data(p: Policy, mid: StepResult, util: dict[str, float], rates: sched.Rates, search,
                 gpu: str) -> dict[str, Any]:
    """What the report says about the policy and the links, as data."""
    rate = {"pcie_h2d": rates.h2d, "pcie_d2h": rates.d2h, "disk": rates.disk_read}
    links = {link: dict(bytes=mid.counters.get(link, 0.0), busy_s=mid.busy_s.get(link, 0.0),
                        rate_bytes_per_s=rate[link], utilization=util.get(link, 0.0),
                        energy_j=mid.counters.get(sched.TRANSFER_J + link, 0.0))
             for link in sched.LINKS}
    return dict(searched=search is not None, step_s=mid.time_s, links=links,
                placement={role: list(getattr(p, role)) for role in ("weights", "kv_cache", "activations")},
                gpu_busy_s=mid.busy_s.get(gpu, 0.0), gpu_utilization=util.get(gpu, 0.0),
                caption=(f"GPU batch {p.gpu_batch_size} x {p.num_gpu_batches} GPU batches = block of {p.block_size}; "
                         f"{_attention(p)}; "
                         f"host weights {'pinned' if p.pinned else 'pageable'}"))


def _joules(energy_j: float, nbytes: float) -> str:
    """A link's transfer energy per step; '-' where it moved bytes the preset prices at nothing."""
    if energy_j > 0.0:
        return f"{energy_j:.3g} J" if energy_j >= 0.01 else f"{energy_j * 1e3:.3g} mJ"
    return "-" if nbytes > 0.0 else "0 J"


def _attention(p: Policy) -> str:
    """Where attention over the off-GPU KV cache runs; with none off the GPU, CPU attention has nothing to read."""
    if not p.kv_off_gpu > 0:
        return "KV cache all on the GPU" + (" (policy.cpu_attention has no effect)" if p.cpu_attention else "")
    return f"attention over CPU KV on {'CPU' if p.cpu_attention else 'GPU'}"


def report_sections(result: RunResult) -> list[Section]:
    off = result.extra.get("offload")
    if not off:
        return []
    roles = [(role, *(f"{x}%" for x in whole_percents(fr, 1))) for role, fr in off["placement"].items()]
    out = [Section(f"Offload policy{' (searched)' if off['searched'] else ''}", roles,
                   ("role", "GPU", "CPU", "disk"), off["caption"])]
    rows = [(link, fmt_bytes(x["bytes"]), fmt_time(x["busy_s"]), f"{x['rate_bytes_per_s'] / 1e9:.2f} GB/s",
             f"{100 * x['utilization']:.0f}%", _joules(x["energy_j"], x["bytes"])) for link, x in off["links"].items()]
    rows.append(("gpu (compute)", "", fmt_time(off["gpu_busy_s"]), "", f"{100 * off['gpu_utilization']:.0f}%", ""))
    out.append(Section(f"Links, one decode step (kv_len mid-generation, {fmt_time(off['step_s'])})", rows,
                       ("link", "bytes per step", "busy per step", "rate", "utilisation (whole run)",
                        "transfer energy per step"),
                       "transfer energy: the link's, host DRAM's and GPU memory's J/byte (a disk's: the drive's "
                       "and host DRAM's) where the preset gives them (docs/offload.md)"))
    search = result.extra.get("search")
    if search:
        out.append(search_section(search))
    return out


def search_section(s: dict[str, Any]) -> Section:
    """The policy search's confirmed candidates (SearchResult.summary()), LP against the DES."""
    rows = [(c["describe"], f"{c['lp_throughput_tok_s']:.3g}",
             f"{c['des_throughput_tok_s']:.3g}" if c["des_throughput_tok_s"] else "-", fmt_time(c["lp_tpot_s"]),
             fmt_time(c["des_tpot_s"]) if c["des_tpot_s"] else "-") for c in s["top"]]
    # A run's JSON leaves the search's wall time out (byte-identical outputs): shown only when given.
    took = f", {s['elapsed_s']:.1f} s" if "elapsed_s" in s else ""
    return Section(search_title(s["objective"], s["candidates"], s["feasible"], len(rows), took),
                   rows, ("policy", "LP tok/s", "DES tok/s", "LP TPOT", "DES TPOT"))

"""Measured serving runs to check the serving simulator against: LLMServingSim's
vLLM benchmark folders (shared/validation/serving/llmservingsim/<GPU>_<model>/), each
a real vLLM server's per-request timestamps (vllm/requests.jsonl), its engine
settings (vllm/meta.json) and the request file it replayed (workloads/*.jsonl).

A case is replayed with the same requests and the same engine settings through the
`vllm` scheduler (vLLM V1's, sim.apps.serve.schedulers.vllm: running requests first,
prefills chunked within max_num_batched_tokens, KV blocks per chunk, prefix caching,
recompute preemption of the last running request, no watermark). Arrivals are the engine's own `queued_ts`
(relative to the first): TTFT is measured from them, so client-side delays before
the engine saw a request are in neither figure. Metrics as LLMServingSim defines
them: TTFT = first_token - queued, TPOT = (last - first) / (output - 1),
e2e = last - queued, throughput = output tokens / (last finish - first queued).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.apps.serve.metrics import stats
from sim.apps.serve.spec import ServeFile
from sim.apps.serve.traces import Requests, read_trace
from sim.apps.serve.bench_logs import read_json
from sim.core.errors import ConfigError
from sim.core.schema import validate_mapping

# Folder prefix -> this project's preset for that GPU (hw_models/presets).
PRESETS = {"RTX4090": "rtx4090", "RTXPRO6000": "rtx_pro_6000"}
# LLMServingSim's model names -> this project's model configs (sim/core/data/models.yaml). Llama-3.1-8B has
# Llama-3-8B's shapes (hidden 4096, 32 layers, 8 KV heads, vocab 128256); only its context and RoPE scaling differ.
MODELS = {"meta-llama/Llama-3.1-8B": "llama3-8b"}
# vLLM EngineArgs defaults where meta.json does not record a setting (vllm/config/cache.py).
VLLM_DEFAULTS = {"gpu_memory_utilization": 0.9, "block_size": 16, "enable_prefix_caching": True}
ROWS = (("TTFT mean", "ttft", "mean"), ("TTFT p50", "ttft", "p50"), ("TTFT p99", "ttft", "p99"),
        ("TPOT mean", "tpot", "mean"), ("TPOT p99", "tpot", "p99"), ("e2e mean", "e2e", "mean"),
        ("e2e p99", "e2e", "p99"), ("throughput tok/s", "throughput_tok_s", None))


@dataclass
class Case:
    name: str                    # the folder name, e.g. RTX4090_Llama-3.1-8B
    hw: str                      # preset
    meta: dict[str, Any]
    measured: list[dict[str, Any]]   # vllm/requests.jsonl rows, in arrival order
    workload: Path               # the replayed request file

    @property
    def engine(self) -> dict[str, Any]:
        """The engine settings the run used (meta.json, vLLM's defaults where it is silent)."""
        kw, kv = self.meta["engine_kwargs"], self.meta.get("kv_cache") or {}
        out = {k: kv.get(k, v) for k, v in VLLM_DEFAULTS.items()}
        out.update(max_num_seqs=kw["max_num_seqs"], max_num_batched_tokens=kw["max_num_batched_tokens"],
                   dtype=kw["dtype"], model=kw["model"], num_gpu_blocks=kv.get("num_gpu_blocks"))
        return out


def cases(root: Path) -> list[Case]:
    """Every measured case under `root` (shared/validation/serving/llmservingsim)."""
    return [load_case(d) for d in sorted(root.iterdir()) if (d / "vllm" / "meta.json").is_file()]


def load_case(folder: Path) -> Case:
    meta = read_json(folder / "vllm" / "meta.json")
    prefix = folder.name.split("_")[0]
    if prefix not in PRESETS:
        raise ConfigError(f"{folder}: no preset for {prefix}; known: {', '.join(PRESETS)}")
    if not isinstance(meta, dict) or "dataset_path" not in meta:
        raise ConfigError(f"{folder / 'vllm' / 'meta.json'}: no dataset_path (a truncated or foreign file?)")
    rows = _request_rows(folder / "vllm" / "requests.jsonl")
    rows.sort(key=lambda r: int(str(r["request_id"]).rpartition("-")[2]))
    return Case(folder.name, PRESETS[prefix], meta, rows, folder.parent / meta["dataset_path"])


# What each measured request row must carry (LLMServingSim's bench/core/recorder.py layout).
REQUEST_KEYS = ("request_id", "input_toks", "output_toks", "queued_ts", "first_token_ts", "last_token_ts")


def _request_rows(path: Path) -> list[dict[str, Any]]:
    """The JSON object of each line of `path`, or a ConfigError naming the file and line of the first that does
    not parse or lacks one of REQUEST_KEYS (a file cut short, a foreign layout)."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:   # missing, unreadable, or a binary file
        raise ConfigError(f"{path}: cannot be read as text ({str(e).splitlines()[0]})") from None
    rows = []
    for n, text in enumerate(lines, 1):
        if not text:
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}:{n}: not JSON ({e.msg} at column {e.colno}; a truncated file?)") from None
        except RecursionError:
            raise ConfigError(f"{path}:{n}: JSON nested too deeply") from None
        missing = [k for k in REQUEST_KEYS if not isinstance(row, dict) or k not in row]
        if missing:
            raise ConfigError(f"{path}: line {n}: no {missing[0]} (a truncated or foreign file?)")
        rows.append(row)
    return rows


def requests(case: Case, limit: int | None = None) -> Requests:
    """The replayed requests (token counts and prefix hashes from the request file), arriving when the
    measured engine queued them."""
    reqs = read_trace(case.workload, "llmservingsim", hash_block_tokens=case.engine["block_size"], limit=limit)
    rows = case.measured[:len(reqs)]
    if [r["input_toks"] for r in rows] != reqs.prompt_len.tolist():
        raise ConfigError(f"{case.workload}: prompt lengths differ from {case.name}/vllm/requests.jsonl")
    queued = np.array([r["queued_ts"] for r in rows])
    reqs.arrival_s = queued - queued[0]
    return reqs


def serve_file(case: Case, scheduler: dict[str, Any] | None = None) -> ServeFile:
    """The serving file of the case: its model, bf16, and vLLM V1's scheduler with the run's settings."""
    e = case.engine
    if e["model"] not in MODELS:
        raise ConfigError(f"{case.name}: no model config for {e['model']}; known: {', '.join(MODELS)}")
    fmt = {"bfloat16": "bf16", "float16": "fp16"}[e["dtype"]]
    sched = dict(kind="vllm", block_size=e["block_size"], max_num_seqs=e["max_num_seqs"],
                 max_num_batched_tokens=e["max_num_batched_tokens"],
                 gpu_memory_utilization=e["gpu_memory_utilization"])
    raw = dict(name=case.name, model=MODELS[e["model"]], stack="vllm", flash_attention=True,
               formats=dict(weights=fmt, activations=fmt, kv_cache=fmt),
               serving=dict(arrivals=dict(process="trace"),
                            trace=dict(path=str(case.workload), format="llmservingsim",
                                       hash_block_tokens=e["block_size"]),
                            scheduler={**sched, **(scheduler or {})},
                            prefix_caching=dict(enabled=e["enable_prefix_caching"])))
    return validate_mapping(ServeFile, raw, case.name, "a serving file")


def measured_summary(case: Case, limit: int | None = None) -> dict[str, Any]:
    """The measured run's figures in sim.apps.serve.metrics.summarize's layout (seconds)."""
    rows = case.measured[:limit]
    q = np.array([r["queued_ts"] for r in rows])
    first = np.array([r["first_token_ts"] for r in rows])
    last = np.array([r["last_token_ts"] for r in rows])
    out = np.array([r["output_toks"] for r in rows], dtype=float)
    tpot = np.where(out > 1, (last - first) / np.maximum(out - 1, 1), np.nan)
    span = float(last.max() - q.min())
    return dict(latency=dict(ttft=stats(first - q), tpot=stats(tpot), e2e=stats(last - q)),
                throughput_tok_s=float(out.sum()) / span, duration_s=span, completed=len(rows))


def figure(summary: dict[str, Any], metric: str, stat: str | None) -> float:
    return summary[metric] if stat is None else summary["latency"][metric][stat]


def comparison(sim: dict[str, Any], real: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """(figure, simulated, measured, relative error) per row of ROWS."""
    out = []
    for label, metric, stat in ROWS:
        s, m = figure(sim, metric, stat), figure(real, metric, stat)
        out.append((label, s, m, s / m - 1.0 if m else float("nan")))
    return out


# Our rows -> the rows of LLMServingSim's validation/summary.txt (its own prediction of the same run).
PEER_ROWS = {"TTFT mean": "TTFT Mean", "TTFT p50": "TTFT Median", "TTFT p99": "TTFT P99", "TPOT mean": "TPOT Mean",
             "TPOT p99": "TPOT P99", "e2e mean": "Latency Mean", "e2e p99": "Latency P99"}


def peer_errors(folder: Path) -> dict[str, float]:
    """LLMServingSim's relative error per figure (its summary.txt's Diff%), where it reports one."""
    path = folder / "validation" / "summary.txt"
    if not path.is_file():
        return {}
    diffs = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[-1].endswith("%") and parts[-1][0] in "+-":
            diffs[f"{parts[0]} {parts[1]}"] = float(parts[-1].rstrip("%")) / 100
    return {ours: diffs[theirs] for ours, theirs in PEER_ROWS.items() if theirs in diffs}


def reserved_bytes(case: Case, setup) -> float | None:
    """The runtime memory that makes the pool the measured engine's block count (None: not recorded):
    capacity x utilisation - weights - activations - measured blocks x block bytes."""
    blocks = case.engine["num_gpu_blocks"]
    if not blocks:
        return None
    tier = setup.machine.memory[setup.machine.device_tier]
    return (tier.capacity_bytes * case.engine["gpu_memory_utilization"] - setup.weights_bytes
            - setup.activation_bytes - blocks * setup.block_bytes)


TARGETS = {"TTFT mean": 0.20, "TPOT mean": 0.10, "throughput tok/s": 0.05}   # issue 13's targets


@dataclass
class CaseResult:
    case: Case
    rows: list[tuple[str, float, float, float]]   # (figure, simulated, measured, relative error)
    peer: dict[str, float]
    blocks: int                                   # the simulated KV pool
    extra: dict[str, Any]                         # preemptions, iterations, mean batch, ...
    timeline: list[tuple[float, ...]] | None = None   # measured vs simulated engine state per second


def validate(root: Path, machine_loader, run, limit: int | None = None,
             names: list[str] | None = None) -> list[CaseResult]:
    """Every case under `root` (or those `names`) replayed through
    `run(file, machine, requests) -> (ServeResult, summary)` (sim.apps.serve.run.serve)."""
    out = []
    for case in cases(root):
        if names is not None and case.name not in names:
            continue
        reqs = requests(case, limit)
        res, s = run(serve_file(case), machine_loader(case.hw), reqs)
        it = res.iterations
        # Prefill tokens computed (every token of an iteration but its decodes) against those the prompts
        # need after their first prefix hits: the excess is recomputation after preemptions.
        extra = dict(preemptions=s["preemptions"], iterations=s["iterations"],
                     batch_mean=s["batch_size"].get("mean", float("nan")), requests=len(reqs),
                     prefill_tokens=int(it["tokens"].sum() - (it["seqs"] - it["prefill_seqs"]).sum()),
                     prompt_tokens=int(reqs.prompt_len.sum() - np.nansum(res.requests["prefix_hit_tokens"])))
        out.append(CaseResult(case, comparison(s, measured_summary(case, limit)),
                              peer_errors(case.workload.parent.parent / case.name), s["kv_blocks_total"], extra,
                              timeline(case, it, res.total_blocks) if limit is None else None))
    return out


def _fmt(label: str, v: float) -> str:
    return f"{v:,.0f}" if label.startswith("throughput") else f"{v * 1e3:,.1f}" if "TPOT" in label else f"{v:,.2f}"


def _with_unit(label: str) -> str:
    """The row's label with the unit _fmt prints it in."""
    return label if label.startswith("throughput") else f"{label} ({'ms' if 'TPOT' in label else 's'})"


def render(results: list[CaseResult]) -> str:
    """The comparison as markdown: one table per case (seconds; TPOT in ms; throughput in output tokens/s)."""
    lines = []
    for r in results:
        e, x = r.case.engine, r.extra
        lines += [f"**{r.case.name}** on `{r.case.hw}`: {x['requests']} requests, max_num_seqs {e['max_num_seqs']}, "
                  f"max_num_batched_tokens {e['max_num_batched_tokens']}, block {e['block_size']}, "
                  f"gpu_memory_utilization {e['gpu_memory_utilization']}, prefix caching "
                  f"{'on' if e['enable_prefix_caching'] else 'off'}. KV blocks: simulated {r.blocks:,}, measured "
                  + (f"{e['num_gpu_blocks']:,}" if e["num_gpu_blocks"] else "not recorded")
                  + f"; {x['preemptions']} preemptions, {x['iterations']:,} iterations, mean batch {x['batch_mean']:.1f}; "
                  f"{x['prefill_tokens']:,} prefill tokens computed for {x['prompt_tokens']:,} prompt tokens "
                  f"(after prefix hits).",
                  "", "| figure | simulated | measured | error | target | LLMServingSim's error |",
                  "|---|---|---|---|---|---|"]
        partial = x["requests"] < len(r.case.measured)   # --limit: the targets and the peer's figure are whole-run
        if partial:
            lines[-4] += (f" **The first {x['requests']} of {len(r.case.measured)} requests only** (`--limit`): "
                          "compared with the same requests measured, which ran beside the later ones this replay "
                          "leaves out (a fuller engine: TPOT and E2E read low, throughput high); a quick look, no "
                          "target or LLMServingSim figure applies.")
        for label, s, m, err in r.rows:
            target = None if partial else TARGETS.get(label)
            verdict = "" if target is None else f"±{target:.0%} " + ("met" if abs(err) <= target else "**missed**")
            peer = None if partial else r.peer.get(label)
            lines.append(f"| {_with_unit(label)} | {_fmt(label, s)} | {_fmt(label, m)} | {err:+.1%} | {verdict} | "
                         + (f"{peer:+.1%}" if peer is not None else "") + " |")
        lines.append("")
        if r.timeline:
            lines.append(render_timeline(r.case.name, r.timeline))
    return "\n".join(lines)


def timeline(case: Case, iterations: dict[str, np.ndarray], blocks: int) -> list[tuple[float, ...]] | None:
    """The simulated engine state against vllm/timeseries.csv (None where the case has none): per
    sampled second t, (t, running, simulated running, waiting, simulated waiting, KV %, simulated KV %).
    The simulated state at t is the one after the last iteration ending by t (vLLM's stat logger
    reports the scheduler's state after its latest step). KV % = used / (blocks - 1), as V1's
    BlockPool.get_usage (its null block is never free)."""
    path = case.workload.parent.parent / case.name / "vllm" / "timeseries.csv"
    if not path.is_file():
        return None
    rows = list(csv.DictReader(path.read_text().splitlines()))
    end = iterations["start_s"] + iterations["duration_s"]
    out = []
    for row in rows:
        t = float(row["t"])
        i = int(np.searchsorted(end, t, side="right")) - 1
        sim = (iterations["running"][i], iterations["waiting"][i], 100 * iterations["kv_blocks_used"][i] / (blocks - 1)) \
            if i >= 0 else (0.0, 0.0, 0.0)
        out.append((t, float(row["running"]), sim[0], float(row["waiting"]), sim[1], float(row["kv_cache_pct"]), sim[2]))
    return out


def render_timeline(name: str, rows: list[tuple[float, ...]], every: int = 10) -> str:
    """Every `every`-th second of `timeline`, then means and mean absolute differences over all seconds."""
    a = np.array(rows)
    lines = [f"**{name}**, engine state per second: measured (vllm/timeseries.csv) / simulated.", "",
             "| t s | running | waiting | KV used % |", "|---|---|---|---|"]
    kv = a[:, 5].any()     # a run whose logger wrote 0.0 throughout did not record KV usage
    for r in rows[every - 1::every]:
        lines.append(f"| {r[0]:.0f} | {r[1]:.0f} / {r[2]:.0f} | {r[3]:.0f} / {r[4]:.0f} | "
                     + (f"{r[5]:.1f}" if kv else "-") + f" / {r[6]:.1f} |")
    mean, mad = a.mean(axis=0), [np.abs(a[:, k] - a[:, k + 1]).mean() for k in (1, 3, 5)]
    lines += [f"| mean of {len(rows)} s | {mean[1]:.1f} / {mean[2]:.1f} | {mean[3]:.1f} / {mean[4]:.1f} | "
              + (f"{mean[5]:.1f}" if kv else "not recorded") + f" / {mean[6]:.1f} |",
              f"| mean abs. difference | {mad[0]:.1f} | {mad[1]:.1f} | " + (f"{mad[2]:.1f}" if kv else "-") + " |", ""]
    return "\n".join(lines)

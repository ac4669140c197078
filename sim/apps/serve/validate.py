"""`sim validate-serving FILE --hw PRESET`: replay measured serving runs through the
serving simulator and print signed errors per run and MAPE per (GPU, engine, model).

Layouts read (sim.apps.serve.validate_readers): the aiconfigurator silicon-sample table (closed-loop runs:
concurrency, fixed isl/osl, backend, TP/EP; mean TTFT and TPOT), a vLLM `benchmark_serving` result JSON, and
LLMServingSim's per-request vLLM folders. Each run becomes a serving file (`run_file`): a closed loop of
`concurrency` clients, or the measured open-loop arrivals, under the engine's stack and scheduler defaults
(ENGINES), simulated with surrogate step costs shared between runs of one model, layout and stack."""

from __future__ import annotations

from concurrent.futures import as_completed
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hw_models.machine import load_machine
from sim.apps.serve.closed import benchmark_figures
from sim.apps.serve.run import serve
from sim.apps.serve.simulator import DONE
from sim.apps.serve.spec import ServeFile, serve_file_from_dict, set_key
from sim.apps.serve.serving_mapper import serving_mapper
from sim.apps.serve.validate_consistency import MARGIN, held_back, uncontradicted
from sim.apps.serve.validate_models import (FORMATS, GPUS, MODELS, NODES, SERVED_CONTEXT,  # noqa: F401 (re-exported)
                                            checkpoint_formats, served_model)
from sim.apps.workers import process_pool
from sim.core.errors import SimError


@dataclass(frozen=True)
class Engine:
    """How an engine family is replayed: its stack and the scheduler settings it runs by default."""
    stack: str
    scheduler: dict[str, Any]
    cite: str
    output_spread: float = 0.1   # outputs uniform within +-this share of osl (the lock-step note below)
    quantized_kv: bool = False   # an FP8 checkpoint's KV cache is FP8 too (TRT-LLM: the note below)


# Every engine runs chunked prefill with running requests first, which the `vllm` (V1) scheduler models;
# the token budget is each engine's default on an 80 GB GPU. The sequence limit is 256 (vLLM's classic
# default) or the run's concurrency if larger: the engines' own limits (1024-2048) exceed every replayed
# concurrency, and a 1024-sequence step-cost grid costs seconds per run for nothing.
ENGINES = {
    "vllm": Engine("vllm", {"kind": "vllm", "max_num_batched_tokens": 8192, "max_num_seqs": 256},
                   "vllm/engine/arg_utils.py _set_default_args: OPENAI_API_SERVER on >= 70 GiB devices: "
                   "max_num_batched_tokens 8192, max_num_seqs 1024"),
    "trtllm": Engine("trtllm", {"kind": "trtllm", "max_num_batched_tokens": 8192, "max_num_seqs": 256},
                     "tensorrt_llm/llmapi/llm_args.py: max_num_tokens 8192, max_batch_size 2048, "
                     "capacity_scheduler_policy GUARANTEED_NO_EVICT (schedulers/trtllm.py)", quantized_kv=True),
    "sglang": Engine("sglang", {"kind": "sglang", "max_num_batched_tokens": 8192, "max_num_seqs": 256},
                     "sglang/srt/server_args.py: chunked_prefill_size 8192 on a GPU of 60-90 GB, enable_mixed_chunk "
                     "False (schedulers/sglang.py)", output_spread=0.0),
}
# Lock-step. A closed loop starts with all N clients sending at once, and the silicon sample's requests are
# identical (fixed isl and osl). Whether the waves stay together is the engine's doing: SGLang's prefill batches
# stall every decode (schedulers/sglang.py), so all requests of a burst start decoding in the same step and
# finish in the same step; the next wave leaves together. Its measured runs show it (TTFT 5-45 x E2E/N, TPOT
# at pure-decode speed); replayed with identical outputs (output_spread 0), the fit's SGLang runs have TTFT
# MAPE 9% and TPOT 3% with no fitted term, against 86% and 42% with outputs spread +-10%. Under mixed
# batching (vLLM, TRT-LLM) a wave smears as later prompts prefill beside earlier decodes, and timing jitter
# (not simulated) drifts it further: for vLLM the identical replay keeps waves the measured runs do not have
# (training-half TTFT +87% signed vs -31% spread), so vLLM keeps outputs uniform within +-10% of osl
# (Engine.output_spread), a stand-in for that drift, and so does TRT-LLM (mixed batching too; replayed
# identical its 193 training runs scatter both ways, TTFT MAPE 46% signed -1% with no term fitting, against
# 40% spread once fitted). A choice made on the training half, terms at zero (docs/serving.md).
# KV format: vLLM keeps the KV cache in the model dtype unless told (kv_cache_dtype "auto"); TensorRT-LLM's
# "auto" takes the checkpoint's kv_cache_quant_algo, FP8 in ModelOpt FP8 checkpoints, and aiconfigurator infers
# its kvcache_quant_mode from the checkpoint the same way. The measured runs say so: TRT-LLM Qwen3-32B fp8 at TP1
# with 64-128 clients ran them all at once (TPOT 100-184 ms), where a bf16 KV pool holds half of them (replayed
# so, TTFT +350 to +580%, training and held-out rows alike); with FP8 KV, -48 to +23%.
# REQUESTS_PER_CLIENT: InferenceMAX sends --num-prompts $((CONC * 10)) at --max-concurrency $CONC; aiconfigurator's
# rows 10c after a warm-up phase that ends before the c clients start afresh (sim.apps.serve.closed).
REQUESTS_PER_CLIENT = 10
METRICS = ("ttft_s", "tpot_s", "e2e_s", "req_s")


@dataclass
class Run:
    """One measured serving run: what was served and how, and the means measured."""
    name: str
    gpu: str                     # aiconfigurator system name (h100_sxm) or a preset
    engine: str                  # vllm, trtllm, sglang
    model: str                   # the Hugging Face name (a key of MODELS)
    isl: int
    osl: int
    concurrency: int
    tp: int = 1
    quant: str | None = None     # gemm_quant_mode
    measured: dict[str, float] = field(default_factory=dict)   # METRICS present in the source
    num_requests: int | None = None   # as measured (None: requests_per_client x concurrency)
    # The benchmark client's random_range_ratio r: it drew each request's prompt and output lengths uniformly
    # from the integers [int(r x isl), isl] and [int(r x osl), osl] (None: fixed isl, outputs by the engine's
    # output_spread). The measured E2E is then TTFT + TPOT x (osl - 1) (the source's means, not its lengths'),
    # and the simulated one is derived the same way.
    range_ratio: float | None = None
    token_budget: int | None = None   # the engine's max_num_tokens as the run was launched (None: ENGINES')
    # How the engine sampled the run's requests (Workload.sampling): what the client sent, or where it sent nothing,
    # the server's defaults (validate_readers.silicon_sampling says which for the silicon sample's rows).
    sampling: str = "greedy"
    deployment: str = "direct"   # what stood between client and engine (Serving.deployment)
    # An open-loop run (vLLM benchmark_serving --request-rate): requests/s, and its burstiness b (gamma gaps of
    # shape b: coefficient of variation 1/sqrt(b)); None: a closed loop of `concurrency` clients.
    rate: float | None = None
    burstiness: float = 1.0
    e2e_derived: bool = False   # the source records no E2E: the measured one is TTFT + TPOT x (osl - 1) (the silicon sample)
    # Each request's prompt and output tokens in the order sent, where the log lists them (else isl/osl as above).
    lengths: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    ep: int = 1                  # expert-parallel ways of a MoE model (a multiple of tp: parallel.ep)
    # The closed-loop client's connection pool (Closed.max_connections; None: a connection per client). No table
    # records it: `validate-serving --client-connections N` says what the user's client held.
    client_connections: int | None = None
    version: str | None = None   # the engine's release as the source records it (None: not recorded)


@dataclass
class Result:
    run: Run
    sim: dict[str, float]
    error: dict[str, float]      # signed (sim - measured) / measured, per metric measured
    features: dict[str, float] = field(default_factory=dict)   # step_features: what the fitted terms scale with


def step_features(res, front_end_s: float = 0.0) -> dict[str, float]:
    """Per request, means over the completed ones: the iterations (and the sequences they ran) that end
    between the request reaching the engine and its first token, and between its first and last token
    per gap (the TPOT span). A term of t seconds per iteration and u per sequence adds t x steps + u x
    seqs to each (scripts/fit_engine_overheads.py regresses on them)."""
    r, it = res.requests, res.iterations
    ok = r["status"] == DONE
    ends = it["start_s"] + it["duration_s"]
    seqs = np.concatenate([[0.0], np.cumsum(it["seqs"])])
    arr, first, fin, out = r["arrival_s"][ok] + front_end_s, r["first_token_s"][ok], r["finish_s"][ok], r["output_tokens"][ok]
    a, f, z = (np.searchsorted(ends, t, side="right") for t in (arr - 1e-12, first + 1e-12, fin + 1e-12))
    gaps = np.maximum(out - 1, 1)
    many = out > 1
    return dict(ttft_steps=float(np.mean(f - a)), ttft_seqs=float(np.mean(seqs[f] - seqs[a])),
                tpot_steps=float(np.mean(((z - f) / gaps)[many])) if many.any() else 0.0,
                tpot_seqs=float(np.mean(((seqs[z] - seqs[f]) / gaps)[many])) if many.any() else 0.0)


def replayed_lengths(run: Run) -> str:
    """How run_file draws the run's request lengths, in words (the --json's `lengths_replayed`)."""
    spread = ENGINES[run.engine].output_spread
    spread_out = (f"outputs uniform within +-{spread:.0%} of {run.osl} (the engine's output_spread)" if spread
                  else f"outputs {run.osl}")
    if run.lengths is not None:
        if len(set(run.lengths[1])) > 1:
            return "as logged per request"
        return f"prompts as logged, {spread_out}: every logged output was {run.lengths[1][0]} tokens"
    if run.range_ratio is not None:
        return f"uniform from {run.range_ratio:g} x isl and osl to them, as the client drew them"
    return f"prompts {run.isl}, {spread_out}"


def run_file(run: Run, stack: str | None = None, requests_per_client: int = REQUESTS_PER_CLIENT,
             settings: dict[str, Any] | None = None) -> ServeFile:
    """The serving file of a run: a closed loop of `requests_per_client` x concurrency requests (or the run's
    count), or open-loop arrivals at its rate (Run.rate); lengths as logged per request (Run.lengths), else drawn
    as the run's client drew them (Run.range_ratio), else the prompt as measured and outputs spread by the
    engine's output_spread around it. `run.model`: a key of MODELS, else a preset name or config.json path."""
    eng = ENGINES[run.engine]
    fmt = FORMATS[run.quant]
    low, high = max(1, round(run.osl * (1 - eng.output_spread))), round(run.osl * (1 + eng.output_spread))
    prompt: dict[str, Any] = {"dist": "fixed", "value": run.isl}
    if run.range_ratio is not None:
        low, high = client_range(run.osl, run.range_ratio)
        plow, phigh = client_range(run.isl, run.range_ratio)
        prompt = {"dist": "uniform", "low": plow, "high": phigh} if phigh > plow else prompt
    count = run.num_requests or run.concurrency * requests_per_client
    arrivals: dict[str, Any] = {"process": "closed", "concurrency": run.concurrency, "num_requests": count,
                                **({"max_connections": run.client_connections} if run.client_connections else {})}
    if run.rate is not None:   # vLLM's client: Poisson at burstiness 1, else gamma (benchmark_serving get_request)
        arrivals = ({"process": "poisson", "rate": run.rate, "num_requests": count} if run.burstiness == 1 else
                    {"process": "gamma", "rate": run.rate, "cv": run.burstiness ** -0.5, "num_requests": count})
    output: dict[str, Any] = ({"dist": "uniform", "low": low, "high": high} if high > low
                              else {"dist": "fixed", "value": run.osl})
    if run.lengths is not None:
        prompt = {"dist": "sequence", "values": list(run.lengths[0])}
        # Outputs all one length (--ignore-eos at a fixed osl) take the engine's spread, as an export without
        # per-request lengths does (bench_logs): replayed as logged, the clients had run in lock-step waves and the
        # detailed log of a run read TTFT 2.2x above its own summary export (a serving engineer's trial).
        if len(set(run.lengths[1])) > 1:
            output = {"dist": "sequence", "values": list(run.lengths[1])}
    raw: dict[str, Any] = {
        "name": run.name, "model": served_model(run.model, max(run.lengths[0]) + max(max(run.lengths[1]), high)
                                                if run.lengths else run.isl + 2 * run.osl),
        "formats": checkpoint_formats(run.model, fmt, eng.quantized_kv),
        "flash_attention": True,
        "stack": stack or eng.stack,
        "sampling": run.sampling,
        "serving": {"arrivals": arrivals, "lengths": {"prompt": prompt, "output": output},
                    "deployment": run.deployment,
                    "scheduler": {**eng.scheduler, "max_num_seqs": eng.scheduler["max_num_seqs"] if run.rate is not None
                                  else max(eng.scheduler["max_num_seqs"], run.concurrency),
                                  **({"max_num_batched_tokens": run.token_budget} if run.token_budget else {})}},
    }
    if max(run.tp, run.ep) > 1:
        raw["parallel"] = {"tp": run.tp, "ep": run.ep, "topology": NODES.get(GPUS.get(run.gpu, run.gpu))}
    for key, value in (settings or {}).items():   # the user's server as launched (validate-serving --set)
        set_key(raw, key, value, run.name)
    return serve_file_from_dict(raw, run.name)


def client_range(length: int, ratio: float) -> tuple[int, int]:
    """The integers a random-dataset client draws a length from: InferenceX's benchmark_serving.py
    sample_random_requests, `lower = int(seq_len * range_ratio)`, `np.random.randint(lower, upper + 1)`."""
    return max(1, int(length * ratio)), length


class MachineLoader:
    """Presets by name (or by a GPUS system name), loaded once each; a plain object, so that worker processes
    get one (simulate's `jobs`). `engine_side_ttft`: the log times TTFT from the engine's own queueing
    (LLMServingSim's queued_ts), so the API front end is outside it: its terms are zeroed."""

    FRONT = ("per_request_s", "dynamo_per_request_s", "front_end_request_s", "front_end_prompt_token_s", "front_end_output_token_s")

    def __init__(self, engine_side_ttft: bool = False, overrides: dict[str, Any] | None = None,
                 presets: dict[str, str] | None = None):
        self.engine_side_ttft = engine_side_ttft
        self.overrides = dict(overrides or {})   # --set hw.KEY=VALUE, dotted paths as load_machine takes them
        self.presets = dict(presets or {})       # a table's GPU -> the preset (file) to replay it on, else GPUS's
        self.cache: dict[str, object] = {}

    def __call__(self, name: str):
        name = self.presets.get(name) or GPUS.get(name, name)
        if name not in self.cache:
            zero = {"stacks": {e.stack: {"engine_overheads": dict.fromkeys(self.FRONT, 0.0)} for e in ENGINES.values()}}
            self.cache[name] = load_machine(name, {**self.overrides, **(zero if self.engine_side_ttft else {})} or None)
        return self.cache[name]


def machine_loader(engine_side_ttft: bool = False, overrides: dict[str, Any] | None = None,
                   presets: dict[str, str] | None = None) -> MachineLoader:
    return MachineLoader(engine_side_ttft, overrides, presets)


def layout_features(file: ServeFile, machine) -> dict[str, float]:
    """What the per-iteration layout terms scale with: TP collectives per iteration (per_collective_s) and
    the instance's devices, one executor rank each (per_extra_rank_s)."""
    mapper = serving_mapper(machine, file, file.model_config_())
    return {"collectives": float(mapper.collectives_per_iteration()), "ranks": float(mapper.devices)}


def signed_errors(sim: dict[str, float], measured: dict[str, float]) -> dict[str, float]:
    return {k: (sim[k] - v) / v for k, v in measured.items() if k in sim and v and np.isfinite(v)}


Outcome = tuple[Result | None, tuple[str, str] | None]   # a run's result, or (name, why it could not be built)


def simulate(runs: list[Run], machine_for: Callable[[str], Any], stack: str | None = None,
             requests_per_client: int = REQUESTS_PER_CLIENT, progress: Callable[[int, int], None] | None = None,
             jobs: int = 1, settings: dict[str, Any] | None = None) -> tuple[list[Result], list[tuple[str, str]]]:
    """Each run simulated (surrogate costs shared between runs of one model, layout and stack);
    runs that cannot be built come back as (name, reason). `jobs` > 1: in that many worker processes, each
    taking whole groups of runs that share their costs (`machine_for` must pickle: a MachineLoader); the
    results are the same as in one process, in the same order (tests/test_validate_serving_jobs.py)."""
    if jobs <= 1 or len(runs) < 2:
        outcomes = _simulate_each(runs, machine_for, stack, requests_per_client, progress, settings)
    else:
        groups: dict[tuple, list[int]] = {}
        for i, run in enumerate(runs):   # the runs that share a step-cost table: one model, GPU, layout, engine
            groups.setdefault((run.model, run.gpu, run.tp, run.ep, run.quant, run.engine), []).append(i)
        slots: list[Outcome | None] = [None] * len(runs)
        with process_pool(jobs) as pool:
            futures = {pool.submit(_simulate_each, [runs[i] for i in idx], machine_for, stack, requests_per_client,
                                   None, settings): idx
                       for idx in sorted(groups.values(), key=len, reverse=True)}   # the longest first
            finished = 0
            for fut in as_completed(futures):
                for i, outcome in zip(futures[fut], fut.result()):
                    slots[i] = outcome
                finished += len(futures[fut])
                if progress:
                    progress(finished, len(runs))
        outcomes = [o for o in slots if o is not None]
    return [r for r, _ in outcomes if r is not None], [f for _, f in outcomes if f is not None]


def _simulate_each(runs: list[Run], machine_for: Callable[[str], Any], stack: str | None, requests_per_client: int,
                   progress: Callable[[int, int], None] | None = None, settings: dict[str, Any] | None = None
                   ) -> list[Outcome]:
    """simulate() in this process: one outcome per run, in order."""
    cache: dict = {}
    out: list[Outcome] = []
    for i, run in enumerate(runs):
        try:
            file = run_file(run, stack, requests_per_client, settings)
            res, summary = serve(file, machine_for(run.gpu), cache=cache)
        except SimError as exc:
            out.append((None, (run.name, str(exc).splitlines()[0])))
            continue
        if not summary["completed"]:   # nothing to compare (no NaN into a MAPE): why, as sim serve says it
            why = ", ".join(f"{n}: {w}" for w, n in summary["rejected_reasons"].items()) or "none finished"
            out.append((None, (run.name, f"no request completed ({why})")))
            continue
        b = summary.get("benchmark") or benchmark_figures(res, 1)   # open loop: the same means, as the client takes them
        sim = {k: b[k] for k in METRICS}
        if run.range_ratio is not None:   # as the measured E2E is derived (Run.range_ratio)
            sim["e2e_s"] = sim["ttft_s"] + sim["tpot_s"] * (run.osl - 1)
        feats = {**step_features(res), **layout_features(file, machine_for(run.gpu))}
        out.append((Result(run, sim, signed_errors(sim, run.measured), feats), None))
        if progress:
            progress(i + 1, len(runs))
    return out


def group_key(r: Result) -> tuple[str, str, str]:
    return (r.run.gpu, r.run.engine, r.run.model.split("/")[-1])


def mape(results: list[Result]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Per (GPU, engine, model): runs and the mean |error| of each metric measured; where the group's runs are of
    more than one release of the engine (Run.version), `by_release` the same per release (one stack replays them)."""
    groups: dict[tuple[str, str, str], list[Result]] = {}
    for r in results:
        groups.setdefault(group_key(r), []).append(r)
    out = {}
    for key, rs in sorted(groups.items()):
        out[key] = {"runs": len(rs), **overall(rs)}
        releases: dict[str, list[Result]] = {}
        for r in rs:
            releases.setdefault(r.run.version or "not recorded", []).append(r)
        if len(releases) > 1:
            out[key]["by_release"] = {v: {"runs": len(sub), **overall(sub)} for v, sub in sorted(releases.items())}
    return out


def overall(results: list[Result]) -> dict[str, float]:
    return {m: float(np.mean([abs(r.error[m]) for r in results if m in r.error]))
            if any(m in r.error for r in results) else float("nan") for m in METRICS}


def _pct(v: float) -> str:
    return "-" if not np.isfinite(v) else f"{v:+.1%}"


def _ms(v: float) -> str:   # a simulated TPOT of one-token requests is none: "-", not nan (a serving trial)
    return "-" if not np.isfinite(v) else f"{v * 1e3:.2f}"


def render(results: list[Result], skipped: list[tuple[str, str]], failed: list[tuple[str, str]],
           seconds: float, per_run: bool = True, name_width: int | None = 40, left_out: int = 0,
           found: list | None = None) -> str:
    """Markdown: signed errors per run (unless `per_run`), MAPE per GPU/engine/model and over all, and over the runs
    no row of the table contradicts (`found`: validate_consistency); names: last `name_width` chars."""
    lines = []
    if per_run:
        lines += ["| run | engine | model | TP (/EP) | N (or rate) | isl/osl | sampling | TTFT ms meas/sim | TTFT | TPOT ms meas/sim | "
                  "TPOT | E2E | req/s |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in results:
            m, s, e = r.run.measured, r.sim, r.error
            lines.append(f"| {r.run.name[-name_width:] if name_width else r.run.name} | {r.run.engine} | {r.run.model.split('/')[-1]} | {r.run.tp}{f'/{r.run.ep}' if r.run.ep > 1 else ''} | "
                         f"{r.run.concurrency if r.run.rate is None else f'{r.run.rate:g}/s'} | {r.run.isl}/{r.run.osl} | {r.run.sampling} | "
                         f"{m['ttft_s'] * 1e3:.1f}/{s['ttft_s'] * 1e3:.1f} | "
                         f"{_pct(e.get('ttft_s', np.nan))} | {m['tpot_s'] * 1e3:.2f}/{_ms(s['tpot_s'])} | "
                         f"{_pct(e.get('tpot_s', np.nan))} | {_pct(e.get('e2e_s', np.nan))} | {_pct(e.get('req_s', np.nan))} |")
        lines.append("")
    lines += ["| GPU | engine | model | runs | TTFT MAPE | TPOT MAPE | E2E MAPE | req/s MAPE |", "|---|---|---|---|---|---|---|---|"]
    cells = lambda row: " | ".join("-" if not np.isfinite(row[k]) else f"{row[k]:.1%}" for k in METRICS)  # noqa: E731
    for (gpu, eng, model), row in mape(results).items():
        lines.append(f"| {gpu} | {eng} | {model} | {row['runs']} | {cells(row)} |")
        lines += [f"| | | release {v} | {sub['runs']} | {cells(sub)} |" for v, sub in row.get("by_release", {}).items()]
    kept = uncontradicted(results, found or [])
    n_flagged = len(results) - len(kept)
    for label, rs in (("all", results), ("all but contradicted rows", kept if n_flagged else [])):
        if rs:
            lines.append(f"| {label} | | | {len(rs)} | {cells(overall(rs))} |")
    lines += ["", f"{len(results)} run{'' if len(results) == 1 else 's'} simulated in {seconds:.{0 if seconds >= 10 else 1}f} s; {len(skipped)} rows not replayable"
              + (f" ({reasons(skipped)})" if skipped else "")
              + (f"; {left_out} rows of the fit's training half left out (--held-out)" if left_out else "")
              + (f"; {n_flagged} replayed row{'s' if n_flagged > 1 else ''} contradict{'' if n_flagged > 1 else 's'} "
                 f"another measured row of its setup and release (fewer requests decoding by Little's law, over "
                 f"{MARGIN:g}x the TPOT: --json lists the pairs)" if n_flagged else "") + held_back(results)
              + (f"; {len(failed)} failed: {_failures(failed)}" if failed else "")
              + ". Errors are (simulated - measured) / measured"
              + ("; E2E of the silicon sample is TTFT + TPOT x (osl - 1)." if any(r.run.e2e_derived for r in results)
                 else ".")]
    return "\n".join(lines)


def reasons(items: list[tuple[str, str]]) -> str:
    counts: dict[str, int] = {}
    for _, why in items:
        counts[why] = counts.get(why, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    more = f"; {len(ranked) - 4} more reasons ({sum(n for _, n in ranked[4:])} rows: --json lists them)" if len(ranked) > 4 else ""
    return "; ".join(f"{n} x {why}" for why, n in ranked[:4]) + more


def _failures(items: list[tuple[str, str]]) -> str:
    """The first failures, each with its run (a message from a file the run names, such as a topology's, lacks it)."""
    more = f"; {len(items) - 4} more" if len(items) > 4 else ""
    return "; ".join(why if why.startswith(name) else f"{name}: {why}" for name, why in items[:4]) + more

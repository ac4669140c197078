"""Replay of the ML.ENERGY Benchmark v3 serving runs (issue 33): each run's model, GPU,
parallelism and `max_num_seqs` as a closed-loop serving file, simulated, and its
steady-state energy per output token and power per GPU set against the measured ones.

The runs (../shared/validation/energy/mlenergy_llm_runs.csv, README there): vLLM 0.11.1,
every request sent at once, concurrency held at `max_num_seqs`, chunked prefill with an
8192-token budget, outputs until EOS; GPU energy (NVML) over a steady-state window that
starts when `max_num_seqs` requests have their first token and ends when
`requests - max_num_seqs - 1` have finished. We replay exactly that window.

Assumptions (the data do not give them):
* Input lengths are not published. Per task, a lognormal with the mean of INPUT_MEAN
  (sim.apps.serve.mlenergy_inputs: LMArena conversations with their history, from the
  published statistics of the Arena's earlier data; GPQA and FIM our estimates) and
  `input_scale` to show how much the answer depends on it.
* Output lengths: a lognormal with the run's measured mean (`avg_output_tokens`), cv
  OUTPUT_CV, clipped at the task's cap.
* Sampling: the benchmark's client sends top_p 0.95 at temperature 0.8 with every request
  (ml-energy/benchmark mlenergy/benchmark/llm/benchmark.py, its defaults @c1d6557; no config overrides
  them), so the replay samples with top-p (`sampling: top_p`; hw_models.stack.sampler): known, not assumed.
  The same payload carries `repetition_penalty` 1.1 (both the completions and the chat request functions
  @c1d6557, "repetition_penalty": 1.1; the configs' extra_body.json files add reasoning settings only), so
  vLLM runs its penalty pass every step (`penalties: true`; hw_models.stack.sampler): known, not assumed.
* Requests per replay: REQUESTS_PER_SEQ x max_num_seqs (at least MIN_REQUESTS), fewer than
  the benchmark's 198-24,576, so the steady state is shorter; prefix caching (on in the
  benchmark, whose later turns repeat the earlier ones' prompts) is off (mlenergy_inputs).
"""

from __future__ import annotations

import csv
import gzip
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hw_models.machine import load_machine
from sim.apps.serve.energy import energy_window
from sim.apps.serve.mlenergy_inputs import INPUT_MEAN
from sim.apps.serve.simulator import DONE, ServeResult
from sim.apps.serve.run import serve
from sim.apps.serve.spec import serve_file_from_dict

CSV_NAME = "energy/mlenergy_llm_runs.csv"
# Hugging Face id -> this project's model preset (same layer shapes: Llama 3.1/3.3 differ from Llama 3
# only in RoPE scaling and context length; the Qwen3-30B-A3B 2507 and Coder checkpoints share Qwen3-30B-A3B's config,
# the Qwen3-235B-A22B 2507 ones Qwen3-235B-A22B's).
MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama3-8b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama3-70b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama3-70b",
    "meta-llama/Llama-3.1-405B-Instruct": "llama3.1-405b",
    "Qwen/Qwen3-8B": "qwen3-8b",
    "Qwen/Qwen3-14B": "qwen3-14b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "qwen3-30b-a3b",
    "Qwen/Qwen3-30B-A3B-Thinking-2507": "qwen3-30b-a3b",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": "qwen3-30b-a3b",
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B-Thinking-2507": "qwen3-235b-a22b",
    "Qwen/Qwen3-Coder-480B-A35B-Instruct": "qwen3-coder-480b-a35b",
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B-Thinking-2507-FP8": "qwen3-235b-a22b",
    "meta-llama/Llama-3.1-405B-Instruct-FP8": "llama3.1-405b",
}
# The FP8 checkpoints, as stored: what `formats:` their replay takes (activations and the KV cache stay bf16, as
# vLLM runs them: its W8A8 Linear quantizes each bf16 input, the stack's FP8 family; `kv_cache_dtype` auto).
# * Qwen3-235B-A22B-Instruct/Thinking-2507-FP8: 128 x 128 block-scaled FP8 with lm_head and the router in bf16, as the
#   Qwen3-235B-A22B-FP8 checkpoint of the silicon replays (sim.apps.serve.validate_models: BLOCK_FP8_CHECKPOINTS;
#   the 2507 FP8 model card: "fine-grained fp8 quantization with block size of 128").
# * Llama-3.1-405B-Instruct-FP8: Meta's FP8 quantizes the feed-forward layers' weights and activations only, neither
#   the self-attention's parameters nor the first and last Transformer layers (Llama Team, "The Llama 3 Herd of
#   Models", arXiv:2407.21783, section 6.2), and lm_head stays bf16; row-wise weight scales and dynamic per-token
#   activation scales, costed here by the stack's per-tensor FP8 family (the same scaled GEMM, one scale a row).
#   The first and last layers' MLPs are replayed in FP8 too (2 of 126 layers: 1.6% of the MLP weights), since a
#   per-layer override unfolds the identical layers and made each replay ~15x slower.
_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
CHECKPOINTS = {
    **dict.fromkeys(("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "Qwen/Qwen3-235B-A22B-Thinking-2507-FP8"),
                    dict(weights="fp8_block128", overrides=("router", "lm_head"))),
    "meta-llama/Llama-3.1-405B-Instruct-FP8": dict(weights="fp8_e4m3",
                                                   overrides=(*_ATTENTION, "lm_head")),
}
# The models the shipped power figures were fitted on (FIT_MODELS, below): the table's models until stop 72. The
# models added then (the Qwen3 dense models, Qwen3-235B-A22B, Qwen3-Coder-480B, Llama-3.1-405B) are held out by
# model, on both GPUs: the fit did not see them.
FIT_MODELS = frozenset({"meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct",
                        "meta-llama/Llama-3.3-70B-Instruct", "Qwen/Qwen3-30B-A3B-Instruct-2507",
                        "Qwen/Qwen3-30B-A3B-Thinking-2507", "Qwen/Qwen3-Coder-30B-A3B-Instruct"})
PRESETS = {"H100": "h100_sxm", "B200": "b200"}
TOPOLOGY = {"H100": "dgx_h100", "B200": "hgx_b200"}   # hw_models/network/presets: one 8-GPU node
FORMATS = {"bfloat16": "bf16"}   # the runs' precisions replayed as one format; fp8 runs: those of CHECKPOINTS
INPUT_CV = 1.0
OUTPUT_CAP = {"lm-arena-chat": 4096, "gpqa": 32768, "sourcegraph-fim": 2048}   # the benchmark's max_tokens
OUTPUT_CV = 1.0
REQUESTS_PER_SEQ = 3
MIN_REQUESTS = 64
BATCHED_TOKENS = 8192   # every v3 config's max-num-batched-tokens


@dataclass(frozen=True)
class Run:
    """One measured run (the CSV's columns this replay reads)."""

    gpu: str
    model: str
    precision: str
    task: str
    num_gpus: int
    tp: int
    ep: int
    max_num_seqs: int
    avg_output_tokens: float
    j_per_token: float
    power_per_gpu_w: float
    throughput_tok_s: float

    @property
    def preset(self) -> str:
        return MODELS[self.model]


COLUMNS = ("source_id", "gpu", "model", "precision", "task", "num_gpus", "tensor_parallel", "pipeline_parallel",
           "expert_parallel", "data_parallel", "max_num_seqs", "avg_output_tokens", "energy_per_output_token_j",
           "avg_power_per_gpu_w", "output_throughput_tok_s")


def load_runs(shared: Path) -> list[Run]:
    """The v3 runs of the shared validation folder's CSV (read_runs)."""
    return read_runs(shared / CSV_NAME)


def read_runs(path: Path) -> list[Run]:
    """The v3 runs this project can replay: a model with a preset, a format it has, no data parallelism.
    A file without the columns read, or a replayable row whose numbers are missing or not numbers (a
    truncated file), raises ValueError naming the line and the column."""
    out = []
    with _open_text(path) as f:
        rows = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (rows.fieldnames or ())]
        if missing:
            raise ValueError(f"not an ML.ENERGY runs table: no column {', '.join(missing)}")
        for r in rows:
            if None in r.values():   # fewer cells than the header: a row cut short (a trial's was dropped silently)
                raise ValueError(f"line {rows.line_num} has {sum(v is not None for v in r.values())} of the header's "
                                 f"{len(rows.fieldnames)} columns (a truncated file?)")
            replayable = r["precision"] in FORMATS or (r["precision"] == "fp8" and r["model"] in CHECKPOINTS)
            if r["source_id"] != "mlenergy-v3" or r["model"] not in MODELS or not replayable:
                continue
            n = {c: _number(r, c, rows.line_num) for c in NUMBERS}
            if int(n["data_parallel"]) != 1 or int(n["pipeline_parallel"]) != 1:
                continue
            out.append(Run(r["gpu"], r["model"], r["precision"], r["task"], int(n["num_gpus"]),
                           int(n["tensor_parallel"]), int(n["expert_parallel"]), int(n["max_num_seqs"]),
                           n["avg_output_tokens"], n["energy_per_output_token_j"], n["avg_power_per_gpu_w"],
                           n["output_throughput_tok_s"]))
    return out


def _open_text(path: Path):
    """The table as text, gunzipped where the file is gzip (the shared data's other tables are .csv.gz)."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", newline="") if gz else open(path, newline="")


# The numeric columns read, and the value an empty cell means (None: the cell must hold a number).
NUMBERS: dict[str, float | None] = {
    "data_parallel": 1.0, "pipeline_parallel": 1.0, "expert_parallel": 1.0, "num_gpus": None,
    "tensor_parallel": None, "max_num_seqs": None, "avg_output_tokens": None, "energy_per_output_token_j": None,
    "avg_power_per_gpu_w": None, "output_throughput_tok_s": None}
WHOLE = {"data_parallel", "pipeline_parallel", "expert_parallel", "num_gpus", "tensor_parallel", "max_num_seqs"}


def _number(row: dict, col: str, line: int) -> float:
    """The cell as a number: finite and positive (a measurement or a count), whole where it counts GPUs or
    sequences; else ValueError naming the line and the column."""
    value, default = row.get(col), NUMBERS[col]
    if not value and default is not None:
        return default
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"line {line}: {col} is {value!r}, not a number (a truncated or malformed row)") from None
    if not (math.isfinite(x) and x > 0) or (col in WHOLE and x != int(x)):
        raise ValueError(f"line {line}: {col} is {value!r}: expected a {'whole number >= 1' if col in WHOLE else 'positive number'}")
    return x


def sample(runs: list[Run], every: int) -> list[Run]:
    """Every `every`-th run of each sweep (GPU, model, task, parallelism) by max_num_seqs, its largest always."""
    sweeps: dict[tuple, list[Run]] = {}
    for r in runs:
        sweeps.setdefault((r.gpu, r.model, r.task, r.tp, r.ep), []).append(r)
    out = []
    for rs in sweeps.values():
        rs = sorted(rs, key=lambda r: r.max_num_seqs)
        out += rs[::every] + ([rs[-1]] if (len(rs) - 1) % every else [])
    return out


# The runs the shipped power figures were fitted on (scripts/fit_energy.py): every FIT_EVERY-th run of each H100
# sweep of these tasks up to FIT_MAX_SEQS sequences. Here, so that a table of replays can mark them in sample.
FIT_GPU, FIT_EVERY, FIT_MAX_SEQS = "H100", 4, 512
FIT_TASKS = ("lm-arena-chat", "sourcegraph-fim")


def select(runs: list[Run], gpu: str, every: int, max_seqs: int, tasks: tuple[str, ...] | None = None) -> list[Run]:
    """The runs of `gpu` the replays take: every `every`-th of each sweep (sample, over the whole sweep), then those
    up to `max_seqs` sequences and of `tasks` (None: all). The one selection of the fit, scripts/energy_mlenergy.py
    and `sim validate-energy` (the CLI had filtered before sampling, so each sweep's 512-sequence run joined as
    "its largest": 37 H100 runs where docs/energy.md's table has 32, a trial)."""
    return [r for r in sample([r for r in runs if r.gpu == gpu], every)
            if r.max_num_seqs <= max_seqs and (tasks is None or r.task in tasks)]


def fit_runs(runs: list[Run]) -> list[Run]:
    """The runs of `runs` (the whole table) the power fit uses: of FIT_MODELS only."""
    return [r for r in select(runs, FIT_GPU, FIT_EVERY, FIT_MAX_SEQS, FIT_TASKS) if r.model in FIT_MODELS]


def serve_file(run: Run, input_scale: float = 1.0, sampling: str = "top_p") -> Any:
    """The closed-loop serving file of `run` (module doc); `sampling` other than the benchmark's top_p: a what-if."""
    ckpt = CHECKPOINTS.get(run.model)   # an FP8 checkpoint's names are its own (their runs are fp8)
    formats = dict(weights=ckpt["weights"], activations="bf16", kv_cache="bf16",
                   overrides=dict.fromkeys(ckpt["overrides"], "bf16")) if ckpt else dict.fromkeys(
        ("weights", "activations", "kv_cache"), FORMATS[run.precision])
    n = max(REQUESTS_PER_SEQ * run.max_num_seqs, MIN_REQUESTS)
    raw = dict(
        name=f"mlenergy {run.gpu} {run.model} seqs {run.max_num_seqs}", model=run.preset,
        formats=formats, flash_attention=True, stack="vllm", sampling=sampling,
        penalties=True,
        parallel=dict(tp=run.tp, ep=run.ep, **({"topology": TOPOLOGY[run.gpu]} if run.num_gpus > 1 else {})),
        serving=dict(
            arrivals=dict(process="burst", size=n, num_requests=n, seed=0),
            lengths=dict(prompt=dict(dist="lognormal", mean=INPUT_MEAN[run.task] * input_scale, cv=INPUT_CV, min=1,
                                     max=16384),
                         output=dict(dist="lognormal", mean=run.avg_output_tokens, cv=OUTPUT_CV, min=1,
                                     max=OUTPUT_CAP[run.task])),
            scheduler=dict(kind="vllm", max_num_seqs=run.max_num_seqs, max_num_batched_tokens=BATCHED_TOKENS)))
    return serve_file_from_dict(raw, "mlenergy replay")


def steady_window(res: ServeResult, max_num_seqs: int) -> tuple[float, float]:
    """ML.ENERGY's steady state: from the time `max_num_seqs` requests have their first token to the time
    `requests - max_num_seqs - 1` have finished (at least one request's worth when the replay is short)."""
    r = res.requests
    ok = r["status"] == DONE
    first = np.sort(r["first_token_s"][ok])
    fin = np.sort(r["finish_s"][ok])
    b = min(max_num_seqs, len(first)) - 1
    t0 = float(first[b])
    t1 = float(fin[max(len(fin) - max_num_seqs - 2, 0)])
    return t0, t1 if t1 > t0 else float(fin[-1])


@dataclass(frozen=True)
class Replay:
    run: Run
    j_per_token: float
    power_per_gpu_w: float
    throughput_tok_s: float

    @property
    def j_error(self) -> float:
        return self.j_per_token / self.run.j_per_token - 1.0

    @property
    def power_error(self) -> float:
        return self.power_per_gpu_w / self.run.power_per_gpu_w - 1.0

    @property
    def throughput_error(self) -> float:
        return self.throughput_tok_s / self.run.throughput_tok_s - 1.0


def replay(run: Run, machine: Any = None, input_scale: float = 1.0, cache: dict | None = None,
           sampling: str = "top_p") -> Replay:
    """Simulate `run` (surrogate step costs) and read its steady-state figures."""
    machine = machine or load_machine(PRESETS[run.gpu])
    res, _ = serve(serve_file(run, input_scale, sampling), machine, cache=cache)
    t0, t1 = steady_window(res, run.max_num_seqs)
    joules, tokens = energy_window(res, t0, t1)
    span = t1 - t0
    return Replay(run, joules / tokens, joules / span / run.num_gpus, tokens / span)


def mape(errors: list[float]) -> float:
    return float(np.mean(np.abs(errors))) if errors else float("nan")

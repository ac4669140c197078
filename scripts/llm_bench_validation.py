#!/usr/bin/env python3
"""70B-class end-to-end runs of LLM-Inference-Bench (argonne-lcf/LLM-Inference-Bench,
shared/validation/llm-inference-bench/All_results.csv, PROVENANCE §4) against `sim run`,
out of sample (nothing here is fitted to them): simulated vs measured batch latency and
throughput per row, written as a generated section of docs/parallelism.md.

The bench (PROVENANCE §4): one offline `generate` call for the whole batch, input length
= output length = n, `ignore_eos`, fp16; `Latency` is its wall time in seconds and
`Throughput` = batch x (input + output) / Latency (input tokens counted too). So the
simulated latency is the run's end-to-end time (prefill of the batch, then n - 1 decode
steps: the first token comes from prefill) and the simulated throughput batch x 2n / it.

Rows used: vLLM and TensorRT-LLM, Llama-2-70B and Llama-3-70B, on the NVIDIA A100 and
H100 nodes (4 GPUs each). TP = the GPU count (PROVENANCE: "= TP degree for vLLM"; the
TensorRT-LLM engines are taken as built the same way). Hardware:
* H100: `h100_sxm` on `dgx_h100` (JLSE's H100 system; its SKU and interconnect are not
  stated in the repository, SXM with NVLink 4 assumed);
* A100: Polaris nodes, 4 x A100 40 GB SXM4 on NVLink 3 (PROVENANCE infers the 40 GB from the
  run scripts): `a100_80g` with the 40 GB part's datasheet memory (40 GiB, 1,555 GB/s; NVIDIA
  A100 datasheet) on `dgx_a100`'s fitted NVLink collectives.
Stacks: hw_models/stack/presets/vllm-v0.yaml (vllm.yaml's kernels, the engine's host work per step serial
with the GPU: the bench is of 2024, vLLM V0, before V1's async scheduling; --vllm-stack vllm for the
overlapped V1 engine) and trtllm.yaml (no engine host work: none measured). A row whose batch does not fit the
simulated device memory is listed but left out of the errors (the engine ran it in waves
or preempted, which `sim run` does not model).

By default (--sim-run: the `sim run` batch above instead) each row is replayed as a serving run (sim.apps.serve.run.serve, in process): all
`batch` requests arrive at t = 0 with fixed lengths (input = output = n), under the engine's scheduler and
KV pool, so a batch whose KV does not fit runs in waves or with preemption, and the latency is the run's
makespan. vLLM rows: the `vllm-v0` scheduler (the bench is of 2024, vLLM V0's engine, as the stack above),
gpu_memory_utilization 0.9 (vLLM's default). TensorRT-LLM rows: the `trtllm` scheduler (in-flight batching,
GUARANTEED_NO_EVICT) with the KV pool 0.9 of the memory the weights and runtime leave free
(KvCacheConfig.free_gpu_memory_fraction, "Default is 90%", tensorrt_llm/llmapi/llm_args.py), expressed as
the gpu_memory_utilization that leaves the same room (trtllm_utilization).

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/llm_bench_validation.py [--no-doc] [--sim-run] [--both]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from hw_models.machine import Machine, load_machine  # noqa: E402
from hw_models.registry import simulate  # noqa: E402
from sim.apps.serve.instance import RUNTIME_RESERVED_BYTES  # noqa: E402
from sim.apps.serve.run import serve  # noqa: E402
from sim.apps.serve.spec import ServeFile  # noqa: E402
from sim.apps.serve.traces import Requests  # noqa: E402
from sim.core.errors import CapacityError  # noqa: E402
from sim.core.footprint import weight_bytes  # noqa: E402
from sim.core.model import load_model  # noqa: E402
from sim.core.schema import validate_mapping  # noqa: E402
from sim.core.files import atomic_write  # noqa: E402
from sim.core.workload import Formats, Workload  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402

SHARED = shared_validation_dir()
DOC = ROOT / "docs" / "parallelism.md"
BEGIN, END = "<!-- llm-inference-bench: begin (scripts/llm_bench_validation.py) -->", "<!-- llm-inference-bench: end -->"
MODELS = {"meta-llama/Llama-2-70b-hf": "llama2-70b", "meta-llama/Meta-Llama-3-70B": "llama3-70b"}
STACKS = {"vLLM": "vllm-v0", "TensorRT-LLM": "trtllm"}
A100_40GB = {"memory.hbm.capacity_bytes": 40 * 2**30, "memory.hbm.bandwidth_bytes_per_s": 1555e9}
HARDWARE = {   # bench name -> (short name, device preset, its overrides, topology)
    "Nvidia H100 GPU": ("H100", "h100_sxm", {}, "dgx_h100"),
    "Nvidia A100 GPU": ("A100-40GB", "a100_80g", A100_40GB, "dgx_a100"),
}


def bench_rows(shared: Path = SHARED) -> pd.DataFrame:
    """The rows whose setup is stated: engine, 70B model, GPU count (= TP), batch, lengths."""
    d = pd.read_csv(shared / "llm-inference-bench" / "All_results.csv")
    d = d[d.Framework.isin(STACKS) & d.Model.isin(MODELS) & d.Hardware.isin(HARDWARE)]
    d = d.rename(columns={"Num of Hardware": "gpus", "Input Output Length": "n", "Batch Size": "batch",
                          "Latency": "latency_meas_s", "Throughput": "tput_meas"})
    return d.sort_values(["Hardware", "Framework", "Model", "n", "batch"]).reset_index(drop=True)


def _machine(hardware: str, cache: dict[str, Machine] = {}) -> Machine:   # noqa: B006 (a cache)
    if hardware not in cache:
        _, preset, overrides, _ = HARDWARE[hardware]
        cache[hardware] = load_machine(preset, overrides)
    return cache[hardware]


def simulate_row(row) -> dict:
    """One bench row in `sim run`: simulated latency (s) and throughput (bench definition),
    or the reason it was not simulated."""
    hw, preset, _, topo = HARDWARE[row.Hardware]
    n, batch, tp = int(row.n), int(row.batch), int(row.gpus)
    w = Workload(name="llm-inference-bench", model=MODELS[row.Model], batch=batch, prompt_len=n, gen_len=n,
                 flash_attention=True, stack=STACKS[row.Framework], parallel={"tp": tp, "topology": topo})
    out = dict(hw=hw, engine=row.Framework, model=MODELS[row.Model], tp=tp, n=n, batch=batch,
               latency_meas_s=float(row.latency_meas_s), tput_meas=float(row.tput_meas))
    machine = _machine(row.Hardware)
    try:
        r = simulate(w, machine, detail=False)
    except CapacityError:
        return {**out, "latency_sim_s": float("nan"), "tput_sim": float("nan"), "kv_free": float("nan"),
                "note": "exceeds device memory"}
    return {**out, "latency_sim_s": r.e2e_s, "tput_sim": batch * 2 * n / r.e2e_s, "kv_free": kv_share(r, machine),
            "note": ""}


FP16 = Formats(weights="fp16", activations="fp16", kv_cache="fp16")
TRTLLM_FREE_FRACTION = 0.9   # KvCacheConfig.free_gpu_memory_fraction default (tensorrt_llm/llmapi/llm_args.py)
SCHEDULERS = {"vLLM": "vllm-v0", "TensorRT-LLM": "trtllm"}


def trtllm_utilization(model: str, tp: int, capacity_bytes: float, free_fraction: float = TRTLLM_FREE_FRACTION) -> float:
    """The gpu_memory_utilization u whose KV room (u x capacity - weights - runtime, sim.apps.serve.instance)
    equals TRT-LLM's free_fraction x (capacity - weights - runtime): u = 1 - (1 - f) x free / capacity."""
    free = capacity_bytes - weight_bytes(load_model(model), FP16.policy()) / tp - RUNTIME_RESERVED_BYTES
    return 1 - (1 - free_fraction) * free / capacity_bytes


def offline_batch(model: str, batch: int, n: int, scheduler: dict, parallel: dict, stack: str) -> tuple[ServeFile, Requests]:
    """An offline generate(batch) call as a serving run: `batch` requests of n prompt and n output tokens,
    all arriving at t = 0 (no randomness: the lengths are fixed)."""
    raw = dict(name="llm-inference-bench", model=model, stack=stack, flash_attention=True, parallel=parallel,
               formats=FP16.model_dump(),
               serving=dict(arrivals=dict(process="burst", size=batch, num_requests=batch),
                            lengths=dict(prompt=dict(dist="fixed", value=n), output=dict(dist="fixed", value=n)),
                            scheduler=scheduler, prefix_caching=dict(enabled=False)))
    reqs = Requests(arrival_s=np.zeros(batch), prompt_len=np.full(batch, n), output_len=np.full(batch, n))
    return validate_mapping(ServeFile, raw, "llm-inference-bench", "a serving file"), reqs


def serve_row(row) -> dict:
    """One bench row as a serving run (module docstring): latency = makespan, with the KV pool and
    preemptions of the run."""
    hw, _, _, topo = HARDWARE[row.Hardware]
    n, batch, tp, model = int(row.n), int(row.batch), int(row.gpus), MODELS[row.Model]
    machine = _machine(row.Hardware)
    cap = machine.memory[machine.device_tier].capacity_bytes
    kind = SCHEDULERS[row.Framework]
    util = trtllm_utilization(model, tp, cap) if kind == "trtllm" else 0.9   # vLLM's default
    sched = dict(kind=kind, max_num_seqs=max(256, batch), gpu_memory_utilization=util)
    file, reqs = offline_batch(model, batch, n, sched, {"tp": tp, "topology": topo}, STACKS[row.Framework])
    out = dict(hw=hw, engine=row.Framework, model=model, tp=tp, n=n, batch=batch,
               latency_meas_s=float(row.latency_meas_s), tput_meas=float(row.tput_meas))
    try:
        res, _ = serve(file, machine, requests=reqs)
    except CapacityError:
        return {**out, "latency_sim_s": float("nan"), "tput_sim": float("nan"), "kv_free": float("nan"),
                "note": "exceeds device memory"}
    need = batch * -(-2 * n // file.serving.scheduler.block_size)   # blocks the whole batch's KV takes
    note = f"{res.preemptions} preemptions" if res.preemptions else ""
    return {**out, "latency_sim_s": res.makespan_s, "tput_sim": batch * 2 * n / res.makespan_s,
            "kv_free": need / res.total_blocks, "note": note}


def kv_share(r, machine: Machine) -> float:
    """The batch's KV cache per device over the memory its weights and activations leave
    free (the simulated footprint): near 1 the engine's own reserves leave it no room."""
    (tier, roles), = r.memory_by_role.items()
    cap = machine.memory[tier].capacity_bytes
    return roles["kv_cache"] / (cap - roles["weights"] - roles.get("activations", 0.0))


def compare(rows: pd.DataFrame, as_serving: bool = False) -> pd.DataFrame:
    """Simulated vs measured per row; errors are simulated / measured - 1 (signed)."""
    one = serve_row if as_serving else simulate_row
    d = pd.DataFrame([one(r) for r in rows.itertuples()])
    d["latency_err"] = d.latency_sim_s / d.latency_meas_s - 1
    d["tput_err"] = d.tput_sim / d.tput_meas - 1
    return d


def _pct(x: float) -> str:
    return "-" if pd.isna(x) else f"{100 * x:+.1f}%"


def _num(x: float, fmt: str) -> str:
    return "-" if pd.isna(x) else format(x, fmt)


def markdown_table(d: pd.DataFrame) -> str:
    head = ("| hw | engine | model | TP | in = out | batch | latency meas (s) | latency sim (s) | latency err "
            "| tok/s meas | tok/s sim | tok/s err | KV / free | note |")
    lines = [head, "|" + "---|" * 14]
    for r in d.itertuples():
        lines.append(f"| {r.hw} | {r.engine} | {r.model} | {r.tp} | {r.n} | {r.batch} | {r.latency_meas_s:.3f} "
                     f"| {_num(r.latency_sim_s, '.3f')} | {_pct(r.latency_err)} | {r.tput_meas:.1f} "
                     f"| {_num(r.tput_sim, '.1f')} | {_pct(r.tput_err)} | {_num(r.kv_free, '.0%')} | {r.note} |")
    return "\n".join(lines)


def summary(d: pd.DataFrame) -> str:
    """Per node and engine: rows compared, latency MAPE, mean signed error, worst row."""
    lines = ["| hw | engine | rows simulated | not fitting | latency MAPE | mean signed | worst |", "|---|---|---|---|---|---|---|"]
    for (hw, eng), g in d.groupby(["hw", "engine"], sort=True):
        ok = simulated(g)
        worst = ok.latency_err.abs().max() if len(ok) else float("nan")
        lines.append(f"| {hw} | {eng} | {len(ok)} | {len(g) - len(ok)} | {_pct(ok.latency_err.abs().mean())[1:]} "
                     f"| {_pct(ok.latency_err.mean())} | {_pct(worst)[1:]} |")
    return "\n".join(lines)


def simulated(d: pd.DataFrame) -> pd.DataFrame:
    """The rows with a simulated latency (a preempting serving run counts; one that does not fit does not)."""
    return d[d.latency_sim_s.notna()]


def common(d: pd.DataFrame, other: pd.DataFrame, name: str, alt: str) -> str:
    """Both models on the rows both simulate (`sim run` leaves out a batch that does not fit), per GPU."""
    both = d.latency_sim_s.notna() & other.latency_sim_s.notna()
    parts = []
    for hw in sorted(set(d.hw)):
        m = both & (d.hw == hw)
        parts.append(f"{hw} ({m.sum()} rows): {_pct(d[m].latency_err.abs().mean())[1:]} / "
                     f"{_pct(d[m].latency_err.mean())} by {name}, {_pct(other[m].latency_err.abs().mean())[1:]} / "
                     f"{_pct(other[m].latency_err.mean())} by {alt}")
    return "On the rows both simulate, latency MAPE / mean signed: " + "; ".join(parts) + "."


def section(d: pd.DataFrame, as_serving: bool = False, other: pd.DataFrame | None = None) -> str:
    """The generated doc section: `d`'s table, made by the serving replay if `as_serving`, and the
    other model's summary (`other`) beside it."""
    ok = simulated(d)
    model = ("each row replayed as a serving run (the default: all requests at t = 0 under the engine's "
             "scheduler and KV pool; KV / free is then the batch's KV over the simulated pool)") if as_serving else \
        "`sim run` (one batch, prefill then decode; KV / free: the batch's KV over the memory weights leave)"
    name, alt = ("serving replay", "`sim run`") if as_serving else ("`sim run`", "serving replay (the default)")
    extra = [] if other is None else ["", f"The other model, {alt}, on the same rows: all simulated rows latency "
                                      f"MAPE {_pct(simulated(other).latency_err.abs().mean())[1:]}, mean signed "
                                      f"{_pct(simulated(other).latency_err.mean())}.", "", summary(other), "",
                                      common(d, other, name, alt)]
    return "\n".join([
        BEGIN,
        f"Model: {model}. Table by {name}.",
        "",
        f"Generated by `python scripts/llm_bench_validation.py{'' if as_serving else ' --sim-run'}{'' if other is None else ' --both'}` ({len(d)} rows, {len(ok)} simulated; "
        "latency err = simulated / measured - 1; throughput is batch x (input + output) / latency, the bench's "
        f"definition, so its error is 1 / (1 + latency err) - 1). All simulated rows: latency MAPE "
        f"{_pct(ok.latency_err.abs().mean())[1:]}, mean signed {_pct(ok.latency_err.mean())}.",
        "", summary(d), *extra, "", markdown_table(d), END])


def write_doc(text: str, doc: Path = DOC) -> None:
    """Replace the generated section of `doc` (between BEGIN and END), or append it."""
    old = doc.read_text()
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + text + old[old.index(END) + len(END):]
    else:
        new = old.rstrip("\n") + "\n\n" + text + "\n"
    atomic_write(doc, lambda p: p.write_text(new))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--doc", type=Path, default=DOC, help="markdown file whose generated section to rewrite")
    ap.add_argument("--no-doc", action="store_true", help="print only")
    ap.add_argument("--rows", type=int, help="only the first ROWS rows of each node and engine (a quick check)")
    ap.add_argument("--vllm-stack", default=STACKS["vLLM"], help="the stack of the vLLM rows (default %(default)s)")
    ap.add_argument("--sim-run", action="store_true", help="the table by `sim run` instead of the serving replay")
    ap.add_argument("--both", action="store_true", help="also the other model's summary (twice the time)")
    a = ap.parse_args(argv)
    STACKS["vLLM"] = a.vllm_stack
    if not (SHARED / "llm-inference-bench").is_dir():
        print(f"{SHARED / 'llm-inference-bench'} not found")
        return 0
    warnings.simplefilter("ignore")
    rows = bench_rows()
    if a.rows:
        rows = rows.groupby(["Hardware", "Framework"], sort=False).head(a.rows)
    d = compare(rows, not a.sim_run)
    text = section(d, not a.sim_run, compare(rows, a.sim_run) if a.both else None)
    print(text)
    if not a.no_doc:
        write_doc(text, a.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())

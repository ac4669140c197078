#!/usr/bin/env python3
"""Whole-step time and board power of LLaMA decode and prefill steps replayed as CUDA graphs (issues 28, 33).

Each case builds capture_trace's plain-torch LLaMA (random weights; `--weights` quantizes the projections as
capture_trace does: W8A8 FP8 `torch._scaled_mm`, W4A16 tinygemm int4), captures one step as a CUDA graph and:

* counts its kernels and their summed device time in one replay under the profiler (the rest of the step is
  the gaps between graph nodes);
* times it: `--reps` blocks of `--replays` back-to-back replays between two CUDA events; the step time is the
  median block's mean (graph replay: no host launch, the inter-kernel gaps stay), the spread is max/min block;
* draws power from it: replays back-to-back for `--seconds` after a one-second warm-up while NVML reads the board
  (the energy counter over the window where the driver has one; power samples every 50 ms beside it, and the SM
  clock). J/token = energy / tokens the window produced (a decode step makes `batch` tokens, a prefill
  `batch x prompt`).

Idle board power is sampled first, with nothing running. The cases are `PHASE:FORMAT:BATCH:TOKENS`, e.g.
`decode:bf16:8:512` (8 sequences, each attending over 512 cached tokens) or `prefill:bf16:1:2048`.

    python scripts/measure_decode_power.py --model llama2-7b --out power.json \\
        --case decode:bf16:1:512 --case decode:fp8_e4m3:1:512 --case prefill:bf16:1:2048

Without a GPU (`--device cpu`) it runs the same cases eagerly and reports times only: a dry run of the script,
not a measurement.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from capture_trace import WEIGHT_FORMATS, TinyLlama, _nvidia_driver  # noqa: E402
from measure_graph_kernels import capture_graph, replay_kernels, time_graph  # noqa: E402
from sim.apps.trace.scrub import portable_argv  # noqa: E402
from sim.core.model import load_model  # noqa: E402

PHASES = ("decode", "prefill")


@dataclass(frozen=True)
class Case:
    phase: str
    weights: str            # "bf16" or one of capture_trace.WEIGHT_FORMATS (activations stay bf16)
    batch: int
    tokens: int             # decode: the cached tokens each sequence attends over; prefill: the prompt

    @property
    def name(self) -> str:
        return f"{self.phase}:{self.weights}:{self.batch}:{self.tokens}"

    @property
    def tokens_per_step(self) -> int:
        return self.batch * (self.tokens if self.phase == "prefill" else 1)


def parse_case(text: str) -> Case:
    parts = text.split(":")
    if len(parts) != 4:
        raise argparse.ArgumentTypeError(f"{text!r}: expected PHASE:FORMAT:BATCH:TOKENS, e.g. decode:bf16:8:512")
    phase, weights, batch, tokens = parts
    if phase not in PHASES:
        raise argparse.ArgumentTypeError(f"{text!r}: phase must be one of {', '.join(PHASES)}")
    if weights != "bf16" and weights not in WEIGHT_FORMATS:
        raise argparse.ArgumentTypeError(f"{text!r}: format must be bf16 or one of {', '.join(WEIGHT_FORMATS)}")
    try:
        b, t = int(batch), int(tokens)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: BATCH and TOKENS must be integers") from None
    if b < 1 or t < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: BATCH and TOKENS must be >= 1")
    return Case(phase, weights, b, t)


class Board:
    """NVML's view of GPU 0: power (W), the energy counter (J) where the driver has one, the SM clock (MHz)."""

    def __init__(self):
        import pynvml
        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.has_energy = True
        except pynvml.NVMLError:
            self.has_energy = False

    def power_w(self) -> float:
        return self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1e3

    def energy_j(self) -> float | None:
        return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1e3 if self.has_energy else None

    def sm_mhz(self) -> int:
        return self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)

    def limit_w(self) -> float:
        return self.nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1e3


class SmiBoard:
    """The same readings through `nvidia-smi` where the NVML bindings are missing (no energy counter)."""

    has_energy = False

    def _query(self, field: str) -> float:
        import subprocess
        out = subprocess.run(["nvidia-smi", "-i", "0", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True)
        return float(out.stdout.strip().splitlines()[0])

    def power_w(self) -> float:
        return self._query("power.draw")

    def energy_j(self) -> None:
        return None

    def sm_mhz(self) -> int:
        return int(self._query("clocks.sm"))

    def limit_w(self) -> float:
        return self._query("enforced.power.limit")


def open_board() -> Board | SmiBoard:
    try:
        return Board()
    except Exception as exc:  # the bindings missing or NVML refusing: the CLI reads the same sensors
        print(f"measure_decode_power: NVML unavailable ({exc}); reading nvidia-smi", flush=True)
        return SmiBoard()


class Sampler(threading.Thread):
    """Power and SM-clock samples every `period_s` until stopped."""

    def __init__(self, board: Board | SmiBoard, period_s: float = 0.05):
        super().__init__(daemon=True)
        self.board, self.period_s = board, period_s
        self.watts: list[float] = []
        self.mhz: list[int] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.watts.append(self.board.power_w())
            self.mhz.append(self.board.sm_mhz())
            time.sleep(self.period_s)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def idle_power(board: Board | SmiBoard, seconds: float) -> dict:
    s = Sampler(board)
    s.start()
    time.sleep(seconds)
    s.stop()
    return dict(idle_w=statistics.fmean(s.watts), sm_mhz=statistics.median(s.mhz), samples=len(s.watts))


def build(cfg, layers: int, case: Case, device: str):
    """The model and a step closure whose shapes never change (tokens and positions fixed), so a CUDA graph
    can hold it: a decode step appends token `tokens` to caches of `tokens` positions; a prefill step fills
    positions 0..tokens-1."""
    import torch
    q = 1 if case.phase == "decode" else case.tokens
    max_len = case.tokens + 1
    model = TinyLlama(cfg, layers, case.batch, max_len, torch.bfloat16, device, flash=True, seed=0,
                      weights=None if case.weights == "bf16" else case.weights)
    tokens = torch.randint(0, cfg.vocab_size, (case.batch, q), device=device)
    pos = case.tokens if case.phase == "decode" else 0
    return model, (lambda: model.step(tokens, pos))


def draw(torch, board: Board | SmiBoard, replay, step_s: float, seconds: float) -> dict:
    """Replay back-to-back for `seconds` (after 1 s of warm-up) and read the board meanwhile."""
    def run_for(duration_s: float) -> int:
        n = max(1, int(duration_s / step_s))
        for _ in range(n):
            replay()
        torch.cuda.synchronize()
        return n

    run_for(1.0)
    sampler = Sampler(board)
    sampler.start()
    e0, t0 = board.energy_j(), time.perf_counter()
    n = run_for(seconds)
    e1, t1 = board.energy_j(), time.perf_counter()
    sampler.stop()
    window_s = t1 - t0
    sampled_w = statistics.fmean(sampler.watts)
    counter_w = (e1 - e0) / window_s if e0 is not None and e1 is not None else None
    return dict(window_s=window_s, steps=n, avg_power_w=counter_w if counter_w is not None else sampled_w,
                power_source="energy counter" if counter_w is not None else "power samples",
                sampled_power_w=sampled_w, peak_sampled_w=max(sampler.watts),
                sm_mhz=statistics.median(sampler.mhz), samples=len(sampler.watts), step_s_in_window=window_s / n)


def measure(cfg, layers: int, case: Case, device: str, board: Board | SmiBoard | None, args) -> dict:
    import torch
    model, step = build(cfg, layers, case, device)
    with torch.inference_mode():
        if device != "cuda":
            step()
            t0 = time.perf_counter()
            step()
            return dict(case=case.name, **asdict(case), step_s=time.perf_counter() - t0, graph=False)
        graph = capture_graph(torch, step, replays=10)
        step_s, spread = time_graph(torch, graph.replay, args.replays, args.reps)
        k = replay_kernels(torch, graph.replay, 1)
        out = dict(case=case.name, **asdict(case), step_s=step_s, block_spread=spread, graph=True,
                   tokens_per_step=case.tokens_per_step, kernel_s=k["kernel_s"], kernels=k["kernels"])
        if board is not None:
            p = draw(torch, board, graph.replay, step_s, args.seconds)
            p["j_per_token"] = p["avg_power_w"] * p["step_s_in_window"] / case.tokens_per_step
            out.update(p)
    del graph, model
    torch.cuda.empty_cache()
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama2-7b")
    ap.add_argument("--layers", type=int, default=None, help="keep only the first K layers (default: all)")
    ap.add_argument("--case", type=parse_case, action="append", required=True, help="PHASE:FORMAT:BATCH:TOKENS")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--replays", type=int, default=20, help="replays per timed block")
    ap.add_argument("--reps", type=int, default=7, help="timed blocks per case")
    ap.add_argument("--seconds", type=float, default=3.0, help="power window per case")
    ap.add_argument("--idle-seconds", type=float, default=3.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    import torch

    cfg = load_model(args.model)
    layers = args.layers or cfg.num_layers
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("measure_decode_power: --device cuda but torch.cuda.is_available() is False")
    board = open_board() if cuda else None
    result = dict(tool="scripts/measure_decode_power.py",
                  argv=portable_argv(list(sys.argv[1:] if argv is None else argv), ROOT),   # no machine paths
                  date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  device_name=torch.cuda.get_device_name() if cuda else "cpu", torch_version=torch.__version__,
                  cuda_version=torch.version.cuda if cuda else None, driver_version=_nvidia_driver() if cuda else None,
                  model=cfg.to_dict(), layers=layers, activations="bf16", attention="F.scaled_dot_product_attention",
                  cases=[])
    if board is not None:
        result.update(power_limit_w=board.limit_w(), energy_counter=board.has_energy,
                      idle=idle_power(board, args.idle_seconds))
    for case in args.case:
        try:
            row = measure(cfg, layers, case, args.device, board, args)
        except Exception as exc:   # one case's kernel refusing these shapes must not lose the others
            print(f"{case.name}: failed: {type(exc).__name__}: {exc}", flush=True)
            result["cases"].append(dict(case=case.name, **asdict(case), error=f"{type(exc).__name__}: {exc}"))
            continue
        result["cases"].append(row)
        watts = f", {row['avg_power_w']:.0f} W, {row['j_per_token'] * 1e3:.2f} mJ/token" if "avg_power_w" in row else ""
        print(f"{case.name}: {row['step_s'] * 1e3:.3f} ms/step{watts}", flush=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")   # each finished case survives a later failure
    return result


if __name__ == "__main__":
    main()

"""The fit of vLLM V1's host work per sequence beyond vidur's V0 curve (the vllm stack's
`step_overhead.per_seq_s`, hw_models.stack.step_overhead) on ML.ENERGY's H100 runs only: the
procedure scripts/fit_v1_host.py runs.

Each run's steady decode step is read as max_num_seqs / output tokens per second (the time one
step takes if every running sequence emits a token a step; the runs hold >= 85% of max_num_seqs
running, the prefill chunks of the new requests ride in the same steps). The simulated step is
the vllm stack's: max(device, host) + the engine's serial terms (hw_models.stack.engine_overheads),
the device's step of max_num_seqs decoding sequences at the mean context (the task's prompt mean +
half the run's mean output) and the prefill that keeps them running (steady_device_s: in steady
state max_num_seqs / mean output requests finish a step and as many new prompts are computed, as
the replay's continuous batching does). Only the host term depends on the figure fitted.
Without the prefill the fit put its device time on the host: sourcegraph-fim's 3000-token prompts
over 250-token outputs are 12 prompt tokens per running sequence per step (fitted 88 us without, 58 us with, engine terms refitted).

The figure is the one that minimises the step's MAPE over every H100 run, on a 1 us grid. Runs
measured within CAP_MARGIN of the board limit stay in: a GPU at its cap is busy (a step that waited
for the host would draw less), so its step is the device's, and it bounds the host's from above
(a larger figure makes the run host-bound and too slow). B200 is the out-of-sample check: the
same host CPU work beside another GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hw_models.machine import load_machine
from sim.apps.serve import mlenergy as M
from sim.apps.serve.mlenergy_fit import CAP_MARGIN
from sim.apps.serve.mlenergy_inputs import INPUT_MEAN
from sim.apps.serve.iteration import features
from sim.apps.serve.stepcost import ExactCost

GRID_S = np.arange(0.0, 300e-6, 1e-6)    # per-sequence host seconds tried


@dataclass(frozen=True)
class StepPoint:
    """One run's simulated step parts (seconds) and its measured step."""

    run: M.Run
    device_s: float
    host_s: float         # the stack's host curve at max_num_seqs, per_seq_s left out
    serial_s: float       # the engine's serial terms (engine_overheads.iteration_s)
    measured_s: float
    limit_w: float        # the board's power limit

    def step_s(self, per_seq_s: float) -> float:
        return max(self.device_s, self.host_s + per_seq_s * self.run.max_num_seqs) + self.serial_s

    @property
    def capped(self) -> bool:
        return self.run.power_per_gpu_w >= CAP_MARGIN * self.limit_w


def prompts_per_step(run: M.Run) -> float:
    """New prompts computed in one steady step: as many as finish, max_num_seqs / mean output tokens."""
    return run.max_num_seqs / run.avg_output_tokens


def steady_device_s(decode_s: float, with_prompt_s: float, prompts: float) -> float:
    """A steady step's device seconds: the decode step, plus `prompts` times what one whole prompt adds to
    it (vLLM computes a prompt in one step when it fits max_num_batched_tokens, 8192 in every ML.ENERGY
    config, so a step carries whole prompts, not a slice of each: an MoE's expert reads are paid per
    step, and a 93-token slice every step would read the experts a whole prompt reads once in 32)."""
    return decode_s + prompts * (with_prompt_s - decode_s)


def step_point(run: M.Run, machine: Any) -> StepPoint:
    """`run`'s step parts under the vllm stack as shipped, its host term without per_seq_s."""
    f = M.serve_file(run)
    cost = ExactCost(machine, f, f.model_config_())
    n = run.max_num_seqs
    ctx = round(INPUT_MEAN[run.task] + run.avg_output_tokens / 2)
    mapper = cost.mapper
    host = mapper.step_overhead.model_copy(update={"per_seq_s": 0.0}).host_s(n, mapper.devices)
    serial = cost.overheads.iteration_s(n, mapper.collectives_per_iteration(), mapper.devices)
    gpu = machine.units["gpu"]
    prompt = INPUT_MEAN[run.task]
    decode = [(1, ctx)] * n
    def capped_s(seqs: list[tuple[int, int]]) -> float:   # the step under the board limit, as the replay's is
        return cost.capped(cost.device(features(seqs)))[0]
    device = steady_device_s(capped_s(decode), capped_s(decode + [(prompt, prompt)]),
                             prompts_per_step(run)) + mapper.sampler(n)[0]   # top-p: the replay's sampling
    return StepPoint(run, device, host, serial, n / run.throughput_tok_s, gpu.power_limit_w or gpu.power_w)


def points(runs: list[M.Run], gpu: str) -> list[StepPoint]:
    machine = load_machine(M.PRESETS[gpu])
    return [step_point(r, machine) for r in runs if r.gpu == gpu]


def fit(pts: list[StepPoint]) -> float:
    """The grid's per-sequence seconds of least step MAPE over `pts`."""
    return float(GRID_S[int(np.argmin([step_mape(pts, s) for s in GRID_S]))])


def step_mape(pts: list[StepPoint], per_seq_s: float) -> float:
    return M.mape([p.step_s(per_seq_s) / p.measured_s - 1.0 for p in pts])


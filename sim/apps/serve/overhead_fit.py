"""The fit of each engine family's engine_overheads (hw_models.stack.engine_overheads) on the H100
silicon-sample runs: the procedure scripts/fit_engine_overheads.py runs and the test re-checks.

1. Replay every training run (sim.apps.serve.validate) with the family's stack, async scheduling
   on and the three terms at zero; keep per run the simulated mean TTFT and TPOT and the step
   features (validate.step_features: iterations and scheduled sequences inside each span).
2. To first order a term of t s per iteration, u s per scheduled sequence, c s per TP collective
   (an iteration runs `collectives` of them, mapper.collectives_per_iteration), r s per executor rank
   beyond the first (an instance of `ranks` devices) and f s per request moves the means by
       TTFT: f + (t + c x collectives + r x (ranks - 1)) x ttft_steps + u x ttft_seqs,
       TPOT: (t + c x collectives + r x (ranks - 1)) x tpot_steps + u x tpot_seqs,
   so (f, t, u, c) >= 0 solve one non-negative least-squares problem per family (scipy nnls) over
   both equations of every run, each row divided by its measured value (relative errors weigh
   alike whatever the run's scale), and r >= 0 a second one on what they leave (`fit`'s note: every
   vLLM training run is TP >= 2, so fitted jointly r would take the flat step's place). Queueing's
   second-order response to the terms is left to the validation run, which simulates with them.
3. The API front end's service time per streamed token (sim/apps/serve/frontend.py) is no first-order term:
   what it does is queueing, which only the simulation gives. It is fitted by profile: the training runs are
   replayed at each value of a grid with the other terms at zero (`scripts/fit_engine_overheads.py
   --scan-front-end`), steps 1-2 run at each, and the value whose NNLS leaves the least residual is kept,
   with its features (the column `front_end_output_token_s` records the value a row was replayed under).

Training set: half the silicon sample's `h100_sxm` rows (TRAINING_SYSTEMS; `in_training`: a hash of
the run id picks the half, so every engine, model and layout is in both); the other half is the H100
check the fit never saw. H200 and Blackwell rows of the same table, and every other GPU, are never read here.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from sim.apps.serve.validate import ENGINES, Result

TRAINING_SYSTEMS = {"h100_sxm"}
FEATURES = ("sim_ttft_s", "sim_tpot_s", "ttft_steps", "ttft_seqs", "tpot_steps", "tpot_seqs", "collectives", "ranks",
            "front_end_output_token_s")
FRONT = "front_end_output_token_s"   # replayed under, not a first-order term (step 3)
TERMS = ("per_request_s", "step_s", "per_seq_s", "per_collective_s", "per_extra_rank_s")
START, END = "  # fit:start", "  # fit:end"


@dataclass(frozen=True)
class Fit:
    engine: str
    terms: dict[str, float]
    runs: int
    residual: float = 0.0   # the NNLS residual norm (relative errors left at first order)


def in_training(run_id: str) -> bool:
    """The half of the H100 runs the fit reads (a stable hash of the id, not the row order)."""
    return hashlib.sha1(run_id.encode()).digest()[0] % 2 == 0


def zero_terms() -> dict:
    """Machine overrides (hw_models.stack.stack_for) that zero every family's fitted terms."""
    return {"stacks": {e.stack: {"engine_overheads": {t: 0.0 for t in TERMS}} for e in ENGINES.values()}}


def feature_rows(results: list[Result], front: dict[str, float] | None = None) -> list[dict]:
    """`front`: per engine, the front end's service time per token the runs were replayed under."""
    return [{"id": r.run.name, "engine": r.run.engine, "sim_ttft_s": r.sim["ttft_s"], "sim_tpot_s": r.sim["tpot_s"],
             **r.features, FRONT: (front or {}).get(r.run.engine, 0.0)} for r in results]


def write_features(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, ["id", "engine", *FEATURES])
        w.writeheader()
        for row in rows:
            w.writerow({k: (f"{v:.9g}" if isinstance(v, float) else v) for k, v in row.items()})


def read_features(path: Path) -> list[dict]:
    with path.open() as fh:
        return [{FRONT: 0.0, **{k: (float(v) if k in FEATURES else v) for k, v in row.items()}}
                for row in csv.DictReader(fh)]


RANK_TERMS = ("off", "joint", "staged")


def fit(rows: list[dict], measured: dict[str, dict[str, float]], rank_term: str = "staged") -> list[Fit]:
    """One Fit per engine family from the zero-term features and the measured means (by run id).

    `rank_term` says how per_extra_rank_s is fitted. "joint": in the one NNLS with the other terms. Every vLLM
    training run is TP 2-8, so those rows cannot tell a flat step from one that grows with the ranks: jointly,
    NNLS puts it all on the ranks (step_s 0), which replays the TP1 runs of other sources (ML.ENERGY's vLLM
    0.11.1 H100 runs, the RTX PRO 6000 and RTX 4090 vLLM 0.19 runs) far too fast. "staged" (shipped): the other
    terms first, without it, then the per-rank term alone by NNLS on what they leave (relative errors, the same
    rows), so it takes only the part that grows with the ranks and never moves the flat step. "off": 0."""
    if rank_term not in RANK_TERMS:
        raise ValueError(f"rank_term {rank_term!r}: one of {', '.join(RANK_TERMS)}")
    out = []
    for engine in sorted({r["engine"] for r in rows}):
        A, y, X, front = [], [], [], 0.0
        for r in (r for r in rows if r["engine"] == engine and r["id"] in measured and in_training(r["id"])):
            m, front = measured[r["id"]], r.get(FRONT, 0.0)
            c, x = r["collectives"], r["ranks"] - 1
            for key, fixed, steps, seqs in (("ttft_s", 1.0, "ttft_steps", "ttft_seqs"),
                                            ("tpot_s", 0.0, "tpot_steps", "tpot_seqs")):
                A.append(np.array([fixed, r[steps], r[seqs], c * r[steps]]) / m[key])
                X.append(x * r[steps] / m[key])
                y.append((m[key] - r["sim_" + key]) / m[key])
        if not A:
            continue
        A, X, y = np.array(A), np.array(X)[:, None], np.array(y)
        if rank_term == "joint":
            x, residual = nnls(np.hstack([A, X]), y)
        else:
            x, residual = nnls(A, y)
            rank, residual = nnls(X, y - A @ x) if rank_term == "staged" else (np.zeros(1), residual)
            x = np.r_[x, rank]
        out.append(Fit(engine, {**dict(zip(TERMS, (float(v) for v in x))), FRONT: front}, len(A) // 2, float(residual)))
    return out


def _us(v: float) -> str:
    return f"{v * 1e3:.4g} ms" if v >= 1e-3 else f"{v * 1e6:.4g} us"


def block(f: Fit, source: str) -> str:
    """The YAML lines between a stack file's fit markers."""
    return "\n".join([f"  step_s: {_us(f.terms['step_s'])}", f"  per_seq_s: {_us(f.terms['per_seq_s'])}",
                      f"  per_collective_s: {_us(f.terms['per_collective_s'])}",
                      f"  per_extra_rank_s: {_us(f.terms['per_extra_rank_s'])}",
                      f"  per_request_s: {_us(f.terms['per_request_s'])}",
                      f"  {FRONT}: {_us(f.terms.get(FRONT, 0.0))}",
                      f"  fit: scripts/fit_engine_overheads.py, NNLS on {f.runs} {f.engine} runs of {source} "
                      "(h100_sxm rows only)"])


def shipped_block(stack_file: Path) -> str:
    text = stack_file.read_text()
    return text.partition(START + "\n")[2].partition(END)[0].rstrip("\n")


def with_block(stack_file: Path, body: str) -> str:
    text = stack_file.read_text()
    head, _, rest = text.partition(START + "\n")
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{body}\n{END}{tail}"

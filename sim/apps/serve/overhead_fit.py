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
   where f is the delay of the run's deployment (validate_readers.silicon_deployment: f_direct for the
   engine's own server, f_dynamo behind Dynamo; one column each, a run's 1 in its own). (f_direct,
   f_dynamo, t, u) >= 0 solve one non-negative least-squares problem per family (scipy nnls) over both
   equations of every run, each row divided by its measured value (relative errors weigh alike whatever
   the run's scale), and (c, r) >= 0, the terms only a TP > 1 run pays, a second one on what they leave
   (`fit`'s note: every vLLM training run is TP >= 2, so fitted jointly they would take the flat step's
   place). A family whose training runs came through one deployment takes the other's delay from the
   Dynamo path's cost that the families served both ways show (unseen_deployments). Queueing's second-order response to the terms is left to the
   validation run, which simulates with them.
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from sim.apps.serve.validate import ENGINES, Result
from sim.apps.serve.validate_readers import in_training, silicon_deployment  # noqa: F401 (in_training: re-exported)

TRAINING_SYSTEMS = {"h100_sxm"}
FEATURES = ("sim_ttft_s", "sim_tpot_s", "ttft_steps", "ttft_seqs", "tpot_steps", "tpot_seqs", "collectives", "ranks",
            "front_end_output_token_s")
FRONT = "front_end_output_token_s"   # replayed under, not a first-order term (step 3)
TERMS = ("per_request_s", "dynamo_per_request_s", "step_s", "per_seq_s", "per_collective_s", "per_extra_rank_s")
DEPLOYMENT_TERMS = {"direct": "per_request_s", "dynamo": "dynamo_per_request_s"}   # the delay f of each
START, END = "  # fit:start", "  # fit:end"


@dataclass(frozen=True)
class Fit:
    engine: str
    terms: dict[str, float]
    runs: int
    residual: float = 0.0   # the NNLS residual norm (relative errors left at first order)


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

    `rank_term` says how the terms only a TP > 1 run pays (per_collective_s, per_extra_rank_s) are fitted.
    "joint": in the one NNLS with the others. Every vLLM training run is TP 2-8, so those rows cannot tell a flat
    step from one that grows with the collectives or the ranks: jointly, NNLS puts the step there (step_s 0 with
    the per-rank term, or half the step with the per-collective one, once the per-request delay is split by
    deployment), which replays the TP1 runs of other sources (ML.ENERGY's vLLM 0.11.1 H100 runs, the RTX PRO
    6000 and RTX 4090 vLLM 0.19 runs) far too fast. "staged" (shipped): the flat terms first, then the TP terms
    alone by NNLS on what they leave (relative errors, the same rows), so they take only the part that grows with
    the layout and never move the flat step. "off": the TP terms 0."""
    if rank_term not in RANK_TERMS:
        raise ValueError(f"rank_term {rank_term!r}: one of {', '.join(RANK_TERMS)}")
    out = []
    for engine in sorted({r["engine"] for r in rows}):
        A, y, X, front, seen = [], [], [], 0.0, set()
        for r in (r for r in rows if r["engine"] == engine and r["id"] in measured and in_training(r["id"])):
            m, front = measured[r["id"]], r.get(FRONT, 0.0)
            c, x, dep = r["collectives"], r["ranks"] - 1, silicon_deployment(r["id"])
            seen.add(dep)
            for key, fixed, steps, seqs in (("ttft_s", 1.0, "ttft_steps", "ttft_seqs"),
                                            ("tpot_s", 0.0, "tpot_steps", "tpot_seqs")):
                delay = [fixed * (dep == d) for d in DEPLOYMENT_TERMS]
                A.append(np.array([*delay, r[steps], r[seqs]]) / m[key])
                X.append(np.array([c * r[steps], x * r[steps]]) / m[key])
                y.append((m[key] - r["sim_" + key]) / m[key])
        if not A:
            continue
        A, X, y = np.array(A), np.array(X), np.array(y)
        if rank_term == "joint":
            x, residual = nnls(np.hstack([A, X]), y)
        else:
            x, residual = nnls(A, y)
            tp, residual = nnls(X, y - A @ x) if rank_term == "staged" else (np.zeros(2), residual)
            x = np.r_[x, tp]
        out.append((Fit(engine, {**dict(zip(TERMS, (float(v) for v in x))), FRONT: front}, len(A) // 2,
                        float(residual)), seen))
    return unseen_deployments(out)


def unseen_deployments(fits: list[tuple[Fit, set[str]]]) -> list[Fit]:
    """Each family's delay for a deployment none of its runs came through. Dynamo's path (its HTTP frontend, the
    etcd / NATS hop to the engine's Dynamo worker, genai-perf's client) is the same software in front of any engine,
    so its cost over the engine's own server is taken from the families whose runs came both ways (vLLM's:
    dynamo_per_request_s - per_request_s, their mean where several) and a Dynamo-only family's own server is its
    Dynamo delay less that, never below 0 (before: the Dynamo delay itself, so `trtllm` and `sglang` served
    directly added 81 and 110 ms to every first token; a serving trial). Without such a family, the other
    deployment's figure."""
    direct, dynamo = DEPLOYMENT_TERMS["direct"], DEPLOYMENT_TERMS["dynamo"]
    both = [f.terms[dynamo] - f.terms[direct] for f, seen in fits if set(DEPLOYMENT_TERMS) <= seen]
    path = max(sum(both) / len(both), 0.0) if both else 0.0   # a path that costs less than none: none
    out = []
    for f, seen in fits:
        terms = dict(f.terms)
        if "direct" not in seen:
            terms[direct] = max(terms[dynamo] - path, 0.0)
        if "dynamo" not in seen:   # a direct-only family: its own server plus the path (none is shipped)
            terms[dynamo] = terms[direct] + path
        out.append(Fit(f.engine, terms, f.runs, f.residual))
    return out


def _us(v: float) -> str:
    return f"{v * 1e3:.4g} ms" if v >= 1e-3 else f"{v * 1e6:.4g} us"


def block(f: Fit, source: str) -> str:
    """The YAML lines between a stack file's fit markers."""
    return "\n".join([f"  step_s: {_us(f.terms['step_s'])}", f"  per_seq_s: {_us(f.terms['per_seq_s'])}",
                      f"  per_collective_s: {_us(f.terms['per_collective_s'])}",
                      f"  per_extra_rank_s: {_us(f.terms['per_extra_rank_s'])}",
                      f"  per_request_s: {_us(f.terms['per_request_s'])}",
                      f"  dynamo_per_request_s: {_us(f.terms['dynamo_per_request_s'])}",
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

"""What every serving run must satisfy, checked after the run instead of hoped for
(issue 34): every submitted request completed or rejected, no request's first token
after its last or before its arrival, output tokens conserved, and no resource busy
for more than the run's wall time (utilisation at most 1, per instance, replica and
pool). A violation is a bug in sim, not a mistake in the input: InvariantError keeps
its traceback (and a sweep records it as the point's error)."""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.apps.serve.simulator import DONE, REJECTED, ServeResult

# Busy seconds are sums of many float iteration times; a share above 1 by this much is rounding.
UTILIZATION_SLACK = 1e-9


class InvariantError(RuntimeError):
    """A serving run broke one of the invariants above."""


def _ids(mask: np.ndarray) -> str:
    ids = np.flatnonzero(mask)
    return ", ".join(map(str, ids[:10])) + (", ..." if len(ids) > 10 else "")


def check_requests(res: ServeResult, where: str) -> None:
    """Every request completed or rejected; arrival <= first token <= finish; tokens conserved."""
    r = res.requests
    status = r["status"]
    lost = (status != DONE) & (status != REJECTED)
    if lost.any():
        raise InvariantError(f"{where}: {int(lost.sum())} of {len(status)} requests neither completed nor were "
                             f"rejected (requests {_ids(lost)}): a scheduler never admitted them and never refused them")
    done = status == DONE
    early = done & ~((r["arrival_s"] <= r["first_token_s"]) & (r["first_token_s"] <= r["finish_s"]))
    if early.any():
        raise InvariantError(f"{where}: requests {_ids(early)}: first token before arrival or after the last token "
                             "(TTFT <= E2E broken)")
    expected = int(r["output_tokens"][done].sum())
    if res.tokens_out != expected:
        raise InvariantError(f"{where}: {res.tokens_out} output tokens emitted, but the completed requests asked for "
                             f"{expected}")


def _shares(summary: dict[str, Any]) -> list[tuple[str, float]]:
    """Every busy share the summary reports: engine_busy and utilisation per resource, for the
    run and for each replica and pool instance."""
    out = [("engine_busy", summary.get("engine_busy", 0.0))]
    out += [(f"utilization.{k}", v) for k, v in summary.get("utilization", {}).items()]
    groups = [("replicas", summary.get("replicas") or [])]
    pools = summary.get("disaggregated") or {}
    groups += [(f"disaggregated.{side}", pools.get(side) or []) for side in ("prefill", "decode")]
    for name, items in groups:
        for i, item in enumerate(items):
            if "busy" in item:
                out.append((f"{name}[{i}].busy", item["busy"]))
            out += [(f"{name}[{i}].utilization.{k}", v) for k, v in item.get("utilization", {}).items()]
    return out


def check_summary(summary: dict[str, Any], where: str) -> None:
    """No resource busy beyond the wall time."""
    over = [(k, v) for k, v in _shares(summary) if not v <= 1 + UTILIZATION_SLACK]
    if over:
        raise InvariantError(f"{where}: busy share above 1: " + ", ".join(f"{k} = {v:.6g}" for k, v in over[:5]))


def check_run(res: ServeResult, summary: dict[str, Any], where: str) -> None:
    check_requests(res, where)
    check_summary(summary, where)


# A budget that needs more iterations than this gets a warning with its count before the run.
LONG_RUN_ITERATIONS = 100_000


def budget_warning(file: Any, reqs: Any) -> str | None:
    """A token budget so small for the stream that the run crawls (1 token per iteration for
    3,000-token prompts ran for minutes with no sign of progress): the warning, with the least
    number of iterations the stream needs, or None. Every iteration computes at most
    max_num_batched_tokens tokens, so the stream's prompt and output tokens over the budget
    bound the count from below; vLLM itself refuses a budget below max_num_seqs."""
    cfg = file.serving.scheduler
    budget = getattr(cfg, "max_num_batched_tokens", None)
    if budget is None or not len(reqs):
        return None
    tokens = int(reqs.prompt_len.sum() + reqs.output_len.sum())
    least = max(-(-tokens // budget), int(reqs.output_len.max()))
    seqs = getattr(cfg, "max_num_seqs", None)
    below_seqs = cfg.kind in ("vllm", "vllm-v0", "sarathi") and seqs is not None and budget < seqs
    if least <= LONG_RUN_ITERATIONS and not below_seqs:
        return None
    note = (f"; vLLM refuses a budget below max_num_seqs ({seqs}): \"max_num_batched_tokens must be greater than "
            "or equal to max_num_seqs\"" if below_seqs else "")
    # The bound is the larger of the two: the tokens over the budget, and the longest output (one token a step);
    # the line named only the first beside the second's count (a trial: 82,654 / 512 = 162, "at least 942").
    why = (f"{tokens:,} tokens in the stream over {budget:,} a step" if least == -(-tokens // budget)
           else f"its longest output ({least:,} tokens, one a step)")
    return (f"{file.source}: serving.scheduler.max_num_batched_tokens: {budget:,} tokens per iteration: the stream "
            f"needs at least {least:,} iterations ({why}){note}")

"""Measured closed-loop runs that contradict each other (`sim validate-serving`'s consistency check).

A closed loop of N clients with no think time keeps N requests in the system, so by Little's law
(Little 1961; any stationary queue) a run whose mean request takes E2E seconds, TTFT of them before
its first token, holds on average

    n_dec = N x (E2E - TTFT) / E2E   requests decoding, and admits   X = N / E2E   requests a second.

A continuous-batching engine runs its decoding requests together, one token each a step, and fits the
new requests' prefills into the same steps; with the setup fixed (engine, model, GPU, layout, lengths),
a step with fewer requests to decode and fewer prompts to prefill per second is never slower. At one
output length n_dec = X x TPOT x (osl - 1), so a run that decodes fewer requests than another at a
longer TPOT also admits fewer a second: it does less of both kinds of work. Where such a run's measured
TPOT is over MARGIN times the other's, the two rows cannot both be what their columns say: no
simulator can match both. Which one is off, the rows do not tell.

The check reads the measurements only (never a simulated figure), and flags both rows of every such
pair; the replay's table keeps them, and the summary adds the MAPE over the rows not flagged beside
the MAPE over all (docs/serving.md, "Rows that contradict each other"). MARGIN, 1.5, leaves room for
what the means hide (the spread of lengths within a run, a step's prefill share); of the H100 silicon
sample's 775 replayable rows it flags 17, all vLLM gpt-oss-120b: six 512-client rows, each ~100
requests decoding at a shorter TPOT than the same setup's 32- or 64-client rows, and their partners.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

MARGIN = 1.5


@dataclass(frozen=True)
class Contradiction:
    """Two measured runs of one setup: `fewer` decodes fewer requests than `more` (and so admits fewer a second),
    yet its TPOT is over MARGIN times `more`'s."""

    fewer: str
    more: str
    why: str


def load(run) -> tuple[float, float] | None:
    """(requests decoding on average, requests admitted per second) of a closed-loop run by Little's law, from
    its measured means; None where it is not a closed loop or lacks a mean the law needs."""
    m = run.measured
    if run.rate is not None or not run.concurrency or run.osl < 2 or not {"ttft_s", "tpot_s", "e2e_s"} <= m.keys():
        return None
    e2e, ttft = m["e2e_s"], m["ttft_s"]
    if not e2e > ttft >= 0:
        return None
    return run.concurrency * (e2e - ttft) / e2e, run.concurrency / e2e


def setup(run) -> tuple:
    """What must match for two runs' steps to be compared: all but the load and the measured means."""
    return (run.gpu, run.engine, run.model, run.isl, run.osl, run.tp, run.ep, run.quant, run.range_ratio,
            run.token_budget, run.sampling, run.deployment)


def contradictions(runs: list) -> list[Contradiction]:
    """Every pair of `runs` (validate.Run) whose measurements contradict each other (module doc)."""
    groups: dict[tuple, list] = {}
    for r in runs:
        if (lx := load(r)) is not None:
            groups.setdefault(setup(r), []).append((r, lx))
    out = []
    for members in groups.values():
        for (a, (na, _)), (b, (nb, _)) in combinations(members, 2):
            for (f, nf), (o, no) in (((a, na), (b, nb)), ((b, nb), (a, na))):
                tf, to = f.measured["tpot_s"], o.measured["tpot_s"]
                if nf < no and tf > MARGIN * to:   # the admission rate is then lower too (module doc)
                    out.append(Contradiction(f.name, o.name, (
                        f"{f.concurrency} clients decode ~{nf:.0f} requests at {tf * 1e3:.2f} ms a token, "
                        f"{o.concurrency} clients ~{no:.0f} at {to * 1e3:.2f} ms")))
    return out


def flagged(found: list[Contradiction]) -> set[str]:
    """The runs in any contradicting pair."""
    return {n for c in found for n in (c.fewer, c.more)}

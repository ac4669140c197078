"""Measured closed-loop runs that contradict each other (`sim validate-serving`'s consistency check).

A closed loop of N clients with no think time keeps N requests in the system, so by Little's law
(Little 1961; any stationary queue) a run whose mean request takes E2E seconds, TTFT of them before
its first token, holds on average

    n = N x (E2E - TTFT) / E2E   requests decoding, and admits   X = N / E2E   requests a second.

A continuous-batching engine runs its decoding requests together, one token each a step, and fits the
new requests' prefills into the same steps (X x TPOT of them a step). With the setup fixed (engine and
its release, model, GPU, layout, lengths), a run that decodes fewer requests and admits fewer a second
than another does less of both kinds of work a step, so its steps are not longer. Where such a run's
measured TPOT is over MARGIN times the other's, the two rows cannot both be what their columns say: no
simulator can match both. Which one is off, the rows do not tell. (Where E2E is TTFT + TPOT x (osl - 1),
as the silicon sample derives it, n = X x TPOT x (osl - 1), so fewer decoding at a longer TPOT already
means fewer admitted; a measured E2E need not, so both are checked.)

The check reads the measurements only (never a simulated figure). Runs whose release is not recorded are
not compared: two releases can differ by more than MARGIN (kernels, scheduler defaults), and that is no
contradiction in the data. It flags both rows of every pair; the replay's tables keep them, and the
summary adds the MAPE over the rows not flagged beside the MAPE over all (docs/serving.md, "Rows that
contradict each other"). MARGIN, 1.5, leaves room for what the means hide (the spread of lengths within
a run: n counts outputs of osl tokens where a client drawing lengths sends fewer, the same share for
both rows of a pair).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

MARGIN = 1.5


@dataclass(frozen=True)
class Contradiction:
    """Two measured runs of one setup: `fewer` decodes fewer requests than `more` and admits fewer a second, yet
    its TPOT is over MARGIN times `more`'s. `keys`: the two runs' run_key, which flagged() collects."""

    fewer: str
    more: str
    why: str
    keys: tuple[tuple, tuple]


def run_key(run) -> tuple:
    """A run told apart from every other of its table (an id alone may repeat across files or layouts)."""
    return (run.name, run.gpu, run.engine, run.model, run.isl, run.osl, run.concurrency, run.tp, run.ep)


def load(run, means: dict[str, float] | None = None) -> tuple[float, float] | None:
    """(requests decoding on average, requests admitted per second) of a closed-loop run by Little's law, from
    `means` (default: its measured ones); None where it is not a closed loop or lacks a mean the law needs."""
    m = run.measured if means is None else means
    if run.rate is not None or not run.concurrency or run.osl < 2 or not {"ttft_s", "tpot_s", "e2e_s"} <= m.keys():
        return None
    e2e, ttft = m["e2e_s"], m["ttft_s"]
    if not e2e > ttft >= 0:   # NaN too
        return None
    return run.concurrency * (e2e - ttft) / e2e, run.concurrency / e2e


def setup(run) -> tuple:
    """What must match for two runs' steps to be compared: all but the load and the measured means."""
    return (run.gpu, run.engine, run.version, run.model, run.isl, run.osl, run.tp, run.ep, run.quant,
            run.range_ratio, run.token_budget, run.sampling, run.deployment)


def contradictions(runs: list) -> list[Contradiction]:
    """Every pair of `runs` (validate.Run) whose measurements contradict each other (module doc)."""
    groups: dict[tuple, list] = {}
    for r in runs:
        if r.version is not None and (lx := load(r)) is not None:
            groups.setdefault(setup(r), []).append((r, *lx))
    out = []
    for members in groups.values():
        for a, b in combinations(members, 2):
            for (f, nf, xf), (o, no, xo) in ((a, b), (b, a)):
                tf, to = f.measured["tpot_s"], o.measured["tpot_s"]
                if nf < no and xf < xo and tf > MARGIN * to:
                    out.append(Contradiction(f.name, o.name, (
                        f"{f.engine} {f.version}: {f.concurrency} clients decode ~{nf:.0f} requests at "
                        f"{tf * 1e3:.2f} ms a token, {o.concurrency} clients ~{no:.0f} at {to * 1e3:.2f} ms"),
                        (run_key(f), run_key(o))))
    return out


def flagged(found: list[Contradiction]) -> set[tuple]:
    """The run_key of every run in a contradicting pair."""
    return {k for c in found for k in c.keys}


def uncontradicted(results: list, found: list[Contradiction]) -> list:
    """The results (validate.Result) whose run is in no contradicting pair."""
    flags = flagged(found)
    return [r for r in results if run_key(r.run) not in flags]


HELD = 0.5   # a run held back: it decoded under this share of what its replay decoded


def decoding(result) -> dict[str, float] | None:
    """A replayed closed-loop run's requests decoding on average by Little's law, measured and simulated; None where
    either is not known."""
    m, s = load(result.run), load(result.run, result.sim)
    return dict(measured=m[0], simulated=s[0]) if m and s else None


def held_back(results: list) -> str:
    """The summary's note of the runs that decoded under HELD of what their replay did: a limit the table does
    not record (a client's connection pool: --client-connections, or an engine setting), or a step the replay
    makes too slow; empty where none."""
    n = sum(1 for r in results if (d := decoding(r)) and d["measured"] < HELD * d["simulated"])
    return (f"; {n} replayed row{'s' if n > 1 else ''} decoded under {HELD:.0%} of the requests the replay did "
            "(Little's law on both; --json `decoding`: a limit the table does not record, such as a client pool, "
            "--client-connections)") if n else ""

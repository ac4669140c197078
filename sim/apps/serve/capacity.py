"""The highest arrival rate whose run meets every SLO (Vidur-Search style): grow or
shrink the rate by doubling until the SLO flips, then bisect. Every run replays the
same seed, so latency rises with rate (tests/test_serve.py) and bisection is sound.
Under a closed loop (sim.apps.serve.closed) the knob is the number of clients, an
integer: doubled, then bisected to adjacent counts, each client sending as many
requests as in the file (num_requests / concurrency)."""

from __future__ import annotations

import inspect

import math

from typing import Any, Callable

from hw_models.machine import Machine
from sim.apps.serve.early_stop import Settled, Watch
from sim.apps.serve.run import serve
from sim.apps.serve.serving_mapper import engine_terms
from sim.apps.serve.spec import Burst, Closed, ServeFile, TraceArrivals
from sim.core.errors import ConfigError

DOUBLINGS = 16
# A capacity run whose queue drains for longer than this share of its arrival window is reported as transient.
TRANSIENT_DRAIN = 0.25


def find_capacity(file: ServeFile, machine: Machine, slo: dict[str, float], bisections: int = 8,
                  exact: bool = False, on_point: Callable[[float, dict, bool], None] | None = None,
                  early_stop: bool = True) -> dict[str, Any]:
    """The capacity (module doc). `early_stop`: a step stops once it fails for certain
    (sim.apps.serve.early_stop; the same capacity, fewer requests simulated)."""
    a = _searchable(file, slo)
    cache: dict = {}
    points: list[dict[str, Any]] = []
    closed = isinstance(a, Closed)
    knob = "concurrency" if closed else "rate"
    per_client = requests_per_client(file)
    passed: dict[float, Any] = {}   # the highest passing step's whole run: what the outputs at capacity show

    def run(rate: float) -> tuple[bool, dict]:
        try:
            res, s = serve(step_file(file, slo, rate), machine, exact=exact, cache=cache,
                           watch=Watch(slo) if early_stop else None)
            ok = s["completed"] > 0 and all(v <= 1.0 for v in s["slo_met"].values())
        except Settled as stop:
            s, ok = stop.summary, False
        if ok and rate >= max(passed, default=rate):
            passed.clear()
            passed[rate] = res
        points.append(dict(rate=rate, ok=ok, summary=s, knob=knob))   # what `rate` counts: clients or requests/s
        if on_point:   # the step's load and summary, and its verdict where the callback takes a third argument
            on_point(*(rate, s, ok)[:3 if len(inspect.signature(on_point).parameters) >= 3 else 2])
        return ok, s

    lo, hi = None, None
    rate = getattr(a, knob)
    for _ in range(DOUBLINGS):
        ok, _ = run(rate)
        if ok:
            lo = rate
            if hi is not None:
                break
            rate *= 2
        else:
            hi = rate
            if lo is not None or (closed and rate == 1) or _load_free(points):
                break
            rate = rate // 2 if closed else rate / 2
    unit = "requests/s" if not closed else "client" if hi == 1 else "clients"   # hi: the lowest failing run
    if lo is None:
        raise ConfigError(f"{file.source}: serving.slo: not met even at {hi:.3g} {unit}{_worst(points)}"
                          f"{_turned(points[-1]['summary'])}{_below_delay(slo, file, machine)}")
    if hi is None:
        raise ConfigError(f"{file.source}: serving.slo: still met at {lo:.3g} {unit}; the stream is too short "
                          "to load the machine (raise serving.arrivals.num_requests)")
    for _ in range(bisections):
        if closed and hi - lo <= 1:
            break
        mid = (lo + hi) // 2 if closed else (lo + hi) / 2
        ok, _ = run(mid)
        lo, hi = (mid, hi) if ok else (lo, mid)
    # each client sends the file's requests per client: a closed run's request count scales with the clients
    report = _report(points, lo, hi, knob, closed)
    if closed and not report["transient"]:
        report["transient"] = first_wave(slo, per_client)
    return report | ({"requests_per_client": per_client} if closed else {}) | {"result": passed[lo]}


def first_wave(slo: dict[str, float], per_client: int) -> str | None:
    """Where a closed loop's first wave (every client's first request, sent together at t = 0: 1/per_client of
    each step's stream) can decide a percentile SLO: the p-th percentile's tail, 1 - p/100 of the requests, holds
    less than twice the wave (the SLO counts every request; warmup_requests trims the benchmark means only). A trial's
    search read 18 clients at 5 requests a client and 247 at 25."""
    stats = {k: k.partition("_")[2] for k in slo}   # <metric>_<stat>, as every SLO reader splits it
    tails = {k: 100 - int(st[1:]) for k, st in stats.items() if st.startswith("p") and st[1:].isdigit()}
    short = sorted(k for k, tail in tails.items() if tail and per_client * tail < 200)   # tails in percent
    if not short:
        return None
    need = max(math.ceil(200 / tails[k]) for k in short)
    return (f"each client sends {per_client} request(s), so the first wave, all sent at t = 0, is 1/{per_client} of "
            f"the stream and can decide {', '.join(short)}: the capacity holds for this stream's start-up; raise "
            f"serving.arrivals.num_requests to {need} a client or more")


def _worst_slo(s: dict[str, Any]) -> tuple[str, float]:
    """A step's SLO furthest over its limit: (name, measured / limit)."""
    return max(s["slo_met"].items(), key=lambda kv: kv[1])


def _load_free(points: list[dict[str, Any]]) -> bool:
    """Whether the last two failing steps, the load halved between them, miss by the same SLO within 1%: no lower
    load will meet it (a capacity planner's trial halved a 70B TP2 rate twelve times, to 0.0003 requests/s, at
    TPOT p90 1.09x its limit throughout)."""
    if len(points) < 2 or points[-1]["ok"] or points[-2]["ok"]:
        return False
    (a, ra), (b, rb) = (_worst_slo(p["summary"]) for p in points[-2:])
    return a == b and ra > 1.0 and rb > 1.0 and abs(rb / ra - 1.0) < 0.01


def _worst(points: list[dict[str, Any]]) -> str:
    """The lowest failing step's worst SLO, and where halving the load stopped moving it, that it is the load's."""
    name, ratio = _worst_slo(points[-1]["summary"])
    flat = "; halving the load no longer moves it: no load meets it" if _load_free(points) else ""
    return f": {name} at {ratio:.3g}x its limit{flat}"


def _turned(s: dict[str, Any]) -> str:
    """A step's rejected requests, each an SLO miss (metrics.slo_stats), as the failing search says them."""
    if not s.get("rejected"):
        return ""
    why = ", ".join(f"{n}: {reason}" for reason, n in s["rejected_reasons"].items())
    return f"; {s['rejected']} of {s['requests']} requests were rejected ({why}), each an SLO miss"


def _below_delay(slo: dict[str, float], file: ServeFile, machine: Machine) -> str:
    """Why no load meets a TTFT or E2E SLO shorter than the stack's delay per request, which every request pays
    before the engine sees it (a trial's sglang ttft_p90 0.1 s against its 109.7 ms behind Dynamo)."""
    eo = engine_terms(file, machine)
    delay = eo.request_delay_s(file.serving.deployment) if eo else 0.0
    short = [k for k, v in slo.items() if k.partition("_")[0] in ("ttft", "e2e") and v <= delay]
    return (f"; {', '.join(short)} is below the {delay * 1e3:.4g} ms every request waits before the engine sees it "
            "(the stack's engine_overheads per_request_s for this deployment: docs/serving.md)") if short else ""


def _searchable(file: ServeFile, slo: dict[str, float]):
    """The file's arrivals, refused in one line where there is no load to search or no SLO to hold."""
    a = file.serving.arrivals
    if isinstance(a, (Burst, TraceArrivals)):
        raise ConfigError(f"{file.source}: serving.arrivals.process: --find-capacity varies a rate or a client count; "
                          f"{a.process} arrivals have neither (use poisson, gamma, constant or closed)")
    if not slo:
        raise ConfigError(f"{file.source}: serving.slo: --find-capacity needs an SLO (--slo ttft_p90=0.2)")
    return a


def requests_per_client(file: ServeFile) -> int:
    """A closed loop's requests per client, the file's (num_requests / concurrency); 0 for open arrivals."""
    a = file.serving.arrivals
    return max(1, a.num_requests // a.concurrency) if isinstance(a, Closed) else 0


def step_file(file: ServeFile, slo: dict[str, float], load: float) -> ServeFile:
    """The serving file of the search's step at `load`: the arrival rate, or a closed loop's clients, each
    sending the file's requests per client (so a step's request count scales with its clients)."""
    a = file.serving.arrivals
    update = ({"concurrency": int(load), "num_requests": int(load) * requests_per_client(file)}
              if isinstance(a, Closed) else {"rate": load})
    return file.model_copy(update={"serving": file.serving.model_copy(update={
        "arrivals": a.model_copy(update=update), "slo": slo})})


def _report(points: list[dict[str, Any]], lo: float, hi: float, knob: str, closed: bool) -> dict[str, Any]:
    """The capacity found (`lo`, the highest passing knob value), the SLO that limits it (read at `hi`, the
    lowest failing one), and the run at capacity's goodput."""
    best = next(p for p in points if p["rate"] == lo)["summary"]
    above = next(p for p in points if p["rate"] == hi)["summary"]
    # a step stopped early (sim.apps.serve.early_stop) is limited by the SLO that settled it
    limiting = above["settled"]["slo"] if "settled" in above else max(above["slo_met"], key=above["slo_met"].get)
    # Goodput and capacity over one stated window (issue 30): the capacity run's span, first arrival to last
    # completion. Goodput is below the rate by the requests outside the SLO and by the drain after the last
    # arrival (span longer than the arrivals' window); both shares are reported so the two figures reconcile.
    n = best["requests"]
    # the expected arrival window of the stream at rate `lo` (a closed loop has none)
    arrivals_s = (n - 1) / lo if n > 1 and not closed else 0.0
    # A queue still draining long after the last arrival: the stream ended before the machine reached a steady
    # state, so the rate met the SLO only for a while (a trial: 136 requests/s at 300 requests, 51 at 10,000).
    drain_s = best["duration_s"] - arrivals_s
    transient = arrivals_s > 0 and drain_s > TRANSIENT_DRAIN * arrivals_s
    return dict(rate=lo, knob=knob, goodput_req_s=best["goodput_req_s"], goodput_tok_s=best["goodput_tok_s"],
                transient=(f"the run at capacity drained for {drain_s:.3g} s after its arrivals' ~{arrivals_s:.3g} s: "
                           "the stream ended before a steady state, so the rate holds only for a stream this short; "
                           "raise serving.arrivals.num_requests") if transient else None,
                window_s=best["duration_s"], within_slo=best["goodput_req_s"] / best["throughput_req_s"]
                if best["throughput_req_s"] else 0.0, arrival_window_s=arrivals_s,
                limiting=limiting, limit_ratio=above["slo_met"][limiting], limit_settled="settled" in above,
                points=sorted(points, key=lambda p: p["rate"]), summary=best)

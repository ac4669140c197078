"""Request streams from the serving file: arrival processes and length
distributions (numpy, one seeded generator per stream), or a replayed trace."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.apps.serve import spec as s
from sim.apps.serve.traces import Requests, read_trace
from sim.core.errors import ConfigError

def make_requests(file: s.ServeFile) -> Requests:
    srv = file.serving
    if srv.trace is not None:
        t = srv.trace
        reqs = read_trace(s.resolve(file, t.path), t.format, t.time_scale, t.hash_block_tokens,
                          srv.arrivals.num_requests)
    else:
        rng = np.random.default_rng(srv.arrivals.seed)
        arrival = arrival_times(srv.arrivals, rng, file.source)
        n = len(arrival)
        prompt = sample_lengths(srv.lengths.prompt, n, rng, file, "prompt")
        output = sample_lengths(srv.lengths.output, n, rng, file, "output")
        reqs = Requests(arrival, prompt, output)
    pc = srv.prefix_caching
    if pc is not None and pc.enabled and pc.shared_prefix is not None:
        rng = np.random.default_rng(srv.arrivals.__dict__.get("seed", 0) + 1)
        reqs.hash_ids = shared_prefix_hashes(reqs.prompt_len, pc.shared_prefix, rng)
        reqs.hash_block_tokens = pc.shared_prefix.tokens
    return reqs


def arrival_times(a, rng: np.random.Generator, source: str = "") -> np.ndarray:
    """Arrival times (s) of `num_requests` requests, or of all that arrive within `duration_s`."""
    key = f"{source}: serving.arrivals"
    if isinstance(a, s.Burst):
        gap, per = a.interval_s, a.size
    elif isinstance(a, s.Closed):   # all zero: the clients set each time as they send (sim.apps.serve.closed)
        gap, per = 0.0, a.num_requests
    else:
        gap, per = 1.0 / a.rate, 1
    if a.num_requests is None:
        expected = a.duration_s / gap * per if gap else per
        if expected > a.max_requests:
            raise ConfigError(f"{key}.duration_s: the stream holds about {expected:,.0f} requests (rate x duration), "
                              f"over max_requests {a.max_requests:,}; shorten duration_s, lower the rate "
                              f"or raise serving.arrivals.max_requests")
    elif a.num_requests > a.max_requests:
        raise ConfigError(f"{key}.num_requests: {a.num_requests:,} requests, over max_requests {a.max_requests:,} "
                          f"(raise serving.arrivals.max_requests to run it)")
    n = a.num_requests or (int(expected * 1.5 + 64) if gap else per)
    if isinstance(a, s.Poisson):
        t = np.cumsum(rng.exponential(gap, n))
    elif isinstance(a, s.Gamma):
        shape = 1.0 / a.cv ** 2   # gaps with mean 1/rate and the given coefficient of variation
        t = np.cumsum(rng.gamma(shape, gap / shape, n))
    elif isinstance(a, s.Constant):
        t = np.arange(n) * gap
    else:
        t = (np.arange(n) // per) * gap
    t = t - t[0] if isinstance(a, (s.Poisson, s.Gamma)) else t
    if not np.isfinite(t).all():   # a rate of 1e-320/s: gaps past the largest float
        raise ConfigError(f"{key}: arrival times overflow to infinity; the rate or interval is out of any physical range")
    if getattr(a, "duration_s", None) is not None:   # a closed loop has none
        t = t[t < a.duration_s]
        if len(t) == 0:
            raise ConfigError(f"{key}.duration_s: {a.duration_s}: no request arrives within it")
    return t


def sample_lengths(d, n: int, rng: np.random.Generator, file: s.ServeFile, which: str) -> np.ndarray:
    if isinstance(d, s.Fixed):
        x = np.full(n, float(d.value))
    elif isinstance(d, s.Uniform):
        if d.high < d.low:
            raise ConfigError(f"{file.source}: serving.lengths.{which}.high: below low")
        x = rng.integers(d.low, d.high + 1, n).astype(float)
    elif isinstance(d, s.Normal):
        x = rng.normal(d.mean, d.std, n)
    elif isinstance(d, s.LogNormal):
        sigma2 = np.log1p(d.cv ** 2)   # moments of the lengths -> parameters of their logarithm
        x = rng.lognormal(np.log(d.mean) - sigma2 / 2, np.sqrt(sigma2), n)
    elif isinstance(d, s.Zipf):
        x = rng.zipf(d.a, n).astype(float)
    else:
        x = _histogram(d, n, rng, file, which)
    if d.max < d.min:
        raise ConfigError(f"{file.source}: serving.lengths.{which}.max: below min")
    return np.clip(np.round(x), d.min, d.max).astype(np.int64)


def _histogram(d: s.Histogram, n: int, rng: np.random.Generator, file: s.ServeFile, which: str) -> np.ndarray:
    path = s.resolve(file, d.path)
    key = f"{file.source}: serving.lengths.{which}.path"
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{key}: {path}: {str(exc).splitlines()[0]}") from None
    if not {"length", "count"} <= set(df.columns) or df.empty:
        raise ConfigError(f"{key}: {path}: expected columns length,count and at least one row")
    length, p = (pd.to_numeric(df[c], errors="coerce").to_numpy(float) for c in ("length", "count"))
    if not (np.isfinite(length).all() and np.isfinite(p).all()):   # "abc", NaN, 1e400
        raise ConfigError(f"{key}: {path}: length and count must be finite numbers")
    if (length < 1).any() or (p < 0).any() or p.sum() <= 0:
        raise ConfigError(f"{key}: {path}: lengths must be positive and counts non-negative, not all zero")
    return rng.choice(length, size=n, p=p / p.sum())


def shared_prefix_hashes(prompt: np.ndarray, sp: s.SharedPrefix, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Each request's prompt starts with one of `groups` shared prefixes of `tokens` tokens:
    one hash id (the group's) covers it, the rest of the prompt is the request's own."""
    group = rng.integers(0, sp.groups, len(prompt))
    return [(int(g),) if p >= sp.tokens else () for g, p in zip(group, prompt)]

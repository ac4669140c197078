"""The request stream of a serving file: arrival processes and length distributions, each
schema class sampling its own (`times`, `draw`; sim.apps.serve.arrivals draws the stream).
Re-exported by sim.apps.serve.spec, the serving file's schema."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field, StrictInt, model_validator

from sim.core.errors import ConfigError
from sim.core.files import note_input
from sim.core.schema import Strict

Pos = Annotated[float, Field(gt=0)]
PosInt = Annotated[StrictInt, Field(gt=0)]   # `true` or "4" are refused, not read as 1 or 4
# A coefficient of variation: beyond these a stream is constant or one burst, and cv**2 overflows floats.
CV = Annotated[float, Field(ge=1e-3, le=1e3)]


MAX_SPAN_S = 1e9   # the longest arrival stream: float64 seconds resolve ~0.12 us at 1e9 s


class _Count(Strict):
    """How long the stream runs: a number of requests or a duration (seconds)."""
    num_requests: PosInt | None = None
    duration_s: Pos | None = None
    seed: int = Field(default=0, ge=0)   # numpy seeds are not negative
    # A longer stream takes hours to simulate and gigabytes to hold: refused with its count unless raised here.
    max_requests: PosInt = 1_000_000

    @model_validator(mode="after")
    def _one(self):
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s")
        span = self.duration_s if self.duration_s is not None else \
            -(-self.num_requests // self.per_arrival) * self.gap_s
        # Past MAX_SPAN_S float64 seconds lose the microsecond (a rate of 1e-12 ran on a 7.8 ms grid, a trial); an
        # infinite span (a subnormal rate) is refused later, as out of any physical range.
        if MAX_SPAN_S < span < float("inf"):
            raise ValueError(f"the stream spans {span:.3g} s, past {MAX_SPAN_S:.0e} s (~32 years), where the "
                             "simulated clock loses its microsecond resolution; raise the rate or shorten the stream")
        return self

    @property
    def gap_s(self) -> float:
        """Seconds between arrivals (between bursts for a burst stream)."""
        return 1.0 / self.rate

    @property
    def per_arrival(self) -> int:
        """Requests arriving together."""
        return 1

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Arrival times (s) of `n` requests, the first at 0."""
        raise NotImplementedError


class Poisson(_Count):
    process: Literal["poisson"]
    rate: Pos                    # requests per second

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        t = np.cumsum(rng.exponential(self.gap_s, n))
        return t - t[0]


class Gamma(_Count):
    process: Literal["gamma"]
    rate: Pos
    cv: CV                       # coefficient of variation of the gaps (1 = Poisson)

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        shape = 1.0 / self.cv ** 2   # gaps with mean 1/rate and the given coefficient of variation
        t = np.cumsum(rng.gamma(shape, self.gap_s / shape, n))
        return t - t[0]


class Constant(_Count):
    process: Literal["constant"]
    rate: Pos

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.arange(n) * self.gap_s


class Burst(_Count):
    process: Literal["burst"]
    size: PosInt                 # requests arriving together
    interval_s: Annotated[float, Field(ge=0)] = 0.0   # between bursts (0: one burst)

    @property
    def gap_s(self) -> float:
        return self.interval_s

    @property
    def per_arrival(self) -> int:
        return self.size

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return (np.arange(n) // self.size) * self.interval_s


class TraceArrivals(Strict):
    process: Literal["trace"]
    num_requests: PosInt | None = None   # the first requests of the trace only


class Closed(Strict):
    """N clients, each sending its next request when the previous returns (sim.apps.serve.closed)."""
    process: Literal["closed"]
    concurrency: PosInt          # clients, each with one request in flight
    num_requests: PosInt         # sent in all (the first `concurrency` at t = 0)
    think_time_s: Annotated[float, Field(ge=0)] = 0.0       # a client's pause between a reply and its next send
    warmup_requests: Annotated[StrictInt, Field(ge=0)] = 0  # the first sends, left out of benchmark_figures
    # The client's connection pool: at most this many requests at the server, the other sends waiting in the
    # client with their clocks running (None: one connection per client). aiohttp's TCPConnector holds 100 by
    # default, which a benchmark client sharing one ClientSession inherits (sim.apps.serve.closed).
    max_connections: PosInt | None = None
    seed: int = Field(default=0, ge=0)
    max_requests: PosInt = 1_000_000

    @model_validator(mode="after")
    def _some_measured(self) -> "Closed":
        if self.warmup_requests >= self.num_requests:   # nothing left to measure: the means would be NaN
            raise ValueError(f"warmup_requests {self.warmup_requests} leaves none of num_requests "
                             f"{self.num_requests} to measure")
        return self

    @property
    def gap_s(self) -> float:
        """No schedule: every time is 0, the clients set each one as they send."""
        return 0.0

    @property
    def per_arrival(self) -> int:
        return self.num_requests

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.zeros(n)


Arrivals = Annotated[Union[Poisson, Gamma, Constant, Burst, TraceArrivals, Closed], Field(discriminator="process")]


class _Clip(Strict):
    min: PosInt = 1
    max: PosInt = 1_000_000

    @model_validator(mode="after")
    def _ordered(self) -> "_Clip":
        if self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self

    def draw(self, n: int, rng: np.random.Generator, key: str, base: Path) -> np.ndarray:
        """`n` lengths before rounding and clipping; `key` names the setting in errors, `base` the
        folder relative paths start from."""
        raise NotImplementedError

    @property
    def most(self) -> int:
        """The longest length the distribution can draw: its own largest (`_largest`), clipped as draws are."""
        return min(max(self._largest(), self.min), self.max)

    def _largest(self) -> int:
        """The largest length before the clip; unbounded distributions reach the clip's max."""
        return self.max


class Fixed(_Clip):
    dist: Literal["fixed"]
    value: PosInt

    @model_validator(mode="after")
    def _inside(self) -> "Fixed":
        """A fixed value the clip moves is two lengths written for one (a trial's `value: 100, min: 200` ran 200)."""
        if not self.min <= self.value <= self.max:
            raise ValueError(f"value {self.value} is outside min {self.min} .. max {self.max}")
        return self

    def _largest(self) -> int:
        return self.value

    def draw(self, n: int, rng: np.random.Generator, key: str, base: Path) -> np.ndarray:
        return np.full(n, float(self.value))


class Sequence(_Clip):
    """Lengths as listed, request i taking value i (cycled when the stream is longer): a measured run's
    per-request lengths replayed in its order (validate-serving's benchmark logs)."""
    dist: Literal["sequence"]
    values: Annotated[list[PosInt], Field(min_length=1)]

    def _largest(self) -> int:
        return max(self.values)

    def draw(self, n: int, rng: np.random.Generator, key: str, base: Path) -> np.ndarray:
        return np.resize(np.asarray(self.values, dtype=float), n)


class Uniform(_Clip):
    dist: Literal["uniform"]
    low: PosInt
    high: PosInt

    def _largest(self) -> int:
        return self.high

    def draw(self, n: int, rng: np.random.Generator, key: str, base: Path) -> np.ndarray:
        if self.high < self.low:
            raise ConfigError(f"{key}.high: below low")
        return rng.integers(self.low, self.high + 1, n).astype(float)


class Normal(_Clip):
    dist: Literal["normal"]
    mean: Pos
    std: Annotated[float, Field(ge=0)]

    def draw(self, n: int, rng: np.random.Generator, key: str, base: Path) -> np.ndarray:
        return rng.normal(self.mean, self.std, n)


class LogNormal(_Clip):
    dist: Literal["lognormal"]
    mean: Pos                    # of the lengths themselves, not of their logarithm
    cv: CV

    def draw(self, n: int, rng: np.random.Generator, key: str, base: Path) -> np.ndarray:
        sigma2 = np.log1p(self.cv ** 2)   # moments of the lengths -> parameters of their logarithm
        return rng.lognormal(np.log(self.mean) - sigma2 / 2, np.sqrt(sigma2), n)


class Zipf(_Clip):
    dist: Literal["zipf"]
    a: Annotated[float, Field(gt=1)]

    def draw(self, n: int, rng: np.random.Generator, key: str, base: Path) -> np.ndarray:
        return rng.zipf(self.a, n).astype(float)


class Histogram(_Clip):
    dist: Literal["histogram"]
    path: str                    # CSV with columns length,count (relative to the serving file)

    def draw(self, n: int, rng: np.random.Generator, key: str, base: Path) -> np.ndarray:
        path = base / self.path
        length, p = read_histogram(path, f"{key}.path: {path}")
        return rng.choice(length, size=n, p=p / p.sum())


def read_histogram(path: Path, where: str) -> tuple[np.ndarray, np.ndarray]:
    """The lengths and counts of a length,count CSV; `where` names it in errors."""
    import pandas as pd   # here, not at the top: pandas is most of `sim`'s start-up (issue 30)

    note_input(path)  # no output of this command may replace it
    try:
        df = pd.read_csv(path)
    except (OSError, EOFError, ValueError) as exc:   # EOFError: a gzip cut short
        raise ConfigError(f"{where}: {str(exc).splitlines()[0]}") from None
    if not {"length", "count"} <= set(df.columns) or df.empty:
        raise ConfigError(f"{where}: expected columns length,count and at least one row")
    length, p = (pd.to_numeric(df[c], errors="coerce").to_numpy(float) for c in ("length", "count"))
    if not (np.isfinite(length).all() and np.isfinite(p).all()):   # "abc", NaN, 1e400
        raise ConfigError(f"{where}: length and count must be finite numbers")
    if (length < 1).any() or (p < 0).any() or p.sum() <= 0:
        raise ConfigError(f"{where}: lengths must be positive and counts non-negative, not all zero")
    return length, p


Length = Annotated[Union[Fixed, Sequence, Uniform, Normal, LogNormal, Zipf, Histogram], Field(discriminator="dist")]


class Lengths(Strict):
    prompt: Length
    output: Length

"""Names and units a person reads on a plot's axes or in a table: "TPOT (ms)", not
`tpot_s`. Values are stored in SI base units; a display unit is chosen from the
values shown (ms or µs for times, GB for bytes) and the values scaled to it."""

from __future__ import annotations

import numbers
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterable

import numpy as np

# Metric names a person uses, for the columns RunResult.metrics() writes.
_NAMES = {
    "ttft_s": "TTFT", "tpot_s": "TPOT", "tpot_first_s": "TPOT of the first step",
    "tpot_last_s": "TPOT of the last step", "e2e_s": "end-to-end time", "throughput_tok_s": "throughput",
    "energy_per_token_j": "energy per token", "params": "parameters", "hw": "hardware",
    "hw.price_usd": "price", "workload.batch": "batch", "workload.prompt_len": "prompt length",
    "workload.gen_len": "generated tokens", "workload.formats.weights": "weight format",
    "workload.pim_policy": "PIM policy", "workload.stack": "software stack", "serving.arrivals.rate": "arrival rate",
    "serving.scheduler.kind": "scheduler", "serving.scheduler": "scheduler",
    "workload.formats.activations": "activation format", "workload.formats.kv_cache": "KV cache format",
    "peak_memory_bytes.@device": "peak device memory",
}
_PREFIXES = {"peak_memory_bytes.": "peak memory on ", "utilization.": "utilisation of ",
             "link_utilization.": "utilisation of ", "bytes_per_decode_step.": "bytes per decode step over ",
             "hw.memory.@device.": "device memory ", "workload.": "", "hw.": "", "serving.": ""}
_COUNTS = {"workload.batch": "sequences", "workload.prompt_len": "tokens", "workload.gen_len": "tokens"}

_TIME = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
_DECIMAL = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


@dataclass(frozen=True)
class Axis:
    """An axis label with its unit, and the factor that turns SI values into that unit."""

    label: str
    scale: float = 1.0

    def __call__(self, values):
        return np.asarray(values, dtype=float) * self.scale

    @property
    def name(self) -> str:
        return self.label.rsplit(" (", 1)[0]

    @property
    def unit(self) -> str:
        return self.label.rsplit(" (", 1)[1][:-1] if self.label.endswith(")") else ""

    def show(self, value: float) -> str:
        """One value in this axis' unit: "12.3 ms", "30,000 USD"."""
        return f"{num(value * self.scale)} {self.unit}".strip()


def num(v: float) -> str:
    """4 significant digits, without an exponent between 10,000 and 10 million."""
    return f"{v:,.0f}" if 1e4 <= abs(v) < 1e7 else f"{v:.4g}"


def is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _largest(values: Iterable) -> float:
    finite = [abs(float(v)) for v in values if np.isfinite(float(v)) and float(v) != 0.0]
    return max(finite) if finite else 1.0


def time_axis(name: str, values: Iterable) -> Axis:
    """Seconds shown in s, ms, µs or ns: the largest unit in which the largest value is >= 1."""
    top = _largest(values)
    size, unit = next(((s, u) for s, u in _TIME if top >= s), _TIME[-1])
    return Axis(f"{name} ({unit})", 1.0 / size)


def decimal_axis(name: str, values: Iterable, unit: str, floor: float = 1.0) -> Axis:
    """A decimal prefix (k, M, G, T, P) no smaller than `floor`: bytes stay in GB down to 1 GB."""
    top = _largest(values)
    size, prefix = next(((s, p) for s, p in _DECIMAL if top >= s or s <= floor), _DECIMAL[-1])
    return Axis(f"{name} ({prefix}{unit})", 1.0 / size)


def _name(col: str) -> str:
    if col in _NAMES:
        return _NAMES[col]
    for prefix, words in _PREFIXES.items():
        if col.startswith(prefix):
            return words + col[len(prefix):].replace("_", " ").replace(".", " ")
    return col.replace("_", " ")


# The sweep's `scale:` axes being shown (factor_axes): their values are factors, not the field's unit.
SCALED: ContextVar[frozenset[str]] = ContextVar("scaled_axes", default=frozenset())


@contextmanager
def factor_axes(columns: Iterable[str]):
    """Within it, these columns' values are factors of each machine's own value (a sweep's `scale:` axes)."""
    token = SCALED.set(frozenset(columns))
    try:
        yield
    finally:
        SCALED.reset(token)


def axis_for(col: str, values: Iterable = ()) -> Axis:
    """The label and scale of a sweep column: a metric (`tpot_s`), an axis path
    (`workload.batch`, `hw.memory.@device.bandwidth_bytes_per_s`) or a config field."""
    values = [v for v in values if is_number(v)]
    name = _name(col)
    if col in SCALED.get():
        base = name.removesuffix(" bytes per s").removesuffix(" bandwidth") + " bandwidth" if col.endswith(
            "bytes_per_s") else name
        return Axis(f"{base} (x each machine's own)")
    if col.endswith("bytes_per_s"):
        return decimal_axis(name.removesuffix(" bytes per s").removesuffix(" bandwidth") + " bandwidth",
                            values, "B/s", floor=1e9)
    if col.endswith("flops_per_s"):
        return decimal_axis(name.removesuffix(" flops per s"), values, "FLOP/s", floor=1e9)
    if col.endswith("_tok_s"):
        return Axis(f"{name} (tokens/s)")
    if col.endswith("_req_s") or col == "serving.arrivals.rate":
        return Axis(f"{name.removesuffix(' req s')} (requests/s)")
    if "bytes" in col:
        return decimal_axis(name.replace(" bytes", "") if "memory" in name else name, values, "B", floor=1e9)
    if col.endswith("_s"):
        return time_axis(name, values)
    if col.endswith("_j"):
        return Axis(f"{name} (mJ)", 1e3) if _largest(values) < 1 else Axis(f"{name} (J)")
    if "utilization" in col:
        return Axis(f"{name} (%)", 100.0)
    if col.endswith("_usd"):
        return Axis(f"{name} (USD)")
    if col.endswith("_hz"):
        return decimal_axis(name.removesuffix(" hz"), values, "Hz")
    if col in _COUNTS:
        return Axis(f"{name} ({_COUNTS[col]})")
    if col == "params":
        return Axis(f"{name} (billions)", 1e-9)
    return Axis(name)


def fmt_value(col: str, value) -> str:
    """One value of a column with its unit, as a table shows it: "12.3 ms", "7.8 GB"."""
    if not is_number(value):
        return str(value)
    return axis_for(col, [value]).show(value)

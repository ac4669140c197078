"""Request logs to replay: arrival times and token counts (and, where the log has
them, prefix-block hash ids).

Layouts:
  azure     CSV  TIMESTAMP,ContextTokens,GeneratedTokens (Azure LLM inference trace 2023;
            TIMESTAMP a date-time; rows may carry different UTC offsets, a time without one is UTC)
  mooncake  JSONL timestamp,input_length,output_length,hash_ids (Mooncake traces;
            timestamp in milliseconds, one hash id per 512-token block)
  plain     CSV or JSONL arrival_s,prompt_len,output_len[,hash_ids]
  distserve JSON array of {prompt_len, output_len, start_time} (DistServe's simulator-alignment
            request streams, LLMServe/DistServe simdistserve/benchmarks/alignment; start_time in seconds;
            any file whose text is one JSON array of objects is read so, `.exp` included)
  llmservingsim  JSONL arrival_time_ns,input_toks,output_toks[,input_tok_ids] (LLMServingSim's flat
            request files, casys-kaist/LLMServingSim workloads/README.md); prefix hashes are
            chained over each hash_block_tokens-token block of input_tok_ids, as vLLM hashes
            its KV blocks (a block's hash covers every token before it)

Every layout is replayed relative to its first row, subtracted exactly (decimal, before any
rounding to float): absolute timestamps (epoch nanoseconds, 1e17 s) keep their spacing, and
the simulation's clock starts near 0 where a float still resolves a microsecond.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sim.core.errors import ConfigError
from sim.core.schema import require_file

if TYPE_CHECKING:
    import pandas as pd   # imported where a trace is read: pandas is most of `sim`'s start-up otherwise (issue 30)

# The longest prompt or output a trace row may give (as a generated stream's `max` default):
# 1e30 tokens would wrap around int64 and run as a negative length.
MAX_TOKENS = 1_000_000
COLUMNS = {"azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
           "mooncake": ("timestamp", "input_length", "output_length"),
           "plain": ("arrival_s", "prompt_len", "output_len"),
           "distserve": ("start_time", "prompt_len", "output_len"),
           "llmservingsim": ("arrival_time_ns", "input_toks", "output_toks")}


@dataclass
class Requests:
    """A request stream, one row per request, sorted by arrival."""
    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    hash_ids: list[tuple[int, ...]] | None = None   # prefix-block hashes per request
    hash_block_tokens: int = 512

    def __len__(self) -> int:
        return len(self.arrival_s)

    def arrivals(self, chunk: int = 65536) -> Iterator[float]:
        """The arrival times as Python floats, a chunk at a time (issue 30): a numpy scalar handed to
        env.timeout made the clock, and every time derived from it, numpy scalars, each operation
        several times a float's cost; the same IEEE doubles, so no result changes."""
        a = np.asarray(self.arrival_s, dtype=float)
        for k in range(0, len(a), chunk):
            yield from a[k:k + chunk].tolist()


def _read(path: Path) -> pd.DataFrame:
    import pandas as pd

    require_file(path, "trace file not found", "a trace file")
    try:
        text = path.read_text() if path.suffix in (".jsonl", ".json", ".exp") else None
        rows = _json_array(text, path) if text is not None and text.lstrip().startswith("[") else None
        if rows is not None:
            return pd.DataFrame(rows)
        if text is not None:
            return pd.DataFrame(_json_lines(text, path))
        return pd.read_csv(path, skipinitialspace=True, dtype=str)   # as written: see _arrivals
    except (OSError, EOFError, ValueError, pd.errors.ParserError) as exc:   # EOFError: a gzip cut short
        raise ConfigError(f"{path}: unreadable trace ({str(exc).splitlines()[0]})") from None


def _json_lines(text: str, path: Path) -> list[dict]:
    """The rows of a JSON-lines file, one object a line; blank lines are skipped. Each line is parsed on
    its own so an error names the file's line: json's own "line 1" is the line within that one row."""
    rows = []
    # split("\n"), not splitlines(): JSON may hold a raw U+2028 in a string, which splitlines() breaks on
    # (and an editor does not count); json.loads ignores the "\r" a CRLF file leaves.
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            # Decimal: a timestamp is kept as written until made relative to the first row's.
            row = json.loads(line, parse_float=Decimal)
        except json.JSONDecodeError as exc:   # a malformed or truncated row
            raise ConfigError(f"{path}: line {n}, column {exc.colno}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise ConfigError(f"{path}: line {n}: JSON nested too deeply") from None
        if not isinstance(row, dict):   # a JSON array or number: pandas failed on it (TypeError)
            kind = {"list": "an array", "str": "a string"}.get(type(row).__name__, "a number or null")
            raise ConfigError(f"{path}: line {n} is {kind}; expected one JSON object per "
                              "line, e.g. {\"timestamp\": 0, \"input_length\": 100, \"output_length\": 20}")
        rows.append(row)
    return rows


def _json_array(text: str, path: Path) -> list[dict] | None:
    """The rows of a file that is one JSON array of objects (DistServe's request streams); None where the
    text is not one JSON value (JSON lines whose first line is an array: the per-line reader says which)."""
    try:
        rows = json.loads(text, parse_float=Decimal)
    except ValueError:
        return None
    except RecursionError:
        raise ConfigError(f"{path}: JSON nested too deeply") from None
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ConfigError(f"{path}: item {i + 1} of the array is not an object; expected objects such as "
                              '{"start_time": 0.0, "prompt_len": 100, "output_len": 20}')
    return rows


def _layout(df: pd.DataFrame, fmt: str, path: Path) -> str:
    if fmt != "auto":
        missing = [c for c in COLUMNS[fmt] if c not in df.columns]
        if missing:
            raise ConfigError(f"{path}: trace.format {fmt}: missing column(s) {', '.join(missing)}; "
                              f"expected {', '.join(COLUMNS[fmt])}")
        return fmt
    for name, cols in COLUMNS.items():
        if all(c in df.columns for c in cols):
            return name
    raise ConfigError(f"{path}: trace columns {', '.join(map(str, df.columns))} match no known layout; expected one of "
                      + "; ".join(", ".join(c) for c in COLUMNS.values()))


def read_trace(path: Path, fmt: str = "auto", time_scale: float = 1.0, hash_block_tokens: int = 512,
               limit: int | None = None) -> Requests:
    df = _read(path)
    if df.empty:
        raise ConfigError(f"{path}: trace is empty")
    layout = _layout(df, fmt, path)
    t_col, p_col, o_col = COLUMNS[layout]
    if limit is not None:
        df = df.iloc[:limit]
    arrival = _arrivals(df[t_col], layout, path)
    prompt, output = _lengths(df, p_col, path), _lengths(df, o_col, path)
    hashes = None
    if "hash_ids" in df.columns:
        hashes = [_ints(ids, "hash_ids", i, path) for i, ids in enumerate(df["hash_ids"])]
        if layout == "mooncake":
            _one_id_per_block(hashes, prompt, hash_block_tokens, path)
    elif "input_tok_ids" in df.columns:
        hashes = [block_hashes(_ints(ids, "input_tok_ids", i, path), hash_block_tokens)
                  for i, ids in enumerate(df["input_tok_ids"])]
    return Requests(arrival * time_scale, prompt, output, hashes, hash_block_tokens)


def _one_id_per_block(hashes: list[tuple[int, ...]], prompt: np.ndarray, block_tokens: int, path: Path) -> None:
    """Mooncake's layout gives one id per hash block of the prompt, the last one partial (ceil(input_length /
    512)); a row with more or fewer ids has lost its prefix structure, and its hits would be made up."""
    for i, (ids, n) in enumerate(zip(hashes, prompt)):
        want = -(-int(n) // block_tokens)
        if len(ids) != want:
            raise ConfigError(f"{path}: hash_ids: row {i + 1} has {len(ids)} id(s) for input_length {int(n)}; the "
                              f"mooncake layout gives one per {block_tokens}-token block (trace.hash_block_tokens), "
                              f"{want} here")


def block_hashes(tokens: list[int], block_tokens: int) -> tuple[int, ...]:
    """One hash per whole block of `tokens`, each over the block and every block before it, so
    two prompts share a hash only where they share the whole prefix up to it."""
    out, h = [], 0
    for i in range(len(tokens) // block_tokens):
        h = hash((h, tuple(tokens[i * block_tokens:(i + 1) * block_tokens])))
        out.append(h)
    return tuple(out)


def _ints(ids, col: str, row: int, path: Path) -> tuple[int, ...]:
    """A row's list of integer ids; a row without the column (NaN in pandas) has none."""
    if ids is None or isinstance(ids, float) and np.isnan(ids):
        return ()
    if isinstance(ids, str):   # a CSV cell: "[1, 2]"
        try:
            ids = json.loads(ids)
        except ValueError:
            pass
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
        raise ConfigError(f"{path}: {col}: row {row + 1} is {str(ids)[:40]!r}; expected a list of integers")
    return tuple(ids)


_UNIT_S = {"mooncake": Decimal("1e-3"), "llmservingsim": Decimal("1e-9")}   # the others are in seconds


def _arrivals(col: pd.Series, layout: str, path: Path) -> np.ndarray:
    """Seconds after the first row's arrival (see the module docstring)."""
    import pandas as pd

    name = str(col.name)
    if layout == "azure":
        # utc=True: rows with different offsets (a daylight-saving change) are one timeline, not a ValueError;
        # ISO 8601 rows may differ in precision (".5" on one, none on the next); other layouts row by row.
        t = pd.to_datetime(col, errors="coerce", utc=True, format="ISO8601")
        if t.isna().any():
            t = pd.to_datetime(col, errors="coerce", utc=True, format="mixed")
        if t.isna().any():
            raise ConfigError(f"{path}: {name}: row {int(t.isna().to_numpy().argmax()) + 1} is not a date-time")
        rel = (t - t.iloc[0]).dt.total_seconds().to_numpy()
        _check_sorted(rel, name, path)
        return rel
    stamps = []
    for i, v in enumerate(col):
        try:
            d = Decimal(str(v).strip())
        except InvalidOperation:
            d = Decimal("NaN")
        if not d.is_finite() or not np.isfinite(float(d)):   # "abc", NaN, inf or 1e400
            raise ConfigError(f"{path}: {name}: row {i + 1} is not a finite number")
        if d < 0:
            raise ConfigError(f"{path}: {name}: negative timestamp at row {i + 1}")
        stamps.append(d)
    unit = _UNIT_S.get(layout, Decimal(1))
    rel = np.array([float((d - stamps[0]) * unit) for d in stamps])
    _check_sorted(rel, name, path)
    return rel


def _check_sorted(t: np.ndarray, col: str, path: Path) -> None:
    if len(t) > 1 and (np.diff(t) < 0).any():
        raise ConfigError(f"{path}: {col}: timestamps not sorted (row {int(np.argmax(np.diff(t) < 0)) + 2} "
                          "comes before the row above it)")


def _json_numbers(values: "pd.Series", col: str, path: Path) -> None:
    """A JSON count written as true or "20" is refused, as docs/errors.md says (a hostile-input trial: `true` ran as
    a 1-token request, "1954" as a number); a CSV's cells are all text, which the number check below reads."""
    if values.dtype != object:
        return
    for i, v in enumerate(values):
        if isinstance(v, bool) or isinstance(v, str) and path.suffix.lower() in (".json", ".jsonl"):
            raise ConfigError(f"{path}: {col}: row {i + 1} has {json.dumps(v)}, {'a boolean' if isinstance(v, bool) else 'a string'}; "
                              "token counts must be JSON numbers")


def _lengths(df: pd.DataFrame, col: str, path: Path) -> np.ndarray:
    import pandas as pd

    _json_numbers(df[col], col, path)
    v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(v) | (v < 1) | (v > MAX_TOKENS) | (v != np.round(v))
    if bad.any():
        i = int(np.argmax(bad))
        got = "no number" if np.isnan(v[i]) else f"{v[i]:g}"   # a missing cell read "has nan" (a trial)
        raise ConfigError(f"{path}: {col}: row {i + 1} has {got}; token counts must be whole numbers from 1 to "
                          f"{MAX_TOKENS:,}")
    return v.astype(np.int64)

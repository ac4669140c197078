"""Request logs to replay: arrival times and token counts (and, where the log has
them, prefix-block hash ids).

Layouts:
  azure     CSV  TIMESTAMP,ContextTokens,GeneratedTokens (Azure LLM inference trace 2023;
            TIMESTAMP a date-time, replayed relative to the first row)
  mooncake  JSONL timestamp,input_length,output_length,hash_ids (Mooncake traces;
            timestamp in milliseconds, one hash id per 512-token block)
  plain     CSV or JSONL arrival_s,prompt_len,output_len[,hash_ids]
  llmservingsim  JSONL arrival_time_ns,input_toks,output_toks[,input_tok_ids] (LLMServingSim's flat
            request files, casys-kaist/LLMServingSim workloads/README.md); prefix hashes are
            chained over each hash_block_tokens-token block of input_tok_ids, as vLLM hashes
            its KV blocks (a block's hash covers every token before it)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.core.errors import ConfigError
from sim.core.schema import require_file

# The longest prompt or output a trace row may give (as a generated stream's `max` default):
# 1e30 tokens would wrap around int64 and run as a negative length.
MAX_TOKENS = 1_000_000
COLUMNS = {"azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
           "mooncake": ("timestamp", "input_length", "output_length"),
           "plain": ("arrival_s", "prompt_len", "output_len"),
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


def _read(path: Path) -> pd.DataFrame:
    require_file(path, "trace file not found", "a trace file")
    try:
        if path.suffix in (".jsonl", ".json"):
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            return pd.DataFrame(rows)
        return pd.read_csv(path, skipinitialspace=True)
    except (ValueError, pd.errors.ParserError) as exc:
        raise ConfigError(f"{path}: unreadable trace ({str(exc).splitlines()[0]})") from None


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
    if layout == "azure":
        t = pd.to_datetime(df[t_col], errors="coerce")
        if t.isna().any():
            raise ConfigError(f"{path}: {t_col}: row {int(t.isna().idxmax()) + 2} is not a date-time")
        arrival = (t - t.iloc[0]).dt.total_seconds().to_numpy()
    else:
        arrival = pd.to_numeric(df[t_col], errors="coerce").to_numpy(dtype=float)
        if layout == "mooncake":
            arrival = arrival / 1e3
        elif layout == "llmservingsim":
            arrival = arrival / 1e9
    _check_times(arrival, t_col, path)
    prompt, output = _lengths(df, p_col, path), _lengths(df, o_col, path)
    hashes = None
    if "hash_ids" in df.columns:
        hashes = [_ints(ids, "hash_ids", i, path) for i, ids in enumerate(df["hash_ids"])]
    elif "input_tok_ids" in df.columns:
        hashes = [block_hashes(_ints(ids, "input_tok_ids", i, path), hash_block_tokens)
                  for i, ids in enumerate(df["input_tok_ids"])]
    return Requests(arrival * time_scale, prompt, output, hashes, hash_block_tokens)


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


def _check_times(t: np.ndarray, col: str, path: Path) -> None:
    if not np.isfinite(t).all():   # "abc", NaN, inf or 1e400
        raise ConfigError(f"{path}: {col}: row {int(np.argmax(~np.isfinite(t))) + 1} is not a finite number")
    if (t < 0).any():
        raise ConfigError(f"{path}: {col}: negative timestamp at row {int(np.argmax(t < 0)) + 1}")
    if len(t) > 1 and (np.diff(t) < 0).any():
        raise ConfigError(f"{path}: {col}: timestamps not sorted (row {int(np.argmax(np.diff(t) < 0)) + 2} "
                          "comes before the row above it)")


def _lengths(df: pd.DataFrame, col: str, path: Path) -> np.ndarray:
    v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(v) | (v < 1) | (v > MAX_TOKENS) | (v != np.round(v))
    if bad.any():
        raise ConfigError(f"{path}: {col}: row {int(np.argmax(bad)) + 1} has {v[np.argmax(bad)]}; "
                          f"token counts must be whole numbers from 1 to {MAX_TOKENS:,}")
    return v.astype(np.int64)

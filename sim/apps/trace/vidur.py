"""vidur's inputs: its profiled per-op tables (`mlp.csv`: `time_stats.<op>.median`
in ms per `num_tokens` and `num_tensor_parallel_workers`, model columns), and the
shape of its record_function Chrome traces, which record neither model nor token
count (sim.apps.trace.chrome reads their events)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from sim.core.errors import ConfigError
from sim.core.model import ModelConfig, from_mapping, load_model
from sim.apps.trace.labels import VIDUR_DTYPE, VIDUR_KINDS
from sim.apps.trace.meta import measured
from sim.apps.trace.records import MeasuredOp, StepShape, Trace


def model_from_name(text: str) -> ModelConfig | None:
    """Hugging Face folder names as vidur writes them -> simulator presets:
    Llama-2-7b-hf -> llama2-7b, CodeLlama-34b-Instruct-hf -> codellama-34b, Meta-Llama-3-8B -> llama3-8b."""
    key = text.lower().removeprefix("meta-").replace("-instruct", "").removesuffix("-hf")
    key = re.sub(r"llama-(\d)", r"llama\1", key)
    try:
        return load_model(key)
    except ConfigError:
        return None


def vidur_trace_shape(trace: Trace, p: Path, model: str | None, tokens: int | None) -> None:
    """vidur's traces record neither model nor token count: take them from the
    arguments, else from the file layout (<Model-hf>/..._num_tokens_<N>_...)."""
    cfg = load_model(model) if model else next(
        (c for c in (model_from_name(d.name) for d in p.resolve().parents) if c), None)
    if cfg is None:
        raise ConfigError(f"{p}: vidur trace without a model: pass --model (e.g. llama2-7b)")
    if tokens is None:
        m = re.search(r"num_tokens_0*(\d+)", p.name)
        if not m:
            raise ConfigError(f"{p}: vidur trace without a token count in its name: pass --tokens N")
        tokens = int(m.group(1))
    tp = re.search(r"tp(\d+)_", p.name)
    trace.model, trace.dtype, trace.num_layers = cfg, VIDUR_DTYPE, 1
    trace.steps = [StepShape(f"tokens={tokens}", "prefill", 1, tokens, tokens, int(tp.group(1)) if tp else 1)]


def _table_model(p: Path, r0: dict[str, str]) -> ModelConfig:
    """The one-layer model of the table's columns, named after the preset of its folder when there is one."""
    try:
        cfg = from_mapping({"hidden_size": int(r0["n_embd"]), "intermediate_size": int(r0["n_expanded_embd"]),
                            "num_attention_heads": int(r0["n_head"]),
                            "num_key_value_heads": int(r0.get("n_kv_head") or r0["n_head"]),
                            "vocab_size": int(float(r0.get("vocab_size") or 32000)), "num_hidden_layers": 1},
                           p.parent.name, str(p))
    except ValueError as exc:
        raise ConfigError(f"{p}: line 2: bad model column ({exc})") from None
    named = model_from_name(p.parent.name)
    if named is not None:  # keep the preset's name and vocabulary; shapes come from the table
        cfg = ModelConfig(named.name, cfg.hidden_size, cfg.intermediate_size, 1, cfg.num_heads,
                          cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size, named.max_position_embeddings)
    return cfg


def load_vidur_table(p: Path) -> list[Trace]:
    """vidur's mlp.csv: per (num_tokens, TP) row, the median ms of each op.
    One Trace per TP degree, one step per row."""
    with open(p, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ConfigError(f"{p}: empty vidur table")
    need = ("num_tokens", "num_tensor_parallel_workers", "n_head", "n_embd", "n_expanded_embd")
    missing = [c for c in need if c not in rows[0]]
    if missing:
        raise ConfigError(f"{p}: vidur table lacks column(s) {', '.join(missing)}")
    ops = [op for op in VIDUR_KINDS if f"time_stats.{op}.median" in rows[0]]
    cfg = _table_model(p, rows[0])
    by_tp: dict[int, Trace] = {}
    seen: set[tuple[int, int]] = set()
    for i, row in enumerate(rows, start=2):
        try:
            tokens, tp = int(row["num_tokens"]), int(row["num_tensor_parallel_workers"])
            times = {op: measured(row[f"time_stats.{op}.median"], f"{p}: line {i}: time_stats.{op}.median") * 1e-3
                     for op in ops}
        except (KeyError, ValueError, TypeError) as exc:
            raise ConfigError(f"{p}: line {i}: bad vidur row ({exc})") from None
        if (tokens, tp) in seen:
            continue  # vidur's token ranges overlap at 2048 and 4096; keep the first
        seen.add((tokens, tp))
        tr = by_tp.setdefault(tp, Trace(f"{p}#tp{tp}", "vidur", "cuda", p.parent.parent.name, cfg,
                                        VIDUR_DTYPE, 1))
        j = len(tr.steps)
        tr.steps.append(StepShape(f"tokens={tokens} tp={tp}", "prefill", 1, tokens, tokens, tp))
        for op, s in times.items():
            tr.ops.append(MeasuredOp(op, VIDUR_KINDS[op], 0, j, s, "cuda"))
    return [by_tp[k] for k in sorted(by_tp)]

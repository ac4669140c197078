#!/usr/bin/env python3
"""Write workloads/serving/mooncake_style.jsonl: a synthetic trace in Mooncake's JSONL layout
(timestamp ms, input_length, output_length, hash_ids of 512-token blocks). Not Mooncake's data:
400 Poisson arrivals at ~6/s, each prompt one of 4 shared system prompts (2, 3, 4 or 6 blocks)
followed by 0-3 blocks of its own; seeded, so rerunning reproduces the file."""

import json
from pathlib import Path

import numpy as np

from sim.apps.script_help import no_options

OUT = Path(__file__).resolve().parents[1] / "workloads" / "serving" / "mooncake_style.jsonl"


def main() -> None:
    no_options(__doc__)
    rng = np.random.default_rng(7)
    t = np.cumsum(rng.exponential(1000 / 6.0, 400))
    heads = [list(range(100 * g, 100 * g + k)) for g, k in enumerate((2, 3, 4, 6))]
    nxt, lines = 10_000, []
    for ts in t:
        g = int(rng.integers(0, 4))
        own = int(rng.integers(0, 4))
        ids = heads[g] + list(range(nxt, nxt + own))
        nxt += own
        inp = len(ids) * 512 - int(rng.integers(0, 400))
        lines.append(json.dumps(dict(timestamp=int(ts), input_length=inp, output_length=int(rng.integers(16, 300)),
                                     hash_ids=ids)))
    OUT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

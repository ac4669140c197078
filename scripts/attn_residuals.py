"""Where the decode-attention model misses: signed and absolute error of `sim validate --input-format aic`
on the gen_attn tables, broken down per engine and KV format by batch, KV length, head layout (heads /
kv_heads, the GQA group), KV bytes and CTAs (batch x kv_heads) against the GPU's SM count (issue 28).

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/attn_residuals.py [--gpu h100] [--by batch]

Each table: one line per bucket, one column per (engine, KV format): mean signed error (sim - measured) /
measured and, in brackets, the MAPE; a negative figure is sim too fast.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hw_models.machine import load_machine  # noqa: E402
from sim.apps.trace.aic import PRESET, validate_tables  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402

SHARED = shared_validation_dir() / "aic"
GPUS = ("h100", "a100", "rtx_pro_6000", "l40s")   # the L40S: held out for most decode families
SHAPE = re.compile(r"b(\d+) q1 kv(\d+) h(\d+)/(\d+)")
KV_BYTES = {"bfloat16": 2, "fp8": 1}
HEAD_DIM = 128       # every gen_attn row (shared/validation/aic README)
BUCKETS = {
    "batch": lambda d: d.batch,
    "kv_len": lambda d: d.kv_len,
    "heads": lambda d: d.heads.astype(str) + "/" + d.kv_heads.astype(str),
    "group": lambda d: d.heads // d.kv_heads,
    "kv_mb": lambda d: pd.cut(d.kv_bytes / 1e6, [0, 1, 4, 16, 64, 128, 256, 1024, 1e9]).astype(str),
    "ctas_per_sm": lambda d: pd.cut(d.ctas / d.sms, [0, 0.1, 0.25, 0.5, 1, 2, 8, 32, 1e9]).astype(str),
}


def rows(gpu: str) -> pd.DataFrame:
    """One line per measured gen_attn row of `gpu`: its shape, KV bytes, CTAs, SMs and the error."""
    out = validate_tables([SHARED / f"gen_attn_{gpu}.csv.gz"])
    unit = (m := load_machine(PRESET[gpu])).units[m.main_unit]
    recs = []
    for r in out.rows:
        b, kv_len, h, kvh = map(int, SHAPE.match(r.shape).groups())
        kv = r.family.split()[3]
        recs.append(dict(engine=r.engine, kv=kv, batch=b, kv_len=kv_len, heads=h, kv_heads=kvh,
                         kv_bytes=2 * b * kv_len * kvh * HEAD_DIM * KV_BYTES[kv], ctas=b * kvh,
                         sms=unit.efficiency.parallel_units, err=r.error))
    return pd.DataFrame(recs)


def table(d: pd.DataFrame, by: str) -> str:
    d = d.assign(key=BUCKETS[by](d), col=d.engine + " " + d.kv, abs=d.err.abs())
    g = d.groupby(["key", "col"]).agg(s=("err", "mean"), a=("abs", "mean"), n=("err", "size")).reset_index()
    g["cell"] = [f"{s:+6.1%} ({a:5.1%})" for s, a in zip(g.s, g.a)]
    return g.pivot(index="key", columns="col", values="cell").fillna("").to_string()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", choices=GPUS, action="append", help="default: every in-sample GPU")
    ap.add_argument("--by", choices=sorted(BUCKETS), action="append", help="default: every breakdown")
    a = ap.parse_args()
    if not SHARED.is_dir():
        print(f"{SHARED}: not found (set SIM_SHARED_VALIDATION)", file=sys.stderr)
        return 2
    for gpu in a.gpu or GPUS:
        d = rows(gpu)
        for by in a.by or BUCKETS:
            print(f"\n## {gpu}: signed error (MAPE) by {by}\n{table(d, by)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Fit the vllm stack's top_p_sampler (hw_models.stack.sampler) on published timings of vLLM's PyTorch-native
top-p masking (hw_models.stack.sampler_fit.PUBLISHED) and print the figures and each timing's residual.

    python scripts/fit_sampler.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.stack.sampler_fit import PUBLISHED, fit  # noqa: E402
from sim.apps.script_help import no_options  # noqa: E402


def main() -> int:
    no_options(__doc__)
    f = fit()
    print(f"fixed_s: {f.fixed_s * 1e3:.3f} ms\nbytes_per_logit: {f.bytes_per_logit:.0f}\n"
          f"block_s_per_logit: {f.block_s_per_logit * 1e9:.1f} ns")
    for t in PUBLISHED:
        print(f"  {t.gpu} {t.rows:5d} rows: measured {t.seconds * 1e3:7.3f} ms, fit {f.seconds(t) * 1e3:7.3f} ms "
              f"({f.seconds(t) / t.seconds - 1:+.1%})  {t.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

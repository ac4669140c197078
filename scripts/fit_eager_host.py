#!/usr/bin/env python3
"""Fit the host time per kernel of eager vLLM (`host_launch_s` in hw_models/stack/presets/vllm-v0-eager.yaml)
on splitwise's DGX-A100 Llama-2-70B token times only, and report the DGX-H100 rows out of sample
(docs/parallelism.md, "Which engine measured splitwise").

    SIM_SHARED_VALIDATION=/path/to/shared/validation python scripts/fit_eager_host.py

The loss is the token-time MAPE over every DGX-A100 (TP, prompt, batch) configuration of
scripts/parallel_validation.splitwise_measured; the stack's other figures (kernels, the engine's
host curve, Ray's TP > 1 cost) are cited in the stack file and held fixed. Also prints, as a
diagnostic only (not used anywhere), the value a fit on the DGX-H100 rows would give: the two
nodes' hosts differ, and the ratio says by how much.
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

import yaml
from scipy.optimize import minimize_scalar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from hw_models.stack.spec import STACK_DIR  # noqa: E402
from parallel_validation import SHARED, splitwise  # noqa: E402
from sim.core.schema import read_yaml  # noqa: E402
from sim.apps.script_help import no_options  # noqa: E402

STACK = "vllm-v0-eager"
BOUNDS_S = (1e-6, 100e-6)


class TokenLoss:
    """Token-time MAPE on the nodes `hws` of the stack file with host_launch_s set to x."""

    def __init__(self, hws: tuple[str, ...], folder: Path):
        self.hws, self.folder, self.calls = hws, folder, 0
        self.raw = read_yaml(STACK_DIR / f"{STACK}.yaml")

    def errors(self, host_launch_s: float):
        self.calls += 1    # a new file per call: loaded stacks are cached by path and mtime
        path = self.folder / f"{STACK}-{self.calls}.yaml"
        path.write_text(yaml.safe_dump({**self.raw, "host_launch_s": float(host_launch_s)}))
        return splitwise(str(path), self.hws)

    def __call__(self, host_launch_s: float) -> float:
        return float(self.errors(host_launch_s).token_err.abs().mean())


def fit(hws: tuple[str, ...], folder: Path) -> float:
    res = minimize_scalar(TokenLoss(hws, folder), bounds=BOUNDS_S, method="bounded", options={"xatol": 0.05e-6})
    return float(res.x)


def main() -> int:
    no_options(__doc__)
    if not SHARED.is_dir():
        print(f"{SHARED} not found (set SIM_SHARED_VALIDATION)", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        x = fit(("a100-80gb",), folder)
        s = TokenLoss(("a100-80gb", "h100-80gb"), folder).errors(x)
        h100_only = fit(("h100-80gb",), folder)
    print(f"host_launch_s fitted on DGX-A100 token rows: {x * 1e6:.2f} us (paste into hw_models/stack/presets/{STACK}.yaml)")
    for hw, g in s.groupby("hw"):
        tag = "in sample" if hw == "a100-80gb" else "out of sample"
        print(f"  {hw} ({tag}): token MAPE {g.token_err.abs().mean():.1%}, prompt MAPE {g.prompt_err.abs().mean():.1%}")
    print(f"diagnostic only (not used): a fit on the DGX-H100 token rows gives {h100_only * 1e6:.2f} us, "
          f"the A100 node's figure is {x / h100_only:.2f}x that")
    return 0


if __name__ == "__main__":
    sys.exit(main())

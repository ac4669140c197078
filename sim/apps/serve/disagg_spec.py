"""Schema of `serving.disaggregated` (sim.apps.serve.disagg): prefill and decode pools."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from sim.core.schema import Quantity, Strict


class Pool(Strict):
    hw: str                                 # a hardware preset (hw_models/presets) or a path
    replicas: int = Field(default=1, gt=0)
    parallel: dict[str, Any] | None = None  # the pool's parallel plan (gpu kind), as a workload's
    # Fields of the pool's preset changed, as `--set hw.KEY=VALUE` changes --hw's ({spatial.chips: 140})
    hw_overrides: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _no_dp(self) -> "Pool":
        dp = (self.parallel or {}).get("dp", 1)
        if dp != 1:   # it ran one instance without a word (a many-device trial): a pool's copies are its replicas
            raise ValueError(f"parallel.dp: {dp}: a pool's instances are its `replicas` (replicas: {self.replicas * dp}"
                             "), not dp")
        return self


class Transfer(Strict):
    """KV-cache transfer from a prefill to a decode instance: a topology's (fitted) send/recv
    between two of its devices, or an explicit link."""
    topology: str | None = None
    bandwidth_bytes_per_s: Quantity | None = Field(default=None, gt=0)
    latency_s: Quantity = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _one(self) -> "Transfer":
        if (self.topology is None) == (self.bandwidth_bytes_per_s is None):
            raise ValueError("give topology or bandwidth_bytes_per_s (one of them)")
        return self


class Disaggregated(Strict):
    prefill: Pool
    decode: Pool
    transfer: Transfer

"""The per-request table of a serving run (`sim serve --requests`, the API's request_table), apart from
sim.apps.serve.output so that importing the API does not import pandas and matplotlib."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.apps.serve.simulator import ServeResult

if TYPE_CHECKING:
    import pandas as pd

STATUS = {0.0: "unfinished", 1.0: "completed", 2.0: "rejected"}


def request_table(res: ServeResult) -> "pd.DataFrame":
    """`sim serve --requests`' table: one row per request, its TTFT, TPOT ((e2e - ttft) / (output - 1)) and E2E
    derived and its status by name; the Python API's too (sim.apps.api)."""
    import pandas as pd   # only here: the API's import stays light (pandas and matplotlib cost ~0.2 s)

    r = res.requests
    df = pd.DataFrame({"id": np.arange(len(r["status"])), **{k: v for k, v in r.items() if k != "status"}})
    for col in ("prompt_tokens", "output_tokens", "requested_output_tokens", "preemptions", "prefix_hit_tokens"):
        df[col] = df[col].astype(np.int64)
    for col in ("instance", "prefill_instance"):   # replicas or pools: who served the request, by name
        if col in df:
            df[col] = [instance_name(res, int(k)) for k in df[col]]
    df["ttft_s"] = df["first_token_s"] - df["arrival_s"]
    out = df["output_tokens"]
    df["tpot_s"] = np.where(out > 1, (df["finish_s"] - df["first_token_s"]) / np.maximum(out - 1, 1), np.nan)
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    df["status"] = [STATUS[s] for s in r["status"]]
    return df


def instance_name(res: ServeResult, k: int) -> str:
    return res.instance_names[k] if k < len(res.instance_names) else f"replica {k}"

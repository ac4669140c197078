#!/usr/bin/env python3
"""Behaviour pins for refactors: run every workload under workloads/ on every preset
that accepts it, and every sweeps/*.yaml at its first 2 points, and store the scalar
metrics as JSON. A second run after a refactor must reproduce them (relative 1e-9).

    python scripts/golden.py --out golden.json            # record
    python scripts/golden.py --check golden.json          # compare, exit 1 on a difference
    python scripts/golden.py --check golden.json --subset llama2_7b_decode   # a few cases

A case that raises a user error (the model does not fit, the kind refuses the
workload) records the error's first line, so a refactor must keep refusing it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.machine import load_machine, machine_from_dict, preset_names  # noqa: E402
from hw_models.registry import simulate  # noqa: E402
from sim.core.errors import SimError  # noqa: E402
from sim.core.workload import load_workload, workload_from_dict  # noqa: E402

SWEEP_POINTS = 2


def _recorded(run) -> dict:
    """`run()`'s metrics, or the first line of the user error it raises (a refusal is pinned too)."""
    try:
        return run()
    except SimError as e:
        return {"error": str(e).splitlines()[0].replace(str(ROOT), "<root>")}


def _case(workload, machine) -> dict:
    return _recorded(lambda: simulate(workload, machine).metrics())


def workload_cases(subset: str | None) -> dict[str, dict]:
    out = {}
    for wpath in sorted((ROOT / "workloads").glob("*.yaml")):
        if subset and subset not in wpath.stem or wpath.stem.startswith("serve_"):
            continue   # serve_*.yaml are serving files (sim serve), pinned by tests/test_serve*.py
        workload = load_workload(wpath)
        for hw in preset_names():
            out[f"{wpath.stem}@{hw}"] = _case(workload, load_machine(hw))
    return out


def sweep_cases(subset: str | None) -> dict[str, dict]:
    from sim.apps.sweep.expand import expand
    from sim.apps.sweep.spec import load_spec

    out = {}
    for spath in sorted((ROOT / "sweeps").glob("*.yaml")):
        if subset and subset not in spath.stem:
            continue
        points = expand(load_spec(spath))[:SWEEP_POINTS]
        for p in points:
            c = p.config
            if c.get("serving"):
                break   # serving sweeps run sim serve per point, pinned by tests/test_sweep_serving.py
            workload = workload_from_dict(c["workload"], c["workload_source"])
            out[f"sweep:{spath.stem}:{p.index}"] = _case(workload, machine_from_dict(c["machine"], c["machine_source"]))
    return out


# Serving cases: each serving file on the presets its header names, and the llama3-8b file under every
# scheduler kind and stack (smaller streams keep the script quick). Surrogate step costs, as `sim serve`.
SERVE_SCHEDULERS = ("static", "orca", "vllm", "vllm-v0", "sarathi", "sglang", "trtllm")
SERVE_STACKS = ("vllm", "trtllm", "sglang")


def _serve_case(path: Path, hw: str, overrides: dict) -> dict:
    from sim.apps.serve.run import serve
    from sim.apps.serve.spec import load_serve_file

    def run() -> dict:
        _, summary = serve(load_serve_file(path, overrides), load_machine(hw))
        return {k: v for k, v in _flat(summary).items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    return _recorded(run)


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def serve_cases(subset: str | None) -> dict[str, dict]:
    out = {}
    for path in sorted((ROOT / "workloads").glob("serve_*.yaml")):
        if subset and subset not in path.stem:
            continue
        presets = sorted(set(re.findall(r"sim serve \S+ --hw (\w+)", path.read_text())))
        for hw in presets:
            out[f"serve:{path.stem}@{hw}"] = _serve_case(path, hw, {})
    path = ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml"
    if subset and subset not in path.stem:
        return out
    small = {"serving.arrivals.num_requests": 200}
    for kind in SERVE_SCHEDULERS:
        sched = {"serving.scheduler": {"kind": kind, "batch_size": 16} if kind == "static"
                 else {"kind": kind, "max_num_seqs": 64}}
        out[f"serve:{path.stem}:{kind}@h100_sxm"] = _serve_case(path, "h100_sxm", {**small, **sched})
    for stack in SERVE_STACKS:
        out[f"serve:{path.stem}:stack={stack}@h100_sxm"] = _serve_case(path, "h100_sxm", {**small, "stack": stack})
    # near capacity (~56/s): over 32 requests run at once, so the decode cohort's array steps are pinned too
    busy = {"serving.arrivals.num_requests": 1000, "serving.arrivals.rate": 45.0}
    for kind in ("vllm", "vllm-v0"):
        out[f"serve:{path.stem}:{kind}:busy@h100_sxm"] = _serve_case(
            path, "h100_sxm", {**busy, "serving.scheduler": {"kind": kind}})
    return out


def _file_of(case: str) -> str:
    """The workload or sweep file a case came from (`wl@hw`, `sweep:stem:i`)."""
    if case.startswith(("sweep:", "serve:")):
        return case.split(":")[1].split("@")[0]
    return case.split("@")[0]


def differences(want: dict, got: dict, rel: float = 1e-9) -> list[str]:
    bad = []
    for case, metrics in want.items():
        if case not in got:
            continue
        g = got[case]
        if set(metrics) != set(g):
            bad.append(f"{case}: keys differ: {sorted(set(metrics) ^ set(g))}")
            continue
        for k, v in metrics.items():
            if isinstance(v, str) or isinstance(g[k], str):
                if v != g[k]:
                    bad.append(f"{case}: {k}: {v!r} -> {g[k]!r}")
            elif math.isnan(v) and math.isnan(g[k]):
                continue   # no figure both times (a run without decode steps has no TPOT)
            elif not math.isclose(v, g[k], rel_tol=rel, abs_tol=1e-300):
                bad.append(f"{case}: {k}: {v!r} -> {g[k]!r}")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--check", type=Path)
    ap.add_argument("--subset", help="only workloads and sweeps whose file name contains this")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    got = {**workload_cases(a.subset), **sweep_cases(a.subset), **serve_cases(a.subset)}
    if a.out:
        a.out.write_text(json.dumps(got, indent=1, sort_keys=True))
        print(f"{len(got)} cases -> {a.out}")
    if a.check:
        want = json.loads(a.check.read_text())
        bad = differences(want, got)
        missing = [c for c in want if c not in got and (not a.subset or a.subset in _file_of(c))]
        for line in bad + [f"{c}: missing" for c in missing]:
            print(line)
        print(f"{len(got)} cases checked, {len(bad) + len(missing)} differ")
        return 1 if bad or missing else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

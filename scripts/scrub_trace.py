#!/usr/bin/env python3
"""Remove the capturing machine's paths from captured traces (issue 18), in place.

For every `*.trace.json.gz` / `*.trace.json` under the given files or folders:
traceName becomes the trace's own name (`X.trace.json`), `host_name` is dropped,
and the file is re-gzipped with no name or time in the header. For every
`*.meta.json` from scripts/capture_trace.py: path arguments in `argv` (`--out`,
a `--model` config file) become relative to the repository, or file names.
Trace events are not touched. Running it twice changes nothing the second time.

    python scripts/scrub_trace.py traces/ tests/data/
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sim.apps.trace.scrub import scrub_meta_file, scrub_trace_file  # noqa: E402


def _files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for arg in paths:
        p = Path(arg)
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file())
        elif p.is_file():
            out.append(p)
        else:
            raise SystemExit(f"scrub_trace: {p}: no such file or folder")
    return out


def main(argv=None) -> dict[str, list[str]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="trace files, meta files, or folders holding them")
    args = ap.parse_args(argv)
    changed: dict[str, list[str]] = {"trace": [], "meta": []}
    for f in _files(args.paths):
        if f.name.endswith((".trace.json.gz", ".trace.json")):
            if scrub_trace_file(f):
                changed["trace"].append(str(f))
        elif f.name.endswith(".meta.json") and json.loads(f.read_text()).get("tool") == "scripts/capture_trace.py":
            if scrub_meta_file(f, ROOT):
                changed["meta"].append(str(f))
    for kind, files in changed.items():
        for f in files:
            print(f"scrub_trace: rewrote {kind} {f}")
    print(f"scrub_trace: {len(changed['trace'])} trace(s), {len(changed['meta'])} meta file(s) changed")
    return changed


if __name__ == "__main__":
    main()

"""The text of a preset `sim calibrate` writes: each figure with a comment naming its source, so that the file
passes `sim hw check --strict` as a hand-written preset must. A calibrated preset copies its base preset's figures
unchanged (their citations are in the base file) and fits only the efficiency curves, launch overheads and stack
terms (the file's header records the fit)."""

from __future__ import annotations

import re

_KEY = re.compile(r"^( *)(?:- )?([A-Za-z0-9_@.\-]+):( *)(.*)$")
FITTED_KEYS = ("efficiency", "stacks", "launch_overhead_s")
NAMES = ("version", "name", "kind", "description")   # not figures


def cited(text: str, base: str) -> str:
    """`text` (yaml.safe_dump of a calibrated preset) with a comment on every mapping key that opens a block and on
    every fitted figure: `# as BASE.yaml (cited there)` or `# fitted by sim calibrate (header)`. hw check reads a
    parent key's comment as covering its fields, so the base's figures need none of their own."""
    out: list[str] = []
    path: list[tuple[int, str]] = []
    for line in text.splitlines():
        m = _KEY.match(line)
        if not m or "#" in line:
            out.append(line)
            continue
        indent, key, value = len(m.group(1)), m.group(2), m.group(4)
        path = [p for p in path if p[0] < indent] + [(indent, key)]
        fitted = any(k in FITTED_KEYS and (k != "stacks" or i == 0) for i, (_, k) in enumerate(path))
        if (key in FITTED_KEYS and (key != "stacks" or indent == 0)) or (fitted and not value):   # a fitted figure or block
            line += "  # fitted by sim calibrate (header)"
        elif not value or (indent == 0 and key not in NAMES):   # a block of the base's figures, or one at the top
            line += f"  # as {base}.yaml (cited there)"
        out.append(line)
    return "\n".join(out) + "\n"

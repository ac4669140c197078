"""A sweep column's name as its plots and tables read it, with the unit said once: "power limit (W)" for
`hw.units.@main.power_limit_w`, "decode energy per token (mJ)" for `decode_energy_per_token_j`, "TTFT p90 (ms)"
for `ttft_p90_s`. sim.apps.axes chooses the unit and the scale; this drops the unit's word that its name keeps from
the column's suffix ("... j (J)"), names the main unit's fields as the machine's, and gives watts their unit.
"""

from __future__ import annotations

from typing import Iterable

from sim.apps import axes
from sim.apps.axes import Axis, is_number

# A column's unit suffix and the words it leaves at the end of the name, which the label's unit says again.
# The longer suffixes first: `_tok_s` is tokens/s, not seconds.
_UNIT_WORDS = (("_bytes_per_s", " bytes per s"), ("_flops_per_s", " flops per s"), ("_tok_s", " tok s"),
               ("_req_s", " req s"), ("_j", " j"), ("_w", " w"), ("_s", " s"))
# Unit suffixes sim.apps.axes gives no unit.
_UNITS = {"_w": "W"}
# `@main` is the machine's main compute unit: its power limit is the machine's, as a reader says it.
_OWNER = "units @main"
# Words of the serving metrics' names as a person writes them.
_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "tbt": "TBT", "e2e": "end-to-end", "slo": "SLO", "kv": "KV",
          "avg": "average"}


def _plain(col: str, name: str) -> str:
    """`name` without the main unit's path and the unit's word at its end, its words as a person writes them."""
    if name.startswith(_OWNER):
        name = name[len(_OWNER):].strip() or "main unit"
    for suffix, words in _UNIT_WORDS:
        if col.endswith(suffix):
            if name.endswith(words) and len(name) > len(words):
                name = name[:-len(words)]
            break
    return " ".join(_WORDS.get(w, w) for w in name.split(" "))


def axis_for(col: str, values: Iterable = ()) -> Axis:
    """sim.apps.axes.axis_for, its label read as a person writes it: the unit once, after the name."""
    # a serving sweep's axis `workload.serving.<field>` is the serving file's `serving.<field>`, as axes names it
    base = axes.axis_for(col.removeprefix("workload.") if col.startswith("workload.serving.") else col, values)
    unit = base.unit or next((u for suffix, u in _UNITS.items() if col.endswith(suffix)), "")
    name = _plain(col, base.name)
    return Axis(f"{name} ({unit})" if unit else name, base.scale)


def label(col: str) -> str:
    """The column's name without a unit, for legends and titles."""
    return axis_for(col).name


def fmt_value(col: str, value) -> str:
    """One value of a column with its unit, as a table shows it: "12.3 ms", "700 W"."""
    if not is_number(value):
        return str(value)
    return axis_for(col, [value]).show(value)

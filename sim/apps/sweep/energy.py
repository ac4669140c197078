"""A sweep's energy and power figures, read across its rows as `sim run` reads one: rows of the two energy models
(`energy_board_model`: 1 idle + activity + dynamic board power, 0 busy-time power only, whose J/token reads several
times low: docs/energy.md) rank and draw apart (the best-points table ranks the board-power rows; a Pareto plot
leaves busy-time rows off its front, hollow), and a binding power cap past the stretch `sim run` calls outside the
model says so after the sweep, as `sim run` says it of one point (hw_models.power.cap_note)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hw_models.power import cap_note
from sim.apps.sweep.blame import point_label

if TYPE_CHECKING:
    import pandas as pd

MODEL = "energy_board_model"
PHASES = ("prefill", "decode")
# The words of cap_note's clause past the stretch it models (its threshold stays cap_note's own)
NO_FLOOR = "no clock floor"
# Points a note names by their values before "and N more"
NAMED = 6


def board_bound(column: str) -> bool:
    """Whether rows of the two energy models compare on `column` only apart: an energy or power figure of the run
    (a config field such as the power limit axis, and the model column itself, compare across them)."""
    if column == MODEL or column.partition(".")[0] in ("hw", "workload"):
        return False
    return "energy" in column or "power" in column or column.endswith("_j")


def mixed(rows: "pd.DataFrame") -> bool:
    return MODEL in rows.columns and rows[MODEL].nunique() > 1


def busy_rows(rows: "pd.DataFrame", columns: list[str]) -> "pd.Series | None":
    """Which of `rows` count busy-time power only, where they mix the two models and one of `columns` is an energy
    or power figure (board_bound); None where every row compares with every other."""
    if not mixed(rows) or not any(board_bound(c) for c in columns):
        return None
    return rows[MODEL] == 0


def comparable(ok: "pd.DataFrame", metric: str) -> tuple["pd.DataFrame", str]:
    """The rows whose `metric` can be ranked against each other, and a label for them: an energy or power figure
    only among the rows of the board-power model where the rows mix both (a busy-time-only row reads several times
    low: a trial's sweep called flexgen_t4 at 4 W the least energy per token)."""
    busy = busy_rows(ok, [metric])
    if busy is None:
        return ok, ""
    board = ok[~busy]
    return (board, " (board-power rows)") if board[metric].notna().any() else (ok, "")


def best_row(ok: "pd.DataFrame", metric: str, goal: str) -> tuple["pd.Series", str]:
    """The row of best `metric` among the rows it may be ranked in (comparable), and their label: what the
    best-points table and a line plot's star both name."""
    return best_points(ok, metric, goal)[:2]


def best_points(ok: "pd.DataFrame", metric: str, goal: str) -> tuple["pd.Series", str, "pd.DataFrame"]:
    """best_row's row and label, and the comparable rows tied with it (`metric` equal to a relative 1e-9): the best
    point and those the best-points table names beside it, from one pass over the rows it may be ranked in."""
    rows, among = comparable(ok, metric)
    row = rows.loc[rows[metric].idxmin() if goal == "min" else rows[metric].idxmax()]
    return row, among, rows[(rows[metric] - row[metric]).abs() <= 1e-9 * abs(row[metric])]


# A PIM run's own figure (hw_models/pim/report.py) or a serving point's stack utilisation: the rows of the PIM kind
PIM_COLUMNS = ("pim.utilization", "utilization.pim.")


def pim_note(ok: "pd.DataFrame", metrics: list[str]) -> list[str]:
    """A note where PIM rows sit beside others and the sweep ranks an energy or power figure: the PIM units draw no
    static or activity power in the model (hw_models/pim/report.py, docs/pim.md), so their J/token is a lower bound
    (an architecture trial's sweep named hbm_pim the least energy per token without a word)."""
    cols = [c for c in ok.columns if c.startswith(PIM_COLUMNS)]
    if not cols or not any(board_bound(m) for m in metrics):
        return []
    pim = ok[cols].notna().any(axis=1)
    if not pim.any() or pim.all():
        return []
    return [f"note: {int(pim.sum())} PIM row(s) ({', '.join(sorted(set(map(str, ok.loc[pim, 'hw']))) if 'hw' in ok.columns else 'pim')}): "
            "their PIM units draw no static or activity power in the model (docs/pim.md), so their energy and power "
            "figures are lower bounds beside the other rows'"]


def models_note(ok: "pd.DataFrame", metrics: list[str] | None = None) -> list[str]:
    """A note where the rows' J/token mix the two energy models and the sweep ranks an energy or power figure
    (`metrics`; None: said whatever it ranks). A sweep of TPOT and throughput alone had printed it (a trial)."""
    if not mixed(ok) or metrics is not None and not any(board_bound(m) for m in metrics):
        return []
    busy = int((ok[MODEL] == 0).sum())
    ranked = [m for m in metrics or [] if board_bound(m)]   # the figures as the sweep ranks them
    named = f"{', '.join(ranked)} mix" if len(ranked) > 1 else f"{ranked[0]} mixes" if ranked else \
        "the energy and power figures mix"
    return [f"note: {named} two energy models: {busy} row(s) count their units' power_w "
            "alone (busy time, or a spatial chip's whole run: energy_board_model 0; docs/energy.md), the others idle + activity + dynamic power; the best energy "
            "and power points are the board-power rows', and a Pareto plot of them draws the others hollow, off "
            "its front"]


def _cap(row: dict[str, Any]) -> dict[str, Any] | None:
    """A run point's power cap figures as hw_models.power.cap_figures gives them (the per-phase stretch and clock
    it recorded; a row without the clock, the whole phase stretched alike), None where the cap did not bind."""
    stretch = {p: float(row.get(f"{p}_power_cap_stretch") or 0.0) for p in PHASES}
    given = {p: row.get(f"{p}_power_cap_clock") for p in PHASES}   # NaN in a row of a sweep before the column
    clock = {p: float(c) if c is not None and c == c else 1.0 / (1.0 + stretch[p]) for p, c in given.items()}
    if all(c >= 1.0 for c in clock.values()):
        return None
    cap: dict[str, Any] = {"limit_w": float(row.get("power_cap_limit_w") or 0.0)}
    for p in PHASES:   # whether a phase bound, by its clock: the note's test reads the clock (its board's W unused)
        cap.update({f"{p}_s": stretch[p], f"{p}_stretch": stretch[p], f"{p}_clock": clock[p],
                    f"{p}_board_w": 0.0 if clock[p] < 1.0 else None})
    return cap


def cap_caveats(df: "pd.DataFrame", axes: list[str]) -> list[str]:
    """The points where a binding power cap stretched a phase past what `sim run` calls outside the model (no clock
    floor is modelled: near the idle power the stretch grows without bound), named by their values, with the clause
    of `sim run`'s note: the points run with warnings off, and a sweep had shown a 5.66x TPOT stretch without a word."""
    ok = df[df["status"] == "ok"] if "status" in df.columns else df
    if not any(f"{p}_power_cap_stretch" in ok.columns for p in PHASES):   # serving points: sim serve says nothing
        return []
    flagged, clause = [], ""
    binds = int((ok["power_cap_binds"] == 1).sum()) if "power_cap_binds" in ok.columns else 0
    bound = ([f"power cap: the board limit binds in {binds} of {len(df)} points (power_cap_binds 1; their times "
              "include the stretch, <phase>_power_cap_stretch): a faster compute or memory there is held by the "
              "limit (`sim run` says so of each)"] if binds else [])
    for row in ok.to_dict("records"):
        cap = _cap(row)
        note = cap_note(cap) if cap else ""
        if NO_FLOOR not in note:
            continue
        clause = clause or next(part for part in note.split("; ") if NO_FLOOR in part)
        phases = ", ".join(f"{p} {1 + cap[f'{p}_stretch']:.2f}x at {cap[f'{p}_clock']:.0%} clock" for p in PHASES
                           if cap[f"{p}_board_w"] is not None)
        flagged.append(f"point {row.get('point', '?')} ({point_label({a: row[a] for a in axes if a in row})}: "
                       f"{phases})")
    if not flagged:
        return bound
    named = "; ".join(flagged[:NAMED]) + (f"; and {len(flagged) - NAMED} more" if len(flagged) > NAMED else "")
    return bound + [f"{len(flagged)} of {len(df)} points: power cap: the board limit (or a clock lock) slows a phase "
                    f"beyond what the model covers (`sim run` warns of each such point): {named}; {clause}"]


def best_per(rows: "pd.DataFrame", by: list[str], metric: str, goal: str) -> "pd.DataFrame":
    """The row of best `metric` (no NaN) at each value of the `by` columns: among a group's board-power rows where
    the rows mix the two energy models on an energy or power figure (comparable), the group's own rows otherwise
    (an architect's trial: a line's "min over hardware at each x" and a heatmap's cells took ipu_bow's busy-time
    J/token, 1.52 J, where the best-points table ranked a100_80g's 1.70 J)."""
    busy = busy_rows(rows, [metric])
    key = rows[metric] if goal == "min" else -rows[metric]
    order = rows.assign(_busy=False if busy is None else busy, _key=key).sort_values(["_busy", "_key"], kind="stable")
    return rows.loc[order.groupby(by, sort=False).head(1).index]


def cell_tables(data: "pd.DataFrame", row: str, col: str, metric: str, goal: str):
    """A heatmap's cells: each (row, col) cell's best `metric` (best_per), the same table with only the cells its star
    may rank (the board-power ones where the rows mix the energy models), and the star's label for them."""
    cells = best_per(data.dropna(subset=[metric]), [row, col], metric, goal)
    table = cells.set_index([row, col])[metric].unstack(col)
    ranked = comparable(cells, metric)[0]
    among = comparable(data, metric)[1]   # the rows mix the models: the cells took board-power rows first
    return table, ranked.set_index([row, col])[metric].unstack(col).reindex_like(table), among

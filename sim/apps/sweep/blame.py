"""Which point, and which axis, a sweep point's error row names. Each point carries its own source (`SWEEP: point
(hw=b200, workload.batch=32)`, sim.apps.sweep.resolve.point_source) and the fields its axes set; an error whose
subject (the key after the source: `SWEEP: point (...): units.gpu: power_limit_w 250 W: ...`) is a field an axis set
is said to come from that axis (`SWEEP: axes.hw.units.@main.power_limit_w at point (...)`), and an error that names
another file (the workload's) gets the point in front. Nothing else is guessed: a model error that no axis's field is
the subject of (12 head groups that do not divide 40 heads) names the point alone."""

from __future__ import annotations

import re
from typing import Any


def point_label(axes: dict[str, Any]) -> str:
    """A point's axis values as its messages name it: `hw=b200, workload.batch=32`."""
    return ", ".join(f"{k}={v}" for k, v in axes.items())


def without_point(error: str) -> str:
    """A stored error row's message without the point it names, as sim.apps.sweep.resolve.point_source labels it
    (`point (axes) (hw X): `, or `point (hw=X, axes): ` with an hw axis): the same error at every point alike."""
    return re.sub(r"point \(.*?\)( \(hw [^)]*\))?: ", "", error, count=1)


def relabelled(error: str, old: dict[str, Any], new: dict[str, Any]) -> str:
    """A stored error row's message naming the point by `new` axes, where a changed sweep reuses the row (its
    resolved config is the same) under axes other than those it was run with (`old`)."""
    return error.replace(f"point ({point_label(old)})", f"point ({point_label(new)})", 1)


def axis_fields(axes: dict[str, Any], resolved: dict[str, str]) -> dict[str, str]:
    """{field as the point's messages name it: axis}: `resolved` maps a `hw.` axis to its field on the point's
    machine (`memory.hbm.bandwidth_bytes_per_s` for `hw.memory.@device.bandwidth_bytes_per_s`); a `workload.` axis
    names its field without the prefix."""
    out = {}
    for axis in axes:
        head, _, rest = axis.partition(".")
        if head == "workload" and rest:
            out[rest] = axis
        elif head == "hw" and rest:
            out[resolved.get(axis, rest)] = axis
    return out


def _axis_of(after: str, fields: dict[str, str]) -> str | None:
    """The axis whose field is the subject of `after` (the message past its source): the subject itself or a key
    within a mapping the axis sets, or the parent of the axis's field followed by its last key
    ("units.gpu: power_limit_w 250 W" for `units.gpu.power_limit_w`)."""
    subject, _, rest = after.partition(":")
    subject = subject.strip()
    for field, axis in fields.items():
        if subject == field or subject.startswith(field + "."):
            return axis
        if field.startswith(subject + ".") and rest.strip().startswith(field[len(subject) + 1:]):
            return axis
    return None


def attributed(msg: str, source: str, fields: dict[str, str]) -> str:
    """`msg`, an error of the point whose messages start with `source`, naming the point and the axis (if any) whose
    field is its subject."""
    if f"{source}: " in msg:
        after = msg.split(f"{source}: ", 1)[1]
        axis = _axis_of(after, fields)
        return msg.replace(source, _blamed(source, axis), 1) if axis else msg
    # an error under another file's name (the workload, the model): the point in front
    head, sep, after = msg.partition(": ")
    axis = _axis_of(after, fields) if sep else None
    return f"{_blamed(source, axis) if axis else source}: {msg}"


def _blamed(source: str, axis: str) -> str:
    return source.replace(": point (", f": axes.{axis} at point (", 1)

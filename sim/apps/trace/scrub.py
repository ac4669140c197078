"""Keep captured traces free of the capturing machine's paths (issue 18).

torch's `export_chrome_trace(path)` writes `"traceName": "<path>"` into the
JSON, and the CPU build also writes `"host_name"`. A capture therefore named
the temporary file it was exported through, with the absolute path of the
checkout, and two captures of the same content differed by a random temp name.
Here:

* `scrub_chrome_text` sets `traceName` to the name of the JSON document the
  trace file holds (`X.trace.json` for `X.trace.json.gz`: the trace file's own
  name, without the compression suffix, as in the shared H200 captures) and
  drops `host_name`;
* `portable_argv` rewrites path arguments (`--out`, a `--model` config file)
  relative to the repository, or to their file name when outside it;
* `write_gzip` compresses with no file name and mtime 0 in the header, so the
  same JSON gives the same bytes.

Both keys live outside the `traceEvents` array (before it, or after it), so
only that part of the text is touched; the events are byte-for-byte unchanged.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
from pathlib import Path

_TRACE_NAME_RE = re.compile(rb'"traceName"\s*:\s*"(?:[^"\\]|\\.)*"')
_HOST_NAME_RE = re.compile(rb'\s*"host_name"\s*:\s*"(?:[^"\\]|\\.)*"\s*,')
# Options whose value is a path on the capturing machine.
PATH_OPTIONS = ("--out", "--model")
# meta.json fields that differ between two captures of the same run (documented in traces/README.md).
VARYING_META_FIELDS = ("date", "loadavg_1m", "wall_s", "steps")


def json_name(trace_file: str | Path) -> str:
    """The name of the JSON document inside a trace file: 'x.trace.json.gz' -> 'x.trace.json'."""
    name = Path(trace_file).name
    return name[: -len(".gz")] if name.endswith(".gz") else name


def scrub_chrome_text(raw: bytes, trace_name: str) -> bytes:
    """`raw` (a torch Chrome trace's JSON text) with traceName = trace_name and no host_name."""
    head_end = raw.find(b'"traceEvents"')
    tail_start = raw.rfind(b"]")
    if head_end < 0 or tail_start < head_end:
        raise ValueError("not a torch Chrome trace: no traceEvents array")
    head, body, tail = raw[:head_end], raw[head_end:tail_start], raw[tail_start:]
    head = _HOST_NAME_RE.sub(b"", head)
    tail = _HOST_NAME_RE.sub(b"", tail)
    name = json.dumps(trace_name).encode()
    new_field = b'"traceName": ' + name
    if _TRACE_NAME_RE.search(tail):
        tail = _TRACE_NAME_RE.sub(lambda _m: new_field, tail, count=1)
    elif _TRACE_NAME_RE.search(head):
        head = _TRACE_NAME_RE.sub(lambda _m: new_field, head, count=1)
    return head + body + tail


def gzip_bytes(data: bytes) -> bytes:
    """No file name and mtime 0 in the gzip header: same content -> same bytes."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return buf.getvalue()


def write_gzip(data: bytes, path: Path) -> None:
    path.write_bytes(gzip_bytes(data))


def portable_path(arg: str, root: Path, cwd: Path | None = None) -> str:
    """`arg` relative to the repository `root` when it lies inside it, else its file name.
    A trailing separator (a directory for capture_trace's --out) is kept."""
    trail = "/" if arg.endswith(("/", os.sep)) else ""
    p = Path(arg)
    full = (p if p.is_absolute() else (cwd or Path.cwd()) / p).resolve()
    try:
        rel = full.relative_to(root.resolve()).as_posix()
    except ValueError:
        rel = full.name
    return (rel + trail) if rel not in ("", ".") else "./"


def _is_path(value: str) -> bool:
    return os.sep in value or "/" in value or Path(value).suffix in (".json", ".yaml", ".yml")


def portable_argv(argv: list[str], root: Path, cwd: Path | None = None) -> list[str]:
    """argv with the values of PATH_OPTIONS made portable (`--out X` and `--out=X`);
    a --model preset name (no path) is left as it is."""
    out: list[str] = []
    take = False
    for a in argv:
        if take:
            out.append(portable_path(a, root, cwd) if _is_path(a) else a)
            take = False
            continue
        key, eq, value = a.partition("=")
        if key in PATH_OPTIONS and eq:
            out.append(f"{key}={portable_path(value, root, cwd) if _is_path(value) else value}")
        else:
            out.append(a)
            take = a in PATH_OPTIONS
    return out


def scrub_trace_file(path: Path) -> bool:
    """Rewrite one .json/.json.gz Chrome trace in place; True when it changed."""
    raw = path.read_bytes()
    gz = raw[:2] == b"\x1f\x8b"
    text = gzip.decompress(raw) if gz else raw
    new_text = scrub_chrome_text(text, json_name(path))
    new = gzip_bytes(new_text) if gz else new_text
    if new == raw:
        return False
    path.write_bytes(new)
    return True


def scrub_meta_file(path: Path, root: Path) -> bool:
    """Rewrite one capture_trace .meta.json's argv in place; True when it changed.
    The argv was recorded relative to the directory the capture ran in, which is
    unknown now: relative paths are taken as relative to the repository root."""
    text = path.read_text()
    meta = json.loads(text)
    argv = meta.get("argv")
    if not isinstance(argv, list):
        return False
    new_argv = portable_argv([str(a) for a in argv], root, root)
    if new_argv == argv:
        return False
    meta["argv"] = new_argv
    path.write_text(json.dumps(meta, indent=1, sort_keys=False) + "\n")
    return True

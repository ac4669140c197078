"""load_trace's cache (sim.apps.trace.parser): a repeated load is a copy of the first, and
any change to the trace or its .meta.json sidecar is read afresh."""

import json
import os
import shutil
from pathlib import Path

import pytest

from sim.core.errors import ConfigError
from sim.core.files import check_output, guard_inputs
from sim.apps.trace.parser import load_trace

DATA = Path(__file__).parent / "data"
PREFIX = "trace_tinyllama_L1"


def _copy_trace(tmp_path: Path) -> Path:
    for suffix in (".trace.json.gz", ".meta.json"):
        shutil.copy(DATA / (PREFIX + suffix), tmp_path / (PREFIX + suffix))
    return tmp_path / (PREFIX + ".trace.json.gz")


def test_a_repeated_load_is_an_equal_copy_the_caller_may_change(tmp_path):
    p = _copy_trace(tmp_path)
    load_trace(p)
    (first,) = load_trace(p)  # a hit: changing it must not change the cached entry
    n_ops, n_steps, meta = len(first.ops), len(first.steps), dict(first.meta)
    first.ops.clear()
    first.steps.clear()
    first.meta["scribbled"] = True
    (second,) = load_trace(p)
    assert second is not first
    assert (len(second.ops), len(second.steps), second.meta) == (n_ops, n_steps, meta)
    assert n_ops > 0 and n_steps > 0


def test_an_edited_sidecar_is_read_again(tmp_path):
    p = _copy_trace(tmp_path)
    (before,) = load_trace(p)
    assert before.device_name == "AMD EPYC"
    side = tmp_path / (PREFIX + ".meta.json")
    meta = json.loads(side.read_text())
    meta["device_name"] = "AMD EPYC 9654"
    side.write_text(json.dumps(meta))
    (after,) = load_trace(p)
    assert after.device_name == "AMD EPYC 9654"


def test_a_same_size_edit_with_a_new_mtime_is_read_again(tmp_path):
    p = _copy_trace(tmp_path)
    side = tmp_path / (PREFIX + ".meta.json")
    load_trace(p)
    text = side.read_text()
    side.write_text(text.replace('"device_name": "AMD EPYC"', '"device_name": "AMD EPYX"'))
    st = side.stat()
    os.utime(side, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # coarse-mtime filesystems
    (after,) = load_trace(p)
    assert after.device_name == "AMD EPYX"


def test_a_removed_sidecar_is_noticed(tmp_path):
    p = _copy_trace(tmp_path)
    load_trace(p)
    (tmp_path / (PREFIX + ".meta.json")).unlink()
    with pytest.raises(ConfigError, match="meta.json"):
        load_trace(p)


def test_a_cached_load_still_guards_its_inputs(tmp_path):
    # The second load is a cache hit; the trace and its sidecar must still be refused as outputs.
    p = _copy_trace(tmp_path)
    load_trace(p)
    with guard_inputs():
        load_trace(p)
        for name in (p, tmp_path / (PREFIX + ".meta.json")):
            with pytest.raises(ConfigError):
                check_output(name)

"""Issue 17: hostile values anywhere in a workload, a hardware file or a trace's metadata
end in exit 0 or one error line (exit 2), never a traceback. Bounded examples, no deadline:
the whole file runs in a few seconds."""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hw_models.machine import raw_machine
from sim.apps.cli import main
from tests.conftest import ROOT
from tests.robust_helpers import TINY_WORKLOAD

DATA = ROOT / "tests/data"
FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
                derandomize=True)

junk = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "fp16", "half", "10 GB", "10 GB/s", "1 us", "1e400", "-1", "[/b]", "a\nb", "../x"]),
    st.text(max_size=6), st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(["a", "weights", "lm_head"]), st.integers(-2, 2), max_size=2),
)


def _leaves(tree, prefix=()):
    """Every dotted path to a value in a nested mapping."""
    for k, v in tree.items():
        yield prefix + (k,)
        if isinstance(v, dict):
            yield from _leaves(v, prefix + (k,))


def _set(tree, path, value):
    node = tree
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value


def _no_traceback(capsys, argv) -> None:
    rc = main(argv)  # anything but a SimError propagates and fails the test with its traceback
    err = capsys.readouterr().err
    assert rc in (0, 2), (rc, err)
    if rc == 2:
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "Traceback" not in err, err


WORKLOAD = yaml.safe_load(TINY_WORKLOAD) | {"formats": {"weights": "fp16", "overrides": {}}, "flash_attention": False}


@FUZZ
@given(key=st.sampled_from(sorted(str(".".join(p)) for p in _leaves(WORKLOAD)) + ["pim_policy", "policy", "compute"]),
       value=junk)
def test_fuzz_workload_fields(capsys, key, value):
    wl = copy.deepcopy(WORKLOAD)
    _set(wl, tuple(key.split(".")), value)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.yaml"
        path.write_text(yaml.safe_dump(wl))
        _no_traceback(capsys, ["run", str(path), "--hw", "a6000", "-q", "--json", str(Path(tmp) / "r.json")])


A6000 = raw_machine("a6000")


@FUZZ
@given(path=st.sampled_from(sorted(_leaves(A6000))), value=junk)
def test_fuzz_hardware_fields(capsys, path, value):
    hw = copy.deepcopy(A6000)
    _set(hw, path, value)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "w.yaml").write_text(TINY_WORKLOAD)
        (Path(tmp) / "hw.yaml").write_text(yaml.safe_dump(hw))
        _no_traceback(capsys, ["run", str(Path(tmp) / "w.yaml"), "--hw", str(Path(tmp) / "hw.yaml"), "-q"])


META = json.loads((DATA / "trace_tinyllama_L1.meta.json").read_text())


@settings(FUZZ, max_examples=15)
@given(key=st.sampled_from(["prompt", "batch", "decode_steps", "layers", "dtype", "flash", "model", "steps",
                            "device"]), value=junk)
def test_fuzz_trace_metadata(capsys, key, value):
    meta = copy.deepcopy(META) | {key: value}
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(DATA / "trace_tinyllama_L1.ops.csv", Path(tmp) / "t.ops.csv")
        (Path(tmp) / "t.meta.json").write_text(json.dumps(meta))
        _no_traceback(capsys, ["validate", str(Path(tmp) / "t.ops.csv"), "--hw", "cpu_host"])


@settings(FUZZ, max_examples=15)
@given(data=st.binary(max_size=200))
def test_fuzz_raw_bytes_as_every_input(capsys, data):
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in (("w.yaml", ["run", "{f}", "--hw", "a6000", "-q"]),
                           ("h.yaml", ["run", str(ROOT / "workloads/llama2_7b_decode.yaml"), "--hw", "{f}", "-q"]),
                           ("t.json", ["validate", "{f}", "--hw", "cpu_host"]),
                           ("config.json", ["model", "show", "{f}"])):
            f = Path(tmp) / name
            f.write_bytes(data)
            _no_traceback(capsys, [a.format(f=f) for a in argv])


SERVING = {"arrivals": {"process": "gamma", "rate": 10, "cv": 2.0, "num_requests": 20, "seed": 0},
           "lengths": {"prompt": {"dist": "lognormal", "mean": 200, "cv": 1.0, "min": 4, "max": 4096},
                       "output": {"dist": "normal", "mean": 50, "std": 10}},
           "scheduler": {"kind": "vllm-v0", "block_size": 16, "preemption": "recompute", "watermark": 0.01},
           "slo": {"ttft_p90": 0.2}}


@FUZZ
@given(path=st.sampled_from(sorted(_leaves(SERVING))), value=junk)
def test_fuzz_serving_fields(path, value):
    """The serving section up to the request stream (no simulation: that is the slow part, and
    the hardware fuzz covers step costs): anything but a SimError fails with its traceback."""
    from sim.apps.serve.arrivals import make_requests
    from sim.apps.serve.spec import load_serve_file
    from sim.core.errors import SimError

    serving = copy.deepcopy(SERVING)
    _set(serving, path, value)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "s.yaml"
        f.write_text(yaml.safe_dump({"name": "s", "model": "tinyllama-1.1b", "serving": serving}))
        try:
            make_requests(load_serve_file(f))
        except SimError as exc:
            assert str(f) in str(exc), exc   # sim.apps.cli.main prints it on one line

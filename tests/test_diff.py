"""`sim diff A.json B.json`: the inputs that differ, metrics, and the decode step op by op."""

import json

import pytest
import yaml

from hw_models.machine import raw_machine
from sim.apps.cli import main
from sim.core.units import fmt_time
from tests.conftest import ROOT

WORKLOAD = str(ROOT / "workloads" / "llama2_7b_decode.yaml")
SERVE = str(ROOT / "workloads" / "serve_llama3_8b_sharegpt.yaml")
CAP = "hw.units.gpu.power_limit_w=300"


def _run(path, *argv: str) -> dict:
    assert main(["run", WORKLOAD, "--hw", "h100_sxm", "--set", "gen_len=4", *argv, "--json", str(path), "-q"]) == 0
    return json.loads(path.read_text())


def _diff(capsys, a, b) -> tuple[list[dict], str]:
    """sim diff's tables as data, and what it said on stderr."""
    capsys.readouterr()
    assert main(["diff", str(a), str(b), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_diff_names_the_change_and_the_ops(capsys, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["run", WORKLOAD, "--hw", "h200", "--set", "gen_len=4", "--json", str(a), "-q"]) == 0
    assert main(["run", WORKLOAD, "--hw", "h200", "--set", "gen_len=4", "--set", "formats.weights=int4",
                 "--json", str(b), "-q"]) == 0
    capsys.readouterr()
    assert main(["diff", str(a), str(b), "--all", "--format", "json"]) == 0
    inputs, metrics, ops = json.loads(capsys.readouterr().out)
    assert inputs["rows"] == [["formats.weights", "fp16", "int4"]]
    tpot = dict((r[0], r[3]) for r in metrics["rows"])["tpot_s"]
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    assert tpot == f"{rb['tpot_s'] / ra['tpot_s']:.3g}x"
    # Every op of the step, once; the by-layer sums of q_proj are the JSON's own.
    names = [r[0] for r in ops["rows"]]
    assert len(names) == len(set(names)) and "q_proj" in names
    q = sum(o["end_s"] - o["start_s"] for o in rb["ops"] if o["name"].endswith(".q_proj"))
    row = next(r for r in ops["rows"] if r[0] == "q_proj")
    assert row[3] == fmt_time(q)


def test_diff_refuses_what_is_not_a_run(capsys, tmp_path):
    other = tmp_path / "serve.json"
    other.write_text(json.dumps({"throughput_tok_s": 1.0}))
    assert main(["diff", str(other), str(other)]) == 2
    assert "not a `sim run --json` result" in capsys.readouterr().err



def test_an_op_split_over_units_that_run_at_once_counts_once():
    """A PIM run's op is five parts, one per stack, at the same time: the diff counts the op from the first part's
    start to the last's end (2 ms, not 5 x 2 ms), then sums it over layers; a pipelined step's op names its
    micro-batch and stage, which the diff drops like the layer."""
    from sim.apps.diff import ops_by_name

    ops = [dict(name=f"L{layer}.down_proj@stack{k}", kind="gemm", start_s=10.0 * layer, end_s=10.0 * layer + 2.0)
           for layer in range(2) for k in range(5)]
    ops += [dict(name=f"mb{i}.stage1.L40.q_proj", kind="gemm", start_s=100.0 + i, end_s=100.5 + i) for i in range(2)]
    assert ops_by_name({"ops": ops}) == {"down_proj": ("gemm", 4.0), "q_proj": ("gemm", 1.0)}


def test_a_hardware_set_is_recorded_and_listed(capsys, tmp_path):
    """Two runs on h100_sxm that differed only in a --set hw.* wrote the same `hardware: h100_sxm`, and sim diff said
    no input differed beside TTFT 3.19x (an architect's trial): the JSON keeps the overrides (@device resolved) and
    the effective figures, and the diff lists each figure that differs, marked where a --set gave it."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    ra = _run(a)
    rb = _run(b, "--set", CAP, "--set", "hw.memory.@device.latency_s=1e-6")
    assert ra["hw_overrides"] == {} and ra["hw_figures"]["units"]["gpu"]["power_limit_w"] is None
    assert rb["hw_overrides"] == {"units.gpu.power_limit_w": 300, "memory.hbm.latency_s": 1e-6}
    assert rb["hw_figures"]["units"]["gpu"]["power_limit_w"] == 300
    (inputs, *_), _ = _diff(capsys, a, b)
    assert inputs["rows"] == [["hw.memory.hbm.latency_s", "5e-07", "1e-06 (--set)"],
                              ["hw.units.gpu.power_limit_w", "null (default)", "300 (--set)"]]
    # A result written before sim recorded the figures: the diff says the hardware went uncompared.
    old = tmp_path / "old.json"
    old.write_text(json.dumps({k: v for k, v in rb.items() if not k.startswith("hw_")}))
    (inputs, *_), err = _diff(capsys, a, old)
    assert inputs["rows"] == [["(none)", "", ""]] and "hardware figures: not recorded in B" in err


def test_a_hardware_file_against_its_preset(capsys, tmp_path):
    """--hw my.yaml against --hw h100_sxm: the same name, so only the figures tell them apart; an unchanged copy
    differs in nothing."""
    raw = raw_machine("h100_sxm")
    (tmp_path / "same.yaml").write_text(yaml.safe_dump(raw))
    raw["memory"]["hbm"]["bandwidth_bytes_per_s"] = 4e12
    (tmp_path / "fast.yaml").write_text(yaml.safe_dump(raw))
    paths = {n: tmp_path / f"{n}.json" for n in ("preset", "same", "fast")}
    _run(paths["preset"])
    for n in ("same", "fast"):
        assert main(["run", WORKLOAD, "--hw", str(tmp_path / f"{n}.yaml"), "--set", "gen_len=4", "--json",
                     str(paths[n]), "-q"]) == 0
    assert _diff(capsys, paths["preset"], paths["same"])[0][0]["rows"] == [["(none)", "", ""]]
    (inputs, *_), _ = _diff(capsys, paths["preset"], paths["fast"])
    assert inputs["rows"] == [["hw.memory.hbm.bandwidth_bytes_per_s", "3.35e+12", "4e+12"]]


def test_two_serve_summaries(capsys, tmp_path):
    """sim diff refused `sim serve --json` summaries; it compares their inputs, hardware and serving metrics, and
    refuses a run against a serve summary, or a --find-capacity result, in one line."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path, extra in ((a, []), (b, ["--set", CAP])):
        assert main(["serve", SERVE, "--hw", "h100_sxm", "--set", "serving.arrivals.num_requests=20", *extra,
                     "--json", str(path), "-q"]) == 0
    (inputs, metrics, *rest), err = _diff(capsys, a, b)
    assert inputs["rows"] == [["hw.units.gpu.power_limit_w", "null (default)", "300 (--set)"]] and not rest
    assert "not its serving section" not in err   # both record it
    sa, sb = json.loads(a.read_text()), json.loads(b.read_text())
    # the serving section's settings, as run: two rates diffed as "(none)" when the summary did not record them
    c = tmp_path / "c.json"
    assert main(["serve", SERVE, "--hw", "h100_sxm", "--set", "serving.arrivals.num_requests=20",
                 "--set", "serving.arrivals.rate=3", "--json", str(c), "-q"]) == 0
    (inputs, *_), _ = _diff(capsys, a, c)
    assert inputs["rows"] == [["serving.arrivals.rate", str(sa["serving"]["arrivals"]["rate"]), "3.0"]]
    old = tmp_path / "old.json"   # an older sim's summary: without the section, said uncompared
    old.write_text(json.dumps({k: v for k, v in sa.items() if k != "serving"}))
    _, err = _diff(capsys, old, a)
    assert "not its serving section" in err
    ratio = dict((r[0], r[3]) for r in metrics["rows"])
    assert ratio["latency.ttft.p90"] == f"{sb['latency']['ttft']['p90'] / sa['latency']['ttft']['p90']:.3g}x"
    assert ratio["energy.avg_power_per_device_w"] == (
        f"{sb['energy']['avg_power_per_device_w'] / sa['energy']['avg_power_per_device_w']:.3g}x")
    assert ratio["energy.peak_power_per_device_w"] == (   # an energy trial: the peak was not compared
        f"{sb['energy']['peak_power_per_device_w'] / sa['energy']['peak_power_per_device_w']:.3g}x")
    run = tmp_path / "run.json"
    _run(run)
    capacity = tmp_path / "capacity.json"
    capacity.write_text(json.dumps({"capacity_rate_req_s": 5.0, "summary": sa}))
    for x, y, says in ((run, a, "sim diff compares two of one kind"), (capacity, a, "--find-capacity")):
        capsys.readouterr()
        assert main(["diff", str(x), str(y)]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_two_runs_compare_their_energy_by_phase(capsys, tmp_path):
    """An energy trial: sim diff of two runs left out the decode and prefill J/token. A run without them (a busy-time
    preset) leaves their rows out rather than printing a blank."""
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    ra, rb = _run(a), _run(b, "--set", CAP)
    (_, metrics, *_), _ = _diff(capsys, a, b)
    ratio = dict((r[0], r[3]) for r in metrics["rows"])
    for key in ("decode_energy_per_token_j", "prefill_energy_per_token_j"):
        assert ratio[key] == f"{rb[key] / ra[key]:.3g}x", key
    assert main(["run", WORKLOAD, "--hw", "l40s", "--set", "gen_len=4", "--json", str(c), "-q"]) == 0
    (_, metrics, *_), _ = _diff(capsys, a, c)
    assert "decode_energy_per_token_j" not in [r[0] for r in metrics["rows"]]


@pytest.mark.parametrize("field, value, key", [
    ("ops", "x", "ops"), ("ops", [{"name": 1, "kind": "gemm", "start_s": 0, "end_s": 1}], "ops.0.name"),
    ("ops", [{}], "ops.0.name"), ("ops", None, "ops"), ("extra", "x", "extra"), ("notes", 5, "notes"),
    ("notes", [1], "notes.0"), ("hw_overrides", 5, "hw_overrides"), ("extra", {"power_cap": "x"}, "extra.power_cap"),
    ("ops", [{"name": "q", "kind": "gemm", "start_s": "x", "end_s": 1}], "ops.0.start_s")])
def test_a_corrupt_run_json_is_one_line_naming_its_key(tmp_path, capsys, field, value, key):
    """A hostile-input trial: a hand-edited `sim run --json` file (`"ops": "x"`, `"notes": 5`, an op without a name)
    crashed sim diff with a traceback, exit 1. The fields it reads are checked first: one line naming the file and
    key, exit 2."""
    good = tmp_path / "a.json"
    assert main(["run", str(ROOT / "workloads" / "llama2_7b_decode.yaml"), "--hw", "a6000", "--json", str(good),
                 "-q"]) == 0
    bad = tmp_path / "b.json"
    bad.write_text(json.dumps({**json.loads(good.read_text()), field: value}))
    capsys.readouterr()
    assert main(["diff", str(good), str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {bad}: {key}:")


def test_the_op_table_says_at_which_clock_a_capped_run_s_ops_are(capsys, tmp_path):
    """A docs trial: the caption read "at full clock ... not op by op" over a 300 W run whose ops (the JSON's records,
    at_capped_clock) were each stretched 1.65x. It now says the capped side's ops run at the clock its cap leaves."""
    a, b = _run(tmp_path / "a.json"), _run(tmp_path / "b.json", "--set", CAP)
    assert (a["extra"].get("power_cap") or {}).get("decode_board_w") is None and b["extra"]["power_cap"]["decode_board_w"] > 300
    capsys.readouterr()
    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--width", "400"]) == 0
    out = " ".join(capsys.readouterr().out.split())   # the caption wraps at the table's width
    assert "B's ops run at the clock its board power cap (or clock lock) leaves" in out and "not op by op" not in out


def test_a_binding_power_cap_is_named_beside_the_metrics():
    """A design whose TTFT read 1.26x worse gave no reason in sim diff: its 500 W cap had stretched prefill +68%,
    which only `sim run` said (an architecture trial). The note names the run, its limit and each phase's stretch."""
    from sim.apps.diff import cap_note

    run = {"extra": {"power_cap": {"limit_w": 500.0, "prefill_s": 0.028, "prefill_stretch": 0.6834, "decode_s": 0.0,
                                   "decode_stretch": 0.0}}}
    served = {"energy": {"power_cap": {"limit_w": 400.0, "added_s": 1.5, "stretch": 0.0421}}}
    assert cap_note({}, run) == ("B: its 500 W board power limit binds and lowers the clock: prefill +68.3% (in the "
                                 "metrics above; hw_models/power.py)")
    assert cap_note(served, {}).startswith("A: its 400 W board power limit binds and lowers the clock: engine time +4.2%")
    assert cap_note({}, {"extra": {"power_cap": {"limit_w": 700.0, "prefill_s": 0.0, "decode_s": 0.0}}}) is None
    # a clock lock that the limit lowers no further is named as the lock (a review: it read "700 W ... binds")
    locked = {"extra": {"power_cap": {"limit_w": 700.0, "clock_lock": 0.6, "prefill_s": 0.01, "prefill_stretch": 0.487,
                                      "prefill_clock": 0.6, "prefill_board_w": 814.0, "decode_s": 0.0,
                                      "decode_stretch": 0.0, "decode_clock": 0.6, "decode_board_w": 430.0}}}
    assert cap_note({}, locked).startswith("B: its SM clock is locked at 60% of full: prefill +48.7%, decode +0.0%")
    served_lock = {"energy": {"power_cap": {"limit_w": 700.0, "clock_lock": 0.6, "clock": 0.55, "added_s": 1.0,
                                            "stretch": 0.1}}}
    assert cap_note(served_lock, {}).startswith("A: its 700 W board power limit binds and lowers the clock below its 60%")

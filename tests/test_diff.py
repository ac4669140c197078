"""`sim diff A.json B.json`: the inputs that differ, metrics, and the decode step op by op."""

import json

from sim.apps.cli import main
from sim.core.units import fmt_time
from tests.conftest import ROOT

WORKLOAD = str(ROOT / "workloads" / "llama2_7b_decode.yaml")


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


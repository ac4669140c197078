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



def test_an_op_split_over_units_that_run_at_once_counts_once():
    """A PIM run's op is five parts, one per stack, at the same time: the diff counts the op from the first part's
    start to the last's end (2 ms, not 5 x 2 ms), then sums it over layers; a pipelined step's op names its
    micro-batch and stage, which the diff drops like the layer."""
    from sim.apps.diff import ops_by_name

    ops = [dict(name=f"L{layer}.down_proj@stack{k}", kind="gemm", start_s=10.0 * layer, end_s=10.0 * layer + 2.0)
           for layer in range(2) for k in range(5)]
    ops += [dict(name=f"mb{i}.stage1.L40.q_proj", kind="gemm", start_s=100.0 + i, end_s=100.5 + i) for i in range(2)]
    assert ops_by_name({"ops": ops}) == {"down_proj": ("gemm", 4.0), "q_proj": ("gemm", 1.0)}

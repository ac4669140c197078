"""The consistency check of measured closed-loop runs (sim.apps.serve.validate_consistency): Little's law by hand,
the pairs it flags and those it must not, and what `sim validate-serving` adds from it."""

from __future__ import annotations

import argparse
import dataclasses

import pandas as pd
import pytest

from sim.apps.serve.validate import Result, Run, render
from sim.apps.serve.validate_consistency import MARGIN, contradictions, flagged, load, run_key


def closed(name: str, n: int, ttft_s: float, tpot_s: float, osl: int = 101, version: str | None = "0.18.0",
           tp: int = 2) -> Run:
    """A closed-loop run whose E2E is TTFT + TPOT x (osl - 1), as the silicon sample's."""
    return Run(name, "h100_sxm", "vllm", "openai/gpt-oss-120b", 1024, osl, n, tp=tp, version=version,
               measured={"ttft_s": ttft_s, "tpot_s": tpot_s, "e2e_s": ttft_s + tpot_s * (osl - 1)})


# 8 clients: 0.1 s + 100 x 12 ms = 1.3 s, 8 x 1.2 / 1.3 = 7.4 decoding, 8 / 1.3 = 6.2 a second; 64 clients: 0.2 s +
# 100 x 6 ms = 0.8 s, 64 x 0.6 / 0.8 = 48 decoding, 80 a second: the 8-client run does less of both, at 2x the TPOT
FEW, MANY = closed("few", 8, 0.1, 0.012), closed("many", 64, 0.2, 0.006)


def test_littles_law_by_hand():
    # 10 clients, 0.5 s to the first token of a 2.0 s request: 10 x 1.5 / 2 = 7.5 decoding, 10 / 2 = 5 admitted a second
    n_dec, rate = load(closed("a", 10, 0.5, 0.015))
    assert (n_dec, rate) == (pytest.approx(7.5), pytest.approx(5.0))


@pytest.mark.parametrize("change", [
    dict(rate=4.0),                                                    # open loop
    dict(osl=1),                                                       # no decode
    dict(concurrency=0),
    dict(measured={"ttft_s": 0.5, "tpot_s": 0.015}),                   # no E2E
    dict(measured={"ttft_s": 0.5, "tpot_s": 0.015, "e2e_s": 0.5}),     # E2E no longer than TTFT
    dict(measured={"ttft_s": float("nan"), "tpot_s": 0.015, "e2e_s": 2.0}),
])
def test_no_load_without_a_closed_loop_or_its_means(change):
    assert load(dataclasses.replace(closed("a", 10, 0.5, 0.015), **change)) is None


def test_fewer_decoding_and_admitted_yet_slower_contradicts():
    found = contradictions([MANY, FEW])
    assert [(c.fewer, c.more) for c in found] == [("few", "many")]
    assert flagged(found) == {run_key(FEW), run_key(MANY)}
    assert found[0].why == "vllm 0.18.0: 8 clients decode ~7 requests at 12.00 ms a token, 64 clients ~48 at 6.00 ms"


@pytest.mark.parametrize("few", [
    closed("few", 8, 0.1, 0.006 * MARGIN),              # exactly MARGIN x: not over it
    dataclasses.replace(FEW, tp=4),                     # another layout
    dataclasses.replace(FEW, osl=201),                  # other lengths
    dataclasses.replace(FEW, version="0.11.2"),         # another release: kernels and defaults may differ
    dataclasses.replace(FEW, version=None),             # release not recorded
])
def test_no_contradiction_within_the_margin_or_across_setups(few):
    assert contradictions([few, MANY]) == []


def test_a_measured_e2e_admitting_more_is_no_contradiction():
    """With E2E measured (outputs of their own lengths), fewer decoding at a longer TPOT need not mean fewer admitted:
    the slower run here admits 64/s against 32/s, and its steps carry that many more prefills (a code review)."""
    slow = Run("slow", "h100_sxm", "vllm", "openai/gpt-oss-120b", 1024, 101, 64, version="0.18.0",
               measured={"ttft_s": 0.6, "tpot_s": 0.012, "e2e_s": 1.0})     # 25.6 decoding, 64/s
    fast = Run("fast", "h100_sxm", "vllm", "openai/gpt-oss-120b", 1024, 101, 32, version="0.18.0",
               measured={"ttft_s": 0.1, "tpot_s": 0.006, "e2e_s": 1.0})     # 28.8 decoding, 32/s
    assert load(slow)[0] < load(fast)[0] and load(slow)[1] > load(fast)[1]
    assert contradictions([slow, fast]) == []


def test_runs_of_one_id_in_two_layouts_are_told_apart():
    """Flags are keyed by the run, not its id: an id that repeats in another layout is not flagged with it."""
    twin = dataclasses.replace(MANY, name="few", tp=4)
    found = contradictions([FEW, MANY, twin])
    assert flagged(found) == {run_key(FEW), run_key(MANY)} and run_key(twin) not in flagged(found)


def _results():
    other = closed("other", 16, 0.1, 0.008)
    return [Result(r, dict(r.measured), {"ttft_s": e, "tpot_s": e, "e2e_s": e})
            for r, e in ((FEW, 0.5), (MANY, 0.3), (other, 0.1))]


def test_render_adds_the_mape_without_contradicted_rows():
    results = _results()
    text = render(results, [], [], 1.0, per_run=False, found=contradictions([r.run for r in results]))
    assert "| all | | | 3 | 30.0% | 30.0% | 30.0% | - |" in text
    assert "| all but contradicted rows | | | 1 | 10.0% | 10.0% | 10.0% | - |" in text
    assert "2 replayed rows contradict another measured row of its setup and release" in text
    one = render(results[1:], [], [], 1.0, per_run=False, found=contradictions([FEW, MANY]))   # FEW not replayed
    assert "1 replayed row contradicts" in one and "| all but contradicted rows | | | 1 |" in one
    assert "contradict" not in render(results, [], [], 1.0, per_run=False)


def test_json_lists_the_pairs_a_replayed_run_is_in():
    from sim.apps.serve.validate_cli import as_json

    results = _results()
    found = contradictions([FEW, MANY, closed("a", 8, 0.1, 0.024, tp=8), closed("b", 64, 0.2, 0.006, tp=8)])
    d = as_json("h100_sxm", results, [], [], found)
    assert d["overall"]["runs"] == 3 and d["overall"]["tpot_s"] == pytest.approx(0.3)
    assert d["overall_uncontradicted"]["runs"] == 1 and d["overall_uncontradicted"]["tpot_s"] == pytest.approx(0.1)
    assert [(c["fewer"], c["more"]) for c in d["contradictions"]] == [("few", "many")]   # not the unreplayed a / b
    assert as_json("h100_sxm", results, [], [])["contradictions"] == []


def test_the_cli_checks_the_rows_held_out_against_the_training_half(tmp_path):
    """`--held-out` replays half the table, but a held-out row's partner may be in the other half: the pairs are
    found over every row read, before the held-out and --limit cuts."""
    from sim.apps.serve.overhead_fit import in_training
    from sim.apps.serve.validate_cli import _runs

    ids = [f"2026_03_25_x_{i}" for i in range(40)]
    train, held = next(i for i in ids if in_training(i)), next(i for i in ids if not in_training(i))
    row = dict(backend="vllm", backend_version="0.18.0", model_path="Qwen/Qwen3-32B", system="h100_sxm", mode="agg",
               isl=1024, osl=101, batch_size=8, tp_size=2, pp_size=1, attention_dp_size=None)
    path = tmp_path / "s.csv"
    pd.DataFrame([dict(row, id=held, silicon_ttft_ms=100.0, silicon_tpot_ms=12.0),
                  dict(row, id=train, batch_size=64, silicon_ttft_ms=200.0, silicon_tpot_ms=6.0)]).to_csv(path, index=False)
    args = argparse.Namespace(file=str(path), hw="h100_sxm", held_out=True, model=None, engine=None, tp=None, ep=None,
                              requests_per_client=None)
    runs, _, left_out, found = _runs(args)
    assert [r.name for r in runs] == [held] and left_out == 1
    assert [(c.fewer, c.more) for c in found] == [(held, train)]


def test_a_group_of_several_releases_gets_a_row_per_release():
    """One stack replays every release of an engine; where a (GPU, engine, model) group mixes them, the table and
    the JSON say how each release reads (the H100 sample's gpt-oss-120b rows: vLLM 0.18.0, 0.11.2, not recorded)."""
    from sim.apps.serve.validate import mape

    runs = [FEW, dataclasses.replace(MANY, version="0.11.2"), dataclasses.replace(MANY, name="x", version=None)]
    results = [Result(r, dict(r.measured), {"tpot_s": e}) for r, e in zip(runs, (0.1, 0.5, -0.3))]
    row = mape(results)[("h100_sxm", "vllm", "gpt-oss-120b")]
    assert row["tpot_s"] == pytest.approx(0.3)
    assert {v: (s["runs"], s["tpot_s"]) for v, s in row["by_release"].items()} == {
        "0.11.2": (1, pytest.approx(0.5)), "0.18.0": (1, pytest.approx(0.1)), "not recorded": (1, pytest.approx(0.3))}
    text = render(results, [], [], 1.0, per_run=False)
    assert "| | | release 0.11.2 | 1 | - | 50.0% | - | - |" in text
    assert "by_release" not in mape(results[:1])[("h100_sxm", "vllm", "gpt-oss-120b")]


def test_a_release_column_of_numbers_is_read_as_text(tmp_path):
    """A table whose releases all look like numbers (1.10, 1.9) keeps them as written, not as floats (1.1), and a row
    without one has none."""
    from sim.apps.serve.validate_readers import read_silicon

    row = dict(id="a", backend="vllm", model_path="Qwen/Qwen3-32B", system="h100_sxm", mode="agg", isl=1024, osl=101,
               batch_size=8, tp_size=2, pp_size=1, attention_dp_size=None, silicon_ttft_ms=100.0, silicon_tpot_ms=12.0)
    path = tmp_path / "s.csv"
    pd.DataFrame([dict(row, backend_version="1.10"), dict(row, id="b", backend_version="1.9", silicon_tpot_ms=12.5),
                  dict(row, id="c", batch_size=16, backend_version=None)]).to_csv(path, index=False)
    runs, _ = read_silicon(path, {"h100_sxm"})
    assert {r.name: r.version for r in runs} == {"a": "1.10", "b": "1.9", "c": None}


def test_a_run_held_under_half_of_its_replay_s_decoding_is_noted():
    """Little's law on the measured and the simulated means: 10 clients, measured TTFT 1.5 of a 2.0 s request
    (10 x 0.5 / 2 = 2.5 decoding), simulated TTFT 0.5 of 2.0 s (7.5 decoding): 2.5 < 0.5 x 7.5, so the summary notes
    one held-back row and --json gives both counts; a replay that decodes 4.9 (2.5 >= 0.5 x 4.9) is no such row, and
    an open-loop run has no count."""
    from sim.apps.serve.validate_cli import as_json
    from sim.apps.serve.validate_consistency import decoding

    run = dataclasses.replace(closed("a", 10, 1.5, 0.005), measured={"ttft_s": 1.5, "tpot_s": 0.005, "e2e_s": 2.0})
    held = Result(run, {"ttft_s": 0.5, "tpot_s": 0.015, "e2e_s": 2.0}, {})
    assert decoding(held) == {"measured": pytest.approx(2.5), "simulated": pytest.approx(7.5)}
    text = render([held], [], [], 1.0, per_run=False)
    assert "; 1 replayed row decoded under 50% of the requests the replay did (Little's law on both;" in text
    assert as_json("h100_sxm", [held], [], [])["runs"][0]["decoding"]["measured"] == pytest.approx(2.5)
    near = Result(run, {"ttft_s": 1.02, "tpot_s": 0.015, "e2e_s": 2.0}, {})   # 10 x 0.98 / 2 = 4.9
    assert "decoded under" not in render([near], [], [], 1.0, per_run=False)
    assert decoding(Result(dataclasses.replace(run, rate=4.0), held.sim, {})) is None

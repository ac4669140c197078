"""The consistency check of measured closed-loop runs (sim.apps.serve.validate_consistency): Little's law by hand,
the pairs it flags, and the summary line `sim validate-serving` adds."""

from __future__ import annotations

import dataclasses

import pytest

from sim.apps.serve.validate import Result, Run, render
from sim.apps.serve.validate_consistency import MARGIN, contradictions, flagged, load


def closed(name: str, n: int, ttft_s: float, tpot_s: float, osl: int = 101, **kw) -> Run:
    """A closed-loop run whose E2E is TTFT + TPOT x (osl - 1), as the silicon sample's."""
    return Run(name, "h100_sxm", "vllm", "openai/gpt-oss-120b", 1024, osl, n, tp=2,
               measured={"ttft_s": ttft_s, "tpot_s": tpot_s, "e2e_s": ttft_s + tpot_s * (osl - 1)}, **kw)


def test_littles_law_by_hand():
    # 10 clients, 0.5 s to the first token of a 2.0 s request: 10 x 1.5 / 2 = 7.5 decoding, 10 / 2 = 5 admitted a second
    run = closed("a", 10, 0.5, 0.015)
    n_dec, rate = load(run)
    assert n_dec == pytest.approx(7.5)
    assert rate == pytest.approx(5.0)


def test_no_load_without_a_closed_loop_or_its_means():
    assert load(dataclasses.replace(closed("a", 10, 0.5, 0.015), rate=4.0)) is None   # open loop
    assert load(closed("a", 10, 0.5, 0.015, osl=1)) is None                           # no decode
    run = closed("a", 10, 0.5, 0.015)
    assert load(dataclasses.replace(run, measured={"ttft_s": 0.5, "tpot_s": 0.015})) is None   # no E2E


def test_fewer_decoding_yet_slower_contradicts():
    # 8 clients: 0.1 s + 100 x 12 ms = 1.3 s, ~7.4 decoding, 6.2/s; 64 clients: 0.2 s + 100 x 6 ms = 0.8 s,
    # ~48 decoding, 80/s: the 8-client run does less of both, yet its TPOT is 2x the 64-client run's
    few, many = closed("few", 8, 0.1, 0.012), closed("many", 64, 0.2, 0.006)
    found = contradictions([many, few])
    assert [(c.fewer, c.more) for c in found] == [("few", "many")]
    assert flagged(found) == {"few", "many"}
    assert "8 clients decode ~7 requests at 12.00 ms" in found[0].why


def test_within_the_margin_or_another_setup_no_contradiction():
    few, many = closed("few", 8, 0.1, 0.006 * MARGIN * 0.99), closed("many", 64, 0.2, 0.006)
    assert contradictions([few, many]) == []                    # under MARGIN x
    slow = closed("few", 8, 0.1, 0.012)
    assert contradictions([slow, dataclasses.replace(many, tp=4)]) == []   # another layout: not comparable
    assert contradictions([slow, dataclasses.replace(many, osl=201)]) == []  # other lengths


def test_fewer_decoding_at_a_longer_tpot_admits_fewer():
    # n_dec = X x TPOT x (osl - 1) at one osl: the run the check calls `fewer` does less of both kinds of work
    few, many = closed("few", 8, 0.1, 0.012), closed("many", 64, 0.2, 0.006)
    (n_few, x_few), (n_many, x_many) = load(few), load(many)
    for n, x, run in ((n_few, x_few, few), (n_many, x_many, many)):
        assert n == pytest.approx(x * run.measured["tpot_s"] * (run.osl - 1))
    assert x_few < x_many


def test_render_adds_the_mape_without_contradicted_rows():
    few, many, other = closed("few", 8, 0.1, 0.012), closed("many", 64, 0.2, 0.006), closed("other", 16, 0.1, 0.008)
    results = [Result(r, dict(r.measured), {"ttft_s": e, "tpot_s": e, "e2e_s": e})
               for r, e in ((few, 0.5), (many, 0.3), (other, 0.1))]
    text = render(results, [], [], 1.0, per_run=False, found=contradictions([few, many, other]))
    assert "| all | | | 3 | 30.0% | 30.0% | 30.0% | - |" in text
    assert "| all but contradicted rows | | | 1 | 10.0% | 10.0% | 10.0% | - |" in text
    assert "2 replayed rows contradict" in text
    plain = render(results, [], [], 1.0, per_run=False)
    assert "contradict" not in plain


def test_json_lists_the_pairs_and_the_figure_without_them():
    from sim.apps.serve.validate_cli import as_json

    few, many, other = closed("few", 8, 0.1, 0.012), closed("many", 64, 0.2, 0.006), closed("other", 16, 0.1, 0.008)
    results = [Result(r, dict(r.measured), {"ttft_s": e, "tpot_s": e, "e2e_s": e})
               for r, e in ((few, 0.5), (many, 0.3), (other, 0.1))]
    d = as_json("h100_sxm", results, [], [], contradictions([few, many, other]))
    assert d["overall"]["runs"] == 3 and d["overall"]["tpot_s"] == pytest.approx(0.3)
    assert d["overall_uncontradicted"]["runs"] == 1 and d["overall_uncontradicted"]["tpot_s"] == pytest.approx(0.1)
    assert [(c["fewer"], c["more"]) for c in d["contradictions"]] == [("few", "many")]
    assert as_json("h100_sxm", results, [], [])["contradictions"] == []

"""--find-capacity reports goodput and capacity over one stated window (issue 30): the capacity run's
span, so goodput x window is the count of requests within the SLO, and within_slo their share."""

import pytest

from hw_models.machine import load_machine
from sim.apps.serve.capacity import find_capacity
from sim.apps.serve.spec import ServeFile
from sim.core.schema import validate_mapping


def test_goodput_and_capacity_share_one_window():
    serving = dict(arrivals=dict(process="poisson", rate=20.0, num_requests=80, seed=5),
                   lengths=dict(prompt=dict(dist="uniform", low=16, high=200),
                                output=dict(dist="uniform", low=4, high=40)),
                   scheduler=dict(kind="vllm", max_num_batched_tokens=256, max_num_seqs=8),
                   slo=dict(ttft_p90=0.05))
    f = validate_mapping(ServeFile, dict(name="c", model="tinyllama-1.1b", serving=serving), "c.yaml", "a serving file")
    cap = find_capacity(f, load_machine("a6000"), dict(f.serving.slo), bisections=3)
    s = cap["summary"]
    assert cap["window_s"] == s["duration_s"] > 0
    good = round(cap["goodput_req_s"] * cap["window_s"])          # requests within the SLO, a count
    assert cap["goodput_req_s"] * cap["window_s"] == pytest.approx(good, abs=1e-9)
    assert cap["within_slo"] == pytest.approx(good / s["completed"], rel=1e-12)
    assert 0.9 <= cap["within_slo"] <= 1.0        # p90 met: at least 90% of requests within the TTFT limit
    # 80 arrivals at the capacity rate span about 79 / rate seconds; the run's window adds the drain.
    assert cap["arrival_window_s"] == pytest.approx(79 / cap["rate"])
    assert cap["window_s"] > 0.5 * cap["arrival_window_s"]


def test_the_capacity_report_gives_goodput_per_device_and_per_list_price():
    """A planner compares plans and presets per device and per dollar: 13.42 requests/s of goodput on a TP 2 plan
    of $30,000 GPUs is 6.71 a device and 13.42 / 60 = 0.224 per $1,000; one device of no listed price says nothing."""
    from sim.apps.serve.report import _per_device, plan_price

    s = {"energy": {"devices": 2}}
    h100, a100, b200 = (load_machine(p) for p in ("h100_sxm", "a100_80g", "b200"))
    assert h100.price_usd == 30000.0 and a100.price_usd == 15000.0 and b200.price_usd is None
    assert _per_device(s, 13.42, plan_price([("", h100, 2)])) == (
        "6.71 requests/s a device (2 of them); 0.224 per $1,000 of list price (2 x $30,000)")
    # a preset without a price is said, not dropped (a capacity planner's trial read nothing for b200 and l40s)
    assert _per_device(s, 13.42, plan_price([("", b200, 2)])) == (
        "6.71 requests/s a device (2 of them); no per-$1,000 figure: b200 lists no price_usd")
    # pools of different presets (a trial's disaggregated search showed no cost): 1 x $30,000 + 2 x $15,000
    pools = plan_price([("prefill", h100, 1), ("decode", a100, 2)])
    assert pools == (60000.0, "prefill 1 x $30,000 + decode 2 x $15,000")
    assert _per_device({"energy": {"devices": 3}}, 33.35, pools).endswith(
        "0.556 per $1,000 of list price (prefill 1 x $30,000 + decode 2 x $15,000)")


def test_an_slo_no_rate_meets_names_the_lowest_rate_run():
    """The error names the lowest rate the search ran, not one it never ran (the last halving had halved it once
    more: "rate 0.000305/s ... not met even at 0.000153 requests/s", a code review)."""
    from sim.core.errors import ConfigError

    serving = dict(arrivals=dict(process="poisson", rate=1.0, num_requests=8, seed=5),
                   lengths=dict(prompt=dict(dist="fixed", value=64), output=dict(dist="fixed", value=4)),
                   scheduler=dict(kind="vllm"), slo=dict(ttft_p90=1e-6))
    f = validate_mapping(ServeFile, dict(name="c", model="tinyllama-1.1b", serving=serving), "c.yaml", "a serving file")
    rates: list[float] = []
    with pytest.raises(ConfigError, match="not met even at") as err:
        find_capacity(f, load_machine("a6000"), dict(f.serving.slo), bisections=2, on_point=lambda r, s: rates.append(r))
    assert f"not met even at {min(rates):.3g} requests/s" in str(err.value)


def test_an_slo_the_load_does_not_move_stops_halving_and_says_so():
    """A capacity planner's trial: a 70B TP2 plan whose lone request misses TPOT p90 halved its rate twelve times, to
    0.0003 requests/s, and said only "not met even at 0.000305 requests/s". A TPOT limit below one lone decode step
    fails by the same ratio at every load: the search stops after two such steps and names the SLO and its ratio."""
    from sim.core.errors import ConfigError

    serving = dict(arrivals=dict(process="poisson", rate=1.0, num_requests=8, seed=5),
                   lengths=dict(prompt=dict(dist="fixed", value=64), output=dict(dist="fixed", value=8)),
                   scheduler=dict(kind="vllm"), slo=dict(tpot_p90=1e-4))
    f = validate_mapping(ServeFile, dict(name="c", model="tinyllama-1.1b", serving=serving), "c.yaml", "a serving file")
    rates: list[float] = []
    with pytest.raises(ConfigError) as err:
        find_capacity(f, load_machine("a6000"), dict(f.serving.slo), on_point=lambda r, s, ok: rates.append(r))
    assert len(rates) <= 3   # 1, 0.5 (and 0.25 where the first two differ): not sixteen halvings
    msg = str(err.value)
    assert f"not met even at {min(rates):.3g} requests/s: tpot_p90 at " in msg
    assert msg.endswith("halving the load no longer moves it: no load meets it")

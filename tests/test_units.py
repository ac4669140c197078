"""The one unit parser: decimal and binary prefixes explicit, SI base units out."""

import pytest

from sim.core.units import fmt_percent, parse_quantity


@pytest.mark.parametrize("text,value", [
    ("3.35 TB/s", 3.35e12), ("768 GB/s", 768e9), ("80 GiB", 80 * 2**30), ("48 GB", 48e9),
    ("5 us", 5e-6), ("0.5 ns", 0.5e-9), ("154.8 TFLOP/s", 154.8e12), ("16 Gb/s", 2e9),
    ("1.2 TFLOPS", 1.2e12), ("300 MHz", 300e6), ("230 MB", 230e6), ("220 MiB", 220 * 2**20),
    ("7 pJ/b", 56e-12), (42, 42.0), ("1e3", 1000.0),
])
def test_table(text, value):
    assert parse_quantity(text) == pytest.approx(value)


def test_errors_and_dimensions():
    for bad in ("fast", "3 parsecs", "TB/s", True, None):
        with pytest.raises(ValueError):
            parse_quantity(bad)
    with pytest.raises(ValueError, match="expected bytes/s"):
        parse_quantity("80 GiB", expect="bytes/s")


def test_whole_percents_add_up_to_100():
    from sim.core.units import whole_percents

    # Largest remainder: 33.33/33.33/33.34 floor to 33 each, the unit left over goes to the largest remainder.
    assert whole_percents([0.3333, 0.3333, 0.3334]) == ["33", "33", "34"]
    assert whole_percents([0.3333, 0.3333, 0.3334], 1) == ["33.3", "33.3", "33.4"]
    assert whole_percents([1 / 3] * 3) == ["34", "33", "33"]          # a tie: the first
    assert whole_percents([0.166, 0.834, 0.0]) == ["17", "83", "0"]
    assert whole_percents([0.29, 0.71, 0.0]) == ["29", "71", "0"]     # 0.29 x 100 is 28.999999999999996
    assert whole_percents([0.2, 0.8, 0.0], 1) == ["20.0", "80.0", "0.0"]
    assert whole_percents([0.5, 0.3]) == ["50", "30"]                 # less than a whole keeps its total


@pytest.mark.parametrize("fraction, text", [(0.5, "50%"), (1.0, "100%"), (0.0, "0%"), (0.0003, "0.03%"),
                                            (0.00994, "0.99%"), (0.00996, "1%"), (0.0000123, "0.0012%")])
def test_a_nonzero_share_never_reads_zero_percent(fraction, text):
    """A Groq run's chips were 0.03% busy and the report said 0%."""
    assert fmt_percent(fraction) == text


def test_fmt_rate_keeps_three_digits_below_100():
    """A rate to one decimal from 100 up, three significant digits below: an offloaded OPT-175B run's 0.053 tokens/s
    read "0.1" and a 0.269 one "0.3" (a trial's finding)."""
    from sim.core.units import fmt_rate
    assert [fmt_rate(x) for x in (0.0532, 0.269, 8.49, 21.44, 177.64, 12345.67, 0.0)] == [
        "0.0532", "0.269", "8.49", "21.4", "177.6", "12,345.7", "0.0"]


def test_an_absurd_byte_count_reads_in_powers_of_ten():
    """`--set batch=99999999999999999999` printed 'needs 111149056000000000.00 TB' (a trial)."""
    from sim.core.units import fmt_bytes

    assert fmt_bytes(1.11149056e29) == "1.11e+17 TB"
    assert fmt_bytes(5e17) == "500000.00 TB" and fmt_bytes(2e12) == "2.00 TB"

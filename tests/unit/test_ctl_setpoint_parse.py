"""`xtc ctl`'s setpoint argument: plain packets/s, or a decimal number with a k or m suffix."""

from __future__ import annotations

import pytest

from xtc.daemon.cli import parse_setpoint


@pytest.mark.parametrize("text, pps", [
    ("20000", 20000.0), ("20k", 20000.0), (" 20K ", 20000.0), ("32.3k", 32300.0), ("0.1k", 100.0),
    ("1.1k", 1100.0), ("2.5m", 2_500_000.0), ("0.7m", 700_000.0), ("12345.6", 12345.6), ("1e4", 10000.0),
])
def test_the_suffix_scales_the_number_as_written(text: str, pps: float) -> None:
    # Exact: 32.3 * 1000 in binary floating point is 32299.999999999996, which the daemon would then
    # hold and report as the setpoint.
    assert parse_setpoint(text) == pps


@pytest.mark.parametrize("text", ["", "k", "20kk", "twenty", "20 k x", "--5"])
def test_not_a_number_is_refused_naming_the_argument(text: str) -> None:
    with pytest.raises(SystemExit, match="is not a number of packets/s"):
        parse_setpoint(text)

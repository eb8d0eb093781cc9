"""The tests' one polling loop (tests/procs.py: ``waited_s``, ``until``, ``wait_for``) and their repeated
real-time measurements (``measured_until_held``)."""

from __future__ import annotations

import itertools

import procs
import pytest
from procs import until, wait_for, waited_s


def test_the_first_truthy_answer_is_returned_and_the_wait_timed() -> None:
    answers = iter([0, None, "", {"vr": 1}])
    assert wait_for(lambda: next(answers), 5.0, "an answer", 0.001) == {"vr": 1}
    t = waited_s(lambda: True, 5.0)
    assert t is not None and 0 <= t < 0.5
    assert until(lambda: 1, 0.0)


def test_a_poll_whose_sleep_crosses_the_deadline_asks_once_more() -> None:
    """The answer that came true during the last sleep counts (two of the old loops gave up without asking)."""
    calls = itertools.count(1)
    assert until(lambda: next(calls) >= 2, 0.05, 0.2)
    assert next(calls) == 3  # asked twice: at the start and after the sleep, not again


def test_a_wait_that_fails_names_what_it_waited_for_and_the_last_answer() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0.05 s waiting for the daemon's welcome \(last: 0\)"):
        wait_for(lambda: 0, 0.05, "the daemon's welcome", 0.01)
    state = {"sent": 3}
    with pytest.raises(AssertionError, match=r"waiting for 3 sent, none answered \(last: \[\]\)"):
        wait_for(list, 0.02, lambda: f"{state['sent']} sent, none answered", 0.01)
    assert waited_s(lambda: False, 0.02, 0.01) is None and not until(lambda: None, 0.02, 0.01)


class _Steal:
    """A /proc/stat steal counter that moves ``per_read_ms`` at each read (monkeypatched into procs)."""

    def __init__(self, per_read_ms: float) -> None:
        self.ms, self.per_read_ms = 0.0, per_read_ms

    def __call__(self) -> float:
        self.ms += self.per_read_ms
        return self.ms


def _missing(n: int, calls: list):
    """A measurement that misses its bound ``n`` times, then holds."""

    def measure() -> str:
        calls.append(1)
        assert len(calls) > n, f"run {len(calls)} missed"
        return "held"

    return measure


def test_a_measurement_is_repeated_until_it_holds_and_the_misses_are_counted(monkeypatch, capsys) -> None:
    monkeypatch.setattr(procs, "stolen_ms", _Steal(0.0))
    calls: list = []
    assert procs.measured_until_held(_missing(2, calls), "phase 3") == "held" and len(calls) == 3
    assert capsys.readouterr().out.count("missed a bound") == 2
    calls.clear()
    with pytest.raises(AssertionError, match="run 3 missed"):
        procs.measured_until_held(_missing(5, calls), "phase 3")
    assert len(calls) == 3
    with pytest.raises(ValueError, match="at least 1"):
        procs.measured_until_held(lambda: None, "x", attempts=0)


def test_runs_that_miss_while_the_hypervisor_takes_the_cpu_do_not_count_up_to_a_limit(monkeypatch, capsys) -> None:
    # every run: a second of steal, far above 10% of the few ms a run takes here
    monkeypatch.setattr(procs, "stolen_ms", _Steal(1000.0))
    calls: list = []
    assert procs.measured_until_held(_missing(procs.STOLEN_RUNS + 2, calls), "phase 3") == "held"
    out = capsys.readouterr().out
    assert out.count("not counted") == procs.STOLEN_RUNS and out.count("measuring again") == procs.STOLEN_RUNS + 2
    calls.clear()
    with pytest.raises(AssertionError, match="missed"):  # a schedule that is wrong still fails
        procs.measured_until_held(_missing(100, calls), "phase 3")
    assert len(calls) == procs.STOLEN_RUNS + 3
    assert "3 runs missed a bound, 4 more while the hypervisor took the CPU" in capsys.readouterr().out

"""The tests' one polling loop (tests/procs.py: ``waited_s``, ``until``, ``wait_for``)."""

from __future__ import annotations

import itertools

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

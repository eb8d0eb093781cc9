"""The lab's timers of named functions in place (xtc_lab.thread_timers, policer_profile --time)."""

from __future__ import annotations

import itertools
import sys
import threading
import types

import pytest
from xtc_lab import policer_profile
from xtc_lab.thread_timers import FunctionTimers, resolve

MOD = "xtc_test_thread_timers_target"


class _Base:
    def inherited(self, x: int) -> int:
        return x + 1


@pytest.fixture
def target():
    """A module of functions to time: a function, a method, an inherited one, a static and a class method."""
    m = types.ModuleType(MOD)

    def work(x: int) -> int:
        return x * 2

    class Thing(_Base):
        def method(self, x: int) -> int:
            return x - 1

        @staticmethod
        def static(x: int) -> int:
            return x * 3

        @classmethod
        def klass(cls, x: int) -> str:
            return f"{cls.__name__}{x}"

    m.work, m.Thing, m.NOT_A_FUNCTION = work, Thing, 7
    sys.modules[MOD] = m
    yield m
    del sys.modules[MOD]


def _ticks(step_ns: int = 1000):
    """A clock that moves ``step_ns`` at each read: each timed call counts exactly one step."""
    c = itertools.count(0, step_ns)
    return lambda: next(c)


def test_calls_count_only_while_on_and_each_counts_its_thread_cpu(target) -> None:
    names = [f"{MOD}:work", f"{MOD}:Thing.method", f"{MOD}:Thing.inherited", f"{MOD}:Thing.static", f"{MOD}:Thing.klass"]
    timers = FunctionTimers(names, clock=_ticks())
    t = target.Thing()
    assert target.work(2) == 4  # off: not counted
    timers.start()
    results = [target.work(2), t.method(2), t.inherited(2), t.static(2), target.Thing.static(2), t.klass(2)]
    timers.stop()
    target.work(5)
    assert results == [4, 1, 3, 6, 6, "Thing2"]  # the functions answer as before, bound as before
    got = timers.figures(measurements=4)
    assert got[f"{MOD}:work"] == {"calls": 1, "us_per_call": 1.0, "us_per_measurement": 0.25}
    assert got[f"{MOD}:Thing.static"]["calls"] == 2
    assert [got[n]["calls"] for n in names] == [1, 1, 1, 2, 1]
    assert timers.figures(0)[f"{MOD}:work"]["us_per_measurement"] is None


def test_the_calls_of_several_threads_add_up(target) -> None:
    timers = FunctionTimers([f"{MOD}:work"])
    timers.start()
    threads = [threading.Thread(target=lambda: [target.work(k) for k in range(500)]) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    timers.stop()
    got = timers.figures(2000)[f"{MOD}:work"]
    assert got["calls"] == 2000 and got["us_per_call"] > 0


def test_restore_puts_every_function_back_as_it_was(target) -> None:
    before = {n: vars(target.Thing).get(n) for n in ("method", "static", "klass", "inherited")}
    work = target.work
    timers = FunctionTimers([f"{MOD}:work", f"{MOD}:Thing.method", f"{MOD}:Thing.static", f"{MOD}:Thing.klass",
                             f"{MOD}:Thing.inherited"])
    assert target.work is not work and "inherited" in vars(target.Thing)
    timers.restore()
    assert target.work is work
    assert {n: vars(target.Thing).get(n) for n in before} == before  # inherited: the class's own again (none)
    assert target.Thing().inherited(1) == 2


def test_a_with_block_puts_them_back_also_when_it_fails(target) -> None:
    work = target.work
    with pytest.raises(RuntimeError), FunctionTimers([f"{MOD}:work"]) as timers:
        timers.start()
        assert target.work(1) == 2 and target.work is not work
        raise RuntimeError("the run failed")
    assert target.work is work


@pytest.mark.parametrize(("name", "message"), [
    ("work", "a function is named module:function or module:Class.method"),
    (f"{MOD}:", "a function is named"),
    ("xtc_no_such_module_here:f", "module 'xtc_no_such_module_here' does not import"),
    (f"{MOD}:missing", f"{MOD} has no missing"),
    (f"{MOD}:Thing.missing", f"{MOD} has no Thing.missing"),
    (f"{MOD}:Nope.method", f"{MOD} has no Nope"),
    (f"{MOD}:NOT_A_FUNCTION", f"{MOD}:NOT_A_FUNCTION is not a function"),
])
def test_a_bad_name_is_refused_and_nothing_is_replaced(target, name, message) -> None:
    with pytest.raises(ValueError, match=message):
        resolve(name)
    work = target.work
    with pytest.raises(ValueError, match=message):
        FunctionTimers([f"{MOD}:work", name])  # the good name before it is not replaced either
    assert target.work is work


def test_the_profile_tool_refuses_a_bad_name_before_it_starts_anything(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        policer_profile.main(["--routers", "1", "--time", "xtc.policer.store:Store.no_such_step"])
    assert e.value.code == 2
    assert "--time 'xtc.policer.store:Store.no_such_step': xtc.policer.store has no Store.no_such_step" \
        in capsys.readouterr().err


def test_the_profile_windows_timers_run_from_its_first_cycle_start(target) -> None:
    """policer_profile switches the timers on once it has the window's first mark."""
    timers = FunctionTimers([f"{MOD}:work"], clock=_ticks())
    marks = iter(range(3))

    def next_mark():
        target.work(1)  # before the mark is taken: the timers are still off for the first
        return next(marks)

    marked = policer_profile._timers_on(timers, next_mark)
    assert [marked(), marked(), marked()] == [0, 1, 2]
    assert timers.figures(1)[f"{MOD}:work"]["calls"] == 2

"""The results sessions' runner (xtc_lab.alternate): the runs in order, each side's product, the log."""

from __future__ import annotations

import re
import sys

import pytest
from xtc_lab import alternate
from xtc_lab.alternate import Step


def test_the_runs_nest_in_the_order_given_the_last_fastest() -> None:
    got = alternate.steps("{side}-{db}-{mode}", ["run.py", "{side}", "{db}", "{side}-{db}-{mode}.json", "{jitter}"],
                          ["db=sqlite,pg", "mode:jitter=jitter:0.05,steady:0", "side=before,after"])
    assert [s.out for s in got] == [f"{side}-{db}-{mode}" for db in ("sqlite", "pg") for mode in ("jitter", "steady")
                                    for side in ("before", "after")]
    assert got[0] == Step("before-sqlite-jitter", ["run.py", "before", "sqlite", "before-sqlite-jitter.json", "0.05"],
                          "before")
    assert got[3].command[-1] == "0" and got[3].side == "after"


def test_rounds_repeat_the_runs_with_the_sides_turned_in_even_rounds() -> None:
    got = alternate.steps("p{round}-{side}-{db}", ["run", "{round}"], ["side=before,after", "db=a,b"], rounds=3)
    assert [s.out for s in got] == [
        "p1-before-a", "p1-before-b", "p1-after-a", "p1-after-b",
        "p2-after-a", "p2-after-b", "p2-before-a", "p2-before-b",
        "p3-before-a", "p3-before-b", "p3-after-a", "p3-after-b"]
    assert got[4] == Step("p2-after-a", ["run", "2"], "after")
    # without --rounds, {round} is a name no --each gives
    with pytest.raises(ValueError, match="round"):
        alternate.steps("p{round}", ["x"], ["side=before,after"])


def test_turn_names_the_axes_turned_in_even_rounds_instead_of_side() -> None:
    got = alternate.steps("p{round}-{impl}-{side}", ["run"], ["impl=python,c", "side=before,after"], rounds=2,
                          turn=["impl"])
    assert [s.out for s in got] == [
        "p1-python-before", "p1-python-after", "p1-c-before", "p1-c-after",
        "p2-c-before", "p2-c-after", "p2-python-before", "p2-python-after"]
    # a name in a joint axis turns the whole axis; two names, both axes
    got = alternate.steps("{round}{a}{b}{c}", ["x"], ["a:b=1:2,3:4", "c=x,y"], rounds=2, turn=["b", "c"])
    assert [s.out for s in got] == ["112x", "112y", "134x", "134y", "234y", "234x", "212y", "212x"]


@pytest.mark.parametrize(("turn", "rounds", "message"), [
    (["db"], 2, "--turn db: no --each gives it"),
    (["impl"], None, "--turn impl: only rounds turn an order; give --rounds N"),
])
def test_a_bad_turn_is_refused_and_nothing_runs(tmp_path, monkeypatch, capsys, turn, rounds, message) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [*(["--rounds", str(rounds)] if rounds else []), *(w for t in turn for w in ("--turn", t)),
            "--each", "impl=python,c", "{impl}", "--", "true"]
    assert alternate.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_rounds_below_one_are_refused_and_nothing_runs(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert alternate.main(["--rounds", "0", "--each", "side=before,after", "--before", "/t", "{side}", "--", "true"]) == 2
    assert "--rounds 0: at least 1" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_an_empty_value_and_no_side() -> None:
    got = alternate.steps("daemon{n}", ["x"], ["n=,-2"])
    assert [(s.out, s.side) for s in got] == [("daemon", None), ("daemon-2", None)]


@pytest.mark.parametrize("each,out,words", [
    (["side=before,later"], "{side}", "side is before or after, not later"),
    (["mode:jitter=jitter:0.05,steady"], "{mode}", "'steady' is not one value for each of mode, jitter"),
    (["jitter"], "x", "NAME=V1,V2"),
    (["j=1", "j=2"], "{j}", "a name given twice"),
    (["j=1"], "{k}-{j}", "{k} in OUT or COMMAND: no --each gives it"),
])
def test_bad_arguments_name_the_problem_and_run_nothing(each, out, words, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [a for e in each for a in ("--each", e)] + ["--before", "/t", out, "--", "true"]
    assert alternate.main(argv) == 2
    assert words in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_before_side_without_a_tree_is_refused(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert alternate.main(["--each", "side=before,after", "{side}", "--", "true"]) == 2
    assert "--before TREE" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_each_run_gets_its_sides_product_its_files_and_its_own_status_in_the_log(tmp_path, monkeypatch) -> None:
    """Real child processes: the before side sees the tree alone on PYTHONPATH, the after side none; the
    log says each run's own exit status (the shell scripts' said that of ``date``); one failed run does
    not stop the others and makes the exit status 1."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    child = "import os, sys; print(repr(os.environ['PYTHONPATH'])); print('to err', file=sys.stderr); sys.exit({rc})"
    rc = alternate.main(["--before", str(tmp_path / "tree"), "--each", "rc=3,0", "--each", "side=before,after",
                         "p{rc}-{side}", "--", sys.executable, "-c", child])
    assert rc == 1
    assert (tmp_path / "p3-before.json").read_text() == repr(str(tmp_path / "tree")) + "\n"
    assert (tmp_path / "p0-after.json").read_text() == "''\n"
    assert (tmp_path / "p0-after.err").read_text() == "to err\n"
    log = (tmp_path / "runs.log").read_text().splitlines()
    assert [re.sub(r"\d\d:\d\d:\d\d load \S+ \S+ \S+", "T", x) for x in log] == [
        "== p3-before T", "   done T rc=3", "== p3-after T", "   done T rc=3",
        "== p0-before T", "   done T rc=0", "== p0-after T", "   done T rc=0"]
    # The tables' scripts read each run's load at its start back from the log.
    loads = alternate.start_loads(tmp_path / "runs.log")
    assert sorted(loads) == ["p0-after", "p0-before", "p3-after", "p3-before"]
    assert all(float(v) >= 0 for v in loads.values())
    first = next(x for x in log if x.startswith("== p3-before"))
    assert loads["p3-before"] == first.split("load ")[1].split()[0]


def test_to_log_appends_the_commands_output_to_the_log(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert alternate.main(["--to-log", "--log", "r.log", "--each", "x=a,b", "o{x}", "--",
                           sys.executable, "-c", "print('{x}')"]) == 0
    assert [x for x in (tmp_path / "r.log").read_text().splitlines() if not x.startswith(("==", "   done"))] == ["a", "b"]
    assert not (tmp_path / "oa.json").exists() and (tmp_path / "oa.err").read_text() == ""

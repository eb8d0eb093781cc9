"""A results session's measurements, one after another, before/after alternated: ``python -m xtc_lab.alternate``.

    python -m xtc_lab.alternate [--before TREE] [--log FILE] [--each NAMES=VALUES ...] [--rounds N [--turn NAME ...]] [--to-log] OUT -- COMMAND ...

For each combination of the ``--each`` values (nested in the order given: the last changes fastest),
runs COMMAND once, in this folder, with ``{NAME}`` replaced by the value in OUT and in every word of
COMMAND; its standard output goes to OUT.json (with ``--to-log``: appended to the log, for a command
that writes its own OUT.json, as ``python -m xtc_lab.policer_compare`` does), its standard error to
OUT.err.  ``--each jitter=0.05,0`` gives ``{jitter}`` two values; ``--each mode:jitter=jitter:0.05,steady:0``
gives two names their values together.  A step whose ``side`` is ``before`` runs with TREE (the product
exported by ``git archive REV xtc`` and unpacked there) alone on ``PYTHONPATH``, so the child imports
that product; ``after`` runs the installed one (``PYTHONPATH`` empty).  ``--rounds N`` runs all of it N
times, ``{round}`` the round's number (1 to N), with the ``side`` values in the order given in odd rounds and
turned in even ones (before, after; then after, before), so that neither side always runs first; ``--turn NAME``
turns NAME's values instead (given again, several names; ``side`` then only if named).  The log (default runs.log) gets
``== OUT HH:MM:SS load L1 L5 L15`` before each run and ``   done HH:MM:SS load L1 L5 L15 rc=N`` after it:
contention inflates CPU times, so only runs made close together compare and the load is on record.

Every step runs even when one fails; exits 1 if any did, 2 for bad arguments (nothing run).  The
docs/results/2026-11-27-policer-* sessions' shell scripts call it; each names the commit of the script
as it ran (whose ``rc=`` was always 0: it printed the status of ``date``, not of the run).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import string
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Step", "main", "run_steps", "start_loads", "steps"]

SIDES = ("before", "after")


@dataclass(frozen=True)
class Step:
    """One run: its output name, its command, and the product it imports (``side``, or None)."""

    out: str
    command: list[str]
    side: str | None


def parse_each(spec: str) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """``"a:b=1:2,3:4"`` -> ``(("a", "b"), [("1", "2"), ("3", "4")])``; ValueError naming what is wrong."""
    names_text, sep, values_text = spec.partition("=")
    names = tuple(names_text.split(":"))
    if not sep or not all(n.isidentifier() for n in names):
        raise ValueError(f"--each {spec!r}: NAME=V1,V2 or NAME1:NAME2=V1:W1,V2:W2")
    values = [tuple(v.split(":")) if len(names) > 1 else (v,) for v in values_text.split(",")]
    for v in values:
        if len(v) != len(names):
            raise ValueError(f"--each {spec!r}: {':'.join(v)!r} is not one value for each of {', '.join(names)}")
    if "side" in names:
        bad = {v[names.index("side")] for v in values} - set(SIDES)
        if bad:
            raise ValueError(f"--each {spec!r}: side is before or after, not {', '.join(sorted(bad))}")
    return names, values


def _fields(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}


def steps(out: str, command: Sequence[str], each: Sequence[str], rounds: int | None = None,
          turn: Sequence[str] = ()) -> list[Step]:
    """The runs, in order: every combination of the ``each`` specs (:func:`parse_each`), the last fastest;
    with ``rounds``, all of them that many times, ``{round}`` given, the values of the axes named in ``turn``
    (none named: ``side``'s) turned in even rounds.

    Raises ValueError naming a ``{NAME}`` that no ``--each`` gives, a name given twice, rounds below 1, or a
    ``turn`` name that no ``--each`` gives or without rounds."""
    axes = [parse_each(s) for s in each]
    names = [n for ns, _ in axes for n in ns]
    if turn and rounds is None:
        raise ValueError(f"--turn {' '.join(turn)}: only rounds turn an order; give --rounds N")
    if set(turn) - set(names):
        raise ValueError(f"--turn {', '.join(sorted(set(turn) - set(names)))}: no --each gives it")
    if rounds is not None:
        if rounds < 1:
            raise ValueError(f"--rounds {rounds}: at least 1")
        names.append("round")
    if len(set(names)) != len(names):
        raise ValueError(f"--each: a name given twice among {', '.join(names)}")
    missing = set().union(*(_fields(t) for t in (out, *command))) - set(names)
    if missing:
        raise ValueError(f"{{{', '.join(sorted(missing))}}} in OUT or COMMAND: no --each gives it")
    turning = set(turn or ("side",))
    result = []
    for k in range(1, (rounds or 1) + 1):
        turned = [(ns, vs[::-1] if k % 2 == 0 and turning & set(ns) else vs) for ns, vs in axes]
        for combo in itertools.product(*(values for _, values in turned)):
            env = {n: v for (ns, _), vs in zip(turned, combo) for n, v in zip(ns, vs)}
            if rounds is not None:
                env["round"] = str(k)
            result.append(Step(out.format(**env), [w.format(**env) for w in command], env.get("side")))
    return result


def _stamp() -> str:
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return f"{time.strftime('%H:%M:%S', time.gmtime())} load {load}"


def start_loads(log: Path) -> dict[str, str]:
    """Each run's 1-minute load average at its start, by its OUT name, from a log :func:`run_steps` wrote (a
    run made twice: its last start)."""
    out = {}
    for line in log.read_text().splitlines():
        m = re.match(r"== (\S+) \S+ load (\S+)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def run_steps(todo: Sequence[Step], before_tree: str | None, log: Path, to_log: bool = False) -> Iterator[int]:
    """Runs each step in turn, in the current folder; yields each one's exit status."""
    for step in todo:
        env = dict(os.environ, PYTHONPATH=before_tree if step.side == "before" and before_tree else "")
        with log.open("a") as f:
            f.write(f"== {step.out} {_stamp()}\n")
        with (log.open("a") if to_log else open(f"{step.out}.json", "w")) as out, open(f"{step.out}.err", "w") as err:
            rc = subprocess.run(step.command, stdout=out, stderr=err, env=env, check=False).returncode
        with log.open("a") as f:
            f.write(f"   done {_stamp()} rc={rc}\n")
        yield rc


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[args.index("--") + 1 :] if "--" in args else []
    p = argparse.ArgumentParser(prog="python -m xtc_lab.alternate", description=__doc__.split("\n\n")[0])
    p.add_argument("--before", metavar="TREE", help="the product to import on the before side")
    p.add_argument("--log", type=Path, default=Path("runs.log"))
    p.add_argument("--each", action="append", default=[], metavar="NAMES=VALUES")
    p.add_argument("--rounds", type=int, default=None, metavar="N",
                   help="all of it N times, {round} the round, the side values turned in even rounds")
    p.add_argument("--turn", action="append", default=[], metavar="NAME",
                   help="with --rounds, turn NAME's values in even rounds instead of side's (given again: several)")
    p.add_argument("--to-log", action="store_true", help="the command's standard output to the log, not OUT.json")
    p.add_argument("out", metavar="OUT")
    ns = p.parse_args(args[: args.index("--")] if "--" in args else args)
    try:
        if not command:
            raise ValueError("no COMMAND after --")
        todo = steps(ns.out, command, ns.each, ns.rounds, ns.turn)
        if ns.before is None and any(s.side == "before" for s in todo):
            raise ValueError("a step on the before side needs --before TREE")
    except ValueError as e:
        print(f"xtc_lab.alternate: {e}", file=sys.stderr)
        return 2
    failed = sum(rc != 0 for rc in run_steps(todo, ns.before, ns.log, ns.to_log))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

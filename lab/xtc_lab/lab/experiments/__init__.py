"""The paper's experiments on the host lab: ``xtc lab run NAME``.

Each experiment is a module here with:

* ``TITLE`` (one line) and ``PAPER`` (the figures/tables of xtc-paper.txt it reruns);
* ``KINDS`` (optional): the VR kinds it runs on (``xtc lab run --kind``; default ``("lxc",)``);
  it reads the chosen one from ``ctx.kind``;
* ``add_arguments(parser)`` (optional) for its own options;
* ``run(ctx, args) -> Outcome``: builds its lab (:func:`xtc_lab.lab.harness.experiment_lab`, which
  records the lab's prefix in the result; or :func:`xtc_lab.lab.harness.lab_session`), runs the daemon
  and the traffic, and returns the result; ``xtc lab run`` writes ``NAME.json``, ``NAME.png`` and
  ``NAME.md`` (see :func:`xtc_lab.lab.harness.write_outputs`).

:data:`EXPERIMENTS` maps each name to its module path (imported on use).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

#: name -> module (in the order ``xtc lab run all`` runs them).
EXPERIMENTS: dict[str, str] = {
    "capsweep": "xtc_lab.lab.experiments.capsweep",
    "tracking": "xtc_lab.lab.experiments.tracking",
    "hog": "xtc_lab.lab.experiments.hog",
    "rtt": "xtc_lab.lab.experiments.rtt",
    "sixvr": "xtc_lab.lab.experiments.sixvr",
    "tcpudp": "xtc_lab.lab.experiments.tcpudp",
    "fairness": "xtc_lab.lab.experiments.fairness",
    "multihop": "xtc_lab.lab.experiments.multihop",
}


@dataclass
class Goal:
    """A goal of the issue/paper and whether the lab met it (``measured`` in words, with units)."""

    goal: str
    measured: str
    met: bool


@dataclass
class Outcome:
    """What an experiment returns.

    ``result`` is JSON-able (written as NAME.json); ``report_md`` the markdown report (the plot
    link is appended); ``plot(path)`` draws NAME.png; ``goals`` are also listed in the report.
    """

    result: dict[str, Any]
    report_md: str
    plot: Callable[[Path], None] | None = None
    goals: list[Goal] = field(default_factory=list)


def available() -> dict[str, ModuleType]:
    """The experiment modules that exist (a module not written yet is left out)."""
    out = {}
    for name, mod in EXPERIMENTS.items():
        try:
            out[name] = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
    return out

"""The paper's testbed experiments on the XCo lab (``xtc xco lab run NAME``).

Each experiment module has ``NAME``, ``TITLE``, ``PAPER`` (the figures it reruns), ``TOPOLOGY`` (a
built-in topology of :mod:`xtc_lab.xco.testbed`) and ``run(ctx) -> (result, figure, markdown)``.
:func:`run_experiment` builds a fresh lab for it (its own ``xco-xxxx`` prefix), starts XCo as
``mode`` asks (:func:`start_xco`), runs it, removes the lab whatever happens, and writes
``NAME[-MODE].json``, ``.png`` and ``.md`` into the output directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from xtc_lab.lab.harness import host_description
from xtc_lab.lab.netlab import LabError
from xtc_lab.xco.testbed import (
    DEFAULT_PORT_BUFFER_BYTES,
    DEFAULT_SCALE,
    Testbed,
    build_lab,
    remove_lab,
    resolve_topology,
)

__all__ = ["EXPERIMENTS", "MODES", "Context", "XcoUnavailable", "available", "check_mode", "run_experiment", "start_xco"]

MODES = ("none", "timeslice", "rate")
MEASURE_LOCK = Path("/run/xtc/xco-lab-measure.lock")  # one measurement on the host at a time
EXPERIMENTS = {
    "fig15": "xtc_lab.xco.experiments.senders",
    "fig18": "xtc_lab.xco.experiments.ping",
    "incast": "xtc_lab.xco.experiments.incast",
}


def available() -> dict[str, ModuleType]:
    return {n: importlib.import_module(m) for n, m in EXPERIMENTS.items()}


class XcoUnavailable(LabError):
    """The mode needs the XCo agent, which this tree does not have yet."""


@dataclass
class Context:
    """What an experiment gets: the lab, the options, and a logger."""

    tb: Testbed
    quick: bool
    mode: str
    say: Callable[[str], None]
    params: dict[str, Any] = field(default_factory=dict)


@contextlib.contextmanager
def start_xco(tb: Testbed, mode: str, slice_us: int = 10_000) -> Iterator[dict[str, Any]]:
    """Run the experiment body under XCo in ``mode``; yields what was started (for the report).

    ``none``: nothing (the baseline).  ``timeslice`` / ``rate``: the hook where the controller
    (``xtc xco controller -c FILE``, one process, reachable over the lab's network) and one agent per
    host namespace on its uplink ``<p>-up`` (``xtc xco agent -c FILE``, started with
    :meth:`Testbed.spawn` in ``record["hosts"][h]["ns"]``) are started, and stopped on exit.  Until
    the agent exists this raises :class:`XcoUnavailable`.
    """
    check_mode(mode)
    if mode == "none":
        yield {"mode": "none"}
        return
    raise XcoUnavailable(f"mode {mode!r}: starting the controller and the agents is not wired in yet")


def check_mode(mode: str) -> None:
    """Raise if ``mode`` cannot run here (before any lab is built)."""
    if mode not in MODES:
        raise LabError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
    if mode == "none":
        return
    try:
        importlib.import_module("xtc.xco.agent")
    except ModuleNotFoundError:
        raise XcoUnavailable(f"mode {mode!r} needs the XCo agent (xtc xco agent), which is not built yet; "
                             "only --mode none runs") from None


def _busy(lock: Any) -> bool:
    """True if another process holds the measurement lock (then the caller waits for it)."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(lock, fcntl.LOCK_UN)
    return False


def run_experiment(name: str, out: Path, quick: bool = False, mode: str = "none", scale: float = DEFAULT_SCALE,
                   port_buffer_bytes: int = DEFAULT_PORT_BUFFER_BYTES, command: str = "",
                   say: Callable[[str], None] = print) -> dict[str, Path]:
    """Build the experiment's lab, run it, remove the lab, write JSON, PNG and markdown; return the paths."""
    import matplotlib

    matplotlib.use("Agg")
    mod = available()[name]
    check_mode(mode)
    topo, _data, source = resolve_topology(mod.TOPOLOGY)
    lab_name = f"run-{name}-{os.getpid()}"
    MEASURE_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(MEASURE_LOCK, "w") as lock:
        if _busy(lock):
            say(f"{name}: waiting for another measurement on this host ({MEASURE_LOCK}) ...")
        fcntl.flock(lock, fcntl.LOCK_EX)
        host = host_description()
        t0 = time.monotonic()
        say(f"{name}: building {mod.TOPOLOGY} at scale {scale} ...")
        record = build_lab(topo, lab_name, source, scale=scale, port_buffer_bytes=port_buffer_bytes)
        tb = Testbed(record)
        try:
            with start_xco(tb, mode) as xco:
                ctx = Context(tb=tb, quick=quick, mode=mode, say=say)
                result, fig, md = mod.run(ctx)
        finally:
            tb.stop_all()
            remove_lab(lab_name)
    took = time.monotonic() - t0
    result.update({"experiment": name, "title": mod.TITLE, "paper": mod.PAPER, "mode": mode, "quick": quick,
                   "scale": scale, "topology": mod.TOPOLOGY, "lab_prefix": record["prefix"], "port_buffer_bytes": port_buffer_bytes,
                   "xco": xco, "command": command, "host": host, "duration_s": round(took, 1)})
    out.mkdir(parents=True, exist_ok=True)
    stem = name if mode == "none" else f"{name}-{mode}"
    if quick:
        stem += "-quick"
    paths = {"json": out / f"{stem}.json", "png": out / f"{stem}.png", "md": out / f"{stem}.md"}
    paths["json"].write_text(json.dumps(result, indent=1) + "\n")
    fig.savefig(paths["png"], dpi=110, bbox_inches="tight")
    header = (f"# {mod.TITLE} ({mod.PAPER}), mode {mode}{' (quick)' if quick else ''}\n\n"
              f"Scale {scale}: every rate is the paper's times {scale} (a 1 Gb/s link is "
              f"{scale * 1000:g} Mb/s here); switch buffers stay in bytes ({port_buffer_bytes} per host port). "
              f"Topology `{mod.TOPOLOGY}`.\n\n")
    footer = (f"\n\n![{stem}]({stem}.png)\n\nCommand: `{command}`; host: {host['cpus']} CPUs ({host['cpu_model']}), "
              f"kernel {host['kernel']}, load {host['load_avg_1m']} at the start; took {took:.0f} s.\n")
    paths["md"].write_text(header + md.strip() + footer)
    return paths

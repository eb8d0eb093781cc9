"""The paper's testbed experiments on the XCo lab (``xtc xco lab run NAME``).

Each experiment module has ``NAME``, ``TITLE``, ``PAPER`` (the figures it reruns), ``TOPOLOGY`` (a
built-in topology of :mod:`xtc_lab.xco.testbed`) and ``run(ctx) -> (result, figure, markdown)``, and
may have ``SCALE`` (its own default scale) and ``AGENT_HOSTS`` (the hosts that run an agent, see
:func:`start_xco`).
:func:`run_experiment` builds a fresh lab for it (its own ``xco-xxxx`` prefix), starts XCo as
``mode`` asks (:func:`start_xco`), runs it, removes the lab whatever happens, and writes
``NAME[-MODE].json``, ``.png`` and ``.md`` into the output directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from xtc.xco.scheduler.rate import MAX_LINK_FRACTION
from xtc_lab.lab.harness import host_description
from xtc_lab.lab.netlab import LabError
from xtc_lab.xco.testbed import (
    BUILTIN,
    DEFAULT_PORT_BUFFER_BYTES,
    DEFAULT_SCALE,
    Testbed,
    build_lab,
    remove_lab,
    resolve_topology,
)

log = logging.getLogger(__name__)

__all__ = ["EXPERIMENTS", "MODES", "Context", "XcoUnavailable", "available", "check_mode", "label_axes", "mix_figure", "run_experiment",
           "start_xco"]

MODES = ("none", "timeslice", "rate")
MEASURE_LOCK = Path("/run/xtc/xco-lab-measure.lock")  # one measurement on the host at a time
EXPERIMENTS = {
    "fig15": "xtc_lab.xco.experiments.senders",
    "fig16": "xtc_lab.xco.experiments.uplink",
    "fig17": "xtc_lab.xco.experiments.mice",
    "fig18": "xtc_lab.xco.experiments.ping",
    "incast": "xtc_lab.xco.experiments.incast",
    "fig20": "xtc_lab.xco.experiments.fairness",
    "fig21": "xtc_lab.xco.experiments.workcons",
    "fig22": "xtc_lab.xco.experiments.alternate",
    "fig19": "xtc_lab.xco.experiments.migration",
    "fig23": "xtc_lab.xco.experiments.simcheck",
    "fig24": "xtc_lab.xco.experiments.simcheck_uplink",
    "fig25": "xtc_lab.xco.experiments.simcheck_mix",
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
    #: What :func:`start_xco` started (``workdir`` holds the agents' logs ``agent-HOST.log``).
    xco: dict[str, Any] = field(default_factory=dict)


def label_axes(ax: Any, ctx: Context, paper: str, xlabel: str, ylabel: str) -> None:
    """The axis labels, the legend and the title of an experiment's figure: the paper's figures it
    reruns, the mode and the testbed's scale."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{paper}, mode {ctx.mode}, scale {ctx.tb.scale}")
    ax.legend(fontsize=8)


def mix_figure(ctx: Context, rows: list[dict[str, Any]], rate_bps: int, paper: str, n_senders: int,
               link_label: str) -> Any:
    """The figure of a TCP/UDP mix experiment (Figures 15 and 16): total goodput, the bottleneck's
    use and the per-flow TCP goodput against the number of UDP senders, Mb/s, the bottleneck's
    rate as a line."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = [r["n_udp"] for r in rows]
    ax.plot(xs, [r["goodput_bps"] / 1e6 for r in rows], "o-", label="total goodput")
    ax.plot(xs, [r["switch_port"]["utilisation"] * rate_bps / 1e6 for r in rows], "s--", label=link_label)
    ax.plot(xs, [(r["tcp_per_flow_bps"] or 0) / 1e6 for r in rows], "^-", label="per TCP flow")
    ax.axhline(rate_bps / 1e6, color="grey", lw=0.8)
    label_axes(ax, ctx, paper, f"UDP senders (of {n_senders})", "Mb/s")
    return fig


#: Slice length with XCo on this lab, microseconds.  The paper's 10 ms, not scaled: what a slice
#: costs here (a directive's trip, the netlink change, the wake frame, a loaded host's scheduling
#: delay) is absolute time, so an unscaled slice keeps the paper's overhead fraction; a slice scaled
#: to 100 ms (the same bytes per slice as the paper) would leave each of 5 senders closed for 400 ms,
#: past TCP's 200 ms minimum retransmission timeout.
SLICE_US = 10_000
#: Directives leave the controller this long before their slice (a loaded host wakes late).
LEAD_US = int(os.environ.get("XTC_XCO_LAB_LEAD_US", "1000"))
#: In rate mode directives take effect on arrival (lead 0): a rate needs no common instant with the
#: other hosts' (a rate that rises before another falls adds a few KB to a port's queue), and the
#: lead delayed every new rate by 1 ms, a third of Figure 22's gap.  ``XTC_XCO_LAB_RATE_LEAD_US``
#: overrides it, for before/after runs of the same code.
RATE_LEAD_US = int(os.environ.get("XTC_XCO_LAB_RATE_LEAD_US", "0"))
#: The gate's open burst, bytes (the agent's ``open_burst_bytes``): two full frames (a 64 KiB burst,
#: 5.2 ms of a 100 Mb/s link, measured 9.8 % switch loss with 5 TCP senders and 10 ms slices).
OPEN_BURST_BYTES = 2 * 1514
#: The agents' gates run at this fraction of the scaled NIC rate, so that the switch port (at the
#: full rate) drains what late closes and open bursts leave in it between slices.
GATE_RATE_FRACTION = 0.98
#: In rate mode the controller's rates already keep every port within its rate (the sum of the
#: rates through a link is at most its capacity), so the gates run at the NIC rate itself, as a
#: real NIC would.  ``XTC_XCO_LAB_RATE_GATE_FRACTION`` overrides it, for before/after runs.
RATE_GATE_RATE_FRACTION = float(os.environ.get("XTC_XCO_LAB_RATE_GATE_FRACTION", "1.0"))
#: The agents read their gate's counters this often.  The agent's default (500 us) costs about
#: 0.35 ms of CPU per read: seven agents would want more than the two cores (measured: 5 fail-opens
#: in a 6 s run, switch loss 1.2 %, against none and 0.5 % at 5 ms).
POLL_US = 5_000
#: A reported destination with nothing queued this long is given up (two polls).
GIVEUP_AFTER_US = 10_000
#: The agents' quiet give-up (``giveup_quiet_us``): the slice in force is handed on as soon as the
#: counters prove its class received nothing for this long (a held queue that drained, its sender
#: stopped), without the two polls above; measured on Figure 22 (docs/results/2026-11-26-xco-testbed/xco-testbed.md).  The
#: environment's ``XTC_XCO_LAB_GIVEUP_QUIET_US`` overrides it (0: off, the rule before), for
#: before/after runs of the same code.
GIVEUP_QUIET_US = int(os.environ.get("XTC_XCO_LAB_GIVEUP_QUIET_US", "2000"))
#: The agents read their counters at least this often when idle too (``idle_poll_us``), in both
#: modes; ``XTC_XCO_LAB_IDLE_POLL_US`` overrides it (0: once a slice, as before).  An idle read is the
#: probe (one RTM_GETQDISC), not the dump that made ``POLL_US`` 5 ms; measured on Figure 22.
IDLE_POLL_US = int(os.environ.get("XTC_XCO_LAB_IDLE_POLL_US", "2000"))
#: The agents' ``slot_budget`` (timeslices: the gate holds an open destination at its slot's end
#: by itself); ``XTC_XCO_LAB_SLOT_BUDGET=0`` turns it off, for before/after runs.
SLOT_BUDGET = os.environ.get("XTC_XCO_LAB_SLOT_BUDGET", "1") != "0"
#: The agents' ``close_guard_us`` (timeslices): a directive's closes made this long before its start.
CLOSE_GUARD_US = int(os.environ.get("XTC_XCO_LAB_CLOSE_GUARD_US", "0"))
#: The agents' ``rate_burst_us`` (rate mode: a rate limit's burst, as time at its rate); 1 ms, the
#: agent's default: at 2-5 ms the incast's late stripes catch up but the switch port keeps a
#: standing queue and drops (docs/results/2026-11-26-xco-testbed/xco-testbed.md, "A rate's burst").
RATE_BURST_US = int(os.environ.get("XTC_XCO_LAB_RATE_BURST_US", "1000"))
#: The agents' ``small_flow_bytes`` (a VM pair that has sent no more than this is never held).
#: Senders that start together send this much each unheld: 5 x 100 KB (the agent's default) into
#: a port buffer of 128 KiB lost 104-122 frames at every start of Figure 15's 5 TCP senders (0.12-0.15%
#: of a 10 s run, in both modes); 5 x 20 KB lost 0-1, and Figure 17's short connections (30 KB, one
#: VM pair each sequence) did not change (docs/results/2026-11-26-xco-testbed/xco-testbed.md).  ``XTC_XCO_LAB_SMALL_FLOW_BYTES``
#: overrides it, for before/after runs.
SMALL_FLOW_BYTES = int(os.environ.get("XTC_XCO_LAB_SMALL_FLOW_BYTES", "20000"))
#: The controller and the agents run at this nice value: the paper's agent is a kernel module in
#: Dom0, and on this shared 2-core host traffic generators and other users' work otherwise hold
#: them off the CPU for tens of ms (measured: fail-opens and hosts dropped for missed heartbeats).
NICE = -10
#: The controller and the agents run under SCHED_FIFO at this priority (the agent's
#: ``realtime_priority``, the controller under ``chrt -f``), as the agent's tests do; 0: at nice
#: :data:`NICE` instead.  Under the normal scheduler, even at nice -10, an agent woke 0.2-1.4 ms late
#: for a slice boundary, and the late close let the old slice's packets out in the next sender's
#: slice: Figure 15 quick with timeslices, 5 TCP senders, 72-83% of the packets inside their slices
#: and 2.4-3.9% switch loss at nice -10, 91-93% and 0-0.07% at priority 10 (three alternated pairs,
#: docs/results/2026-11-26-xco-testbed/xco-testbed.md, "Packets inside the slices").  ``XTC_XCO_LAB_REALTIME_PRIORITY`` overrides
#: it, for before/after runs.  Rate mode: see :data:`RATE_REALTIME_PRIORITY`.
REALTIME_PRIORITY = int(os.environ.get("XTC_XCO_LAB_REALTIME_PRIORITY", "10"))
#: The same in rate mode.  It was 0 (nice :data:`NICE`) until 2026-11-24, from sums of the senders'
#: goodputs (98.4-102.2 Mb/s of 97 shared under SCHED_FIFO), a measure that counts the UDP senders'
#: queues draining after the others stopped.  At the switch port, over the steady middle of
#: Figure 18 quick at a link fraction of 0.97 beside a busy loop on one core: at nice -10, 9-15
#: fail-opens a run (the controller's answer later than 5 slices), 0.55-1.86% switch loss and ping
#: p99 3.5-10.4 ms; under SCHED_FIFO no fail-open, no loss, ping p99 0.10-0.12 ms and the port at
#: 96.7-97.3% (two runs each, then two more under SCHED_FIFO; docs/results/2026-11-26-xco-testbed/xco-testbed.md).
#: ``XTC_XCO_LAB_RATE_REALTIME_PRIORITY`` overrides it.
RATE_REALTIME_PRIORITY = int(os.environ.get("XTC_XCO_LAB_RATE_REALTIME_PRIORITY", "10"))
#: The agents at log level debug in every run (their ``directive_applied`` events, the slice grid
#: of :mod:`.timing`), not only with ``--in-slice``: ``XTC_XCO_LAB_DEBUG_LOG=1``, for looking at when
#: rates and slices were applied (used for Figure 18's rate changes, docs/results/2026-11-26-xco-testbed/xco-testbed.md).
AGENT_DEBUG_LOG = os.environ.get("XTC_XCO_LAB_DEBUG_LOG", "") not in ("", "0")
#: Slices of controller silence before an agent fails open.  The agent's default, 3, needs the
#: controller's answer to a probe within one slice; with 5 senders a sender hears nothing for 4
#: slices between its turns, and on this shared host an answer often takes longer (measured on
#: fig18 --quick: 4-11 fail-opens per sender agent at 3, each one opening every flow of the host).
FAIL_OPEN_SLICES = 5
#: Where the agents' gates go: ``"vm"``, the VM's own interface ``eth0`` in the VM's namespace (its
#: virtual NIC; the host's uplink keeps its NIC TBF), or ``"uplink"``, the host's uplink ``<p>-up``
#: (the gate replaces the NIC TBF and its classes at the NIC rate are the NIC).  On ``"vm"`` a
#: held packet is still charged to the sending socket, so a held UDP sender blocks as a Xen guest
#: does when Dom0 stops taking from its ring; on ``"uplink"`` the packet has left the VM (veth
#: orphans it) and a held UDP sender overflows the gate's queue, losing fragments of nearly every
#: 65000-byte datagram (measured: fig15 with 3 UDP senders, 38.5 Mb/s, all of it TCP's).  The
#: default is ``"uplink"``, the agent's place in the paper (after the host's bridge, where every
#: VM's packets pass; ``"vm"`` needs one VM per host).  Since the agents set their interface's
#: ``gso_max_segs`` to 1 (2026-11-25), ``"vm"`` carries Figure 15's UDP mixes without loss
#: (91.9-97.2% at every mix, docs/results/2026-11-26-xco-testbed/xco-testbed.md "One segment per packet at the gate"); before,
#: the slot budget stalled on the GSO packets TCP hands a VM's own interface.
GATE_AT = ("uplink", "vm")
CONTROLLER_PORT_BASE = 17_800
WELCOME_TIMEOUT_S = 60.0  # eight Python processes starting on a loaded 2-core host (scaled for more agents)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def toml_text(doc: dict[str, Any]) -> str:
    """A flat TOML document: scalars and lists at the top, tables (dicts) and arrays of tables."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, (dict, list)) or
             (isinstance(v, list) and not (v and isinstance(v[0], dict)))]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines += ["", f"[{k}]"] + [f"{kk} = {_toml_value(vv)}" for kk, vv in v.items()]
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                lines += ["", f"[[{k}]]"] + [f"{kk} = {_toml_value(vv)}" for kk, vv in item.items()]
    return "\n".join(lines) + "\n"


def scaled_topology(data: dict[str, Any], scale: float) -> dict[str, Any]:
    """The topology with every rate multiplied by ``scale`` (what the lab's TBFs emulate), so that the
    controller's rates and the agents' link rates are the lab's."""
    out = json.loads(json.dumps(data))
    for h in out.get("host", []):
        if "nic_bps" in h:
            h["nic_bps"] = max(8_000, int(h["nic_bps"] * scale))
    for lk in out.get("link", []):
        if "bps" in lk:
            lk["bps"] = max(8_000, int(lk["bps"] * scale))
    return out


def topology_data(tb: Testbed) -> dict[str, Any]:
    import tomllib

    src = tb.record["topology"]
    return BUILTIN[src]() if src in BUILTIN else tomllib.loads(Path(src).read_text())


def _xtc_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "xtc.cli", "xco", *args]


def _stop(procs: list[tuple[str, subprocess.Popen[bytes]]], say: Callable[[str], None]) -> dict[str, int | None]:
    """SIGTERM every process (agents first: each sends Leave and restores its uplink), then SIGKILL."""
    for _n, p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes: dict[str, int | None] = {}
    deadline = time.monotonic() + 5.0
    for n, p in procs:
        try:
            codes[n] = p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"xco: {n} did not stop on SIGTERM; killed")
            p.kill()
            codes[n] = p.wait()
    return codes


#: Where each run's configurations and logs go (a directory per run, named in the report's
#: ``xco.workdir``) ...
RUN_DIR = "/run/xtc/xco-lab-run"
#: ... of which a new run keeps the newest this many and any younger than :data:`KEEP_RUN_DIR_S`
#: (``/run`` is memory: 120 runs of a day left 45 MB, and a run's agents at log level debug write
#: several MB each).
KEEP_RUN_DIRS = 20
KEEP_RUN_DIR_S = 3600.0


def prune_run_dirs(base: Path, keep: int = KEEP_RUN_DIRS, keep_s: float = KEEP_RUN_DIR_S,
                   now_s: float | None = None) -> list[Path]:
    """Remove the run directories under ``base`` beyond the newest ``keep`` that are older than
    ``keep_s`` seconds (by modification time; a younger one may belong to a run under way).
    Returns those removed; one that cannot be removed is left and logged."""
    import shutil

    now_s = time.time() if now_s is None else now_s
    dirs = []
    for d in base.iterdir():
        try:
            if d.is_dir() and not d.is_symlink():
                dirs.append((d.stat().st_mtime, d))
        except OSError:
            continue
    dirs.sort(reverse=True)
    gone = []
    for mtime, d in dirs[keep:]:
        if now_s - mtime < keep_s:
            continue
        try:
            shutil.rmtree(d)
            gone.append(d)
        except OSError as e:
            log.warning("could not remove the old run directory %s: %s", d, e)
    return gone


@contextlib.contextmanager
def start_xco(tb: Testbed, mode: str, slice_us: int = SLICE_US, say: Callable[[str], None] = print,
              workdir: Path | None = None, open_burst_bytes: int | None = OPEN_BURST_BYTES,
              gate_rate_fraction: float | None = None, gate_at: str = "uplink",
              agent_log_level: str = "info", rate_link_fraction: float = 1.0,
              agent_hosts: Collection[str] | None = None) -> Iterator[dict[str, Any]]:
    """Run the experiment body under XCo in ``mode``; yields what was started (for the report).

    ``none``: nothing (the baseline).  ``timeslice`` / ``rate``: writes the lab's topology with its
    rates scaled (:func:`scaled_topology`), a controller configuration and one agent configuration
    per host into ``workdir`` (default a fresh directory under ``/run/xtc/xco-lab-run``); starts
    ``xtc xco controller -c`` in the root namespace on 127.0.0.1 and one ``xtc xco agent -c`` per
    host, also in the root namespace (the management path: control datagrams never cross the lab's
    data links), each with its gate where ``gate_at`` says (:data:`GATE_AT`): on the VM's ``eth0``
    in the VM's namespace (the uplink keeps the NIC's TBF), or on the host's uplink ``<p>-up`` in
    the host's namespace (the gate replaces the NIC's TBF; its HTB classes at the NIC rate are the
    NIC).  It waits until every agent is welcomed.  On exit (also on failure) it sends
    SIGTERM to the agents (Leave, original qdisc restored) and the controller, kills what does not
    stop, and runs ``xtc xco agent --cleanup`` on every uplink.

    Parameters
    ----------
    tb : Testbed
        The lab (built).
    mode : str
        ``"none"``, ``"timeslice"`` or ``"rate"``.
    slice_us : int
        Slice length, microseconds.
    open_burst_bytes : int or None
        The agents' ``open_burst_bytes`` (None: the agent's default, 1 ms at the link rate).
    gate_rate_fraction : float, optional
        The agents' ``link_bps`` as a fraction of the scaled NIC rate (default
        :data:`GATE_RATE_FRACTION` with timeslices, :data:`RATE_GATE_RATE_FRACTION` in rate mode).
    gate_at : str
        ``"vm"`` or ``"uplink"`` (see :data:`GATE_AT`).
    agent_log_level : str
        The agents' log level; ``"debug"`` logs every directive applied (``directive_applied``:
        ``dest``, ``start_us``, ``applied_us``), the slice grid of :mod:`.timing`.
    rate_link_fraction : float
        Rate mode: the controller's ``rate_link_fraction`` (the share of each link its rates fill).
    agent_hosts : collection of str, optional
        The hosts that run an agent (default: every host).  An experiment module's ``AGENT_HOSTS``:
        hosts that only receive have nothing for an agent to hold (their TCP acknowledgements pass
        unheld, ``pass_tcp_control``), and on 2 cores their agents' CPU is taken from the senders.

    Raises
    ------
    LabError
        A process exits early, or an agent is not welcomed within ``WELCOME_TIMEOUT_S`` (per 8 agents).
    """
    check_mode(mode)
    if mode == "none":
        yield {"mode": "none"}
        return
    if gate_rate_fraction is None:
        gate_rate_fraction = RATE_GATE_RATE_FRACTION if mode == "rate" else GATE_RATE_FRACTION
    import tempfile

    base = Path(RUN_DIR)
    base.mkdir(parents=True, exist_ok=True)
    if workdir is None:
        prune_run_dirs(base)
    wd = workdir or Path(tempfile.mkdtemp(prefix=f"{tb.prefix}-", dir=base))
    wd.mkdir(parents=True, exist_ok=True)
    topo_data = scaled_topology(topology_data(tb), tb.scale)
    (wd / "topology.toml").write_text(toml_text(topo_data))
    port = CONTROLLER_PORT_BASE + int(tb.prefix[-4:], 16) % 2000
    lead_us = RATE_LEAD_US if mode == "rate" else LEAD_US
    rt = RATE_REALTIME_PRIORITY if mode == "rate" else REALTIME_PRIORITY
    ctl = {"schema": "xco-controller/1", "topology": "topology.toml", "slice_us": slice_us, "mode": mode,
           "lead_us": lead_us, "listen": f"127.0.0.1:{port}", "state_file": "controller-state.json",
           **({"rate_link_fraction": rate_link_fraction} if mode == "rate" else {}),
           "metrics": {"enabled": False}, "log": {"format": "json", "level": "info"}}
    (wd / "controller.toml").write_text(toml_text(ctl))
    agents: dict[str, Path] = {}
    nic_bps = {h["name"]: int(h["nic_bps"]) for h in topo_data["host"]}
    if gate_at not in GATE_AT:
        raise LabError(f"gate_at must be one of {', '.join(GATE_AT)}, got {gate_at!r}")
    unknown = sorted(set(agent_hosts or ()) - set(tb.record["hosts"]))
    if unknown:
        raise LabError(f"agent_hosts: no host {', '.join(unknown)} in the lab")
    for h, hrec in tb.record["hosts"].items():
        if agent_hosts is not None and h not in agent_hosts:
            continue
        if gate_at == "vm" and len(hrec["vms"]) != 1:
            raise LabError(f"gate_at='vm' needs one VM per host; {h} has {len(hrec['vms'])}")
        ifname, ns = ("eth0", hrec["vms"][0]["ns"]) if gate_at == "vm" else (hrec["uplink"], hrec["ns"])
        cfg = {"schema": "xco-agent/1", "topology": "topology.toml", "host": h, "uplink": ifname,
               "link_bps": int(nic_bps[h] * gate_rate_fraction), "controller": f"127.0.0.1:{port}", "bind": "127.0.0.1:0",
               "netns": ns, "poll_us": POLL_US, "small_flow_bytes": SMALL_FLOW_BYTES,
               **({} if open_burst_bytes is None else {"open_burst_bytes": open_burst_bytes}),
               "giveup_after_us": GIVEUP_AFTER_US, "giveup_quiet_us": GIVEUP_QUIET_US, "idle_poll_us": IDLE_POLL_US, "slot_budget": SLOT_BUDGET, "close_guard_us": CLOSE_GUARD_US, "rate_burst_us": RATE_BURST_US, "fail_open_slices": FAIL_OPEN_SLICES, "realtime_priority": rt, "metrics": {"enabled": True, "port": 0}, "log": {"format": "json", "level": agent_log_level}}
        agents[h] = wd / f"agent-{h}.toml"
        agents[h].write_text(toml_text(cfg))
    procs: list[tuple[str, subprocess.Popen[bytes]]] = []
    logs: dict[str, Path] = {}

    def spawn(name: str, argv: list[str]) -> None:
        logs[name] = wd / f"{name}.log"
        with open(logs[name], "wb") as f:
            # setpriv: SIGTERM when this process dies (even by SIGKILL), so that an agent restores its
            # uplink and leaves rather than outliving the run; nice or chrt: see NICE, REALTIME_PRIORITY, RATE_REALTIME_PRIORITY
            # (an agent sets its own SCHED_FIFO priority from its configuration)
            sched = (["chrt", "-f", str(rt)] if rt and name == "controller" else [] if rt else ["nice", "-n", str(NICE)])
            procs.append((name, subprocess.Popen(["setpriv", "--pdeathsig", "TERM", *sched, *argv], stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 cwd=wd, start_new_session=True)))

    info: dict[str, Any] = {"mode": mode, "slice_us": slice_us, "lead_us": lead_us, "workdir": str(wd),
                            "open_burst_bytes": open_burst_bytes, "gate_rate_fraction": gate_rate_fraction,
                            "poll_us": POLL_US, "small_flow_bytes": SMALL_FLOW_BYTES, "giveup_after_us": GIVEUP_AFTER_US, "giveup_quiet_us": GIVEUP_QUIET_US, "idle_poll_us": IDLE_POLL_US, "slot_budget": SLOT_BUDGET, "close_guard_us": CLOSE_GUARD_US, "rate_burst_us": RATE_BURST_US, "nice": NICE, "realtime_priority": rt, "fail_open_slices": FAIL_OPEN_SLICES,
                            "controller": f"127.0.0.1:{port}", "agents": sorted(agents),
                            "gate_at": gate_at, "agent_log_level": agent_log_level,
                            **({"rate_link_fraction": rate_link_fraction} if mode == "rate" else {})}
    try:
        spawn("controller", _xtc_argv("controller", "-c", str(wd / "controller.toml")))
        time.sleep(0.5)
        for h, path in agents.items():
            spawn(f"agent-{h}", _xtc_argv("agent", "-c", str(path)))
        t0 = time.monotonic()
        welcome_s = WELCOME_TIMEOUT_S * max(1.0, len(agents) / 8)
        waiting = set(agents)
        while waiting:
            for n, p in procs:
                if p.poll() is not None:
                    raise LabError(f"xco: {n} exited with {p.returncode} at start: "
                                   f"{logs[n].read_text(errors='replace')[-600:]}")
            waiting = {h for h in waiting if '"welcomed"' not in logs[f"agent-{h}"].read_text(errors="replace")}
            if time.monotonic() - t0 > welcome_s:
                raise LabError(f"xco: agents {sorted(waiting)} not welcomed within {welcome_s:g} s")
            time.sleep(0.1)
        info["start_s"] = round(time.monotonic() - t0, 2)
        say(f"xco: controller and {len(agents)} agents up ({mode}, {slice_us} us slices) in {info['start_s']} s")
        yield info
    finally:
        info["agent_metrics"] = {h: _agent_metrics(logs.get(f"agent-{h}")) for h in agents}
        order = [x for x in procs if x[0] != "controller"] + [x for x in procs if x[0] == "controller"]
        info["exit_codes"] = _stop(order, say)
        for h, path in agents.items():
            try:
                subprocess.run(_xtc_argv("agent", "-c", str(path), "--cleanup"), check=False, capture_output=True,
                               timeout=60, cwd=wd)
            except subprocess.TimeoutExpired:  # the lab's removal takes the uplink's qdiscs with it
                say(f"xco: cleanup of {h}'s uplink timed out")
        info["log_events"] = {n: _events(logs[n]) for n in logs}


def _agent_metrics(log_path: Path | None) -> dict[str, Any]:
    """An agent's directive-to-gate histogram (bucket upper bounds, seconds) and fail-opens, from its
    Prometheus endpoint (the port its ``started`` event names)."""
    import urllib.request

    if log_path is None or not log_path.exists():
        return {}
    port = None
    for line in log_path.read_text(errors="replace").splitlines():
        if '"started"' in line:
            with contextlib.suppress(ValueError):
                port = json.loads(line).get("metrics_port")
    if not port:
        return {}
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError as e:
        return {"error": str(e)}
    buckets: list[tuple[float, float]] = []
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith("xco_agent_directive_to_gate_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float(le), float(line.rsplit(" ", 1)[1])))
        elif line.startswith(("xco_agent_fail_opens_total", "xco_agent_directives_total", "xco_agent_gate_errors_total",
                              "xco_agent_stats_reads_total", "xco_agent_stats_reads_deferred_total",
                              "xco_agent_wake_advance_seconds ")):
            # (the reports' keys stay what they were: "counter_reads", "counter_reads_deferred")
            key = line.split(" ")[0].removeprefix("xco_agent_").removesuffix("_total").replace("stats_", "counter_")
            out[key] = float(line.rsplit(" ", 1)[1])
    n = buckets[-1][1] if buckets else 0
    out["directive_to_gate_buckets_s"] = buckets
    for q in (0.5, 0.99):
        out[f"directive_to_gate_p{int(q * 100)}_at_most_s"] = (
            next((le for le, c in buckets if c >= q * n), None) if n else None)
    return out


def _events(path: Path) -> dict[str, int]:
    """How many times each logged event occurs in a JSON log."""
    out: dict[str, int] = {}
    for line in path.read_text(errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict):
            k = str(ev.get("event") or ev.get("msg") or ev.get("message") or "?")[:60]
            out[k] = out.get(k, 0) + 1
    return out


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


def run_experiment(name: str, out: Path, quick: bool = False, mode: str = "none", scale: float | None = None,
                   slice_us: int = SLICE_US, gate_at: str = "uplink",
                   port_buffer_bytes: int = DEFAULT_PORT_BUFFER_BYTES, command: str = "",
                   params: dict[str, Any] | None = None, say: Callable[[str], None] = print,
                   rate_link_fraction: float = 1.0) -> dict[str, Path]:
    """Build the experiment's lab, run it, remove the lab, write JSON, PNG and markdown; return the paths.

    ``scale``: None for the experiment's own (its module's ``SCALE``), else :data:`DEFAULT_SCALE`.
    ``rate_link_fraction`` (rate mode only) is the controller's; other than 1 the report's name ends in
    ``-link<fraction>``.

    ``params`` go to the experiment (:attr:`Context.params`); ``{"in_slice": True}`` also runs the agents
    at log level debug (every directive applied is logged) and names the report ``...-capture``."""
    params = dict(params or {})
    if params.get("in_slice") and (name != "fig15" or mode != "timeslice"):
        raise LabError("--in-slice measures fig15 with --mode timeslice only")
    import matplotlib

    matplotlib.use("Agg")
    mod = importlib.import_module(EXPERIMENTS[name])
    if scale is None:
        scale = float(getattr(mod, "SCALE", DEFAULT_SCALE))
    check_mode(mode)
    if not 0.5 <= rate_link_fraction <= MAX_LINK_FRACTION:
        raise LabError(f"the rate link fraction must be within 0.5..{MAX_LINK_FRACTION:g}, got {rate_link_fraction:g}")
    if rate_link_fraction != 1.0 and mode != "rate":
        raise LabError("a rate link fraction other than 1 needs --mode rate")
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
            with start_xco(tb, mode, slice_us=slice_us, say=say, gate_at=gate_at,
                           agent_log_level="debug" if params.get("in_slice") or AGENT_DEBUG_LOG else "info",
                           rate_link_fraction=rate_link_fraction,
                           agent_hosts=getattr(mod, "AGENT_HOSTS", None)) as xco:
                ctx = Context(tb=tb, quick=quick, mode=mode, say=say, params=params, xco=xco)
                result, fig, md = mod.run(ctx)
        finally:
            tb.stop_all()
            remove_lab(lab_name)
    took = time.monotonic() - t0
    load_end = round(os.getloadavg()[0], 2)
    result.update({"load_avg_1m_end": load_end, "experiment": name, "title": mod.TITLE, "paper": mod.PAPER, "mode": mode, "quick": quick,
                   "scale": scale, "topology": mod.TOPOLOGY, "lab_prefix": record["prefix"], "port_buffer_bytes": port_buffer_bytes,
                   "xco": xco, "command": command, "host": host, "duration_s": round(took, 1)})
    out.mkdir(parents=True, exist_ok=True)
    stem = name if mode == "none" else f"{name}-{mode}"
    if params.get("in_slice"):
        stem += "-capture"
    if rate_link_fraction != 1.0:
        stem += f"-link{rate_link_fraction:g}"
    if quick:
        stem += "-quick"
    paths = {"json": out / f"{stem}.json", "png": out / f"{stem}.png", "md": out / f"{stem}.md"}
    paths["json"].write_text(json.dumps(result, indent=1) + "\n")
    fig.savefig(paths["png"], dpi=110, bbox_inches="tight")
    header = (f"# {mod.TITLE} ({mod.PAPER}), mode {mode}{' (quick)' if quick else ''}\n\n"
              f"Scale {scale}: every rate is the paper's times {scale} (a 1 Gb/s link is "
              f"{scale * 1000:g} Mb/s here); switch buffers stay in bytes ({port_buffer_bytes} per host port). "
              f"Topology `{mod.TOPOLOGY}`.\n\n")
    if mode != "none":
        fails = sum(int(m.get("fail_opens", 0)) for m in xco.get("agent_metrics", {}).values())
        lost = xco.get("log_events", {}).get("controller", {}).get("host_lost", 0)
        header += (f"XCo: {mode}, {xco['slice_us']} us slices, gates on the {xco['gate_at']}s at "
                   f"{xco['gate_rate_fraction']:g} of the NIC rate (open burst {xco['open_burst_bytes']} bytes, "
                   f"small flows unheld up to {xco.get('small_flow_bytes', 100000)} bytes, "
                   f"polls every {xco['poll_us']} us, give-up after {xco['giveup_after_us']} us or, "
                   f"quiet, {xco.get('giveup_quiet_us', 0)} us, idle reads every {xco.get('idle_poll_us', 0)} us "
                   f"(0: once a slice))"
                   + (f"; rates share {xco['rate_link_fraction']:g} of each link, each with a burst of "
                      f"{xco.get('rate_burst_us', 1000)} us at its rate" if mode == "rate" else "")
                   + (f"; closes made {xco['close_guard_us']} us before their slot's end" if xco.get("close_guard_us") else "")
                   + (f"; controller and agents under SCHED_FIFO at {xco['realtime_priority']}"
                      if xco.get("realtime_priority") else f"; controller and agents at nice {xco.get('nice', NICE)}")
                   + f"; {fails} fail-opens, {lost} hosts lost by the controller "
                   f"(see docs/results/2026-11-26-xco-testbed/xco-testbed.md, \"With XCo\").\n\n")
    footer = (f"\n\n![{stem}]({stem}.png)\n\nCommand: `{command}`; host: {host['cpus']} CPUs ({host['cpu_model']}), "
              f"kernel {host['kernel']}, load {host['load_avg_1m']} at the start and {load_end} at the end; "
              f"took {took:.0f} s.\n")
    paths["md"].write_text(header + md.strip() + footer)
    return paths

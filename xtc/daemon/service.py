"""The daemon process: the closed loop (:mod:`xtc.daemon.loop`) in real time, with its API.

One thread runs everything on a monotonic clock: the control period (1 s by default: the host's
counters are read once, the controllers step, changed caps are written), manager requests
(ZeroMQ ROUTER, answering REQ and DEALER clients as a REP socket did) as they come, the samples
(ZeroMQ XPUB, one message per period while a subscriber listens; and over the manager socket to
each peer that sent ``subscribe``: one connection per policer and router, docs/design/one-link.md),
the metrics and the state file after every period.  Signal handlers only set flags: SIGTERM/SIGINT stop the loop
(caps restored, state kept), SIGHUP reloads the configuration (a bad one is refused and the old
one kept).  An unexpected exception saves the state, leaves the caps as XTC set them and exits
non-zero, so that systemd restarts the daemon and it resumes.

Nothing acknowledged is lost: a request that changes an instance is answered only after the state
file holds the change, and before any cap is written; when the file cannot be written (a full
disk) the request is refused (``state_not_saved``) and undone.  One daemon owns a state directory
(:func:`xtc.service.state.lock_state_dir`).

Why one file: :class:`DaemonService` is that one thread, and its parts (the period, the requests,
the samples, the state saves, reload) share its sockets, its clock and the order in which they run
within a period; the decisions are :mod:`xtc.daemon.core`'s, the process's set-up (memory, the
``ipc://`` socket files) :mod:`xtc.daemon.process`'s.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import zmq

from xtc.models import PAPER_MODEL, ModelFile, load_model
from xtc.control import Controller, make_controller

from . import api
from .api import ApiError, Request
from xtc.host.actuators import refresh_of
from xtc.host.base import Host, HostPluginError, host_plugin
from xtc.host.cgroup import CgroupBackend
from xtc.host.counters import counters_from_config
from xtc.host.errors import HostAdapterError
from xtc.host.libvirt import LibvirtBackend

from .config import ConfigError, DaemonConfig, load_config, reachable_without_curve, reload_diff
from xtc.service import curve
from .core import DaemonCore, StateError
from xtc.service.cli import load_or_report
from xtc.service.collector import PeriodicFreeze
from xtc.service.logs import event, setup_logging
from .loop import PUNISHMENT_COMMANDS, ActionOutcomes, ControlLoop
from .limiter_policy import tuning_for
from .limiter_state import STATE_KEY as EARLY_DROP_KEY, EarlyDrop
from .power_state import STATE_KEY as POWER_KEY
from xtc.host.limiter import Limiter, LimiterError
from xtc.host.bpflimiter import BpfLimiter
from xtc.host.tclimiter import TcLimiter
from .metrics import DaemonMetrics
from .sample_udp import UdpSamples
from .process import give_socket_group, prepare_ipc
from xtc.service.heap import release_large_blocks
from xtc.service.state import StateFileError, lock_state_dir, read_state, save_state
from xtc.service.notify import Notifier
from xtc.service.signals import StopOnSignal

__all__ = ["DaemonService", "controller_factory", "make_host", "run_daemon"]

#: zmq flags as plain ints (an enum's ``|`` per message costs more than the send).
_NOBLOCK = int(zmq.NOBLOCK)
_MORE_NOBLOCK = int(zmq.NOBLOCK | zmq.SNDMORE)
#: Subscription messages read from the XPUB socket per period, at most (a flood waits its turn).
_MAX_SUBSCRIPTION_MESSAGES = 1000
#: Peers that may hold a subscription to the samples over the manager socket at once (``subscribe``);
#: more are refused (``unsupported``: the XPUB socket takes them).  A daemon's routers are each policed
#: by one engine (the leader's shard), so a daemon has one or two subscribers.
MAX_LINK_SUBSCRIBERS = 16
#: Messages queued toward one peer of the manager socket, at most (``SNDHWM``; the policer's side,
#: its kernel buffers and its own queue of 1,000 come first): past it a samples message to a slow
#: subscriber is dropped, never queued.  What the daemon holds for slow subscribers is at most this
#: many messages each (a body of 64 KiB or more is shared by all of them, sent without a copy).
MANAGER_SNDHWM = 100
#: ZeroMQ heartbeats of the manager socket, milliseconds: a peer silent for the timeout (a policer
#: whose host vanished) is disconnected, and its subscription ends with it.
MANAGER_HEARTBEAT_MS = 5000
#: A request's envelope (the routing frames before the empty delimiter: the peer's identity, and
#: those of proxies between), at most this many frames and bytes; a longer one is dropped unanswered.
MAX_ENVELOPE_FRAMES = 8
MAX_ENVELOPE_BYTES = 1024


def _scrape_wait_s(period_s: float) -> float:
    """How long a Prometheus scrape waits for the next period's rows: two periods, 0.2-10 s."""
    return min(10.0, max(0.2, 2.0 * period_s))

log = logging.getLogger("xtc.daemon")

#: ZeroMQ drops (with the connection) messages larger than this many times max_message_bytes;
#: messages between 1x and this get an error reply "too_large".
TRANSPORT_LIMIT_FACTOR = 16
#: Controller state is saved at least this often while caps move, even when no request changed
#: anything, seconds.
STATE_SAVE_PERIOD_S = 10.0
#: ... and at least this often when no instance's cap has changed since the last save, seconds: then
#: the caps a restart resumes from are already in the file, and only the controllers' memory (last
#: error, noise estimate, step count) is older (at 1000 VRs one save costs 20-30 ms of CPU).
STATE_SAVE_IDLE_PERIOD_S = 300.0


def controller_factory(cfg: DaemonConfig) -> Callable[[], Controller]:
    """A function returning fresh controllers as the ``[controller]`` section says."""
    c = cfg.controller
    mf: ModelFile = PAPER_MODEL if c.model == "paper" else load_model(c.model)
    period_s = cfg.daemon.control_period_s
    # Validate once now, so a bad combination (or a period the model cannot serve) fails at load
    # and not at activation.
    make_controller(mf, c.kind, cap_min_percent=c.cap_min_percent, cap_max_percent=c.cap_max_percent, period_s=period_s,
                    lag_probe=c.lag_probe)

    def factory() -> Controller:
        return make_controller(mf, c.kind, cap_min_percent=c.cap_min_percent, cap_max_percent=c.cap_max_percent,
                               period_s=period_s, lag_probe=c.lag_probe)

    return factory


#: Entry points of host backends that live outside the product (the testbed's simulated plant).


def _open_limiter(kind: str = "bpf") -> Limiter | None:
    """Early drop's limiter (``daemon.early_drop_limiter``: the eBPF bucket, its program and maps
    and a netlink socket; or the TBF, a netlink socket); None, logged, where it cannot be had."""
    try:
        return BpfLimiter() if kind == "bpf" else TcLimiter()
    except (LimiterError, OSError) as e:
        event(log, logging.WARNING, "early_drop_unavailable", limiter=kind, error=str(e))
        return None


def make_host(cfg: DaemonConfig) -> Host:
    """The host backend the configuration names.

    ``libvirt`` and ``cgroup`` are the product's; any other backend (``sim``, the simulated plant)
    is found among the installed distributions' ``xtc.hosts`` entry points (the testbed,
    :mod:`xtc_lab`, registers it), so that the product never imports the testbed.

    Raises
    ------
    ConfigError
        The backend is not installed.
    """
    if cfg.daemon.backend not in ("libvirt", "cgroup"):

        try:
            return host_plugin(cfg.daemon.backend).from_config(cfg)
        except HostPluginError as e:
            raise ConfigError("daemon.backend", str(e)) from None
    counters = counters_from_config(cfg.daemon.proc_net_dev)
    refresh_s = refresh_of(cfg.daemon.reassert_period_s)
    if cfg.daemon.backend == "cgroup":
        return CgroupBackend(cfg.cgroup.vr, counters, refresh_s=refresh_s, cfs_period_us=cfg.daemon.cfs_period_us)
    return LibvirtBackend.for_uri(cfg.libvirt.uri, cfg.libvirt.domains, counters, refresh_s=refresh_s,
                                  cfs_period_us=cfg.daemon.cfs_period_us)


class DaemonService:
    """One running daemon.

    Parameters
    ----------
    cfg : DaemonConfig
        The loaded configuration.
    host : Host
        Where VRs, counters and caps come from.
    config_path : path, optional
        Re-read on SIGHUP (or :meth:`request_reload`).
    clock, wall_clock : callable
        Monotonic and wall-clock time in seconds (injectable for tests).
    """

    def __init__(
        self,
        cfg: DaemonConfig,
        host: Host,
        config_path: str | Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        context: zmq.Context | None = None,
        state_lock: int | None = None,
    ):
        self.cfg = cfg
        #: The open lock file of the state directory (taken by :meth:`open` if not given).
        self.state_lock = state_lock
        self.host = host
        self.config_path = config_path
        self.clock = clock
        self.wall_clock = wall_clock
        self.ctx = context or zmq.Context.instance()
        #: SIGTERM/SIGINT (stop) and SIGHUP (reload) flags, set by the handlers only.
        self.flags = StopOnSignal()
        # Restoring every VR's cap may take seconds; systemd's SIGKILL comes at 30 s (TimeoutStopSec).
        self.flags.stop_stacks_after_s = 20.0
        self.metrics = DaemonMetrics()
        self.core = DaemonCore(
            controller_factory(cfg),
            max_setpoint_pps=cfg.daemon.max_setpoint_pps,
            reassert_period_s=cfg.daemon.reassert_period_s,
        )
        self.control = ControlLoop(self.core, host, clock=clock)
        self.control.wall_clock = wall_clock
        # --- early drop (issue 48): per-VR limiters, opt-in (xtc/daemon/limiter_state.py)
        self.control.early_drop = EarlyDrop(
            # a backend whose interfaces are not the host's (the simulated plant's "vif1.0" may be
            # someone else's real interface on this host) gets no limiter: early drop unavailable
            _open_limiter(cfg.daemon.early_drop_limiter) if getattr(host, "real_interfaces", True) else None,
            default_on=cfg.daemon.early_drop,
            tuning=tuning_for(cfg.daemon.early_drop_limiter, cfg.daemon.early_drop_margin_fraction,
                              cfg.daemon.early_drop_credit_s, cfg.daemon.early_drop_loss_bound_fraction),
            on_failure=lambda _vr, op: self.metrics.early_drop_failures.labels(op).inc())
        self._last_save_s = -math.inf
        #: The instances' caps in the state file last written (in the order of ``core.instances``).
        self._saved_caps: list[float] | None = None
        #: The manager socket: a ROUTER (answering REQ and DEALER clients as a REP socket would).
        self.rep: zmq.Socket | None = None
        self.pub: zmq.Socket | None = None
        #: The peers subscribed to the samples over the manager socket, by their envelope (issue 50), with
        #: the format each asked for (``xtc-samples/2`` or ``/3``): each period's samples are sent to them
        #: there, dropped when their queue is full, and the subscription ends when the peer is gone (its
        #: connection closed) or sends ``unsubscribe``.
        self.link_subscribers: dict[tuple[bytes, ...], str] = {}
        #: Of them, those that asked for their samples as UDP datagrams (``subscribe`` with ``udp``).
        self.udp = UdpSamples()
        self.metrics.sample_datagrams = self.udp.counts
        #: Whether a subscriber of the PUB socket held the samples' topic at the last period's look.
        self.pub_listeners = False
        #: The ipc:// socket files bound (path, inode), removed on close.
        self._ipc_files: list[tuple[Path, int]] = []
        #: The topic prefixes the PUB socket's subscribers hold (non-verbose XPUB: a prefix arrives
        #: with its first subscriber and leaves with its last).
        self.subscriptions: set[bytes] = set()
        self.metrics_port: int | None = None
        #: Run the garbage collector as :meth:`after_period_gc` says (the daemon process does; a
        #: library user or a test leaves the process's collector alone).
        self.manage_gc = False
        self._freeze = PeriodicFreeze()
        #: systemd's readiness and watchdog (:mod:`xtc.service.notify`); a no-op one unless
        #: :func:`run_daemon` gives the one from the environment.
        self.notifier = Notifier(None)

    # ------------------------------------------------------------------------ start / stop
    def install_signal_handlers(self) -> None:
        self.flags.install_signal_handlers(reload=True)

    def request_stop(self) -> None:
        self.flags.stop = True

    def request_reload(self) -> None:
        self.flags.reload = True

    def open(self) -> None:
        """Load the saved state, bind the sockets, start the metrics endpoint."""
        cfg = self.cfg
        if self.state_lock is None:
            try:
                self.state_lock = lock_state_dir(cfg.state_path.parent)
            except StateFileError as e:
                raise SystemExit(f"xtc daemon: {e}") from None
        try:
            doc = read_state(cfg.state_path)
        except StateFileError as e:
            raise SystemExit(f"xtc daemon: {e}; move it away to start without state") from None
        if doc is not None:
            try:
                notes = self.core.load_state(doc)
            except StateError as e:
                raise SystemExit(f"xtc daemon: state file {cfg.state_path}: {e}; move it away to start without state") from None
            for n in notes:
                event(log, logging.WARNING, "state_note", note=n)
            try:  # early drop's choices, the VRs turned off (a state file without them: none)
                self.control.early_drop.load_state(doc.get(EARLY_DROP_KEY), set(self.core.instances))
                self.control.power.load_state(doc.get(POWER_KEY))
            except ValueError as e:
                raise SystemExit(f"xtc daemon: state file {cfg.state_path}: {e}; move it away to start without state") from None
            self._fit_state_to_host()
            event(log, logging.INFO, "state_loaded", path=str(cfg.state_path),
                  instances=sorted(self.core.instances), pending_restores=sorted(self.core.pending_restores))
        # Fail now, not at the first activation, if the state cannot be written.
        try:
            save_state(cfg.state_path, self._state_doc())
        except StateFileError as e:
            raise SystemExit(f"xtc daemon: {e}; requests could not be saved, not starting") from None
        self._last_save_s = self.clock()
        self._saved_caps = [i.cap_percent for i in self.core.instances.values()]
        hard = cfg.manager.max_message_bytes * TRANSPORT_LIMIT_FACTOR
        # ROUTER, not REP: a reply goes to the peer by its identity, so the samples can too (issue 50).
        # MANDATORY: a send to a peer that is gone fails (EHOSTUNREACH: its subscription ends) and
        # one to a full queue fails (EAGAIN: dropped), instead of being discarded unseen.
        self.rep = self.ctx.socket(zmq.ROUTER)
        self.rep.setsockopt(zmq.MAXMSGSIZE, hard)
        self.rep.setsockopt(zmq.LINGER, 0)
        self.rep.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.rep.setsockopt(zmq.SNDHWM, MANAGER_SNDHWM)
        self.rep.setsockopt(zmq.HEARTBEAT_IVL, MANAGER_HEARTBEAT_MS)
        self.rep.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3 * MANAGER_HEARTBEAT_MS)
        self._bind(self.rep, "manager.endpoint", cfg.manager.endpoint)
        # XPUB: it also hands over its subscribers' subscriptions, so a period with nobody to
        # read its samples builds none (:meth:`sample_listeners`).  A subscription is a topic
        # prefix: a frame larger than a request is no subscription (the connection is dropped).
        self.pub = self.ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, 10000)
        self.pub.setsockopt(zmq.MAXMSGSIZE, cfg.manager.max_message_bytes)
        self._bind(self.pub, "manager.pub_endpoint", cfg.manager.pub_endpoint)
        endpoints = {
            "endpoint": self.rep.getsockopt_string(zmq.LAST_ENDPOINT),
            "pub_endpoint": self.pub.getsockopt_string(zmq.LAST_ENDPOINT),
        }
        if cfg.metrics.enabled:
            try:
                self.metrics_port = self.metrics.serve(cfg.metrics.address, cfg.metrics.port)
                self.metrics.scrape_wait_s = _scrape_wait_s(cfg.daemon.control_period_s)
            except OSError as e:
                self._close_sockets()
                raise SystemExit(f"xtc daemon: cannot serve metrics on {cfg.metrics.address}:{cfg.metrics.port} "
                                 f"(metrics.port): {e.strerror or e}") from None
        now = self.clock()
        self.control.discover(now, force=True)
        # early drop: limiters a killed daemon left on the VRs' interfaces are removed (the next periods derive new ones)
        self.control.early_drop.start(self.control.vrs)
        # The first counter reading starts the first period.
        self.control.period(now)
        src = getattr(self.host, "counters", None)
        event(log, logging.INFO, "started", backend=self.host.name, pid=os.getpid(),
              period_s=cfg.daemon.control_period_s, counters=None if src is None else type(src).__name__,
              counters_fallback=getattr(src, "fallback_reason", None),
              metrics_port=self.metrics_port, vrs=sorted(self.control.vrs), **endpoints)

    def _bind(self, sock: zmq.Socket, key: str, endpoint: str) -> None:
        """Bind ``sock``, or exit with a message naming the endpoint in use.

        An ``ipc://`` socket is created owner-only (a umask around the bind, so that no other user
        can connect in between) and then given mode 0660 and the ``xtc`` group when that group
        exists (:func:`prepare_ipc` makes its directory).
        """
        try:
            path = prepare_ipc(key, endpoint)
        except SystemExit:
            self._close_sockets()
            raise
        old_umask = os.umask(0o177) if path is not None else None
        try:
            sock.bind(endpoint)
        except zmq.ZMQError as e:
            self._close_sockets()
            raise SystemExit(f"xtc daemon: cannot bind {key} {endpoint}: {e.strerror}"
                             + (" (another daemon or program is listening there)" if e.errno == zmq.EADDRINUSE else "")
                             ) from None
        finally:
            if old_umask is not None:
                os.umask(old_umask)
        if path is not None:
            try:
                give_socket_group(path)
                self._ipc_files.append((path, path.stat().st_ino))
            except OSError as e:
                self._close_sockets()
                raise SystemExit(f"xtc daemon: cannot set the mode of {path} ({key}): {e.strerror or e}") from None

    def _close_sockets(self) -> None:
        for s in (self.rep, self.pub):
            if s is not None:
                s.close(0)
        self.udp.close()
        # libzmq leaves an ipc:// socket's file behind; remove ours (not one another daemon bound since).
        for path, ino in self._ipc_files:
            try:
                if path.lstat().st_ino == ino:
                    path.unlink()
            except OSError:
                pass
        self._ipc_files = []

    def close(self) -> int:
        """Give every controlled VR its original cap back, save the state, close.  Returns rc."""
        self.control.early_drop.remove_all()  # early drop: no limiter outlives the daemon
        failed = self.control.restore_all().restores_failed
        self._save(force=True)
        self._close_sockets()
        self.control.early_drop.close()
        self.host.close()
        if self.state_lock is not None:
            os.close(self.state_lock)
            self.state_lock = None
        self.flags.stopped()
        event(log, logging.INFO, "stopped", restore_failures=failed, signal=self.flags.stop_signal)
        return 1 if failed else 0

    # -------------------------------------------------------------------------------- loop
    def run(self) -> int:
        """Run until stopped.  Returns the exit code."""
        self.open()
        # Serving now: state loaded, sockets bound, the metrics port listening.
        self.notifier.ready(f"serving {len(self.core.instances)} instance(s) on {self.cfg.manager.endpoint}")
        try:
            self.loop()
        except BaseException as e:
            event(log, logging.CRITICAL, "crashed", error=repr(e))
            try:
                self._save(force=True)
            finally:
                raise
        self.notifier.stopping("restoring the original caps")
        return self.close()

    def loop(self, until_s: float | None = None) -> None:
        """The scheduler: control periods and requests, until stopped."""
        assert self.rep is not None
        poller = zmq.Poller()
        poller.register(self.rep, zmq.POLLIN)
        now = self.clock()
        period_start = now
        next_period = now + self.cfg.daemon.control_period_s
        while not self.flags.stop:
            if until_s is not None and now >= until_s:
                return
            if self.flags.reload:
                self.flags.reload = False
                self.reload()
                next_period = min(next_period, period_start + self.cfg.daemon.control_period_s)
            self.notifier.watchdog(now, lambda: f"{len(self.core.instances)} instance(s) of {len(self.control.vrs)} VR(s), "
                                                f"period {self.cfg.daemon.control_period_s:g} s")
            timeout_ms = max(0.0, min(next_period - self.clock(), self.notifier.watchdog_due_in_s())) * 1000.0
            if poller.poll(timeout=math.ceil(timeout_ms)):
                self._serve_requests()
            now = self.clock()
            if now >= next_period:
                self.run_period(now, now - period_start)
                period_start = now
                next_period += self.cfg.daemon.control_period_s
                # Fell behind, before the period or during it (a stall of this process or of the
                # host's calls): skip the missed periods, and never run two back to back.  The
                # counters are read when the period gets to them; a period run at once after a
                # late one would read them again a few ms later: a rate over a few ms is noise
                # (0 pps, or 20 packets as 20,000 pps) that the controllers would act on.
                after = self.clock()
                if next_period <= after:
                    next_period = after + self.cfg.daemon.control_period_s

    # ----------------------------------------------------------------------------- period
    def run_period(self, now: float, period_s: float) -> None:
        """One control period (:meth:`ControlLoop.period`), then samples, metrics and state."""
        t0 = time.perf_counter()
        meter = self.control.meter
        last_read_s = meter.last_time_s
        report = self.control.period(now)
        if report.meter_error is not None:
            self.metrics.meter_errors.inc()
        elif last_read_s is not None and meter.last_time_s is not None:  # the rates' interval
            self.metrics.packets.add(report.readings, meter.last_time_s - last_read_s)
        self._count(report.outcomes)
        # The rows are built only for someone who reads them: a subscriber of the samples, a
        # Prometheus scrape waiting for them, the debug log (at 10,000 VRs rows and JSON are
        # about 10 ms a period).
        publish = self.sample_listeners()
        debug = log.isEnabledFor(logging.DEBUG)
        rows = None
        if publish or debug or self.metrics.rows_wanted():
            rows = self.core.sample_rows()
            self.metrics.update(rows)
        if publish:
            assert rows is not None
            t = self.wall_clock()
            # Each format built once a period, only when someone takes it: the PUB socket's readers and the
            # peers that asked for /2 take /2, those that asked for /3 take /3.
            wants = set(self.link_subscribers.values())
            v2 = api.samples_message(t, period_s, rows) if self.pub_listeners or api.SAMPLES_SCHEMA in wants else None
            if v2 is not None and self.pub_listeners and self.pub is not None:
                try:
                    self.pub.send(v2[0], _MORE_NOBLOCK)
                    self.pub.send(v2[1], _NOBLOCK)  # a PUB socket takes the rest of a message it took the start of
                except zmq.Again:
                    pass
            if self.link_subscribers:
                v3 = api.samples_message_v3(t, period_s, rows) if api.SAMPLES_SCHEMA_V3 in wants else None
                self._send_link_samples({api.SAMPLES_SCHEMA: v2, api.SAMPLES_SCHEMA_V3: v3})
        self.metrics.periods.inc()
        self._save(force=False)
        self.metrics.work.observe(time.perf_counter() - t0)
        if self.manage_gc:
            self.after_period_gc(now)
        if debug and rows is not None:
            for row in rows:
                event(log, logging.DEBUG, "sample", **dict(zip(api.SAMPLE_FIELDS, row)))

    def _send_link_samples(self, messages: dict[str, list[bytes] | None]) -> None:
        """Send a period's samples to every peer subscribed over the manager socket, in the format it asked
        for (``messages``: format -> its frames), never waiting: a peer whose queue is full (``SNDHWM``)
        loses this message (counted), one that is gone loses its subscription."""
        assert self.rep is not None
        udp = self.udp
        for peer, schema in list(self.link_subscribers.items()):
            msg = messages.get(schema)
            if msg is None:
                continue
            if udp and udp.send(peer, msg):  # (else this period's on the connection: see UdpSamples.send)
                continue
            try:
                self.rep.send_multipart([*peer, b"", *msg], _NOBLOCK, copy=False)
            except zmq.ZMQError as e:
                if e.errno == zmq.EHOSTUNREACH:  # its connection is gone (closed, or timed out by heartbeats)
                    del self.link_subscribers[peer]
                    udp.drop(peer)
                    event(log, logging.INFO, "samples_unsubscribed", peer=peer[0].hex(), reason="gone")
                else:  # EAGAIN: the peer reads too slowly
                    self.metrics.sends_dropped.labels("samples").inc()

    def _subscription(self, cmd: str, peer: tuple[bytes, ...] | None, schema: str | None = None,
                      udp: tuple[tuple[str, int], bytes] | None = None) -> dict[str, Any]:
        """``subscribe`` / ``unsubscribe``: the samples over this connection (the peer's envelope), in the
        format ``schema`` asks for (None: ``xtc-samples/2``), as datagrams to ``udp`` (address, key) if given;
        a peer subscribed again takes the new one."""
        if peer is None:
            raise ApiError("unsupported", f"'{cmd}' is about the connection it comes on: send it on a DEALER "
                                          "socket connected to manager.endpoint")
        if cmd == "unsubscribe":
            if peer in self.link_subscribers:
                del self.link_subscribers[peer]
                self.udp.drop(peer)
                event(log, logging.INFO, "samples_unsubscribed", peer=peer[0].hex(), reason="asked")
            return {"subscribed": False}
        if peer not in self.link_subscribers:
            if len(self.link_subscribers) >= MAX_LINK_SUBSCRIBERS:
                raise ApiError("unsupported", f"this daemon sends its samples over manager.endpoint to at most "
                                              f"{MAX_LINK_SUBSCRIBERS} peers; subscribe to manager.pub_endpoint instead")
            event(log, logging.INFO, "samples_subscribed", peer=peer[0].hex(), subscribers=len(self.link_subscribers) + 1,
                  schema=schema or api.SAMPLES_SCHEMA)
        self.link_subscribers[peer] = schema or api.SAMPLES_SCHEMA
        reply = {"subscribed": True, "schema": schema or api.SAMPLES_SCHEMA, "period_s": self.cfg.daemon.control_period_s}
        if udp is None:
            self.udp.drop(peer)
        else:
            self.udp.set(peer, *udp)
            event(log, logging.INFO, "samples_udp", peer=peer[0].hex(), to=f"{udp[0][0]}:{udp[0][1]}")
            reply["udp"] = True
        return reply

    def sample_listeners(self) -> bool:
        """True if someone takes the samples: a peer subscribed over the manager socket, or a subscriber of
        the PUB socket holding the samples' topic (its subscriptions read first, every period)."""
        pub, subs = self.pub, self.subscriptions
        if pub is None:
            self.pub_listeners = False
            return bool(self.link_subscribers)
        for _ in range(_MAX_SUBSCRIPTION_MESSAGES):
            try:
                msg = pub.recv(_NOBLOCK)
            except zmq.Again:
                break
            if msg[:1] == b"\x01":
                subs.add(msg[1:])
            elif msg[:1] == b"\x00":
                subs.discard(msg[1:])
        self.pub_listeners = any(api.SAMPLES_TOPIC.startswith(p) for p in subs)
        return bool(self.link_subscribers) or self.pub_listeners

    def after_period_gc(self, now: float) -> None:
        """Keep Python's cyclic garbage collector off the objects that outlive a period
        (:class:`xtc.service.collector.PeriodicFreeze`: frozen after each period, everything collected once
        every :data:`~xtc.service.collector.FULL_PERIOD_S`).  At 10,000 VRs the collector's full passes over
        every instance, controller and counter table cost 100 ms or more per period (the period's own work
        is acyclic and freed by reference counting)."""
        self._freeze.after_round(now)

    def _count(self, outcomes: ActionOutcomes) -> None:
        ok = outcomes.writes_ok + outcomes.restores_ok
        failed = outcomes.writes_failed + outcomes.restores_failed
        if ok:
            self.metrics.actuations.labels("ok").inc(ok)
            self.metrics.cap_changes.add(outcomes.changed)
        if failed:
            self.metrics.actuations.labels("failed").inc(failed)

    def _save(self, force: bool) -> str | None:
        """Write the state file when due (or ``force``).  Returns None, or why it could not be written."""
        now = self.clock()
        caps = None
        if not (force or self.core.dirty):
            age = now - self._last_save_s
            if age < STATE_SAVE_PERIOD_S:
                return None
            caps = [i.cap_percent for i in self.core.instances.values()]
            if age < STATE_SAVE_IDLE_PERIOD_S and caps == self._saved_caps:
                return None  # no cap moved (the instances did not change either: not dirty)
        try:
            save_state(self.cfg.state_path, self._state_doc())
        except StateFileError as e:
            event(log, logging.ERROR, "state_save_failed", error=str(e))
            return str(e)
        self.core.dirty = False
        self._last_save_s = now
        self._saved_caps = caps if caps is not None else [i.cap_percent for i in self.core.instances.values()]
        return None

    def _state_doc(self) -> dict[str, Any]:
        """The state file's document: the core's, and early drop's choices."""
        doc = self.core.to_state()
        doc[EARLY_DROP_KEY] = self.control.early_drop.to_state()
        if self.control.power.off:
            doc[POWER_KEY] = self.control.power.to_state()
        return doc

    def _punishment_before(self, req: Request) -> Any:
        """What a punishment command may change, as it is before it (for :meth:`ControlLoop.undo_punishment`)."""
        if req.cmd == "early_drop" and req.vr is not None and self.control.early_drop is not None:
            return self.control.early_drop.is_on(req.vr)
        if req.cmd in ("vr_off", "vr_on") and req.vr is not None:
            return self.control.power.off.get(req.vr)
        return None

    # --------------------------------------------------------------------------- requests
    def _serve_requests(self, budget: int = 100) -> None:
        assert self.rep is not None
        for _ in range(budget):
            try:
                got = self._recv_request()
            except zmq.Again:
                return
            if got is None:
                continue  # no envelope: not a request (a REP socket drops it too)
            envelope, frames = got
            if isinstance(frames, ApiError):
                reply = self._refused(frames, "?")
            else:
                reply = self.handle_message(frames, peer=tuple(envelope[:-1]))
            try:  # never waits: a peer that reads nothing (its queue full) or is gone loses its reply
                self.rep.send_multipart([*envelope, reply], _NOBLOCK)
            except zmq.ZMQError:
                self.metrics.sends_dropped.labels("reply").inc()

    def _recv_request(self) -> tuple[list[bytes], list[bytes] | ApiError] | None:
        """One request message: its envelope (the routing frames and the empty delimiter: what the
        reply starts with) and its frames; raises ``zmq.Again`` when there is none.  None for a message
        without a delimiter or with an envelope beyond :data:`MAX_ENVELOPE_FRAMES` /
        :data:`MAX_ENVELOPE_BYTES` (dropped, as a REP socket drops a message without one).

        The whole message (all its frames after the delimiter) is bounded by
        ``manager.max_message_bytes``: the frames of a larger one are dropped as they are read, never
        gathered, and it gets ``too_large``.
        """
        sock = self.rep
        assert sock is not None
        limit = self.cfg.manager.max_message_bytes
        frame = sock.recv(flags=_NOBLOCK, copy=False)
        envelope = [frame.bytes]  # the peer's identity, which the ROUTER socket puts first
        size = len(frame)
        more = sock.getsockopt(zmq.RCVMORE)
        # ZeroMQ delivers a message's frames together: the rest is already here.
        while more:
            frame = sock.recv(copy=False)
            more = sock.getsockopt(zmq.RCVMORE)
            size += len(frame)
            if len(envelope) <= MAX_ENVELOPE_FRAMES and size <= MAX_ENVELOPE_BYTES:
                envelope.append(frame.bytes)
            if len(frame) == 0:
                break
        else:
            return None  # no delimiter
        if len(envelope) > MAX_ENVELOPE_FRAMES or size > MAX_ENVELOPE_BYTES or envelope[-1] != b"":
            while more:  # the rest of it, dropped
                sock.recv(copy=False)
                more = sock.getsockopt(zmq.RCVMORE)
            return None
        frames: list[bytes] = []
        total = count = 0
        while more:
            frame = sock.recv(copy=False)
            more = sock.getsockopt(zmq.RCVMORE)
            count += 1
            total += len(frame)
            if total <= limit:
                frames.append(frame.bytes)
            elif frames:
                frames = []
            del frame
        if total > limit:
            return envelope, ApiError("too_large", f"message of {total} bytes in {count} frame(s) exceeds the maximum of {limit}")
        return envelope, frames

    def _refused(self, e: ApiError, cmd: str) -> bytes:
        self.metrics.requests.labels(cmd if cmd in api.COMMANDS else "?", e.code).inc()
        event(log, logging.INFO, "request_refused", cmd=cmd, code=e.code, error=e.message)
        return api.error_reply(e)

    def handle_message(self, frames: list[bytes], peer: tuple[bytes, ...] | None = None) -> bytes:
        """Answer one request message (all frames as received; ``peer``: the sender's routing frames, for
        ``subscribe``).  Never raises.

        A request that changes an instance is saved to the state file before any cap is written;
        if the file cannot be written the change is undone and the request refused
        (``state_not_saved``).
        """
        cfg = self.cfg
        cmd = "?"
        try:
            if len(frames) != 1:
                raise ApiError("bad_json", f"a request is one frame, got {len(frames)}")
            req = api.parse_request(frames[0], cfg.manager.max_message_bytes, cfg.daemon.max_setpoint_pps)
            cmd = req.cmd
            if cmd in api.LINK_COMMANDS:  # about the connection: the socket's, not the control loop's
                result = self._subscription(cmd, peer, req.schema, req.udp)
                self.metrics.requests.labels(cmd, "ok").inc()
                return api.ok_reply(result, req.id)
            now = self.clock()
            was_dirty = self.core.dirty
            cp = self.core.checkpoint(req.vr) if cmd not in ("ping", "list", "status") else None
            before = self._punishment_before(req)
            self.core.dirty = False  # so that it tells whether this request changed anything
            try:
                result, actions = self.control.decide(req, now)
                changed = self.core.dirty
                error = self._save(force=True) if changed else None
            except BaseException:
                if cp is not None:
                    self.core.rollback(cp)
                self.core.dirty = True  # whatever happened, the next save writes everything
                raise
            if error is not None:
                assert cp is not None
                self.core.rollback(cp)  # dirty as it was, too
                if cmd in PUNISHMENT_COMMANDS:
                    self.control.undo_punishment(req, before)
                raise ApiError("state_not_saved", f"{error}; nothing was changed")
            if not changed:
                self.core.dirty = was_dirty
            self._count(self.control.apply(actions, now))
            if req.vr is not None and cmd in ("status", "early_drop") and self.control.early_drop is not None:  # early drop
                result = {**result, "early_drop": self.control.early_drop.describe(req.vr)}
            off = self.control.power.off
            if off:  # the VRs this daemon turned off (vr_off), with why and since when
                if req.vr is not None and req.vr in off and cmd != "list":
                    result = {**result, "vr_off": off[req.vr].describe()}
                elif cmd == "list":
                    result = {**result, "vrs": [{**v, "vr_off": off[v["vr"]].describe()} if v["vr"] in off else v
                                                for v in result["vrs"]]}
            if cmd == "list" and self.control.early_drop is not None:  # early drop, per VR, as in "status"
                ed = self.control.early_drop
                result = {**result, "vrs": [{**v, "early_drop": ed.describe(v["vr"])} for v in result["vrs"]]}
            if req.vr is not None and req.vr in self.core.pending_restores and req.cmd == "deactivate":
                result = {**result, "restore_pending": True}
            if cmd not in ("list", "status", "ping"):
                event(log, logging.INFO, "request", cmd=cmd, vr=req.vr, setpoint_pps=req.setpoint_pps, ok=True)
            self.metrics.requests.labels(cmd, "ok").inc()
            return api.ok_reply(result, req.id)
        except ApiError as e:
            return self._refused(e, cmd)
        except Exception as e:  # a bug must not take the API down; it changes nothing it did not finish
            log.exception("request handler failed")
            self.metrics.requests.labels(cmd if cmd in api.COMMANDS else "?", "internal").inc()
            return api.error_reply(ApiError("internal", f"{type(e).__name__}: {e}"[:300]))

    # ------------------------------------------------------------------- state at start
    def _fit_state_to_host(self) -> None:
        """Check the loaded state against the backend and the configuration, before anything runs.

        - Every original record (of an instance or a pending restore) whose VR the backend has
          must be a record of that VR on this backend (:meth:`Host.check_original`); one that is
          not makes the daemon refuse to start, naming the file, the VR and why: it cannot know
          the VR's true original, and any guess would be a cap nobody chose (see
          docs/guide/daemon-reload-and-state.md).  Nothing is written then.  A record whose VR
          cannot be looked at now (a missing cgroup) is checked before the VR's first cap write
          (:meth:`ControlLoop.apply`): one that does not fit then gets no cap written at all.
        - An instance of a VR the configuration no longer names (:meth:`Host.configured_vrs`) is
          kept for the restore of its original only, never controlled, and reported.
        """
        path = self.cfg.state_path
        configured = getattr(self.host, "configured_vrs", None)
        names = configured() if configured is not None else None
        check = getattr(self.host, "check_original", None)
        for vr, record in self.core.saved_records() if check is not None else ():
            if names is not None and vr not in names:
                continue  # not a VR of this backend's configuration: restore only, below
            try:
                check(vr, record)
            except ValueError as e:
                raise SystemExit(
                    f"xtc daemon: state file {path}: VR {vr!r}: its original_record {json.dumps(record)[:200]} does not "
                    f"fit the {self.host.name} backend: {e}; not starting, nothing was written (set that "
                    f"original_record to null to restore its original_cap_percent instead: "
                    f"docs/guide/daemon-reload-and-state.md)"
                ) from None
            except HostAdapterError as e:
                self.control.unchecked_records.add(vr)
                event(log, logging.WARNING, "state_record_unchecked", vr=vr,
                      reason=f"cannot look at the VR now ({e}); its record is checked before its first cap write")
        if names is None:
            return
        for vr in self.core.restore_only(names):
            event(log, logging.WARNING, "state_vr_not_configured", vr=vr, path=str(path),
                  reason=f"VR {vr!r} is not in the configuration of the {self.host.name} backend: its instance "
                         f"is kept for the restore of its original cap only, never controlled")

    # ----------------------------------------------------------------------------- reload
    def reload(self) -> bool:
        """Re-read the configuration file; a bad or incompatible one is refused, the old kept."""
        if self.config_path is None:
            return False
        try:
            # Validated in full first (the schema, every section, the backend's own table, the
            # controller it builds), then compared with the running one; nothing is applied before.
            new = load_config(self.config_path)
            new_factory = controller_factory(new)
            fixed = reload_diff(self.cfg, new)
            if fixed:
                raise ConfigError(fixed[0], "cannot change without a restart" + (
                    f" (also: {', '.join(fixed[1:])})" if len(fixed) > 1 else "")
                    + "; restart the daemon to apply it", str(self.config_path))
            above = sorted((n, i.setpoint_pps) for n, i in self.core.instances.items()
                           if i.setpoint_pps > new.daemon.max_setpoint_pps)
            if above:
                raise ConfigError("daemon.max_setpoint_pps", f"{new.daemon.max_setpoint_pps:g} is below the setpoint of VR "
                                  f"{above[0][0]!r} ({above[0][1]:g} packets/s); lower that setpoint first",
                                  str(self.config_path))
            changed_period = new.daemon.control_period_s != self.cfg.daemon.control_period_s
            factory = new_factory if (new.controller != self.cfg.controller or changed_period) else None
        except Exception as e:  # whatever the file holds, the running configuration stays
            self.metrics.reloads.labels("refused").inc()
            error = str(e) if isinstance(e, (ConfigError, ValueError)) else f"{self.config_path}: {type(e).__name__}: {e}"
            event(log, logging.ERROR, "reload_refused", error=error, kept="the running configuration")
            return False
        if factory is not None:
            self.core.replace_controllers(factory)
        self.core.max_setpoint_pps = new.daemon.max_setpoint_pps
        self.core.reassert_period_s = new.daemon.reassert_period_s
        if self.metrics_port is not None:
            self.metrics.scrape_wait_s = _scrape_wait_s(new.daemon.control_period_s)
        if new.log != self.cfg.log:
            setup_logging(new.log.format, new.log.level)
        old_flat = self.cfg.flat()
        changed = sorted(k for k, v in new.flat().items() if old_flat.get(k) != v)
        self.cfg = new
        self.metrics.reloads.labels("ok").inc()
        event(log, logging.INFO, "reloaded", changed=changed)
        return True


def run_daemon(config_path: str | Path) -> int:
    """``xtc daemon --config FILE``: load, run until SIGTERM, restore caps.  Returns the exit code."""
    cfg = load_or_report(lambda: load_config(config_path), ConfigError, "xtc daemon")
    if cfg is None:
        return 2
    setup_logging(cfg.log.format, cfg.log.level)
    release_large_blocks()
    try:
        # Before the backend: the simulated one keeps its hypervisor file in the state directory.
        state_lock = lock_state_dir(cfg.state_path.parent)
    except StateFileError as e:
        print(f"xtc daemon: {e}", file=sys.stderr, flush=True)
        return 1
    ctx = None
    if cfg.manager.curve_secret_key_file:
        try:
            ctx = curve.secure_context(cfg.manager.curve_secret_key_file, cfg.manager.curve_clients_dir or "")[0]
        except (curve.CurveError, OSError, ValueError) as e:
            event(log, logging.CRITICAL, "curve_failed", key="manager.curve_secret_key_file", error=str(e))
            return 2
    else:
        for key in ("endpoint", "pub_endpoint"):
            ep = getattr(cfg.manager, key)
            if ep.startswith("tcp://") and reachable_without_curve(ep) is None:
                event(log, logging.WARNING, "manager_unauthenticated", key=f"manager.{key}", endpoint=ep,
                      note="a loopback TCP endpoint without CURVE: every local user can connect; "
                           "prefer an ipc:// socket (docs/guide/manager-api-security.md)")
    try:
        host = make_host(cfg)
    except (HostAdapterError, ConfigError, ImportError) as e:
        event(log, logging.CRITICAL, "backend_failed", backend=cfg.daemon.backend, error=str(e))
        return 1
    svc = DaemonService(cfg, host, config_path=config_path, context=ctx, state_lock=state_lock)
    svc.manage_gc = True
    svc.notifier = Notifier.from_environ()
    svc.install_signal_handlers()
    return svc.run()

"""The XCo controller in real time: :class:`~xtc.xco.controller.ControllerCore` behind one UDP socket.

:class:`ControllerService` is the loop around the pure core: one UDP socket, a timer for the next
slot boundary (minus the lead) and the heartbeat check, Prometheus metrics, structured logs, the
state file (registered hosts and their backlogs, written atomically).  ``xtc xco controller -c FILE``.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import select
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

from . import protocol as P
from .protocol import wall_us
from xtc.service.metrics import ServiceMetrics, labelled_counter
from .auth import AuthError, load_key, opened, seal
from .controller import DROP_REASONS, ControllerCore, Send
from .controller_config import ControllerConfig, ControllerConfigError, load_controller_config
from xtc.service.cli import load_or_report
from xtc.service.notify import Notifier
from xtc.service.logs import event, setup_logging
from xtc.service.signals import StopOnSignal
from xtc.service.state import StateFileError, read_state, save_state

__all__ = ["ControllerService", "run_controller"]

log = logging.getLogger("xtc.xco.controller")


class _Metrics(ServiceMetrics):
    def __init__(self, core_ref: Callable[[], ControllerCore]):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        super().__init__("xco_controller")
        self.event_seconds = self.histogram(
            "xco_event_seconds", "Wall time to handle one scheduling event (decode, scheduler, encode), seconds",
            (5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 5e-3, 0.02))

        def collect() -> Any:
            core = core_ref()
            yield labelled_counter("xco_events", "Scheduling events", "kind", core.events)
            yield labelled_counter("xco_messages_dropped", "Datagrams dropped", "reason", core.dropped, DROP_REASONS)
            yield labelled_counter("xco_messages_received", "Valid datagrams received", "type", core.received)
            yield CounterMetricFamily("xco_directives_sent", "Directives sent (one datagram each)",
                                      value=core.directives_sent)
            yield CounterMetricFamily("xco_directives_late", "Directives sent after their slice began",
                                      value=core.directives_late)
            yield GaugeMetricFamily("xco_hosts_registered", "Registered hosts", value=len(core.hosts))

        self.collect_from(collect)


class ControllerService(StopOnSignal):
    """The controller in real time: the core behind one UDP socket.

    Parameters
    ----------
    cfg : ControllerConfig
        The loaded configuration (its ``topology`` path is read here).
    clock_us : callable
        Wall clock, microseconds since the Unix epoch (injectable for tests).
    """

    def __init__(self, cfg: ControllerConfig, clock_us: Callable[[], int] = wall_us):
        from .topology import load_topology

        self.cfg = cfg
        self.clock_us = clock_us
        self.topo = load_topology(cfg.topology)
        self.digest = P.topology_digest(Path(cfg.topology).read_bytes())
        self.core = ControllerCore(
            self.topo, self.digest, clock_us(), slice_us=cfg.slice_us, lead_us=cfg.lead_us, mode=cfg.mode,
            heartbeat_interval_us=cfg.heartbeat_interval_us, heartbeat_misses=cfg.heartbeat_misses,
            clock_window_us=cfg.clock_window_us, session=secrets.randbits(32),
            rate_link_fraction=cfg.rate_link_fraction)
        #: The shared key (``auth_key_file``): every datagram sent is sealed, every one received must
        #: verify (:mod:`xtc.xco.auth`); None: no authentication.
        self.key = load_key(cfg.auth_key_file) if cfg.auth_key_file is not None else None
        self.metrics = _Metrics(lambda: self.core)
        self.sock: socket.socket | None = None
        self.stop = False
        self.stop_signal: int | None = None
        self.metrics_port: int | None = None
        self._last_save = -math.inf
        self._save_cv = threading.Condition()
        self._save_doc: dict[str, Any] | None = None
        self._writer_stop = False
        self._writer_thread: threading.Thread | None = None

    def open(self) -> None:
        """Load the state, bind the socket, start the metrics endpoint, send the restored directives."""

        try:
            doc = read_state(self.cfg.state_file)
        except StateFileError as e:
            raise SystemExit(f"xtc xco controller: {e}; move it away to start without state") from None
        host, port = self.cfg.listen_address
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((host, port))
        self.sock.setblocking(False)
        sends: list[Send] = []
        if doc is not None:
            try:
                sends = self.core.load_state(doc, self.clock_us())
            except ValueError as e:
                raise SystemExit(f"xtc xco controller: state file {self.cfg.state_file}: {e}; "
                                 "move it away to start without state") from None
        save_state(self.cfg.state_file, self.core.to_state())
        self._writer_thread = threading.Thread(target=self._writer, name="xco-state-writer", daemon=True)
        self._writer_thread.start()
        if self.cfg.metrics.enabled:
            self.metrics_port = self.metrics.serve(self.cfg.metrics.address, self.cfg.metrics.port)
        self._flush_notes()
        event(log, logging.INFO, "started", pid=os.getpid(), listen="%s:%d" % self.sock.getsockname()[:2],
              topology=self.cfg.topology, hosts=self.topo.n_hosts, mode=self.cfg.mode,
              slice_us=self.cfg.slice_us, lead_us=self.cfg.lead_us, session=self.core.session,
              metrics_port=self.metrics_port,
              **({"rate_link_fraction": self.cfg.rate_link_fraction} if self.cfg.mode == "rate" else {}))
        self._send(sends)

    def _send(self, sends: list[Send]) -> None:
        assert self.sock is not None
        key = self.key
        for s in sends:
            try:
                self.sock.sendto(s.data if key is None else seal(s.data, key), s.addr)
            except OSError as e:  # a full buffer or an unreachable host must not stop the controller
                self.core.dropped["send_error"] += 1
                if log.isEnabledFor(logging.DEBUG):

                    event(log, logging.DEBUG, "send_failed", host=s.host, error=str(e))

    def _flush_notes(self) -> None:

        for name, fields in self.core.notes:
            event(log, logging.INFO, name, **fields)
        self.core.notes.clear()

    def _save(self, force: bool) -> None:
        """Hand a changed state to the writer thread (fsync must not delay a slot boundary)."""
        now = time.monotonic()
        if not (force or (self.core.dirty and now - self._last_save >= self.cfg.state_save_interval_s)):
            return
        self._last_save = now
        with self._save_cv:
            self._save_doc = self.core.to_state()
            self._save_cv.notify()

    def _writer(self) -> None:

        while True:
            with self._save_cv:
                while self._save_doc is None and not self._writer_stop:
                    self._save_cv.wait()
                doc, self._save_doc = self._save_doc, None
                if doc is None:
                    return
            try:
                save_state(self.cfg.state_file, doc)
            except StateFileError as e:
                event(log, logging.ERROR, "state_save_failed", error=str(e))

    def _timed(self, f: Callable[[], list[Send]]) -> list[Send]:
        # the events of one socket read are handled together: each counted with their mean time
        n0 = sum(self.core.events.values())
        t0 = time.perf_counter()
        out = f()
        n = sum(self.core.events.values()) - n0
        if n:
            dt = (time.perf_counter() - t0) / n
            for _ in range(n):
                self.metrics.event_seconds.observe(dt)
        return out

    def loop(self, until_us: int | None = None) -> None:
        """Receive, decide, send; until stopped (or ``until_us``)."""
        assert self.sock is not None
        sock = self.sock
        while not self.stop:
            now = self.clock_us()
            if until_us is not None and now >= until_us:
                return
            timeout_s = max(0.0, (self.core.next_deadline_us() - now) / 1e6)
            if until_us is not None:
                timeout_s = min(timeout_s, max(0.0, (until_us - now) / 1e6))
            try:
                ready, _, _ = select.select([sock], [], [], min(timeout_s, 0.5))
            except InterruptedError:
                continue
            if ready:
                # every datagram waiting (up to 256), then handled at one instant (handle_many: the
                # backlog reports and give-ups among them in one scheduler call)
                got: list[tuple[bytes, tuple[str, int]]] = []
                for _ in range(256):
                    try:
                        data, addr = sock.recvfrom(P.MAX_DATAGRAM + 1)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:  # e.g. ICMP port unreachable reported on the socket
                        continue
                    data = opened(data, self.key, self.core.dropped)
                    if data is None:
                        continue
                    got.append((data, (addr[0], addr[1])))
                if got:
                    self._send(self._timed(lambda: self.core.handle_many(got, self.clock_us())))
            self._send(self._timed(lambda: self.core.tick(self.clock_us())))
            if self.core.notes:
                self._flush_notes()
            self._save(force=False)
            m = time.monotonic()
            self.notifier.watchdog(m, lambda: f"{len(self.core.hosts)} host(s) registered, "
                                              f"{self.core.directives_sent} directive(s) sent")

    def close(self) -> None:
        """Save the state and close the socket."""

        self._save(force=True)
        with self._save_cv:
            self._writer_stop = True
            self._save_cv.notify()
        if self._writer_thread is not None:
            self._writer_thread.join()  # the last state is written before the controller exits
        if self.sock is not None:
            self.sock.close()
        event(log, logging.INFO, "stopped", signal=self.stop_signal, dropped=dict(self.core.dropped),
              directives_sent=self.core.directives_sent)

    def run(self) -> int:
        self.open()
        # Serving now: the state is loaded and the socket bound.
        assert self.sock is not None
        self.notifier.ready("listening on %s:%d, %d host(s) registered"
                            % (*self.sock.getsockname()[:2], len(self.core.hosts)))
        try:
            self.loop()
        finally:
            self.notifier.stopping("saving the state")
            self.close()
            self.stopped()
        return 0


def run_controller(config_path: str | Path) -> int:
    """``xtc xco controller -c FILE``: load, validate, run until SIGTERM/SIGINT.  Returns the exit code."""
    import sys

    from .topology import TopologyError

    cfg = load_or_report(lambda: load_controller_config(config_path), ControllerConfigError, "xtc xco controller")
    if cfg is None:
        return 2
    setup_logging(cfg.log.format, cfg.log.level)
    try:
        svc = ControllerService(cfg)
    except AuthError as e:
        print(f"xtc xco controller: 'auth_key_file': {e}", file=sys.stderr)
        return 2
    except (TopologyError, OSError) as e:
        print(f"xtc xco controller: topology: {e}", file=sys.stderr)
        return 2
    svc.notifier = Notifier.from_environ()
    svc.install_signal_handlers()
    return svc.run()

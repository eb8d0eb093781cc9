"""The one signal chassis (xtc.service.signals.StopOnSignal) every service uses: the daemon (with
SIGHUP for reload), XCo's controller and agent, the policer's supervisor (waiting on an event)."""

from __future__ import annotations

import os
import signal
import threading

from xtc.service.signals import StopOnSignal


def test_sigterm_sets_stop_and_wakes_a_waiter_and_the_old_handlers_come_back():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    flags = StopOnSignal()
    flags.stop_event = threading.Event()
    flags.install_signal_handlers()
    try:
        assert signal.getsignal(signal.SIGHUP) == before[signal.SIGHUP]  # no reload asked: SIGHUP untouched
        os.kill(os.getpid(), signal.SIGTERM)
        assert flags.stop_event.wait(5)
        assert flags.stop and flags.stop_signal == signal.SIGTERM and not flags.reload
    finally:
        flags.stopped()
        flags.restore_signal_handlers()
    assert {s: signal.getsignal(s) for s in before} == before


def test_sighup_sets_reload_only_where_the_service_reloads():
    flags = StopOnSignal()
    flags.install_signal_handlers(reload=True)
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a no-op system call: the handler has run
        assert flags.reload and not flags.stop
    finally:
        flags.restore_signal_handlers()

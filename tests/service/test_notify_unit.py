"""xtc.service.notify on a real datagram socket: the protocol's messages, the watchdog's cadence on
an injected clock, the environment handling, and that a broken socket is never fatal."""

from __future__ import annotations

import os

import pytest

from xtc.service.notify import Notifier


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_no_notify_socket_is_a_no_op() -> None:
    env: dict[str, str] = {}
    n = Notifier.from_environ(env)
    assert not n.enabled
    assert n.ready("x") is False and n.watchdog() is False and n.stopping() is False
    assert n.watchdog_due_in_s() == float("inf")


def test_messages_reach_a_path_socket(notify_socket) -> None:
    clock = Clock()
    env = {"NOTIFY_SOCKET": notify_socket.address, "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid()),
           "OTHER": "kept"}
    n = Notifier.from_environ(env, clock=clock)
    assert env == {"OTHER": "kept"}  # children do not inherit systemd's variables
    assert n.enabled and n.watchdog_interval_s == 1.0
    assert n.ready("serving\n3 VRs")
    _, _, f = notify_socket.wait_for("READY")
    assert f == {"READY": "1", "STATUS": "serving 3 VRs", "WATCHDOG": "1"}  # one line, the watchdog fed too
    assert n.watchdog() is False  # fed at READY: not due for 1 s
    assert n.watchdog_due_in_s() == pytest.approx(1.0)
    clock.t += 0.999
    assert n.watchdog() is False
    clock.t += 0.001
    assert n.watchdog() is True
    assert n.watchdog() is False
    clock.t += 5.0  # a late loop: one message, then the cadence restarts from now
    assert n.watchdog() is True and n.watchdog_due_in_s() == pytest.approx(1.0)
    assert n.stopping("bye")
    notify_socket.wait_for("STOPPING")
    assert [f for _, f in notify_socket.with_key("WATCHDOG")] == [
        {"READY": "1", "STATUS": "serving 3 VRs", "WATCHDOG": "1"}, {"WATCHDOG": "1"}, {"WATCHDOG": "1"}]
    n.close()


def test_abstract_namespace_address(abstract_notify_socket) -> None:
    n = Notifier(abstract_notify_socket.address)
    assert n.status("hello")
    assert abstract_notify_socket.wait_for("STATUS")[2] == {"STATUS": "hello"}
    assert n.watchdog() is False  # no WATCHDOG_USEC: no watchdog


def test_watchdog_of_another_process_is_off(notify_socket) -> None:
    n = Notifier.from_environ({"NOTIFY_SOCKET": notify_socket.address, "WATCHDOG_USEC": "1000000",
                               "WATCHDOG_PID": "1"})
    assert n.enabled and n.watchdog_interval_s is None


@pytest.mark.parametrize("usec", ["0", "-5", "ten"])
def test_bad_watchdog_usec_turns_the_watchdog_off(notify_socket, usec, caplog) -> None:
    n = Notifier.from_environ({"NOTIFY_SOCKET": notify_socket.address, "WATCHDOG_USEC": usec})
    assert n.enabled and n.watchdog_interval_s is None
    if usec != "0":
        assert "WATCHDOG_USEC" in caplog.text


def test_relative_notify_socket_is_refused(caplog) -> None:
    n = Notifier("relative/path")
    assert not n.enabled and "NOTIFY_SOCKET" in caplog.text


def test_a_gone_socket_is_counted_never_raised(tmp_path, caplog) -> None:
    n = Notifier(str(tmp_path / "nobody-listens"), watchdog_usec=1000)
    assert n.ready() is False
    assert n.watchdog(1e9) is False
    assert n.errors == 2
    assert caplog.text.count("not sent") == 1  # logged once


def test_watchdog_carries_a_changed_status(notify_socket) -> None:
    clock = Clock()
    n = Notifier(notify_socket.address, watchdog_usec=2_000_000, clock=clock)
    calls: list[int] = []

    def status() -> str:
        calls.append(1)
        return f"{len(calls) // 2} hosts"

    assert n.ready("starting")
    assert n.watchdog(status=status) is False and calls == []  # not due: the status is not even built
    for _ in range(3):
        clock.t += 1.0
        assert n.watchdog(status=status)
    i = -1
    for _ in range(4):  # every WATCHDOG datagram (the ready one and three), not only up to the second STATUS
        i, _, _ = notify_socket.wait_for("WATCHDOG", after=i + 1)
    got = [f for _, f in notify_socket.with_key("WATCHDOG")][1:]
    assert got == [{"WATCHDOG": "1", "STATUS": "0 hosts"}, {"WATCHDOG": "1", "STATUS": "1 hosts"},
                   {"WATCHDOG": "1"}]  # the third: unchanged, not repeated

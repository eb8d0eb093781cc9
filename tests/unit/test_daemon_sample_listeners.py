"""The daemon builds its samples only for someone who reads them: a subscriber of its PUB socket
(real ZeroMQ sockets over ipc://) or a Prometheus scrape (its real HTTP endpoint)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
import zmq

from xtc.daemon.api import decode_samples
from xtc.daemon.config import loads_config
from xtc.daemon.service import DaemonService
from xtc_lab.sim.host import SimHost

from fakes.daemon import Clock, daemon_toml
from procs import wait_for

VRS = '[[sim.vr]]\nname = "vr1"\ninitial_cap_percent = 80.0\n'


def make(tmp_path, metrics: bool = False):
    text = daemon_toml(tmp_path, 'backend = "sim"\ncontrol_period_s = 1.0\n', VRS)
    if metrics:
        text = text.replace("enabled = false", 'enabled = true\naddress = "127.0.0.1"\nport = 0')
    cfg = loads_config(text)
    clock = Clock()
    svc = DaemonService(cfg, SimHost.from_config(cfg, clock=clock), clock=clock, wall_clock=lambda: 0.0)
    svc.open()
    built: list[int] = []
    real = svc.core.sample_rows

    def counted():
        built.append(1)
        return real()

    svc.core.sample_rows = counted  # type: ignore[method-assign]
    return svc, clock, built


def step(svc, clock, periods: int = 1) -> None:
    for _ in range(periods):
        clock.t += 1.0
        svc.run_period(clock.t, 1.0)


def test_samples_are_built_and_sent_only_while_a_subscriber_takes_their_topic(tmp_path):
    svc, clock, built = make(tmp_path)
    ctx = zmq.Context.instance()
    endpoint = svc.pub.getsockopt_string(zmq.LAST_ENDPOINT)
    other = sub = None
    try:
        assert json.loads(svc.handle_message([b'{"v": 1, "cmd": "activate", "vr": "vr1", "setpoint_pps": 30000}']))["ok"]
        step(svc, clock, 3)
        assert built == []  # nobody listens: no rows, no JSON
        other = ctx.socket(zmq.SUB)
        other.connect(endpoint)
        other.setsockopt(zmq.SUBSCRIBE, b"something-else")
        wait_for(lambda: b"something-else" in svc.subscriptions or svc.sample_listeners(), 5.0,
                 "the other topic's subscription", 0.005)
        step(svc, clock, 2)
        assert built == []  # a subscriber of another topic does not count
        sub = ctx.socket(zmq.SUB)
        sub.connect(endpoint)
        sub.setsockopt(zmq.SUBSCRIBE, b"samples")
        wait_for(svc.sample_listeners, 5.0, "the samples' subscriber", 0.005)
        step(svc, clock)
        assert len(built) == 1
        assert sub.poll(2000)
        topic, body = sub.recv_multipart()
        (sample,) = decode_samples(body)
        assert topic == b"samples" and sample["vr"] == "vr1" and sample["setpoint_pps"] == 30000
        sub.close(0)
        sub = None
        wait_for(lambda: not svc.sample_listeners(), 5.0, "the subscriber to leave", 0.005)
        n = len(built)
        step(svc, clock, 2)
        assert len(built) == n  # the last subscriber left: back to none
    finally:
        for s in (other, sub):
            if s is not None:
                s.close(0)
        svc.close()


def _scrape(port: int, out: list) -> None:
    out.append(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode())


def _measured(text: str, name: str = "xtc_vr_cap_ratio") -> float:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(name + '{vr="vr1"}')]
    return float(line.rsplit(" ", 1)[1])


def test_a_scrape_waits_for_the_next_period_and_gets_its_rows(tmp_path):
    svc, clock, built = make(tmp_path, metrics=True)
    try:
        assert svc.metrics_port and svc.metrics.scrape_wait_s == 2.0
        assert json.loads(svc.handle_message([b'{"v": 1, "cmd": "activate", "vr": "vr1", "setpoint_pps": 30000}']))["ok"]
        step(svc, clock, 3)
        assert built == []  # no scrape, no subscriber: no rows
        out: list = []
        t = threading.Thread(target=_scrape, args=(svc.metrics_port, out))
        t.start()
        wait_for(svc.metrics.rows_wanted, 5.0, "the scrape to want rows", 0.005)
        time.sleep(0.05)
        assert t.is_alive() and not out  # the scrape waits for the period
        step(svc, clock)
        t.join(5)
        assert len(built) == 1 and out
        assert _measured(out[0]) == pytest.approx(svc.core.describe("vr1")["cap_percent"] / 100)
        assert _measured(out[0], "xtc_vr_forwarded_packets_total") > 0  # counted every period, read or not
        assert not svc.metrics.rows_wanted()
        step(svc, clock, 2)
        assert len(built) == 1  # the scrape was answered: no rows until the next one
    finally:
        svc.close()


def test_a_scrape_takes_the_last_rows_when_no_period_comes(tmp_path):
    svc, clock, built = make(tmp_path, metrics=True)
    try:
        svc.metrics.scrape_wait_s = 0.3
        assert json.loads(svc.handle_message([b'{"v": 1, "cmd": "activate", "vr": "vr1", "setpoint_pps": 30000}']))["ok"]
        out: list = []
        t = threading.Thread(target=_scrape, args=(svc.metrics_port, out))
        t.start()
        wait_for(svc.metrics.rows_wanted, 5.0, "the scrape to want rows", 0.005)
        step(svc, clock)
        t.join(5)
        first = _measured(out[0])
        t0 = time.monotonic()
        _scrape(svc.metrics_port, out)  # the loop is stalled: no period runs
        assert 0.25 <= time.monotonic() - t0 < 3.0
        assert _measured(out[1]) == first  # the last rows, not nothing
    finally:
        svc.close()


def test_cap_changes_are_counted_per_vr_every_period(tmp_path):
    """``xtc_vr_cap_changes_total{vr}`` counts every cap the daemon writes or restores, read or not;
    its sum is ``xtc_cap_changes_total{outcome="ok"}``."""
    svc, clock, _built = make(tmp_path)
    try:
        assert json.loads(svc.handle_message([b'{"v": 1, "cmd": "activate", "vr": "vr1", "setpoint_pps": 30000}']))["ok"]
        step(svc, clock, 6)
        assert json.loads(svc.handle_message([b'{"v": 1, "cmd": "deactivate", "vr": "vr1"}']))["ok"]  # a restore
        reg = svc.metrics.registry
        per_vr = reg.get_sample_value("xtc_vr_cap_changes_total", {"vr": "vr1"})
        assert per_vr is not None and per_vr >= 2
        assert per_vr == reg.get_sample_value("xtc_cap_changes_total", {"outcome": "ok"})
    finally:
        svc.close()

"""The XTC daemon, as a process, holds a real LXC VR at its setpoint under a real libvirtd, and survives faults.

Set-up (shared by the tests of this module): one LXC VR under the lab's libvirtd
(:mod:`xtc_lab.lab.netlab`: its only process is the userspace forwarder, so its CPU cap limits what it
forwards) between two host bridges, a paced stream of 64-byte UDP packets from a generator
namespace (``OFFERED_PPS``, about 100 kp/s).  The VR's original CPU setting is deliberately not
the one in its domain XML (libvirt's default ``vcpu_period`` 100000 us): before each test it is set
live to ``vcpu_period`` 50000 us with no quota (``vcpu_quota`` -1), as an operator might.  A VR that
restarts comes back with its XML's period, so restoring "the original" from a percentage (which
keeps the period found) and from the daemon's exact record differ.

``xtc daemon -c FILE`` runs as a separate process with the libvirt backend on ``lxc:///``, the VR
named in ``[libvirt] domains``; the tests talk to it only through its manager API (ZeroMQ:
:class:`~xtc.daemon.ctl.ManagerClient` and the ``xtc ctl`` command line), its PUB stream and its
signals.  Rates are measured independently of the daemon: the test reads ``/proc/net/dev``
itself (:func:`xtc_lab.lab.netlab.read_packet_counters`, the lab's own parser) and sums the host-side
RX packets of the VR's two vifs (what the VR forwarded), which is the quantity XTC controls.  Caps
are read back through libvirt (``schedulerParameters()`` on a fresh connection).

What is proved:

* setpoints (scaled to what the unlimited VR forwards at the start of each test, the median of
  three 2 s samples, so the tests run at whatever rate a busy host forwards): once a 2 s mean is within
  10% (the controller settled: longer on a busy host), the forwarded rate over the next 15 s
  (packets over seconds, from /proc/net/dev) is within 10% of a
  setpoint at 30% of the rate the unlimited VR forwards; then within 10% of a second setpoint set
  live with ``xtc ctl setpoint``; SIGTERM gives the domain back exactly ``vcpu_period`` 50000 and
  ``vcpu_quota`` -1;
* SIGKILL: the cap stays as XTC set it (the VR stays limited); the VR then restarts while no
  daemon runs (unlimited again, with its XML's period); a new daemon resumes the same instance and
  setpoint with the exact original record, caps the VR again, holds the setpoint, and its SIGTERM
  restores the original from before XTC ever touched the VR (period 50000, no quota: not the cap
  found at restart, nor the period found at stop);
* the VR destroyed and started again, first with the same host interface names (to the daemon:
  counters that fall back to zero, a counter reset) then with new ones (a new domain id and new
  vifs, found again in the live domain XML): no published rate is ever huge, no cap outside
  1..100%, the cap is written again to each new domain, and the setpoint is held again;
* libvirtd restarted under the running daemon (:meth:`xtc_lab.lab.libvirtd.Libvirtd.restart`): the
  quota stays set throughout (never unlimited, no 0.5 s rate over 1.5 times the setpoint: on a busy
  host restarted again, up to three times in all), the rate is within 10% of
  the setpoint afterwards, and the daemon reconnects (a new setpoint is written through the new
  connection).

Every "held" (a mean within 10% of the setpoint once a 2 s mean was) is settled and measured up to three
times (:func:`held_mean`): a 2 s mean can touch the band while the cap still swings, and a stall of a busy
host can move one mean; the tolerance is the same every time.

Xen cannot run on this host (no Xen hypervisor, see notes on the host lab), so the Xen ``cap``
path (integer percent, 0 = UNLIMITED never written by accident, restore of an original 0) is tested
against its contract on the fake hypervisor in tests/unit/test_actuators_xen.py,
tests/unit/test_actuators_original_from_cap.py (``test_xen_*``), tests/unit/test_daemon_libvirt_backend.py
(``test_xen_never_writes_zero_and_restores_unlimited``) and tests/unit/test_daemon_exact_originals.py
(``test_xen_record_restores_cap_zero_only_from_the_record``).

Needs root and the libvirt LXC driver (skipped otherwise, with the reason).  Everything it creates is
named with the lab's random prefix and removed afterwards, also on failure.  Run with ``-s`` to see
the measured rates and recovery times.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from procs import DaemonProc, measured_until_held, waited_s
from xtc_lab.lab.harness import daemon_config_text
from xtc.daemon.ctl import ManagerClient, watch_samples
from xtc.host.libvirt_conn import LibvirtConn

TEST_TIMEOUT_S = 150
pytestmark = [pytest.mark.root, pytest.mark.libvirt, pytest.mark.slow, pytest.mark.timeout(TEST_TIMEOUT_S)]

OFFERED_PPS = 100_000
PAYLOAD_BYTES = 64
ORIG_PERIOD_US = 50_000  # set live; the domain XML has libvirt's default 100000
ORIG_QUOTA_US = -1
XML_PERIOD_US = 100_000
ORIGINAL = {"vcpu_period": ORIG_PERIOD_US, "vcpu_quota": ORIG_QUOTA_US}
TOLERANCE = 0.10  # the mean forwarded rate must be within 10% of the setpoint
# The lowest free rate the tests run at: a 30% setpoint is then >= 1500 pps, 3000 packets in a 2 s
# mean, so a 10% error is 300 packets, far above the counting noise (a few packets).
MIN_FREE_PPS = 5_000
# Every test's stream outlasts the test's time limit (it is stopped when the test ends): on a busy
# host the daemon's start and ``xtc ctl`` take seconds, and a stream that ended mid-test would
# read as a setpoint missed.
STREAM_S = TEST_TIMEOUT_S



def say(msg: str) -> None:
    print(f"\n[e2e] {msg}", flush=True)


# ------------------------------------------------------------------------ host measurement
def forwarded_counter(vifs: tuple[str, ...]) -> int | None:
    """Host-side RX packets summed over ``vifs`` (None if one of them is missing)."""
    from xtc_lab.lab.netlab import read_packet_counters

    c = read_packet_counters()
    if any(v not in c for v in vifs):
        return None
    return sum(c[v][0] for v in vifs)


def forwarded_pps(vifs: tuple[str, ...], seconds: float) -> float:
    """Packets/s the VR forwarded over the next ``seconds`` (read from /proc/net/dev here)."""
    c0, t0 = forwarded_counter(vifs), time.monotonic()
    time.sleep(seconds)
    c1, t1 = forwarded_counter(vifs), time.monotonic()
    assert c0 is not None and c1 is not None, f"VR interfaces {vifs} missing from /proc/net/dev"
    assert c1 >= c0, "a vif was recreated during the measurement"
    return (c1 - c0) / (t1 - t0)


def kpps(rates: list[float]) -> str:
    """``rates`` in thousands of pps, one decimal, all of them (a failure's message shows the whole trace)."""
    return " ".join(f"{r / 1000:.1f}" for r in rates) + " kpps"


class RateTrace:
    """Samples the VR's forwarded rate every ``dt_s`` from /proc/net/dev in a thread."""

    def __init__(self, vifs: Callable[[], tuple[str, ...]], dt_s: float = 0.5):
        self.vifs, self.dt_s = vifs, dt_s
        self.points: list[tuple[float, float]] = []  # (monotonic time, pps over the last dt)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        prev: tuple[float, int, tuple[str, ...]] | None = None
        while not self._stop.is_set():
            vifs = self.vifs()
            c, t = forwarded_counter(vifs), time.monotonic()
            if c is not None and prev is not None and prev[2] == vifs and c >= prev[1]:
                self.points.append((t, (c - prev[1]) / (t - prev[0])))
            prev = (t, c, vifs) if c is not None else None
            self._stop.wait(self.dt_s)

    def __enter__(self) -> "RateTrace":
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(5)

    def between(self, t0: float, t1: float) -> list[float]:
        return [r for t, r in self.points if t0 <= t <= t1]


# ---------------------------------------------------------------------------- libvirt reads
def sched_params(uri: str, name: str) -> dict[str, int] | None:
    """The live scheduler parameters of domain ``name`` on a fresh connection (None if not running)."""
    import libvirt

    libvirt.registerErrorHandler(lambda _c, _e: None, None)
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError:
        return None
    try:
        dom = conn.lookupByName(name)
        if not dom.isActive():
            return None
        p = dom.schedulerParameters()
        return {"vcpu_period": int(p["vcpu_period"]), "vcpu_quota": int(p["vcpu_quota"]), "id": int(dom.ID())}
    except libvirt.libvirtError:
        return None
    finally:
        conn.close()


def quota_limited(p: dict[str, int] | None) -> bool:
    """The domain runs under a finite quota of at least 1000 us (XTC's cap), not unlimited."""
    return p is not None and 1000 <= p["vcpu_quota"] < 17592186044415


def cap_percent(p: dict[str, int] | None) -> float:
    """The quota as a cap in percent of one CPU (period-independent)."""
    assert p is not None and quota_limited(p), p
    return 100.0 * p["vcpu_quota"] / p["vcpu_period"]


# ------------------------------------------------------------------------------- fixtures
class Lab:
    """The module's lab: one LXC VR, its free (unlimited) forwarding rate and a running stream."""

    def __init__(self, netlab: Any, uri: str, libvirtd: Any):
        self.netlab = netlab
        self.vr = netlab.vrs[0]
        self.uri = uri
        self.libvirtd = libvirtd
        self.free_pps = 0.0

    @property
    def vifs(self) -> tuple[str, ...]:
        return tuple(self.vr.vifs)

    def restart_vr(self, new_vifs: bool) -> None:
        """Destroy the VR's domain and start it again (same XML; new vif names if ``new_vifs``)."""
        import libvirt

        from xtc_lab.lab.netlab import NetLab, lxc_domain_xml

        conn = libvirt.open(self.uri)
        try:
            conn.lookupByName(self.vr.name).destroy()  # transient: it is gone
            gone = waited_s(lambda: not any(Path(f"/sys/class/net/{v}").exists() for v in self.vifs), 10.0, 0.05)
            assert gone is not None, f"vifs {self.vifs} still there after destroy"
            if new_vifs:
                self.vr.vifs = NetLab._free_vifs()
            init = [str(self.netlab.forwarder), "-w", "0", "eth0", "eth1"]
            xml = lxc_domain_xml(self.vr.name, init, self.vr.bridges, self.vr.vifs, ORIG_QUOTA_US, XML_PERIOD_US)
            conn.createXML(xml, 0)
        finally:
            conn.close()
        NetLab._wait_links(self.vr.vifs)

    def measure_free(self) -> None:
        """Measure what the unlimited VR forwards now (``free_pps``): the median of 3 samples of 2 s.

        Measured before every test, not once per module: the setpoints scale to what this host
        forwards at the time (a shared machine's load changes between tests).  The median, not the
        best, because the setpoints must stay reachable for the whole test: one sample disturbed in
        either direction (a burst of other work, or a quiet moment) does not set them.
        """
        with self.stream(10) as s:
            time.sleep(1.5)
            samples = [forwarded_pps(self.vifs, 2.0) for _ in range(3)]
            s.stop()
        self.free_pps = sorted(samples)[1]
        say(f"lab {self.netlab.prefix}: VR {self.vr.name}, offered {OFFERED_PPS} pps of {PAYLOAD_BYTES}-byte UDP, "
            f"unlimited VR forwards {', '.join(f'{r:.0f}' for r in samples)} pps (median {self.free_pps:.0f})")
        # Not a skip: the setpoints scale to any rate; below this floor the lab itself is broken
        # (a forwarder that does not forward), or a 2 s mean of a 30% setpoint has too few packets.
        assert self.free_pps >= MIN_FREE_PPS, (
            f"the unlimited VR forwards only {samples} pps (floor {MIN_FREE_PPS}): the lab does not forward")

    def stream(self, seconds: float) -> Any:
        from xtc_lab.lab.traffic import start_udp_stream

        return start_udp_stream(self.netlab, self.vr, OFFERED_PPS, duration_s=seconds, payload_bytes=PAYLOAD_BYTES)


@pytest.fixture(scope="module")
def lab(libvirtd: Any) -> Iterator[Lab]:
    from xtc_lab.lab.netlab import NetLab

    netlab = NetLab(uri=libvirtd.uri)  # type: ignore[attr-defined]
    try:
        netlab.add_vr(vcpu_quota_us=ORIG_QUOTA_US, vcpu_period_us=XML_PERIOD_US)
        yield Lab(netlab, libvirtd.uri, libvirtd)  # type: ignore[attr-defined]
    finally:
        netlab.teardown()


def set_live(uri: str, name: str, params: dict[str, int]) -> None:
    import libvirt

    conn = libvirt.open(uri)
    try:
        conn.lookupByName(name).setSchedulerParametersFlags(dict(params), libvirt.VIR_DOMAIN_AFFECT_LIVE)
    finally:
        conn.close()


@pytest.fixture
def at_original(lab: Lab) -> Lab:
    """The VR runs with its original live setting (period 50000 us, no quota), not its XML's."""
    p = sched_params(lab.uri, lab.vr.name)
    assert p is not None, f"domain {lab.vr.name} not running"
    if {k: p[k] for k in ORIGINAL} != ORIGINAL:
        set_live(lab.uri, lab.vr.name, ORIGINAL)
    assert_original(lab)
    lab.measure_free()  # unlimited now: the setpoints scale to what it forwards at this time
    return lab


@pytest.fixture
def daemon(tmp_path: Path, lab: Lab) -> Iterator[Callable[..., Any]]:
    """Start ``xtc daemon`` processes on one config/state directory; all killed at the end."""
    cfg = tmp_path / "xtcd.toml"
    cfg.write_text(daemon_config_text(tmp_path, lab.uri, [lab.vr.name], daemon_extra={"proc_net_dev": "/proc/net/dev"}))
    procs: list[Any] = []
    clients: list[ManagerClient] = []

    def start() -> Any:
        d = DaemonProc(cfg)
        procs.append(d)
        d.wait_event("started", timeout_s=30)
        d.dir = tmp_path
        d.client = ManagerClient(f"ipc://{tmp_path}/mgr.sock", timeout_s=10)
        clients.append(d.client)
        return d

    try:
        yield start
    finally:
        for c in clients:
            c.close()
        for d in procs:
            d.kill()


class Samples:
    """Collects the daemon's published per-VR samples (its own view, for the reset checks)."""

    def __init__(self, pub: str, vr: str):
        self.items: list[dict[str, Any]] = []
        self._stop = False
        self._t = threading.Thread(target=self._run, args=(pub, vr), daemon=True)

    def _run(self, pub: str, vr: str) -> None:
        while not self._stop:
            for s in watch_samples(pub, vr, timeout_s=1.0):
                self.items.append(s)
                if self._stop:
                    return

    def __enter__(self) -> "Samples":
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._t.join(5)


def setpoint_for(lab: Lab, fraction: float) -> float:
    return float(round(fraction * min(lab.free_pps, OFFERED_PPS), -2))


def activate_and_settle(lab: Lab, d: Any, setpoint_pps: float, timeout_s: float = 20.0) -> float:
    """Activate the VR at ``setpoint_pps``; return the seconds until a 2 s mean is within 10%."""
    res = d.client.call("activate", vr=lab.vr.name, setpoint_pps=setpoint_pps)
    assert res["state"] == "active" and res["original_record"]["params"] == ORIGINAL, res
    t, _ = settled_s(lab, setpoint_pps, timeout_s)
    assert t is not None, f"rate not within 10% of {setpoint_pps:.0f} pps within {timeout_s} s: {d.client.call('status', vr=lab.vr.name)}"
    return t


def settle_to_a_steady_cap(lab: Lab, d: Any, setpoint_pps: float, timeout_s: float = 30.0) -> tuple[float, float]:
    """Activate and settle (:func:`activate_and_settle`), then wait until the cap in force holds
    still: two reads 3 s apart within 5% of each other, the VR's mean rate between them within 10%
    of the setpoint.  A first 2 s mean within 10% can come while the controller still crosses the
    band (a cap moved up or down that period): a daemon killed then leaves that cap, not the settled
    one.  Returns the seconds it took and the cap (percent of one CPU)."""
    t0 = time.monotonic()
    activate_and_settle(lab, d, setpoint_pps)
    last: list[Any] = []

    def steady() -> bool:
        c0 = cap_percent(sched_params(lab.uri, lab.vr.name))
        rate = forwarded_pps(lab.vifs, 3.0)
        c1 = cap_percent(sched_params(lab.uri, lab.vr.name))
        last[:] = [c0, c1, rate]
        return abs(c1 - c0) <= 0.05 * c0 and abs(rate - setpoint_pps) <= TOLERANCE * setpoint_pps

    assert waited_s(steady, timeout_s, 0.0) is not None, \
        f"the cap did not hold still within {timeout_s} s (cap % before, after, pps: {last}): {d.client.call('status', vr=lab.vr.name)}"
    return time.monotonic() - t0, last[1]


def xtc_ctl(d: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xtc.cli", "ctl", "-e", f"ipc://{d.dir}/mgr.sock", *args],
        capture_output=True, text=True, timeout=30, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def assert_original(lab: Lab) -> None:
    p = sched_params(lab.uri, lab.vr.name)
    assert p is not None and {k: p[k] for k in ORIGINAL} == ORIGINAL, f"domain left with {p}, original {ORIGINAL}"


def stop_with_sigterm(d: Any) -> None:
    """SIGTERM the daemon and expect it to exit 0 within 20 s."""
    d.signal(signal.SIGTERM)
    assert d.wait(20) == 0


# ---------------------------------------------------------------------------------- tests
HOLD_S = 15.0  # the span over which a settled VR's mean rate must be within 10% of its setpoint


def settled_s(lab: Lab, setpoint_pps: float, timeout_s: float) -> tuple[float | None, float | None]:
    """The seconds until a 2 s mean of the VR's rate is within 10% of ``setpoint_pps`` (the controller settled;
    on a busy host that takes longer; None: not within ``timeout_s``), and the last 2 s mean."""
    last: list[float] = []

    def near() -> bool:
        last[:] = [forwarded_pps(lab.vifs, 2.0)]
        return abs(last[0] - setpoint_pps) <= TOLERANCE * setpoint_pps

    return waited_s(near, timeout_s, 0.0), (last[0] if last else None)


def held_mean(lab: Lab, setpoint_pps: float, hold_s: float = HOLD_S, settle_timeout_s: float = 30.0,
              trace: RateTrace | None = None, since: str = "") -> tuple[float, float]:
    """Settled (:func:`settled_s`), then the VR's mean rate over ``hold_s`` from the counters (time-weighted: the
    packets over the seconds, not a mean of rates) within 10% of the setpoint, measured up to three times (a 2 s
    mean can touch the band while the cap still swings, and a stall of a busy host can move one mean: on a slow
    machine 33.4 kp/s for 29.8 after a VR restart, on a busy one 24.4 then 36.2 kp/s for 29.7, and once +29%
    over 15 s at the usual cap); the tolerance the same every time.  A miss shows ``trace``'s rates since this
    call (``since``: what started them).  Returns (seconds to settle, mean pps) of the run that held."""
    t0 = time.monotonic()

    def measure() -> tuple[float, float]:
        settle, last = settled_s(lab, setpoint_pps, settle_timeout_s)
        assert settle is not None, \
            f"rate not within 10% of {setpoint_pps:.0f} pps within {settle_timeout_s} s (last 2 s mean {last})"
        mean = forwarded_pps(lab.vifs, hold_s)
        shown = f"; every 0.5 s since {since}: {kpps(trace.between(t0, time.monotonic()))}" if trace is not None else ""
        assert abs(mean - setpoint_pps) <= TOLERANCE * setpoint_pps, f"mean {mean:.0f} for {setpoint_pps:.0f} pps{shown}"
        return settle, mean

    return measured_until_held(measure, f"setpoint {setpoint_pps:.0f} pps")


def test_daemon_holds_two_setpoints_and_sigterm_restores_the_exact_original(at_original: Lab, daemon) -> None:
    lab = at_original
    sp1, sp2 = setpoint_for(lab, 0.30), setpoint_for(lab, 0.55)
    assert_original(lab)
    with lab.stream(STREAM_S) as stream, RateTrace(lambda: lab.vifs) as trace:
        d = daemon()
        time.sleep(1.0)
        res = d.client.call("activate", vr=lab.vr.name, setpoint_pps=sp1)
        assert res["original_record"] == {"backend": "libvirt-quota", "target": lab.vr.name, "params": ORIGINAL}
        settle1, mean1 = held_mean(lab, sp1, trace=trace, since="activate")
        q1 = sched_params(lab.uri, lab.vr.name)

        cp = xtc_ctl(d, "setpoint", lab.vr.name, f"{sp2 / 1000:g}k")
        assert cp.returncode == 0, cp.stdout + cp.stderr
        settle2, mean2 = held_mean(lab, sp2, trace=trace, since="the change")
        q2 = sched_params(lab.uri, lab.vr.name)
        status = d.client.call("status", vr=lab.vr.name)

        d.signal(signal.SIGTERM)
        rc = d.wait(20)
        stopped = d.wait_event("stopped", timeout_s=5)
        stream.stop()
    say(f"setpoint {sp1:.0f} pps: settled in {settle1:.1f} s, mean {mean1:.0f} pps over the next {HOLD_S:g} s "
        f"(error {100 * (mean1 - sp1) / sp1:+.1f}%), quota {q1 and q1['vcpu_quota']} us / {ORIG_PERIOD_US} us; "
        f"setpoint {sp2:.0f} pps (xtc ctl): settled in {settle2:.1f} s, mean {mean2:.0f} pps (error {100 * (mean2 - sp2) / sp2:+.1f}%), "
        f"quota {q2 and q2['vcpu_quota']} us; daemon saw {status['forwarded_pps']:.0f} pps")
    assert quota_limited(q1) and quota_limited(q2) and q2["vcpu_quota"] > q1["vcpu_quota"]  # type: ignore[index]
    assert status["setpoint_pps"] == sp2 and status["state"] == "active"
    assert rc == 0 and stopped["restore_failures"] == 0
    assert_original(lab)


def test_sigkill_then_restart_resumes_and_still_restores_the_true_original(at_original: Lab, daemon) -> None:
    lab = at_original
    sp = setpoint_for(lab, 0.30)
    with lab.stream(STREAM_S) as stream:
        d1 = daemon()
        settle_s, cap_alive = settle_to_a_steady_cap(lab, d1, sp)
        d1.signal(signal.SIGKILL)
        assert d1.wait(10) == -signal.SIGKILL
        # Nobody restored anything: the VR stays capped while no daemon runs.
        q_dead = sched_params(lab.uri, lab.vr.name)
        assert abs(cap_percent(q_dead) - cap_alive) <= 0.05 * cap_alive, (q_dead, cap_alive)
        # At a fixed cap the rate follows the host's load (no controller corrects it now): up to 6
        # samples of 4 s, all recorded (in one CI run 3 samples in a row were 21-26% low); the one
        # closest to the setpoint must be near it (a burst of other work lowers a sample, less of it
        # raises one).  Every one must stay limited: the VR's
        # CPU time over each sample (the kernel's account, read through libvirt) within the cap.
        dead, cpu_dead = [], []
        conn = LibvirtConn(uri=lab.uri)
        try:
            for _ in range(6):
                c0, t0 = conn.cpu_time_ns([lab.vr.name])[lab.vr.name], time.monotonic()
                dead.append(forwarded_pps(lab.vifs, 4.0))
                c1, t1 = conn.cpu_time_ns([lab.vr.name])[lab.vr.name], time.monotonic()
                cpu_dead.append(100.0 * (c1 - c0) / 1e9 / (t1 - t0))
                if abs(dead[-1] - sp) <= 2 * TOLERANCE * sp:
                    break
        finally:
            conn.close()
        rate_dead = min(dead, key=lambda r: abs(r - sp))
        assert quota_limited(q_dead) and sched_params(lab.uri, lab.vr.name) == q_dead
        # The VR restarts meanwhile: unlimited, with its XML's period.
        lab.restart_vr(new_vifs=False)
        q_reboot = sched_params(lab.uri, lab.vr.name)
        assert q_reboot is not None and (q_reboot["vcpu_period"], q_reboot["vcpu_quota"]) == (XML_PERIOD_US, -1)
        d2 = daemon()
        st = d2.client.call("status", vr=lab.vr.name)
        assert st["state"] == "active" and st["setpoint_pps"] == sp
        assert st["original_record"]["params"] == ORIGINAL  # not what it finds at restart
        recapped = waited_s(lambda: quota_limited(sched_params(lab.uri, lab.vr.name)), 10.0)
        assert recapped is not None, d2.client.call("status", vr=lab.vr.name)
        # Settled (a 2 s mean within 10%, as after the other restarts), then held over 8 s.
        _, mean = held_mean(lab, sp, hold_s=8.0, settle_timeout_s=20.0)
        q_run = sched_params(lab.uri, lab.vr.name)
        stop_with_sigterm(d2)
        stream.stop()
    say(f"SIGKILL: settled to a steady cap ({cap_alive:.1f}%) in {settle_s:.1f} s, quota left {q_dead['vcpu_quota']} us / {q_dead['vcpu_period']} us, "
        f"{rate_dead:.0f} pps while no daemon ran (samples {[round(r) for r in dead]} pps, CPU {[round(c, 1) for c in cpu_dead]}%); VR restarted unlimited; new daemon capped it in {recapped:.1f} s "
        f"({q_run and q_run['vcpu_quota']} us / {q_run and q_run['vcpu_period']} us) and holds {mean:.0f} pps for setpoint "
        f"{sp:.0f} (error {100 * (mean - sp) / sp:+.1f}%)")
    # Still limited: no sample used more CPU than the cap left in force (CFS enforces the quota per
    # period; 5% of it for the samples' edges), and the VR at that cap forwards near the setpoint.
    assert max(cpu_dead) <= 1.05 * cap_percent(q_dead), (cpu_dead, cap_percent(q_dead), dead)
    assert abs(rate_dead - sp) <= 2 * TOLERANCE * sp, \
        f"samples {[round(r) for r in dead]} pps at a cap of {cap_percent(q_dead):.1f}% (VR CPU {[round(c, 1) for c in cpu_dead]}%), setpoint {sp:.0f}"
    assert_original(lab)


def test_vr_destroyed_and_started_again_is_followed_without_a_huge_rate_or_a_wrong_cap(at_original: Lab, daemon) -> None:
    lab = at_original
    sp = setpoint_for(lab, 0.30)
    report = []
    with lab.stream(STREAM_S) as stream:
        d = daemon()
        with Samples(f"ipc://{d.dir}/pub.sock", lab.vr.name) as samples:
            activate_and_settle(lab, d, sp)
            for new_vifs in (False, True):
                old = sched_params(lab.uri, lab.vr.name)
                old_vifs = lab.vifs
                t0 = time.monotonic()
                lab.restart_vr(new_vifs=new_vifs)
                up_s = time.monotonic() - t0
                new = sched_params(lab.uri, lab.vr.name)
                assert new is not None and new["id"] != old["id"]  # type: ignore[index]
                assert (lab.vifs != old_vifs) == new_vifs
                # The new domain starts unlimited; the daemon must cap it again.
                capped = waited_s(lambda: quota_limited(sched_params(lab.uri, lab.vr.name)), 20.0)
                assert capped is not None, f"cap not re-applied to the new domain: {d.client.call('status', vr=lab.vr.name)}"
                # Settled (a 2 s mean within the band), then a 4 s mean within it (measured up to three times).
                held, rate = held_mean(lab, sp, hold_s=4.0, settle_timeout_s=25.0)
                report.append((new_vifs, up_s, capped, held, rate))
                # The cap it settles at is of the same order as before (no bogus rate drove it away).
                q = sched_params(lab.uri, lab.vr.name)
                assert q is not None and 0.5 <= cap_percent(q) / cap_percent(old) <= 2.0, (old, q)
            status = d.client.call("status", vr=lab.vr.name)
        stop_with_sigterm(d)
        stream.stop()
    for new_vifs, up_s, capped, held, rate in report:
        say(f"VR restarted with {'new' if new_vifs else 'the same'} vif names (up again in {up_s:.1f} s): cap re-applied "
            f"{capped:.1f} s after it was up, setpoint {sp:.0f} held again (2 s mean within 10%) {capped + held:.1f} s "
            f"after it was up, then {rate:.0f} pps")
    measured = [s["forwarded_pps"] for s in samples.items if s.get("forwarded_pps") is not None]
    caps = [s["cap_percent"] for s in samples.items if s.get("cap_percent") is not None]
    say(f"daemon samples over both restarts: {len(samples.items)}, largest measured {max(measured):.0f} pps "
        f"(offered {OFFERED_PPS}), caps {min(caps):.1f}..{max(caps):.1f}%")
    assert len(samples.items) >= 10
    # A counter reset must not read as a huge rate (a wrap or a jump of the raw counters would).
    assert max(measured) <= 1.5 * OFFERED_PPS
    assert all(1.0 <= c <= 100.0 for c in caps)
    assert status["state"] == "active" and status["present"] and status["actuation_error"] is None
    assert_original(lab)


def test_libvirtd_restart_under_a_running_daemon_keeps_the_cap_and_reconnects(at_original: Lab, daemon) -> None:
    from xtc_lab.lab.libvirtd import LibvirtdError

    lab = at_original
    sp, sp_after = setpoint_for(lab, 0.30), setpoint_for(lab, 0.45)
    with lab.stream(STREAM_S) as stream, RateTrace(lambda: lab.vifs, dt_s=0.5) as trace:
        d = daemon()
        activate_and_settle(lab, d, sp)

        def restarted() -> tuple:
            """libvirtd restarted under the daemon: the cap stays set, the VR's 0.5 s rates meanwhile stay under
            1.5 times the setpoint (unlimited it forwards about 3 times it).  At a cap that does not move the rate
            follows the host's load (the largest 0.5 s rate 1.13-1.32 times the setpoint in four runs beside a
            busy loop, once 1.51 in a busy-host check): a busy host restarts it again, up to three
            times in all, the bound the same."""
            q_before = sched_params(lab.uri, lab.vr.name)
            pid_before = lab.libvirtd.started_here().get("libvirtd", {}).get("pid")
            t0 = time.monotonic()
            try:
                lab.libvirtd.restart()
            except LibvirtdError as e:
                pytest.skip(f"cannot restart libvirtd here: {e}")
            t_up = time.monotonic()
            pid_after = lab.libvirtd.started_here().get("libvirtd", {}).get("pid")
            q_after = sched_params(lab.uri, lab.vr.name)
            time.sleep(2.0)
            during = trace.between(t0, time.monotonic())
            assert pid_before is not None and pid_after is not None and pid_after != pid_before
            assert quota_limited(q_after), f"cap lost over the libvirtd restart: {q_after}"
            assert during and max(during) <= 1.5 * sp, during  # never unlimited meanwhile
            return q_before, pid_before, t0, t_up, pid_after, q_after, during

        q_before, pid_before, t0, t_up, pid_after, q_after, during = measured_until_held(restarted, "libvirtd restart")
        back, rate = held_mean(lab, sp, hold_s=8.0, settle_timeout_s=20.0)
        # Reconnected: a higher setpoint needs a clearly larger quota, written through a new connection.
        # Measured against the quota in force at the old setpoint now, not the one right after the
        # restart: what a percent of CPU forwards drifts on a shared host (once 10,169 us then, and
        # 11,468 us enough for 1.5 times the setpoint 15 s later).
        q_held = sched_params(lab.uri, lab.vr.name)
        d.client.call("setpoint", vr=lab.vr.name, setpoint_pps=sp_after)
        moved = waited_s(
            lambda: (sched_params(lab.uri, lab.vr.name) or {}).get("vcpu_quota", 0) >= 1.25 * q_held["vcpu_quota"],  # type: ignore[index]
            15.0,
        )
        q_new = sched_params(lab.uri, lab.vr.name)
        status = d.client.call("status", vr=lab.vr.name)
        stop_with_sigterm(d)
        stream.stop()
    say(f"libvirtd restart (pid {pid_before} -> {pid_after}) took {t_up - t0:.1f} s; quota {q_before['vcpu_quota']} -> {q_after and q_after['vcpu_quota']} us; "
        f"largest 0.5 s rate meanwhile {max(during, default=0):.0f} pps; 2 s mean within 10% after {2.0 + back:.1f} s, "
        f"then {rate:.0f} pps over 8 s for setpoint {sp:.0f} "
        f"(error {100 * (rate - sp) / sp:+.1f}%); new setpoint {sp_after:.0f} written after {moved if moved is None else round(moved, 1)} s "
        f"(quota {q_held and q_held['vcpu_quota']} -> {q_new and q_new['vcpu_quota']} us)")
    assert quota_limited(q_held), q_held
    assert moved is not None and quota_limited(q_new), f"{q_held} -> {q_new}: {status}"
    assert status["actuation_error"] is None
    assert_original(lab)

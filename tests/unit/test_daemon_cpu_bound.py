"""The loop reads CPU only for the VRs short of their setpoints; a binding cap then lets a TCP VR's
cap rise, and a VR whose cap does not bind is flagged (the real ControlLoop, DaemonCore, PeriodMeter and CpuMeter; the host is a
small model of one VR whose TCP flows take what its cap lets through)."""

from __future__ import annotations

import math

import pytest

import xtc.models
from xtc.control import make_controller
from xtc.daemon.api import Request
from xtc.daemon.core import DaemonCore
from xtc.daemon.loop import ControlLoop
from xtc.daemon.meter import CpuMeter
from xtc.host.errors import HostAdapterError
from xtc.host.ifcounters import IfCounters


class TcpVrHost:
    """One VR, ``tcp1`` (interface ``vif1.0``), and a UDP VR at its setpoint, ``udp1``.

    ``tcp1`` forwards ``pps_per_cap`` packets/s per percent of CPU in force, up to ``demand_pps``;
    its flows lose 1.8% (offered = forwarded / 0.982); it uses the CPU its forwarding needs.
    ``udp1`` is offered 20 kp/s and forwards it all with a tenth of its cap.
    """

    name = "model"
    counter_bits = 64

    def __init__(self, cpu: bool = True, pps_per_cap: float = 2_500.0, demand_pps: float = 90_000.0,
                 kept: float = 0.982) -> None:
        self.kept = kept  # the share of what is offered to tcp1 that it forwards
        self.t_s = 0.0
        self.caps = {"tcp1": 10.0, "udp1": 100.0}
        self.rx = {"vif1.0": 0.0, "vif2.0": 0.0}
        self.tx = {"vif1.0": 0.0, "vif2.0": 0.0}
        self.cpu_ns = {"tcp1": 0.0, "udp1": 0.0}
        self.pps_per_cap, self.demand_pps = pps_per_cap, demand_pps
        self.cpu_reads: list[list[str]] = []
        self.fail_cpu = False
        if not cpu:
            self.read_cpu_ns = None  # type: ignore[assignment]  # a host that cannot tell

    def advance(self, dt_s: float) -> None:
        y = min(self.pps_per_cap * self.caps["tcp1"], self.demand_pps)
        self.rx["vif1.0"] += y * dt_s
        self.tx["vif1.0"] += y / self.kept * dt_s
        self.cpu_ns["tcp1"] += y / self.pps_per_cap / 100.0 * dt_s * 1e9
        self.rx["vif2.0"] += 20_000.0 * dt_s
        self.tx["vif2.0"] += 20_000.0 * dt_s
        self.cpu_ns["udp1"] += 0.1 * self.caps["udp1"] / 100.0 * dt_s * 1e9
        self.t_s += dt_s

    def list_vrs(self):
        return {"tcp1": ("vif1.0",), "udp1": ("vif2.0",)}

    def read_counters(self):
        return {i: IfCounters(int(self.rx[i]), int(self.tx[i])) for i in self.rx}

    def read_cpu_ns(self, vrs):
        self.cpu_reads.append(list(vrs))
        if self.fail_cpu:
            raise HostAdapterError("cpu accounting unavailable")
        return {v: int(self.cpu_ns[v]) for v in vrs if v in self.cpu_ns}

    def read_cap(self, vr):
        return self.caps[vr]

    def apply_cap(self, vr, cap_percent):
        self.caps[vr] = cap_percent
        return cap_percent

    def snapshot(self, vr):
        return {"cap": self.caps[vr]}

    def restore_cap(self, vr, cap_percent, original=None):
        self.caps[vr] = 100.0 if cap_percent is None else cap_percent

    def close(self):
        pass


def _run(host: TcpVrHost, periods: int, setpoint: float = 60_000.0, loop: ControlLoop | None = None) -> list[float]:
    if loop is None:
        core = DaemonCore(lambda: make_controller(xtc.models.PAPER_MODEL), max_setpoint_pps=1e9)
        loop = ControlLoop(core, host)
        loop.period(host.t_s)
        loop.handle(Request("activate", "tcp1", setpoint), host.t_s)
        loop.handle(Request("activate", "udp1", 20_000.0), host.t_s)
        host.loop = loop
    rates = []
    for _ in range(periods):
        host.advance(1.0)
        rep = loop.period(host.t_s)
        rates.append(rep.readings["tcp1"].forwarded_pps if "tcp1" in rep.readings else math.nan)
    return rates


def test_a_tcp_vr_held_by_its_cap_reaches_its_setpoint_when_the_host_tells_its_cpu() -> None:
    host = TcpVrHost()
    rates = _run(host, 15)
    assert all(abs(y - 60_000.0) <= 0.03 * 60_000.0 for y in rates[6:]), [round(y) for y in rates]
    # only the held VR was ever read, never the UDP VR at its setpoint
    assert host.cpu_reads and all(r == ["tcp1"] for r in host.cpu_reads)
    # and once at its setpoint it is no longer held: nothing more is read
    n = len(host.cpu_reads)
    more = _run(host, 10, loop=host.loop)
    assert len(host.cpu_reads) == n and all(abs(y - 60_000.0) <= 0.03 * 60_000.0 for y in more)


def test_without_cpu_accounting_the_guard_holds_as_before() -> None:
    rates = _run(TcpVrHost(cpu=False), 15)
    assert max(rates[1:]) == pytest.approx(25_000.0, rel=1e-6)  # cap 10 x 2.5 kp/s: never raised


def test_a_failing_cpu_read_is_no_reading() -> None:
    host = TcpVrHost()
    host.fail_cpu = True
    rates = _run(host, 10)
    assert max(rates[1:]) == pytest.approx(25_000.0, rel=1e-6)
    assert host.cpu_reads  # it was asked, it failed, nothing changed


def test_demand_below_the_setpoint_is_read_but_the_cap_is_not_wound_up() -> None:
    host = TcpVrHost(demand_pps=30_000.0)
    _run(host, 20)
    assert host.caps["tcp1"] < 30.0  # held where the demand was met, not climbing to 100
    assert len(host.cpu_reads) >= 15  # still held: its CPU is read every period (one VR)


def test_cpu_meter() -> None:
    m = CpuMeter()
    assert m.update(10.0, {"a": 5_000_000_000, "b": 1}) == {}  # first readings: no interval yet
    got = m.update(11.0, {"a": 5_250_000_000, "b": 0})  # b went backwards: restarted
    assert got == {"a": pytest.approx(25.0)}
    assert m.known() == {"a", "b"}
    assert m.update(12.0, {"b": 500_000_000}) == {"b": pytest.approx(50.0)}
    assert m.known() == {"b"}  # a was not read: forgotten
    assert m.update(12.0, {"b": 600_000_000}) == {}  # no time between readings
    m.start(13.0, {"c": 0})
    m.keep({"c"})
    assert m.known() == {"c"}
    assert m.update(13.5, {"c": 2_000_000_000_000}) == {}  # 400,000% of one CPU: not a measurement
    m.reset()
    assert m.known() == frozenset()


def test_a_vr_short_of_its_setpoint_with_a_cap_it_does_not_use_up_is_flagged_cap_slack() -> None:
    from xtc.daemon.api import Instance, SAMPLE_FIELDS
    from xtc.daemon.core import SATURATED_AFTER_PERIODS
    from xtc.daemon.ctl import format_table
    from xtc.daemon.metrics import DaemonMetrics

    host = TcpVrHost(demand_pps=30_000.0)  # its flows want 30 kp/s, 60 wanted
    _run(host, 2)
    core = host.loop.core
    seen = []
    for _ in range(SATURATED_AFTER_PERIODS + 3):
        _run(host, 1, loop=host.loop)
        seen.append(core.describe("tcp1")["saturated"])
    assert seen[0] is None and seen[-1] == "cap_slack", seen
    assert core.describe("udp1")["saturated"] is None
    d = core.describe("tcp1")
    Instance.model_validate(d)
    assert "not used up" in format_table([d])
    rows = core.sample_rows()
    i = SAMPLE_FIELDS.index("saturated")
    assert [r[i] for r in rows] == ["cap_slack", None]
    m = DaemonMetrics()
    m.update(rows)
    assert m.registry.get_sample_value("xtc_vr_saturation", {"vr": "tcp1", "saturation": "cap_slack"}) == 1.0
    # a setpoint it can reach: the flag goes at once
    host.loop.handle(Request("setpoint", "tcp1", 29_500.0), host.t_s)
    _run(host, 1, loop=host.loop)
    assert core.describe("tcp1")["saturated"] is None


def test_a_vr_held_by_its_cap_is_not_flagged_cap_slack() -> None:
    host = TcpVrHost()  # the cap binds until the setpoint is reached
    _run(host, 3)
    assert host.loop.core.describe("tcp1")["saturated"] is None
    assert all(i.slack_periods == 0 for i in host.loop.core.instances.values())


def test_a_vr_its_host_limits_is_flagged_though_the_packets_let_its_cap_rise() -> None:
    # tcp1 forwards 80% of what reaches it (the guard lets its cap rise, as before) and its flows
    # want 30 kp/s: it is flagged cap_slack while its cap climbs, cap_max once it is at the top
    from xtc.daemon.core import SATURATED_AFTER_PERIODS

    host = TcpVrHost(demand_pps=30_000.0, kept=0.8)
    _run(host, 2)
    flags = []
    for _ in range(SATURATED_AFTER_PERIODS + 10):
        _run(host, 1, loop=host.loop)
        flags.append(host.loop.core.describe("tcp1")["saturated"])
    assert host.caps["tcp1"] == 100.0  # the law of before: the reading holds no raise
    assert all(f in ("cap_slack", "cap_max") for f in flags[SATURATED_AFTER_PERIODS + 1:]), flags
    blind = TcpVrHost(cpu=False, demand_pps=30_000.0, kept=0.8)
    _run(blind, SATURATED_AFTER_PERIODS + 10)
    assert blind.caps["tcp1"] == 100.0


def test_the_flag_counts_down_on_a_binding_period_instead_of_starting_again() -> None:
    # A VR its host holds at 30 kp/s whose cap binds one period in four (a partly held TCP VR):
    # the periods at the cap take one off the count each; it is flagged all the same.
    from xtc.daemon.core import SATURATED_AFTER_PERIODS

    host = TcpVrHost(demand_pps=30_000.0)
    _run(host, 3)
    core, seen, k = host.loop.core, [], 0
    for _ in range(4 * SATURATED_AFTER_PERIODS):
        k += 1
        if k % 4 == 0:  # this period the VR used its whole cap
            host.cpu_ns["tcp1"] += (host.caps["tcp1"] - 30_000.0 / host.pps_per_cap) / 100.0 * 1e9
        _run(host, 1, loop=host.loop)
        seen.append((core.instances["tcp1"].slack_periods, core.describe("tcp1")["saturated"]))
    counts = [c for c, _ in seen]
    assert any(b < a for a, b in zip(counts, counts[1:])), seen  # the binding periods counted down
    # flagged within 3 x 5 periods though a period in four bound (each such period raises the cap:
    # it reaches 100 in the end, and cap_max takes over)
    assert "cap_slack" in [f for _, f in seen[:3 * SATURATED_AFTER_PERIODS]], seen


def test_a_vr_its_host_holds_under_its_setpoint_with_scattered_rates_stays_flagged() -> None:
    # TCP rates scatter by +-18% from one period to the next around 88% of the setpoint (the host,
    # not the cap, is the limit); a fifth of the periods come within 3% of the setpoint or above.
    # The flag's count is leaky, so those periods take one off instead of starting it again: the
    # VR is flagged in nearly every period once the count is up; and once its demand can be met,
    # the flag goes within SLACK_COUNT_MAX - SATURATED_AFTER_PERIODS + 1 periods.
    import random

    from xtc.daemon.core import SATURATED_AFTER_PERIODS, SLACK_COUNT_MAX

    rng = random.Random(7)
    host = TcpVrHost(demand_pps=52_800.0, pps_per_cap=2_500.0)
    _run(host, 3)
    core, flags, near = host.loop.core, [], 0
    for _ in range(60):
        host.demand_pps = 52_800.0 * (1.0 + rng.uniform(-0.18, 0.18))
        y = _run(host, 1, loop=host.loop)[0]
        near += y >= 0.97 * 60_000.0
        flags.append(core.describe("tcp1")["saturated"])
    assert near >= 5  # periods that reach the setpoint (or come within 3%) are there
    assert all(f in (None, "cap_slack") for f in flags), flags
    assert flags[20:].count("cap_slack") >= 0.9 * len(flags[20:]), flags
    assert 0 < core.instances["tcp1"].slack_periods <= SLACK_COUNT_MAX
    host.demand_pps = 70_000.0  # now the cap is the limit and the setpoint reachable
    after = []
    for _ in range(SLACK_COUNT_MAX):
        _run(host, 1, loop=host.loop)
        after.append(core.describe("tcp1")["saturated"])
    assert after[SLACK_COUNT_MAX - SATURATED_AFTER_PERIODS:] == [None] * SATURATED_AFTER_PERIODS, after

"""Early drop on a saturated host, closed loop: the real ControlLoop, DaemonCore, meters and
EarlyDrop over a small model of one UDP VR that loses part of what it is handed at its own socket
(its forwarder waits for a CPU on a saturated host; docs/results/2026-11-27-early-drop-dom0) with
its cap far above its CPU use.  The limiter is in memory (the real one: tests/root/test_early_drop_*).
"""

from __future__ import annotations

import statistics

import pytest

import xtc.models
from xtc.control import make_controller
from xtc.daemon.api import Request
from xtc.daemon.core import DaemonCore
from xtc.daemon.limiter_policy import tuning_for
from xtc.daemon.limiter_state import EarlyDrop
from xtc.daemon.loop import ControlLoop
from xtc.host.ifcounters import IfCounters
from xtc.host.limiter import LimiterSetting

SETPOINT = 12_900.0


class MemLimiter:
    """The limit on each interface, in memory; a packet-counting limiter (as the eBPF bucket)."""

    counts = "packets"

    def __init__(self) -> None:
        self.on: dict[str, LimiterSetting] = {}
        self.drops: dict[str, int] = {}

    def install(self, ifname: str, setting: LimiterSetting) -> bool:
        created = ifname not in self.on
        self.on[ifname] = setting
        self.drops.setdefault(ifname, 0)
        return created

    def remove(self, ifname: str) -> bool:
        self.drops.pop(ifname, None)
        return self.on.pop(ifname, None) is not None

    def dropped_packets(self, ifname: str) -> int | None:
        return self.drops.get(ifname) if ifname in self.on else None

    def dropped_by_interface(self, ifnames):
        return {i: self.drops[i] for i in ifnames if i in self.on}

    def close(self) -> None:
        pass


class LossyVrHost:
    """One UDP VR, ``udp1`` (interface ``vif1.0``), offered ``offered_pps``; the host hands it what
    the limit lets through; it forwards ``1 - socket_loss`` of that, or ``pps_per_cap`` per percent
    of its cap if that is less (then its cap binds: it uses all of it), and uses the CPU it needs."""

    name = "model"
    counter_bits = 64

    def __init__(self, lim: MemLimiter, socket_loss: float = 0.13, offered_pps: float = 91_600.0,
                 pps_per_cap: float = 1_000.0) -> None:
        self.lim, self.loss, self.offered, self.pps_per_cap = lim, socket_loss, offered_pps, pps_per_cap
        self.t_s = 0.0
        self.cap = 100.0
        self.rx = self.tx = 0.0
        self.cpu_ns = 0.0
        self.handed = self.forwarded = 0.0

    def advance(self, dt_s: float) -> None:
        s = self.lim.on.get("vif1.0")
        handed = self.offered if s is None else min(self.offered, s.rate_pps)
        if s is not None:
            self.lim.drops["vif1.0"] += int((self.offered - handed) * dt_s)
        y = min(handed * (1.0 - self.loss), self.pps_per_cap * self.cap)
        self.handed, self.forwarded = handed, y
        self.tx += handed * dt_s
        self.rx += y * dt_s
        self.cpu_ns += y / self.pps_per_cap / 100.0 * dt_s * 1e9
        self.t_s += dt_s

    def list_vrs(self):
        return {"udp1": ("vif1.0",)}

    def read_counters(self):
        return {"vif1.0": IfCounters(int(self.rx), int(self.tx))}

    def read_cpu_ns(self, vrs):
        return {v: int(self.cpu_ns) for v in vrs if v == "udp1"}

    def read_cap(self, vr):
        return self.cap

    def apply_cap(self, vr, cap_percent):
        self.cap = cap_percent
        return cap_percent

    def snapshot(self, vr):
        return {"cap": self.cap}

    def restore_cap(self, vr, cap_percent, original=None):
        self.cap = 100.0 if cap_percent is None else cap_percent

    def close(self):
        pass


def run(socket_loss: float, loss_bound_fraction: float | None = None, periods: int = 80,
        state: dict | None = None) -> tuple[LossyVrHost, EarlyDrop, list[tuple[float, float, float]]]:
    lim = MemLimiter()
    host = LossyVrHost(lim, socket_loss)
    core = DaemonCore(lambda: make_controller(xtc.models.PAPER_MODEL), max_setpoint_pps=1e9)
    loop = ControlLoop(core, host)
    # the rule on (0.25, as an operator sets it) unless the test says otherwise; off by default
    tuning = tuning_for("bpf", loss_bound_fraction=0.25 if loss_bound_fraction is None else loss_bound_fraction)
    ed = loop.early_drop = EarlyDrop(lim, default_on=True, tuning=tuning)
    loop.period(host.t_s)
    loop.handle(Request("activate", "udp1", SETPOINT), host.t_s)
    if state is not None:  # early drop's part of a state file
        ed.load_state(state, {"udp1"})
    host.loop = loop
    return host, ed, periods_of(host, periods)


def periods_of(host: LossyVrHost, periods: int) -> list[tuple[float, float, float]]:
    """``periods`` control periods of the host's loop: (handed, forwarded, limit in place) each."""
    seen = []
    for _ in range(periods):
        host.advance(1.0)
        host.loop.period(host.t_s)
        s = host.lim.on.get("vif1.0")
        seen.append((host.handed, host.forwarded, 0.0 if s is None else s.rate_pps))
    return seen


def tail(seen, k: int, n: int = 30) -> float:
    return statistics.fmean(x[k] for x in seen[-n:])


def test_a_vr_losing_13_percent_at_its_socket_is_held_within_3_percent_with_its_limit_bounded() -> None:
    _, ed, seen = run(0.13)
    fwd, handed = tail(seen, 1), tail(seen, 0)
    assert abs(fwd - SETPOINT) <= 0.03 * SETPOINT, [round(x[1]) for x in seen]
    assert max(x[2] for x in seen[10:]) <= 1.25 * SETPOINT + 1e-6  # the runaway guard
    assert 1.10 * SETPOINT < handed <= 1.25 * SETPOINT  # what it costs: handed above 1.1x
    assert 1.05 < ed.loss_of("udp1") <= 1.25  # as much as it takes to reach the dead zone, no more


def test_the_rule_before_holds_it_7_percent_below_its_setpoint_though_its_cap_climbs() -> None:
    """The emulated Dom0's finding, on the model: the limit (1.05-1.07x) binds, the cap does not."""
    host, ed, seen = run(0.13, loss_bound_fraction=0.0)
    fwd, handed = tail(seen, 1), tail(seen, 0)
    assert fwd < 0.95 * SETPOINT and handed <= 1.08 * SETPOINT
    assert host.cap > 50.0  # raised and raised: the cap was never what held it
    assert ed.loss_of("udp1") == 1.0


def test_a_vr_without_socket_losses_keeps_the_tight_limit() -> None:
    _, ed, seen = run(0.0)
    assert abs(tail(seen, 1) - SETPOINT) <= 0.03 * SETPOINT
    assert tail(seen, 0) <= 1.08 * SETPOINT  # handed within 8% of the setpoint, as before
    assert ed.loss_of("udp1") < 1.02


def test_the_learned_loss_survives_a_restart_in_the_state_file() -> None:
    """SIGKILL + restart: the restarted daemon removes the limiter it finds (its rate came from periods
    that are gone) and takes the saved state over (the core's instances and caps, early drop's choices
    and now each VR's loss factor): the next limit counts the VR's losses at once."""
    _, ed, _ = run(0.13)
    k = ed.to_state()["vrs"]["udp1"]["loss_factor"]
    assert 1.1 < k <= 1.25

    def restart(with_state: bool) -> list[tuple[float, float, float]]:
        h, old, _ = run(0.13)
        new = EarlyDrop(h.lim, default_on=True, tuning=old.tuning)
        new.load_state(old.to_state() if with_state else {"vrs": {"udp1": {"on": True}}}, {"udp1"})
        assert new.start({"udp1": ("vif1.0",)}) == ["vif1.0"] and h.lim.on == {}  # the leftover goes
        h.loop.early_drop = new
        h.loop._early_drop_last_s = None
        return periods_of(h, 8)

    # the first period has no limit (the leftover went): the VR forwards more, the limit follows it;
    # from the second on the limit is where the VR needs it, at once
    seen = restart(True)
    assert all(x[2] == pytest.approx(k * SETPOINT) for x in seen[1:])
    assert abs(statistics.fmean(x[1] for x in seen[3:]) - SETPOINT) <= 0.03 * SETPOINT
    fresh = restart(False)  # without the factor in the state: from the plain 1.05x, the VR 9% short
    assert fresh[1][2] == pytest.approx(1.05 * SETPOINT) and fresh[3][1] < 0.93 * SETPOINT


def test_the_configured_bound_reaches_the_daemons_early_drop(tmp_path) -> None:
    from fakes.daemon import Clock, daemon_toml
    from xtc_lab.sim.host import SimHost

    from xtc.daemon.config import loads_config
    from xtc.daemon.service import DaemonService

    for extra, want in (("", 0.0), ("early_drop_loss_bound_fraction = 0.25\n", 0.25), ("early_drop_loss_bound_fraction = 0.1\n", 0.1),
                        ("early_drop_loss_bound_fraction = 0\n", 0.0)):
        cfg = loads_config(daemon_toml(tmp_path, 'backend = "sim"\n' + extra, '[[sim.vr]]\nname = "vr1"\n'))
        clock = Clock()
        svc = DaemonService(cfg, SimHost.from_config(cfg, clock=clock), clock=clock, wall_clock=lambda: 0.0)
        assert svc.control.early_drop.tuning.loss_bound_fraction == want
        assert svc.control.early_drop.tuning.margin_fraction == 0.05  # the eBPF bucket's, untouched


def test_when_the_vr_stops_losing_its_cap_holds_it_and_the_limit_comes_back_down() -> None:
    host, ed, _ = run(0.13)
    k = ed.loss_of("udp1")
    host.loss = 0.0  # the host is quiet again: the VR forwards all it is handed, its cap holds it
    seen = periods_of(host, 80)
    assert ed.loss_of("udp1") < min(k, 1.05)  # lowered to what it needs: below the plain floor
    assert tail(seen, 0, 20) <= 1.08 * SETPOINT  # handed what the plain rule hands, as before
    assert abs(tail(seen, 1, 20) - SETPOINT) <= 0.03 * SETPOINT

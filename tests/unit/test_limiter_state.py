"""Early drop's state handling (xtc.daemon.limiter_state.EarlyDrop): logic, with an in-memory limiter.

The real limiter on real interfaces: tests/root/test_early_drop_netns.py."""

from __future__ import annotations

from typing import Any

from xtc.daemon.limiter_state import EarlyDrop, VrLoad
from xtc.host.ifcounters import IfCounters
from xtc.host.limiter import LimiterError, LimiterSetting

IFS = {"vr1": ("vif1.0", "vif1.1")}


class MemLimiter:
    """A fake for unit tests of the logic: a dict of interface -> setting; ``fail`` names ops that raise."""

    def __init__(self) -> None:
        self.on: dict[str, LimiterSetting] = {}
        self.drops: dict[str, int] = {}
        self.fail: set[str] = set()
        self.closed = False
        self.reads = {"one": 0, "all": 0}  # per-interface reads, reads of every limiter at once

    def close(self) -> None:
        self.closed = True

    def install(self, ifname, setting):
        if "install" in self.fail:
            raise LimiterError(f"{ifname}: refused")
        created = ifname not in self.on
        self.on[ifname] = setting
        self.drops.setdefault(ifname, 0)
        return created

    def update(self, ifname, setting):
        self.install(ifname, setting)

    def remove(self, ifname):
        if "remove" in self.fail:
            raise LimiterError(f"{ifname}: refused")
        self.drops.pop(ifname, None)
        return self.on.pop(ifname, None) is not None

    def adopt(self, ifname):
        return (self.on[ifname], self.drops[ifname]) if ifname in self.on else None

    def dropped_packets(self, ifname):
        self.reads["one"] += 1
        return self.drops.get(ifname) if ifname in self.on else None

    def dropped_by_interface(self, ifnames):
        self.reads["all"] += 1
        if "read" in self.fail:
            raise LimiterError("dump refused")
        return {i: self.drops[i] for i in ifnames if i in self.on}


def counters(tx_packets: int, size: int = 524) -> dict[str, IfCounters]:
    return {i: IfCounters(rx_packets=0, tx_packets=tx_packets, rx_bytes=0, tx_bytes=tx_packets * size,
                          rx_drops=0, tx_drops=0) for i in IFS["vr1"]}


UDP = VrLoad(setpoint_pps=20_000, forwarded_pps=19_500, handed_pps=93_000, model_forwarded_pps=20_000)
TCP = VrLoad(setpoint_pps=76_000, forwarded_pps=38_000, handed_pps=39_000, model_forwarded_pps=80_000)


def run(ed: EarlyDrop, load: VrLoad, n: int = 2, ifs=IFS) -> None:
    for k in range(n):
        ed.period(1.0, ifs, {"vr1": load}, counters(1000 * (k + 1)))


def limited_udp_vr(**early_drop: Any) -> tuple[MemLimiter, EarlyDrop]:
    """Early drop on by default (``early_drop``: its other arguments) over a UDP VR capped for two
    periods: limited on both its interfaces."""
    lim = MemLimiter()
    ed = EarlyDrop(lim, default_on=True, **early_drop)
    ed.choose("vr1", None)
    run(ed, UDP)
    return lim, ed


def test_off_by_default_nothing_is_touched():
    lim = MemLimiter()
    ed = EarlyDrop(lim)
    ed.choose("vr1", None)
    run(ed, UDP)
    assert lim.on == {}


def test_a_packet_counting_limiter_is_given_the_limit_in_packets_with_its_credit():
    from xtc.daemon.limiter_policy import BPF_TUNING

    lim = MemLimiter()
    lim.counts = "packets"  # as xtc.host.bpflimiter.BpfLimiter
    ed = EarlyDrop(lim, tuning=BPF_TUNING)
    ed.choose("vr1", True)
    run(ed, UDP)
    s = lim.on["vif1.0"]
    assert s.rate_pps == ed.limit_of("vr1").rate_pps >= 20_000 * 1.05 and s.burst_s == 0.3
    d = ed.describe("vr1")
    assert d["limit_pps"] == round(s.rate_pps, 1) and d["limit_bytes_per_s"] is None  # it counts no bytes


def test_a_capped_udp_vr_gets_the_limit_on_every_host_side_interface_and_a_tcp_vr_none():
    lim, ed = limited_udp_vr()
    assert set(lim.on) == {"vif1.0", "vif1.1"}
    assert ed.limit_of("vr1").rate_pps >= 20_000 * 1.2
    assert lim.on["vif1.0"].rate_bytes_per_s == ed.limit_of("vr1").rate_bytes_per_s
    # the activation asked for early drop, but the VR carries TCP: its source backs off, no limiter
    lim2 = MemLimiter()
    ed2 = EarlyDrop(lim2)
    ed2.choose("vr1", True)
    run(ed2, TCP, n=5)
    assert lim2.on == {}


def test_offered_counts_what_the_limiter_dropped_so_the_limit_stays_while_the_excess_lasts():
    lim, ed = limited_udp_vr()
    # Now the host hands only ~24k (the limit); the limiter dropped the other ~69k/s.
    for k in range(3):
        for i in IFS["vr1"]:
            lim.drops[i] += 35_000
        ed.period(1.0, IFS, {"vr1": VrLoad(20_000, 19_500, 24_000, 20_000)}, counters(10_000 * (k + 3)))
        assert ed.limit_of("vr1") is not None


def test_deactivation_and_sigterm_remove_it_and_the_choice_survives_in_the_state():
    lim = MemLimiter()
    ed = EarlyDrop(lim)
    ed.choose("vr1", True)
    run(ed, UDP)
    assert lim.on
    ed.remove_all()  # SIGTERM
    assert lim.on == {}
    assert ed.to_state() == {"vrs": {"vr1": {"on": True}}}
    ed2 = EarlyDrop(MemLimiter())
    ed2.load_state(ed.to_state(), {"vr1"})
    assert ed2.is_on("vr1")
    run(ed, UDP)
    ed.forget("vr1")  # deactivation
    assert lim.on == {} and not ed.is_on("vr1")
    assert not lim.closed
    ed.close()  # the daemon's last step: the adapter's socket goes
    assert lim.closed


def test_a_restart_removes_leftovers_and_the_next_periods_derive_a_new_limit():
    lim = MemLimiter()
    lim.on["vif1.0"] = LimiterSetting(1000, 6056)  # left by a killed daemon
    ed = EarlyDrop(lim)
    ed.load_state({"vrs": {"vr1": {"on": True}}}, {"vr1"})
    assert ed.start(IFS) == ["vif1.0"] and lim.on == {}
    run(ed, UDP)
    assert set(lim.on) == {"vif1.0", "vif1.1"}


def test_a_vr_that_reboots_gets_its_limit_back():
    lim, ed = limited_udp_vr()
    lim.on.clear()  # the VR rebooted: its interfaces came back without the qdisc
    lim.drops.clear()
    ed.period(1.0, IFS, {"vr1": UDP}, counters(5000))
    assert set(lim.on) == {"vif1.0", "vif1.1"}


def test_a_failed_change_is_reported_and_leaves_no_limit_at_all_rather_than_a_tight_one():
    seen = []
    lim, ed = limited_udp_vr(on_failure=lambda vr, op: seen.append((vr, op)))
    lim.fail.add("install")
    ed.period(1.0, IFS, {"vr1": VrLoad(60_000, 19_500, 93_000, 60_000)}, counters(9000))  # needs a raise
    assert seen == [("vr1", "raise")] and ed.failures == 1
    assert lim.on == {} and ed.limit_of("vr1") is None


def test_a_failed_removal_is_retried_every_period():
    lim, ed = limited_udp_vr()
    lim.fail.add("remove")
    ed.forget("vr1")
    assert ed.pending_removals == {"vif1.0", "vif1.1"} and lim.on
    lim.fail.clear()
    ed.period(1.0, IFS, {}, {})
    assert lim.on == {} and not ed.pending_removals


def test_xen_vif_names_are_limited_like_any_host_side_interface():
    from xtc.host.limiter import is_xen_vif

    assert is_xen_vif("vif3.0") and is_xen_vif("vif12.1")
    assert not is_xen_vif("vif3.0-emu") and not is_xen_vif("veth0")
    lim = MemLimiter()
    ed = EarlyDrop(lim, default_on=True)
    ed.choose("vr1", None)
    run(ed, UDP, ifs={"vr1": ("vif3.0",)})
    assert list(lim.on) == ["vif3.0"]


def test_the_period_right_after_the_install_counts_the_limiters_drops():
    """The period after an install must see the excess the new limiter dropped (its counter
    starts at the install); counted as 0 the VR looked no longer capped and lost its limiter
    (seen in the daemon on a real VR)."""
    lim = MemLimiter()
    ed = EarlyDrop(lim, default_on=True)
    ed.choose("vr1", None)
    ed.period(1.0, IFS, {"vr1": UDP}, counters(1000))  # installs
    assert ed.limit_of("vr1") is not None
    for i in IFS["vr1"]:
        lim.drops[i] += 35_000
    ed.period(1.0, IFS, {"vr1": VrLoad(20_000, 19_500, 24_000, 20_000)}, counters(2000))
    assert ed.limit_of("vr1") is not None and set(lim.on) == set(IFS["vr1"])


def test_one_read_of_every_limiters_counter_a_period_and_none_after_a_change():
    """Issue 48 item 4: the drop counters of all limited VRs come from one read a period (one
    qdisc dump), not one per interface; a limit changed in place goes on counting from that read."""
    lim = MemLimiter()
    ed = EarlyDrop(lim, default_on=True)
    ifs = {f"vr{k}": (f"vif{k}.0", f"vif{k}.1") for k in range(1, 6)}
    for vr in ifs:
        ed.choose(vr, None)
    cnt = {i: IfCounters(rx_packets=0, tx_packets=1000, rx_bytes=0, tx_bytes=524_000, rx_drops=0, tx_drops=0)
           for t in ifs.values() for i in t}
    ed.period(1.0, ifs, {vr: UDP for vr in ifs}, cnt)  # five installs, nothing to read before
    assert all(ed.limit_of(vr) is not None for vr in ifs)
    assert lim.reads == {"one": 0, "all": 0}
    for k in range(2, 6):
        for i in lim.drops:
            lim.drops[i] += 30_000
        setpoint = 20_000 if k < 4 else 40_000  # the last two periods raise every limit (a change)
        ed.period(1.0, ifs, {vr: VrLoad(setpoint, setpoint * 0.97, 30_000, setpoint) for vr in ifs}, cnt)
        assert lim.reads == {"one": 0, "all": k - 1}
    assert all(ed.limit_of(vr).rate_pps >= 40_000 * 1.2 for vr in ifs)


def test_a_failed_read_of_the_counters_is_reported_and_never_tightens_a_limit():
    seen = []
    lim, ed = limited_udp_vr(on_failure=lambda vr, op: seen.append((vr, op)))
    before = ed.limit_of("vr1")
    lim.fail.add("read")
    ed.period(1.0, IFS, {"vr1": UDP}, counters(9000))
    assert seen == [("*", "read drops")]
    assert ed.limit_of("vr1") is not None and ed.limit_of("vr1").rate_pps >= before.rate_pps


def test_a_paused_instance_keeps_its_limit_and_its_drops_count_as_offered():
    """The policer's ladder pauses a misbehaving VR after turning its early drop on: the limit is
    held as the cap is (not removed), and what it drops is still reported as offered to the VR
    (else the VR would look as if it had backed off)."""
    lim, ed = limited_udp_vr()
    held = ed.limit_of("vr1")
    assert held is not None
    for k in range(3):
        for i in IFS["vr1"]:
            lim.drops[i] += 30_000
        ed.period(1.0, IFS, {"vr1": VrLoad(20_000, 1_000, 2_000, None, held=True)}, counters(9000 + k))
        assert ed.limit_of("vr1") is held and set(lim.on) == set(IFS["vr1"])
        assert ed.dropped_pps == {"vr1": 60_000}
    ed.period(1.0, IFS, {}, {})  # deactivated (no load): removed
    assert lim.on == {} and ed.dropped_pps == {}


def test_the_vrs_loss_factor_is_saved_restored_and_a_bad_one_is_one_clear_error_taking_nothing():
    import pytest

    from xtc.daemon.limiter_policy import tuning_for

    on = tuning_for("bpf", loss_bound_fraction=0.25)  # the rule on (off by default)
    lim = MemLimiter()
    lim.counts = "packets"
    ed = EarlyDrop(lim, tuning=on)
    ed.choose("vr1", True)
    run(ed, UDP)  # limited
    limit = ed.limit_of("vr1").rate_pps
    # handed its limit, it forwards 13% less, its cap (64%) far above its CPU use (26%): it learns
    lossy = VrLoad(setpoint_pps=20_000, forwarded_pps=0.87 * limit, handed_pps=limit, model_forwarded_pps=None,
                   cpu_percent=26.0, cap_percent=64.0)
    for k in range(10):
        ed.period(1.0, IFS, {"vr1": lossy}, counters(1000 * (k + 3)))
    loss = ed.loss_of("vr1")
    assert loss > 1.05
    doc = ed.to_state()
    assert doc == {"vrs": {"vr1": {"on": True, "loss_factor": round(loss, 6)}}}
    ed2 = EarlyDrop(MemLimiter(), tuning=on)  # the daemon restarted (after SIGKILL)
    ed2.load_state(doc, {"vr1"})
    assert ed2.is_on("vr1") and ed2.loss_of("vr1") == pytest.approx(loss)
    # a VR whose cap binds (CPU 60% of a 64% cap) has its drops never raise the limit
    limit = ed.limit_of("vr1").rate_pps
    bound = VrLoad(setpoint_pps=20_000, forwarded_pps=0.5 * limit, handed_pps=limit, model_forwarded_pps=None,
                   cpu_percent=60.0, cap_percent=64.0)
    ed.period(1.0, IFS, {"vr1": bound}, counters(20_000))
    assert ed.loss_of("vr1") == loss
    for bad in (0.5, "1.1", True, float("nan"), 11.0):
        ed3 = EarlyDrop(MemLimiter())
        with pytest.raises(ValueError, match=r"early_drop\.vrs\.vr1\.loss_factor"):
            ed3.load_state({"vrs": {"vr0": {"on": True}, "vr1": {"on": True, "loss_factor": bad}}}, {"vr0", "vr1"})
        assert ed3.vrs == {}  # nothing taken over


def test_a_period_looks_only_at_the_vrs_with_early_drop_or_a_limiter_and_is_idle_without_any():
    lim = MemLimiter()
    ed = EarlyDrop(lim)
    ed.choose("vr1", None)
    ed.choose("vr2", False)
    assert ed.idle() and ed.on_vrs() == []
    ed.choose("vr1", True)
    assert not ed.idle() and ed.on_vrs() == ["vr1"]
    run(ed, UDP)
    assert set(lim.on) == {"vif1.0", "vif1.1"}
    lim.fail.add("remove")
    ed.choose("vr1", False)  # switched off, and its limiters refuse to go: not idle until they went
    assert ed.on_vrs() == [] and not ed.idle() and lim.on
    lim.fail.clear()
    ed.period(1.0, IFS, {}, {})
    assert lim.on == {} and ed.idle() and ed.dropped_pps == {}


def test_the_vrs_with_early_drop_on_follow_the_state_file_and_forgetting():
    ed = EarlyDrop(MemLimiter())
    ed.load_state({"vrs": {"vr1": {"on": True}, "vr2": {"on": False}, "gone": {"on": True}}}, {"vr1", "vr2"})
    assert ed.on_vrs() == ["vr1"] and not ed.idle()
    ed.choose("vr2", True)
    ed.choose("vr1", False)
    assert ed.on_vrs() == ["vr2"]
    ed.forget("vr2")
    assert ed.on_vrs() == [] and ed.idle()

"""Pure parts of the lab's ping probe and CPU hog: ping's output, cgroup lookup, the burn loop.

The ping outputs under tests/data/lab were recorded through a real lab VR (iputils 20221126,
``ping -n -D -i 0.010 ...``): unlimited (ping_free), capped at 8% of one CPU under 100 kp/s
of UDP (ping_capped, 80% loss) and stopped by SIGINT after one second (ping_interrupted).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from xtc_lab.lab.hog import (
    CpuCgroupDir,
    cpu_cgroup_of,
    hog_argv,
    hog_loop,
    parse_cgroup_mounts,
    parse_proc_cgroup,
)
from xtc_lab.lab.netlab import LabError
from xtc_lab.lab.probe import parse_ping_output, ping_argv, ping_count

DATA = Path(__file__).resolve().parents[1] / "data" / "lab"


# ------------------------------------------------------------------ ping output
@pytest.mark.parametrize("name, tx, rx, n_replies, avg_ms, max_ms, elapsed_s", [
    ("ping_free", 100, 99, 99, 0.343, 2.915, 1.545),
    ("ping_capped", 200, 39, 39, 7.652, 92.563, 3.108),
    ("ping_interrupted", 64, 11, 11, 0.611, 2.033, 0.987),
])
def test_recorded_ping_outputs_parse_to_pings_own_statistics(name: str, tx: int, rx: int, n_replies: int,
                                                             avg_ms: float, max_ms: float, elapsed_s: float) -> None:
    r = parse_ping_output((DATA / f"{name}.txt").read_text())
    assert (r.transmitted, r.received, len(r.rtt_ms), len(r.seq)) == (tx, rx, n_replies, n_replies)
    assert r.summary_found
    assert r.loss_ratio == pytest.approx(1 - rx / tx)
    # ping's own "rtt min/avg/max" line, to its printed precision (3 significant digits per reply)
    assert r.avg_rtt_ms == pytest.approx(avg_ms, rel=1e-2)
    assert max(r.rtt_ms) == pytest.approx(max_ms, rel=2e-3)
    assert r.elapsed_s == pytest.approx(elapsed_s)
    assert len(r.reply_times_s) == n_replies and r.reply_times_s == sorted(r.reply_times_s)
    assert len(set(r.seq)) == len(r.seq) and all(1 <= s <= tx for s in r.seq)
    # iputils sends about 62-66 requests/s with "-i 0.010" (whole milliseconds, plus a few from 10 ms up)
    assert 55 < r.request_rate_pps < 75


def test_capped_probe_shows_the_throttled_vrs_queueing_delay() -> None:
    r = parse_ping_output((DATA / "ping_capped.txt").read_text())
    # Replies that waited out a throttled stretch (~90 ms of the 100 ms CFS period) and ones that did not.
    assert r.rtt_percentile_ms(95) > 80
    assert r.rtt_percentile_ms(50) < 5
    s = r.summary()
    assert s["p95_rtt_ms"] == r.rtt_percentile_ms(95) and s["loss_ratio"] == pytest.approx(0.805)


def test_killed_ping_without_statistics_counts_what_it_printed() -> None:
    text = "\n".join((DATA / "ping_capped.txt").read_text().splitlines()[:11])  # header + 10 replies, no summary
    r = parse_ping_output(text)
    assert not r.summary_found
    assert r.received == 10 and r.transmitted == max(r.seq)
    assert 0 <= r.loss_ratio < 1 and math.isnan(r.elapsed_s)


def test_duplicates_errors_and_total_loss() -> None:
    text = """PING 198.18.3.2 (198.18.3.2) 56(84) bytes of data.
64 bytes from 198.18.3.2: icmp_seq=1 ttl=64 time=0.100 ms
64 bytes from 198.18.3.2: icmp_seq=1 ttl=64 time=0.300 ms (DUP!)
64 bytes from 198.18.3.2: icmp_seq=2 ttl=64 time=0.200 ms

--- 198.18.3.2 ping statistics ---
4 packets transmitted, 2 received, +1 duplicates, +1 errors, 50% packet loss, time 30ms
"""
    r = parse_ping_output(text)
    assert (r.transmitted, r.received, r.duplicates, r.errors) == (4, 2, 1, 1)
    assert r.rtt_ms == [0.1, 0.2] and r.avg_rtt_ms == pytest.approx(0.15) and r.loss_ratio == 0.5
    none = parse_ping_output("PING 198.18.3.2 (198.18.3.2) 56(84) bytes of data.\n\n--- 198.18.3.2 ping statistics ---\n"
                             "5 packets transmitted, 0 received, 100% packet loss, time 40ms\n")
    assert none.loss_ratio == 1.0 and math.isnan(none.avg_rtt_ms) and math.isnan(none.rtt_percentile_ms(50))


def test_not_ping_output_is_refused() -> None:
    with pytest.raises(LabError, match="not ping output"):
        parse_ping_output("Cannot open network namespace: No such file\n")


def test_ping_argv_and_its_checks() -> None:
    argv = ping_argv("198.18.1.2", 0.01, 500)
    assert argv[:1] == ["ping"] and argv[-1] == "198.18.1.2"
    assert argv[argv.index("-i") + 1] == "0.01" and argv[argv.index("-c") + 1] == "500" and "-D" in argv
    assert ping_count(0.01, duration_s=12) == 1200 and ping_count(0.01, count=7) == 7
    for bad in ({"dest": "10.0.0.1"}, {"dest": "example.org"}, {"interval_s": 0.0005}, {"count": 0},
                {"payload_bytes": 9000}, {"reply_timeout_s": 0}):
        kw = {"dest": "198.18.1.2", "interval_s": 0.01, "count": 10} | bad
        with pytest.raises(LabError):
            ping_argv(**kw)  # type: ignore[arg-type]
    with pytest.raises(LabError, match="exactly one"):
        ping_count(0.01)
    with pytest.raises(LabError, match="exactly one"):
        ping_count(0.01, count=3, duration_s=1.0)


# ------------------------------------------------------------------ cgroups
LXC_V1 = """9:name=systemd:/
8:pids:/
4:memory:/machine/lxc-6575-xtcx-c135-vr1.libvirt-lxc
2:cpuacct:/machine/lxc-6575-xtcx-c135-vr1.libvirt-lxc
1:cpu:/machine/lxc-6575-xtcx-c135-vr1.libvirt-lxc
0::/
"""


def test_v1_cpu_cgroup_of_an_lxc_vr_on_the_recorded_hybrid_host() -> None:
    cg = cpu_cgroup_of(LXC_V1, (DATA / "mountinfo_hybrid.txt").read_text())
    assert cg == CpuCgroupDir(1, Path("/sys/fs/cgroup/cpu/machine/lxc-6575-xtcx-c135-vr1.libvirt-lxc"))
    assert cg.procs_file.name == "cgroup.procs" and cg.quota_file.name == "cpu.cfs_quota_us"


def test_v2_cpu_cgroup_on_the_recorded_pure_v2_host() -> None:
    text = "0::/machine.slice/machine-lxc\\x2d4242\\x2dxtcx\\x2dab12\\x2dvr1.scope\n"
    cg = cpu_cgroup_of(text, (DATA / "mountinfo_v2.txt").read_text())
    assert cg.version == 2
    assert cg.path == Path("/sys/fs/cgroup/machine.slice/machine-lxc\\x2d4242\\x2dxtcx\\x2dab12\\x2dvr1.scope")
    assert cg.quota_file.name == "cpu.max"


def test_combined_v1_cpu_cpuacct_and_a_bind_mounted_subtree() -> None:
    mi = ("30 20 0:29 /machine /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
          "31 20 0:30 / /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n")
    assert parse_cgroup_mounts(mi)[0].controllers == frozenset({"cpu", "cpuacct"})
    assert parse_cgroup_mounts(mi)[1].mount_point == "/mnt/my cg"
    cg = cpu_cgroup_of("3:cpu,cpuacct:/machine/vr7\n0::/x\n", mi)
    assert cg == CpuCgroupDir(1, Path("/sys/fs/cgroup/cpu,cpuacct/vr7"))
    with pytest.raises(LabError, match="not under a mounted"):
        cpu_cgroup_of("3:cpu,cpuacct:/elsewhere/vr7\n", mi)


def test_the_cpuacct_group_to_join_where_cpuacct_is_mounted_apart() -> None:
    from xtc_lab.lab.hog import cpuacct_cgroup_of

    hybrid = (DATA / "mountinfo_hybrid.txt").read_text()
    # This host: cpu and cpuacct apart; an LXC domain's tasks are in its group of both.
    assert cpuacct_cgroup_of(LXC_V1, hybrid) == Path("/sys/fs/cgroup/cpuacct/machine/lxc-6575-xtcx-c135-vr1.libvirt-lxc")
    # A lab netns VR's forwarder, in a group of the cpu hierarchy only: nothing to join.
    assert cpuacct_cgroup_of("2:cpuacct:/\n1:cpu:/xtct-ab12-vr1\n0::/\n", hybrid) is None
    # cpu,cpuacct together (the cpu group is the accounting group), and pure v2: nothing more.
    mi = "30 20 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    assert cpuacct_cgroup_of("3:cpu,cpuacct:/machine/vr7\n", mi) is None
    assert cpuacct_cgroup_of("0::/machine.slice/vr7.scope\n", (DATA / "mountinfo_v2.txt").read_text()) is None


def test_a_process_without_a_cgroup_of_its_own_is_refused() -> None:
    mi = (DATA / "mountinfo_hybrid.txt").read_text()
    with pytest.raises(LabError, match="root cgroup"):
        cpu_cgroup_of("1:cpu:/\n0::/\n", mi)
    with pytest.raises(LabError, match="root of the cgroup v2"):
        cpu_cgroup_of("0::/\n", (DATA / "mountinfo_v2.txt").read_text())
    with pytest.raises(LabError, match="unexpected line"):
        parse_proc_cgroup("garbage\n")
    assert parse_proc_cgroup(LXC_V1)[0] == (9, frozenset({"name=systemd"}), "/")


# ------------------------------------------------------------------ the burn loop
class FakeClocks:
    """CPU and wall clocks: spinning advances both by ``tick_s``; sleeping advances the wall clock."""

    def __init__(self, tick_s: float = 1e-5, stolen_every: int = 0, stolen_s: float = 0.0):
        self.cpu = 0.0
        self.wall = 0.0
        self.tick_s = tick_s
        self.reads = 0
        self.stolen_every = stolen_every
        self.stolen_s = stolen_s

    def cpu_clock(self) -> float:
        self.reads += 1
        self.cpu += self.tick_s
        self.wall += self.tick_s
        if self.stolen_every and self.reads % self.stolen_every == 0:
            self.wall += self.stolen_s  # throttled: wall time passes, no CPU
        return self.cpu

    def wall_clock(self) -> float:
        return self.wall

    def sleep(self, s: float) -> None:
        assert s > 0
        self.wall += s


@pytest.mark.parametrize("percent", [5.0, 15.0, 50.0])
def test_hog_loop_burns_its_share_of_wall_time(percent: float) -> None:
    c = FakeClocks()
    n = hog_loop(percent, 0.1, keep_going=lambda: c.wall < 10.0, cpu_clock=c.cpu_clock, wall_clock=c.wall_clock,
                 sleep=c.sleep)
    assert n == pytest.approx(100, abs=1)
    assert 100 * c.cpu / c.wall == pytest.approx(percent, rel=0.02)


def test_a_throttled_stretch_is_not_made_up_afterwards() -> None:
    c = FakeClocks(stolen_every=500, stolen_s=0.2)  # throttled: 200 ms of wall time lost per 5 ms of CPU
    mark: dict[str, tuple[float, float]] = {}

    def keep_going() -> bool:
        if c.wall >= 2.0 and c.stolen_every:
            c.stolen_every = 0  # the throttling ends at 2 s
            mark["end"] = (c.wall, c.cpu)
        return c.wall < 4.0

    hog_loop(20.0, 0.1, keep_going, c.cpu_clock, c.wall_clock, c.sleep)
    t0, cpu0 = mark["end"]
    assert 100 * cpu0 / t0 < 5.0  # it got little while throttled ...
    assert 100 * (c.cpu - cpu0) / (c.wall - t0) == pytest.approx(20.0, rel=0.05)  # ... and no more than 20% after


def test_at_100_percent_it_never_sleeps() -> None:
    slept: list[float] = []
    c = FakeClocks()
    hog_loop(100.0, 0.1, keep_going=lambda: c.wall < 1.0, cpu_clock=c.cpu_clock, wall_clock=c.wall_clock,
             sleep=slept.append)
    assert slept == [] and c.cpu == pytest.approx(c.wall)


def test_hog_settings_are_checked() -> None:
    for bad in (0, -1, 101, float("nan")):
        with pytest.raises(LabError):
            hog_argv(bad)
        with pytest.raises(ValueError):
            hog_loop(bad, 0.1, lambda: False, lambda: 0.0, lambda: 0.0, lambda s: None)
    with pytest.raises(LabError, match="period_s"):
        hog_argv(10, period_s=5)
    argv = hog_argv(12.5, 0.1, parent=99, python="/usr/bin/python3")
    assert argv[:3] == ["/usr/bin/python3", "-m", "xtc_lab.lab.hog"] and "12.5" in argv and argv[-1] == "99"


def test_a_hog_that_cannot_be_placed_is_killed_before_it_burns(tmp_path: Path) -> None:
    from xtc_lab.lab.hog import CpuHog

    hog = CpuHog(CpuCgroupDir(1, tmp_path / "no-such-cgroup"), 5.0)
    with pytest.raises(LabError, match="cannot move the hog"):
        hog.start()
    assert hog.process is not None and hog.process.returncode is not None  # reaped
    assert hog.stop()["cpu_s"] == 0.0

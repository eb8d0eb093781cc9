"""The /proc/net/dev parser on recorded real files and on synthetic edge cases."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xtc.host.errors import MeterError
from xtc.daemon.meter import (
    IfCounters,
    ProcNetDevFormatError,
    ProcNetDevSource,
    RateTracker,
    parse_proc_net_dev,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "proc_net_dev"
RECORDED = sorted(p.stem for p in DATA.glob("*.txt"))

HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|"
    "bytes    packets errs drop fifo colls carrier compressed\n"
)


def line(name: str, rx_b: int, rx_p: int, rx_d: int, tx_b: int, tx_p: int, tx_d: int) -> str:
    return f"{name:>6}: {rx_b} {rx_p} 0 {rx_d} 0 0 0 0 {tx_b} {tx_p} 0 {tx_d} 0 0 0 0\n"


def test_recorded_files_exist() -> None:
    assert {"dom0_veth_t0", "dom0_veth_t1", "vr_side_t1"} <= set(RECORDED)


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_file_matches_netlink(name: str) -> None:
    """Each recorded file parses to the counters netlink reported at the same moment."""
    problems: list[str] = []
    got = parse_proc_net_dev((DATA / f"{name}.txt").read_text(), problems)
    expected = json.loads((DATA / f"{name}.expected.json").read_text())
    assert problems == []
    assert list(got) == list(sorted(got, key=list(got).index))  # file order kept
    assert set(got) == set(expected)
    for ifname, fields in expected.items():
        assert got[ifname] == IfCounters(**fields), ifname


def test_recorded_pair_gives_the_packets_sent() -> None:
    """Rates between the two recorded moments equal the netlink deltas over the span.

    Between t0 and t1 the capture sent 2000 packets to and 1500 from the VR on
    vif7.1 (plus the few packets the kernel sends when a link comes up).
    """
    t0 = ProcNetDevSource(DATA / "dom0_veth_t0.txt").read()
    t1 = ProcNetDevSource(DATA / "dom0_veth_t1.txt").read()
    e0 = json.loads((DATA / "dom0_veth_t0.expected.json").read_text())
    e1 = json.loads((DATA / "dom0_veth_t1.expected.json").read_text())
    tr = RateTracker(max_window_s=1.0)
    tr.update(10.0, t0)
    tr.update(10.5, t1)
    r = tr.rates()
    for ifname in ("vif7.0", "vif7.1", "lo"):
        for d in ("rx", "tx"):
            want = (e1[ifname][f"{d}_packets"] - e0[ifname][f"{d}_packets"]) / 0.5
            assert getattr(r[ifname], f"{d}_pps") == pytest.approx(want), (ifname, d)
    assert 2000 / 0.5 <= r["vif7.1"].tx_pps <= 2020 / 0.5
    assert 1500 / 0.5 <= r["vif7.1"].rx_pps <= 1520 / 0.5
    assert r["vif7.0"].tx_bytes_per_s > 700 * 1200 / 0.5


def test_host_and_vr_views_mirror_each_other() -> None:
    """Host-side RX of a vif is the VR side's TX of its peer (what the VR forwarded)."""
    host = parse_proc_net_dev((DATA / "dom0_veth_t1.txt").read_text())
    vr = parse_proc_net_dev((DATA / "vr_side_t1.txt").read_text())
    for n in (0, 1):
        assert host[f"vif7.{n}"].rx_packets == vr[f"eth{n}"].tx_packets
        assert host[f"vif7.{n}"].tx_packets == vr[f"eth{n}"].rx_packets


def test_extra_and_reordered_columns_are_tolerated() -> None:
    text = (
        "Inter-| Receive | Transmit\n"
        " face |packets newcol bytes drop|extra drop packets bytes\n"
        "  eth9: 5 77 500 2 9 1 6 600\n"
    )
    assert parse_proc_net_dev(text) == {
        "eth9": IfCounters(rx_packets=5, tx_packets=6, rx_bytes=500, tx_bytes=600, rx_drops=2, tx_drops=1)
    }


def test_old_kernel_format_without_space_after_colon() -> None:
    text = HEADER + "  eth0:123456789 100 0 3 0 0 0 0 999 7 0 1 0 0 0 0\n"
    assert parse_proc_net_dev(text)["eth0"] == IfCounters(100, 7, 123456789, 999, 3, 1)


@pytest.mark.parametrize(
    "bad, why",
    [
        ("garbage without colon\n", "no 'name:'"),
        ("  eth1: 1 2 3\n", "3 values"),
        ("  eth1: 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0 99\n", "17 values"),
        ("  eth1: 1 -2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n", "not a counter"),
        ("  eth1: 1 1_000 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n", "not a counter"),
        ("  eth1: 1 2.5 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n", "not a counter"),
        (f"  eth1: 1 {2**64} 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n", "not a counter"),
        ("    : 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n", "bad interface name"),
        ("  eth0: 9 9 0 0 0 0 0 0 9 9 0 0 0 0 0 0\n", "duplicate"),
    ],
)
def test_malformed_line_is_skipped_and_reported(bad: str, why: str) -> None:
    text = HEADER + line("eth0", 10, 1, 0, 20, 2, 0) + bad + line("eth2", 30, 3, 0, 40, 4, 0)
    problems: list[str] = []
    got = parse_proc_net_dev(text, problems)
    assert got["eth0"] == IfCounters(1, 2, 10, 20, 0, 0)  # the first eth0 wins
    assert got["eth2"] == IfCounters(3, 4, 30, 40, 0, 0)
    assert "eth1" not in got
    assert len(problems) == 1 and why in problems[0] and "line 4" in problems[0]


def test_malformed_line_is_logged_when_no_list_given(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="xtc.daemon.meter"):
        got = parse_proc_net_dev(HEADER + "what is this\n" + line("eth0", 1, 1, 0, 1, 1, 0))
    assert list(got) == ["eth0"]
    assert "no 'name:'" in caplog.text


def test_huge_counters_at_the_64_bit_limit() -> None:
    m = 2**64 - 1
    got = parse_proc_net_dev(HEADER + line("big0", m, m, m, m, m - 1, 0))
    assert got["big0"] == IfCounters(m, m - 1, m, m, m, 0)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "just one line\n",
        "MemTotal:       16310588 kB\nMemFree:         1234 kB\n",  # /proc/meminfo
        "Inter-|   Receive |  Transmit\n face |bytes errs|bytes packets drop\n",  # rx packets missing
        "sl  local_address rem_address\n 0: 0100007F:0277 00000000:0000\n",  # /proc/net/tcp
    ],
)
def test_not_proc_net_dev_raises_naming_the_problem(text: str) -> None:
    with pytest.raises(ProcNetDevFormatError, match="not /proc/net/dev"):
        parse_proc_net_dev(text)


def test_header_only_means_no_interfaces() -> None:
    assert parse_proc_net_dev(HEADER) == {}


def test_source_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(MeterError, match="nope"):
        ProcNetDevSource(tmp_path / "nope").read()
    f = tmp_path / "meminfo"
    f.write_text("MemTotal: 1 kB\nMemFree: 1 kB\n")
    with pytest.raises(ProcNetDevFormatError, match="meminfo"):
        ProcNetDevSource(f).read()


def test_source_keeps_last_problems(tmp_path: Path) -> None:
    f = tmp_path / "dev"
    f.write_text(HEADER + "broken\n" + line("eth0", 1, 2, 0, 3, 4, 0))
    src = ProcNetDevSource(f)
    assert src.read() == {"eth0": IfCounters(2, 4, 1, 3, 0, 0)}
    assert len(src.last_problems) == 1


def test_this_hosts_proc_net_dev_parses_cleanly() -> None:
    problems: list[str] = []
    got = parse_proc_net_dev(Path("/proc/net/dev").read_text(), problems)
    assert "lo" in got and problems == []


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-_", min_size=1, max_size=15)
u64 = st.integers(min_value=0, max_value=2**64 - 1)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(names, st.tuples(u64, u64, u64, u64, u64, u64), max_size=8))
def test_roundtrip_property(ifs: dict[str, tuple[int, ...]]) -> None:
    """Whatever counters are written in the kernel's format come back unchanged."""
    text = HEADER + "".join(line(n, *v) for n, v in ifs.items())
    problems: list[str] = []
    got = parse_proc_net_dev(text, problems)
    assert problems == []
    assert got == {n: IfCounters(v[1], v[4], v[0], v[3], v[2], v[5]) for n, v in ifs.items()}

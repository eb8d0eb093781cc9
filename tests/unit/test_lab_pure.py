"""Pure parts of the host lab: parsers, builders, argument checks, the C build and pid safety.

No root, no namespaces, no libvirtd.  The C programs are compiled into a temporary cache.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from xtc_lab.lab.build import FORWARDER_SOURCE, UDPSEND_SOURCE, BuildError, build_program, find_compiler
from xtc_lab.lab.libvirtd import Libvirtd, LibvirtdPaths, hybrid_cgroup2_mount
from xtc_lab.lab.netlab import (
    LAB_NET,
    MAX_VRS,
    LabError,
    check_prefix,
    lxc_domain_xml,
    parse_proc_net_dev,
    random_prefix,
    vr_addresses,
)
from xtc_lab.lab.traffic import iperf3_udp_argv, udpsend_argv

DATA = Path(__file__).resolve().parents[1] / "data"


# ------------------------------------------------------------------ libvirtd helpers
def test_hybrid_cgroup2_mount_found_on_recorded_hybrid_host() -> None:
    text = (DATA / "lab" / "mountinfo_hybrid.txt").read_text()
    assert hybrid_cgroup2_mount(text) == "/sys/fs/cgroup/unified"


def test_no_hybrid_mount_on_pure_v2_or_v1_hosts() -> None:
    assert hybrid_cgroup2_mount((DATA / "lab" / "mountinfo_v2.txt").read_text()) is None
    v1_only = "\n".join(
        line for line in (DATA / "lab" / "mountinfo_hybrid.txt").read_text().splitlines() if "cgroup2" not in line
    )
    assert hybrid_cgroup2_mount(v1_only) is None


def _paths(tmp_path: Path) -> LibvirtdPaths:
    return LibvirtdPaths(
        libvirtd=tmp_path / "no-libvirtd", virtlogd=tmp_path / "no-virtlogd", run_dir=tmp_path / "run",
        log_dir=tmp_path / "log", state_dir=tmp_path / "state",
    )


def test_ensure_running_reuses_a_reachable_daemon_and_starts_nothing(tmp_path: Path) -> None:
    calls: list[str] = []

    def probe(uri: str) -> str | None:
        calls.append(uri)
        return None

    d = Libvirtd("lxc:///", paths=_paths(tmp_path), probe=probe)
    assert d.ensure_running() is False
    assert calls == ["lxc:///"]
    assert not (tmp_path / "state").exists() and not (tmp_path / "run").exists()
    assert d.stop() == []


def test_stop_only_kills_the_recorded_process_not_a_recycled_pid(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    d = Libvirtd(paths=paths, probe=lambda uri: None)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = d._start_time(proc.pid)
        assert start is not None
        paths.state_dir.mkdir(parents=True)
        # Same pid, other start time: a different process that happens to reuse the pid.
        paths.state_file.write_text(json.dumps({"libvirtd": {"pid": proc.pid, "start": start + 1}}))
        assert d.started_here() == {}
        assert d.stop() == []
        assert proc.poll() is None
        paths.state_file.write_text(json.dumps({"libvirtd": {"pid": proc.pid, "start": start}}))
        assert d.started_here() == {"libvirtd": {"pid": proc.pid, "start": start}}
        assert d.stop(timeout_s=5) == ["libvirtd"]
        assert proc.wait(timeout=5) == -15
        assert json.loads(paths.state_file.read_text()) == {}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_restart_refuses_a_daemon_the_lab_did_not_start(tmp_path: Path) -> None:
    from xtc_lab.lab.libvirtd import LibvirtdError

    d = Libvirtd(paths=_paths(tmp_path), probe=lambda uri: None)
    with pytest.raises(LibvirtdError, match="not started by the XTC lab"):
        d.restart()


# ------------------------------------------------------------------ netlab builders
def test_parse_proc_net_dev_matches_recorded_expectations() -> None:
    for name in ("dom0_veth_t0", "dom0_veth_t1", "vr_side_t1"):
        parsed = parse_proc_net_dev((DATA / "proc_net_dev" / f"{name}.txt").read_text())
        expected = json.loads((DATA / "proc_net_dev" / f"{name}.expected.json").read_text())
        assert parsed == {k: (v["rx_packets"], v["tx_packets"]) for k, v in expected.items()}


def test_vr_addresses_are_in_the_benchmark_range_and_distinct() -> None:
    seen = set()
    for k in range(1, MAX_VRS + 1):
        tg, tr = vr_addresses(k)
        for a in (tg, tr):
            assert ipaddress.ip_address(a) in LAB_NET
        assert ipaddress.ip_network(f"{tg}/24", strict=False) == ipaddress.ip_network(f"{tr}/24", strict=False)
        seen |= {tg, tr}
    assert len(seen) == 2 * MAX_VRS
    for bad in (0, MAX_VRS + 1, -1):
        with pytest.raises(LabError, match="out of range"):
            vr_addresses(bad)


def test_prefixes_fit_interface_names() -> None:
    for _ in range(20):
        p = check_prefix(random_prefix())
        assert len(f"{p}-a{MAX_VRS}") <= 15
    for bad in ("", "xtct", "XTCT-1", "xtct-12345678901", "x y-1", "xtct-1;rm"):
        with pytest.raises(LabError, match="bad lab prefix"):
            check_prefix(bad)


def test_lxc_domain_xml_has_exe_init_bridges_and_quota() -> None:
    xml = lxc_domain_xml("xtct-1-vr1", ["/opt/fwd", "-w", "5", "eth0", "eth1"], ["br-a", "br-b"],
                         ["vif12.0", "vif12.1"], vcpu_quota_us=20000, memory_mib=32)
    dom = ET.fromstring(xml)
    assert dom.get("type") == "lxc" and dom.findtext("name") == "xtct-1-vr1"
    assert dom.findtext("os/type") == "exe" and dom.findtext("os/init") == "/opt/fwd"
    assert [a.text for a in dom.findall("os/initarg")] == ["-w", "5", "eth0", "eth1"]
    assert dom.findtext("cputune/quota") == "20000" and dom.findtext("cputune/period") == "100000"
    assert dom.findtext("vcpu") == "1" and dom.find("memory").get("unit") == "MiB"
    ifaces = dom.findall("devices/interface")
    assert [(i.get("type"), i.find("source").get("bridge"), i.find("target").get("dev"), i.find("guest").get("dev"))
            for i in ifaces] == [("bridge", "br-a", "vif12.0", "eth0"), ("bridge", "br-b", "vif12.1", "eth1")]


@pytest.mark.parametrize("kwargs, match", [
    ({"init": ["fwd"]}, "absolute"),
    ({"vifs": ["vif1.0"]}, "one vif name per bridge"),
    ({"vcpu_quota_us": 0}, "vcpu_quota_us"),
    ({"vcpu_quota_us": 999}, "vcpu_quota_us"),
    ({"vcpu_period_us": 100}, "vcpu_period_us"),
    ({"memory_mib": 1}, "memory_mib"),
])
def test_lxc_domain_xml_refuses_bad_input(kwargs: dict, match: str) -> None:
    args = {"name": "d", "init": ["/fwd"], "bridges": ["a", "b"], "vifs": ["vif1.0", "vif1.1"]}
    args.update(kwargs)
    with pytest.raises(LabError, match=match):
        lxc_domain_xml(**args)


# ------------------------------------------------------------------ traffic
def test_iperf3_bitrate_gives_the_packet_rate() -> None:
    argv = iperf3_udp_argv("198.18.1.2", rate_pps=100_000, duration_s=5, payload_bytes=64)
    assert argv[argv.index("-b") + 1] == str(100_000 * 64 * 8)
    assert argv[argv.index("-l") + 1] == "64" and "-u" in argv and argv[argv.index("-t") + 1] == "5"


@pytest.mark.parametrize("kwargs", [{"rate_pps": 0}, {"duration_s": 0.5}, {"payload_bytes": 2000}])
def test_stream_arguments_are_checked(kwargs: dict) -> None:
    args = {"rate_pps": 1000.0, "duration_s": 2.0, "payload_bytes": 64}
    args.update(kwargs)
    with pytest.raises(LabError):
        iperf3_udp_argv("198.18.1.2", **args)
    with pytest.raises(LabError):
        udpsend_argv("/x", "198.18.1.2", **args)


# ------------------------------------------------------------------ C build
def test_build_program_caches_and_rebuilds_on_change(tmp_path: Path) -> None:
    src = tmp_path / "hello.c"
    src.write_text('#include <stdio.h>\nint main(void){puts("one");return 0;}\n')
    cache = tmp_path / "cache"
    first = build_program(src, cache)
    assert subprocess.run([first], capture_output=True, text=True).stdout == "one\n"
    assert build_program(src, cache) == first  # unchanged source: reused
    src.write_text('#include <stdio.h>\nint main(void){puts("two");return 0;}\n')
    second = build_program(src, cache)
    assert second != first and subprocess.run([second], capture_output=True, text=True).stdout == "two\n"
    assert not first.exists()  # the build of the old source is gone
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_build_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="no C compiler found"):
        find_compiler("xtc-no-such-compiler")
    bad = tmp_path / "bad.c"
    bad.write_text("int main(void) { return nope; }\n")
    with pytest.raises(BuildError, match="nope"):
        build_program(bad, tmp_path / "cache")
    with pytest.raises(BuildError, match="cannot read"):
        build_program(tmp_path / "missing.c", tmp_path / "cache")


@pytest.mark.parametrize("source, bad_args", [
    (FORWARDER_SOURCE, [["eth0"], ["eth0", "eth0"], ["-w", "-3", "a", "b"], ["-w", "x", "a", "b"],
                        ["-f", "0", "a", "b"], ["-f", "-1", "a", "b"], ["-f", "101", "a", "b"], ["-f", "2x", "a", "b"],
                        ["-f", "", "a", "b"], ["-f", "nan", "a", "b"]]),
    (UDPSEND_SOURCE, [["198.18.1.2"], ["-r", "0", "-t", "1", "198.18.1.2"], ["-r", "10", "-t", "1", "not-an-ip"]]),
])
def test_shipped_programs_build_and_refuse_bad_arguments(tmp_path: Path, source: Path, bad_args: list) -> None:
    exe = build_program(source, tmp_path)
    for args in bad_args:
        r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=5)
        assert r.returncode == 1 and "usage" in r.stderr, args


def test_forwarder_gives_up_waiting_for_missing_interfaces(tmp_path: Path) -> None:
    exe = build_program(FORWARDER_SOURCE, tmp_path)
    r = subprocess.run([exe, "-t", "0", "xtc-no-if-a", "xtc-no-if-b"], capture_output=True, text=True, timeout=5)
    assert r.returncode == 1 and "not both present" in r.stderr


def test_forwarder_reports_its_factored_work(tmp_path: Path) -> None:
    """-f scales -w (rounded); the forwarder logs the work it will do once its interfaces are there."""
    exe = build_program(FORWARDER_SOURCE, tmp_path)
    src = FORWARDER_SOURCE.read_text()
    assert "round(FACTOR * WORK)" in src and '"w:f:r:t:"' in src
    for argv in (["-w", "3", "-f", "2.5", "-t", "0", "xtc-no-if-a", "xtc-no-if-b"], ["-f", "0.5", "-t", "0", "x", "y"]):
        r = subprocess.run([exe, *argv], capture_output=True, text=True, timeout=5)
        assert r.returncode == 1 and "not both present" in r.stderr  # accepted: it got as far as waiting


def test_udpsend_paces_to_the_requested_rate(tmp_path: Path) -> None:
    exe = build_program(UDPSEND_SOURCE, tmp_path)
    r = subprocess.run([exe, "-r", "2000", "-t", "0.5", "-p", "9", "127.0.0.1"], capture_output=True, text=True, timeout=5)
    report = json.loads(r.stdout)
    total = report["sent_packets"] + report["failed_packets"] + report["skipped_packets"]
    assert report["seconds"] >= 0.5
    assert total <= 2000 * report["seconds"] + 1  # never ahead of the schedule
    assert total >= 0.6 * 2000 * 0.5  # and near it (slack for a busy host stalling the sender)
    assert report["sent_packets"] > 0
    assert r.returncode == 0


def test_process_start_time_counts_a_process_whose_main_thread_exited_as_running(tmp_path: Path) -> None:
    """libvirtd after SIGTERM: the leader is a zombie while other threads finish the shutdown."""
    from xtc_lab.lab.libvirtd import process_start_time

    stat = "4242 (libvirtd) Z 1 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0\n"
    (tmp_path / "4242" / "task" / "4242").mkdir(parents=True)
    (tmp_path / "4242" / "stat").write_text(stat)
    assert process_start_time(4242, tmp_path) is None  # a plain zombie: exited
    (tmp_path / "4242" / "task" / "4250").mkdir()
    assert process_start_time(4242, tmp_path) == 777  # threads still run: not gone yet
    (tmp_path / "4242" / "stat").write_text(stat.replace(" Z ", " S "))
    assert process_start_time(4242, tmp_path) == 777
    assert process_start_time(4243, tmp_path) is None

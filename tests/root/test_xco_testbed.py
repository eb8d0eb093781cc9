"""The XCo testbed (``xtc xco lab``) on real namespaces, veths, bridges and TBF qdiscs.

What is proved:

* ``up`` (as a process) builds the ``small`` topology (4 hosts, 1 switch): ``status`` is healthy
  and shows a TBF at the scaled rate on every port; a VM pings another through the switch (the
  switch port's counters see the pings); GSO/TSO/GRO are off on the veths; ``down`` leaves no
  namespace, interface or record with the lab's prefix;
* two UDP senders at 80% of the link rate each into one receiver get the switch port's rate (the
  TBF, measured by the receiver) and the switch port drops the rest, the senders' uplinks do not;
* a process that built a lab and left a program in a VM's namespace is SIGKILLed (after the build,
  or half-way through it): ``down`` kills the program and removes everything;
* ``run fig15 --quick`` as a process writes its JSON (scale recorded, both points measured);
* ``run fig15 --quick --mode timeslice`` starts the controller and an agent per host, which hold the
  switch port's loss and the goodput of the mixed senders well on the goals' side of the baseline;
* ``run fig22 --quick --mode timeslice``: at each change between two alternating sets of UDP
  senders, the receiver sees the new set within tens of ms and no longer hole;
* the arithmetic of the in-slice share, the fig22 gap and Jain's index, on hand-made numbers;
* a topology with a VM address outside 198.18.0.0/15 is refused before anything is built; the
  ``xtc.xco_commands`` entry points reach ``xtc xco``.

Every test removes its lab afterwards, also when it fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from procs import measured_until_held

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


@pytest.fixture(autouse=True)
def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")


def lab_cli(*args: str, timeout_s: float = 90.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``xtc xco lab ARGS`` as a separate process (``env``: added to its environment)."""
    return subprocess.run([sys.executable, "-m", "xtc_lab.xco.lab_cli", "lab", *args], check=False,
                          capture_output=True,
                          text=True, timeout=timeout_s, env={**ENV, **(env or {})}, stdin=subprocess.DEVNULL, cwd=ROOT)


def run_quick(experiment: str, mode: str = "timeslice", *options: str, suffix: str = "",
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """``xtc xco lab run EXPERIMENT --quick --mode MODE [OPTIONS]``: its JSON document (written to a
    directory under /run/xtc, removed afterwards; ``suffix``: what the options add to its name)."""
    import shutil

    out = Path(f"/run/xtc/xco-lab-test-{experiment}-{os.getpid()}")
    try:
        p = lab_cli("run", experiment, "--quick", "--mode", mode, *options, "--out", str(out), timeout_s=220, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
        return json.loads((out / f"{experiment}-{mode}{suffix}-quick.json").read_text())
    finally:
        shutil.rmtree(out, ignore_errors=True)


def with_prefix(prefix: str) -> list[str]:
    """Namespaces and host interfaces whose names start with ``prefix-``."""
    from pyroute2 import netns

    stem = prefix + "-"
    return ([f"netns {n}" for n in netns.listnetns() if n.startswith(stem)]
            + [f"link {d.name}" for d in Path("/sys/class/net").iterdir() if d.name.startswith(stem)])


@pytest.fixture
def lab_name() -> Iterator[str]:
    """A fresh lab name; whatever carries it is removed afterwards (record, prefix)."""
    from xtc_lab.lab.netlab import LabError
    from xtc_lab.xco.testbed import read_record, remove_lab, remove_prefix

    name = f"test-{os.getpid()}-{time.monotonic_ns() % 100000}"
    yield name
    try:
        rec = read_record(name)
    except LabError:  # a damaged record: the prefix cannot be known
        rec = None
    remove_lab(name)
    if rec:
        remove_prefix(rec["prefix"])


@pytest.fixture
def small_lab(lab_name: str) -> Iterator[Any]:
    """The ``small`` topology built in this process."""
    from xtc_lab.xco.testbed import Testbed, build_lab, resolve_topology

    topo, _d, src = resolve_topology("small")
    tb = Testbed(build_lab(topo, lab_name, src))
    try:
        yield tb
    finally:
        tb.stop_all()


def test_capture_at_an_egress_keeps_what_leaves_and_stamps_it_before_the_peer_gets_it() -> None:
    """The in-slice capture helper (``experiments/capture.py``) with an egress interface keeps the
    packets the namespace sends out of it, stamped no later than the peer's ingress capture stamps
    them, and none that come in; without one it keeps what comes in (as at the switch's port)."""
    import secrets

    from xtc_lab.xco.experiments import capture as capture_helper
    from xtc_lab.xco.gate_bench import DST as addr_b
    from xtc_lab.xco.gate_bench import SRC as addr_a
    from xtc_lab.xco.gate_bench import veth_pair

    tag = secrets.token_hex(3)
    helper = [sys.executable, capture_helper.__file__]
    procs: list[subprocess.Popen[str]] = []
    outs = {k: Path(f"/run/xtc/xco-cap-test-{tag}-{k}.json") for k in ("egress", "ingress", "wrong-way")}
    Path("/run/xtc").mkdir(parents=True, exist_ok=True)
    try:
        with veth_pair() as (a, b):  # gs0 in a -- gr0 in b
            for key, ns, extra in (("egress", a, ["gs0"]), ("ingress", b, []), ("wrong-way", b, ["gr0"])):
                p = subprocess.Popen(["ip", "netns", "exec", ns, *helper, addr_b, "20", str(outs[key]), *extra],
                                     stdout=subprocess.PIPE, text=True)
                procs.append(p)
                assert p.stdout is not None and p.stdout.readline().strip() == "ready"
            subprocess.run(["ip", "netns", "exec", a, "ping", "-c", "20", "-i", "0.02", "-q", addr_b], check=True,
                           capture_output=True, timeout=30)
            for p in procs:
                p.send_signal(signal.SIGTERM)
                assert p.wait(timeout=30) == 0
        docs = {k: json.loads(v.read_text()) for k, v in outs.items()}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for f in outs.values():
            f.unlink(missing_ok=True)
    sent, got = docs["egress"]["times_us"].get(addr_a, []), docs["ingress"]["times_us"].get(addr_a, [])
    assert len(sent) == len(got) == 20, docs
    assert docs["wrong-way"]["packets"] == 0, docs["wrong-way"]  # b's own outgoing packets go to a
    transit = [g - s for s, g in zip(sent, got)]
    assert min(transit) >= 0 and max(transit) < 50_000, transit
    assert set(docs["egress"]["sizes"][addr_a]) == {84}  # ICMP echo, 56 bytes of data


@pytest.mark.beside  # times nothing and uses only its own lab
def test_up_ping_status_down(lab_name: str) -> None:
    from xtc_lab.xco.testbed import Testbed, read_record

    p = lab_cli("up", "--topology", "small", "--name", lab_name)
    assert p.returncode == 0, p.stderr
    rec = read_record(lab_name)
    assert rec is not None and rec["complete"] and rec["scale"] == 0.1
    prefix = rec["prefix"]
    assert len(rec["namespaces"]) == 1 + 4 + 4  # switch, hosts, one VM each
    s = lab_cli("status", "--name", lab_name)
    assert s.returncode == 0, s.stderr
    st = json.loads(s.stdout)
    assert st["healthy"] and st["namespaces_missing"] == []
    assert set(st["ports"]) == {f"{h}>sw1" for h in "abcd"} | {f"sw1>{h}" for h in "abcd"}
    for link, port in st["ports"].items():
        assert port["rate_bps"] == 100_000_000 and port["drops"] == 0, (link, port)
    assert st["ports"]["sw1>d"]["limit_bytes"] == 131_072

    tb = Testbed(rec)
    d_addr, _ = tb.vm("d")
    _a, a_ns = tb.vm("a")
    before = tb.port_stats()["sw1>d"]["packets"]
    ping = tb.run(a_ns, ["ping", "-n", "-c", "5", "-i", "0.05", "-W", "1", d_addr])
    assert ping.returncode == 0 and " 0% packet loss" in ping.stdout, ping.stdout
    assert tb.port_stats()["sw1>d"]["packets"] - before >= 5  # the echoes crossed the switch's port to d

    from pyroute2 import netns
    from pyroute2.ethtool import Ethtool

    netns.pushns(a_ns)
    try:
        et = Ethtool()
        f = et.get_features("eth0").features
        et.close()
    finally:
        netns.popns()
    for k in ("tx-tcp-segmentation", "tx-generic-segmentation", "rx-gro"):
        assert f[k].enable is False, k

    d = lab_cli("down", "--name", lab_name)
    assert d.returncode == 0, d.stderr
    assert with_prefix(prefix) == []
    assert read_record(lab_name) is None
    assert lab_cli("down", "--name", lab_name).returncode == 0  # again: nothing to do


def test_switch_port_tbf_limits_udp_to_the_link_rate(small_lab: Any) -> None:
    from xtc_lab.xco.experiments.flows import wait_listening

    tb = small_lab
    rate = tb.rate_bps("sw1>d")
    d_addr, d_ns = tb.vm("d")

    def offered_twice_the_rate() -> None:
        servers = [tb.spawn(d_ns, ["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL)
                   for port in (5301, 5302)]
        wait_listening(tb, d_ns, [5301, 5302])
        before = tb.port_stats()
        clients = [tb.spawn(tb.vm(h)[1], ["iperf3", "-c", d_addr, "-p", str(port), "-u", "-l", "1400",
                                          "-b", str(int(0.8 * rate)), "-t", "3", "--json"])
                   for h, port in (("a", 5301), ("b", 5302))]
        got = 0.0
        for c in clients:
            out, _err = c.communicate(timeout=30)
            doc = json.loads(out)
            got += doc["end"]["sum_received"]["bits_per_second"]
        for s in servers:
            s.wait(timeout=5)
        after = tb.port_stats()
        # offered 1.6x the port's rate; the receiver gets the rate (TBF's bucket and timing: within 10%)
        assert 0.90 * rate <= got <= 1.03 * rate, got
        assert after["sw1>d"]["drops"] - before["sw1>d"]["drops"] > 1000
        assert after["a>sw1"]["drops"] == before["a>sw1"]["drops"]  # 80% of the NIC rate passes the uplink
        assert after["b>sw1"]["drops"] == before["b>sw1"]["drops"]

    # Measured again when a run misses (the bounds unchanged): in one CI run, while the hypervisor took a third
    # of this VM's CPU, the two senders got 84 Mbit/s through.
    measured_until_held(offered_twice_the_rate, "the switch port's TBF")


CRASH = textwrap.dedent("""
    import os, signal, subprocess, sys
    from xtc_lab.xco import testbed
    name, when = sys.argv[1], sys.argv[2]
    topo, _d, src = testbed.resolve_topology("small")
    if when == "mid-build":
        def die(*a, **k):
            os.kill(os.getpid(), signal.SIGKILL)
        testbed.offloads_off = die
    rec = testbed.build_lab(topo, name, src)
    tb = testbed.Testbed(rec)
    p = tb.spawn(tb.vm("a")[1], ["sleep", "300"], start_new_session=True)
    print(p.pid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.mark.beside  # times nothing and uses only its own lab
@pytest.mark.parametrize("when", ["after-build", "mid-build"])
def test_down_after_a_crash(lab_name: str, when: str) -> None:
    from xtc_lab.xco.testbed import read_record

    p = subprocess.run([sys.executable, "-c", CRASH, lab_name, when], check=False, capture_output=True, text=True,
                       timeout=60, env=ENV)
    assert p.returncode == -signal.SIGKILL, p.stderr
    rec = read_record(lab_name)
    assert rec is not None, "the record is written before the build"
    assert rec["complete"] is False if when == "mid-build" else rec["complete"] is True
    prefix = rec["prefix"]
    assert with_prefix(prefix), "the crash left namespaces behind"
    orphan = int(p.stdout.split()[0]) if when == "after-build" else None
    if orphan:
        os.kill(orphan, 0)  # alive, in the lab's namespace, owned by nobody
    d = lab_cli("down", "--name", lab_name)
    assert d.returncode == 0, d.stderr
    assert with_prefix(prefix) == []
    assert read_record(lab_name) is None
    if orphan:
        import psutil

        try:  # killed: gone, or a zombie that its new parent has not reaped yet
            assert psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            pass


@pytest.mark.beside  # asserts the report's shape, no rate: its own lab, removed by the run
def test_run_quick_writes_its_json(tmp_path: Path) -> None:
    """Figure 16 quick without XCo: 26 VMs on two switches, each sender to its own receiver, at the
    experiment's own scale (0.02)."""
    p = lab_cli("run", "fig16", "--quick", "--out", str(tmp_path), timeout_s=150)
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "fig16-quick.json").read_text())
    assert doc["scale"] == 0.02 and doc["mode"] == "none" and doc["quick"] is True
    assert doc["bottleneck"] == "sw1>sw2" and doc["bottleneck_bps"] == 200_000_000 and doc["nic_bps"] == 20_000_000
    assert [pt["n_udp"] for pt in doc["points"]] == [0, 7]
    for pt in doc["points"]:
        flows = pt["flows"]
        assert [(f["sender"], f["receiver"]) for f in flows] == [(f"s{k}", f"r{k}") for k in range(1, 14)]
        assert [f["proto"] for f in flows].count("udp") == pt["n_udp"]
        assert pt["errors"] == [] and all(f["goodput_bps"] > 0 for f in flows if f["proto"] == "tcp")
        assert "drops" in pt["switch_port"]
    assert (tmp_path / "fig16-quick.png").stat().st_size > 1000
    assert "Scale 0.02" in (tmp_path / "fig16-quick.md").read_text()
    assert with_prefix(doc["lab_prefix"]) == []  # the run removed its lab


@pytest.mark.beside  # times nothing and uses only its own lab name
def test_refuses_addresses_outside_the_benchmark_range(lab_name: str, tmp_path: Path) -> None:
    from xtc.xco.topology import parse_topology
    from xtc_lab.lab.netlab import LabError
    from xtc_lab.xco.testbed import plan_lab, small

    data = small()
    data["host"][1]["vms"] = ["10.1.2.3"]
    with pytest.raises(LabError, match=r"host b: VM address 10\.1\.2\.3 is outside 198\.18\.0\.0/15"):
        plan_lab(parse_topology(data), "xco-0abc")
    path = tmp_path / "topo.toml"
    path.write_text('schema = "xco-topology/1"\n[[switch]]\nname = "s"\n'
                    '[[host]]\nname = "x"\nnic_bps = 1000\nswitch = "s"\nvms = ["10.0.0.1"]\n'
                    '[[host]]\nname = "y"\nnic_bps = 1000\nswitch = "s"\n')
    p = lab_cli("up", "--topology", str(path), "--name", lab_name)
    assert p.returncode == 1 and "outside 198.18.0.0/15" in p.stderr
    from xtc_lab.xco.testbed import read_record

    assert read_record(lab_name) is None  # refused before the record


def test_xco_commands_entry_point_reaches_xtc_xco(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata as md

    from xtc.cli import build_parser

    ep = md.EntryPoint(name="lab", value="xtc_lab.xco.lab_cli:register", group="xtc.xco_commands")
    real = md.entry_points
    monkeypatch.setattr(md, "entry_points",
                        lambda **kw: [ep] if kw.get("group") == "xtc.xco_commands" else real(**kw))
    args = build_parser().parse_args(["xco", "lab", "run", "fig18", "--quick"])
    assert args.experiment == "fig18" and args.quick and args.mode == "none"


@pytest.mark.timeout(720)
def test_run_quick_with_timeslices_holds_the_switch_port() -> None:
    """``run fig15 --quick --mode timeslice``: the controller and 7 agents start, are welcomed and stop
    cleanly, and the switch port is held to the goals' side of the baseline (measured at 10 ms slices:
    5 TCP senders lose 0.4-1.5 % at the switch, 95-96 % goodput; with 3 UDP senders each TCP flow gets
    20-22 Mb/s of 100, the total goodput varies with the load, 46-81 %; without XCo 4.2 % loss, and
    3 Mb/s per TCP flow with 3 UDP senders).

    The rates are measured again when a run misses them (up to three runs, all recorded), and asserted
    on the first run that holds them, else on the last, with the bounds unchanged: in one CI run on a
    2-core VM the 5 TCP senders' goodput was 71 % (the run took 31 s instead of 20-22)."""
    runs = []
    for _attempt in range(3):
        doc = run_quick("fig15")
        xco = doc["xco"]
        assert doc["mode"] == "timeslice" and xco["slice_us"] == 10_000
        assert set(xco["exit_codes"].values()) == {0}, xco["exit_codes"]  # SIGTERM: Leave, qdisc restored
        agents = [f"agent-{h}" for h in ("s1", "s2", "s3", "s4", "s5", "r1", "q1")]
        assert all(xco["log_events"][a].get("welcomed") == 1 for a in agents)
        assert sum(xco["agent_metrics"][h]["directives"] for h in ("s1", "s2", "s3", "s4", "s5")) > 300
        tcp, mixed = doc["points"]
        assert (tcp["n_udp"], mixed["n_udp"]) == (0, 3)
        assert with_prefix(doc["lab_prefix"]) == []
        runs.append({"tcp_loss_percent": tcp["switch_port"]["loss_percent"], "goodput": tcp["goodput_fraction"],
                     "mixed_tcp_per_flow_bps": mixed["tcp_per_flow_bps"],
                     "mixed_loss_percent": mixed["switch_port"]["loss_percent"]})
        print(f"\nrun {len(runs)}: {runs[-1]}")
        if (tcp["switch_port"]["loss_percent"] <= 2.0 and tcp["goodput_fraction"] >= 0.85
                and mixed["tcp_per_flow_bps"] >= 0.12 * doc["bottleneck_bps"]
                and mixed["switch_port"]["loss_percent"] <= 5.0):
            break
    assert tcp["switch_port"]["loss_percent"] <= 2.0, (tcp["switch_port"], runs)
    assert tcp["goodput_fraction"] >= 0.85, (tcp["goodput_fraction"], runs)
    # each TCP flow keeps its turn against 3 UDP senders at the NIC rate (without XCo: 3 Mb/s of 100)
    assert mixed["tcp_per_flow_bps"] >= 0.12 * doc["bottleneck_bps"], (mixed, runs)
    assert mixed["switch_port"]["loss_percent"] <= 5.0, (mixed["switch_port"], runs)  # without XCo: 64 %


@pytest.mark.timeout(480)
@pytest.mark.experiment  # about 20 s quiet, minutes under load: Figure 15's quick run on the testbed
def test_run_fig15_quick_with_a_close_guard_sends_98_percent_inside_the_slices() -> None:
    """``run fig15 --quick --mode timeslice --in-slice`` with the agents' ``close_guard_us`` at 150:
    >= 98 % of the packets towards r1 left their sender's gate inside its open slices, stamped at the
    switch's port and at the senders' uplinks, with 5 TCP senders and with 2 TCP + 3 UDP (measured:
    98.9-99.1 % and 99.7-99.9 % in five runs, two beside a busy loop; without the guard 97.7-98.0 %
    and 98.7 %).  A busy host may hold an agent past a close: up to three runs, the bound unchanged."""
    misses = []
    for _attempt in range(3):
        doc = run_quick("fig15", "timeslice", "--in-slice", suffix="-capture",
                        env={"XTC_XCO_LAB_CLOSE_GUARD_US": "150"})
        assert doc["xco"]["close_guard_us"] == 150 and doc["command"].startswith("XTC_XCO_LAB_CLOSE_GUARD_US=150 ")
        assert with_prefix(doc["lab_prefix"]) == []
        shares = [(p["n_tcp"], where, p["in_slice"][key]["inside"], p["in_slice"][key]["packets"])
                  for p in doc["points"] for where, key in (("switch", "all"), ("uplinks", "at_uplinks"))]
        assert all(n > 5000 for _t, _w, _s, n in shares), shares  # both captures saw the run's packets
        missed = [x for x in shares if x[2] < 0.98]
        if not missed:
            return
        misses.append((missed, os.getloadavg()))
    pytest.fail(f"under 98 % inside the slices in three runs: {misses}")


@pytest.mark.timeout(240)
@pytest.mark.experiment  # about 20 s quiet, minutes under load: Figure 22's quick run on the testbed
def test_run_fig22_quick_with_timeslices_switches_sets_within_tens_of_ms() -> None:
    """``run fig22 --quick --mode timeslice``: two sets of three UDP senders alternate every 2 s; at each
    change the receiver sees the new set's frames and no long hole (measured at 10 ms slices, load 4-6:
    the new set's first frame 0.1-35 ms after the change, the old set's last 57-148 ms after it
    (its held queue), gap at a change 0.5-14 ms in quick runs, 1.5-8.5 ms in a full one; without XCo
    0.1-4 ms and gaps of 0.4-3 ms)."""
    doc = run_quick("fig22")
    assert set(doc["xco"]["exit_codes"].values()) == {0}, doc["xco"]["exit_codes"]
    # XCo scheduled both sets: each sender's agent applied directives (measured: 156-277 each)
    assert all(doc["xco"]["agent_metrics"][h]["directives"] >= 50 for h in ("s1", "s2", "s3", "s4", "s5", "q1"))
    assert doc["capture_drops"] == 0 and doc["captured"] > 30_000, (doc["captured"], doc["capture_drops"])
    assert len(doc["changes"]) == doc["periods"] - 1 == 3
    for ch in doc["changes"]:
        assert ch["new_set_first_us"] is not None and ch["new_set_first_us"] <= 100_000, ch
        assert ch["old_set_last_us"] is not None and ch["old_set_last_us"] <= 400_000, ch  # the held queue drains
        assert ch["gap_at_change_us"] <= 50_000, ch
    assert doc["switch_port"]["loss_percent"] <= 5.0, doc["switch_port"]
    assert with_prefix(doc["lab_prefix"]) == []


@pytest.mark.timeout(480)
@pytest.mark.experiment  # about 20 s quiet, minutes under load: Figure 18's quick run on the testbed
def test_run_fig18_quick_rate_mode_below_the_line_rate_keeps_the_switch_queue_short() -> None:
    """``run fig18 --quick --mode rate --rate-link-fraction 0.97``: 3 TCP + 2 UDP senders share 97% of
    r1's port, so its queue drains between their bursts and a ping across it waits for almost nothing
    (measured in full runs: p99 0.088 ms, against 4.6 ms with the rates filling the port and 10.4 ms
    without XCo; a full queue is 10.5 ms).  On a loaded host a run can be disturbed (a late gate
    change lets a burst through): the run is repeated once before the test fails."""
    for attempt in range(2):
        doc = run_quick("fig18", "rate", "--rate-link-fraction", "0.97", suffix="-link0.97")
        xco = doc["xco"]
        assert xco["rate_link_fraction"] == 0.97 and set(xco["exit_codes"].values()) == {0}, xco
        port_bps = doc["port_buffer_bytes"] * 8 / (doc["full_queue_ms"] / 1000)
        # the senders get at most the 97% of the port shared, measured at the port while all five
        # send (the sum of their goodputs is not that measure: each is a mean over a window of its
        # own, and a TCP flow that ends first hands its rate to the UDP senders' queues, 4 MiB each;
        # on 2026-11-24 the goodputs summed to 95.5-98.3 Mb/s, 97.5 in a run whose port carried 95.1),
        # less the pings' echo requests (0.05-0.08% of the port), which no sender sends.  What a
        # token bucket promises over a window T is its rate times T plus its bucket, and each
        # sender's gate (a TBF at its rate) holds 1 ms of that rate (TcGate's rate burst; the
        # rates do not change in the middle of the run, so no bucket refills there): together
        # 0.97 x the port x (T + 1 ms).
        sp = doc["steady_port"]
        steady = sp["senders_bps"]
        bound = 0.97 * port_bps * (1 + 0.001 / sp["window_s"])
        rates = [f["goodput_bps"] for f in doc["background"]]
        # each has its share: no TCP flow starved by the UDP senders (without XCo: 0.2 Mb/s)
        shared = steady <= bound and min(rates) >= 0.15 * port_bps
        busy = doc["congested"]
        ok = shared and busy["received"] >= 0.99 * busy["sent"] and busy["p99_ms"] <= 0.2 * doc["full_queue_ms"]
        if ok:
            break
    assert steady <= bound, (doc["steady_port"], rates)
    assert min(rates) >= 0.15 * port_bps, rates
    assert ok, (busy, doc["switch_port"])
    assert with_prefix(doc["lab_prefix"]) == []


def test_slice_and_gap_arithmetic(tmp_path: Path) -> None:
    """The pure parts of the in-slice share, the fig22 gap and Jain's index, on hand-made numbers."""
    import numpy as np

    from xtc_lab.xco.experiments.fairness import jain
    from xtc_lab.xco.experiments.timing import (
        applied_directives,
        gaps,
        inside_share,
        miss_offsets,
        open_intervals,
    )

    log = tmp_path / "agent.log"
    lines = [{"event": "directive_applied", "dest": 5, "start_us": 0, "applied_us": 2_000},
             {"event": "directive_applied", "dest": None, "start_us": 10_000, "applied_us": 12_500},
             {"event": "welcomed"},
             {"event": "directive_applied", "dest": 5, "start_us": 40_000, "applied_us": 40_100}]
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    grid = open_intervals(applied_directives(log), 10_000)
    assert grid.tolist() == [[0, 10_000], [40_000, 50_000]]  # the last one slice long
    gate = open_intervals(applied_directives(log, "applied_us"), 10_000)
    assert gate.tolist() == [[2_000, 12_500], [40_100, 50_100]]
    t = [500, 9_999, 10_000, 10_900, 20_000, 45_000]
    assert inside_share(t, grid) == 3 / 6
    # where the three outside fall: 0, 0.9 and 10 ms after the first slice's end, 30, 29.1 and 20 ms
    # before the next one's start (p10, p50, p90)
    assert miss_offsets(t, grid) == {"missed": 3, "after_end_us": [180.0, 900.0, 8180.0],
                                     "before_start_us": [21820.0, 29100.0, 29820.0]}
    assert inside_share(t, grid, late_us=1_000) == 5 / 6  # 10_000 and 10_900 are late by < 1 ms
    assert inside_share([], grid) is None and inside_share([1], np.zeros((0, 2))) == 0.0
    g, = gaps([0, 1_000, 9_000, 9_500, 40_000], [5_000], before_us=5_000, after_us=45_000, change_us=4_000)
    assert (g["gap_at_change_us"], g["gap_us"], g["gap_starts_at_us"]) == (8_000, 30_500, 4_500)
    assert jain([1.0, 1.0, 1.0]) == 1.0 and jain([1.0, 0.0, 0.0]) == pytest.approx(1 / 3) and jain([0.0]) is None

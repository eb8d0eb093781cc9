"""Pure parts of ``xtc lab up/status/down`` and the lab's chain and cgroup helpers.

Argument checks, shape comparison, the persistent record's validation, damage detection on
host snapshots, the daemon configuration a lab prints (loaded by the daemon's own parser), the
addressing plan of chains and the cgroup mount detection on recorded mountinfo files.  No root.
"""

from __future__ import annotations

import argparse
import dataclasses
import copy
import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from xtc.daemon.config import loads_config
from xtc_lab.lab import lifecycle as L
from xtc_lab.lab.cgroups import cpu_cgroup_mounts
from xtc_lab.lab.netlab import LAB_NET, LabError, chain_addresses, teardown_orphans, vr_addresses
from xtc_lab.lab.record import namespaces_of
from xtc_lab.lab.status import format_cap

DATA = Path(__file__).resolve().parents[1] / "data"


# ---------------------------------------------------------------------------------- records
def netns_record(name: str = "xtct-ab12", n: int = 2) -> dict[str, Any]:
    vrs = []
    for k in range(1, n + 1):
        vrs.append({"k": k, "name": f"{name}-vr{k}", "kind": "netns", "router": None, "domain": None,
                    "netns": f"{name}-vr{k}", "cgroup": f"/sys/fs/cgroup/cpu/{name}-vr{k}",
                    "vifs": [f"vif{100 + k}.0", f"vif{100 + k}.1"], "bridges": [f"{name}-a{k}", f"{name}-b{k}"],
                    "tg_ns": f"{name}-tg{k}", "tr_ns": f"{name}-tr{k}", "tg_addr": f"198.18.{k}.1",
                    "tr_addr": f"198.18.{k}.2", "forwarder": {"pid": 1000 + k, "start": 5000 + k}})
    links = [x for k in range(1, n + 1) for x in (f"{name}-a{k}", f"{name}-b{k}", f"{name}-g{k}", f"{name}-r{k}")]
    return {"schema": "xtc-lab/1", "persistent": True, "owner": "lab", "name": name, "mode": "netns", "n_vrs": n,
            "hops": 1, "work_iters": 0, "uri": None, "cpu_cgroup": {"version": 1, "root": "/sys/fs/cgroup/cpu"},
            "created_unix_s": 1.0, "vrs": vrs, "chain": None, "links": links}


def chain_record(name: str = "xtct-cd34") -> dict[str, Any]:
    vrs = []
    for k in range(1, 4):
        vrs.append({"k": k, "name": f"{name}-vr{k}", "kind": "lxc", "router": f"tf{k}", "domain": f"{name}-vr{k}",
                    "netns": None, "cgroup": None, "vifs": [f"vif{200 + k}.0", f"vif{200 + k}.1"],
                    "bridges": [f"{name}-h1{k - 1}", f"{name}-h1{k}"], "tg_ns": f"{name}-cg1", "tr_ns": f"{name}-cr1",
                    "tg_addr": "198.19.1.1", "tr_addr": "198.19.1.2", "forwarder": None})
    chain = {"c": 1, "tg_ns": f"{name}-cg1", "tr_ns": f"{name}-cr1", "tg_addr": "198.19.1.1", "tr_addr": "198.19.1.2",
             "bridges": [f"{name}-h1{j}" for j in range(4)],
             "routers": [{"name": f"tf{k}", "vr": f"{name}-vr{k}"} for k in range(1, 4)],
             "probes": [{"after": f"tf{h}", "ns": f"{name}-p1{h}", "addr": f"198.19.1.{10 + h}", "bridge": f"{name}-h1{h}"}
                        for h in (1, 2)]}
    links = chain["bridges"] + [f"{name}-cg1", f"{name}-cr1", f"{name}-p11", f"{name}-p12"]
    return {"schema": "xtc-lab/1", "persistent": True, "owner": "lab", "name": name, "mode": "lxc", "n_vrs": 1,
            "hops": 3, "work_iters": 0, "uri": "lxc:///", "cpu_cgroup": None, "created_unix_s": 1.0, "vrs": vrs,
            "chain": chain, "links": links}


def healthy_facts(record: dict[str, Any]) -> L.HostFacts:
    links = {n: (True, "up") for n in record["links"]}
    links.update({v: (True, "up") for vr in record["vrs"] for v in vr["vifs"]})
    procs = {vr["forwarder"]["pid"]: vr["forwarder"]["start"] for vr in record["vrs"] if vr["forwarder"]}
    cgroups = {vr["cgroup"]: (vr["forwarder"]["pid"],) for vr in record["vrs"] if vr["cgroup"]}
    doms = {vr["domain"]: True for vr in record["vrs"] if vr["domain"]}
    return L.HostFacts(netns=frozenset(namespaces_of(record)), links=links, domains=doms, domains_error=None,
                       processes=procs, cgroups=cgroups)


# ---------------------------------------------------------------------------- argument checks
@pytest.mark.parametrize(
    "args, words",
    [
        (("kvm", 1, 1, 0), "unknown mode 'kvm'"),
        (("lxc", 0, 1, 0), "--vrs 0 out of range 1..64"),
        (("netns", 65, 1, 0), "out of range"),
        (("lxc", "2", 1, 0), "--vrs '2'"),
        (("lxc", True, 1, 0), "--vrs True"),
        (("lxc", 1, 2, 0), "--hops 2: want 1"),
        (("lxc", 1, True, 0), "--hops True"),
        (("lxc", 2, 3, 0), "--vrs must be 1"),
        (("lxc", 1, 1, -1), "--work -1"),
    ],
)
def test_bad_shapes_are_refused_with_the_reason(args: tuple, words: str) -> None:
    with pytest.raises(LabError) as e:
        L.check_shape(*args)
    assert words in str(e.value)


@pytest.mark.parametrize("factor", [0, -1, 0.0, 101, float("nan"), float("inf"), "2", True, None])
def test_bad_work_factor_is_refused_naming_the_key(factor: Any) -> None:
    with pytest.raises(LabError, match="--work-factor") as e:
        L.check_shape("lxc", 1, 1, 100, factor)
    assert "> 0" in str(e.value)
    rec = netns_record()
    rec["work_factor"] = factor
    with pytest.raises(L.LabRecordError, match="work_factor"):
        L.validate_record(rec)


def test_work_factor_reaches_the_shape_record_and_forwarder_command_line() -> None:
    from xtc_lab.lab.netlab import forwarder_argv

    s = L.check_shape("netns", 1, 1, 6000, 0.5)
    assert s.work_factor == 0.5 and "factor 0.5" in s.describe()
    assert L.check_shape("netns", 1, 1, 6000) == L.LabShape("netns", 1, 1, 6000, 1.0)
    assert L.shape_difference(L.LabShape("netns", 1, 1, 6000, 1.0), s) == ["work factor 1.0 (asked: 0.5)"]
    rec = netns_record()
    assert L.shape_of(L.validate_record(rec)).work_factor == 1.0  # a record from before the factor existed
    rec["work_factor"] = 2.0
    assert L.shape_of(L.validate_record(rec)).work_factor == 2.0
    # Factor 1 adds nothing: the command line the lab always used.
    assert forwarder_argv("/x/fw", 6000) == ["/x/fw", "-w", "6000", "eth0", "eth1"]
    assert forwarder_argv("/x/fw", 6000, 1.0, wait_s=10) == ["/x/fw", "-w", "6000", "-t", "10", "eth0", "eth1"]
    assert forwarder_argv("/x/fw", 6000, 2) == ["/x/fw", "-w", "6000", "-f", "2.0", "eth0", "eth1"]
    assert forwarder_argv("/x/fw", 6000, rcvbuf_bytes=2097152) == ["/x/fw", "-w", "6000", "-r", "2097152", "eth0", "eth1"]
    assert forwarder_argv("/x/fw", 6000, 0.5, wait_s=10) == ["/x/fw", "-w", "6000", "-f", "0.5", "-t", "10",
                                                             "eth0", "eth1"]
    with pytest.raises(LabError, match="work_factor 0"):
        forwarder_argv("/x/fw", 6000, 0)
    a = parser().parse_args(["up", "--work", "6000", "--work-factor", "2"])
    assert (a.work, a.work_factor) == (6000, 2.0)


def test_up_refuses_a_bad_work_factor_before_anything_is_made(capsys: pytest.CaptureFixture[str]) -> None:
    args = parser().parse_args(["up", "--work-factor", "0"])
    assert args.func(args) == L.EXIT_USAGE
    assert "--work-factor 0.0 out of range" in capsys.readouterr().err


def test_good_shapes() -> None:
    assert L.check_shape("netns", 2, 1, 0) == L.LabShape("netns", 2, 1, 0)
    s = L.check_shape("lxc", 1, 3, 500)
    assert s.total_vrs == 3 and "3 routers" in s.describe()
    assert L.check_shape("lxc", 64, 1, 0).total_vrs == 64


@pytest.mark.parametrize("name", ["", "XTC-lab", "xtc", "xtc-lab-toolong", "xtc_lab", "-lab", "xtc-", 7, None, "a/b-c"])
def test_bad_names_are_refused(name: Any) -> None:
    with pytest.raises(LabError, match="lab name"):
        L.check_name(name)


def test_default_name_is_valid() -> None:
    assert L.check_name(L.DEFAULT_NAME) == "xtc-lab"


def test_shape_difference_names_each_change() -> None:
    a = L.LabShape("netns", 2, 1, 0)
    assert L.shape_difference(a, a) == []
    assert L.shape_difference(a, L.LabShape("lxc", 1, 3, 5)) == [
        "mode netns (asked: lxc)", "VRs 2 (asked: 1)", "hops 1 (asked: 3)", "work 0 (asked: 5)"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="xtc lab")
    L.register(p.add_subparsers(dest="cmd"))
    return p


def test_cli_parses_and_bad_values_fail_before_anything_is_made(capsys: pytest.CaptureFixture[str]) -> None:
    a = parser().parse_args(["up", "--name", "xtct-0001", "--vrs", "2", "--mode", "netns", "--json"])
    assert (a.name, a.vrs, a.mode, a.hops, a.work, a.json) == ("xtct-0001", 2, "netns", 1, 0, True)
    for argv, words in ((["up", "--mode", "xen"], "unknown mode 'xen'"), (["up", "--vrs", "0"], "out of range"),
                        (["up", "--hops", "2"], "--hops 2"), (["up", "--name", "Bad Name"], "bad lab name"),
                        (["up", "--hops", "3", "--vrs", "2"], "--vrs must be 1")):
        args = parser().parse_args(argv)
        assert args.func(args) == L.EXIT_USAGE
        assert words in capsys.readouterr().err
    args = parser().parse_args(["status", "--router", "tf1"])
    assert args.func(args) == L.EXIT_USAGE
    assert "--router goes with --daemon-config" in capsys.readouterr().err
    args = parser().parse_args(["down", "--all", "--name", "xtct-0001"])
    assert args.func(args) == L.EXIT_USAGE


# ------------------------------------------------------------------------------------ records
def test_records_validate_and_convert() -> None:
    r = L.validate_record(netns_record())
    vrs = L.record_vrs(r)
    assert [v.name for v in vrs] == ["xtct-ab12-vr1", "xtct-ab12-vr2"]
    assert vrs[1].vifs == ("vif102.0", "vif102.1") and vrs[1].cgroup == "/sys/fs/cgroup/cpu/xtct-ab12-vr2"
    assert L.record_chain(r) is None
    c = L.validate_record(chain_record())
    ch = L.record_chain(c)
    assert ch is not None and ch.routers == ("tf1", "tf2", "tf3")
    assert ch.router_vr("tf2").name == "xtct-cd34-vr2"
    assert ch.targets() == [("after-tf1", "198.19.1.11"), ("after-tf2", "198.19.1.12"), ("tr", "198.19.1.2")]
    assert L.shape_of(c) == L.LabShape("lxc", 1, 3, 0)


def _broken(make: Any, path: tuple, value: Any = None, delete: bool = False) -> dict[str, Any]:
    doc = make()
    d = doc
    for p in path[:-1]:
        d = d[p]
    if delete:
        del d[path[-1]]
    else:
        d[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    "doc, key",
    [
        (_broken(netns_record, ("schema",), "xtc-lab/0"), "'schema'"),
        (_broken(netns_record, ("persistent",), False), "'persistent'"),
        (_broken(netns_record, ("bogus",), 1), "'bogus'"),
        (_broken(netns_record, ("vrs",), delete=True), "'vrs'"),
        (_broken(netns_record, ("mode",), "xen"), "'mode' must be one of 'lxc', 'netns'"),
        (_broken(netns_record, ("n_vrs",), 3), "'vrs' must list 3"),
        (_broken(netns_record, ("cpu_cgroup",), None), "'cpu_cgroup'"),
        (_broken(netns_record, ("vrs", 0, "k"), 2), "'vrs[0].k'"),
        (_broken(netns_record, ("vrs", 1, "name"), "other-vr2"), "'vrs[1].name' must start"),
        (_broken(netns_record, ("vrs", 0, "vifs"), ["vif1.0"]), "'vrs[0].vifs' must have at least 2 entries, got 1"),
        (_broken(netns_record, ("vrs", 0, "forwarder"), {"pid": "1", "start": 2}), "'vrs[0].forwarder.pid' must be an integer"),
        (_broken(netns_record, ("vrs", 0, "forwarder"), {"pid": True, "start": 2}), "'vrs[0].forwarder.pid' must be an integer"),
        (_broken(netns_record, ("vrs", 0, "extra"), 1), "'vrs[0].extra'"),
        (_broken(netns_record, ("vrs", 0, "router"), "tf1"), "'vrs[0].router'"),
        (_broken(chain_record, ("vrs", 1, "router"), "tf3"), "'vrs[1].router'"),
        (_broken(chain_record, ("chain",), None), "'chain'"),
        (_broken(chain_record, ("chain", "probes"), []), "'chain.probes'"),
        (_broken(chain_record, ("chain", "routers", 0, "vr"), "xtct-cd34-vr3"), "'chain.routers'"),
        (_broken(chain_record, ("vrs", 0, "netns"), "x"), "'vrs[0].domain'"),
        (_broken(chain_record, ("cpu_cgroup",), {"version": 1, "root": "/x"}), "'cpu_cgroup' must be null"),
        ([], "'<record>'"),
    ],
)
def test_bad_records_are_refused_naming_the_key(doc: Any, key: str) -> None:
    with pytest.raises(L.LabRecordError) as e:
        L.validate_record(doc)
    assert key in str(e.value)


def test_records_are_written_atomically_and_read_back(tmp_path: Path) -> None:
    r = netns_record()
    p = L.write_record(r, tmp_path)
    assert p == tmp_path / "xtct-ab12" and json.loads(p.read_text()) == r
    assert [x.name for x in tmp_path.iterdir()] == ["xtct-ab12"]  # no temporary file left
    assert L.read_record("xtct-ab12", tmp_path) == (r, None)
    record, vrs, chain = L.load_lab("xtct-ab12", tmp_path)
    assert record == r and len(vrs) == 2 and chain is None
    with pytest.raises(L.LabRecordError):
        L.write_record(_broken(netns_record, ("hops",), 2), tmp_path)
    assert json.loads(p.read_text()) == r  # a bad record never replaces a good one
    (tmp_path / "xtct-ab12").write_text("{")
    assert L.read_record("xtct-ab12", tmp_path)[1].startswith("unreadable")
    (tmp_path / "xtct-ab12").write_text(json.dumps({"pid": 999999999, "start": 1, "uri": None}))
    assert L.read_record("xtct-ab12", tmp_path) == (None, "owner 999999999 dead")
    assert L.read_record("xtct-none", tmp_path) == (None, None)
    with pytest.raises(LabError, match="no persistent lab 'xtct-none'.*xtc lab up"):
        L.load_lab("xtct-none", tmp_path)


def test_teardown_orphans_leaves_a_persistent_lab_alone(tmp_path: Path) -> None:
    L.write_record(netns_record(), tmp_path)
    assert teardown_orphans(tmp_path) == {}
    assert (tmp_path / "xtct-ab12").exists()


# ---------------------------------------------------------------------------------- health
def test_a_healthy_lab_has_no_problems() -> None:
    for r in (netns_record(), chain_record()):
        checks = L.health_checks(r, healthy_facts(r))
        assert checks and L.problems(checks) == []
        pieces = {c.piece for c in checks}
        assert {"netns", "link", "vif"} <= pieces
        assert ("domain" in pieces) == (r["mode"] == "lxc")
        assert ({"forwarder", "cgroup"} <= pieces) == (r["mode"] == "netns")
    assert {c.name for c in L.health_checks(chain_record(), healthy_facts(chain_record())) if c.piece == "netns"} == {
        "xtct-cd34-cg1", "xtct-cd34-cr1", "xtct-cd34-p11", "xtct-cd34-p12"}


def test_each_kind_of_damage_is_reported() -> None:
    r = netns_record()
    f = healthy_facts(r)

    def damaged(**change: Any) -> list[str]:
        facts = L.HostFacts(**{**f.__dict__, **change})
        return L.problems(L.health_checks(r, facts))

    assert damaged(netns=f.netns - {"xtct-ab12-tr2"}) == ["netns xtct-ab12-tr2: missing"]
    assert damaged(processes={**f.processes, 1001: None}) == ["forwarder xtct-ab12-vr1: pid 1001 gone"]
    # A recycled pid (same number, another process) is not the forwarder.
    assert damaged(processes={**f.processes, 1001: 77}) == ["forwarder xtct-ab12-vr1: pid 1001 gone"]
    assert damaged(cgroups={**f.cgroups, "/sys/fs/cgroup/cpu/xtct-ab12-vr2": None}) == [
        "cgroup /sys/fs/cgroup/cpu/xtct-ab12-vr2: missing"]
    assert damaged(cgroups={**f.cgroups, "/sys/fs/cgroup/cpu/xtct-ab12-vr2": ()}) == [
        "cgroup /sys/fs/cgroup/cpu/xtct-ab12-vr2: forwarder pid 1002 is not in it"]
    links = dict(f.links)
    links["vif101.1"] = (True, "down")
    links["xtct-ab12-a2"] = (False, "down")
    del links["xtct-ab12-g1"]
    assert damaged(links=links) == ["link xtct-ab12-g1: missing", "link xtct-ab12-a2: down",
                                    "vif vif101.1: operstate down"]
    c = chain_record()
    fc = healthy_facts(c)
    dead = L.HostFacts(**{**fc.__dict__, "domains": {"xtct-cd34-vr1": True, "xtct-cd34-vr3": True}})
    assert L.problems(L.health_checks(c, dead)) == ["domain xtct-cd34-vr2: not running"]
    nolv = L.HostFacts(**{**fc.__dict__, "domains": None, "domains_error": "connection refused"})
    assert L.problems(L.health_checks(c, nolv)) == ["libvirtd lxc:///: cannot list domains: connection refused"]


# ------------------------------------------------------------------------------- outputs
def test_daemon_config_of_a_netns_lab_is_a_valid_cgroup_config() -> None:
    r = netns_record()
    cfg = loads_config(L.daemon_config_toml(r, daemon_dir=Path("/run/xtc/daemons")))
    assert cfg.daemon.backend == "cgroup"
    assert [(v.name, v.path, v.interfaces) for v in cfg.cgroup.vr] == [
        ("xtct-ab12-vr1", "/sys/fs/cgroup/cpu/xtct-ab12-vr1", ("vif101.0", "vif101.1")),
        ("xtct-ab12-vr2", "/sys/fs/cgroup/cpu/xtct-ab12-vr2", ("vif102.0", "vif102.1"))]
    assert cfg.manager.endpoint == "ipc:///run/xtc/daemons/xtct-ab12/mgr.sock"
    with pytest.raises(LabError, match="no routers"):
        L.daemon_config_toml(r, "tf1")


def test_daemon_configs_of_a_chain_one_per_router() -> None:
    c = chain_record()
    with pytest.raises(LabError, match="give --router \\(tf1, tf2, tf3\\)"):
        L.daemon_config_toml(c)
    with pytest.raises(LabError, match="no router 'tf4'"):
        L.daemon_config_toml(c, "tf4")
    cfgs = [loads_config(L.daemon_config_toml(c, r)) for r in ("tf1", "tf2", "tf3")]
    assert [x.libvirt.domains for x in cfgs] == [("xtct-cd34-vr1",), ("xtct-cd34-vr2",), ("xtct-cd34-vr3",)]
    assert all(x.daemon.backend == "libvirt" and x.libvirt.uri == "lxc:///" for x in cfgs)
    assert len({x.manager.endpoint for x in cfgs}) == 3 and len({x.daemon.state_dir for x in cfgs}) == 3


def test_status_views() -> None:
    r = netns_record()
    f = healthy_facts(r)
    checks = L.health_checks(r, L.HostFacts(**{**f.__dict__, "processes": {1001: 5001, 1002: None}}))
    caps = {"xtct-ab12-vr1": 25.0, "xtct-ab12-vr2": None}
    rates = {"xtct-ab12-vr1": (30_000.0, 100_000.0), "xtct-ab12-vr2": None}
    text = L.format_lab(r, checks, caps, rates)
    assert "DAMAGED" in text and "forwarder xtct-ab12-vr2: pid 1002 gone" in text
    assert "25.0%" in text and "unlimited" in text and "30,000" in text and "100,000" in text
    assert "--daemon-config" in text and "backend cgroup" in text
    doc = L.status_json(r, checks, caps, rates)
    json.dumps(doc)
    assert doc["healthy"] is False and doc["vrs"]["xtct-ab12-vr1"]["cap_percent"] == 25.0
    assert doc["vrs"]["xtct-ab12-vr2"]["cap"] == "unlimited"
    assert format_cap("no such file") == "? (no such file)"
    ctext = L.format_lab(chain_record(), L.health_checks(chain_record(), healthy_facts(chain_record())), {}, {})
    assert "healthy" in ctext and "[probe xtct-cd34-p11 198.19.1.11] -> tf2 (xtct-cd34-vr2)" in ctext
    assert "--router tf1" in ctext


# ----------------------------------------------------------------------- addressing, cgroups
def test_chain_addresses_stay_in_the_benchmark_range_and_apart_from_vr_subnets() -> None:
    vr_nets = {ipaddress.ip_network(f"{vr_addresses(k)[0]}/24", strict=False) for k in range(1, 251)}
    seen = set()
    for c in range(1, 10):
        tg, tr, probes = chain_addresses(c, 3)
        addrs = [tg, tr, *probes]
        assert len(probes) == 2 and len(set(addrs)) == 4
        for a in addrs:
            ip = ipaddress.ip_address(a)
            assert ip in LAB_NET and not any(ip in n for n in vr_nets)
            assert a not in seen
            seen.add(a)
    for bad in ((0, 3), (10, 3), (1, 0), (1, 9)):
        with pytest.raises(LabError):
            chain_addresses(*bad)


def test_cpu_cgroup_mounts_on_recorded_hosts() -> None:
    hybrid = (DATA / "lab" / "mountinfo_hybrid.txt").read_text()
    assert cpu_cgroup_mounts(hybrid) == ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/unified")
    assert cpu_cgroup_mounts((DATA / "lab" / "mountinfo_v2.txt").read_text()) == (None, "/sys/fs/cgroup")
    joint = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    assert cpu_cgroup_mounts(joint) == ("/sys/fs/cgroup/cpu,cpuacct", None)
    assert cpu_cgroup_mounts("33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n") == (None, None)


def test_find_cpu_cgroup_explains_what_is_missing(tmp_path: Path) -> None:
    from xtc_lab.lab.netlab import CpuCgroup, find_cpu_cgroup

    root = tmp_path / "cg2"
    root.mkdir()
    (root / "cgroup.controllers").write_text("memory pids\n")
    (root / "cgroup.subtree_control").write_text("memory\n")
    mi = tmp_path / "mountinfo"
    mi.write_text(f"41 31 0:38 / {root} rw,relatime - cgroup2 cgroup2 rw\n")
    with pytest.raises(LabError, match="has no cpu controller"):
        find_cpu_cgroup(mi)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    with pytest.raises(LabError, match=r"not enabled for children.*echo \+cpu"):
        find_cpu_cgroup(mi)
    (root / "cgroup.subtree_control").write_text("cpu memory\n")
    assert find_cpu_cgroup(mi) == CpuCgroup(2, root)
    mi.write_text("27 1 254:0 / / rw - ext4 /dev/vda rw\n")
    with pytest.raises(LabError, match="neither a cgroup v1 'cpu' hierarchy nor a cgroup2 tree"):
        find_cpu_cgroup(mi)
    # v1 with cpuacct mounted apart (the lab host): each lab cgroup gets a cpuacct twin.
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    mi.write_text(f"32 31 0:29 / {tmp_path}/cpu rw - cgroup cgroup rw,cpu\n"
                  f"33 31 0:30 / {tmp_path}/cpuacct rw - cgroup cgroup rw,cpuacct\n")
    v1 = find_cpu_cgroup(mi)
    assert v1 == CpuCgroup(1, tmp_path / "cpu", tmp_path / "cpuacct")
    assert v1.acct_path("xtct-ab12-vr1") == tmp_path / "cpuacct" / "xtct-ab12-vr1"
    mi.write_text(f"32 31 0:29 / {tmp_path}/cpu rw - cgroup cgroup rw,cpu,cpuacct\n")
    assert find_cpu_cgroup(mi) == CpuCgroup(1, tmp_path / "cpu") and CpuCgroup(1, tmp_path).acct_path("a") is None
    assert copy.copy(CpuCgroup(1, Path("/x"))).quota_file == "cpu.cfs_quota_us"
    with pytest.raises(LabError, match="bad cgroup name"):
        CpuCgroup(1, Path("/x")).path("../etc")


def test_a_host_that_cannot_run_the_mode_is_refused_before_anything_is_made(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import xtc_lab.lab.harness as harness
    import xtc_lab.lab.netlab as netlab

    def no_build(*_a: Any, **_k: Any) -> None:
        raise AssertionError("nothing may be built")

    monkeypatch.setattr(L, "build_lab", no_build)
    monkeypatch.setattr(L, "lab_lock", no_build)
    monkeypatch.setattr(harness, "lab_host_problem", lambda mode: None)

    def no_cpu() -> None:
        raise LabError("the cgroup2 tree at /sys/fs/cgroup has no cpu controller (controllers: memory)")

    monkeypatch.setattr(netlab, "find_cpu_cgroup", no_cpu)
    args = parser().parse_args(["up", "--name", "xtct-0002", "--mode", "netns"])
    assert args.func(args) == L.EXIT_UNSUPPORTED
    err = capsys.readouterr().err
    assert "cannot build a lab in netns mode" in err and "needs a cgroup cpu controller" in err and "no cpu controller" in err
    monkeypatch.setattr(harness, "lab_host_problem",
                        lambda mode: "libvirt-python is not installed (pip install 'xtc[libvirt]')" if mode == "lxc" else None)
    args = parser().parse_args(["up", "--name", "xtct-0002", "--mode", "lxc"])
    assert args.func(args) == L.EXIT_UNSUPPORTED
    assert "cannot build a lab in lxc mode on this host: libvirt-python is not installed" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- qemu mode
def qemu_record(name: str = "xtcq-ef56") -> dict[str, Any]:
    r = netns_record(name, 1)
    v = r["vrs"][0]
    v.update(kind="qemu", domain=v["name"], netns=None, cgroup=None, forwarder=None)
    r.update(mode="qemu", uri="qemu:///system", cpu_cgroup=None, accel="tcg")
    return r


def test_qemu_records_validate_and_give_a_libvirt_daemon_config_and_health() -> None:
    r = qemu_record()
    L.validate_record(r)
    assert "accel: tcg" in L.format_lab(r, L.health_checks(r, healthy_facts(r)), {}, {})
    cfg = loads_config(L.daemon_config_toml(r, daemon_dir=Path("/run/xtc/daemons")))
    assert cfg.daemon.backend == "libvirt" and cfg.libvirt.uri == "qemu:///system"
    assert cfg.libvirt.domains == ("xtcq-ef56-vr1",) or list(cfg.libvirt.domains) == ["xtcq-ef56-vr1"]
    facts = healthy_facts(r)
    taps = dataclasses.replace(facts, links={**facts.links, "vif101.0": (True, "unknown"), "vif101.1": (True, "unknown")})
    assert L.problems(L.health_checks(r, taps)) == []  # taps report operstate "unknown"
    down = dataclasses.replace(facts, links={**facts.links, "vif101.0": (False, "unknown")})
    assert L.problems(L.health_checks(r, down)) == ["vif vif101.0: operstate unknown"]
    dead = dataclasses.replace(facts, domains={})
    assert any("xtcq-ef56-vr1" in p and "not running" in p for p in L.problems(L.health_checks(r, dead)))


def test_a_qemu_record_keeps_the_tuning_it_was_built_with() -> None:
    # `xtc lab up --kind qemu` with XTC_QEMU_TUNING set writes it into the record; the record's schema
    # refused the key at first, so every tuned lab was torn down right after its VR forwarded.
    L.validate_record({**qemu_record(), "qemu_tuning": "icount=auto,sleep=off"})
    L.validate_record(qemu_record())  # records written before the key existed


@pytest.mark.parametrize("change, key", [({"accel": None}, "accel"), ({"accel": "hax"}, "accel"),
                                         ({"uri": None}, "uri")])
def test_bad_qemu_records_are_refused_naming_the_key(change: dict[str, Any], key: str) -> None:
    with pytest.raises(L.LabRecordError, match=key):
        L.validate_record({**qemu_record(), **change})


def test_qemu_mode_shapes() -> None:
    assert L.check_shape("qemu", 2, 1, 0).mode == "qemu"
    with pytest.raises(LabError, match="hops"):
        L.check_shape("qemu", 1, 3, 0)
    args = parser().parse_args(["up", "--kind", "qemu"])
    assert args.mode == "qemu"

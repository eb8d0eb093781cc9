"""What ``xtc lab status`` says of a lab, from its record and the host's facts (pure): the health
checks, the problems they find, the text and JSON of the status, and the daemon configuration that
controls the lab's VRs.  :mod:`xtc_lab.lab.lifecycle` gathers the facts and prints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from xtc_lab.lab.netlab import LabError
from xtc_lab.lab.record import LIBVIRT_MODES, namespaces_of, shape_of

DAEMON_DIR = Path("/run/xtc/daemons")

@dataclass(frozen=True)
class HostFacts:
    """A snapshot of what exists on the host, for :func:`health_checks`.

    ``links`` maps an interface name to (admin up, operstate); ``domains`` maps a running
    domain's name to True (None: libvirt could not be asked, ``domains_error`` says why);
    ``processes`` maps a pid to its kernel start time (None: gone); ``cgroups`` maps a cgroup
    directory to the pids in it (None: the directory does not exist).
    """

    netns: frozenset[str]
    links: Mapping[str, tuple[bool, str]]
    domains: Mapping[str, bool] | None
    domains_error: str | None
    processes: Mapping[int, int | None]
    cgroups: Mapping[str, tuple[int, ...] | None]


@dataclass(frozen=True)
class Check:
    """One piece of the lab and whether it is as ``up`` left it."""

    piece: str  # netns, link, vif, domain, libvirtd, forwarder, cgroup
    name: str
    ok: bool
    detail: str = ""


def health_checks(record: Mapping[str, Any], facts: HostFacts) -> list[Check]:
    """Every piece of a recorded lab checked against a snapshot of the host (pure)."""
    checks = [Check("netns", ns, ns in facts.netns, "" if ns in facts.netns else "missing")
              for ns in namespaces_of(record)]
    for name in record["links"]:
        st = facts.links.get(name)
        checks.append(Check("link", name, st is not None and st[0],
                            "missing" if st is None else ("" if st[0] else "down")))
    if record["mode"] in LIBVIRT_MODES and facts.domains is None:
        checks.append(Check("libvirtd", record["uri"], False, f"cannot list domains: {facts.domains_error}"))
    for v in record["vrs"]:
        for vif in v["vifs"]:
            st = facts.links.get(vif)
            # a QEMU VR's taps say operstate "unknown" (tun devices do not report one): up is the flag
            ok = st is not None and (st[1] == "up" or (record["mode"] == "qemu" and st[0] and st[1] == "unknown"))
            checks.append(Check("vif", vif, ok, "missing" if st is None else ("" if ok else f"operstate {st[1]}")))
        if record["mode"] in LIBVIRT_MODES:
            if facts.domains is not None:
                running = facts.domains.get(v["domain"], False)
                checks.append(Check("domain", v["domain"], running, "" if running else "not running"))
        else:
            fw = v["forwarder"]
            alive = facts.processes.get(fw["pid"]) == fw["start"]
            checks.append(Check("forwarder", v["name"], alive, f"pid {fw['pid']}" if alive else f"pid {fw['pid']} gone"))
            pids = facts.cgroups.get(v["cgroup"])
            if pids is None:
                checks.append(Check("cgroup", v["cgroup"], False, "missing"))
            else:
                inside = fw["pid"] in pids
                checks.append(Check("cgroup", v["cgroup"], inside or not alive,
                                    "" if inside or not alive else f"forwarder pid {fw['pid']} is not in it"))
    return checks


def problems(checks: Sequence[Check]) -> list[str]:
    """The failed checks as short sentences."""
    return [f"{c.piece} {c.name}: {c.detail}" for c in checks if not c.ok]


def format_cap(cap: float | None | str) -> str:
    """A cap for people: ``"25.0%"``, ``"unlimited"`` (None) or the read error (a string)."""
    if isinstance(cap, str):
        return f"? ({cap})"
    if cap is None:
        return "unlimited"
    return f"{cap:.1f}%"


def daemon_config_toml(record: Mapping[str, Any], router: str | None = None,
                       daemon_dir: Path = DAEMON_DIR) -> str:
    """An ``xtc daemon`` configuration controlling the lab's VRs (those of ``router`` in a chain).

    lxc labs get the libvirt backend (the domains by name), netns labs the cgroup backend (each
    VR's cgroup and host-side vifs).  The manager sockets and state live in
    ``<daemon_dir>/<lab>[-<router>]``, so one daemon per router can run side by side.
    """
    vrs = record["vrs"]
    if record["hops"] != 1:
        routers = [r["name"] for r in record["chain"]["routers"]]
        if router is None:
            raise LabError(f"lab {record['name']} has {len(routers)} routers, one daemon each: "
                           f"give --router ({', '.join(routers)})")
        if router not in routers:
            raise LabError(f"no router {router!r} in lab {record['name']} (routers: {', '.join(routers)})")
        vrs = [v for v in vrs if v["router"] == router]
    elif router is not None:
        raise LabError(f"lab {record['name']} has no routers (built with --hops 1); drop --router")
    where = daemon_dir / (record["name"] + (f"-{router}" if router else ""))
    doc: dict[str, Any] = {
        "schema": "xtc-daemon/1",
        "daemon": {"backend": "libvirt" if record["mode"] in LIBVIRT_MODES else "cgroup", "control_period_s": 1.0,
                   "state_dir": str(where)},
        "controller": {"model": "paper", "kind": "xtc"},
        "manager": {"endpoint": f"ipc://{where}/mgr.sock", "pub_endpoint": f"ipc://{where}/pub.sock"},
        "metrics": {"enabled": True, "address": "127.0.0.1", "port": 0},
        "log": {"format": "json", "level": "info"},
    }
    if record["mode"] in LIBVIRT_MODES:
        doc["libvirt"] = {"uri": record["uri"], "domains": [v["domain"] for v in vrs]}
    else:
        doc["cgroup"] = {"vr": [{"name": v["name"], "path": v["cgroup"], "interfaces": list(v["vifs"])} for v in vrs]}
    head = (
        f"# xtc daemon configuration for lab {record['name']}" + (f", router {router}" if router else "")
        + f" ({record['mode']} mode), written by xtc lab status --daemon-config.\n"
        "# The VRs' interfaces change when the lab is rebuilt: write this file again after xtc lab up repairs it.\n"
        "# metrics.port = 0: an ephemeral port, logged at start.\n"
    )
    return head + tomli_w.dumps(doc)


def format_lab(record: Mapping[str, Any], checks: Sequence[Check], caps: Mapping[str, float | None | str],
               rates: Mapping[str, tuple[float, float] | None]) -> str:
    """The human view of a lab: a header, one line per VR, the traffic path, the problems."""
    shape = shape_of(record)
    bad = problems(checks)
    lines = [f"lab {record['name']}: {shape.describe()} -- {'DAMAGED' if bad else 'healthy'}"]
    if record["mode"] in LIBVIRT_MODES:
        lines.append(f"libvirt: {record['uri']}" + (f" (accel: {record['accel']})" if record.get("accel") else ""))
    else:
        cg = record["cpu_cgroup"]
        lines.append(f"cgroups: v{cg['version']} under {cg['root']}")
    fw_ok = {c.name: c.ok for c in checks if c.piece == "forwarder"}
    dom_ok = {c.name: c.ok for c in checks if c.piece == "domain"}
    vif_ok = {c.name: c.ok for c in checks if c.piece == "vif"}
    header = ["VR", "router", "domain/netns", "cgroup", "vifs", "running", "cap", "fwd pps", "offered pps"]
    rows = []
    for v in record["vrs"]:
        if record["mode"] in LIBVIRT_MODES:
            running = "yes" if dom_ok.get(v["domain"]) else ("?" if v["domain"] not in dom_ok else "NO")
        else:
            running = f"pid {v['forwarder']['pid']}" if fw_ok.get(v["name"]) else "NO"
        vifs = ",".join(x + ("" if vif_ok.get(x) else "(!)") for x in v["vifs"])
        r = rates.get(v["name"])
        rows.append([v["name"], v["router"] or "-", v["domain"] or v["netns"], v["cgroup"] or "-", vifs, running,
                     format_cap(caps.get(v["name"], "not read")),
                     "-" if r is None else f"{r[0]:,.0f}", "-" if r is None else f"{r[1]:,.0f}"])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header, *rows]:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
    if record["chain"] is None:
        for v in record["vrs"]:
            lines.append(f"path {v['name']}: {v['tg_ns']} {v['tg_addr']} -> {v['name']} -> {v['tr_ns']} {v['tr_addr']}")
    else:
        ch = record["chain"]
        hops = [f"{ch['tg_ns']} {ch['tg_addr']}"]
        for i, r in enumerate(ch["routers"]):
            hops.append(f"{r['name']} ({r['vr']})")
            if i < len(ch["probes"]):
                p = ch["probes"][i]
                hops.append(f"[probe {p['ns']} {p['addr']}]")
        hops.append(f"{ch['tr_ns']} {ch['tr_addr']}")
        lines.append("path: " + " -> ".join(hops))
    if bad:
        lines.append("problems:")
        lines += [f"  {p}" for p in bad]
    opt = " --router tf1" if record["chain"] is not None else ""
    backend = "libvirt" if record["mode"] in LIBVIRT_MODES else "cgroup"
    lines.append(f"daemon: xtc lab status --name {record['name']} --daemon-config{opt} > xtcd.toml  "
                 f"(backend {backend}; then xtc daemon -c xtcd.toml)")
    return "\n".join(lines)


def status_json(record: Mapping[str, Any], checks: Sequence[Check], caps: Mapping[str, float | None | str],
                rates: Mapping[str, tuple[float, float] | None]) -> dict[str, Any]:
    """The machine view of a lab (``--json``)."""
    return {
        "name": record["name"],
        "healthy": not problems(checks),
        "problems": problems(checks),
        "record": dict(record),
        "checks": [{"piece": c.piece, "name": c.name, "ok": c.ok, "detail": c.detail} for c in checks],
        "vrs": {v["name"]: {"cap_percent": caps.get(v["name"]) if not isinstance(caps.get(v["name"]), str) else None,
                            "cap": format_cap(caps.get(v["name"], "not read")),
                            "forwarded_pps": None if rates.get(v["name"]) is None else round(rates[v["name"]][0], 1),
                            "offered_pps": None if rates.get(v["name"]) is None else round(rates[v["name"]][1], 1)}
                for v in record["vrs"]},
    }

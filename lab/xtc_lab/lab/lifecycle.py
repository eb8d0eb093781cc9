"""``xtc lab up / status / down``: a host lab that outlives the command that built it.

The host plays Dom0.  ``xtc lab up`` builds, under one name (the lab's prefix, default
``xtc-lab``), a traffic generator (TG) and receiver (TR) in their own network namespaces, host
bridges and N VRs (:mod:`xtc_lab.lab.netlab`), then returns; the lab stays until ``xtc lab down``.

Modes (``--mode``):

* ``lxc`` -- each VR is a libvirt LXC domain ``<name>-vr<k>`` under the lab's libvirtd
  (started if needed, :meth:`xtc_lab.lab.libvirtd.Libvirtd.ensure_running`; ``down`` stops it again
  if the lab started it and nothing else uses it).  Caps: ``vcpu_quota`` per ``vcpu_period``.
* ``netns`` -- each VR is the lab's forwarder in a plain network namespace ``<name>-vr<k>`` and
  in its own cgroup (``<cpu cgroup root>/<name>-vr<k>``: cgroup v1 ``cpu`` or cgroup v2 with
  ``cpu.max``), started in its own session so it survives the command.  Caps: the cgroup's CFS
  quota.  No libvirt needed: the daemon's ``cgroup`` backend controls these VRs.
* ``qemu`` (``--kind qemu``) -- each VR is a libvirt QEMU domain ``<name>-vr<k>`` on
  ``qemu:///system`` that forwards in its own kernel (:mod:`xtc_lab.lab.qemu`; KVM where it works,
  TCG otherwise, said by ``up`` and kept in the record as ``accel``); ready once a ping crosses it.
  Caps: ``vcpu_quota`` per ``vcpu_period`` of its one vCPU.  ``--hops 1`` only.

Shapes (``--hops``): ``1`` gives N independent VRs, each between its own TG and TR (VR k on
198.18.k.0/24).  ``3`` gives the line of section 8.2 of the paper, TG - TF1 - TF2 - TF3 - TR: three
"physical routers" with one VR each, chained over bridges (:meth:`xtc_lab.lab.netlab.NetLab.add_chain`,
198.19.1.0/24: TG .1, TR .2), and a probe namespace after TF1 (.11) and after TF2 (.12) that
answers pings, so RTT and loss can be measured from TG up to each hop.  Each router's VR is a
separate domain (or cgroup); an experiment runs one daemon per router
(``xtc lab status --daemon-config --router tf2``).

State: a JSON record ``/run/xtc/labs/<name>`` (written atomically) that marks the lab as
*persistent* (``"persistent": true``, ``"owner": "lab"``: no process owns it, so
:func:`xtc_lab.lab.netlab.teardown_orphans` leaves it alone) and holds everything status, down,
experiments and daemon configurations need: mode, shape, libvirt URI, every VR (domain or
namespace, cgroup, vifs, bridges, TG/TR namespaces and addresses, forwarder pid), the routers
and probes of a chain, and the host links.  Read it with :func:`load_lab`.

Behaviour:

* ``up`` is idempotent: on a healthy lab of the same shape it reports the lab and changes
  nothing; a lab of another shape is refused (run ``down`` first); a damaged lab (a domain that
  died, a forwarder killed, a namespace or link missing) or the leftovers of a crashed ``up`` are
  torn down and rebuilt, and ``up`` says so.  Bad input (name, VR count, mode, hops) and a host
  that cannot run the mode (no root, no cgroup cpu controller, no libvirt) are refused before
  anything is created.
* ``status`` shows every piece and its health, each VR's cap (percent of one CPU or
  "unlimited") and forwarded/offered packets/s over half a second; exit status 0 healthy,
  1 damaged, 3 no such lab.  ``--daemon-config`` prints a ready ``xtc daemon`` configuration.
* ``down`` removes everything with the lab's prefix (domains, namespaces and their processes,
  cgroups, bridges, veths, the record), also without a record (after a crash); ``down`` on
  nothing says so and succeeds.  ``--all`` removes every persistent lab and the leftovers of
  crashed runs, never the lab of a live process (e.g. a running test).

Only one ``up``/``down`` runs per lab name at a time (a lock under ``/run/xtc/lab-locks``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError, field_validator, model_validator

from xtc.validation import FieldProblem, Number, validation_problem, within

from xtc_lab.lab import qemu
from xtc_lab.lab.netlab import (
    LAB_REGISTRY,
    MODES,
    NETNS_DIR,
    VR,
    Chain,
    LabError,
    NetLab,
    Probe,
    add_work_arguments,
    check_prefix,
    check_work_factor,
    read_packet_counters,
)

LAB_SCHEMA = "xtc-lab/1"
DEFAULT_NAME = "xtc-lab"
MAX_LAB_VRS = 64  # each VR holds a forwarder and six interfaces; a typo must not flood the host
HOPS = (1, 3)
LOCK_DIR = Path("/run/xtc/lab-locks")
DAEMON_DIR = Path("/run/xtc/daemons")
DEFAULT_URI = "lxc:///"
QEMU_URI = qemu.QEMU_URI
LIBVIRT_MODES = ("lxc", "qemu")  # modes whose VRs are libvirt domains
EXIT_OK, EXIT_DAMAGED, EXIT_USAGE, EXIT_MISSING, EXIT_UNSUPPORTED = 0, 1, 2, 3, 4


# ================================================================================ pure part
@dataclass(frozen=True)
class LabShape:
    """What ``up`` builds: mode ("lxc" or "netns"), VRs per router, routers in line, forwarder work
    (busy-work iterations per frame, and the per-frame work factor that scales them)."""

    mode: str
    n_vrs: int
    hops: int
    work_iters: int
    work_factor: float = 1.0

    @property
    def total_vrs(self) -> int:
        """VRs in the lab (one per router in a chain)."""
        return self.n_vrs if self.hops == 1 else self.hops

    def describe(self) -> str:
        if self.hops == 1:
            what = f"{self.n_vrs} VR{'s' if self.n_vrs != 1 else ''}"
        else:
            what = f"{self.hops} routers in a line (one VR each)"
        factor = "" if self.work_factor == 1.0 else f" x factor {self.work_factor:g}"
        return f"{self.mode} mode, {what}, forwarder work {self.work_iters}{factor}"


def check_name(name: Any) -> str:
    """A valid lab name (it is the prefix of everything the lab creates)."""
    if not isinstance(name, str):
        raise LabError(f"lab name must be a string, got {name!r}")
    try:
        return check_prefix(name)
    except LabError:
        raise LabError(
            f"bad lab name {name!r}: want <stem>-<tag> in lowercase letters and digits, at most 10 "
            f"characters, e.g. {DEFAULT_NAME!r} (it prefixes interface names, limited to 15)"
        ) from None


def check_shape(mode: Any, n_vrs: Any, hops: Any, work_iters: Any, work_factor: Any = 1.0,
                factor_key: str = "--work-factor") -> LabShape:
    """Validate ``up``'s arguments; returns the shape or raises :class:`LabError` naming the problem."""
    if mode not in MODES:
        raise LabError(f"unknown mode {mode!r}: want 'lxc' (libvirt LXC domains), 'netns' (namespaces + cgroups) "
                       "or 'qemu' (libvirt QEMU domains forwarding in their own kernel)")
    if hops not in HOPS or isinstance(hops, bool):
        raise LabError(f"--hops {hops!r}: want 1 (independent VRs) or 3 (three routers in a line, paper section 8.2)")
    if isinstance(n_vrs, bool) or not isinstance(n_vrs, int) or not 1 <= n_vrs <= MAX_LAB_VRS:
        raise LabError(f"--vrs {n_vrs!r} out of range 1..{MAX_LAB_VRS}")
    if mode == "qemu" and hops != 1:
        raise LabError("--hops 3 is not built with QEMU VRs yet: use --hops 1")
    if hops != 1 and n_vrs != 1:
        raise LabError(f"--hops {hops} builds one VR per router; --vrs must be 1, got {n_vrs}")
    if isinstance(work_iters, bool) or not isinstance(work_iters, int) or not 0 <= work_iters <= 1_000_000:
        raise LabError(f"--work {work_iters!r} out of range 0..1000000 (busy-work iterations per frame)")
    return LabShape(mode, n_vrs, hops, work_iters, check_work_factor(work_factor, factor_key))


def shape_of(record: Mapping[str, Any]) -> LabShape:
    """The shape a (validated) record was built with."""
    return LabShape(record["mode"], record["n_vrs"], record["hops"], record["work_iters"],
                    float(record.get("work_factor", 1.0)))


def shape_difference(have: LabShape, want: LabShape) -> list[str]:
    """What differs between an existing lab's shape and the one asked for (empty: the same)."""
    out = []
    for key, label in (("mode", "mode"), ("n_vrs", "VRs"), ("hops", "hops"), ("work_iters", "work"),
                       ("work_factor", "work factor")):
        a, b = getattr(have, key), getattr(want, key)
        if a != b:
            out.append(f"{label} {a} (asked: {b})")
    return out


class LabRecordError(LabError):
    """A lab record is not what ``xtc lab up`` writes (the message names the key)."""


class _Record(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


NonEmpty = Annotated[str, StringConstraints(min_length=1)]
PositiveInt = Annotated[int, Field(gt=0)]


class _Forwarder(_Record):
    pid: PositiveInt
    start: PositiveInt


class _CpuCgroup(_Record):
    version: Literal[1, 2]
    root: str


class _VrRecord(_Record):
    k: int
    name: NonEmpty
    kind: Literal["lxc", "netns", "qemu"]
    router: str | None
    domain: str | None
    netns: str | None
    cgroup: NonEmpty | None
    vifs: Annotated[list[NonEmpty], Field(min_length=2, max_length=2)]
    bridges: Annotated[list[NonEmpty], Field(min_length=2, max_length=2)]
    tg_ns: NonEmpty
    tr_ns: NonEmpty
    tg_addr: NonEmpty
    tr_addr: NonEmpty
    forwarder: _Forwarder | None


class _ProbeRecord(_Record):
    after: NonEmpty
    ns: NonEmpty
    addr: NonEmpty
    bridge: NonEmpty


class _RouterRecord(_Record):
    name: NonEmpty
    vr: NonEmpty


class _ChainRecord(_Record):
    c: int
    tg_ns: NonEmpty
    tr_ns: NonEmpty
    tg_addr: NonEmpty
    tr_addr: NonEmpty
    bridges: list[NonEmpty]
    routers: list[_RouterRecord]
    probes: list[_ProbeRecord]


class LabRecord(_Record):
    """A persistent lab record as ``xtc lab up`` writes it (``/run/xtc/labs/<name>``).

    Field checks are pydantic's; :meth:`_consistent` checks what ties the fields together (the
    shape, the VRs' names and kinds, the chain).
    """

    schema_: Literal["xtc-lab/1"] = Field(alias="schema")
    persistent: Literal[True]
    owner: Literal["lab"]
    name: str
    mode: Literal["lxc", "netns", "qemu"]
    n_vrs: Annotated[int, within(1, MAX_LAB_VRS)]
    hops: Literal[1, 3]
    work_iters: Annotated[int, within(0, 1_000_000)]
    work_factor: Number = 1.0  # absent in records written before the factor existed
    uri: NonEmpty | None
    accel: Literal["kvm", "tcg"] | None = None  # qemu mode: how the guests run
    cpu_cgroup: _CpuCgroup | None
    created_unix_s: Number
    vrs: list[_VrRecord]
    chain: _ChainRecord | None
    links: list[NonEmpty]

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v)

    @model_validator(mode="after")
    def _consistent(self) -> LabRecord:
        try:
            check_work_factor(self.work_factor, "work_factor")
        except LabError as e:
            raise FieldProblem("work_factor", str(e)) from None
        try:
            shape = check_shape(self.mode, self.n_vrs, self.hops, self.work_iters, self.work_factor)
        except LabError as e:
            raise FieldProblem("n_vrs", str(e)) from None
        if shape.mode in LIBVIRT_MODES and self.uri is None:
            raise FieldProblem("uri", f"must be a libvirt URI in {shape.mode} mode")
        if shape.mode == "netns" and self.cpu_cgroup is None:
            raise FieldProblem("cpu_cgroup", "must be {'version': 1|2, 'root': path} in netns mode")
        if shape.mode in LIBVIRT_MODES and self.cpu_cgroup is not None:
            raise FieldProblem("cpu_cgroup", f"must be null in {shape.mode} mode")
        if (shape.mode == "qemu") != (self.accel is not None):
            raise FieldProblem("accel", "must be 'kvm' or 'tcg' in qemu mode, absent otherwise")
        if len(self.vrs) != shape.total_vrs:
            raise FieldProblem("vrs", f"must list {shape.total_vrs} VRs, got {len(self.vrs)}")
        names: set[str] = set()
        for i, v in enumerate(self.vrs):
            w = f"vrs[{i}]."
            if v.k != i + 1:
                raise FieldProblem(w + "k", f"must be {i + 1}, got {v.k}")
            if not v.name.startswith(self.name + "-"):
                raise FieldProblem(w + "name", f"must start with '{self.name}-'")
            if v.name in names:
                raise FieldProblem(w + "name", "names a VR twice")
            names.add(v.name)
            if v.kind != shape.mode:
                raise FieldProblem(w + "kind", f"must be {shape.mode!r}, got {v.kind!r}")
            if shape.mode in LIBVIRT_MODES:
                if not (v.domain == v.name and v.netns is None and v.cgroup is None and v.forwarder is None):
                    raise FieldProblem(w + "domain", f"a {shape.mode} VR has domain = its name and no netns, cgroup or forwarder")
            else:
                if not (v.netns == v.name and v.domain is None):
                    raise FieldProblem(w + "netns", "a netns VR has netns = its name, no domain")
                if v.cgroup is None or v.forwarder is None:
                    raise FieldProblem(w + "forwarder", "a netns VR has a cgroup and a forwarder {pid, start}")
            want_router = None if shape.hops == 1 else f"tf{i + 1}"
            if v.router != want_router:
                raise FieldProblem(w + "router", f"must be {want_router!r} when hops is {shape.hops}, got {v.router!r}")
        self._check_chain(shape)
        return self

    def _check_chain(self, shape: LabShape) -> None:
        ch = self.chain
        if shape.hops == 1:
            if ch is not None:
                raise FieldProblem("chain", "must be null when hops is 1")
            return
        if ch is None:
            raise FieldProblem("chain", "must be an object when hops > 1")
        if len(ch.bridges) != shape.hops + 1:
            raise FieldProblem("chain.bridges", f"must have {shape.hops + 1} entries, got {len(ch.bridges)}")
        if [r.name for r in ch.routers] != [f"tf{i}" for i in range(1, shape.hops + 1)]:
            raise FieldProblem("chain.routers", "must be tf1..tfN in order")
        if [r.vr for r in ch.routers] != [v.name for v in self.vrs]:
            raise FieldProblem("chain.routers", "must map router i to VR i")
        if len(ch.probes) != shape.hops - 1:
            raise FieldProblem("chain.probes", f"must list {shape.hops - 1} probes")


_RECORD = TypeAdapter(LabRecord)


def validate_record(doc: Any) -> dict[str, Any]:
    """Check that ``doc`` is a persistent lab record as ``up`` writes it (:class:`LabRecord`); return it.

    Raises
    ------
    LabRecordError
        Naming the first key that is missing, unknown or wrong.
    """
    if not isinstance(doc, dict):
        raise LabRecordError("lab record: '<record>' must be a JSON object")
    try:
        _RECORD.validate_python(doc)
    except ValidationError as e:
        key, problem = validation_problem(e, LabRecord)
        raise LabRecordError(f"lab record: '{key}' {problem}") from None
    return doc


def record_vrs(record: Mapping[str, Any]) -> list[VR]:
    """The VRs of a record as :class:`xtc_lab.lab.netlab.VR` objects (no process handles)."""
    return [VR(k=v["k"], name=v["name"], kind=v["kind"], tg_ns=v["tg_ns"], tr_ns=v["tr_ns"],
               bridges=(v["bridges"][0], v["bridges"][1]), vifs=(v["vifs"][0], v["vifs"][1]),
               tg_addr=v["tg_addr"], tr_addr=v["tr_addr"], cgroup=v["cgroup"], router=v["router"])
            for v in record["vrs"]]


def record_chain(record: Mapping[str, Any]) -> Chain | None:
    """The chain of a record (None when hops is 1)."""
    ch = record["chain"]
    if ch is None:
        return None
    vrs = record_vrs(record)
    return Chain(c=ch["c"], tg_ns=ch["tg_ns"], tr_ns=ch["tr_ns"], tg_addr=ch["tg_addr"], tr_addr=ch["tr_addr"],
                 bridges=tuple(ch["bridges"]), routers=tuple(r["name"] for r in ch["routers"]), vrs=vrs,
                 probes=[Probe(**p) for p in ch["probes"]])


def namespaces_of(record: Mapping[str, Any]) -> list[str]:
    """Every network namespace the lab should have."""
    out: list[str] = []
    for v in record["vrs"]:
        for ns in (v["tg_ns"], v["tr_ns"], v["netns"]):
            if ns and ns not in out:
                out.append(ns)
    if record["chain"] is not None:
        out += [p["ns"] for p in record["chain"]["probes"] if p["ns"] not in out]
    return out


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


# ============================================================================== adapters
def record_path(name: str, registry: Path = LAB_REGISTRY) -> Path:
    return registry / check_name(name)


def read_record(name: str, registry: Path = LAB_REGISTRY) -> tuple[dict[str, Any] | None, str | None]:
    """(persistent record, None), or (None, what is there instead), or (None, None) if nothing.

    The second element describes a non-persistent or unreadable record: ``"owner <pid> alive"``,
    ``"owner <pid> dead"`` or ``"unreadable: ..."``.
    """
    from xtc_lab.lab.libvirtd import process_start_time

    p = record_path(name, registry)
    try:
        text = p.read_text()
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"unreadable: {e}"
    try:
        doc = json.loads(text)
    except ValueError as e:
        return None, f"unreadable: not JSON ({e})"
    if isinstance(doc, dict) and "pid" in doc and not doc.get("persistent"):
        try:
            pid, start = int(doc["pid"]), int(doc["start"])
        except (KeyError, TypeError, ValueError):
            return None, "unreadable: owner record without a valid pid/start"
        return None, f"owner {pid} {'alive' if process_start_time(pid) == start else 'dead'}"
    try:
        return validate_record(doc), None
    except LabRecordError as e:
        return None, f"unreadable: {e}"


def write_record(doc: Mapping[str, Any], registry: Path = LAB_REGISTRY) -> Path:
    """Write a lab record atomically (a temporary file renamed over the old one)."""
    validate_record(dict(doc))
    registry.mkdir(parents=True, exist_ok=True)
    p = record_path(doc["name"], registry)
    tmp = registry / f".{doc['name']}.tmp"
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, p)
    return p


def load_lab(name: str = DEFAULT_NAME, registry: Path = LAB_REGISTRY) -> tuple[dict[str, Any], list[VR], Chain | None]:
    """A persistent lab for an experiment: (record, VRs, chain or None).

    Raises
    ------
    LabError
        There is no persistent lab of that name (run ``xtc lab up``), or its record is unreadable.
    """
    record, other = read_record(name, registry)
    if record is None:
        raise LabError(f"no persistent lab {name!r}" + (f" ({other})" if other else "") + "; run: xtc lab up --name " + name)
    return record, record_vrs(record), record_chain(record)


@contextmanager
def lab_lock(name: str, lock_dir: Path = LOCK_DIR) -> Iterator[None]:
    """One ``up``/``down`` per lab name at a time (an exclusive flock; waits for the holder)."""
    import fcntl

    lock_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_dir / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"xtc lab: waiting for another command on lab {name}", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _links_with_prefix(prefix: str, sys_class_net: Path = Path("/sys/class/net")) -> list[str]:
    try:
        return sorted(d.name for d in sys_class_net.iterdir() if d.name.startswith(prefix + "-"))
    except OSError:
        return []


def leftovers(name: str) -> list[str]:
    """What exists on the host with the lab's prefix (namespaces, links, cgroups, domains)."""
    from xtc_lab.lab.netlab import lab_cgroups

    stem = name + "-"
    out = [f"netns {n}" for n in _list_netns() if n.startswith(stem)]
    out += [f"link {n}" for n in _links_with_prefix(name)]
    out += [f"cgroup {d}" for d in lab_cgroups(name)]
    for uri in (DEFAULT_URI, QEMU_URI):
        doms, _err = _running_domains(uri)
        out += [f"domain {d}" for d in sorted(doms or {}) if d.startswith(stem)]
    return out


def _list_netns(netns_dir: Path = NETNS_DIR) -> list[str]:
    try:
        return sorted(p.name for p in netns_dir.iterdir())
    except OSError:
        return []


def _running_domains(uri: str | None) -> tuple[dict[str, bool] | None, str | None]:
    """Names of the running domains on ``uri`` (None and the reason if libvirt cannot be asked)."""
    if uri is None:
        return None, "no libvirt URI"
    try:
        import libvirt
    except ImportError:
        return None, "libvirt-python is not installed"
    libvirt.registerErrorHandler(lambda _c, _e: None, None)
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError as e:
        return None, str(e)
    try:
        return {d.name(): True for d in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)}, None
    except libvirt.libvirtError as e:
        return None, str(e)
    finally:
        conn.close()


def gather_facts(record: Mapping[str, Any]) -> HostFacts:
    """Look at the host for what a record says should exist."""
    from xtc_lab.lab.libvirtd import process_start_time
    from xtc_lab.lab.netlab import cgroup_pids

    links: dict[str, tuple[bool, str]] = {}
    names = list(record["links"]) + [x for v in record["vrs"] for x in v["vifs"]]
    for n in names:
        d = Path("/sys/class/net") / n
        try:
            flags = int((d / "flags").read_text(), 16)
            oper = (d / "operstate").read_text().strip()
        except (OSError, ValueError):
            continue
        links[n] = (bool(flags & 1), oper)
    domains, err = (_running_domains(record["uri"]) if record["mode"] in LIBVIRT_MODES else ({}, None))
    processes: dict[int, int | None] = {}
    cgroups: dict[str, tuple[int, ...] | None] = {}
    for v in record["vrs"]:
        if v["forwarder"] is not None:
            processes[v["forwarder"]["pid"]] = process_start_time(v["forwarder"]["pid"])
        if v["cgroup"] is not None:
            cgroups[v["cgroup"]] = tuple(cgroup_pids(Path(v["cgroup"]))) if Path(v["cgroup"]).is_dir() else None
    return HostFacts(netns=frozenset(_list_netns()), links=links, domains=domains, domains_error=err,
                     processes=processes, cgroups=cgroups)


def read_caps(record: Mapping[str, Any]) -> dict[str, float | None | str]:
    """Each VR's cap now, read through the product's host interface: percent of one CPU, None
    (unlimited) or the reason it cannot be read."""
    from xtc.host.cgroup import CgroupBackend, CgroupTarget
    from xtc.host.counters import ProcNetDevCounters
    from xtc.host.errors import HostAdapterError
    from xtc.host.libvirt import LibvirtBackend
    from xtc.host.libvirt_conn import LibvirtConn

    host: CgroupBackend | LibvirtBackend
    if record["mode"] == "netns":
        host = CgroupBackend([CgroupTarget(v["name"], v["cgroup"], tuple(v["vifs"])) for v in record["vrs"]], ProcNetDevCounters())
    else:
        host = LibvirtBackend(LibvirtConn(record["uri"]), record["mode"], (), ProcNetDevCounters())
    out: dict[str, float | None | str] = {}
    try:
        for v in record["vrs"]:
            try:
                out[v["name"]] = host.read_cap(v["name"] if record["mode"] == "netns" else v["domain"])
            except (HostAdapterError, ValueError) as e:
                out[v["name"]] = str(e)
    finally:
        host.close()
    return out


def measure_rates(record: Mapping[str, Any], seconds: float) -> dict[str, tuple[float, float] | None]:
    """(forwarded, offered) packets/s of each VR over ``seconds`` (None if a vif is missing)."""
    from xtc_lab.lab.harness import pps_between

    out: dict[str, tuple[float, float] | None] = {v["name"]: None for v in record["vrs"]}
    if seconds <= 0:
        return out
    try:
        c0, t0 = read_packet_counters(), time.monotonic()
        time.sleep(seconds)
        c1, t1 = read_packet_counters(), time.monotonic()
    except OSError:
        return out
    for v in record["vrs"]:
        out[v["name"]] = pps_between(c0, c1, t1 - t0, v["vifs"])
    return out


def host_problem(mode: str) -> str | None:
    """Why this host cannot build a lab in ``mode`` (None if it can); nothing is changed."""
    from xtc_lab.lab.harness import lab_host_problem

    problem = lab_host_problem(mode)
    if problem:
        return problem
    if mode == "netns":
        from xtc_lab.lab.netlab import find_cpu_cgroup

        try:
            find_cpu_cgroup()
        except LabError as e:
            return f"netns mode needs a cgroup cpu controller to cap its VRs: {e}"
    return None


def build_lab(name: str, shape: LabShape, say: Callable[[str], None], registry: Path = LAB_REGISTRY) -> dict[str, Any]:
    """Build the lab and write its persistent record; on any failure remove what was built.

    In lxc mode a shared lease on the lab's libvirtd is held while building, so no other
    process stops the daemon before the lab's domains run (afterwards they keep it in use).
    """
    with ExitStack() as stack:
        uri: str | None = None
        if shape.mode in LIBVIRT_MODES:
            from xtc_lab.lab.libvirtd import Libvirtd, LibvirtdError

            daemon = Libvirtd(QEMU_URI if shape.mode == "qemu" else DEFAULT_URI)
            try:
                started_before = bool(daemon.started_here()) or daemon.reachable() is None
                stack.enter_context(daemon.lease())
                if not started_before:
                    say(f"started libvirtd for {daemon.uri}")
            except LibvirtdError as e:
                raise LabError(f"{shape.mode} mode needs libvirtd: {e}") from e
            uri = daemon.uri
        accel, accel_why = qemu.pick_accel() if shape.mode == "qemu" else ("", "")
        lab = NetLab(prefix=name, uri=uri or DEFAULT_URI, registry=registry)
        chain: Chain | None = None
        try:
            if shape.hops == 1:
                for i in range(shape.n_vrs):
                    say(f"creating VR {i + 1}/{shape.n_vrs} ({shape.mode})")
                    if shape.mode == "lxc":
                        lab.add_vr(work_iters=shape.work_iters, work_factor=shape.work_factor)
                    elif shape.mode == "qemu":
                        if i == 0:
                            say(f"accel: {accel} ({accel_why})")
                        t0 = time.monotonic()
                        lab.add_qemu_vr(accel=accel)
                        say(f"VR {i + 1} forwards in its guest kernel after {time.monotonic() - t0:.1f} s")
                    else:
                        lab.add_netns_vr(work_iters=shape.work_iters, cgroup=True, detach=True,
                                         work_factor=shape.work_factor)
            else:
                say(f"creating {shape.hops} routers in a line ({shape.mode})")
                chain = lab.add_chain(hops=shape.hops, mode=shape.mode, work_iters=shape.work_iters,
                                      work_factor=shape.work_factor,
                                      cgroup=True, detach=True)
            record = _record_of(name, shape, lab, chain, uri)
            if shape.mode == "qemu":
                record["accel"] = accel
            write_record(record, registry)
        except BaseException:
            say("build failed: removing what was made")
            try:
                lab.teardown()
            except LabError as e:
                say(f"cleanup: {e}")
            raise
        return record


def _record_of(name: str, shape: LabShape, lab: NetLab, chain: Chain | None, uri: str | None) -> dict[str, Any]:
    from xtc_lab.lab.libvirtd import process_start_time

    vifs = {x for vr in lab.vrs for x in vr.vifs}
    vrs = []
    for vr in lab.vrs:
        fw = None
        if vr.kind == "netns":
            assert vr.process is not None
            start = process_start_time(vr.process.pid)
            if start is None:
                raise LabError(f"the forwarder of {vr.name} exited right after it started")
            fw = {"pid": vr.process.pid, "start": start}
        vrs.append({"k": vr.k, "name": vr.name, "kind": vr.kind, "router": vr.router,
                    "domain": vr.name if vr.kind in LIBVIRT_MODES else None, "netns": vr.name if vr.kind == "netns" else None,
                    "cgroup": vr.cgroup, "vifs": list(vr.vifs), "bridges": list(vr.bridges),
                    "tg_ns": vr.tg_ns, "tr_ns": vr.tr_ns, "tg_addr": vr.tg_addr, "tr_addr": vr.tr_addr,
                    "forwarder": fw})
    cg = None
    if shape.mode == "netns":
        c = lab.cpu_cgroup()
        cg = {"version": c.version, "root": str(c.root)}
    ch = None
    if chain is not None:
        ch = {"c": chain.c, "tg_ns": chain.tg_ns, "tr_ns": chain.tr_ns, "tg_addr": chain.tg_addr,
              "tr_addr": chain.tr_addr, "bridges": list(chain.bridges),
              "routers": [{"name": vr.router, "vr": vr.name} for vr in chain.vrs],
              "probes": [{"after": p.after, "ns": p.ns, "addr": p.addr, "bridge": p.bridge} for p in chain.probes]}
    return {"schema": LAB_SCHEMA, "persistent": True, "owner": "lab", "name": name, "mode": shape.mode,
            "n_vrs": shape.n_vrs, "hops": shape.hops, "work_iters": shape.work_iters,
            "work_factor": shape.work_factor, "uri": uri,
            "cpu_cgroup": cg, "created_unix_s": round(time.time(), 3), "vrs": vrs, "chain": ch,
            "links": [n for n in _links_with_prefix(name) if n not in vifs]}


def remove_lab(name: str, uri: str | None, registry: Path = LAB_REGISTRY) -> list[str]:
    """Remove everything with the lab's prefix and its record; returns what was removed.

    ``uri`` None (no record says which): the domains of both lab URIs, LXC and QEMU.
    """
    from xtc_lab.lab.netlab import teardown_prefix

    removed = teardown_prefix(name, uri or DEFAULT_URI)
    if uri is None:
        removed += teardown_prefix(name, QEMU_URI)
    try:
        record_path(name, registry).unlink()
        removed.append(f"record {record_path(name, registry)}")
    except FileNotFoundError:
        pass
    return removed


def _stop_libvirtd_if_unused(say: Callable[[str], None]) -> None:
    try:
        from xtc_lab.lab.libvirtd import Libvirtd, LibvirtdError

        stopped = Libvirtd().stop_if_unused()
    except (ImportError, LibvirtdError, OSError) as e:
        say(f"libvirtd left running: {e}")
        return
    if stopped:
        say(f"stopped {', '.join(stopped)} (started by the lab, no longer used)")


# ============================================================================== commands
def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _fail(cmd: str, msg: str, rc: int) -> int:
    print(f"xtc lab {cmd}: {msg}", file=sys.stderr, flush=True)
    return rc


def _show(record: Mapping[str, Any], as_json: bool, rates_s: float, extra: Mapping[str, Any] | None = None) -> int:
    checks = health_checks(record, gather_facts(record))
    caps = read_caps(record)
    rates = measure_rates(record, rates_s)
    if as_json:
        print(json.dumps({**status_json(record, checks, caps, rates), **(extra or {})}, indent=1))
    else:
        print(format_lab(record, checks, caps, rates))
    return EXIT_DAMAGED if problems(checks) else EXIT_OK


def cmd_up(args: argparse.Namespace) -> int:
    try:
        name = check_name(args.name)
        shape = check_shape(args.mode, args.vrs, args.hops, args.work, args.work_factor)
    except LabError as e:
        return _fail("up", str(e), EXIT_USAGE)
    problem = host_problem(shape.mode)
    if problem:
        return _fail("up", f"cannot build a lab in {shape.mode} mode on this host: {problem}", EXIT_UNSUPPORTED)
    with lab_lock(name):
        record, other = read_record(name)
        uri: str | None = None  # no record: look for domains under every lab URI
        action = "built"
        if record is not None:
            diff = shape_difference(shape_of(record), shape)
            if diff:
                return _fail("up", f"lab {name} exists with another shape: {'; '.join(diff)}. "
                             f"Run 'xtc lab down --name {name}' first.", EXIT_DAMAGED)
            bad = problems(health_checks(record, gather_facts(record)))
            if not bad:
                _say(f"lab {name} is already up with this shape; nothing changed")
                return _show(record, args.json, 0.0, {"action": "unchanged"})
            _say(f"lab {name} is damaged ({'; '.join(bad)}): tearing it down and rebuilding it")
            uri, action = record["uri"], "repaired"
        elif other is not None and other.endswith("alive"):
            return _fail("up", f"lab name {name} is in use by a running process ({other.split()[1]}), "
                         "not a persistent lab; pick another --name", EXIT_DAMAGED)
        elif other is not None:
            _say(f"lab {name}: found a record of a lab that was not finished ({other}): removing its leftovers")
            action = "rebuilt"
        else:
            left = leftovers(name)
            if left:
                _say(f"lab {name}: found leftovers without a record ({', '.join(left[:4])}"
                     f"{', ...' if len(left) > 4 else ''}): removing them")
                action = "rebuilt"
        if action != "built":
            try:
                remove_lab(name, uri)
            except LabError as e:
                return _fail("up", f"cannot remove the old lab {name}: {e}", EXIT_DAMAGED)
        try:
            record = build_lab(name, shape, _say)
        except (LabError, OSError) as e:
            return _fail("up", f"cannot build lab {name}: {e}", EXIT_DAMAGED)
        except KeyboardInterrupt:
            return _fail("up", "interrupted; nothing left behind", 130)
        _say(f"lab {name} {action}: {shape.describe()}")
        return _show(record, args.json, 0.0, {"action": action})


def cmd_status(args: argparse.Namespace) -> int:
    try:
        name = check_name(args.name)
    except LabError as e:
        return _fail("status", str(e), EXIT_USAGE)
    if args.router is not None and not args.daemon_config:
        return _fail("status", "--router goes with --daemon-config", EXIT_USAGE)
    record, other = read_record(name)
    if record is None:
        left = leftovers(name) if os.geteuid() == 0 else []
        if other is not None or left:
            what = other or f"leftovers without a record: {', '.join(left[:4])}"
            msg = (f"lab {name} is not a usable persistent lab ({what}); "
                   f"'xtc lab up --name {name}' rebuilds it, 'xtc lab down --name {name}' removes it")
            if args.json:
                print(json.dumps({"name": name, "healthy": False, "problems": [msg], "record": None}))
            return _fail("status", msg, EXIT_DAMAGED)
        others = sorted(n for n in _persistent_labs() if n != name)
        if args.json:
            print(json.dumps({"name": name, "healthy": False, "problems": ["no such lab"], "record": None,
                              "other_labs": others}))
        hint = f" (labs here: {', '.join(others)})" if others else ""
        return _fail("status", f"no lab {name}{hint}; build one with: xtc lab up --name {name}", EXIT_MISSING)
    if args.daemon_config:
        try:
            text = daemon_config_toml(record, args.router)
        except LabError as e:
            return _fail("status", str(e), EXIT_USAGE)
        bad = problems(health_checks(record, gather_facts(record)))
        print(text, end="")
        if bad:
            return _fail("status", f"lab {name} is damaged ({'; '.join(bad)}); this configuration may be stale "
                         f"(run xtc lab up --name {name} to repair)", EXIT_DAMAGED)
        return EXIT_OK
    return _show(record, args.json, args.rates_s)


def _persistent_labs(registry: Path = LAB_REGISTRY) -> list[str]:
    out = []
    try:
        entries = sorted(registry.iterdir())
    except OSError:
        return out
    for e in entries:
        try:
            doc = json.loads(e.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("persistent") is True:
            out.append(e.name)
    return out


def cmd_down(args: argparse.Namespace) -> int:
    if args.all and args.name is not None:
        return _fail("down", "give --name or --all, not both", EXIT_USAGE)
    if os.geteuid() != 0:
        return _fail("down", "needs root (removes namespaces, links, cgroups and domains)", EXIT_UNSUPPORTED)
    if args.all:
        names = _persistent_labs()
        rc = EXIT_OK
        any_lxc = False
        for n in names:
            rc = max(rc, _down_one(n))
            any_lxc = True
        from xtc_lab.lab.netlab import teardown_orphans

        try:
            orphans = teardown_orphans()
        except LabError as e:
            return _fail("down", f"removing leftovers of crashed runs: {e}", EXIT_DAMAGED)
        for n, removed in orphans.items():
            _say(f"removed leftovers of crashed run {n} ({len(removed)} objects)")
        if not names and not orphans:
            _say("no persistent labs and no leftovers: nothing to remove")
        if any_lxc or orphans:
            _stop_libvirtd_if_unused(_say)
        return rc
    try:
        name = check_name(args.name or DEFAULT_NAME)
    except LabError as e:
        return _fail("down", str(e), EXIT_USAGE)
    rc = _down_one(name)
    return rc


def _down_one(name: str) -> int:
    with lab_lock(name):
        record, other = read_record(name)
        if other is not None and other.endswith("alive"):
            return _fail("down", f"{name} is the lab of a running process ({other.split()[1]}), not a persistent "
                         "lab; not removing it", EXIT_DAMAGED)
        uri = record["uri"] if record is not None and record["uri"] else None
        try:
            removed = remove_lab(name, uri)
        except LabError as e:
            return _fail("down", f"lab {name}: {e}", EXIT_DAMAGED)
    if not removed:
        _say(f"no lab {name}: nothing to remove")
        return EXIT_OK
    _say(f"lab {name} removed ({len(removed)} objects: "
         f"{', '.join(sorted({r.split()[0] for r in removed}))})")
    if (record is not None and record["mode"] in LIBVIRT_MODES) or any(r.startswith("domain ") for r in removed):
        _stop_libvirtd_if_unused(_say)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``up``, ``status`` and ``down`` to the ``xtc lab`` subcommands."""
    up = sub.add_parser("up", help="build a persistent lab (or check that it is there, or repair it)",
                        description="Build the host lab: a generator and receiver in their own namespaces, "
                                    "bridges, and VRs (libvirt LXC domains or namespaces in cgroups). It stays "
                                    "until 'xtc lab down'. Idempotent: a healthy lab of the same shape is left "
                                    "as it is, a damaged one is rebuilt.")
    up.add_argument("--name", default=DEFAULT_NAME, help=f"lab name, the prefix of all its objects (default {DEFAULT_NAME})")
    up.add_argument("--vrs", type=int, default=1, help=f"number of VRs, 1..{MAX_LAB_VRS} (default 1; 1 with --hops 3)")
    up.add_argument("--mode", "--kind", dest="mode", default="lxc",
                    help="lxc (libvirt LXC domains, default), netns (namespaces + cgroups) or qemu (libvirt QEMU "
                         "domains forwarding in their own kernel; KVM where it works, TCG otherwise)")
    up.add_argument("--hops", type=int, default=1,
                    help="1: independent VRs (default); 3: three routers in a line, TG-TF1-TF2-TF3-TR")
    add_work_arguments(up, "the forwarders")
    up.add_argument("--json", action="store_true", help="print the lab as JSON")
    up.set_defaults(func=cmd_up)

    st = sub.add_parser("status", help="what the lab has, its health, caps and rates",
                        description="Show a persistent lab: every piece and its health, each VR's cap and its "
                                    "forwarded/offered packets/s. Exit status: 0 healthy, 1 damaged, 3 no such lab.")
    st.add_argument("--name", default=DEFAULT_NAME, help=f"lab name (default {DEFAULT_NAME})")
    st.add_argument("--json", action="store_true", help="print the status as JSON")
    st.add_argument("--rates-s", type=float, default=0.5,
                    help="measure packet rates over this many seconds (default 0.5; 0: do not measure)")
    st.add_argument("--daemon-config", action="store_true",
                    help="print an 'xtc daemon' configuration (TOML) that controls the lab's VRs")
    st.add_argument("--router", default=None, help="with --daemon-config on a --hops 3 lab: the router (tf1, tf2, tf3)")
    st.set_defaults(func=cmd_status)

    dn = sub.add_parser("down", help="remove a lab (everything with its prefix), also after a crash",
                        description="Remove the lab's domains, namespaces, forwarders, cgroups, bridges, veths "
                                    "and record. Works from the name alone; removing nothing is not an error.")
    dn.add_argument("--name", default=None, help=f"lab name (default {DEFAULT_NAME})")
    dn.add_argument("--all", action="store_true",
                    help="every persistent lab and the leftovers of crashed runs (never a live process's lab)")
    dn.set_defaults(func=cmd_down)

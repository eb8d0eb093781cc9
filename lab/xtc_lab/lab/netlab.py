"""The host lab: VRs that forward real packets between namespaces, on one Linux host.

Topology of one VR (number ``k``, from 1)::

    netns <prefix>-tg<k>          bridge <prefix>-a<k>      VR        bridge <prefix>-b<k>        netns <prefix>-tr<k>
    eth0 198.18.k.1/24 --veth-- <prefix>-g<k>   vif<N>.0 ==[forwarder]== vif<N>.1   <prefix>-r<k> --veth-- eth0 198.18.k.2/24
       (traffic generator)                                                                  (traffic receiver)

The VR is either a libvirt LXC domain ``<prefix>-vr<k>`` whose init is the userspace
forwarder (``forwarder.c``; it holds the VR's only process, so a CPU cap on the domain
limits what it forwards), or, for hosts without libvirt, the same forwarder run in a
plain network namespace ``<prefix>-vr<k>`` (:meth:`NetLab.add_netns_vr`).  The VR's
host-side interfaces get Xen-style names ``vif<N>.0`` (towards the generator) and
``vif<N>.1`` (towards the receiver), ``N`` a free number in 100..9999, so a Dom0-style
meter works unchanged: host-side RX packets of a VR's vifs are the packets it forwarded,
host-side TX packets are the packets offered to it.

Addressing plan (all inside 198.18.0.0/15, RFC 2544, benchmarking only):

* VR ``k`` (1..250) uses the subnet 198.18.k.0/24: generator 198.18.k.1, receiver
  198.18.k.2.  The VR is an L2 forwarder and has no address.
* The addresses exist only inside the lab's own namespaces, which have no route other
  than their /24 and no link to the outside; bridges and vifs in the host namespace carry
  no address.  Two labs with different prefixes may both use VR 1: their namespaces are
  separate, so the addresses never meet.
* Neighbour entries between generator and receiver are static (permanent), so ARP never
  competes with the measured stream when a VR is throttled.

* Chains of routers (:meth:`NetLab.add_chain`, the line TG-TF1-TF2-TF3-TR of section 8.2 of
  the paper): chain ``c`` (1..9) uses 198.19.c.0/24: generator 198.19.c.1, receiver
  198.19.c.2, and the probe namespace after router ``h`` (on the bridge between router ``h``
  and ``h+1``) 198.19.c.(10+h).  198.19.0.0/16 is the upper half of the benchmark range, so
  chain subnets never meet the per-VR subnets 198.18.k.0/24.

Topology of chain ``c`` with ``n`` routers (one VR per router, router ``i`` is ``tf<i>``)::

    <prefix>-cg<c>  --  bridge h<c>0 -- VR tf1 -- bridge h<c>1 -- VR tf2 -- ... -- VR tf<n> -- bridge h<c><n> -- <prefix>-cr<c>
    (generator)                                     |                                                         (receiver)
                                              <prefix>-p<c>1 (probe after tf1), ...

Each VR has its own pair of bridges.  Two L2 forwarders between one shared pair of bridges
would form a forwarding loop (a broadcast would circle forever); separate pairs also keep
each VR's counters and traffic independent, while the VRs still share the host's CPU.

A netns VR may also get its own cgroup (``add_netns_vr(cgroup=True)``): the forwarder is
started inside ``<cpu cgroup root>/<prefix>-vr<k>`` (cgroup v1 ``cpu`` controller, e.g.
``/sys/fs/cgroup/cpu/<prefix>-vr1``, or cgroup v2 with ``cpu.max``; see
:func:`find_cpu_cgroup`), so its CPU can be capped without libvirt, as the lab's LXC domains are.

Everything the lab creates is named ``<prefix>-...`` (domains, bridges, namespaces, host
veth ends, cgroups; vifs are removed with their domain or namespace), so :func:`teardown_prefix`
finds and removes all of it, also after a crash.  Each lab records its owner process in
``/run/xtc/labs/<prefix>``; :func:`teardown_orphans` removes the labs whose owner died
without tearing down, and leaves the labs of live processes (other test runs) alone.  A
*persistent* lab (``xtc lab up``, :mod:`xtc_lab.lab.lifecycle`) is owned by nobody but itself: its
record says ``"persistent": true`` and :func:`teardown_orphans` never removes it (``xtc lab
down`` does).  Network namespaces are created and
removed with ``pyroute2.netns`` (bind mounts under /run/netns, as ``ip netns`` does).
Programs are run inside them with ``ip netns exec``.

Why one file: :class:`NetLab` builds and tears down one lab, and what else is here is what it is
built of (the addressing plan, the forwarder's command line, the domain XML, the packet counters
its VRs are measured by, the teardown by prefix that also clears a crashed lab's leftovers); they
change together when the lab's shape changes.  The cgroups of netns VRs are
:mod:`xtc_lab.lab.cgroups`'s, the record of a lab that outlives its command
:mod:`xtc_lab.lab.record`'s.
"""

from __future__ import annotations

import ipaddress
import os
import random
import re
import shlex
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from xtc_lab.lab import qemu
from xtc_lab.lab.build import build_forwarder
from xtc_lab.lab.cgroups import (CpuCgroup, LabError, create_cgroup, find_cpu_cgroup, kill_pids, lab_cgroups,
                                  remove_cgroup)
from xtc_lab.lab.libvirtd import process_start_time
from xtc_lab.procs import stop_processes

LAB_NET = ipaddress.ip_network("198.18.0.0/15")
MAX_VRS = 250
MAX_CHAINS = 9  # chain and hop numbers are single digits in the 15-character interface names
MAX_HOPS = 8
MODES = ("lxc", "netns", "qemu")
PREFIX_RE = re.compile(r"^[a-z][a-z0-9]*-[a-z0-9]{1,8}$")
PREFIX_MAX_LEN = 10  # "<prefix>-a250" must fit in IFNAMSIZ - 1 = 15 characters
NETNS_DIR = Path("/run/netns")
LAB_REGISTRY = Path("/run/xtc/labs")
DEFAULT_PERIOD_US = 100_000


def random_prefix(stem: str = "xtct") -> str:
    """Return a fresh name prefix such as ``xtct-3f9a`` (random, so concurrent labs never clash)."""
    return f"{stem}-{random.getrandbits(16):04x}"


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is a valid lab prefix (``stem-tag``, at most 10 characters)."""
    if not PREFIX_RE.match(prefix) or len(prefix) > PREFIX_MAX_LEN:
        raise LabError(
            f"bad lab prefix {prefix!r}: want <stem>-<tag> in lowercase letters and digits, "
            f"at most {PREFIX_MAX_LEN} characters (interface names are limited to 15)"
        )
    return prefix


def vr_addresses(k: int) -> tuple[str, str]:
    """Return (generator, receiver) IPv4 addresses of VR ``k`` (see the addressing plan)."""
    if not 1 <= k <= MAX_VRS:
        raise LabError(f"VR number {k} out of range 1..{MAX_VRS}")
    net = ipaddress.ip_network(f"198.18.{k}.0/24")
    assert net.subnet_of(LAB_NET)  # type: ignore[arg-type]
    return str(net[1]), str(net[2])


def chain_addresses(c: int, hops: int) -> tuple[str, str, tuple[str, ...]]:
    """Addresses of chain ``c`` with ``hops`` routers (see the addressing plan).

    Returns
    -------
    tuple
        (generator, receiver, probes), where ``probes[h-1]`` is the address of the probe
        after router ``h`` (h = 1 .. hops-1), all in 198.19.c.0/24.
    """
    if not 1 <= c <= MAX_CHAINS:
        raise LabError(f"chain number {c} out of range 1..{MAX_CHAINS}")
    if not 1 <= hops <= MAX_HOPS:
        raise LabError(f"a chain has 1..{MAX_HOPS} routers, got {hops}")
    net = ipaddress.ip_network(f"198.19.{c}.0/24")
    assert net.subnet_of(LAB_NET)  # type: ignore[arg-type]
    return str(net[1]), str(net[2]), tuple(str(net[10 + h]) for h in range(1, hops))


#: Largest per-frame work factor the forwarder accepts (its ``-f`` option).
MAX_WORK_FACTOR = 100.0


def check_work_factor(work_factor: object, key: str = "work_factor") -> float:
    """A valid per-frame work factor (a number > 0 and <= :data:`MAX_WORK_FACTOR`), as a float.

    Raises :class:`LabError` naming ``key`` (the option or config key it came from).
    """
    if isinstance(work_factor, bool) or not isinstance(work_factor, (int, float)) or not (
            0.0 < work_factor <= MAX_WORK_FACTOR):
        raise LabError(f"{key} {work_factor!r} out of range: want a number > 0 and <= {MAX_WORK_FACTOR:g} "
                       "(the forwarder's per-frame work factor; 1 = its work as given)")
    return float(work_factor)


def add_work_arguments(p: Any, forwarders: str) -> None:
    """``--work`` and ``--work-factor`` on the argparse parser ``p``: the busy work per frame of
    ``forwarders`` (as the help names them), checked later with :func:`check_work_factor`."""
    p.add_argument("--work", type=int, default=0, help=f"busy-work iterations per frame in {forwarders} (default 0)")
    p.add_argument("--work-factor", type=float, default=1.0,
                   help=f"per-frame work factor of {forwarders}: round(FACTOR x WORK) iterations per frame "
                        "(0.5: cheaper, 2: dearer; default 1)")


def forwarder_argv(forwarder: Path | str, work_iters: int, work_factor: float = 1.0,
                   wait_s: int | None = None, rcvbuf_bytes: int | None = None) -> list[str]:
    """The command line of a VR's forwarder (``forwarder.c``).

    Parameters
    ----------
    forwarder
        The built executable.
    work_iters
        Busy-work iterations per forwarded frame (``-w``).
    work_factor
        Per-frame work factor (``-f``): the forwarder does ``round(work_factor * work_iters)``
        iterations per frame, a cheaper (< 1) or dearer (> 1) forwarder.  Factor 1 adds no
        option, so its command line is the one the lab always used.
    wait_s
        Give up if the interfaces are not there after this many seconds (``-t``; None: wait forever).
    rcvbuf_bytes
        Receive buffer of the forwarder's sockets, bytes (``-r``; None: the kernel's default).

    Returns
    -------
    list of str
    """
    argv = [str(forwarder), "-w", str(work_iters)]
    if check_work_factor(work_factor) != 1.0:
        argv += ["-f", repr(float(work_factor))]
    if rcvbuf_bytes is not None:
        argv += ["-r", str(int(rcvbuf_bytes))]
    if wait_s is not None:
        argv += ["-t", str(wait_s)]
    return argv + ["eth0", "eth1"]


def parse_proc_net_dev(text: str) -> dict[str, tuple[int, int]]:
    """Parse ``/proc/net/dev``.

    The lab's own few-line parser, deliberately not the daemon's meter
    (:mod:`xtc.daemon.meter`): the lab checks what the daemon controls with code it does not share.

    Returns
    -------
    dict
        interface name -> (rx_packets, tx_packets), as counted by the host (packets).
    """
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        f = rest.split()
        if len(f) < 16:
            continue
        out[name.strip()] = (int(f[1]), int(f[9]))
    return out


def vr_totals(counters: dict[str, tuple[int, int]], vifs: Sequence[str]) -> tuple[int, int] | None:
    """(forwarded, offered) packet totals of a VR from :func:`parse_proc_net_dev` output.

    Forwarded: host-side RX summed over the VR's vifs (what the VR sent out); offered: host-side
    TX of its generator-side vif ``vifs[0]`` (what was handed to it).  None if a vif is missing.
    """
    if any(v not in counters for v in vifs):
        return None
    return sum(counters[v][0] for v in vifs), counters[vifs[0]][1]


def read_packet_counters(path: Path | str = "/proc/net/dev") -> dict[str, tuple[int, int]]:
    """Read (rx_packets, tx_packets) of every interface from ``path`` (see :func:`parse_proc_net_dev`)."""
    return parse_proc_net_dev(Path(path).read_text())


def lxc_domain_xml(
    name: str,
    init: Sequence[str],
    bridges: Sequence[str],
    vifs: Sequence[str],
    vcpu_quota_us: int = -1,
    vcpu_period_us: int = DEFAULT_PERIOD_US,
    memory_mib: int = 64,
) -> str:
    """Return the XML of an LXC domain that runs ``init`` with one interface per bridge.

    Parameters
    ----------
    name
        Domain name.
    init
        Program and arguments of the domain's init (its only process).
    bridges, vifs
        Host bridges and the host-side interface names to give the domain's veths; the guest
        sides are called eth0, eth1, ... in the same order.
    vcpu_quota_us
        CPU time the domain may use per period, microseconds; -1 for no limit.  A Xen cap of
        C percent of one CPU corresponds to ``C / 100 * vcpu_period_us``.
    vcpu_period_us
        Scheduler period, microseconds (1000..1000000).
    memory_mib
        Memory limit, MiB.
    """
    if not init or not init[0].startswith("/"):
        raise LabError(f"init must be an absolute program path with its arguments, got {list(init)!r}")
    if len(bridges) != len(vifs) or not bridges:
        raise LabError("need one vif name per bridge, and at least one bridge")
    if not 1000 <= vcpu_period_us <= 1_000_000:
        raise LabError(f"vcpu_period_us {vcpu_period_us} out of range 1000..1000000")
    if vcpu_quota_us != -1 and not 1000 <= vcpu_quota_us <= 17_592_186_044_415:
        raise LabError(f"vcpu_quota_us {vcpu_quota_us}: want -1 (no limit) or at least 1000")
    if memory_mib < 8:
        raise LabError(f"memory_mib {memory_mib} too small (at least 8)")
    dom = ET.Element("domain", type="lxc")
    ET.SubElement(dom, "name").text = name
    ET.SubElement(dom, "memory", unit="MiB").text = str(memory_mib)
    ET.SubElement(dom, "vcpu").text = "1"
    tune = ET.SubElement(dom, "cputune")
    ET.SubElement(tune, "period").text = str(vcpu_period_us)
    ET.SubElement(tune, "quota").text = str(vcpu_quota_us)
    os_el = ET.SubElement(dom, "os")
    ET.SubElement(os_el, "type").text = "exe"
    ET.SubElement(os_el, "init").text = init[0]
    for arg in init[1:]:
        ET.SubElement(os_el, "initarg").text = arg
    ET.SubElement(dom, "on_poweroff").text = "destroy"
    ET.SubElement(dom, "on_crash").text = "destroy"
    devs = ET.SubElement(dom, "devices")
    for i, (br, vif) in enumerate(zip(bridges, vifs)):
        iface = ET.SubElement(devs, "interface", type="bridge")
        ET.SubElement(iface, "source", bridge=br)
        ET.SubElement(iface, "target", dev=vif)
        ET.SubElement(iface, "guest", dev=f"eth{i}")
    ET.SubElement(devs, "console", type="pty")
    return ET.tostring(dom, encoding="unicode")


@dataclass
class VR:
    """One VR of the lab and everything around it (names are host-wide)."""

    k: int
    name: str  # domain name (LXC) or namespace name (netns VR)
    kind: str  # "lxc", "netns" or "qemu"
    tg_ns: str
    tr_ns: str
    bridges: tuple[str, str]
    vifs: tuple[str, str]  # host side: (towards generator, towards receiver)
    tg_addr: str
    tr_addr: str
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    cgroup: str | None = None  # netns VR in its own cgroup: the cgroup directory
    router: str | None = None  # VR of a chain: the router it runs on ("tf1", ...)

    def counters(self, path: Path | str = "/proc/net/dev") -> dict[str, int]:
        """Host-side packet counters of this VR (packets since its vifs were created).

        Returns ``forwarded`` (RX summed over both vifs: what the VR sent out),
        ``forwarded_to_tr`` (RX of the receiver-side vif), and ``offered_from_tg``
        (TX of the generator-side vif: what was handed to the VR).
        """
        c = read_packet_counters(path)
        totals = vr_totals(c, self.vifs)
        if totals is None:
            raise LabError(f"VR {self.name}: interfaces {[v for v in self.vifs if v not in c]} not in {path}")
        return {"forwarded": totals[0], "forwarded_to_tr": c[self.vifs[1]][0], "offered_from_tg": totals[1]}


@dataclass
class Probe:
    """A namespace with one address on the bridge after router ``after`` (answers pings)."""

    after: str  # router name, e.g. "tf1"
    ns: str
    addr: str
    bridge: str


@dataclass
class Chain:
    """A line of routers, one VR each: generator -> tf1 -> tf2 -> ... -> receiver.

    ``bridges[0]`` is the generator's bridge, ``bridges[-1]`` the receiver's; ``vrs[i]`` runs on
    router ``routers[i]`` between ``bridges[i]`` and ``bridges[i+1]``; ``probes[h-1]`` sits on
    ``bridges[h]``, after router ``h``.
    """

    c: int
    tg_ns: str
    tr_ns: str
    tg_addr: str
    tr_addr: str
    bridges: tuple[str, ...]
    routers: tuple[str, ...]
    vrs: list[VR] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)

    def targets(self) -> list[tuple[str, str]]:
        """(label, address) of everything to probe from the generator, nearest first.

        The probe after each router but the last, then the receiver (``"tr"``).
        """
        return [(f"after-{p.after}", p.addr) for p in self.probes] + [("tr", self.tr_addr)]

    def router_vr(self, router: str) -> VR:
        """The VR of router ``router`` (e.g. ``"tf2"``)."""
        for vr in self.vrs:
            if vr.router == router:
                return vr
        raise LabError(f"no router {router!r} in chain {self.c} (routers: {', '.join(self.routers)})")


def _netlink_error() -> type[Exception]:
    from pyroute2 import NetlinkError

    return NetlinkError


def pids_in_netns(name: str, netns_dir: Path = NETNS_DIR, proc: Path = Path("/proc")) -> list[int]:
    """Pids of the processes whose network namespace is the named one."""
    try:
        st = os.stat(netns_dir / name)
    except OSError:
        return []
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            s = os.stat(entry / "ns" / "net")
        except OSError:
            continue
        if (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino):
            pids.append(int(entry.name))
    return pids


def teardown_prefix(prefix: str, uri: str | None = "lxc:///") -> list[str]:
    """Remove every lab object whose name starts with ``<prefix>-`` (also after a crash).

    Destroys (and undefines) LXC domains on ``uri`` (skipped if ``uri`` is None or cannot be
    reached), kills processes in the lab's namespaces, removes the namespaces, kills the
    processes left in the lab's cgroups and removes those, and deletes bridges and host veth
    ends.  Returns what was removed, for the log.
    """
    check_prefix(prefix)
    stem = prefix + "-"
    removed: list[str] = []
    if uri is not None:
        try:
            import libvirt
        except ImportError:
            libvirt = None  # type: ignore[assignment]
        if libvirt is not None:
            libvirt.registerErrorHandler(lambda _c, _e: None, None)
            try:
                conn = libvirt.open(uri)
            except libvirt.libvirtError:
                conn = None
            if conn is not None:
                try:
                    for dom in conn.listAllDomains():
                        name = dom.name()
                        if not name.startswith(stem):
                            continue
                        try:
                            persistent = dom.isPersistent()  # a transient domain vanishes on destroy
                            if dom.isActive():
                                dom.destroy()
                            if persistent:
                                dom.undefine()
                            removed.append(f"domain {name}")
                        except libvirt.libvirtError as e:
                            if e.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                                raise LabError(f"cannot remove domain {name}: {e}") from e
                finally:
                    conn.close()
    from pyroute2 import IPRoute, netns

    for ns in netns.listnetns():
        if ns.startswith(stem):
            kill_pids(pids_in_netns(ns))
            try:
                netns.remove(ns)
                removed.append(f"netns {ns}")
            except OSError as e:
                raise LabError(f"cannot remove network namespace {ns}: {e}") from e
    for d in lab_cgroups(prefix):
        if remove_cgroup(d):
            removed.append(f"cgroup {d}")
    with IPRoute() as ipr:
        for link in ipr.link("dump"):
            name = link.get("ifname") or ""
            if name.startswith(stem):
                try:
                    ipr.link("del", index=link["index"])
                    removed.append(f"link {name}")
                except _netlink_error() as e:
                    if e.code != 19:  # ENODEV: gone with its peer
                        raise LabError(f"cannot delete interface {name}: {e}") from e
    return removed


def teardown_orphans(registry: Path = LAB_REGISTRY) -> dict[str, list[str]]:
    """Tear down every registered lab whose owner process is gone; return what was removed.

    Persistent labs (``"persistent": true`` in their record, made by ``xtc lab up``) are
    owned by no process and are never removed here; ``xtc lab down`` removes them.
    """
    import json

    out: dict[str, list[str]] = {}
    if not registry.is_dir():
        return out
    for entry in sorted(registry.iterdir()):
        try:
            owner = json.loads(entry.read_text())
            if isinstance(owner, dict) and owner.get("persistent") is True:
                continue  # an operator's lab: it owns itself
            pid, start, uri = int(owner["pid"]), int(owner["start"]), owner.get("uri")
            check_prefix(entry.name)
        except (OSError, ValueError, KeyError, TypeError, LabError):
            continue  # not a lab record
        if process_start_time(pid) == start:
            continue  # its owner is alive: someone else's running lab
        out[entry.name] = teardown_prefix(entry.name, uri)
        entry.unlink(missing_ok=True)
    return out


class NetLab:
    """Builds VRs with their generator/receiver namespaces; removes all of it on :meth:`teardown`.

    Parameters
    ----------
    prefix
        Name prefix of everything created (default: a random ``xtct-xxxx``).
    uri
        libvirt connection for LXC VRs (only opened by :meth:`add_vr`).
    forwarder
        Path of the forwarder executable (default: built on first use, see ``build.py``).
    """

    def __init__(self, prefix: str | None = None, uri: str = "lxc:///", forwarder: Path | None = None,
                 registry: Path = LAB_REGISTRY) -> None:
        self.prefix = check_prefix(prefix or random_prefix())
        self.uri = uri
        self._forwarder = forwarder
        self._registry = registry
        self._conn: Any = None
        self._cpu_cgroup: CpuCgroup | None = None
        self.vrs: list[VR] = []
        self.chains: list[Chain] = []
        self.processes: list[subprocess.Popen[bytes]] = []

    # ------------------------------------------------------------- public API
    @property
    def forwarder(self) -> Path:
        if self._forwarder is None:
            self._forwarder = build_forwarder()
        return self._forwarder

    def connection(self) -> Any:
        """The lab's libvirt connection (opened on first use)."""
        if self._conn is None:
            import libvirt

            libvirt.registerErrorHandler(lambda _c, _e: None, None)
            try:
                self._conn = libvirt.open(self.uri)
            except libvirt.libvirtError as e:
                raise LabError(f"cannot connect to libvirt at {self.uri}: {e}") from e
        return self._conn

    def add_vr(
        self,
        work_iters: int = 0,
        vcpu_quota_us: int = -1,
        vcpu_period_us: int = DEFAULT_PERIOD_US,
        memory_mib: int = 64,
        work_factor: float = 1.0,
        rcvbuf_bytes: int | None = None,
    ) -> VR:
        """Create the next VR as an LXC domain (with its bridges and namespaces) and start it.

        Parameters
        ----------
        work_iters
            Busy-work iterations per forwarded frame (more work: fewer packets per CPU second).
        vcpu_quota_us, vcpu_period_us, memory_mib
            See :func:`lxc_domain_xml`.
        work_factor
            Per-frame work factor (see :func:`forwarder_argv`).
        rcvbuf_bytes
            Receive buffer of the forwarder's sockets, bytes (None: the kernel's default; see
            :func:`forwarder_argv`).
        """
        self._check_work(work_iters)
        check_work_factor(work_factor)
        vr = self._add_segments("lxc")
        self._start_lxc(vr, forwarder_argv(self.forwarder, work_iters, work_factor, rcvbuf_bytes=rcvbuf_bytes), vcpu_quota_us, vcpu_period_us,
                        memory_mib)
        return vr

    def add_qemu_vr(self, accel: str | None = None, memory_mib: int = qemu.DEFAULT_MEMORY_MIB,
                    ready_timeout_s: float = 120.0, tuning: qemu.QemuTuning | None = None) -> VR:
        """Create the next VR as a QEMU domain that forwards in its own kernel, and wait until it does.

        The lab's connection must be a QEMU one (``uri="qemu:///system"``).  ``accel`` is
        ``"kvm"`` or ``"tcg"`` (None: :func:`xtc_lab.lab.qemu.pick_accel`).  Readiness is a ping
        from the generator to the receiver answered through the guest; a guest that does not
        forward within ``ready_timeout_s`` is an error (the caller tears the lab down).
        ``tuning`` (None: :func:`xtc_lab.lab.qemu.tuning_from_env`) sets icount, the TB cache, the vCPUs.
        """
        image = qemu.build_image()
        if accel is None:
            accel, _why = qemu.pick_accel()
        if tuning is None:
            tuning = qemu.tuning_from_env()
        vr = self._add_segments("qemu")
        macs_ns = [self._ns_mac(vr.tg_ns), self._ns_mac(vr.tr_ns)]
        import libvirt

        conn = self.connection()
        for _attempt in range(5):
            vr.vifs = self._free_vifs()
            guest_macs = [qemu.mac_for(v) for v in vr.vifs]
            cmdline = qemu.guest_cmdline(vr.tg_addr, vr.tr_addr, macs_ns[0], macs_ns[1], guest_macs)
            xml = qemu.domain_xml(vr.name, str(image.kernel), str(image.initrd), cmdline, vr.bridges,
                                  vr.vifs, guest_macs, accel, memory_mib, tuning=tuning)
            try:
                conn.createXML(xml, 0)
                break
            except libvirt.libvirtError as e:
                if "exists" in str(e).lower() and any(Path(f"/sys/class/net/{v}").exists() for v in vr.vifs):
                    continue
                raise LabError(f"cannot start QEMU domain {vr.name}: {e}") from e
        else:
            raise LabError(f"cannot find free vif names for {vr.name}")
        # the generator and receiver now send to the guest, which routes between them
        self._static_neigh(vr.tg_ns, vr.tr_addr, guest_macs[0])
        self._static_neigh(vr.tr_ns, vr.tg_addr, guest_macs[1])
        self.wait_forwarding(vr, ready_timeout_s)
        return vr

    def wait_forwarding(self, vr: VR, timeout_s: float) -> float:
        """Wait until a ping from ``vr``'s generator to its receiver is answered; return the seconds taken."""
        t0 = time.monotonic()
        while True:
            r = self.run_in(vr.tg_ns, ["ping", "-c", "1", "-W", "1", "-q", vr.tr_addr], timeout_s=10)
            if r.returncode == 0:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                raise LabError(f"VR {vr.name} does not forward within {timeout_s:g} s "
                               f"(no answer from {vr.tr_addr} through the guest)")
            time.sleep(0.5)

    def _ns_mac(self, ns: str) -> str:
        from pyroute2 import NetNS

        with NetNS(ns) as nsr:
            return str(nsr.link("get", index=self._index(nsr, "eth0"))[0].get("address"))

    def add_netns_vr(self, work_iters: int = 0, cgroup: bool = False, detach: bool = False,
                     work_factor: float = 1.0, rcvbuf_bytes: int | None = None) -> VR:
        """Create the next VR as the forwarder in a plain network namespace ``<prefix>-vr<k>``.

        No libvirt needed.  The forwarder's pid is ``vr.process.pid``.

        Parameters
        ----------
        work_iters
            Busy-work iterations per forwarded frame.
        cgroup
            Start the forwarder in its own cgroup ``<cpu cgroup root>/<prefix>-vr<k>``
            (``vr.cgroup``; see :func:`find_cpu_cgroup`), so that its CPU can be capped.
        detach
            Start the forwarder in its own session, so it outlives this process and its
            terminal (a persistent lab); :meth:`teardown` still stops it.
        work_factor
            Per-frame work factor (see :func:`forwarder_argv`).
        rcvbuf_bytes
            The forwarder's packet sockets' receive buffer (None: the kernel's default; see
            :func:`forwarder_argv`).
        """
        self._check_work(work_iters)
        check_work_factor(work_factor)
        cg = self.cpu_cgroup() if cgroup else None  # before anything exists: no cgroup, nothing made
        vr = self._add_segments("netns")
        self._start_netns(vr, forwarder_argv(self.forwarder, work_iters, work_factor, wait_s=10,
                                             rcvbuf_bytes=rcvbuf_bytes), cg, detach)
        return vr

    def add_chain(self, hops: int = 3, mode: str = "lxc", work_iters: int = 0, cgroup: bool = True,
                  detach: bool = False, vcpu_period_us: int = DEFAULT_PERIOD_US, work_factor: float = 1.0,
                  rcvbuf_bytes: int | Sequence[int | None] | None = None) -> Chain:
        """Build a line of ``hops`` routers with one VR each: TG -> VR tf1 -> ... -> VR tf<hops> -> TR.

        The routers stand for the physical routers of section 8.2 of the paper (TG-TF1-TF2-TF3-TR):
        each VR is a separate LXC domain (``mode="lxc"``) or netns VR (``mode="netns"``, in its
        own cgroup unless ``cgroup`` is False), so each router can run its own daemon.  Between
        router ``h`` and ``h+1`` a probe namespace with one address answers pings, so RTT and
        loss can be measured from the generator up to each hop and to the receiver.
        Addresses: see the module docstring (chain ``c`` uses 198.19.c.0/24).

        The chain's VRs are also appended to :attr:`vrs` (numbered on from the VRs before
        them); each has ``router`` set, ``tg_ns``/``tr_ns``/``tg_addr``/``tr_addr`` of the
        chain's generator and receiver (so a stream started "through" ``chain.vrs[0]`` crosses
        the whole chain), and ``bridges`` = (upstream, downstream) bridge.

        Parameters
        ----------
        hops
            Number of routers, 1..8.
        mode
            ``"lxc"`` or ``"netns"``.
        work_iters
            Busy-work iterations per frame in every router's forwarder.
        cgroup, detach
            netns mode: as for :meth:`add_netns_vr`.
        vcpu_period_us
            lxc mode: the domains' scheduler period, microseconds.
        work_factor
            Per-frame work factor of every router's forwarder (see :func:`forwarder_argv`).
        rcvbuf_bytes
            Receive buffer of the routers' forwarder sockets, bytes (None: the kernel's default):
            one for every router, or one per router in line order.

        Returns
        -------
        Chain
        """
        from pyroute2 import IPRoute

        if mode not in MODES:
            raise LabError(f"unknown VR mode {mode!r}: want 'lxc' or 'netns'")
        if isinstance(hops, bool) or not isinstance(hops, int):
            raise LabError(f"hops must be an integer, got {hops!r}")
        self._check_work(work_iters)
        check_work_factor(work_factor)
        rcvbufs = list(rcvbuf_bytes) if isinstance(rcvbuf_bytes, Sequence) else [rcvbuf_bytes] * hops
        if len(rcvbufs) != hops:
            raise LabError(f"rcvbuf_bytes: {len(rcvbufs)} values for {hops} routers")
        c = len(self.chains) + 1
        tg_addr, tr_addr, probe_addrs = chain_addresses(c, hops)
        cg = self.cpu_cgroup() if mode == "netns" and cgroup else None
        p = self.prefix
        if not self.vrs and not self.chains:
            self._register_owner()
        routers = tuple(f"tf{i}" for i in range(1, hops + 1))
        chain = Chain(c=c, tg_ns=f"{p}-cg{c}", tr_ns=f"{p}-cr{c}", tg_addr=tg_addr, tr_addr=tr_addr,
                      bridges=tuple(f"{p}-h{c}{j}" for j in range(hops + 1)), routers=routers)
        self.chains.append(chain)  # tracked before anything exists: teardown covers a half-built chain
        ends = [(chain.tg_ns, f"{p}-cg{c}", chain.bridges[0], tg_addr),
                (chain.tr_ns, f"{p}-cr{c}", chain.bridges[-1], tr_addr)]
        for h, addr in enumerate(probe_addrs, start=1):
            probe = Probe(after=routers[h - 1], ns=f"{p}-p{c}{h}", addr=addr, bridge=chain.bridges[h])
            chain.probes.append(probe)
            ends.append((probe.ns, f"{p}-p{c}{h}", probe.bridge, addr))
        macs: dict[str, str] = {}
        with IPRoute() as ipr:
            for br in chain.bridges:
                self._nl(f"create bridge {br}", ipr.link, "add", ifname=br, kind="bridge")
                self._nl(f"bring up {br}", ipr.link, "set", index=self._index(ipr, br), state="up")
            for ns, host_end, br, addr in ends:
                self._create_netns(ns)
                self._veth_into_ns(ipr, host_end, "eth0", ns, master=br)
                macs[ns] = self._configure_ns_end(ns, addr)
        # Static neighbours: the generator knows the receiver and every probe, they know it.
        for ns, _end, _br, addr in ends[1:]:
            self._static_neigh(chain.tg_ns, addr, macs[ns])
            self._static_neigh(ns, tg_addr, macs[chain.tg_ns])
        for i, router in enumerate(routers):
            k = len(self.vrs) + 1
            vr = VR(k=k, name=f"{p}-vr{k}", kind=mode, tg_ns=chain.tg_ns, tr_ns=chain.tr_ns,
                    bridges=(chain.bridges[i], chain.bridges[i + 1]), vifs=("", ""),
                    tg_addr=tg_addr, tr_addr=tr_addr, router=router)
            self.vrs.append(vr)
            chain.vrs.append(vr)
            if mode == "lxc":
                self._start_lxc(vr, forwarder_argv(self.forwarder, work_iters, work_factor, rcvbuf_bytes=rcvbufs[i]),
                                -1, vcpu_period_us, 64)
            else:
                self._start_netns(vr, forwarder_argv(self.forwarder, work_iters, work_factor, wait_s=10,
                                                     rcvbuf_bytes=rcvbufs[i]), cg, detach)
        return chain

    def cpu_cgroup(self) -> CpuCgroup:
        """The cgroup hierarchy used for netns VRs (found on first use, see :func:`find_cpu_cgroup`)."""
        if self._cpu_cgroup is None:
            self._cpu_cgroup = find_cpu_cgroup()
        return self._cpu_cgroup

    def spawn_in(self, ns: str, argv: Sequence[str], cgroup_procs: Path | Sequence[Path] | None = None,
                 **popen: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside namespace ``ns`` (``ip netns exec``); tracked, stopped on teardown.

        With ``cgroup_procs`` (a cgroup's ``cgroup.procs`` file, or several: one per hierarchy)
        the process enters those cgroups before it becomes ``ip netns exec`` and then ``argv``
        (same pid throughout: a shell writes its own pid there and execs), so everything it runs
        is charged to the cgroups.
        """
        if not ns.startswith(self.prefix + "-"):
            raise LabError(f"namespace {ns!r} does not belong to lab {self.prefix}")
        popen.setdefault("stdin", subprocess.DEVNULL)
        popen.setdefault("stdout", subprocess.DEVNULL)
        popen.setdefault("stderr", subprocess.DEVNULL)
        cmd = ["ip", "netns", "exec", ns, *argv]
        if cgroup_procs is not None:
            files = [cgroup_procs] if isinstance(cgroup_procs, Path) else list(cgroup_procs)
            # Outside the namespace: ip netns exec mounts its own /sys, without the cgroup tree.
            moves = "".join(f'echo $$ > {shlex.quote(str(f))} && ' for f in files)
            cmd = ["sh", "-c", moves + 'exec "$@"', "sh", *cmd]
        try:
            p = subprocess.Popen(cmd, **popen)
        except OSError as e:
            raise LabError(f"cannot run {argv[0]} in {ns}: {e}") from e
        self.processes.append(p)
        return p

    def run_in(self, ns: str, argv: Sequence[str], timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` to completion inside ``ns``; return its result (output captured as text)."""
        if not ns.startswith(self.prefix + "-"):
            raise LabError(f"namespace {ns!r} does not belong to lab {self.prefix}")
        return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True,
                              timeout=timeout_s, stdin=subprocess.DEVNULL)

    def domain(self, vr: VR) -> Any:
        """The libvirt domain of an LXC VR."""
        import libvirt

        if vr.kind not in ("lxc", "qemu"):
            raise LabError(f"VR {vr.name} is a {vr.kind} VR, not a libvirt domain")
        try:
            return self.connection().lookupByName(vr.name)
        except libvirt.libvirtError as e:
            raise LabError(f"domain {vr.name}: {e}") from e

    def set_vcpu_quota(self, vr: VR, vcpu_quota_us: int) -> None:
        """Change an LXC VR's ``vcpu_quota`` live (microseconds per period; -1 = no limit)."""
        import libvirt

        if vcpu_quota_us != -1 and vcpu_quota_us < 1000:
            raise LabError(f"vcpu_quota_us {vcpu_quota_us}: want -1 (no limit) or at least 1000")
        try:
            self.domain(vr).setSchedulerParametersFlags(
                {"vcpu_quota": vcpu_quota_us}, libvirt.VIR_DOMAIN_AFFECT_LIVE
            )
        except libvirt.libvirtError as e:
            raise LabError(f"cannot set vcpu_quota of {vr.name}: {e}") from e

    def teardown(self) -> list[str]:
        """Stop the lab's processes and remove everything with the lab's prefix."""
        stop_processes(self.processes, 3)
        self.processes.clear()
        removed = teardown_prefix(self.prefix, self.uri if self._conn is not None else None)
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass
            self._conn = None
        self.vrs.clear()
        self.chains.clear()
        (self._registry / self.prefix).unlink(missing_ok=True)
        return removed

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    # ------------------------------------------------------------- internals
    @staticmethod
    def _check_work(work_iters: int) -> int:
        if not isinstance(work_iters, int) or work_iters < 0:
            raise LabError(f"work_iters must be a non-negative integer, got {work_iters!r}")
        return work_iters

    def _start_lxc(self, vr: VR, init: list[str], vcpu_quota_us: int, vcpu_period_us: int, memory_mib: int) -> None:
        """Start ``vr`` as an LXC domain on its bridges (its vifs are chosen here), ``init`` its forwarder."""
        import libvirt

        conn = self.connection()
        for _attempt in range(5):
            vr.vifs = self._free_vifs()
            xml = lxc_domain_xml(vr.name, init, vr.bridges, vr.vifs, vcpu_quota_us, vcpu_period_us, memory_mib)
            try:
                conn.createXML(xml, 0)
                break
            except libvirt.libvirtError as e:
                if "exists" in str(e).lower() and any(Path(f"/sys/class/net/{v}").exists() for v in vr.vifs):
                    continue  # another lab took these vif names meanwhile
                raise LabError(f"cannot start LXC domain {vr.name}: {e}") from e
        else:
            raise LabError(f"cannot find free vif names for {vr.name}")
        self._wait_links(vr.vifs)

    def _start_netns(self, vr: VR, argv: list[str], cg: CpuCgroup | None, detach: bool) -> None:
        """Start ``vr`` as the forwarder ``argv`` in namespace ``vr.name`` (in a new cgroup if ``cg``)."""
        from pyroute2 import IPRoute

        vr.vifs = self._free_vifs()
        self._create_netns(vr.name)
        with IPRoute() as ipr:
            for i, (vif, br) in enumerate(zip(vr.vifs, vr.bridges)):
                self._veth_into_ns(ipr, vif, f"eth{i}", vr.name, master=br)
        procs: list[Path] | None = None
        if cg is not None:
            d = create_cgroup(cg, vr.name)
            vr.cgroup = str(d)
            twin = cg.acct_path(vr.name)
            procs = [d / "cgroup.procs"] + ([twin / "cgroup.procs"] if twin is not None else [])
        vr.process = self.spawn_in(vr.name, argv, cgroup_procs=procs, start_new_session=detach)
        self._wait_links(vr.vifs)

    def _add_segments(self, kind: str) -> VR:
        """Bridges and generator/receiver namespaces of the next VR (no VR yet)."""
        from pyroute2 import IPRoute

        k = len(self.vrs) + 1
        tg_addr, tr_addr = vr_addresses(k)
        if not self.vrs and not self.chains:
            self._register_owner()
        p = self.prefix
        vr = VR(k=k, name=f"{p}-vr{k}", kind=kind, tg_ns=f"{p}-tg{k}", tr_ns=f"{p}-tr{k}",
                bridges=(f"{p}-a{k}", f"{p}-b{k}"), vifs=("", ""), tg_addr=tg_addr, tr_addr=tr_addr)
        self.vrs.append(vr)  # tracked before anything exists, so teardown covers a half-built VR
        with IPRoute() as ipr:
            for br in vr.bridges:
                self._nl(f"create bridge {br}", ipr.link, "add", ifname=br, kind="bridge")
                self._nl(f"bring up {br}", ipr.link, "set", index=self._index(ipr, br), state="up")
            macs = []
            for ns, host_end, br, addr in ((vr.tg_ns, f"{p}-g{k}", vr.bridges[0], tg_addr),
                                           (vr.tr_ns, f"{p}-r{k}", vr.bridges[1], tr_addr)):
                self._create_netns(ns)
                self._veth_into_ns(ipr, host_end, "eth0", ns, master=br)
                macs.append(self._configure_ns_end(ns, addr))
        self._static_neigh(vr.tg_ns, tr_addr, macs[1])
        self._static_neigh(vr.tr_ns, tg_addr, macs[0])
        return vr

    def _register_owner(self) -> None:
        """Record this process as the lab's owner (for :func:`teardown_orphans`)."""
        import json

        pid = os.getpid()
        try:
            self._registry.mkdir(parents=True, exist_ok=True)
            (self._registry / self.prefix).write_text(
                json.dumps({"pid": pid, "start": process_start_time(pid), "uri": self.uri})
            )
        except OSError as e:
            raise LabError(f"cannot record the lab in {self._registry}: {e}") from e

    @staticmethod
    def _nl(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _netlink_error() as e:
            raise LabError(f"cannot {what}: {e}") from e

    def _index(self, ipr: Any, ifname: str) -> int:
        idx = ipr.link_lookup(ifname=ifname)
        if not idx:
            raise LabError(f"interface {ifname} not found")
        return int(idx[0])

    def _create_netns(self, ns: str) -> None:
        from pyroute2 import netns

        if ns in netns.listnetns():
            raise LabError(f"network namespace {ns} already exists")
        try:
            netns.create(ns)
        except OSError as e:
            raise LabError(f"cannot create network namespace {ns}: {e}") from e

    def _veth_into_ns(self, ipr: Any, host_end: str, ns_end: str, ns: str, master: str) -> None:
        self._nl(f"create veth {host_end}", ipr.link, "add", ifname=host_end, kind="veth",
                 peer={"ifname": ns_end, "net_ns_fd": ns})
        self._nl(f"attach {host_end} to {master}", ipr.link, "set", index=self._index(ipr, host_end),
                 master=self._index(ipr, master), state="up")

    def _configure_ns_end(self, ns: str, addr: str) -> str:
        """Address and bring up eth0 (and lo) in ``ns``; return eth0's MAC address."""
        from pyroute2 import NetNS

        with NetNS(ns) as nsr:
            idx = self._index(nsr, "eth0")
            self._nl(f"address eth0 in {ns}", nsr.addr, "add", index=idx, address=addr, prefixlen=24)
            self._nl(f"bring up eth0 in {ns}", nsr.link, "set", index=idx, state="up")
            self._nl(f"bring up lo in {ns}", nsr.link, "set", index=self._index(nsr, "lo"), state="up")
            return str(nsr.link("get", index=idx)[0].get("address"))

    def _static_neigh(self, ns: str, addr: str, mac: str) -> None:
        from pyroute2 import NetNS

        with NetNS(ns) as nsr:
            self._nl(f"add neighbour {addr} in {ns}", nsr.neigh, "replace", dst=addr, lladdr=mac,
                     ifindex=self._index(nsr, "eth0"), state="permanent")

    @staticmethod
    def _free_vifs(sys_class_net: Path = Path("/sys/class/net")) -> tuple[str, str]:
        """Xen-style names vif<N>.0 / vif<N>.1 with an N that no interface uses yet."""
        used = {m.group(1) for d in sys_class_net.iterdir() if (m := re.match(r"vif(\d+)\.", d.name))}
        for _ in range(1000):
            n = str(random.randint(100, 9999))
            if n not in used:
                return f"vif{n}.0", f"vif{n}.1"
        raise LabError("no free vif<N> number")

    @staticmethod
    def _wait_links(names: Sequence[str], timeout_s: float = 10.0) -> None:
        """Wait until the host-side vifs are up, i.e. the forwarder has brought its ends up."""

        def up(n: str) -> bool:
            try:
                return Path(f"/sys/class/net/{n}/operstate").read_text().strip() == "up"
            except OSError:
                return False

        deadline = time.monotonic() + timeout_s
        while not all(up(n) for n in names):
            if time.monotonic() > deadline:
                raise LabError(f"interfaces {list(names)} not up within {timeout_s} s (is the forwarder running?)")
            time.sleep(0.02)

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
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any


from xtc_lab.lab import qemu
from xtc_lab.lab.record import (DEFAULT_NAME, LAB_SCHEMA, LIBVIRT_MODES, MAX_LAB_VRS, LabRecordError, LabShape, check_name,
                                check_shape, record_chain, record_vrs, shape_difference, shape_of,
                                validate_record)
from xtc_lab.lab.status import (HostFacts, daemon_config_toml, format_lab,
                                health_checks, problems, status_json)
from xtc_lab.lab.netlab import (
    LAB_REGISTRY,
    NETNS_DIR,
    VR,
    Chain,
    LabError,
    NetLab,
    add_work_arguments,
    read_packet_counters,
)

LOCK_DIR = Path("/run/xtc/lab-locks")
DEFAULT_URI = "lxc:///"
QEMU_URI = qemu.QEMU_URI
EXIT_OK, EXIT_DAMAGED, EXIT_USAGE, EXIT_MISSING, EXIT_UNSUPPORTED = 0, 1, 2, 3, 4


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
    from xtc_lab.lab.cgroups import lab_cgroups

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
    from xtc_lab.lab.cgroups import cgroup_pids

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

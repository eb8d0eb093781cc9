"""The lab's input-side drop: a VR's excess dropped on the host's INPUT port, before the bridge (issue 48 item 3).

Early drop in the product puts a TBF on the VR's host-side interface (``ed0:``, after the bridge,
docs/design/early-drop.md).  To learn where the host's work on a capped VR's excess goes, the
lab can drop the same excess earlier, where the packets enter the host: on the generator-side
port ``<prefix>-g<k>`` (the host end of the generator's veth), an ``ingress`` qdisc whose u32
filter takes the packets addressed through the VR (``ip dst`` = its receiver) and redirects them
(``mirred``) to an IFB device ``<prefix>-i<k>`` carrying a TBF; what passes the TBF is re-injected
into the port's receive path and reaches the bridge, what does not is dropped before the bridge,
the vif and the VR.  This kernel has ingress, u32, mirred, IFB and TBF, not ``police``
(../shared/notes/host-lab.md).

Lab-only: the ``tc`` and ``ip`` programs do it (the product's limiter goes through netlink,
:mod:`xtc.host.tclimiter`).  The IFB is named ``<prefix>-...``, so the lab's teardown removes it
(and the ingress qdisc goes with the port).  The TBF has the product's shape
(:func:`xtc.daemon.limiter_policy.limit_bytes`: a 20 ms bucket, queue one bucket).

Units: bytes/s and bytes for the TBF, packets/s for rates.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xtc_lab.lab.cgroups import LabError

INGRESS_HANDLE = "ffff:"


@dataclass(frozen=True)
class InputDrop:
    """An input-side limiter: ``port`` (host-side input interface), ``ifb`` (the IFB carrying the TBF),
    ``dst_addr`` (what the u32 filter takes), the TBF's rate (bytes/s), bucket and queue (bytes)."""

    port: str
    ifb: str
    dst_addr: str
    rate_bytes_per_s: int
    burst_bytes: int
    limit_bytes: int

    def __post_init__(self) -> None:
        for name in ("rate_bytes_per_s", "burst_bytes", "limit_bytes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"input drop {name} must be a positive integer, got {v!r}")
        if self.limit_bytes < self.burst_bytes:
            raise ValueError(f"input drop limit_bytes {self.limit_bytes} is smaller than its bucket "
                             f"({self.burst_bytes} bytes): the TBF would cut below its rate")
        for name in ("port", "ifb"):
            v = getattr(self, name)
            if not v or len(v) > 15 or "/" in v or " " in v:
                raise ValueError(f"input drop {name} {v!r} is not an interface name")


    def install(self) -> None:
        """Put it in place (:func:`install`)."""
        install(self)

    def remove(self, missing_ok: bool = False) -> None:
        """Take it away (:func:`remove`)."""
        remove(self, missing_ok=missing_ok)

    def dropped_packets(self) -> int:
        """Packets its TBF dropped so far (0 when it is not there)."""
        rows = qdisc_rows(self.ifb)
        return drops_of(rows, "tbf") if rows else 0


def install_commands(d: InputDrop) -> list[list[str]]:
    """The commands that put ``d`` in place, in order (the IFB and its TBF first, the redirect last)."""
    return [
        ["ip", "link", "add", d.ifb, "type", "ifb"],
        ["ip", "link", "set", d.ifb, "up"],
        ["tc", "qdisc", "add", "dev", d.ifb, "root", "handle", "1:", "tbf", "rate", f"{d.rate_bytes_per_s}bps",
         "burst", str(d.burst_bytes), "limit", str(d.limit_bytes)],
        ["tc", "qdisc", "add", "dev", d.port, "handle", INGRESS_HANDLE, "ingress"],
        ["tc", "filter", "add", "dev", d.port, "parent", INGRESS_HANDLE, "protocol", "ip", "prio", "1", "u32",
         "match", "ip", "dst", f"{d.dst_addr}/32", "action", "mirred", "egress", "redirect", "dev", d.ifb],
    ]


def remove_commands(d: InputDrop) -> list[list[str]]:
    """The commands that take ``d`` away (the redirect first): the port is left with no ingress qdisc."""
    return [["tc", "qdisc", "del", "dev", d.port, "handle", INGRESS_HANDLE, "ingress"],
            ["ip", "link", "del", d.ifb]]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"cannot run {' '.join(argv)}: {e}") from e


def install(d: InputDrop) -> None:
    """Put ``d`` in place; on a failure take back what was done and raise a :class:`LabError` naming the step."""
    for argv in install_commands(d):
        r = _run(argv)
        if r.returncode != 0:
            remove(d, missing_ok=True)
            raise LabError(f"input drop on {d.port}: `{' '.join(argv)}` failed: {r.stderr.strip()}")


def remove(d: InputDrop, missing_ok: bool = False) -> None:
    """Take ``d`` away (every step tried); a failure other than "already gone" is a :class:`LabError`."""
    errors = []
    for argv in remove_commands(d):
        r = _run(argv)
        if r.returncode != 0 and not missing_ok:
            errors.append(f"`{' '.join(argv)}`: {r.stderr.strip()}")
    if errors:
        raise LabError(f"input drop on {d.port}: " + "; ".join(errors))


def parse_qdiscs(text: str) -> list[dict[str, Any]]:
    """The qdiscs of ``tc [-s] -j qdisc show dev X`` output (a clear :class:`ValueError` if it is not that)."""
    try:
        rows = json.loads(text) if text.strip() else []
    except json.JSONDecodeError as e:
        raise ValueError(f"tc qdisc JSON: {e}") from e
    if not isinstance(rows, list) or not all(isinstance(q, dict) for q in rows):
        raise ValueError("tc qdisc JSON: want a list of qdiscs")
    return rows


def _match(q: Mapping[str, Any], kind: str | None, handle: str | None) -> bool:
    return (kind is None or q.get("kind") == kind) and (handle is None or q.get("handle") == handle)


def drops_of(rows: Sequence[Mapping[str, Any]], kind: str | None = None, handle: str | None = None) -> int:
    """Dropped packets summed over the qdiscs ``rows`` (only ``kind`` / ``handle`` if given)."""
    return sum(int(q.get("drops", 0)) for q in rows if _match(q, kind, handle))


def has_of(rows: Sequence[Mapping[str, Any]], kind: str, handle: str) -> bool:
    """Whether ``rows`` hold a ``kind`` qdisc with ``handle`` (e.g. early drop's ``tbf`` ``ed0:``)."""
    return any(_match(q, kind, handle) for q in rows)


def qdisc_rows(dev: str) -> list[dict[str, Any]] | None:
    """``dev``'s qdiscs with their statistics (``tc -s -j``); None if ``dev`` is not there."""
    r = _run(["tc", "-s", "-j", "qdisc", "show", "dev", dev])
    if r.returncode != 0:
        return None
    return parse_qdiscs(r.stdout)


#: The product's early-drop TBF on a VR's host-side interface (xtc.host.tclimiter.ROOT_HANDLE, major 0xed0).
ED_HANDLE = "ed0:"


def early_drop_drops(vifs: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Packets the product's early-drop limiters (the eBPF bucket's filter, read through its
    program's maps, or the ``tbf ed0:``) dropped so far, summed over each key's interfaces (0 for an
    interface without one)."""
    return {key: sum(drops_of(qdisc_rows(v) or [], "tbf", ED_HANDLE) + _bpf_drops(v) for v in ifs)
            for key, ifs in vifs.items()}


def _bpf_drops(vif: str) -> int:
    from xtc.host.bpflimiter import read_attached
    from xtc.host.limiter import LimiterError

    try:
        got = read_attached(vif)
    except LimiterError:
        return 0
    return 0 if got is None else int(got["dropped_packets"])


def drops_between(before: int, after: int) -> int:
    """Drops between two readings of a limiter's counter; a counter that went back (the limiter was
    removed and put on again meanwhile: a new qdisc counts from 0) gives what the new one counted,
    a lower bound."""
    return after - before if after >= before else after


def host_cpu_ticks(stat: str = "/proc/stat") -> dict[str, int]:
    """The host's aggregate CPU ticks by field (``user`` .. ``steal``) from ``/proc/stat``."""
    from pathlib import Path

    f = Path(stat).read_text().splitlines()[0].split()
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    if f[0] != "cpu" or len(f) < 1 + len(names):
        raise ValueError(f"{stat}: the first line is not the aggregate cpu line")
    return dict(zip(names, (int(x) for x in f[1:])))


def host_cpu_percent(a: Mapping[str, int], b: Mapping[str, int], n_cpus: int) -> dict[str, float]:
    """CPU use between two :func:`host_cpu_ticks` readings, percent of one CPU per field (``100 * n_cpus`` in all)."""
    d = {k: b[k] - a[k] for k in b}
    total = sum(d.values())
    return {k: (100.0 * n_cpus * v / total if total > 0 else float("nan")) for k, v in d.items()}

"""The XCo topology: schema ``xco-topology/1``, validated, with the spanning tree and the paths.

The file is TOML::

    schema = "xco-topology/1"

    [[switch]]
    name = "tor1"

    [[host]]
    name = "h1"
    nic_bps = 1_000_000_000      # the host's NIC, bits/s
    switch = "tor1"              # the switch the host hangs from
    vms = ["10.0.0.1"]           # addresses of the VMs behind the host (optional)
    port_bps = 1_000_000_000     # speed of the host's cable, bits/s per direction (default nic_bps)

    [[link]]                     # a cable between two switches
    ends = ["tor1", "core"]
    bps = 10_000_000_000         # per direction
    buffer_bytes = 1_048_576     # optional

    [spanning_tree]              # optional
    root = "core"                # root of the computed tree (default: the first switch)
    links = [["tor1", "core"]]   # or the tree itself (then no tree is computed)

Unknown keys are refused and every error names the key (``host[2].nic_bps: ...``).

Directed links have integer ids: host ``i`` owns ``2*i`` (host to its switch) and ``2*i + 1``
(switch to host); the switch-to-switch links of the spanning tree follow, two ids each (child to
parent, then parent to child).  Links that are not in the tree carry no traffic and get no id.
The path from host ``s`` to host ``d`` is the array of the directed link ids it crosses, in order,
``P_sd`` in the paper.  Paths are derived from each switch's chain to the root (computed at load
time), built on first use and cached; :meth:`Topology.path` returns them.

A host whose NIC is faster than a link on one of its paths can never be given a timeslice towards
the destinations behind that link (the feasibility condition would not hold even on an idle
network); such hosts are named at load time in :attr:`Topology.slow_paths`.
"""

from __future__ import annotations

import ipaddress
import tomllib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = [
    "SCHEMA",
    "TopologyError",
    "Topology",
    "load_topology",
    "parse_topology",
    "build_topology",
]

SCHEMA = "xco-topology/1"

_Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]
_Bps = Annotated[int, Field(gt=0, strict=True)]


class TopologyError(ValueError):
    """A topology file or table that cannot be used; the message names the offending key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SwitchSpec(_Strict):
    name: _Name


class HostSpec(_Strict):
    name: _Name
    nic_bps: _Bps
    switch: _Name
    vms: tuple[str, ...] = ()
    port_bps: _Bps | None = None

    @field_validator("vms", mode="before")
    @classmethod
    def _list_to_tuple(cls, v: Any) -> Any:
        return tuple(v) if isinstance(v, list) else v

    @field_validator("vms")
    @classmethod
    def _addresses(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for i, a in enumerate(v):
            try:
                ipaddress.ip_address(a)
            except ValueError:
                raise ValueError(f"vms[{i}]: {a!r} is not an IP address") from None
        return v


class LinkSpec(_Strict):
    ends: tuple[_Name, _Name]
    bps: _Bps
    buffer_bytes: Annotated[int, Field(ge=0, strict=True)] | None = None

    @field_validator("ends", mode="before")
    @classmethod
    def _list_to_tuple(cls, v: Any) -> Any:
        return tuple(v) if isinstance(v, list) else v


class TreeSpec(_Strict):
    root: _Name | None = None
    links: tuple[tuple[_Name, _Name], ...] | None = None

    @field_validator("links", mode="before")
    @classmethod
    def _lists_to_tuples(cls, v: Any) -> Any:
        if isinstance(v, list):
            return tuple(tuple(x) if isinstance(x, list) else x for x in v)
        return v


class TopologySpec(_Strict):
    schema_: Annotated[str, Field(alias="schema")]
    switch: tuple[SwitchSpec, ...] = Field(min_length=1)
    host: tuple[HostSpec, ...] = Field(min_length=2)
    link: tuple[LinkSpec, ...] = ()
    spanning_tree: TreeSpec | None = None

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: str) -> str:
        if v != SCHEMA:
            raise ValueError(f"must be {SCHEMA!r}, got {v!r}")
        return v

    @field_validator("switch", "host", "link", mode="before")
    @classmethod
    def _list_to_tuple(cls, v: Any) -> Any:
        return tuple(v) if isinstance(v, list) else v


def _loc(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            part = "schema" if part == "schema_" else str(part)
            out += ("." if out else "") + part
    return out or "(top level)"


def _format_validation(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        loc = _loc(err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"{loc}: unknown key")
        elif err["type"] == "missing":
            lines.append(f"{loc}: required key is missing")
        else:
            lines.append(f"{loc}: {err['msg']}")
    return "; ".join(lines)


@dataclass(frozen=True)
class SlowPath:
    """A host whose NIC is faster than a link on one of its paths.

    Attributes
    ----------
    host : str
        The sender.
    nic_bps : int
        Its NIC rate, bits/s.
    link : str
        The slower directed link, ``"a>b"``.
    link_bps : int
        That link's capacity, bits/s.
    dests : tuple of str
        The destinations whose path crosses that link (the host can never get a timeslice to them).
    """

    host: str
    nic_bps: int
    link: str
    link_bps: int
    dests: tuple[str, ...]

    def __str__(self) -> str:
        shown = ", ".join(self.dests[:5]) + (f", ... ({len(self.dests)} in all)" if len(self.dests) > 5 else "")
        return (f"host {self.host} (NIC {self.nic_bps} b/s) is faster than link {self.link} "
                f"({self.link_bps} b/s) on its paths to {shown}")


@dataclass
class Topology:
    """A loaded topology: hosts, directed links with capacities, spanning tree and paths.

    Attributes
    ----------
    hosts : tuple of str
        Host names; a host's index in this tuple is its id everywhere in XCo.
    nic_bps : numpy.ndarray of int64
        NIC rate of each host, bits/s (``C_x`` in the paper).
    link_names : tuple of str
        Name of each directed link id, ``"a>b"``.
    link_bps : numpy.ndarray of int64
        Capacity of each directed link, bits/s (``C_ij``).
    link_buffer_bytes : tuple of (int or None)
        Buffer of each directed link's output port, bytes, when the file gives it.
    tree_links : tuple of (str, str)
        The switch-to-switch cables of the spanning tree, as (child, parent).
    root : str
        Root switch of the spanning tree.
    host_switch : tuple of str
        The switch each host hangs from.
    vms : dict
        VM address -> host name.
    slow_paths : tuple of SlowPath
        Hosts whose NIC is faster than a link on one of their paths.
    """

    hosts: tuple[str, ...]
    nic_bps: np.ndarray
    link_names: tuple[str, ...]
    link_bps: np.ndarray
    link_buffer_bytes: tuple[int | None, ...]
    tree_links: tuple[tuple[str, str], ...]
    root: str
    host_switch: tuple[str, ...]
    vms: dict[str, str]
    slow_paths: tuple[SlowPath, ...] = ()
    # switch index data
    _sw_index: dict[str, int] = field(default_factory=dict, repr=False)
    _sw_parent: list[int] = field(default_factory=list, repr=False)
    _sw_depth: list[int] = field(default_factory=list, repr=False)
    _sw_up: list[int] = field(default_factory=list, repr=False)
    _sw_down: list[int] = field(default_factory=list, repr=False)
    _host_sw: list[int] = field(default_factory=list, repr=False)
    _host_index: dict[str, int] = field(default_factory=dict, repr=False)
    _cache: dict[tuple[int, int], np.ndarray] = field(default_factory=dict, repr=False)
    _sw_cache: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict, repr=False)

    @property
    def n_hosts(self) -> int:
        return len(self.hosts)

    @property
    def n_links(self) -> int:
        """Number of directed link ids."""
        return len(self.link_names)

    def host_id(self, name: str) -> int:
        """Index of host ``name``; :class:`KeyError` if there is no such host."""
        return self._host_index[name]

    def has_host(self, name: str) -> bool:
        return name in self._host_index

    def _switch_path(self, a: int, b: int) -> tuple[int, ...]:
        """Directed link ids from switch ``a`` to switch ``b`` along the tree."""
        key = (a, b)
        hit = self._sw_cache.get(key)
        if hit is not None:
            return hit
        up: list[int] = []
        down: list[int] = []
        depth, parent = self._sw_depth, self._sw_parent
        while depth[a] > depth[b]:
            up.append(self._sw_up[a])
            a = parent[a]
        while depth[b] > depth[a]:
            down.append(self._sw_down[b])
            b = parent[b]
        while a != b:
            up.append(self._sw_up[a])
            a = parent[a]
            down.append(self._sw_down[b])
            b = parent[b]
        out = tuple(up + down[::-1])
        if len(self._sw_cache) < 1_000_000:
            self._sw_cache[key] = out
        return out

    def path(self, s: int, d: int) -> np.ndarray:
        """The path ``P_sd`` from host ``s`` to host ``d``.

        Parameters
        ----------
        s, d : int
            Host ids (indices into :attr:`hosts`), ``s != d``.

        Returns
        -------
        numpy.ndarray of int32
            Directed link ids in the order the traffic crosses them (read-only, cached).
        """
        key = (s, d)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if s == d:
            raise ValueError(f"no path from host {self.hosts[s]} to itself")
        mid = self._switch_path(self._host_sw[s], self._host_sw[d])
        arr = np.array((2 * s, *mid, 2 * d + 1), dtype=np.int32)
        arr.flags.writeable = False
        self._cache[key] = arr
        return arr

    def path_tuple(self, s: int, d: int) -> tuple[int, ...]:
        """The path ``P_sd`` as a tuple of directed link ids (not cached per pair; no numpy)."""
        if s == d:
            raise ValueError(f"no path from host {self.hosts[s]} to itself")
        return (2 * s, *self._switch_path(self._host_sw[s], self._host_sw[d]), 2 * d + 1)

    def path_names(self, src: str, dst: str) -> list[str]:
        """The path between two hosts given by name, as link names (for people and tests)."""
        return [self.link_names[i] for i in self.path(self.host_id(src), self.host_id(dst))]

    def summary(self) -> dict[str, Any]:
        """A JSON-able summary (what ``xtc xco check-config`` prints)."""
        return {
            "schema": SCHEMA,
            "hosts": self.n_hosts,
            "switches": len(self._sw_index),
            "directed_links": self.n_links,
            "root": self.root,
            "tree_links": [list(x) for x in self.tree_links],
            "slow_paths": [str(s) for s in self.slow_paths],
        }


def _spanning_tree(spec: TopologySpec, sw_index: Mapping[str, int]) -> tuple[str, dict[int, tuple[int, int]]]:
    """Return the root and, per non-root switch index, (parent index, index of the cable in spec.link)."""
    n = len(sw_index)
    names = [s.name for s in spec.switch]
    cables: dict[frozenset[str], int] = {}
    adj: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for k, ln in enumerate(spec.link):
        a, b = ln.ends
        for end_i, end in enumerate((a, b)):
            if end not in sw_index:
                raise TopologyError(f"link[{k}].ends[{end_i}]: unknown switch {end!r}")
        if a == b:
            raise TopologyError(f"link[{k}].ends: a link joins two different switches, got {a!r} twice")
        key = frozenset((a, b))
        if key in cables:
            raise TopologyError(f"link[{k}].ends: switches {a!r} and {b!r} are already joined by link[{cables[key]}]")
        cables[key] = k
        adj[sw_index[a]].append((sw_index[b], k))
        adj[sw_index[b]].append((sw_index[a], k))

    tree = spec.spanning_tree or TreeSpec()
    root = tree.root if tree.root is not None else names[0]
    if root not in sw_index:
        raise TopologyError(f"spanning_tree.root: unknown switch {root!r}")

    if tree.links is not None:
        allowed: set[int] = set()
        for k, (a, b) in enumerate(tree.links):
            key = frozenset((a, b))
            if key not in cables:
                raise TopologyError(f"spanning_tree.links[{k}]: no [[link]] joins {a!r} and {b!r}")
            allowed.add(cables[key])
        if len(allowed) != n - 1:
            raise TopologyError(f"spanning_tree.links: a spanning tree of {n} switches has {n - 1} links, got {len(allowed)}")
        adj = [[(j, k) for j, k in nb if k in allowed] for nb in adj]

    # Breadth-first from the root (fewest hops; ties go to the link declared first).
    parent: dict[int, tuple[int, int]] = {}
    seen = [False] * n
    r = sw_index[root]
    seen[r] = True
    q = deque([r])
    while q:
        i = q.popleft()
        for j, k in sorted(adj[i], key=lambda jk: jk[1]):
            if not seen[j]:
                seen[j] = True
                parent[j] = (i, k)
                q.append(j)
    missing = [names[i] for i in range(n) if not seen[i]]
    if missing:
        where = "spanning_tree.links" if tree.links is not None else "link"
        raise TopologyError(f"{where}: switches not connected to {root!r}: {', '.join(missing[:10])}")
    return root, parent


def build_topology(spec: TopologySpec) -> Topology:
    """Check the cross references of a parsed spec and build the :class:`Topology`."""
    sw_index: dict[str, int] = {}
    for k, s in enumerate(spec.switch):
        if s.name in sw_index:
            raise TopologyError(f"switch[{k}].name: duplicate switch {s.name!r}")
        sw_index[s.name] = k
    host_index: dict[str, int] = {}
    vms: dict[str, str] = {}
    for k, h in enumerate(spec.host):
        if h.name in host_index:
            raise TopologyError(f"host[{k}].name: duplicate host {h.name!r}")
        if h.name in sw_index:
            raise TopologyError(f"host[{k}].name: {h.name!r} is already a switch")
        if h.switch not in sw_index:
            raise TopologyError(f"host[{k}].switch: unknown switch {h.switch!r}")
        host_index[h.name] = k
        for j, a in enumerate(h.vms):
            a = str(ipaddress.ip_address(a))
            if a in vms:
                raise TopologyError(f"host[{k}].vms[{j}]: address {a} is already behind host {vms[a]!r}")
            vms[a] = h.name

    root, parent = _spanning_tree(spec, sw_index)
    n_sw = len(sw_index)
    sw_names = [s.name for s in spec.switch]

    names: list[str] = []
    caps: list[int] = []
    bufs: list[int | None] = []
    for h in spec.host:
        port = h.port_bps if h.port_bps is not None else h.nic_bps
        names += [f"{h.name}>{h.switch}", f"{h.switch}>{h.name}"]
        caps += [port, port]
        bufs += [None, None]

    sw_parent = [-1] * n_sw
    sw_up = [-1] * n_sw
    sw_down = [-1] * n_sw
    tree_links: list[tuple[str, str]] = []
    for child in sorted(parent):
        p, k = parent[child]
        ln = spec.link[k]
        sw_parent[child] = p
        sw_up[child] = len(names)
        sw_down[child] = len(names) + 1
        names += [f"{sw_names[child]}>{sw_names[p]}", f"{sw_names[p]}>{sw_names[child]}"]
        caps += [ln.bps, ln.bps]
        bufs += [ln.buffer_bytes, ln.buffer_bytes]
        tree_links.append((sw_names[child], sw_names[p]))

    depth = [-1] * n_sw
    for i in range(n_sw):
        chain = []
        j = i
        while depth[j] < 0 and sw_parent[j] >= 0:
            chain.append(j)
            j = sw_parent[j]
        if depth[j] < 0:
            depth[j] = 0
        for c in reversed(chain):
            depth[c] = depth[sw_parent[c]] + 1

    topo = Topology(
        hosts=tuple(h.name for h in spec.host),
        nic_bps=np.array([h.nic_bps for h in spec.host], dtype=np.int64),
        link_names=tuple(names),
        link_bps=np.array(caps, dtype=np.int64),
        link_buffer_bytes=tuple(bufs),
        tree_links=tuple(tree_links),
        root=root,
        host_switch=tuple(h.switch for h in spec.host),
        vms=vms,
        _sw_index=sw_index,
        _sw_parent=sw_parent,
        _sw_depth=depth,
        _sw_up=sw_up,
        _sw_down=sw_down,
        _host_sw=[sw_index[h.switch] for h in spec.host],
        _host_index=host_index,
    )
    topo.slow_paths = _find_slow_paths(topo)
    return topo


def _find_slow_paths(topo: Topology) -> tuple[SlowPath, ...]:
    """Hosts whose NIC is faster than some link on one of their paths (one entry per host and link).

    Works link by link (only links slower than some NIC are looked at), from the subtree of hosts
    below each tree cable, so it stays fast for tens of thousands of hosts.
    """
    caps = topo.link_bps
    nic = topo.nic_bps
    n = topo.n_hosts
    slow_links = np.flatnonzero(caps < nic.max())
    if slow_links.size == 0:
        return ()
    n_sw = len(topo._sw_index)
    # below[c]: boolean mask of the hosts in the subtree of switch c.
    children: list[list[int]] = [[] for _ in range(n_sw)]
    for c, p in enumerate(topo._sw_parent):
        if p >= 0:
            children[p].append(c)
    host_sw = np.array(topo._host_sw)
    down_of_link = {ln: c for c, ln in enumerate(topo._sw_down) if ln >= 0}
    up_of_link = {ln: c for c, ln in enumerate(topo._sw_up) if ln >= 0}

    def subtree_mask(c: int) -> np.ndarray:
        members = []
        stack = [c]
        while stack:
            i = stack.pop()
            members.append(i)
            stack.extend(children[i])
        return np.isin(host_sw, members)

    names = np.array(topo.hosts, dtype=object)
    found: dict[tuple[int, int], tuple[str, ...]] = {}
    everyone = np.ones(n, dtype=bool)
    for ln in slow_links.tolist():
        cap = caps[ln]
        if ln < 2 * n:
            h = ln // 2
            if ln % 2 == 0:  # the host's own cable up: every destination
                if nic[h] > cap:
                    others = everyone.copy()
                    others[h] = False
                    found[(h, ln)] = tuple(names[others])
            else:  # cable down to host h: every faster sender, destination h
                for s in np.flatnonzero(nic > cap).tolist():
                    if s != h:
                        found[(s, ln)] = (topo.hosts[h],)
            continue
        if ln in up_of_link:
            inside = subtree_mask(up_of_link[ln])
            senders, dests = inside, ~inside
        else:
            inside = subtree_mask(down_of_link[ln])
            senders, dests = ~inside, inside
        if not dests.any():
            continue
        dest_names = tuple(names[dests])
        for s in np.flatnonzero(senders & (nic > cap)).tolist():
            found[(s, ln)] = dest_names
    out = [SlowPath(topo.hosts[s], int(nic[s]), topo.link_names[ln], int(caps[ln]), dests)
           for (s, ln), dests in sorted(found.items())]
    return tuple(out)


def parse_topology(data: Mapping[str, Any]) -> Topology:
    """Validate a topology given as a mapping (the parsed TOML) and build it.

    Raises
    ------
    TopologyError
        With the offending key named, for example ``host[2].nic_bps: ...``.
    """
    try:
        spec = TopologySpec.model_validate(dict(data))
    except ValidationError as e:
        raise TopologyError(_format_validation(e)) from None
    return build_topology(spec)


def load_topology(path: str | Path) -> Topology:
    """Read and validate an ``xco-topology/1`` TOML file.

    Raises
    ------
    TopologyError
        If the file cannot be read, is not TOML, or does not validate; the message names the file
        and the offending key.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise TopologyError(f"{p}: cannot read: {e.strerror or e}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TopologyError(f"{p}: not valid TOML: {e}") from None
    try:
        return parse_topology(data)
    except TopologyError as e:
        raise TopologyError(f"{p}: {e}") from None

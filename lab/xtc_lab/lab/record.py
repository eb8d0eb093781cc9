"""The record of a host lab (``/run/xtc/labs/<name>.json``) and the shape it was built with: the
checks of ``xtc lab up``'s arguments, the record's schema (pydantic; a record that fails names the
field) and what a record says (its VRs, its chain, its namespaces).  Pure: :mod:`xtc_lab.lab.lifecycle`
reads and writes the files."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError, field_validator, model_validator

from xtc.validation import FieldProblem, Number, validation_problem, within

from xtc_lab.lab.netlab import MODES, VR, Chain, LabError, Probe, check_prefix, check_work_factor

LAB_SCHEMA = "xtc-lab/1"
MAX_LAB_VRS = 64  # each VR holds a forwarder and six interfaces; a typo must not flood the host
HOPS = (1, 3)
DEFAULT_NAME = "xtc-lab"
LIBVIRT_MODES = ("lxc", "qemu")  # modes whose VRs are libvirt domains


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

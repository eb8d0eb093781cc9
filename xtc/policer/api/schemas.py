"""The API's request and response models, and the types of its paths and queries.

The request models (``...In``, ``RouterPatch``, ``Sla``, the three policies) are strict: unknown keys,
and values of another JSON type, are refused (422).  The response models document what the routes
return (the OpenAPI document is made from them); the routes build those shapes themselves.
"""

from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    create_model,
    model_validator,
)

from ..link import VR_PATTERN
from ..policy import MAX_PPS, POLICIES, ActivationParams, PolicyError, param_ranges

__all__ = [
    "NAME_PATTERN", "MAX_PPS", "MAX_PAGE", "Text", "QueryInt", "Name", "Pps", "RouterPath", "NetworkPath", "VrPath",
    "Error", "RouterIn", "RouterPatch", "Router", "Vr", "VrNetworkIn", "SetpointIn", "NetworkIn", "Sla", "Network",
    "Setpoint", "ActivationPolicy", "AllocationPolicy", "MisbehaviourPolicy", "Policies", "Action", "ShardState",
    "Health", "E401", "E404", "E409",
]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"


def _utf8(s: str) -> str:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    return s


def _digits(v: object) -> object:
    """A query's integer written as digits only (not ``1.0``, ``1e3`` or ``true``)."""
    if isinstance(v, str) and not (v.isascii() and v.isdigit() and len(v) <= 19):
        raise ValueError("must be a whole number written in decimal digits")
    return v


Text = Annotated[str, AfterValidator(_utf8)]
#: Paging of the lists: at most ``limit`` items after skipping ``offset`` (in the list's order).
MAX_PAGE = 5000
QueryInt = Annotated[int, BeforeValidator(_digits)]
Name = Annotated[str, Field(pattern=NAME_PATTERN, description="1..64 letters, digits, '_', '.', ':', '-'")]
Pps = Annotated[float, Field(ge=1, le=MAX_PPS, allow_inf_nan=False, description="packets/s")]
RouterPath = Annotated[str, Path(pattern=NAME_PATTERN, description="router name")]
NetworkPath = Annotated[str, Path(pattern=NAME_PATTERN, description="network name")]
VrPath = Annotated[str, Path(pattern=VR_PATTERN, description="VR name as its daemon reports it")]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Error(BaseModel):
    detail: str


class RouterIn(_In):
    name: Name
    endpoint: Annotated[str, Field(pattern=r"^(tcp://[^\s/]+:[0-9]{1,5}|ipc://[^\s]+)$", max_length=256,
                                   description="the daemon's manager (REP) endpoint, tcp://host:port or ipc://path")]
    capacity_pps: Pps = Field(description="what the host's Dom0 can forward, packets/s (measured or from its model)")
    control_mode: Literal["auto", "on", "off"] = "auto"
    curve_server_key: Annotated[str | None, Field(pattern=r"^[0-9A-Za-z.:+=^!/*?&<>()\[\]{}@%$#-]{40}$",
                                                  description="the daemon's CURVE public key (Z85); enables CURVE")] = None
    pub_endpoint: Annotated[str | None, Field(
        pattern=r"^(tcp://[^\s/]+:[0-9]{1,5}|ipc://[^\s]+)$", max_length=256,
        description="the daemon's samples (PUB) endpoint, its manager.pub_endpoint; given, the engine takes the "
                    "measurements from the samples it publishes and sends 'list' only when they do not do")] = None


class RouterPatch(_In):
    endpoint: Annotated[str | None, Field(pattern=r"^(tcp://[^\s/]+:[0-9]{1,5}|ipc://[^\s]+)$", max_length=256)] = None
    capacity_pps: Pps | None = None
    control_mode: Literal["auto", "on", "off"] | None = None
    curve_server_key: Annotated[str | None, Field(pattern=r"^[0-9A-Za-z.:+=^!/*?&<>()\[\]{}@%$#-]{40}$")] = None
    pub_endpoint: Annotated[str | None, Field(pattern=r"^(tcp://[^\s/]+:[0-9]{1,5}|ipc://[^\s]+)$", max_length=256)] = None


MeasuredFrom = Literal["live", "snapshot"]
_MEASURED_FROM = ("where the values of {what} come from: 'live', the engine that measures the router now (at most about "
                  "half a second old); 'snapshot', the database's last snapshot of the measurements (written "
                  "every engine.snapshot_interval_s, and what is shown while no engine publishes its live values)")


class Router(BaseModel):
    name: str
    endpoint: str
    capacity_pps: float
    control_mode: str
    curve: bool = Field(description="the link to this router's daemon uses CURVE")
    pub_endpoint: str | None = Field(None, description="the daemon's samples (PUB) endpoint; null: measured by 'list'")
    status: Literal["unknown", "reachable", "unreachable", "removed"]
    last_seen_unix_s: float | None
    last_error: str | None
    control_on: bool = Field(description="XTC is on for this router's VRs")
    demand_pps: float | None = Field(description="aggregate demand at the last cycle, packets/s")
    created_unix_s: float
    measured_from: MeasuredFrom = Field(description=_MEASURED_FROM.format(what="last_seen_unix_s and demand_pps"))


class Vr(BaseModel):
    router: str
    name: str
    network: str | None
    present: bool
    state: str = Field(description="the daemon's instance state: inactive, active or paused")
    setpoint_pps: float | None = Field(description="the daemon's current setpoint")
    forwarded_pps: float | None
    offered_pps: float | None
    cap_percent: float | None
    saturated: Literal["cap_max", "cap_min", "cap_slack"] | None = Field(
        None, description="the daemon's flag: the setpoint is out of reach with the cap at its maximum "
        "(cap_max: the VR forwards all it can, below its setpoint), at its minimum (cap_min: above it), or "
        "with a cap the VR does not use up, below its setpoint (cap_slack: its traffic or its host is the "
        "limit); allocation counts such a VR at the rate it forwards")
    last_seen_unix_s: float | None
    manual_setpoint_pps: float | None
    derived_setpoint_pps: float | None
    wanted_state: str | None
    wanted_setpoint_pps: float | None
    punishment_level: int
    flagged: bool = Field(description="punished to the last level: an operator should look")
    measured_from: MeasuredFrom = Field(description=_MEASURED_FROM.format(
        what="forwarded_pps, offered_pps, cap_percent, saturated and last_seen_unix_s"))


class VrNetworkIn(_In):
    network: Name | None = Field(description="the network the VR belongs to (null: none)")


class SetpointIn(_In):
    setpoint_pps: Pps


class NetworkIn(_In):
    name: Name
    description: Annotated[Text, Field(max_length=500)] = ""


class Sla(_In):
    min_pps: Annotated[float, Field(ge=0, le=MAX_PPS, allow_inf_nan=False, description="guaranteed minimum, packets/s")] = 0.0
    max_pps: Annotated[float, Field(ge=1, le=MAX_PPS, allow_inf_nan=False, description="maximum, packets/s")] = MAX_PPS
    weight: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False, description="share weight")] = 1.0

    @model_validator(mode="after")
    def _order(self) -> "Sla":
        if self.min_pps > self.max_pps:
            raise ValueError(f"min_pps ({self.min_pps:g}) must not exceed max_pps ({self.max_pps:g})")
        return self


class Network(BaseModel):
    name: str
    description: str
    sla: Sla | None
    vr_off: bool = Field(False, description="the punishment ladder's last resort, turning a misbehaving VR off, is "
                                            "enabled for this network's VRs (off by default)")


class VrOffIn(_In):
    enabled: bool = Field(description="let the punishment ladder turn this network's misbehaving VRs off, after "
                                      "their pause (level 4; the VR's daemon must be able to: libvirt backend)")


class Setpoint(BaseModel):
    router: str
    vr: str
    setpoint_pps: float
    source: Literal["manual", "allocation"]
    effective_setpoint_pps: float | None = Field(description="after punishment; what the daemon is told")
    wanted_state: str | None
    punishment_level: int


def _policy_model(name: str, params: type) -> Any:
    """A policy's REST model, made from its one declaration (:data:`xtc.policer.policy.POLICIES`):
    its ``enabled`` switch and, for each parameter, its default and its range."""
    def bound(v: float) -> float | int:  # 0 and 2, not 0.0 and 2.0: the document as it always was
        return int(v) if float(v).is_integer() and abs(v) < 2**53 else v

    fields: dict[str, Any] = {"enabled": (bool, True)}
    for fname, r in param_ranges(params).items():
        default = r.pop("default")
        fields[fname] = (Annotated[float, Field(allow_inf_nan=False, **{k: bound(v) for k, v in r.items()})],
                         default)
    return create_model(name, __base__=_In, **fields)


class ActivationPolicy(_policy_model("ActivationPolicy", POLICIES["activation"])):  # type: ignore[misc]
    @model_validator(mode="after")
    def _check(self) -> "ActivationPolicy":
        try:
            ActivationParams(self.on_fraction, self.off_fraction, self.hold_s)
        except PolicyError as e:
            raise ValueError(str(e)) from None
        return self


AllocationPolicy = _policy_model("AllocationPolicy", POLICIES["allocation"])
MisbehaviourPolicy = _policy_model("MisbehaviourPolicy", POLICIES["misbehaviour"])


class Policies(BaseModel):
    activation: ActivationPolicy
    allocation: AllocationPolicy
    misbehaviour: MisbehaviourPolicy


class Action(BaseModel):
    id: int
    t_unix_s: float
    kind: str
    actor: str
    router: str | None
    vr: str | None
    detail: dict[str, Any]


class ShardState(BaseModel):
    shard: int = Field(description="the shard's number, 0..engine.shards-1 (routers by CRC-32 of their name)")
    leader: bool = Field(description="this process runs the shard's cycles")
    epoch: int | None = Field(None, description="the shard's leadership epoch (PostgreSQL), while this process leads it")
    cycles: int = Field(description="the shard's policy cycles run by this process")


class Health(BaseModel):
    """With ``protect_reads``, a caller without a valid token gets ``status`` only."""

    status: Literal["ok", "failed"]
    engine_running: bool | None = Field(
        None, description="the engine's thread is alive and has not failed; on a standby it runs but skips its "
        "cycles (see leader)")
    leader: bool | None = Field(
        None, description="this process runs the policy engine's cycles: on PostgreSQL it holds the leader lock "
        "(the other replicas are standbys that serve the API); on SQLite the one process always leads")
    leader_epoch: int | None = Field(
        None, description="the leadership epoch this process leads under (PostgreSQL; each hand-over adds 1, "
        "as in the audit log's leader_changed action); absent on a standby and on SQLite")
    engine_cycles: int | None = None
    routers: int | None = None
    unreachable: list[str] | None = None
    bad_replies: int | None = Field(None, description="daemon replies dropped as invalid since the start")
    sampled: int | None = Field(None, description="router measurements taken from the daemons' sample streams "
                                "since the start (no 'list' sent)")
    listed: int | None = Field(None, description="router measurements asked for with 'list' since the start")
    probed: int | None = Field(None, description="of those, routers sent 'list' between cycles because their "
                               "sample stream fell silent (a daemon that stopped is marked within 2 periods)")
    shed: int | None = Field(None, description="router measurements put off while the engine was behind (a fifth "
                             "of the streams or more late at once): the router waited for its next sample instead "
                             "of being sent 'list', since the start; rising: the engine needs more shards")
    bad_samples: int | None = Field(None, description="sample messages dropped as invalid since the start")
    measure_gap_ms: dict[str, float] | None = Field(
        None, description="per recent cycle, the longest time a router went between two of its measurements "
        "reaching the store, milliseconds (p50, p99, max over the cycles)")
    cycle_ms: dict[str, float] | None = Field(
        None, description="policy cycle time over the recent cycles, milliseconds (p50, p99, max): from a cycle's "
        "start until its last answering router is polled, planned and its commands answered (with engine.shards, "
        "the slowest shard this process leads, cycle by cycle)")
    shards: list[ShardState] | None = Field(
        None, description="with engine.shards > 1: each engine shard, whether this process runs it and under which "
        "epoch (leader is then true while it runs at least one)")


E401 = {401: {"model": Error, "description": "no bearer token, or not a valid one"}}
E404 = {404: {"model": Error, "description": "no such object"}}
E409 = {409: {"model": Error, "description": "conflicts with the current state"}}

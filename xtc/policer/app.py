"""The REST API (FastAPI): routers, VRs, virtual networks and their SLAs, setpoints, policies, actions.

:func:`create_app` builds the application around a :class:`~xtc.policer.store.Store` and, when serving,
an :class:`~xtc.policer.engine.Engine` that runs the policies in the background.  Every write needs a
bearer token (``Authorization: Bearer <token>``); reads need one only when the configuration says
``protect_reads``.  Bad requests are answered 4xx with a message: 401 (no or wrong token), 404 (no
such object), 409 (conflicts with the current state), 422 (the body, path or query is invalid; the
FastAPI validation format, a list of ``{loc, msg, type}``, which never repeats the input), 413
(the body is larger than :data:`MAX_BODY_BYTES`).  A body must be strict JSON: no duplicate keys,
no NaN or Infinity, no number that overflows.
"""


import functools
import hmac
import json
import threading
from contextlib import asynccontextmanager
from typing import Annotated, Any, AsyncIterator, Iterator, Literal

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from xtc.service.metrics import add_standard_metrics

from .config import PolicerConfig
from .engine import CYCLE_BUCKETS_S, percentiles
from .link import VR_PATTERN, strict_json
from .policy import ActivationParams, PolicyError
from .store import Conflict, NotFound, Store

__all__ = ["create_app", "API_DESCRIPTION", "MAX_BODY_BYTES"]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
MAX_PPS = 1e10
#: Largest request body accepted, bytes (the largest valid one is well under 2 KiB).
MAX_BODY_BYTES = 64 * 1024
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

API_DESCRIPTION = """
The XTC policing service: the global view over the hosts (physical routers) whose daemons hold each
virtual router (VR) at a packet-rate setpoint.  Rates are packets/s (pps).

**Resources.** *Routers* are hosts with an XTC daemon (its ZeroMQ manager endpoint, the host's
forwarding capacity in packets/s); a router that stops answering is marked `unreachable`, one that
is deleted is marked `removed`, never forgotten.  *VRs* appear as the daemons report them.  Each VR
belongs to at most one *virtual network*; a network's *SLA* gives its VRs a guaranteed minimum rate,
a maximum and a weight.  *Setpoints* are manual (set per VR) or derived by the allocation policy.
*Actions* is the audit log of everything the policer and its operators did.

**Policies** (each can be switched off and tuned under `/policies`; the policer evaluates them every
engine period for every reachable router):

* **activation**: XTC goes on for a host's VRs when the host's aggregate demand (sum over its VRs of
  max(offered, forwarded) packets/s) stays at or above `on_fraction` x capacity for `hold_s`
  seconds, and off again when it stays below `off_fraction` x capacity for `hold_s` (hysteresis).
  A router's `control_mode` overrides it: `on` or `off` force the state, `auto` follows the policy.
* **allocation**: `target_fraction` x capacity is split among the host's VRs by weighted max-min
  fairness: every VR first gets its SLA minimum, the rest is shared in proportion to the weights,
  no VR gets more than its SLA maximum or its demand (max(offered, forwarded) x `demand_headroom`,
  so that flows that back off can grow).  Manual setpoints and punished VRs are taken out first.
  A VR whose daemon reports its setpoint out of reach (`saturated`) is counted at the rate it
  forwards: at its largest cap (`cap_max`), or below its setpoint with a cap it does not use up
  (`cap_slack`: its traffic or its host is the limit), its share is no more than that, and the rest
  goes to the others; at its smallest cap (`cap_min`) it gets at least that, so that the others'
  shares fit.
  A VR keeps its derived setpoint while its new share stays within `hysteresis` (relative) of it.
  The resulting setpoints are pushed to the daemons while control is on.
* **misbehaviour**: a VR whose offered rate stays above `ratio` x its forwarded rate (and by more
  than `min_excess_pps`) for `hold_s` seconds, i.e. traffic that does not back off, is punished one
  level: levels 1 and 2 multiply its setpoint by `step_factor` each, level 3 pauses its XTC instance
  (its cap stays where it is) and flags the VR for an operator.  Each further `hold_s` of the same
  behaviour climbs a level.  After `restore_hold_s` seconds of good behaviour it is restored.  Every
  step is in the audit log.

**Security.** Every write needs `Authorization: Bearer <token>` (401 otherwise); reads are open
unless the service is configured with `protect_reads`.
"""


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


class Vr(BaseModel):
    router: str
    name: str
    network: str | None
    present: bool
    state: str = Field(description="the daemon's instance state: inactive, active or paused")
    setpoint_pps: float | None = Field(description="the daemon's current setpoint")
    measured_pps: float | None
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


class Setpoint(BaseModel):
    router: str
    vr: str
    setpoint_pps: float
    source: Literal["manual", "allocation"]
    effective_setpoint_pps: float | None = Field(description="after punishment; what the daemon is told")
    wanted_state: str | None
    punishment_level: int


class ActivationPolicy(_In):
    enabled: bool = True
    on_fraction: Annotated[float, Field(gt=0, le=2, allow_inf_nan=False)] = 0.9
    off_fraction: Annotated[float, Field(gt=0, le=2, allow_inf_nan=False)] = 0.7
    hold_s: Annotated[float, Field(ge=0, le=86400, allow_inf_nan=False)] = 2.0

    @model_validator(mode="after")
    def _check(self) -> "ActivationPolicy":
        try:
            ActivationParams(self.on_fraction, self.off_fraction, self.hold_s)
        except PolicyError as e:
            raise ValueError(str(e)) from None
        return self


class AllocationPolicy(_In):
    enabled: bool = True
    target_fraction: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.9
    min_setpoint_pps: Annotated[float, Field(ge=1, le=MAX_PPS, allow_inf_nan=False)] = 1000.0
    demand_headroom: Annotated[float, Field(ge=1, le=10, allow_inf_nan=False)] = 1.2
    hysteresis: Annotated[float, Field(ge=0, le=0.5, allow_inf_nan=False)] = 0.1


class MisbehaviourPolicy(_In):
    enabled: bool = True
    ratio: Annotated[float, Field(gt=1, le=1000, allow_inf_nan=False)] = 1.5
    min_excess_pps: Annotated[float, Field(ge=0, le=MAX_PPS, allow_inf_nan=False)] = 5000.0
    hold_s: Annotated[float, Field(ge=0, le=86400, allow_inf_nan=False)] = 3.0
    restore_hold_s: Annotated[float, Field(ge=0, le=86400, allow_inf_nan=False)] = 5.0
    step_factor: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.5


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




def _json(items: list[dict[str, Any]] | dict[str, Any]) -> Response:
    """A list (or one object) already in its response model's shape, serialised at once (the route's
    response model documents it; validating and serialising thousands of items through it costs more
    than the query)."""
    return Response(json.dumps(items, ensure_ascii=False, allow_nan=False, separators=(",", ":")),
                    media_type="application/json")


def _router_out(r: dict[str, Any]) -> dict[str, Any]:
    out = dict(r)
    out["curve"] = out.pop("curve_server_key") is not None
    return out


_E401 = {401: {"model": Error, "description": "no bearer token, or not a valid one"}}
_E404 = {404: {"model": Error, "description": "no such object"}}
_E409 = {409: {"model": Error, "description": "conflicts with the current state"}}


class _AuthFirst:
    """ASGI middleware: a write (POST, PUT, PATCH, DELETE) without a valid bearer token gets 401 at once."""

    def __init__(self, app: Any, check: Any):
        self.app = app
        self.check = check

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] in WRITE_METHODS:
            cred = None
            for k, v in scope["headers"]:
                if k == b"authorization":
                    scheme, _, tok = v.decode("latin-1").partition(" ")
                    cred = HTTPAuthorizationCredentials(scheme=scheme, credentials=tok.strip())
                    break
            try:
                self.check(cred)
            except HTTPException as e:
                await JSONResponse({"detail": e.detail}, status_code=401, headers=e.headers)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _BodyTooLarge(HTTPException):
    def __init__(self) -> None:
        super().__init__(413, f"the request body exceeds {MAX_BODY_BYTES} bytes")


class _BodyLimit:
    """ASGI middleware: a body announced or streamed beyond ``max_bytes`` gets 413; no more of it is read."""

    def __init__(self, app: Any, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = False
        for k, v in scope["headers"]:
            if k == b"content-length":
                if not v.isdigit() or len(v) > 18 or int(v) > self.max_bytes:
                    await self._refuse(scope, receive, send)
                    return
                body = body or int(v) > 0
            elif k == b"transfer-encoding":
                body = True
        if not body:  # no body to count (most reads): nothing to wrap
            await self.app(scope, receive, send)
            return
        received = 0
        started = False
        too_large = False

        async def limited_receive() -> Any:
            nonlocal received, too_large
            msg = await receive()
            if msg["type"] == "http.request":
                received += len(msg.get("body", b""))
                if received > self.max_bytes:
                    too_large = True
                    raise _BodyTooLarge()
            return msg

        async def watched_send(msg: Any) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
                if too_large:  # the rest of the body is not read: the connection is closed after the 413
                    msg = {**msg, "headers": [*msg.get("headers", []), (b"connection", b"close")]}
            await send(msg)

        try:
            await self.app(scope, limited_receive, watched_send)
        except _BodyTooLarge:
            if started:
                raise
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Any, receive: Any, send: Any) -> None:
        e = _BodyTooLarge()
        await JSONResponse({"detail": e.detail}, status_code=413, headers={"Connection": "close"})(scope, receive, send)


class _StrictJsonRequest(Request):
    """A request whose JSON body is parsed strictly (:func:`xtc.policer.link.strict_json`)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = strict_json(await self.body())
            except (ValueError, UnicodeDecodeError) as e:
                raise json.JSONDecodeError(str(e)[:200], "", 0) from None
        return self._json


class _StrictJsonRoute(APIRoute):
    def get_route_handler(self) -> Any:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Any:
            return await handler(_StrictJsonRequest(request.scope, request.receive))

        return strict_handler


def _problems(e: RequestValidationError) -> list[dict[str, Any]]:
    """The validation errors without their ``input`` (a body is never echoed), loc and msg bounded."""
    out = []
    for err in e.errors()[:20]:
        msg = str(err.get("msg", ""))
        if err.get("type") == "json_invalid" and isinstance(err.get("ctx"), dict):
            msg = f"{msg}: {err['ctx'].get('error')}"
        loc = [p if isinstance(p, int) else str(p)[:64] for p in err.get("loc", ())]
        out.append({"loc": loc, "msg": msg[:300], "type": str(err.get("type"))})
    return out


#: Where the API pages' scripts, styles and icon are served from (files of the ``fastapi-offline`` package).
DOCS_ASSETS_PATH = "/docs-assets"

#: The API pages' Content-Security-Policy: everything from this server (inline scripts and styles, as
#: Swagger UI's page and ReDoc's styles need; ReDoc's search worker from a blob).
DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'")


def _offline_docs(app: FastAPI) -> None:
    """Serve ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) with every asset from this server, none from a CDN.

    The assets are the static files of the ``fastapi-offline`` package (Swagger UI, Apache-2.0; ReDoc,
    MIT), a dependency of the policer extra; only its files are used.  ReDoc's Google fonts are left out.
    """
    from importlib.resources import files

    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles

    def local_only(page: HTMLResponse) -> HTMLResponse:
        # The browser fetches nothing from elsewhere, even what the assets themselves would (ReDoc's logo
        # from cdn.redoc.ly: the image is then hidden).
        page.headers["Content-Security-Policy"] = DOCS_CSP
        return page

    static = files("fastapi_offline") / "static"
    app.mount(DOCS_ASSETS_PATH, StaticFiles(directory=str(static)), name="docs-assets")
    a = DOCS_ASSETS_PATH

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return local_only(get_swagger_ui_html(openapi_url="/openapi.json", title="XTC policer - Swagger UI",
                                   swagger_js_url=f"{a}/swagger-ui-bundle.js", swagger_css_url=f"{a}/swagger-ui.css",
                                   swagger_favicon_url=f"{a}/favicon.png"))

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return local_only(get_redoc_html(openapi_url="/openapi.json", title="XTC policer - ReDoc",
                              redoc_js_url=f"{a}/redoc.standalone.js", redoc_favicon_url=f"{a}/favicon.png",
                              with_google_fonts=False))


class PolicerCollector:
    """The policer's Prometheus metrics, read from the store and the engine at each scrape.

    Gauges: ``xtc_policer_routers{status}``, per router ``xtc_policer_router_unreachable``,
    ``xtc_policer_router_control_on`` (XTC on for its VRs) and ``xtc_policer_router_demand_pps``;
    ``xtc_policer_vr_punishment_level{router,vr}`` (punished VRs only); ``xtc_policer_leader``;
    ``xtc_policer_cycle_seconds`` (a histogram of the policy cycles).  Counters:
    ``xtc_policer_punishments_total{level}`` (from the audit log), ``xtc_policer_engine_cycles_total``,
    ``xtc_policer_bad_replies_total``.
    """

    def __init__(self, store: Store, engine: Any):
        self.store, self.engine = store, engine
        self._lock = threading.Lock()
        self._punish_after_id = 0
        self._punishments: dict[str, int] = {"1": 0, "2": 0, "3": 0}

    def _count_punishments(self) -> dict[str, int]:
        with self._lock:  # the audit log is read on from where the last scrape stopped
            while True:
                page = self.store.list_actions(kind="punish", after_id=self._punish_after_id, limit=1000)
                for a in page:
                    level = str(a["detail"].get("level"))
                    self._punishments[level] = self._punishments.get(level, 0) + 1
                    self._punish_after_id = a["id"]
                if len(page) < 1000:
                    return dict(self._punishments)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        routers = self.store.list_routers(include_removed=False)
        by_status = GaugeMetricFamily("xtc_policer_routers", "Routers by status (removed ones left out)",
                                      labels=["status"])
        for st in ("unknown", "reachable", "unreachable"):
            by_status.add_metric([st], sum(r["status"] == st for r in routers))
        unreachable = GaugeMetricFamily("xtc_policer_router_unreachable", "1 while the router's daemon does not "
                                        "answer", labels=["router"])
        control = GaugeMetricFamily("xtc_policer_router_control_on", "1 while XTC is on for the router's VRs "
                                    "(activation policy or control_mode)", labels=["router"])
        demand = GaugeMetricFamily("xtc_policer_router_demand_pps", "Router's aggregate demand at the last cycle, "
                                   "packets/s", labels=["router"])
        for r in routers:
            unreachable.add_metric([r["name"]], float(r["status"] == "unreachable"))
            control.add_metric([r["name"]], float(bool(r["control_on"])))
            if r["demand_pps"] is not None:
                demand.add_metric([r["name"]], float(r["demand_pps"]))
        yield from (by_status, unreachable, control, demand)
        level = GaugeMetricFamily("xtc_policer_vr_punishment_level", "Punishment level of a punished VR (1, 2: "
                                  "setpoint reduced; 3: paused and flagged)", labels=["router", "vr"])
        # Only the punished VRs (a handful), not the fleet's tens of thousands.
        for router, vr, lv in self.store.punished_vrs():
            level.add_metric([router, vr], float(lv))
        yield level
        pun = CounterMetricFamily("xtc_policer_punishments", "Punishment steps taken (audit log), by level reached",
                                  labels=["level"])
        for lv, n in sorted(self._count_punishments().items()):
            pun.add_metric([lv], n)
        yield pun
        e = self.engine
        leads = e is not None and e.error is None and (e.is_leader is None or bool(e.is_leader()))
        yield GaugeMetricFamily("xtc_policer_leader", "1 while this process runs the policy engine", value=float(leads))
        yield CounterMetricFamily("xtc_policer_engine_cycles", "Policy cycles run by this process",
                                  value=e.cycles if e is not None else 0)
        yield CounterMetricFamily("xtc_policer_bad_replies", "Daemon replies dropped as invalid",
                                  value=sum(e.bad_replies.values()) if e is not None else 0)
        h = getattr(e, "cycle_hist", None) or {"counts": [], "sum": 0.0}
        counts = h["counts"] or [0] * (len(CYCLE_BUCKETS_S) + 1)
        cum, buckets = 0, []
        for le, n in zip((*(repr(float(b)) for b in CYCLE_BUCKETS_S), "+Inf"), counts):
            cum += n
            buckets.append((le, cum))
        yield HistogramMetricFamily("xtc_policer_cycle_seconds", "Policy cycle time (a cycle's start to its last "
                                    "answering router handled), seconds", buckets=buckets, sum_value=h["sum"])


def create_app(cfg: PolicerConfig, store: Store, engine: Any = None) -> FastAPI:
    """The application.  ``engine`` (optional) is started and stopped with the app's lifespan."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if engine is not None:
            engine.start()
        try:
            yield
        finally:
            if engine is not None:
                engine.stop()

    app = FastAPI(
        title="XTC policer",
        # The policer exports its own Prometheus metrics (/metrics); FastAPI's OpenTelemetry hooks would
        # only cost a check of the tracer providers on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        version="1",
        description=API_DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served below from local assets, not from a CDN
        redoc_url=None,
        responses={400: {"model": Error, "description": "the body is not valid JSON"}},
    )
    app.router.route_class = _StrictJsonRoute
    bearer = HTTPBearer(auto_error=False, description="one of the tokens the policer is configured with")
    tokens = [t.encode() for t in cfg.tokens]

    def _check(cred: HTTPAuthorizationCredentials | None) -> str:
        if cred is None or cred.scheme.lower() != "bearer":
            raise HTTPException(401, "this request needs 'Authorization: Bearer <token>'", {"WWW-Authenticate": "Bearer"})
        given = cred.credentials.encode("utf-8", "replace")
        ok = False
        for t in tokens:  # compare with every token in constant time
            ok |= hmac.compare_digest(given, t)
        if not ok:
            raise HTTPException(401, "the bearer token is not valid", {"WWW-Authenticate": "Bearer"})
        return "api:token-" + hmac.new(given, b"xtc-policer-actor", "sha256").hexdigest()[:8]

    async def writer(cred: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> str:
        return _check(cred)

    if cfg.protect_reads:
        async def reader(cred: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> str | None:
            return _check(cred)
    else:  # no security requirement on reads (and none in the OpenAPI document)
        async def reader() -> str | None:
            return None

    lock = store.db.inline_lock

    def read_route(f: Any) -> Any:
        """A read runs on the event loop when the store's read connection is free at once and local
        (SQLite: a WAL read does not wait for writers; PostgreSQL on this machine's unix socket: one
        round trip of about 25 us), because a hand-over to the threadpool costs more than the read;
        else in the threadpool like every write (and every read from a PostgreSQL server over TCP)."""
        if lock is None:
            return f

        @functools.wraps(f)
        async def inline(*a: Any, **kw: Any) -> Any:
            if lock.acquire(blocking=False):
                try:
                    return f(*a, **kw)
                finally:
                    lock.release()
            return await run_in_threadpool(f, *a, **kw)

        return inline

    Writer = Annotated[str, Depends(writer)]
    Reader = Annotated[str | None, Depends(reader)]
    rd = _E401 if cfg.protect_reads else {}

    # Writes are refused before their body is even parsed: no token, no 422 either.
    app.add_middleware(_AuthFirst, check=_check)
    # Outermost: a body larger than the limit is refused before more of it is read.
    app.add_middleware(_BodyLimit, max_bytes=MAX_BODY_BYTES)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_r: Request, e: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _problems(e)}, status_code=422)

    @app.exception_handler(NotFound)
    async def _nf(_r: Request, e: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=404)

    @app.exception_handler(Conflict)
    async def _cf(_r: Request, e: Conflict) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=409)

    _offline_docs(app)

    # ------------------------------------------------------------------------------ health
    @app.get("/health", response_model=Health, response_model_exclude_none=True, tags=["service"],
             summary="Is the service and its engine running, does this process lead? (only 'status' without a token when reads are protected)")
    def health(request: Request, recent: Annotated[QueryInt | None, Query(
            ge=1, le=600, description="cycle_ms and measure_gap_ms over only the most recent this many cycles "
            "(default: all kept, at most 600)")] = None) -> dict[str, Any]:
        status = "failed" if engine is not None and engine.error is not None else "ok"
        if cfg.protect_reads:
            scheme, _, tok = request.headers.get("authorization", "").partition(" ")
            try:
                _check(HTTPAuthorizationCredentials(scheme=scheme, credentials=tok.strip()) if scheme else None)
            except HTTPException:
                return {"status": status}
        n_routers, unreachable = store.router_census()  # counted; only the unreachable ones are named
        k = recent or 600
        running = engine is not None and engine.error is None
        leads = running and (engine.is_leader is None or bool(engine.is_leader()))
        return {"status": status, "engine_running": running, "leader": leads,
                "leader_epoch": getattr(engine, "leader_epoch", store.fence_epoch) if leads else None,
                "engine_cycles": engine.cycles if engine is not None else 0,
                "routers": n_routers, "unreachable": unreachable,
                "bad_replies": sum(engine.bad_replies.values()) if engine is not None else 0,
                "sampled": engine.sampled if engine is not None else 0,
                "listed": engine.listed if engine is not None else 0,
                "probed": getattr(engine, "probed", 0) if engine is not None else 0,
                "bad_samples": engine.bad_samples if engine is not None else 0,
                "measure_gap_ms": percentiles(list(engine.gap_s)[-k:], 1000) if engine is not None and engine.gap_s else None,
                "cycle_ms": percentiles(list(engine.cycle_s)[-k:], 1000) if engine is not None and engine.cycle_s else None,
                "shards": getattr(engine, "shard_states", None)}

    registry = CollectorRegistry(auto_describe=False)
    registry.register(PolicerCollector(store, engine))
    add_standard_metrics(registry, "policer")

    @app.get("/metrics", include_in_schema=False)
    def metrics(_a: Reader) -> Response:
        """Prometheus text format (see :class:`PolicerCollector`)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    Limit = Annotated[QueryInt, Query(ge=1, le=MAX_PAGE, description=f"page size: at most this many items (1..{MAX_PAGE})")]
    Offset = Annotated[QueryInt, Query(ge=0, le=2**62, description="page start: items skipped, in the list's order")]
    Flagged = Annotated[bool | None, Query(description="only VRs punished to the last level (true) or only the others (false)")]

    # ----------------------------------------------------------------------------- routers
    @app.get("/routers", response_model=list[Router], tags=["routers"], responses=rd,
             summary="Routers by name, one page (limit, offset), optionally of one status")
    @read_route
    def list_routers(_a: Reader,
                           status: Annotated[Literal["unknown", "reachable", "unreachable", "removed"] | None, Query()] = None,
                           limit: Limit = 1000, offset: Offset = 0) -> Response:
        return _json([_router_out(r) for r in store.list_routers(status=status, limit=limit, offset=offset)])

    @app.post("/routers", response_model=Router, status_code=201, tags=["routers"],
              responses={**_E401, **_E409}, summary="Register a router (a host and its daemon)")
    def add_router(body: RouterIn, actor: Writer) -> dict[str, Any]:
        return _router_out(store.add_router(body.name, body.endpoint, body.capacity_pps, body.control_mode,
                                            body.curve_server_key, actor, body.pub_endpoint))

    @app.get("/routers/{router}", response_model=Router, tags=["routers"], responses={**rd, **_E404})
    @read_route
    def get_router(router: RouterPath, _a: Reader) -> Response:
        return _json(_router_out(store.get_router(router)))

    @app.patch("/routers/{router}", response_model=Router, tags=["routers"], responses={**_E401, **_E404, **_E409},
               summary="Change a router's endpoint, capacity, control mode, CURVE key or samples endpoint")
    def patch_router(router: RouterPath, body: RouterPatch, actor: Writer) -> dict[str, Any]:
        changes = body.model_dump(exclude_unset=True)
        for k in ("endpoint", "capacity_pps", "control_mode"):
            if k in changes and changes[k] is None:
                raise HTTPException(422, [{"loc": ["body", k], "msg": f"{k} may not be null", "type": "value_error"}])
        return _router_out(store.update_router(router, changes, actor))

    @app.delete("/routers/{router}", response_model=Router, tags=["routers"], responses={**_E401, **_E404},
                summary="Mark a router removed (kept, with its history; no longer polled)")
    def remove_router(router: RouterPath, actor: Writer) -> dict[str, Any]:
        return _router_out(store.remove_router(router, actor))

    # --------------------------------------------------------------------------------- vrs
    @app.get("/vrs", response_model=list[Vr], tags=["vrs"], responses=rd,
             summary="VRs as the daemons report them, by router and name, one page (limit, offset), filtered")
    @read_route
    def list_vrs(_a: Reader, router: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
                       network: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
                       state: Annotated[Literal["inactive", "active", "paused"] | None, Query()] = None,
                       flagged: Flagged = None, limit: Limit = 1000, offset: Offset = 0) -> Response:
        return _json(store.list_vrs(router, network, state, flagged, limit, offset))

    @app.get("/vrs/{router}/{vr}", response_model=Vr, tags=["vrs"], responses={**rd, **_E404})
    @read_route
    def get_vr(router: RouterPath, vr: VrPath, _a: Reader) -> dict[str, Any]:
        return store.get_vr(router, vr)

    @app.put("/vrs/{router}/{vr}/network", response_model=Vr, tags=["vrs"], responses={**_E401, **_E404},
             summary="Put a VR in a virtual network (or in none)")
    def set_vr_network(router: RouterPath, vr: VrPath, body: VrNetworkIn, actor: Writer) -> dict[str, Any]:
        return store.set_vr_network(router, vr, body.network, actor)

    @app.put("/vrs/{router}/{vr}/setpoint", response_model=Vr, tags=["setpoints"], responses={**_E401, **_E404},
             summary="Set a manual setpoint (overrides the allocation policy for this VR)")
    def set_setpoint(router: RouterPath, vr: VrPath, body: SetpointIn, actor: Writer) -> dict[str, Any]:
        return store.set_manual_setpoint(router, vr, body.setpoint_pps, actor)

    @app.delete("/vrs/{router}/{vr}/setpoint", response_model=Vr, tags=["setpoints"], responses={**_E401, **_E404},
                summary="Drop a manual setpoint (the allocation policy decides again)")
    def clear_setpoint(router: RouterPath, vr: VrPath, actor: Writer) -> dict[str, Any]:
        return store.set_manual_setpoint(router, vr, None, actor)

    @app.get("/setpoints", response_model=list[Setpoint], tags=["setpoints"], responses=rd,
             summary="VRs' setpoints and where they come from, by router and VR, one page (limit, offset), filtered")
    @read_route
    def list_setpoints(_a: Reader, router: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
                             network: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
                             flagged: Flagged = None, limit: Limit = 1000, offset: Offset = 0) -> Response:
        return _json(store.list_setpoints(router, network, flagged, limit, offset))

    # ---------------------------------------------------------------------------- networks
    @app.get("/networks", response_model=list[Network], tags=["networks"], responses=rd,
             summary="Networks by name, one page (limit, offset)")
    @read_route
    def list_networks(_a: Reader, limit: Limit = 1000, offset: Offset = 0) -> Response:
        return _json(store.list_networks(limit, offset))

    @app.post("/networks", response_model=Network, status_code=201, tags=["networks"], responses={**_E401, **_E409})
    def add_network(body: NetworkIn, actor: Writer) -> dict[str, Any]:
        return store.add_network(body.name, body.description, actor)

    @app.get("/networks/{network}", response_model=Network, tags=["networks"], responses={**rd, **_E404})
    @read_route
    def get_network(network: NetworkPath, _a: Reader) -> Response:
        return _json(store.get_network(network))

    @app.delete("/networks/{network}", status_code=204, tags=["networks"], responses={**_E401, **_E404, **_E409},
                summary="Delete a network that no VR belongs to")
    def remove_network(network: NetworkPath, actor: Writer) -> None:
        store.remove_network(network, actor)

    @app.put("/networks/{network}/sla", response_model=Network, tags=["networks"], responses={**_E401, **_E404},
             summary="Set the network's SLA: guaranteed minimum, maximum (packets/s per VR) and weight")
    def set_sla(network: NetworkPath, body: Sla, actor: Writer) -> dict[str, Any]:
        return store.set_sla(network, body.model_dump(), actor)

    @app.delete("/networks/{network}/sla", response_model=Network, tags=["networks"], responses={**_E401, **_E404})
    def clear_sla(network: NetworkPath, actor: Writer) -> dict[str, Any]:
        return store.set_sla(network, None, actor)

    # ---------------------------------------------------------------------------- policies
    @app.get("/policies", response_model=Policies, tags=["policies"], responses=rd)
    @read_route
    def get_policies(_a: Reader) -> dict[str, Any]:
        return store.policies()

    @app.put("/policies/activation", response_model=ActivationPolicy, tags=["policies"], responses=_E401)
    def put_activation(body: ActivationPolicy, actor: Writer) -> dict[str, Any]:
        return store.set_policy("activation", body.model_dump(), actor)

    @app.put("/policies/allocation", response_model=AllocationPolicy, tags=["policies"], responses=_E401)
    def put_allocation(body: AllocationPolicy, actor: Writer) -> dict[str, Any]:
        return store.set_policy("allocation", body.model_dump(), actor)

    @app.put("/policies/misbehaviour", response_model=MisbehaviourPolicy, tags=["policies"], responses=_E401)
    def put_misbehaviour(body: MisbehaviourPolicy, actor: Writer) -> dict[str, Any]:
        return store.set_policy("misbehaviour", body.model_dump(), actor)

    # ----------------------------------------------------------------------------- actions
    @app.get("/actions", response_model=list[Action], tags=["actions"], responses=rd,
             summary="The audit log, oldest first (page with after_id)")
    @read_route
    def list_actions(
        _a: Reader,
        router: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
        vr: Annotated[str | None, Query(pattern=VR_PATTERN)] = None,
        kind: Annotated[str | None, Query(pattern=r"^[a-z_]{1,40}$")] = None,
        after_id: Annotated[QueryInt, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[QueryInt, Query(ge=1, le=1000)] = 100,
    ) -> Response:
        return _json(store.list_actions(router, vr, kind, after_id, limit))

    return app


def openapi_document(cfg: PolicerConfig | None = None) -> dict[str, Any]:
    """The OpenAPI document of the app (as committed in docs/policer-openapi.json)."""
    s = Store("sqlite://")
    try:
        return create_app(cfg or PolicerConfig(), s).openapi()
    finally:
        s.close()


"""The application: :func:`create_app` (the routes, their authentication, the error handlers) and
:func:`openapi_document`."""

import functools
import hmac
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import orjson
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from xtc.service.metrics import add_standard_metrics

from ..config import PolicerConfig
from ..engine import percentiles
from ..link import VR_PATTERN
from ..store import Conflict, NotFound, Store
from .lean import LeanPath, boolean, digits, matching, one_of
from .metrics import PolicerCollector
from .middlewares import (
    MAX_BODY_BYTES,
    AuthFirst,
    BodyLimit,
    StrictJsonRoute,
    validation_problems,
)
from .pages import offline_docs
from .schemas import (
    E401,
    E404,
    E409,
    MAX_PAGE,
    NAME_PATTERN,
    Action,
    ActivationPolicy,
    AllocationPolicy,
    Error,
    Health,
    MisbehaviourPolicy,
    Network,
    NetworkIn,
    NetworkPath,
    Policies,
    QueryInt,
    Router,
    RouterIn,
    RouterPatch,
    RouterPath,
    Setpoint,
    SetpointIn,
    Sla,
    VrOffIn,
    Vr,
    VrNetworkIn,
    VrPath,
)

__all__ = ["create_app", "openapi_document", "API_DESCRIPTION", "MAX_BODY_BYTES"]


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
  level: levels 1 and 2 multiply its setpoint by `step_factor` each, and from level 2 its excess is also
  dropped at the host (the daemon's early drop: the paper's per-interface limiter); level 3 pauses its
  XTC instance (its cap stays where it is) and flags the VR for an operator; level 4, only in a network
  whose operator enabled it (`PUT /networks/{network}/vr-off`), turns the VR off (libvirt).  Each further
  `hold_s` of the same behaviour climbs a level.  After `restore_hold_s` seconds of good behaviour it is
  restored (its early drop back to the daemon's default; a VR that is off is turned on again when control
  or the policy goes off, and its ladder starts from the bottom when an operator turns it on).  Every
  step is in the audit log.

**Security.** Every write needs `Authorization: Bearer <token>` (401 otherwise); reads are open
unless the service is configured with `protect_reads`.
"""


def _json(items: list[dict[str, Any]] | dict[str, Any], status: int = 200) -> Response:
    """A list (or one object) already in its response model's shape, serialised at once (the route's
    response model documents it; validating and serialising thousands of items through it costs more
    than the query), by orjson: a page of 100 VRs in a tenth of the standard library's C encoder's CPU
    (0.33 ms there, most of the page's cost after the query).  Its numbers are Python's but for small
    ones (0.00001, not 1e-05), and it writes a NaN as null.  What it refuses (an int beyond 64 bits, a
    str that is not UTF-8) the standard library writes."""
    try:
        body = orjson.dumps(items)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        body = json.dumps(items, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    return Response(body, status, media_type="application/json")


def _model_json(model: type[BaseModel], d: dict[str, Any]) -> Response:
    """``d`` as its response model shapes it (only its fields), serialised."""
    return _json(model.model_validate(d).model_dump(mode="json"))


def _actor(token: bytes) -> str:
    """A token's name in the audit log: a short hash of it."""
    return "api:token-" + hmac.new(token, b"xtc-policer-actor", "sha256").hexdigest()[:8]


def _router_out(r: dict[str, Any]) -> dict[str, Any]:
    """The store's router (a dictionary of its own, changed in place) as the API shows it: whether it has
    a CURVE key, not the key."""
    r["curve"] = r.pop("curve_server_key") is not None
    return r


class PolicerApp(FastAPI):
    """FastAPI, with the common reads answered first by the lean read path (:mod:`.lean`)."""

    lean: LeanPath | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.lean is not None and not scope.get("root_path"):
            if scope["method"] == "GET":
                response = await self.lean.answer(scope)
            else:
                response, receive = await self.lean.answer_write(scope, receive)
            if response is not None:
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


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

    app = PolicerApp(
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
    app.router.route_class = StrictJsonRoute
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
        return _actor(given)

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

    lean = app.lean = LeanPath(cfg.tokens, _actor, cfg.protect_reads, lock, MAX_BODY_BYTES,
                               getattr(store.db, "no_wait", None))
    name, vr_name = matching(NAME_PATTERN), matching(VR_PATTERN)
    page = {"limit": digits(1, MAX_PAGE), "offset": digits(0, 2**62)}

    Writer = Annotated[str, Depends(writer)]
    Reader = Annotated[str | None, Depends(reader)]
    rd = E401 if cfg.protect_reads else {}

    # Writes are refused before their body is even parsed: no token, no 422 either.
    app.add_middleware(AuthFirst, check=_check)
    # Outermost: a body larger than the limit is refused before more of it is read.
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_r: Request, e: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_problems(e)}, status_code=422)

    @app.exception_handler(NotFound)
    async def _nf(_r: Request, e: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=404)

    @app.exception_handler(Conflict)
    async def _cf(_r: Request, e: Conflict) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=409)

    offline_docs(app)

    # ------------------------------------------------------------------------------ health
    @app.get("/health", response_model=Health, response_model_exclude_none=True, tags=["service"],
             summary="Is the service and its engine running, does this process lead? (only 'status' without a token when reads are protected)")
    def health(request: Request, recent: Annotated[QueryInt | None, Query(
            ge=1, le=600, description="cycle_ms and measure_gap_ms over only the most recent this many cycles "
            "(default: all kept, at most 600)")] = None) -> Response:
        if cfg.protect_reads:
            scheme, _, tok = request.headers.get("authorization", "").partition(" ")
            try:
                _check(HTTPAuthorizationCredentials(scheme=scheme, credentials=tok.strip()) if scheme else None)
            except HTTPException:
                return _json({"status": "failed" if engine is not None and engine.error is not None else "ok"})
        return lean_health(None, recent)

    @lean.get("/health", recent=digits(1, 600))
    def lean_health(_a: None, recent: int | None = None) -> Response:
        """/health in full (on the lean path: for a caller with the token when reads are protected), as
        the route's model serialises it, the fields that are None left out."""
        return _json(Health.model_validate(health_of(recent)).model_dump(mode="json", exclude_none=True))

    def health_of(recent: int | None) -> dict[str, Any]:
        """/health's answer in full."""
        status = "failed" if engine is not None and engine.error is not None else "ok"
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
                "shed": getattr(engine, "shed", 0) if engine is not None else 0,
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
    @lean.get("/routers", status=one_of("unknown", "reachable", "unreachable", "removed"), **page)
    def list_routers(_a: Reader,
                           status: Annotated[Literal["unknown", "reachable", "unreachable", "removed"] | None, Query()] = None,
                           limit: Limit = 1000, offset: Offset = 0) -> Response:
        return _json([_router_out(r) for r in store.list_routers(status=status, limit=limit, offset=offset)])

    @app.post("/routers", response_model=Router, status_code=201, tags=["routers"],
              responses={**E401, **E409}, summary="Register a router (a host and its daemon)")
    @lean.write("POST", "/routers", RouterIn)
    def add_router(body: RouterIn, actor: Writer) -> Response:
        return _json(_router_out(store.add_router(body.name, body.endpoint, body.capacity_pps, body.control_mode,
                                                  body.curve_server_key, actor, body.pub_endpoint)), 201)

    @app.get("/routers/{router}", response_model=Router, tags=["routers"], responses={**rd, **E404})
    @read_route
    @lean.get("/routers/(?P<router>[^/]+)", {"router": name})
    def get_router(router: RouterPath, _a: Reader) -> Response:
        return _json(_router_out(store.get_router(router)))

    @app.patch("/routers/{router}", response_model=Router, tags=["routers"], responses={**E401, **E404, **E409},
               summary="Change a router's endpoint, capacity, control mode, CURVE key or samples endpoint")
    @lean.write("PATCH", "/routers/(?P<router>[^/]+)", RouterPatch, {"router": name})
    def patch_router(router: RouterPath, body: RouterPatch, actor: Writer) -> Response:
        changes = body.model_dump(exclude_unset=True)
        for k in ("endpoint", "capacity_pps", "control_mode"):
            if k in changes and changes[k] is None:
                raise HTTPException(422, [{"loc": ["body", k], "msg": f"{k} may not be null", "type": "value_error"}])
        return _json(_router_out(store.update_router(router, changes, actor)))

    @app.delete("/routers/{router}", response_model=Router, tags=["routers"], responses={**E401, **E404},
                summary="Mark a router removed (kept, with its history; no longer polled)")
    @lean.delete("/routers/(?P<router>[^/]+)", {"router": name})
    def remove_router(router: RouterPath, actor: Writer) -> Response:
        return _json(_router_out(store.remove_router(router, actor)))

    # --------------------------------------------------------------------------------- vrs
    @app.get("/vrs", response_model=list[Vr], tags=["vrs"], responses=rd,
             summary="VRs as the daemons report them, by router and name, one page (limit, offset), filtered")
    @read_route
    @lean.get("/vrs", router=name, network=name, state=one_of("inactive", "active", "paused"), flagged=boolean, **page)
    def list_vrs(_a: Reader, router: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
                       network: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
                       state: Annotated[Literal["inactive", "active", "paused"] | None, Query()] = None,
                       flagged: Flagged = None, limit: Limit = 1000, offset: Offset = 0) -> Response:
        return _json(store.list_vrs(router, network, state, flagged, limit, offset))

    @app.get("/vrs/{router}/{vr}", response_model=Vr, tags=["vrs"], responses={**rd, **E404})
    @read_route
    @lean.get("/vrs/(?P<router>[^/]+)/(?P<vr>[^/]+)", {"router": name, "vr": vr_name})
    def get_vr(router: RouterPath, vr: VrPath, _a: Reader) -> Response:
        return _json(store.get_vr(router, vr))

    @app.put("/vrs/{router}/{vr}/network", response_model=Vr, tags=["vrs"], responses={**E401, **E404},
             summary="Put a VR in a virtual network (or in none)")
    @lean.write("PUT", "/vrs/(?P<router>[^/]+)/(?P<vr>[^/]+)/network", VrNetworkIn, {"router": name, "vr": vr_name})
    def set_vr_network(router: RouterPath, vr: VrPath, body: VrNetworkIn, actor: Writer) -> Response:
        return _json(store.set_vr_network(router, vr, body.network, actor))

    @app.put("/vrs/{router}/{vr}/setpoint", response_model=Vr, tags=["setpoints"], responses={**E401, **E404},
             summary="Set a manual setpoint (overrides the allocation policy for this VR)")
    @lean.write("PUT", "/vrs/(?P<router>[^/]+)/(?P<vr>[^/]+)/setpoint", SetpointIn, {"router": name, "vr": vr_name})
    def set_setpoint(router: RouterPath, vr: VrPath, body: SetpointIn, actor: Writer) -> Response:
        return _json(store.set_manual_setpoint(router, vr, body.setpoint_pps, actor))

    @app.delete("/vrs/{router}/{vr}/setpoint", response_model=Vr, tags=["setpoints"], responses={**E401, **E404},
                summary="Drop a manual setpoint (the allocation policy decides again)")
    @lean.delete("/vrs/(?P<router>[^/]+)/(?P<vr>[^/]+)/setpoint", {"router": name, "vr": vr_name})
    def clear_setpoint(router: RouterPath, vr: VrPath, actor: Writer) -> Response:
        return _json(store.set_manual_setpoint(router, vr, None, actor))

    @app.get("/setpoints", response_model=list[Setpoint], tags=["setpoints"], responses=rd,
             summary="VRs' setpoints and where they come from, by router and VR, one page (limit, offset), filtered")
    @read_route
    @lean.get("/setpoints", router=name, network=name, flagged=boolean, **page)
    def list_setpoints(_a: Reader, router: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
                             network: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
                             flagged: Flagged = None, limit: Limit = 1000, offset: Offset = 0) -> Response:
        return _json(store.list_setpoints(router, network, flagged, limit, offset))

    # ---------------------------------------------------------------------------- networks
    @app.get("/networks", response_model=list[Network], tags=["networks"], responses=rd,
             summary="Networks by name, one page (limit, offset)")
    @read_route
    @lean.get("/networks", **page)
    def list_networks(_a: Reader, limit: Limit = 1000, offset: Offset = 0) -> Response:
        return _json(store.list_networks(limit, offset))

    @app.post("/networks", response_model=Network, status_code=201, tags=["networks"], responses={**E401, **E409})
    @lean.write("POST", "/networks", NetworkIn)
    def add_network(body: NetworkIn, actor: Writer) -> Response:
        return _json(store.add_network(body.name, body.description, actor), 201)

    @app.get("/networks/{network}", response_model=Network, tags=["networks"], responses={**rd, **E404})
    @read_route
    @lean.get("/networks/(?P<network>[^/]+)", {"network": name})
    def get_network(network: NetworkPath, _a: Reader) -> Response:
        return _json(store.get_network(network))

    @app.delete("/networks/{network}", status_code=204, tags=["networks"], responses={**E401, **E404, **E409},
                summary="Delete a network that no VR belongs to")
    @lean.delete("/networks/(?P<network>[^/]+)", {"network": name})
    def remove_network(network: NetworkPath, actor: Writer) -> Response:
        store.remove_network(network, actor)
        return Response(status_code=204)

    @app.put("/networks/{network}/sla", response_model=Network, tags=["networks"], responses={**E401, **E404},
             summary="Set the network's SLA: guaranteed minimum, maximum (packets/s per VR) and weight")
    @lean.write("PUT", "/networks/(?P<network>[^/]+)/sla", Sla, {"network": name})
    def set_sla(network: NetworkPath, body: Sla, actor: Writer) -> Response:
        return _json(store.set_sla(network, body.model_dump(), actor))

    @app.delete("/networks/{network}/sla", response_model=Network, tags=["networks"], responses={**E401, **E404})
    @lean.delete("/networks/(?P<network>[^/]+)/sla", {"network": name})
    def clear_sla(network: NetworkPath, actor: Writer) -> Response:
        return _json(store.set_sla(network, None, actor))

    @app.put("/networks/{network}/vr-off", response_model=Network, tags=["networks"], responses={**E401, **E404},
             summary="Enable or disable the punishment ladder's last resort (turning a misbehaving VR off) for the network")
    @lean.write("PUT", "/networks/(?P<network>[^/]+)/vr-off", VrOffIn, {"network": name})
    def set_vr_off(network: NetworkPath, body: VrOffIn, actor: Writer) -> Response:
        return _json(store.set_vr_off(network, body.enabled, actor))

    # ---------------------------------------------------------------------------- policies
    @app.get("/policies", response_model=Policies, tags=["policies"], responses=rd)
    @read_route
    @lean.get("/policies")
    def get_policies(_a: Reader) -> Response:
        return _model_json(Policies, store.policies())

    @app.put("/policies/activation", response_model=ActivationPolicy, tags=["policies"], responses=E401)
    @lean.write("PUT", "/policies/activation", ActivationPolicy)
    def put_activation(body: ActivationPolicy, actor: Writer) -> Response:
        return _model_json(ActivationPolicy, store.set_policy("activation", body.model_dump(), actor))

    @app.put("/policies/allocation", response_model=AllocationPolicy, tags=["policies"], responses=E401)
    @lean.write("PUT", "/policies/allocation", AllocationPolicy)
    def put_allocation(body: AllocationPolicy, actor: Writer) -> Response:
        return _model_json(AllocationPolicy, store.set_policy("allocation", body.model_dump(), actor))

    @app.put("/policies/misbehaviour", response_model=MisbehaviourPolicy, tags=["policies"], responses=E401)
    @lean.write("PUT", "/policies/misbehaviour", MisbehaviourPolicy)
    def put_misbehaviour(body: MisbehaviourPolicy, actor: Writer) -> Response:
        return _model_json(MisbehaviourPolicy, store.set_policy("misbehaviour", body.model_dump(), actor))

    # ----------------------------------------------------------------------------- actions
    @app.get("/actions", response_model=list[Action], tags=["actions"], responses=rd,
             summary="The audit log, oldest first (page with after_id)")
    @read_route
    @lean.get("/actions", router=name, vr=vr_name, kind=matching(r"^[a-z_]{1,40}$"), after_id=digits(0, 2**62),
              limit=digits(1, 1000))
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

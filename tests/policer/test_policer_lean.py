"""The lean read path (xtc.policer.api.lean) answers exactly as FastAPI does, or leaves the request to it."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from xtc.policer.api import create_app
from xtc.policer.config import PolicerConfig
from xtc.policer.store import Store

TOKEN = "tok-" + "b" * 28

#: Reads, valid and not, plain and unusual: each is asked of the app with and without the lean path.
PATHS = [
    "/routers", "/routers?limit=2", "/routers?limit=2&offset=1", "/routers?status=unreachable", "/routers?status=bogus",
    "/routers?limit=0", "/routers?limit=5001", "/routers?limit=1.0", "/routers?limit=1e3", "/routers?limit=true",
    "/routers?limit=%32", "/routers?limit=2&limit=3", "/routers?limit=", "/routers?limit", "/routers?unknown=1",
    "/routers?offset=4611686018427387905", "/routers?offset=99999999999999999999", "/routers?limit=+2",
    "/routers/r1", "/routers/r2", "/routers/nope", "/routers/-bad", "/routers/r1%0A", "/routers/r1/", "/routers/r1?x=1",
    "/vrs", "/vrs?router=r1", "/vrs?network=n1", "/vrs?state=active", "/vrs?state=on", "/vrs?flagged=true",
    "/vrs?flagged=false", "/vrs?flagged=1", "/vrs?flagged=yes", "/vrs?router=r1&network=n1&limit=1&offset=0",
    "/vrs/r1/v1", "/vrs/r1/v2", "/vrs/r1/nope", "/vrs/r1/v1%20", "/vrs/nope/v1",
    "/setpoints", "/setpoints?router=r1", "/setpoints?flagged=false&limit=1",
    "/networks", "/networks?limit=1", "/networks?offset=1", "/networks/n1", "/networks/n2", "/networks/nope",
    "/networks/n%31", "/networks/" + "n" * 65,
    "/actions", "/actions?limit=3", "/actions?after_id=2&limit=3", "/actions?kind=sla_set", "/actions?kind=Bad",
    "/actions?router=r1&vr=v1", "/actions?limit=1001", "/actions?after_id=-1",
    "/policies", "/policies?x=1",
    "/health", "/health?recent=5", "/health?recent=600", "/health?recent=0", "/health?recent=601", "/health?recent=x",
    "/health?recent=5&recent=6", "/health?other=1",
]


def _app(url: str, protect_reads: bool) -> tuple[Any, Store]:
    store = Store(url)
    return create_app(PolicerConfig(tokens=frozenset({TOKEN}), protect_reads=protect_reads), store), store


def _seed(store: Store) -> None:
    store.add_router("r1", "tcp://127.0.0.1:1", 1e5, "off", None, "test")
    store.add_router("r2", "tcp://127.0.0.1:2", 2.5e5, "auto", "A" * 40, "test")
    store.set_router_status("r2", "unreachable", "timeout", False)
    store.add_network("n1", "first", "test")
    store.add_network("n2", "second, with a \u00e9", "test")
    store.set_sla("n1", {"min_pps": 1000.0, "max_pps": 5e4, "weight": 2.0}, "test")
    store.record_poll("r1", [{"vr": "v1", "state": "active", "forwarded_pps": 5.0, "offered_pps": 6.5},
                             {"vr": "v2", "state": "inactive"}])
    store.set_vr_network("r1", "v1", "n1", "test")
    store.set_manual_setpoint("r1", "v1", 12345.5, "test")


@pytest.mark.parametrize("protect_reads", [False, True])
def test_lean_reads_answer_as_fastapi_does(tmp_path: Any, protect_reads: bool) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    seeder = Store(url)  # a store of its own: neither app's holds live measurements (both read the database)
    _seed(seeder)
    seeder.close()
    app, store = _app(url, protect_reads)
    plain, plain_store = _app(url, protect_reads)
    plain.lean = None  # FastAPI alone, on the same database
    answered: list[str] = []
    tokens: list[bytes | None] = []
    lean = app.lean

    async def counting(scope: dict[str, Any]) -> Any:
        r = await type(lean).answer(lean, scope)
        if r is not None:
            answered.append(scope["path"] + "?" + scope["query_string"].decode())
            tokens.append(dict(scope["headers"]).get(b"authorization"))
        return r

    lean.answer = counting
    a, b = TestClient(app), TestClient(plain)
    headers = [{"Authorization": f"Bearer {TOKEN}"}, {"Authorization": f"bearer {TOKEN}"},
               {"Authorization": "Bearer wrong"}, {}] if protect_reads else [{}]
    for h in headers:
        for path in PATHS:
            ra, rb = a.get(path, headers=h), b.get(path, headers=h)
            assert (ra.status_code, ra.content, ra.headers.get("content-type")) == \
                   (rb.status_code, rb.content, rb.headers.get("content-type")), (path, h)
            assert ra.headers.get("www-authenticate") == rb.headers.get("www-authenticate"), (path, h)
    # The lean path did answer the plain valid reads (and only with the token when reads are protected).
    for must in ("/routers?limit=2&offset=1", "/vrs/r1/v1?", "/networks/n1?", "/actions?after_id=2&limit=3",
                 "/policies?", "/vrs?flagged=true", "/setpoints?router=r1",
                 # the service's health, and a read of what does not exist (the store's 404)
                 "/health?", "/health?recent=5", "/routers/nope?", "/networks/nope?", "/vrs/r1/nope?", "/vrs/nope/v1?"):
        assert any(x.startswith(must) for x in answered), (must, answered)
    assert not any("limit=1.0" in x or "flagged=1" in x or "limit=2&limit" in x or "recent=0" in x
                   or "recent=5&" in x or "-bad" in x or "%" in x for x in answered), answered
    if protect_reads:  # only with the token exactly as "Bearer <token>"
        assert set(tokens) == {f"Bearer {TOKEN}".encode()}, set(tokens)
    store.close()
    plain_store.close()


class _Engine:
    """What /health reads of an engine (no thread, no daemons)."""

    def __init__(self, error: object = None, leads: bool = True):
        self.error, self.cycles, self.bad_replies = error, 42, {"r1": 2, "r2": 1}
        self.sampled, self.listed, self.probed, self.shed, self.bad_samples = 900, 100, 3, 7, 1
        self.cycle_s = [0.01 * (i % 7) + 0.001 * i for i in range(700)]
        self.gap_s = [1.0 + 0.01 * (i % 5) for i in range(650)]
        self.is_leader = lambda: leads
        self.leader_epoch = 4
        self.shard_states = [{"shard": 0, "leader": True, "epoch": 4, "cycles": 42},
                             {"shard": 1, "leader": False, "epoch": None, "cycles": 40}]

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


@pytest.mark.parametrize("protect_reads", [False, True])
@pytest.mark.parametrize("engine", [_Engine(), _Engine(error=RuntimeError("x")), _Engine(leads=False), None])
def test_lean_health_answers_as_fastapi_does(tmp_path: Any, protect_reads: bool, engine: Any) -> None:
    """/health on the lean path: the same bytes as FastAPI's route (its model without the fields that are
    None), the engine's figures and the census of the routers; with protect_reads, only a caller with
    the token exactly as "Bearer <token>" gets more than 'status' (and only that one the lean path answers)."""
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    _seed(store)
    cfg = PolicerConfig(tokens=frozenset({TOKEN}), protect_reads=protect_reads)
    app, plain = create_app(cfg, store, engine), create_app(cfg, store, engine)
    plain.lean = None
    answered = []
    lean = app.lean

    async def counting(scope: dict[str, Any]) -> Any:
        r = await type(lean).answer(lean, scope)
        if r is not None:
            answered.append((scope["query_string"], dict(scope["headers"]).get(b"authorization")))
        return r

    lean.answer = counting
    a, b = TestClient(app), TestClient(plain)
    for h in ({"Authorization": f"Bearer {TOKEN}"}, {"Authorization": "Bearer wrong"}, {}):
        for q in ("", "?recent=3", "?recent=600"):
            ra, rb = a.get("/health" + q, headers=h), b.get("/health" + q, headers=h)
            assert (ra.status_code, ra.content, ra.headers.get("content-type")) == \
                   (rb.status_code, rb.content, rb.headers.get("content-type")), (q, h)
    compared = len(answered)
    full = a.get("/health?recent=3", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert full["routers"] == 2 and full["unreachable"] == ["r2"] and full["engine_cycles"] == (42 if engine else 0)
    if engine is not None and engine.error is None:
        assert full["cycle_ms"] == {"p50": 748.0, "p99": 759.0, "max": 759.0}, full  # the 3 most recent cycles
    assert (b"", f"Bearer {TOKEN}".encode()) in answered and (b"recent=3", f"Bearer {TOKEN}".encode()) in answered
    if protect_reads:  # a caller without the token is FastAPI's (it gets 'status' only)
        assert {t for _, t in answered} == {f"Bearer {TOKEN}".encode()}
    else:
        assert compared == 9
    store.close()


def test_health_and_metrics_count_the_measurements_shed_while_behind(tmp_path: Any) -> None:
    """The engine's measurements put off while it was behind (``Engine.shed``) in /health and in /metrics, the
    signal that it needs more shards."""
    from prometheus_client.parser import text_string_to_metric_families

    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    _seed(store)
    c = TestClient(create_app(PolicerConfig(tokens=frozenset({TOKEN})), store, _Engine()))
    assert c.get("/health", headers={"Authorization": f"Bearer {TOKEN}"}).json()["shed"] == 7
    got = {s.name: s.value for f in text_string_to_metric_families(c.get("/metrics").text) for s in f.samples}
    assert got["xtc_policer_measurements_shed_total"] == 7, got
    store.close()


def test_lean_reads_see_writes_at_once(tmp_path: Any) -> None:
    app, store = _app(f"sqlite:///{tmp_path / 'p.db'}", False)
    c = TestClient(app)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert c.get("/networks").json() == []
    assert c.post("/networks", json={"name": "n1"}, headers=auth).status_code == 201
    assert [n["name"] for n in c.get("/networks").json()] == ["n1"]
    store.add_network("n2", "", "test")  # the store's own writes too (the engine's, in its process)
    assert [n["name"] for n in c.get("/networks").json()] == ["n1", "n2"]
    store.close()


#: Writes, valid and not: (method, path, body bytes, headers beyond the token's), in order.
J = {"Content-Type": "application/json"}
WRITES: list[tuple[str, str, bytes, dict[str, str]]] = [
    ("POST", "/routers", b'{"name":"r3","endpoint":"tcp://127.0.0.1:3","capacity_pps":1e5}', J),
    ("POST", "/routers", b'{"name":"r3","endpoint":"tcp://127.0.0.1:3","capacity_pps":1e5}', J),  # 409
    ("POST", "/routers", b'{"name":"r4","endpoint":"tcp://127.0.0.1:4","capacity_pps":1e5,"x":1}', J),  # 422
    ("POST", "/routers", b'{"name":"r4","name":"r5","endpoint":"tcp://127.0.0.1:4","capacity_pps":1e5}', J),
    ("POST", "/routers", b'{"name":"r4","endpoint":"tcp://127.0.0.1:4","capacity_pps":NaN}', J),
    ("POST", "/routers", b'{"name":"r4","endpoint":"tcp://127.0.0.1:4","capacity_pps":1e5}', {}),  # no type
    ("POST", "/routers", b'{"name":"r4","endpoint":"tcp://127.0.0.1:4","capacity_pps":1e5}',
     {"Content-Type": "application/json; charset=utf-8"}),
    ("POST", "/routers", b'{"name":"r5","endpoint":"tcp://127.0.0.1:5","capacity_pps":1e5}', {**J, "Authorization": "Bearer nope"}),
    ("POST", "/routers", b'{"name":"r5","endpoint":"tcp://127.0.0.1:5","capacity_pps":1e5}', {**J, "Authorization": f"bearer {TOKEN}"}),
    ("POST", "/routers?x=1", b'{"name":"r6","endpoint":"tcp://127.0.0.1:6","capacity_pps":1e5}', J),
    ("PATCH", "/routers/r1", b'{"capacity_pps":200000}', J),
    ("PATCH", "/routers/r1", b'{"endpoint":null}', J),  # 422 from the route
    ("PATCH", "/routers/nope", b'{"capacity_pps":200000}', J),  # 404
    ("PATCH", "/routers/-x", b'{"capacity_pps":200000}', J),  # 422 (path)
    ("PATCH", "/routers/r1", b'', J),
    ("PATCH", "/routers/r1", b'[1]', J),
    ("PUT", "/vrs/r1/v1/network", b'{"network":"n2"}', J),
    ("PUT", "/vrs/r1/v1/network", b'{"network":"nope"}', J),  # 404
    ("PUT", "/vrs/r1/v1/network", b'{"network":null}', J),
    ("PUT", "/vrs/r1/v1/setpoint", b'{"setpoint_pps":5000}', J),
    ("PUT", "/vrs/r1/v1/setpoint", b'{"setpoint_pps":0}', J),  # 422
    ("PUT", "/vrs/r1/v1/setpoint", b'{"setpoint_pps":"5000"}', J),  # 422: strict
    ("POST", "/networks", b'{"name":"n3","description":"third"}', J),
    ("POST", "/networks", b'{"name":"n3"}', J),  # 409
    ("PUT", "/networks/n1/sla", b'{"min_pps":10,"max_pps":20000,"weight":3}', J),
    ("PUT", "/networks/n1/sla", b'{"min_pps":30000,"max_pps":20000}', J),  # 422 (model validator)
    ("PUT", "/networks/nope/sla", b'{"min_pps":10}', J),  # 404
    ("PUT", "/policies/activation", b'{"on_fraction":0.8,"off_fraction":0.6,"hold_s":1}', J),
    ("PUT", "/policies/activation", b'{"on_fraction":0.5,"off_fraction":0.6}', J),  # 422
    ("PUT", "/policies/allocation", b'{"target_fraction":0.8}', J),
    ("PUT", "/policies/misbehaviour", b'{"enabled":false}', J),
    ("PUT", "/policies/allocation", b'{"target_fraction":0.7}', {"Content-Type": "text/plain"}),
    # Deletes: no body, no query, the token exactly as "Bearer <token>"
    ("PUT", "/vrs/r1/v1/network", b'{"network":"n1"}', J),
    ("DELETE", "/vrs/r1/v1/setpoint", b'', {}),
    ("DELETE", "/vrs/r1/nope/setpoint", b'', {}),  # 404
    ("DELETE", "/networks/n3/sla", b'', {}),
    ("DELETE", "/networks/nope/sla", b'', {}),  # 404
    ("DELETE", "/networks/n1", b'', {}),  # 409: a VR belongs to it
    ("DELETE", "/networks/n3", b'', {}),  # 204
    ("DELETE", "/networks/n3", b'', {}),  # 404 now
    ("DELETE", "/networks/n2?x=1", b'', {}),  # a query: FastAPI's
    ("DELETE", "/networks/n2", b'{}', J),  # a body: FastAPI's
    ("DELETE", "/networks/n2", b'', {"Authorization": "Bearer nope"}),  # 401
    ("DELETE", "/routers/-x", b'', {}),  # 422 (path)
    ("DELETE", "/routers/r3", b'', {}),
    ("DELETE", "/routers/r3", b'', {}),  # removed already: kept, answered again
    ("DELETE", "/routers/nope", b'', {}),  # 404
]


def test_lean_writes_answer_and_write_as_fastapi_does(tmp_path: Any) -> None:
    """The same writes through the app with and without the lean path, each on its own database seeded
    alike: the same answers, then the same routers, VRs, networks, policies and audit log."""
    apps = []
    for which in ("lean", "plain"):
        store = Store(f"sqlite:///{tmp_path / (which + '.db')}", clock=lambda: 1.7e9)
        _seed(store)
        app = create_app(PolicerConfig(tokens=frozenset({TOKEN})), store)
        if which == "plain":
            app.lean = None
        apps.append((TestClient(app), store))
    (a, sa), (b, sb) = apps
    written = []
    lean = a.app.lean
    real = type(lean).answer_write

    async def counting(scope: dict[str, Any], receive: Any) -> Any:
        r, rcv = await real(lean, scope, receive)
        if r is not None:
            written.append((scope["method"], scope["path"], r.status_code))
        return r, rcv

    lean.answer_write = counting
    for method, path, body, headers in WRITES:
        h = {"Authorization": f"Bearer {TOKEN}", **headers}
        ra, rb = (c.request(method, path, content=body, headers=h) for c in (a, b))
        assert (ra.status_code, ra.content, ra.headers.get("content-type")) == \
               (rb.status_code, rb.content, rb.headers.get("content-type")), (method, path, body)
    for path in ("/routers", "/vrs", "/networks", "/policies", "/actions?limit=1000", "/setpoints"):
        assert a.get(path).content == b.get(path).content, path
    # The lean path took the plain writes, their 404 and 409 and the route's own 422, not the others.
    assert ("POST", "/routers", 201) in written and ("POST", "/routers", 409) in written
    assert ("PATCH", "/routers/r1", 422) in written and ("PATCH", "/routers/nope", 404) in written
    assert ("PUT", "/policies/misbehaviour", 200) in written and ("PUT", "/networks/n1/sla", 200) in written
    # ... and the plain deletes, their 404 and 409, not a delete with a query, a body or a wrong token.
    for d in (("DELETE", "/vrs/r1/v1/setpoint", 200), ("DELETE", "/vrs/r1/nope/setpoint", 404),
              ("DELETE", "/networks/n3/sla", 200), ("DELETE", "/networks/n1", 409), ("DELETE", "/networks/n3", 204),
              ("DELETE", "/networks/n3", 404), ("DELETE", "/routers/r3", 200), ("DELETE", "/routers/nope", 404)):
        assert d in written, (d, written)
    assert not any(m == "DELETE" and p in ("/networks/n2", "/routers/-x") for m, p, _ in written), written
    assert len(written) == 17 + 10, written
    sa.close()
    sb.close()


def test_a_lean_read_waits_in_the_threadpool_while_a_write_holds_the_store(tmp_path: Any) -> None:
    import threading
    import time

    app, store = _app(f"sqlite:///{tmp_path / 'p.db'}", False)
    _seed(store)
    c = TestClient(app)
    expected = c.get("/networks/n1").content
    held, release = threading.Event(), threading.Event()

    def writer() -> None:
        with store.db.inline_lock:  # as a write transaction in the threadpool holds it
            held.set()
            release.wait(5)

    t = threading.Thread(target=writer)
    t.start()
    held.wait(5)
    threading.Timer(0.3, release.set).start()
    t0 = time.monotonic()
    r = c.get("/networks/n1")
    assert r.status_code == 200 and r.content == expected
    assert time.monotonic() - t0 >= 0.25, "answered while the store was held"
    t.join(5)
    store.close()


def test_a_listing_is_encoded_by_orjson_and_what_it_refuses_by_the_standard_library() -> None:
    """The routes' JSON (xtc.policer.api.routes._json): orjson's bytes (as compact as before, UTF-8 as
    is, numbers as Python writes them but for small ones: 0.00001 rather than 1e-05); an int beyond 64
    bits, which orjson refuses, still answered by the standard library's encoder."""
    import json

    import orjson

    from xtc.policer.api.routes import _json

    page = [{"router": "r\u00e9", "name": "v1", "forwarded_pps": 1000.5, "last_seen_unix_s": 1795788141.2992609,
             "cap_percent": None, "present": True, "punishment_level": 0, "small": 1e-05}]
    r = _json(page)
    assert r.body == orjson.dumps(page) and r.media_type == "application/json" and r.status_code == 200
    assert json.loads(r.body) == page and b"\xc3\xa9" in r.body and b"0.00001" in r.body
    assert _json({"id": 2**70}, 201).body == b'{"id":1180591620717411303424}' and _json({"id": 2**70}, 201).status_code == 201

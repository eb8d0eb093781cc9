"""A hostile world: a misbehaving daemon (a real ZeroMQ REP server answering garbage, wrong types,
huge replies and nothing at all) and hostile HTTP clients, against a real policer (uvicorn)."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import psutil
import pytest

from conftest import TOKEN
from procs import wait_for
from fakes.daemon import RouterPeer
from procs import stop_process
from xtc.policer.engine import Engine
from xtc.policer.link import LinkPool
from xtc.policer.store import Store

pytestmark = pytest.mark.slow
# The hostile-daemon test waits with generous timeouts only (a mark within 10 s, the good router polled within
# 5 s, at a period of 0.2 s): it runs in the parallel part; the bounded-input test times the refusals: run alone.

GOOD = {"vr": "vr1", "state": "inactive", "present": True, "setpoint_pps": None, "forwarded_pps": 1000.0,
        "offered_pps": 1000.0, "cap_percent": None, "original_cap_percent": None}


def _ok(result: dict[str, Any]) -> bytes:
    return json.dumps({"v": 1, "id": 1, "ok": True, "result": result}).encode()


class Peer(RouterPeer):
    """A misbehaving daemon: a ROUTER socket (a REP that may also stay silent) in a thread,
    ``answer(request) -> list of frames`` (or None: no answer at all)."""

    def __init__(self) -> None:
        self.answer: Callable[[dict[str, Any]], list[bytes] | None] = lambda req: [_ok({"vrs": [GOOD]})]
        super().__init__()

    def list_reply(self, vrs: list[Any]) -> None:
        self.answer = lambda req: [_ok({"vrs": vrs})] if req.get("cmd") == "list" else [_ok({})]

    def reply(self, req: dict[str, Any]) -> list[bytes] | None:
        frames = self.answer(req)
        if frames is not None:
            # As the daemon does, the reply echoes the request's id (the policer matches replies
            # to requests by it): the canned replies say 1, put in place byte for byte.
            rid = json.dumps(req.get("id")).encode()
            first = next((p for p in (b'"id": 1,', b'"id":1,') if p in frames[0]), None)
            if first is not None:
                frames = [frames[0].replace(first, b'"id":' + rid + b",", 1), *frames[1:]]
        return frames


@pytest.fixture
def peer() -> Any:
    p = Peer()
    yield p
    p.close()


def _router(pol: Any, name: str) -> dict[str, Any]:
    return pol.get(f"/routers/{name}")


def test_a_misbehaving_daemon_is_dropped_counted_and_the_rest_goes_on(make_daemon: Any, make_policer: Any,
                                                                        peer: Peer) -> None:
    good = make_daemon("good", [{"name": "g1", "traffic": "tcp", "offered_pps": 20000.0}])
    pol = make_policer(period_s=0.2)  # default max_vrs_per_router = 4096
    pol.call("POST", "/routers", json={"name": "good", "endpoint": good.endpoint, "capacity_pps": 100000})
    pol.call("POST", "/routers", json={"name": "bad", "endpoint": peer.endpoint, "capacity_pps": 100000})
    wait_for(lambda: _router(pol, "bad")["status"] == "reachable" and _router(pol, "good")["status"] == "reachable",
             10, "both routers reachable")
    proc = psutil.Process(pol.proc.pid)
    rss0 = proc.memory_info().rss

    cases: list[tuple[str, Callable[[], None], str]] = [
        ("setpoint_pps a string", lambda: peer.list_reply([{**GOOD, "setpoint_pps": "abc"}]), "setpoint_pps"),
        ("forwarded_pps a list", lambda: peer.list_reply([{**GOOD, "forwarded_pps": [1, 2]}]), "forwarded_pps"),
        ("state an object", lambda: peer.list_reply([{**GOOD, "state": {}}]), "state"),
        ("present a number", lambda: peer.list_reply([{**GOOD, "present": 1}]), "present"),
        ("a VR that is not an object", lambda: peer.list_reply(["vr1"]), "vrs[0]"),
        ("name with a newline", lambda: peer.list_reply([{**GOOD, "vr": "a\nb"}]), "VR name"),
        ("name with NUL", lambda: peer.list_reply([{**GOOD, "vr": "a\x00b"}]), "VR name"),
        ("name with ESC", lambda: peer.list_reply([{**GOOD, "vr": "a\x1b[2Jb"}]), "VR name"),
        ("name of 100,000 characters", lambda: peer.list_reply([{**GOOD, "vr": "v" * 100_000}]), "VR name"),
        ("one VR listed twice", lambda: peer.list_reply([GOOD, GOOD]), "twice"),
        ("5,000 VRs", lambda: peer.list_reply([{**GOOD, "vr": f"v{i}"} for i in range(5000)]), "more than the 4096"),
        ("not JSON", lambda: setattr(peer, "answer", lambda req: [b"\xff garbage"]), "not strict JSON"),
        ("NaN", lambda: setattr(peer, "answer", lambda req: [b'{"v":1,"id":1,"ok":true,"result":{"vrs":[],"x":NaN}}']),
         "not strict JSON"),
        ("duplicate keys", lambda: setattr(peer, "answer", lambda req: [b'{"v":1,"id":1,"ok":true,"ok":true,"result":{}}']),
         "duplicate key"),
        ("no result", lambda: setattr(peer, "answer", lambda req: [b'{"v":1,"id":1,"ok":true}']), "manager-API reply"),
        ("two frames", lambda: setattr(peer, "answer", lambda req: [_ok({"vrs": []}), b"more"]), "2 frame(s)"),
        ("a reply of 12 MB", lambda: setattr(peer, "answer", lambda req: [b" " * (12 << 20) + _ok({"vrs": []})]),
         "no answer"),
        ("nothing at all", lambda: setattr(peer, "answer", lambda req: None), "no answer"),
    ]
    seen_good = _router(pol, "good")["last_seen_unix_s"]
    for what, arrange, expect in cases:
        arrange()
        r = wait_for(lambda: (lambda r: r if r["status"] == "unreachable" and expect in (r["last_error"] or "") else None)(
            _router(pol, "bad")), 10, f"the bad router marked for {what}")
        assert "\n" not in r["last_error"] and "\x00" not in r["last_error"] and len(r["last_error"]) < 1000, what
        # The policer is alive and polices the other router.
        assert pol.proc.poll() is None, what
        h = httpx.get(pol.url + "/health", timeout=2).json()
        assert h["status"] == "ok" and h["engine_running"] and h["unreachable"] == ["bad"], (what, h)
        seen = wait_for(lambda: (lambda s: s if s > seen_good else None)(_router(pol, "good")["last_seen_unix_s"]),
                        5, f"the good router still polled ({what})")
        seen_good = seen
        # Nothing of the bad reply was stored.
        assert [v["name"] for v in pol.get("/vrs", params={"router": "bad"})] == ["vr1"], what
        # Back to a valid reply: reachable again.
        peer.list_reply([GOOD])
        wait_for(lambda: _router(pol, "bad")["status"] == "reachable", 10, f"the bad router back after {what}")
    h = pol.get("/health")
    assert h["bad_replies"] >= len(cases) - 2  # the 12 MB reply and silence are timeouts, not bad replies
    growth_mb = (proc.memory_info().rss - rss0) / 1e6
    print(f"policer RSS growth over the hostile replies: {growth_mb:.1f} MB")
    assert growth_mb < 60
    kinds = [a["kind"] for a in pol.get("/actions", params={"router": "bad", "limit": 1000})]
    assert kinds.count("router_unreachable") == len(cases)


def test_policy_timers_ignore_a_wall_clock_step(tmp_path: Path, peer: Peer) -> None:
    wall = [1_700_000_000.0]
    mono = [1000.0]
    store = Store(f"sqlite:///{tmp_path / 'p.db'}", clock=lambda: wall[0])
    eng = Engine(store, LinkPool(1.0), clock=lambda: mono[0])
    assert Engine(store, LinkPool(1.0)).clock is time.monotonic, "timers must be on a monotonic clock by default"
    try:
        store.add_router("r1", peer.endpoint, 1e6, "on", None, "test")
        store.set_policy("misbehaviour", {"enabled": True, "ratio": 1.5, "min_excess_pps": 5000.0, "hold_s": 1.0,
                                          "restore_hold_s": 5.0, "step_factor": 0.5}, "test")
        store.set_policy("allocation", {"enabled": True, "target_fraction": 0.9, "min_setpoint_pps": 1000.0,
                                        "demand_headroom": 1.2, "hysteresis": 0.1}, "test")
        bad = {**GOOD, "state": "active", "setpoint_pps": 20000.0, "forwarded_pps": 20000.0, "offered_pps": 100000.0}
        peer.list_reply([bad])

        def tick(dt: float) -> None:
            mono[0] += dt
            wall[0] += dt
            eng.run_cycle(wait=True)

        for _ in range(4):
            tick(1.0)
        assert store.get_vr("r1", "vr1")["punishment_level"] >= 1
        peer.list_reply([{**bad, "offered_pps": 20000.0}])
        wall[0] -= 3600.0  # NTP steps the wall clock back an hour
        for _ in range(7):
            tick(1.0)
        assert store.get_vr("r1", "vr1")["punishment_level"] == 0, "restored after restore_hold_s of monotonic time"
        # A timer stored from before a reboot (in the future of the monotonic clock) restarts instead of hanging.
        peer.list_reply([bad])
        for _ in range(2):
            tick(1.0)
        mono[0] = 5.0
        for _ in range(4):
            tick(1.0)
        assert store.get_vr("r1", "vr1")["punishment_level"] >= 1
    finally:
        eng.stop()
        store.close()


def _raw(url: str) -> tuple[str, int]:
    host, port = url.split("//")[1].split(":")
    return host, int(port)


def _complete(resp: bytes) -> bool:
    head_end = resp.find(b"\r\n\r\n")
    if head_end < 0:
        return False
    length = [ln.split(b":")[1] for ln in resp[:head_end].lower().split(b"\r\n") if ln.startswith(b"content-length:")]
    return bool(length) and len(resp) >= head_end + 4 + int(length[0])


def _send_stream(url: str, head: bytes, chunk: bytes, total: int, deadline_s: float) -> tuple[bytes, int, float]:
    """Send ``head`` then ``chunk`` repeatedly up to ``total`` bytes; returns (response, bytes sent, seconds)."""
    t0 = time.monotonic()
    s = socket.create_connection(_raw(url), timeout=deadline_s)
    sent = 0
    resp = b""
    try:
        s.sendall(head)
        s.setblocking(False)
        while sent < total and time.monotonic() - t0 < deadline_s:
            try:
                resp += s.recv(65536)
                if resp:
                    break
            except BlockingIOError:
                pass
            try:
                sent += s.send(chunk)
            except BlockingIOError:
                time.sleep(0.001)
            except (BrokenPipeError, ConnectionResetError):
                break
        s.setblocking(True)
        s.settimeout(max(0.5, deadline_s - (time.monotonic() - t0)))
        try:
            while not _complete(resp):
                b = s.recv(65536)
                if not b:
                    break
                resp += b
                head_end = resp.find(b"\r\n\r\n")
                if head_end >= 0:
                    length = [ln.split(b":")[1] for ln in resp[:head_end].lower().split(b"\r\n")
                              if ln.startswith(b"content-length:")]
                    if length and len(resp) >= head_end + 4 + int(length[0]) or len(resp) > 4096:
                        break
        except (socket.timeout, ConnectionResetError):
            pass
    finally:
        s.close()
    return resp, sent, time.monotonic() - t0


def _health_ms(c: httpx.Client) -> float:
    t0 = time.perf_counter()
    assert c.get("/health").status_code == 200
    return (time.perf_counter() - t0) * 1000


@pytest.mark.exclusive  # times the refusals
def test_http_input_is_bounded(make_policer: Any) -> None:
    pol = make_policer(period_s=0.5)
    proc = psutil.Process(pol.proc.pid)
    rss0 = proc.memory_info().rss
    chunk = b"a" * 65536
    results: dict[str, Any] = {}
    slow: list[float] = []
    stop = threading.Event()

    hc = httpx.Client(base_url=pol.url, timeout=5)

    def probe() -> None:
        while not stop.is_set():
            slow.append(_health_ms(hc))
            time.sleep(0.02)

    _health_ms(hc)  # warm up the client
    t = threading.Thread(target=probe)
    t.start()
    try:
        # A 100 MB header without a token.
        head = b"GET /routers HTTP/1.1\r\nHost: x\r\nX-Big: "
        results["header"] = _send_stream(pol.url, head, chunk, 100 << 20, 10)
        # A 200 MB body with a token, announced by Content-Length.
        head = (f"POST /networks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {200 << 20}\r\n\r\n").encode()
        results["body"] = _send_stream(pol.url, head, chunk, 200 << 20, 10)
        # A 200 MB body with a token, chunked (no length announced): counted as it streams.
        head = (f"POST /networks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n").encode()
        results["chunked"] = _send_stream(pol.url, head, b"10000\r\n" + chunk + b"\r\n", 200 << 20, 10)
    finally:
        stop.set()
        t.join()
    growth_mb = (proc.memory_info().rss - rss0) / 1e6
    for what, (resp, sent, dt) in results.items():
        status = resp.split(b"\r\n", 1)[0]
        print(f"{what}: {status!r} after {sent / 1e6:.1f} MB sent, {dt:.2f} s")
        assert dt < 5, (what, resp[:200], sent)
        assert sent < 20 << 20, f"{what}: {sent} bytes were accepted before the refusal"
        assert len(resp) < 4096, f"{what}: the reply echoes the input"
    assert results["header"][0].split(b" ")[1] in (b"400", b"431")
    assert results["body"][0].startswith(b"HTTP/1.1 413")
    assert results["chunked"][0].startswith(b"HTTP/1.1 413")
    print(f"RSS growth {growth_mb:.1f} MB; /health max {max(slow):.1f} ms over {len(slow)} probes")
    assert growth_mb < 50
    assert max(slow) < 300 and sorted(slow)[len(slow) // 2] < 50
    assert _health_ms(hc) < 100
    hc.close()
    # A body under the limit but invalid: the 422 never echoes it.
    big = "x" * 60_000
    r = pol.http.post("/networks", json={"name": big, "description": big[:400]})
    assert r.status_code == 422 and big[:100] not in r.text and len(r.content) < 2048, r.text[:300]
    r = pol.http.post("/networks", json={"name": "ok", big: 1})
    assert r.status_code == 422 and big[:100] not in r.text and len(r.content) < 2048, r.text[:300]
    # Strict JSON: duplicate keys, NaN, deep nesting are refused (422, not 500 or last-key-wins).
    for body in (b'{"name": "a", "name": "b"}', b'{"name": "a", "description": NaN}', b"[" * 30_000 + b"]" * 30_000):
        r = pol.http.post("/networks", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 422, (body[:40], r.status_code, r.text[:300])
    assert pol.get("/networks") == []
    assert pol.proc.poll() is None


def test_health_tells_an_anonymous_caller_only_the_status(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from xtc.policer.api import create_app
    from xtc.policer.config import PolicerConfig

    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    store.add_router("secret-router", "tcp://127.0.0.1:1", 1e5, "auto", None, "test")
    store.set_router_status("secret-router", "unreachable", "down", seen=False)
    c = TestClient(create_app(PolicerConfig(tokens=frozenset({TOKEN}), protect_reads=True), store))
    for headers in ({}, {"Authorization": "Bearer wrong-token-0000000000"}, {"Authorization": "Basic eDp5"}):
        r = c.get("/health", headers=headers)
        assert r.status_code == 200 and r.json() == {"status": "ok"}, (headers, r.text)
    full = c.get("/health", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert full["routers"] == 1 and full["unreachable"] == ["secret-router"]
    # Reads open: everyone sees the details.
    c2 = TestClient(create_app(PolicerConfig(tokens=frozenset({TOKEN})), store))
    assert c2.get("/health").json()["unreachable"] == ["secret-router"]
    store.close()


def test_loose_request_semantics_are_refused(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from xtc.policer.api import create_app
    from xtc.policer.config import PolicerConfig

    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    c = TestClient(create_app(PolicerConfig(tokens=frozenset({TOKEN})), store))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    store.add_router("r1", "tcp://127.0.0.1:1", 1e5, "auto", None, "test")
    store.record_poll("r1", [{"vr": "vr1", "state": "inactive"}])
    for sp in (5e-324, 0.5, 1e300):
        r = c.put("/vrs/r1/vr1/setpoint", json={"setpoint_pps": sp}, headers=auth)
        assert r.status_code == 422, (sp, r.text)
    assert c.put("/vrs/r1/vr1/setpoint", json={"setpoint_pps": 1}, headers=auth).status_code == 200
    r = c.put("/vrs/r1/vr1/setpoint", content=b'{"setpoint_pps": 5000, "setpoint_pps": 9000}',
              headers={**auth, "Content-Type": "application/json"})
    assert r.status_code == 422 and "duplicate key" in r.json()["detail"][0]["msg"], r.text
    for q in ({"limit": "1.0"}, {"after_id": "1e3"}, {"limit": "true"}):
        assert c.get("/actions", params=q).status_code == 422, q
    r = c.post("/routers", json={"name": "r9", "endpoint": "tcp://h:1", "capacity_pps": 1e-300}, headers=auth)
    assert r.status_code == 422
    assert "input" not in json.dumps(r.json())
    assert store.get_vr("r1", "vr1")["manual_setpoint_pps"] == 1
    store.close()


def test_files_are_private(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import xtc.service.curve
    from xtc.cli import main
    from xtc.policer.config import PolicerConfigError, loads_config

    # Database files: 0600, with their WAL and shared-memory files.
    os.umask(0o022)
    s = Store(f"sqlite:///{tmp_path / 'p.db'}")
    s.audit("x", "test")
    for f in ("p.db", "p.db-wal", "p.db-shm"):
        assert (tmp_path / f).stat().st_mode & 0o777 == 0o600, f
    s.close()
    # keygen: the secret key file is private from its creation (even without the chmod after it).
    class _NoChmod:  # the daemon's keygen without its chmod: the file's mode is what it was created with
        chmod = staticmethod(lambda *a, **k: None)

        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

    monkeypatch.setattr(xtc.service.curve, "os", _NoChmod())
    assert main(["policer", "keygen", str(tmp_path / "k"), "p"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert Path(first["secret"]).stat().st_mode & 0o777 == 0o600
    assert Path(first["public"]).stat().st_mode & 0o777 == 0o644
    # ... and an existing pair is not overwritten without --force.
    assert main(["policer", "keygen", str(tmp_path / "k"), "p"]) == 1
    assert "already exist" in capsys.readouterr().err
    assert first["public_key"] in Path(first["public"]).read_text()
    assert main(["policer", "keygen", str(tmp_path / "k"), "p", "--force"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["public_key"] != first["public_key"]
    assert Path(second["secret"]).stat().st_mode & 0o777 == 0o600
    # A tokens file others can read is refused.
    tf = tmp_path / "tokens"
    tf.write_text(TOKEN + "\n")
    tf.chmod(0o644)
    with pytest.raises(PolicerConfigError, match="chmod o-rw"):
        loads_config(f'[auth]\ntokens_file = "{tf}"\n', env={})
    tf.chmod(0o600)
    assert loads_config(f'[auth]\ntokens_file = "{tf}"\n', env={}).tokens == {TOKEN}


def test_serve_access_log_logs_requests(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    cfg = tmp_path / "p.toml"
    cfg.write_text(f'[server]\nport = 0\n[database]\nurl = "sqlite:///{tmp_path / "p.db"}"\n')
    proc = subprocess.Popen([sys.executable, "-m", "xtc.cli", "policer", "serve", "-c", str(cfg), "--access-log"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "XTC_POLICER_TOKENS": TOKEN})
    try:
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["url"]
        def healthy() -> bool:  # a probe that times out on a loaded host is not an answer yet: asked again
            try:
                return httpx.get(url + "/health?probe=1", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(healthy, 10, "the policer")
        httpx.get(url + "/routers", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()  # type: ignore[arg-type]
        # (a JSON log record: its msg is uvicorn's access line)
        wait_for(lambda: any('"GET /routers HTTP/1.1" 200' in json.loads(ln).get("msg", "")
                             for ln in lines if ln.startswith("{")), 5, "an access record")
        assert not any(TOKEN in ln for ln in lines)
    finally:
        stop_process(proc)

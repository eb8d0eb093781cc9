"""/docs and /redoc render offline: a real headless Chromium against a real ``xtc policer serve``.

Every asset must come from the policer itself.  Chromium's proxy is a local recorder that answers
nothing: loopback requests bypass it (Chromium's default), so any request it records is one that
would have left the machine (a CDN script, a web font); the test fails on any, except those of
Chromium's own services (:data:`BROWSER_OWN_HOSTS`), which the page does not cause.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import pytest

from procs import stop_process
from xtc_lab.policer_bench import start_policer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], capture_output=True, timeout=600)
        found = shutil.which("chromium")
        if found:
            return found
    pytest.skip("no headless browser: Debian's chromium is not installed and could not be "
                "(apt-get install -y chromium as root; scripts/bootstrap.sh does)")


class _Recorder:
    """A proxy that records the first line of every request sent to it and closes the connection.

    A connection that the browser closes without sending a byte (a speculative preconnect it gave
    up, seen with Chromium 156) asks for nothing from anywhere: it is counted in :attr:`empty`, not
    recorded as a request.  One that stays open without a request line is recorded.
    """

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.seen: list[str] = []
        self.empty = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with c:
                c.settimeout(2)
                try:
                    head = c.recv(4096)
                    if head:
                        self.seen.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
                    else:
                        self.empty += 1
                except OSError:
                    self.seen.append("(connection without a request line)")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, url = start_policer(tmp_path_factory.mktemp("docs"), secrets.token_urlsafe(24))
    try:
        yield url
    finally:
        stop_process(proc)


def _dom(url: str, tmp: Path) -> tuple[str, list[str]]:
    chromium = _chromium()
    rec = _Recorder()
    try:
        out = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
             "--no-pings", "--disable-domain-reliability", "--disable-client-side-phishing-detection",
             "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,Translate",
             f"--user-data-dir={tmp / 'profile'}", f"--proxy-server=http://127.0.0.1:{rec.port}",
             "--virtual-time-budget=15000", "--dump-dom", url],
            capture_output=True, text=True, timeout=120)
    finally:
        rec.close()
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout, [r for r in rec.seen if _host(r) not in BROWSER_OWN_HOSTS]


#: Chromium's own services, which it calls whatever the page (component updates, sign-in, autofill) despite
#: --disable-component-update; never where a page's script, style or font comes from.
BROWSER_OWN_HOSTS = frozenset({"update.googleapis.com", "accounts.google.com", "clients2.google.com",
                               "content-autofill.googleapis.com"})


def _host(request_line: str) -> str:
    """The host a proxied request goes to ("CONNECT h:443 ..." or "GET http://h/... ...")."""
    parts = request_line.split(" ")
    target = parts[1] if len(parts) > 1 else ""
    return target.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]


def _operation_ids() -> list[str]:
    doc = json.loads((ROOT / "docs" / "policer-openapi.json").read_text())
    return [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]


def test_swagger_ui_renders_every_operation_offline(served: str, tmp_path: Path) -> None:
    dom, left = _dom(served + "/docs", tmp_path)
    assert left == [], f"requests left localhost: {left}"
    ids = _operation_ids()
    assert len(ids) >= 20
    # Swagger UI renders each operation as a block with id "operations-<tag>-<operationId>".
    missing = [i for i in ids if f"-{i}\"" not in dom]
    assert missing == [], f"operations not rendered by Swagger UI: {missing}; DOM starts {dom[:500]!r}"


def test_redoc_renders_the_operations_offline(served: str, tmp_path: Path) -> None:
    dom, left = _dom(served + "/redoc", tmp_path)
    assert left == [], f"requests left localhost: {left}"
    # ReDoc anchors each operation at "operation/<operationId>".
    missing = [i for i in _operation_ids() if f"operation/{i}" not in dom]
    assert missing == [], f"operations not rendered by ReDoc: {missing}; DOM starts {dom[:500]!r}"

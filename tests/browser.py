"""A real headless Chromium for the tests that render a page (the policer's /docs and /redoc, the
docs site), with a proxy that records every request that would have left the machine.

Chromium's proxy is a local recorder that answers nothing; loopback requests bypass it (Chromium's
default), so any request it records is one the page would have sent off the machine (a CDN script,
a web font). Chromium's own services (:data:`BROWSER_OWN_HOSTS`) are left out: the page does not
cause them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest

#: Chromium's own services, which it calls whatever the page (component updates, sign-in, autofill)
#: despite --disable-component-update; never where a page's script, style or font comes from.
BROWSER_OWN_HOSTS = frozenset({"update.googleapis.com", "accounts.google.com", "clients2.google.com",
                               "content-autofill.googleapis.com"})


def chromium() -> str:
    """Debian's chromium (installed here as root if missing), or skip the test with the reason."""
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


class Recorder:
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


def request_host(request_line: str) -> str:
    """The host a proxied request goes to ("CONNECT h:443 ..." or "GET http://h/... ...")."""
    parts = request_line.split(" ")
    target = parts[1] if len(parts) > 1 else ""
    return target.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]


def dump_dom(url: str, tmp: Path, virtual_time_ms: int = 15000) -> tuple[str, list[str]]:
    """The DOM of ``url`` after ``virtual_time_ms`` of the page's time in headless Chromium, and the
    requests that would have left the machine (first lines, Chromium's own services left out)."""
    exe = chromium()
    rec = Recorder()
    try:
        out = subprocess.run(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
             "--no-pings", "--disable-domain-reliability", "--disable-client-side-phishing-detection",
             "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,Translate",
             f"--user-data-dir={tmp / 'profile'}", f"--proxy-server=http://127.0.0.1:{rec.port}",
             f"--virtual-time-budget={virtual_time_ms}", "--dump-dom", url],
            capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp)})
    finally:
        rec.close()
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout, [r for r in rec.seen if request_host(r) not in BROWSER_OWN_HOSTS]

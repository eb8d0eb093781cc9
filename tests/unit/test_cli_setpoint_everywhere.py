"""Every CLI that takes a setpoint reads it with one parser (xtc.service.cli.parse_setpoint): the
policer's client sends over HTTP exactly the packets/s `xtc ctl` would (32.3k is 32300, not the
binary float 32299.999999999996)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from xtc.cli import main


class _Recorder(BaseHTTPRequestHandler):
    bodies: list[Any] = []

    def do_PUT(self) -> None:  # noqa: N802 (http.server's name)
        n = int(self.headers.get("Content-Length") or 0)
        type(self).bodies.append((self.path, json.loads(self.rfile.read(n))))
        out = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *_a: Any) -> None:
        pass


@pytest.mark.parametrize("text, pps", [("32.3k", 32300.0), ("0.7m", 700_000.0), ("1.1k", 1100.0), ("20000", 20000.0)])
def test_the_policer_client_sends_the_setpoint_as_written(text: str, pps: float,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _Recorder.bodies = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        assert main(["policer", "setpoint", "--url", url, "r1", "v1", text]) == 0
    finally:
        srv.shutdown()
        srv.server_close()
    capsys.readouterr()
    assert _Recorder.bodies == [("/vrs/r1/v1/setpoint", {"setpoint_pps": pps})]


@pytest.mark.parametrize("argv", [["policer", "setpoint", "--url", "http://127.0.0.1:9", "r1", "v1", "32.3kk"]])
def test_a_bad_setpoint_is_refused_before_anything_is_sent(argv: list[str]) -> None:
    with pytest.raises(SystemExit, match="is not a number of packets/s"):
        main(argv)

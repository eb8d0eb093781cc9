"""The policer's transport, on real ``xtc policer serve`` processes and real sockets: HTTPS with a
certificate the test makes (verified by a real HTTPS client and the CLI's ``--ca-file``), refusal of
plain HTTP beyond loopback, one clear line for each bad certificate or key (at start and in
``check-config``), and the header-read timeout that closes clients that trickle their headers
(issue 51 item 5; issue 45 item 4)."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import TOKEN
from procs import stop_process, wait_for
from xtc.cli import main


def _openssl(*argv: str) -> None:
    subprocess.run(["openssl", *argv], check=True, capture_output=True, timeout=30)


def _cert(d: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost (its own CA) and its key (mode 0600)."""
    cert, key = d / f"{name}.crt", d / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
             "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost")
    key.chmod(0o600)
    return cert, key


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if subprocess.run(["which", "openssl"], capture_output=True).returncode != 0:
        pytest.skip("the openssl binary is not installed (apt-get install openssl)")
    d = tmp_path_factory.mktemp("certs")
    cert, key = _cert(d, "policer")
    other_cert, other_key = _cert(d, "other")
    return {"cert": cert, "key": key, "other_key": other_key, "dir": d}


def _config(tmp: Path, server: str) -> Path:
    cfg = tmp / "policer.toml"
    cfg.write_text(f'schema = "xtc-policer/1"\n[server]\nport = 0\n{server}\n'
                   f'[database]\nurl = "sqlite:///{tmp / "policer.db"}"\n[engine]\nperiod_s = 5.0\n')
    return cfg


def _serve(cfg: Path, *extra: str) -> tuple[subprocess.Popen, str | None, str]:
    """``xtc policer serve``: the process, the URL it announces (None: it did not start), its stderr
    so far when it did not start."""
    env = {**os.environ, "XTC_POLICER_TOKENS": TOKEN}
    env.pop("XTC_POLICER_DB_URL", None)
    err = cfg.parent / "serve.err"
    with open(err, "wb") as e:
        p = subprocess.Popen([sys.executable, "-m", "xtc.cli", "policer", "serve", "-c", str(cfg), *extra],
                             stdout=subprocess.PIPE, stderr=e, env=env, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line:
        p.wait(10)
        return p, None, err.read_text()
    return p, json.loads(line)["url"], ""


def _ready(url: str, verify: Any = True) -> None:
    errors: list[httpx.HTTPError] = []

    def healthy() -> bool:
        try:
            return httpx.get(url + "/health", verify=verify, timeout=2).status_code == 200
        except httpx.HTTPError as e:
            errors.append(e)
            return False

    wait_for(healthy, 15, lambda: f"{url}/health to answer 200 (last error: {errors[-1] if errors else None!r})")


def _check_config(capsys: pytest.CaptureFixture[str], cfg: Path) -> tuple[int, str, str]:
    """``xtc policer check-config --json``: (status, stdout, stderr)."""
    rc = main(["policer", "check-config", "--json", str(cfg)])
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------------------------- HTTPS
def test_https_with_a_verified_client_and_the_cli(certs: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Two API worker processes: each loads the certificate (the supervisor only checks it).
    cfg = _config(tmp_path, f'workers = 2\ntls_certificate_file = "{certs["cert"]}"\ntls_key_file = "{certs["key"]}"')
    p, url, err = _serve(cfg)
    try:
        assert url is not None and url.startswith("https://127.0.0.1:"), err
        ca = ssl.create_default_context(cafile=str(certs["cert"]))
        _ready(url, ca)
        with httpx.Client(base_url=url, verify=ca, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
            r = c.post("/networks", json={"name": "gold"})
            assert r.status_code == 201, r.text
            assert c.get("/networks/gold").json()["name"] == "gold"
        # Without the CA the client refuses the certificate; plain HTTP gets no HTTP answer.
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(url + "/health", timeout=5)
        with pytest.raises(httpx.HTTPError):
            httpx.get(url.replace("https://", "http://") + "/health", timeout=5)
        # The CLI client, with --ca-file (and without: it fails with one line).
        tf = tmp_path / "token"
        tf.write_text(TOKEN + "\n")
        monkeypatch.delenv("XTC_POLICER_CA_FILE", raising=False)
        rc = main(["policer", "sla", "--url", url, "--ca-file", str(certs["cert"]), "--token-file", str(tf),
                   "gold", "--min", "10", "--max", "20"])
        assert rc == 0
        assert json.loads(capsys.readouterr().out)["sla"] == {"min_pps": 10.0, "max_pps": 20.0, "weight": 1.0}
        assert main(["policer", "networks", "--url", url]) == 3
        assert "CERTIFICATE_VERIFY_FAILED" in capsys.readouterr().err
        monkeypatch.setenv("XTC_POLICER_CA_FILE", str(certs["cert"]))
        assert main(["policer", "networks", "--url", url]) == 0
        assert [n["name"] for n in json.loads(capsys.readouterr().out)] == ["gold"]
        assert main(["policer", "networks", "--url", url, "--ca-file", str(tmp_path / "nope.pem")]) == 2
        err = capsys.readouterr().err
        assert "--ca-file" in err and "nope.pem" in err and len(err.strip().splitlines()) == 1
    finally:
        stop_process(p)


def test_plain_http_beyond_loopback_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(tmp_path, 'host = "0.0.0.0"')
    rc, _, err = _check_config(capsys, cfg)
    assert rc == 1 and "'server.host'" in err and "allow_plain_http" in err, err
    p, url, err = _serve(cfg)
    assert url is None and p.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("xtc policer: "), err
    assert "'server.host'" in err and "clear text" in err
    # --host on the command line is checked as well (the file's own address is loopback).
    p, url, err = _serve(_config(tmp_path, 'host = "127.0.0.1"'), "--host", "::")
    assert url is None and p.returncode == 2 and "'server.host'" in err, err
    # Said explicitly, it is accepted.
    cfg = _config(tmp_path, 'host = "0.0.0.0"\nallow_plain_http = true')
    rc, out, _ = _check_config(capsys, cfg)
    assert rc == 0 and json.loads(out)["allow_plain_http"] is True
    # Loopback needs nothing.
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        assert _check_config(capsys, _config(tmp_path, f'host = "{host}"'))[0] == 0, host


def _bad_tls(certs: dict[str, Path], tmp: Path) -> dict[str, tuple[str, str, str]]:
    """case -> (server table lines, the key the error names, the file it names)."""
    cert, key = str(certs["cert"]), str(certs["key"])
    loose = tmp / "loose.key"
    loose.write_bytes(certs["key"].read_bytes())
    loose.chmod(0o644)
    garbage = tmp / "garbage.crt"
    garbage.write_text("not a certificate\n")
    missing = str(tmp / "missing.crt")
    # A directory cannot be read as a file, whoever runs the test (root reads a mode-000 file).
    unreadable = tmp / "unreadable.key"
    unreadable.mkdir()
    t = 'tls_certificate_file = "{}"\ntls_key_file = "{}"'
    return {
        "missing certificate": (t.format(missing, key), "server.tls_certificate_file", missing),
        "unreadable key": (t.format(cert, unreadable), "server.tls_key_file", str(unreadable)),
        "not a certificate": (t.format(garbage, key), "server.tls_certificate_file", str(garbage)),
        "key of another certificate": (t.format(cert, certs["other_key"]), "server.tls_key_file",
                                       str(certs["other_key"])),
        "key readable by others": (t.format(cert, loose), "server.tls_key_file", str(loose)),
        "certificate without key": (f'tls_certificate_file = "{cert}"', "server.tls_key_file",
                                    "server.tls_certificate_file"),
    }


def test_bad_certificate_or_key_is_one_line_naming_the_file(certs: dict[str, Path], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    cases = _bad_tls(certs, tmp_path)
    for case, (server, key, named) in cases.items():
        rc, _, err = _check_config(capsys, _config(tmp_path, server))
        assert rc == 1, case
        assert len(err.strip().splitlines()) == 1 and f"'{key}'" in err and named in err, (case, err)
        assert "Traceback" not in err
    # At start: the same line, and nothing served.
    for case in ("key of another certificate", "key readable by others"):
        server, key, named = cases[case]
        p, url, err = _serve(_config(tmp_path, server))
        assert url is None and p.returncode == 2, (case, err)
        assert len(err.strip().splitlines()) == 1 and f"'{key}'" in err and named in err, (case, err)


# ------------------------------------------------------------------------ header-read timeout
def _closed(s: socket.socket) -> bytes | None:
    """What the server sent before closing ``s``, or None while it is open."""
    try:
        data = s.recv(4096, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return None
    except ConnectionResetError:
        return b"<reset>"
    if not data:
        return b"<closed>"
    rest = b""
    s.settimeout(1)
    try:
        while chunk := s.recv(4096):
            rest += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data + rest


@pytest.mark.exclusive
def test_trickling_clients_are_timed_out_while_others_are_served(tmp_path: Path) -> None:
    timeout_s = 1.0
    p, url, err = _serve(_config(tmp_path, f"header_timeout_s = {timeout_s}"))
    try:
        assert url is not None, err
        _ready(url)
        port = int(url.rsplit(":", 1)[1])
        t0 = time.monotonic()
        tricklers = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        silent = socket.create_connection(("127.0.0.1", port))  # opens and sends nothing
        for s in tricklers:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        closed_after: dict[int, float] = {}
        said: dict[int, bytes] = {}
        served = 0
        with httpx.Client(base_url=url, timeout=5) as c:
            while len(closed_after) < len(tricklers) + 1 and time.monotonic() - t0 < 6 * timeout_s:
                for i, s in enumerate([*tricklers, silent]):
                    if i in closed_after:
                        continue
                    got = _closed(s)
                    if got is not None:
                        closed_after[i], said[i] = time.monotonic() - t0, got
                    elif s is not silent:
                        try:
                            s.sendall(b"a")  # one byte of the header every 0.1 s
                        except OSError:
                            closed_after[i], said[i] = time.monotonic() - t0, b"<send failed>"
                assert c.get("/health").status_code == 200  # a normal client is served meanwhile
                served += 1
                time.sleep(0.1)
        assert len(closed_after) == len(tricklers) + 1, f"still open after {6 * timeout_s} s: {closed_after}"
        assert all(timeout_s * 0.9 <= t <= timeout_s * 3 for t in closed_after.values()), closed_after
        assert all(b" 408 " in v for v in said.values()), said
        assert served >= 5
        for s in [*tricklers, silent]:
            s.close()
        # A request whose head arrives in time (in pieces) is answered.
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"GET /health HTTP/1.1\r\n")
            time.sleep(timeout_s / 2)
            s.sendall(b"Host: x\r\nConnection: close\r\n\r\n")
            s.settimeout(5)
            assert s.recv(4096).startswith(b"HTTP/1.1 200 ")
    finally:
        stop_process(p)


def test_header_timeout_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _check_config(capsys, _config(tmp_path, "header_timeout_s = 0"))
    assert rc == 1 and "'server.header_timeout_s'" in err, err
    rc, out, _ = _check_config(capsys, _config(tmp_path, ""))
    assert rc == 0 and json.loads(out)["header_timeout_s"] == 10.0

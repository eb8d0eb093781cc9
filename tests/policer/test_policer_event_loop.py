"""The API's event loop: uvloop (the policer extra's) when it is installed, asyncio's own otherwise, said
once in the log.  uvloop cuts the HTTP server's CPU per request (docs/design/policer-api.md); a host
without it still serves.  The unit tests look at the configuration uvicorn is given; the process
tests at a real ``xtc policer serve``: which loop's library its API process has loaded, and that it
answers with uvloop made unimportable."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import httpx
import psutil
import pytest
from conftest import TOKEN
from procs import stop_process
from xtc_lab.policer_bench import policer_log, start_policer

from xtc.policer import service
from xtc.policer.config import PolicerConfig


async def _app(scope: dict, receive: object, send: object) -> None:  # never called
    raise AssertionError


def test_the_server_runs_on_uvloop_when_it_is_installed() -> None:
    pytest.importorskip("uvloop")
    assert service._uvicorn(_app, False, PolicerConfig()).config.loop == "uvloop"


def test_without_uvloop_the_server_runs_on_asyncio_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    with caplog.at_level(logging.WARNING, logger="xtc.policer"):
        srv = service._uvicorn(_app, False, PolicerConfig())
    assert srv.config.loop == "asyncio"
    said = [r.getMessage() for r in caplog.records if "uvloop" in r.getMessage()]
    assert len(said) == 1 and "asyncio" in said[0], caplog.text


def _loaded_uvloop(pid: int) -> bool:
    """The process has uvloop's extension module mapped (its loop is uvloop's)."""
    return any("uvloop" in m.path for m in psutil.Process(pid).memory_maps())


def test_a_served_policer_runs_its_api_on_uvloop(tmp_path: Path) -> None:
    pytest.importorskip("uvloop")
    proc, url = start_policer(tmp_path, TOKEN)
    try:
        assert httpx.get(url + "/health", timeout=5).status_code == 200
        assert _loaded_uvloop(proc.pid)
    finally:
        stop_process(proc)


def test_a_served_policer_without_uvloop_serves_on_asyncio(tmp_path: Path) -> None:
    blocker = tmp_path / "no-uvloop"
    blocker.mkdir()
    (blocker / "uvloop.py").write_text('raise ImportError("uvloop made unimportable by the test")\n')
    proc, url = start_policer(tmp_path, TOKEN, extra_env={"PYTHONPATH": str(blocker)})
    try:
        r = httpx.put(url + "/networks/n1/sla", json={"min_pps": 1}, timeout=5)  # a FastAPI answer: 401
        assert r.status_code == 401
        assert httpx.get(url + "/health", timeout=5).status_code == 200
        assert not _loaded_uvloop(proc.pid)
    finally:
        stop_process(proc)
    log = policer_log(tmp_path, 20000)
    assert log.count("uvloop is not installed") == 1, log

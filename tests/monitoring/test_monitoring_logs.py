"""Structured logs of every service, and journald priorities under systemd.

Real processes (the daemon on the sim backend, the policer, the XCo controller) write their stderr to
a file; with ``JOURNAL_STREAM`` naming that file (as systemd names the journal's stream) every line
starts with its syslog priority, ``<N>``, then the JSON record; without it, or naming another file,
the lines are the bare records.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from procs import compile_xco_kernels, daemon_config, stop_process
from xtc.service.logs import StructuredFormatter, journal_priority, on_journal_stream, setup_logging
from xtc.policer.config import PolicerConfigError, loads_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _xco_kernels_compiled() -> None:
    """The XCo controllers these tests start load the scheduler's kernels instead of compiling them."""
    compile_xco_kernels()


def _journal_env(path: Path) -> dict[str, str]:
    st = os.stat(path)
    return {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}


def _lines(path: Path, want: str, timeout_s: float = 20.0) -> list[str]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        lines = path.read_text().splitlines()
        if any(want in ln for ln in lines):
            return lines
        time.sleep(0.05)
    raise AssertionError(f"no {want!r} in {path}:\n{path.read_text()[-2000:]}")


def _record(line: str, priority: int | None) -> dict:
    if priority is not None:
        assert line.startswith(f"<{priority}>{{"), line
        line = line[len(f"<{priority}>"):]
    return json.loads(line)


# ------------------------------------------------------------------------------------- logic


def test_levels_map_to_syslog_priorities() -> None:
    assert [journal_priority(lv) for lv in (logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO,
                                            logging.DEBUG, 5)] == [2, 3, 4, 6, 7, 7]
    rec = logging.LogRecord("xtc.x", logging.WARNING, __file__, 1, "careful %s", ("now",), None)
    assert StructuredFormatter("json", journal=True).format(rec).startswith('<4>{"ts": ')
    assert StructuredFormatter("kv", journal=True).format(rec).startswith("<4>ts=")
    assert StructuredFormatter("json").format(rec).startswith("{")


def test_journal_stream_must_name_the_stream_itself(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.touch()
    b.touch()
    with open(a, "w") as f:
        assert on_journal_stream(f, _journal_env(a))
        assert not on_journal_stream(f, _journal_env(b))  # stderr redirected elsewhere: no prefixes
        assert not on_journal_stream(f, {})
        for bad in ("", "12", "x:1", "1:", ":1"):
            assert not on_journal_stream(f, {"JOURNAL_STREAM": bad}), bad
    assert not on_journal_stream(io.StringIO(), _journal_env(a))  # no file descriptor


def test_setup_logging_prefixes_only_on_the_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "err"
    p.touch()
    root = logging.getLogger()
    old_level = root.level
    try:
        with open(p, "w") as f:
            monkeypatch.setenv("JOURNAL_STREAM", _journal_env(p)["JOURNAL_STREAM"])
            setup_logging("json", "info", f)
            logging.getLogger("xtc.test").error("boom")
            monkeypatch.delenv("JOURNAL_STREAM")
            setup_logging("json", "info", f)
            logging.getLogger("xtc.test").error("plain")
    finally:
        for h in [h for h in root.handlers if getattr(h, "_xtc", False)]:
            root.removeHandler(h)
        root.setLevel(old_level)
    first, second = p.read_text().splitlines()
    assert _record(first, 3)["msg"] == "boom" and _record(second, None)["msg"] == "plain"


def test_the_policer_log_table_is_validated() -> None:
    cfg = loads_config('schema = "xtc-policer/1"\n[log]\nformat = "kv"\nlevel = "warning"\n', env={})
    assert (cfg.log_format, cfg.log_level) == ("kv", "warning")
    assert loads_config('schema = "xtc-policer/1"\n', env={}).log_format == "json"
    for text, key in (('[log]\nformat = "text"\n', "log.format"), ('[log]\nlevel = "loud"\n', "log.level"),
                      ('[log]\nfile = "x"\n', "log.file")):
        with pytest.raises(PolicerConfigError) as e:
            loads_config('schema = "xtc-policer/1"\n' + text, env={})
        assert key in str(e.value), e.value


# ------------------------------------------------------------------------------ real processes


def _policer(tmp: Path, extra_env: dict[str, str], extra_config: str = "") -> list[str]:
    """``xtc policer serve`` without tokens (it warns about that) until its log has the warning."""
    from xtc_lab.policer_bench import start_policer

    log = tmp / "policer.log"
    log.touch()  # start_policer appends its stderr to this file: the same inode
    env = {"XTC_POLICER_TOKENS": "", **{k: v(log) if callable(v) else v for k, v in extra_env.items()}}
    proc, _url = start_policer(tmp, "unused-token-0123456789", extra_env=env, extra_config=extra_config)
    try:
        return _lines(log, "no bearer tokens")
    finally:
        stop_process(proc)


def test_the_policer_logs_json_with_journal_priorities(tmp_path: Path) -> None:
    (tmp_path / "j").mkdir()
    lines = _policer(tmp_path / "j", {"JOURNAL_STREAM": lambda log: _journal_env(log)["JOURNAL_STREAM"]})
    (warn,) = [ln for ln in lines if "no bearer tokens" in ln]
    rec = _record(warn, 4)
    assert rec["level"] == "warning" and rec["logger"] == "xtc.policer" and rec["event"] == "message"
    for ln in lines:  # every line (the workers' and the engine's too) a prefixed JSON record
        assert ln[:1] == "<" and json.loads(ln.split(">", 1)[1])["ts"], ln


def test_the_policer_logs_json_and_honours_its_log_table(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (warn,) = [ln for ln in _policer(tmp_path / "a", {}) if "no bearer tokens" in ln]
    assert _record(warn, None)["level"] == "warning"  # JSON, no prefix: not on the journal
    (tmp_path / "b").mkdir()
    (warn,) = [ln for ln in _policer(tmp_path / "b", {}, '[log]\nformat = "kv"\n') if "no bearer tokens" in ln]
    assert warn.startswith("ts=") and " level=warning logger=xtc.policer " in warn, warn


def _service(cmd: list[str], err: Path, journal: bool, want: str) -> list[str]:
    """Run ``xtc cmd`` with stderr to ``err`` until it logs ``want``, SIGTERM it; its stderr lines."""
    err.touch()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("JOURNAL_STREAM", None)
    if journal:
        env.update(_journal_env(err))
    with open(err, "a") as f:
        proc = subprocess.Popen([sys.executable, "-m", "xtc.cli", *cmd], stdout=subprocess.DEVNULL, stderr=f,
                                env=env)
    try:
        _lines(err, want)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        return err.read_text().splitlines()
    finally:
        stop_process(proc)


def test_the_daemon_and_the_xco_controller_log_with_journal_priorities(tmp_path: Path) -> None:
    d = tmp_path / "daemon"
    d.mkdir()
    daemon_config(d, "sim", """[[sim.vr]]
name = "vr1"
offered_pps = 1000
""", 0.5)
    lines = _service(["daemon", "--config", str(d / "xtcd.toml")], d / "err.log", True, '"event": "started"')
    events = []
    for ln in lines:  # every line: <N>, then the record, N its level's priority
        prefix, _, body = ln.partition(">")
        rec = json.loads(body)
        assert prefix == f"<{journal_priority(getattr(logging, rec['level'].upper()))}", ln
        events.append(rec["event"])
    assert "started" in events and "stopped" in events, events
    x = tmp_path / "xco"
    x.mkdir()
    (x / "topo.toml").write_bytes((ROOT / "tests" / "xco" / "data" / "fig1a.toml").read_bytes())
    (x / "xco.toml").write_text('schema = "xco-controller/1"\ntopology = "topo.toml"\nlisten = "127.0.0.1:0"\n'
                                'state_file = "state.json"\n[metrics]\nenabled = false\n')
    lines = _service(["xco", "controller", "-c", str(x / "xco.toml")], x / "err1.log", True, '"event": "started"')
    started = [ln for ln in lines if '"event": "started"' in ln]
    assert started and _record(started[0], 6)["level"] == "info"
    # The same process without JOURNAL_STREAM: bare JSON records.
    (x / "state.json").unlink(missing_ok=True)
    lines = _service(["xco", "controller", "-c", str(x / "xco.toml")], x / "err2.log", False, '"event": "started"')
    assert all(ln.startswith("{") for ln in lines), lines

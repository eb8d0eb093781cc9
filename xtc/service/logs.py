"""Structured logs for every service: one event per line, as JSON or as ``key=value`` pairs.

Usage::

    log = logging.getLogger("xtc.daemon")
    event(log, logging.INFO, "cap_written", vr="vr1", cap_percent=12.5)

gives ``{"ts": "...", "level": "info", "logger": "xtc.daemon", "event": "cap_written",
"vr": "vr1", "cap_percent": 12.5}`` (format ``json``) or
``ts=... level=info logger=xtc.daemon event=cap_written vr=vr1 cap_percent=12.5`` (``kv``).
Records of other libraries become events named ``message`` with a ``msg`` field.
Logs go to stderr (journald under systemd).  Every XTC service logs through :func:`setup_logging`.

Under systemd, when stderr is the journal's stream (``JOURNAL_STREAM`` names its device and inode,
sd-daemon(3)), each line starts with the syslog priority of its level, ``<N>`` (sd-daemon(3)'s
prefixes: critical ``<2>``, error ``<3>``, warning ``<4>``, info ``<6>``, debug ``<7>``): journald
strips it and files the line at that priority (``journalctl -p warning`` shows warnings and worse).
The prefix rather than a ``PRIORITY`` member of the JSON: journald reads a priority from a stream's
line prefix only; fields such as ``PRIORITY`` it takes from its native protocol alone, and a JSON
member would stay text.  Elsewhere (a terminal, a file, a pipe) lines carry no prefix.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import IO, Any, Mapping

__all__ = ["event", "StructuredFormatter", "setup_logging", "journal_priority", "on_journal_stream"]

_FIELDS = "xtc_fields"


def journal_priority(levelno: int) -> int:
    """The syslog priority of a logging level: critical 2, error 3, warning 4, info 6, debug 7."""
    if levelno >= logging.CRITICAL:
        return 2
    if levelno >= logging.ERROR:
        return 3
    if levelno >= logging.WARNING:
        return 4
    if levelno >= logging.INFO:
        return 6
    return 7


def on_journal_stream(stream: IO[str], env: Mapping[str, str] | None = None) -> bool:
    """True if ``stream`` is the journal's stream systemd connected (``JOURNAL_STREAM`` is
    ``device:inode`` of it: sd-daemon(3)); False without the variable, or when the stream was
    redirected elsewhere (a child's stderr to a file inherits the variable, not the stream)."""
    value = (os.environ if env is None else env).get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep or not dev.isdigit() or not ino.isdigit():
        return False
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return st.st_dev == int(dev) and st.st_ino == int(ino)


def event(logger: logging.Logger, level: int, name: str, **fields: Any) -> None:
    """Log the event ``name`` with ``fields`` (values should be JSON-serialisable)."""
    if logger.isEnabledFor(level):
        logger.log(level, name, extra={_FIELDS: fields})


def _kv_value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v, separators=(",", ":"), default=str)
    s = str(v)
    if not s or any(c.isspace() or c in '"=' for c in s):
        return json.dumps(s)
    return s


class StructuredFormatter(logging.Formatter):
    """Formats records as JSON lines (``fmt="json"``) or ``key=value`` lines (``fmt="kv"``); with
    ``journal``, each line starts with its syslog priority, ``<N>`` (:func:`journal_priority`)."""

    def __init__(self, fmt: str = "json", journal: bool = False):
        super().__init__()
        if fmt not in ("json", "kv"):
            raise ValueError(f"log format must be 'json' or 'kv', got {fmt!r}")
        self.fmt = fmt
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, _FIELDS, None)
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        if fields is None:
            doc["event"] = "message"
            doc["msg"] = record.getMessage()
        else:
            doc["event"] = record.msg
            doc.update(fields)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        if self.fmt == "json":
            line = json.dumps(doc, default=str)
        else:
            line = " ".join(f"{k}={_kv_value(v)}" for k, v in doc.items())
        return f"<{journal_priority(record.levelno)}>{line}" if self.journal else line


def setup_logging(fmt: str, level: str, stream: IO[str] | None = None) -> None:
    """Send every log record to ``stream`` (stderr) in the structured format, at ``level``; with
    journald's priority prefixes when that stream is the journal's (:func:`on_journal_stream`)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_xtc", False):
            root.removeHandler(h)
    stream = stream or sys.stderr
    h = logging.StreamHandler(stream)
    h.setFormatter(StructuredFormatter(fmt, journal=on_journal_stream(stream)))
    h._xtc = True  # type: ignore[attr-defined]
    root.addHandler(h)
    root.setLevel(getattr(logging, level.upper()))

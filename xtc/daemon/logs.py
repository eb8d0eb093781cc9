"""Structured logs for the daemon: one event per line, as JSON or as ``key=value`` pairs.

Usage::

    log = logging.getLogger("xtc.daemon")
    event(log, logging.INFO, "cap_written", vr="vr1", cap_percent=12.5)

gives ``{"ts": "...", "level": "info", "logger": "xtc.daemon", "event": "cap_written",
"vr": "vr1", "cap_percent": 12.5}`` (format ``json``) or
``ts=... level=info logger=xtc.daemon event=cap_written vr=vr1 cap_percent=12.5`` (``kv``).
Records of other libraries become events named ``message`` with a ``msg`` field.
Logs go to stderr (journald under systemd).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import IO, Any

__all__ = ["event", "StructuredFormatter", "setup_logging"]

_FIELDS = "xtc_fields"


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
    """Formats records as JSON lines (``fmt="json"``) or ``key=value`` lines (``fmt="kv"``)."""

    def __init__(self, fmt: str = "json"):
        super().__init__()
        if fmt not in ("json", "kv"):
            raise ValueError(f"log format must be 'json' or 'kv', got {fmt!r}")
        self.fmt = fmt

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
            return json.dumps(doc, default=str)
        return " ".join(f"{k}={_kv_value(v)}" for k, v in doc.items())


def setup_logging(fmt: str, level: str, stream: IO[str] | None = None) -> None:
    """Send every log record to ``stream`` (stderr) in the structured format, at ``level``."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_xtc", False):
            root.removeHandler(h)
    h = logging.StreamHandler(stream or sys.stderr)
    h.setFormatter(StructuredFormatter(fmt))
    h._xtc = True  # type: ignore[attr-defined]
    root.addHandler(h)
    root.setLevel(getattr(logging, level.upper()))

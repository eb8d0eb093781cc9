"""The daemon's state file: JSON, written atomically (temporary file, fsync, rename, fsync dir).

A reader sees either the old or the new file, never a torn one, so a SIGKILL or a power cut at any
moment leaves a usable state.  The content is :meth:`xtc.daemon.core.DaemonCore.to_state`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["StateFileError", "save_state", "read_state"]


class StateFileError(OSError):
    """The state file cannot be read, parsed or written (the message names the path)."""


def save_state(path: str | Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` as JSON to ``path`` atomically.  Raises :class:`StateFileError`."""
    p = Path(path)
    # Compact: json's C encoder serves only documents without indentation (1000 instances: ~15 ms
    # instead of ~100 ms with indent=1).  Sorted keys: the same document gives the same bytes.
    data = json.dumps(doc, sort_keys=True, allow_nan=False, separators=(",", ":")).encode("utf-8")
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, p)
        dfd = os.open(p.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise StateFileError(f"cannot write state file {p}: {e.strerror or e}") from None


def read_state(path: str | Path) -> dict[str, Any] | None:
    """The saved document, or None if there is no state file.  Raises :class:`StateFileError`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise StateFileError(f"cannot read state file {p}: {e}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise StateFileError(f"state file {p} is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise StateFileError(f"state file {p} does not hold a JSON object")
    return doc

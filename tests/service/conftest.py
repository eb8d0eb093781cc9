"""Fixtures of the systemd notification tests: a notification socket (a path, or abstract)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterator

import pytest

from sdnotify import NotifySocket


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[NotifySocket]:
    s = NotifySocket(str(tmp_path / "notify.sock"))
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def abstract_notify_socket() -> Iterator[NotifySocket]:
    s = NotifySocket(f"@xtc-test-notify-{os.getpid()}-{time.monotonic_ns()}")
    try:
        yield s
    finally:
        s.close()

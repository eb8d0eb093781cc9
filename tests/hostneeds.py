"""What a test that builds real kernel objects needs of this host; the test is skipped, with the reason, without it."""

from __future__ import annotations

import os
import shutil

import pytest


def need_root_and_ip(creates: str) -> None:
    """Skip the calling test unless it runs as root and iproute2's ``ip`` is installed.

    Parameters
    ----------
    creates : str
        What the test creates, for the skip reason (``"network namespaces"``).
    """
    if os.geteuid() != 0:
        pytest.skip(f"needs root: creates {creates}")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (ip) is not installed")

"""Bad configuration text gives one error, of its loader's class, naming the key: the assertion that
every configuration's table of bad cases shares (the daemon's, its cgroup backend's, the policer's,
XCo's controller and agent)."""

from __future__ import annotations

from typing import Callable

import pytest

from xtc.validation import DocumentError


def refused(load: Callable[[], object], error: type[DocumentError], key: str, words: str = "") -> DocumentError:
    """``load()`` raises ``error`` about ``key`` whose problem contains ``words``; returns the error."""
    with pytest.raises(error) as ei:
        load()
    e = ei.value
    assert e.key == key, str(e)
    assert words in e.problem, str(e)
    return e

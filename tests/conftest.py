"""Set-up shared by the whole suite, done once before any test runs."""

from __future__ import annotations

import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile XCo's scheduler kernels (numba, cached on disk) once, in the process that runs the
    session (xdist's controller, or the only one), before the tests start.

    On a fresh clone the first XCo controller to start compiles them: about 12 s of CPU on an idle
    host, several times that beside other tests, so a test waiting for its controller's "started"
    event would be timing the compiler.  Compiled here, every controller loads them in under a second.
    """
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller did it
        return
    try:
        from xtc.xco.scheduler import _kernel
    except ImportError:  # numba missing (the pure-Python scheduler): nothing to compile
        return
    _kernel.warm_up()

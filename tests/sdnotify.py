"""For the tests of systemd's notification protocol (tests/service): a stand-in for systemd's
notification socket, a real Unix datagram socket that records what a service sends on it
(``sd_notify(3)``) with the time each message arrived; and the kernel's memory-deny-write-execute
for a service whose unit sets ``MemoryDenyWriteExecute=yes``."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Callable


class NotifySocket:
    """Binds ``path`` (or an abstract address for ``@name``) and records each datagram as
    ``(monotonic_s, {field: value})``; :attr:`address` is the value for ``NOTIFY_SOCKET``."""

    def __init__(self, address: str):
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(b"\0" + address[1:].encode() if address.startswith("@") else address)
        self.sock.settimeout(0.05)
        self.messages: list[tuple[float, dict[str, str]]] = []
        self._stop = False
        self._cv = threading.Condition()
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        while not self._stop:
            try:
                data = self.sock.recv(4096)
            except (socket.timeout, OSError):
                continue
            fields = dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line)
            with self._cv:
                self.messages.append((time.monotonic(), fields))
                self._cv.notify_all()

    def wait_for(self, key: str, timeout_s: float = 30.0, after: int = 0,
                 alive: Callable[[], bool] = lambda: True) -> tuple[int, float, dict[str, str]]:
        """The first message from index ``after`` on that holds ``key``: (index, time, fields)."""
        end = time.monotonic() + timeout_s
        with self._cv:
            while True:
                for i, (t, f) in enumerate(self.messages[after:], after):
                    if key in f:
                        return i, t, f
                left = end - time.monotonic()
                if left <= 0 or not alive():
                    raise AssertionError(f"no {key} notification; got {self.messages}")
                self._cv.wait(min(left, 0.2))

    def with_key(self, key: str) -> list[tuple[float, dict[str, str]]]:
        with self._cv:
            return [(t, f) for t, f in self.messages if key in f]

    def close(self) -> None:
        self._stop = True
        self._t.join(2)
        self.sock.close()


#: Runs ``python -c MDWE_MAIN module args...``: the module as ``__main__`` under the kernel's
#: memory-deny-write-execute (prctl PR_SET_MDWE, Linux >= 6.3), what a unit's
#: ``MemoryDenyWriteExecute=yes`` gives (systemd 252 does it with a seccomp filter).
MDWE_MAIN = """
import ctypes, runpy, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN
    raise SystemExit("PR_SET_MDWE: errno %d" % ctypes.get_errno())
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def kernel_has_mdwe() -> bool:
    """True if this kernel offers PR_SET_MDWE (probed in a child: it cannot be undone)."""
    import subprocess

    code = "import ctypes,sys; sys.exit(ctypes.CDLL(None).prctl(65, 1, 0, 0, 0) != 0)"
    return subprocess.run([sys.executable, "-c", code], timeout=30).returncode == 0


def unit_denies_write_execute(unit: str) -> bool:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "packaging" / unit).read_text()
    return "\nMemoryDenyWriteExecute=yes\n" in text

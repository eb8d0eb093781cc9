"""What the in-process daemon tests share: a settable clock and the configuration text around the
lines a test cares about (state, sockets and nothing else under the test's temporary folder)."""

from __future__ import annotations

from pathlib import Path


class Clock:
    """A monotonic clock that stands still until the test moves ``t`` (seconds, from 1000)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def daemon_toml(tmp_path: Path | str, daemon: str = "", tables: str = "") -> str:
    """A daemon configuration: its state and manager sockets under ``tmp_path``, metrics off.

    Parameters
    ----------
    tmp_path : Path or str
        Folder of the state directory and of the IPC sockets.
    daemon : str
        More lines of the ``[daemon]`` table (``backend = "sim"``...).
    tables : str
        Tables after the fixed ones (``[[sim.vr]]``...).
    """
    return f"""schema = "xtc-daemon/1"
[daemon]
{daemon}
state_dir = "{tmp_path}/state"
[manager]
endpoint = "ipc://{tmp_path}/m.sock"
pub_endpoint = "ipc://{tmp_path}/p.sock"
[metrics]
enabled = false
{tables}
"""

"""The lab's libvirtd is not stopped while QEMU domains run on it (one daemon serves lxc:/// and qemu:///system)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from xtc_lab.lab.libvirtd import Libvirtd, LibvirtdPaths, process_start_time


def _daemon_of(tmp_path: Path) -> tuple[Libvirtd, subprocess.Popen[bytes]]:
    stand_in = subprocess.Popen(["sleep", "60"])  # plays the libvirtd the lab started
    paths = LibvirtdPaths(state_dir=tmp_path, run_dir=tmp_path / "run", log_dir=tmp_path / "log")
    d = Libvirtd(paths=paths, probe=lambda _uri: None)
    paths.state_file.write_text(json.dumps({"libvirtd": {"pid": stand_in.pid, "start": process_start_time(stand_in.pid)}}))
    return d, stand_in


def test_a_running_qemu_domain_keeps_the_lxc_daemon(tmp_path: Path) -> None:
    d, stand_in = _daemon_of(tmp_path)
    try:
        asked: list[str] = []

        def active(uri: str) -> int:
            asked.append(uri)
            return 1 if uri == "qemu:///system" else 0

        assert d.stop_if_unused(active) == []
        assert stand_in.poll() is None
        assert asked == ["lxc:///", "qemu:///system"]

        def unserved(uri: str) -> int:  # no QEMU driver: nothing of it runs
            if uri == "qemu:///system":
                raise RuntimeError("no qemu driver")
            return 0

        assert d.stop_if_unused(unserved) == ["libvirtd"]
        assert stand_in.wait(timeout=10) is not None
    finally:
        if stand_in.poll() is None:
            stand_in.kill()
            stand_in.wait()

"""``xtc lab run`` as the libvirt tests run it: the command, what a finished run must have left, and
what it must not (a lab's links, namespaces and domains, all named with the run's prefix)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def leftovers(prefix: str) -> list[str]:
    """Links, network namespaces and LXC domains still named ``<prefix>-...``."""
    from pyroute2 import netns

    links = [p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(prefix + "-")]
    spaces = [n for n in netns.listnetns() if n.startswith(prefix + "-")]
    out = subprocess.run(["virsh", "-c", "lxc:///", "list", "--all", "--name"], capture_output=True, text=True,
                         check=False)
    return links + spaces + [d for d in out.stdout.split() if d.startswith(prefix + "-")]


def run_xtc(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``xtc ARGV`` in a child Python (unbuffered), its output captured."""
    return subprocess.run([sys.executable, "-m", "xtc.cli", *argv], capture_output=True, text=True,
                          timeout=timeout_s, check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def lab_run_result(r: subprocess.CompletedProcess[str], out: Path, experiment: str) -> dict[str, Any]:
    """Check a finished ``xtc lab run EXPERIMENT --out OUT`` and return its JSON result.

    It exited 0, its last output line is the summary naming the experiment, it wrote the JSON,
    Markdown and PNG files (more than 200 bytes each), and it removed its lab.
    """
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["experiment"] == experiment
    for ext in ("json", "md", "png"):
        assert (out / f"{experiment}.{ext}").stat().st_size > 200
    res = json.loads((out / f"{experiment}.json").read_text())
    assert not leftovers(res["lab_prefix"])
    return res

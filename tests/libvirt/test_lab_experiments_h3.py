"""``xtc lab run hog --quick`` as a process on a real lab: complete, sane results and no lab left behind.

Not whether the goals are met (a shared 2-core host is noisy) but that the run finishes, its JSON
holds finite numbers for every quantity the report states, the caps it recorded stayed within
1..100% of one CPU, the hog really burnt CPU inside the VR, and the lab it built (domain,
namespaces, bridges, vifs) is gone afterwards.

``xtc lab run`` takes the host's measurement lock itself; do not wrap this test in ``flock``
with the same lock file (it would wait for itself).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.root, pytest.mark.libvirt, pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.mark.experiment  # 55 s: the hog experiment's quick run (docs/results/2026-11-26-lab/hog.md)
def test_hog_quick_runs_and_writes_complete_sane_results(libvirtd: Any, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "xtc.cli", "lab", "run", "hog", "--quick", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=230, check=False,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["experiment"] == "hog"
    for kind in ("json", "png", "md"):
        assert Path(summary["files"][kind]).stat().st_size > 0
    res = json.loads((tmp_path / "hog.json").read_text())

    assert res["quick"] is True and _finite(res["duration_s"])
    for key in ("free_pps", "offered_seen_pps", "setpoint_pps", "fixed_cap_percent", "hog_demand_percent"):
        assert _finite(res[key]) and res[key] > 0, key
    assert 1.0 <= res["fixed_cap_percent"] <= 100.0
    assert res["setpoint_pps"] < res["free_pps"]
    for run in ("xtc", "fixed"):
        r = res["runs"][run]
        for phase in ("before", "during", "after"):
            assert _finite(r[phase]["mean_pps"]) and r[phase]["mean_pps"] > 0 and r[phase]["n"] >= 2, (run, phase)
        for key in ("drop_under_hog", "error_before", "error_under_hog", "error_after", "cap_before_percent",
                    "cap_under_hog_percent", "lowest_after_hog_on_pps"):
            assert _finite(r[key]), (run, key)
        for key in ("recovery_periods_hog_on", "recovery_periods_hog_off"):
            assert r[key] is None or (isinstance(r[key], int) and r[key] >= 0), (run, key)
        assert r["hog"]["cgroup"].startswith("/sys/fs/cgroup") and res["lab_prefix"] in r["hog"]["cgroup"]
        assert r["hog"]["cpu_percent"] > 0.3 * res["hog_demand_percent"], "the hog burnt (almost) nothing"
        series = next(iter(r["recording"]["series"].values()))
        assert len(series["t_s"]) >= 10
        caps = [c for c in series["cap_percent"] if c is not None]
        assert caps and all(1.0 <= c <= 100.0 for c in caps), (run, min(caps), max(caps))
        assert all(_finite(x) and x >= 0 for x in series["forwarded_pps"])
    fixed_caps = {c for c in next(iter(res["runs"]["fixed"]["recording"]["series"].values()))["cap_percent"] if c}
    assert max(fixed_caps) - min(fixed_caps) < 0.01  # Fixed Cap: one cap throughout
    assert {g["goal"] for g in res["goals"]} and all(isinstance(g["met"], bool) for g in res["goals"])

    _assert_lab_removed(res["lab_prefix"], libvirtd)


def _assert_lab_removed(prefix: str, libvirtd: Any) -> None:
    import libvirt
    from pyroute2 import netns

    stem = prefix + "-"
    assert not [n for n in netns.listnetns() if n.startswith(stem)]
    assert not [p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(stem)]
    conn = libvirt.open(libvirtd.uri)
    try:
        assert not [d.name() for d in conn.listAllDomains() if d.name().startswith(stem)]
    finally:
        conn.close()
    assert not (Path("/run/xtc/labs") / prefix).exists()
    leftover = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if b"xtc_lab.lab.hog" in (p / "cmdline").read_bytes():
                    leftover.append(int(p.name))
            except OSError:
                pass
    assert not leftover, f"hog processes left: {leftover}"

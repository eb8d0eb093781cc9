"""``xtc lab run tracking --quick`` and the real ``xtc demo`` as processes, on a real lab.

Both build their own lab (LXC VRs, namespaces, bridges), run the real daemon on real packets and
remove the lab.  Checked: the outputs exist and are complete, the measured numbers are finite, the
caps the daemon wrote stayed within 1..100% of one CPU, XTC held the setpoints (within 10%: looser
than the experiment's own 5% goal, because a test must not fail on a noisy shared host), and nothing
with the lab's prefix is left behind.  Both run at whatever rate the host forwards (the setpoints
scale to it); a run disturbed by other work on the host is repeated, up to 3 runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from labruns import lab_run_result, leftovers, run_xtc

pytestmark = [pytest.mark.root, pytest.mark.libvirt, pytest.mark.slow]


def _caps_in_range(series: dict) -> list[float]:
    caps = [c for c in series["cap_percent"] if c is not None]
    assert caps, "no cap was read back"
    assert all(1.0 <= c <= 100.0 for c in caps), caps
    return caps


# Below this the lab itself is broken (a forwarder that does not forward); above it the setpoints
# scale to what the unlimited VR forwards at the time, so a busy host runs the test, never skips it.
MIN_FREE_PPS = 5_000


@pytest.mark.experiment  # 24 s quiet, up to three runs under load: the tracking figure's quick run (the demo below holds two real VRs through the same daemon in the test command)
@pytest.mark.timeout(3 * 150)
def test_lab_run_tracking_quick(libvirtd, tmp_path: Path) -> None:
    # The experiment's setpoints scale to the free rate measured at its start, but the load of a
    # shared host changes during a run: a burst of other work takes the VR's CPU, and when it ends
    # the cap the controller raised meanwhile overshoots until the next periods correct it (seen:
    # +16.5% over an 8 s step).  So a run that misses a setpoint is repeated (up to 3 runs, all
    # recorded and printed) and the tolerance is asserted on the first run that holds them, else
    # on the last: a change of load disturbs a run by chance, a controller that cannot track
    # misses in every run.
    runs = []
    for i in range(3):
        out = tmp_path / f"run{i}"
        res = lab_run_result(run_xtc(["lab", "run", "tracking", "--quick", "--out", str(out)], 140), out, "tracking")
        assert res["free_pps"] >= MIN_FREE_PPS, f"the unlimited VR forwarded only {res['free_pps']:.0f} pps"
        steps = res["controllers"]["xtc"]["steps"]
        runs.append([(s["setpoint_pps"], round(s["mean_pps"]), round(100 * s["rel_error"], 1)) for s in steps])
        print(f"\nrun {i}: free {res['free_pps']:.0f} pps; (setpoint, mean, error %): {runs[-1]}")
        if all(abs(s["rel_error"]) <= 0.10 for s in steps):
            break
    assert len(steps) == 2
    for s in steps:
        assert math.isfinite(s["mean_pps"]) and s["mean_pps"] > 0
        assert abs(s["rel_error"]) <= 0.10, f"setpoint {s['setpoint_pps']}: mean {s['mean_pps']:.0f}; all runs {runs}"
    series = next(iter(res["controllers"]["xtc"]["recording"]["series"].values()))
    caps = _caps_in_range(series)
    assert caps[-1] < 60, "the cap at a 20% setpoint should be well below the unlimited VR's CPU use"
    assert res["goals"] and "XTC's controller" in res["goals"][0]["goal"]
    assert "| xtc |" in (out / "tracking.md").read_text()


@pytest.mark.timeout(3 * 130)
def test_real_demo(libvirtd, tmp_path: Path) -> None:
    # Repeated when a phase misses its setpoint (up to 3 runs, all recorded), asserted on the first
    # run that holds them, else on the last: the same reasoning as the tracking run above.  Phases
    # of 12 s, the mean taken over the last 6 (8 and 4 until 2026-11-24: beside a busy loop the lab's
    # 1 s rates at a steady cap scatter by up to 20%, and a 4 s mean missed by 13-15% in two runs
    # of three).
    runs = []
    for i in range(3):
        out = tmp_path / f"run{i}"
        r = run_xtc(["demo", "--lab-duration-s", "24", "--out", str(out)], 120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "red set" in r.stdout and "blue set" in r.stdout, r.stdout[-1000:]
        res = json.loads((out / "demo.json").read_text())
        assert (out / "demo.png").stat().st_size > 10_000
        assert res["kind"] == "lab"
        assert not leftovers(res["lab_prefix"])
        assert min(res["unlimited_pps"].values()) >= MIN_FREE_PPS, f"unlimited VRs forwarded {res['unlimited_pps']}"
        runs.append({label: [round(100 * p["rel_error"], 1) for p in v["phases"]] for label, v in res["vrs"].items()})
        print(f"\nrun {i}: unlimited {res['unlimited_pps']}; error % per phase {runs[-1]}")
        if all(abs(p["rel_error"]) <= 0.10 for v in res["vrs"].values() for p in v["phases"]):
            break
    for label, v in res["vrs"].items():
        assert [round(p["setpoint_pps"]) for p in v["phases"]] != [], label
        for p in v["phases"]:
            assert abs(p["rel_error"]) <= 0.10, (label, p, runs)
    for s in res["recording"]["series"].values():
        _caps_in_range(s)

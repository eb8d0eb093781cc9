"""``xtc train collect --backend libvirt`` on a real LXC VR that forwards a real UDP stream.

The training tool runs as a separate process, as an operator runs it, against a VR of the lab
(an LXC domain whose only process is the userspace forwarder) while the lab's generator offers
it 100 kp/s of 64-byte UDP.  The VR starts with a scheduler setting that is not libvirt's
default (``vcpu_period`` 50000 us, ``vcpu_quota`` 40000 us), so only an exact restore gives it
back.  Checked: the CSV is a valid sweep with the VR's interfaces and setting in its metadata,
the forwarded rate grows with the cap, the exact setting is back afterwards (also when the
sweep stops on an error or on SIGTERM), and a domain that does not exist fails with a clear
message and no CSV.  The sweep runs on the daemon's own libvirt backend restricted to the domain
(``xtc.training.hosts.libvirt_target``), with the counters the daemon reads (netlink by default).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from procs import wait_for

from xtc.training.fit import cap_levels
from xtc.training.sweep import read_sweep_csv
from xtc_lab.lab.netlab import NetLab
from xtc_lab.lab.traffic import start_udp_stream

pytestmark = [pytest.mark.root, pytest.mark.libvirt, pytest.mark.timeout(150)]

OFFERED_PPS = 100_000
PERIOD_US, QUOTA_US = 50_000, 40_000  # the VR's own setting before the sweep (80% of one CPU)


def collect(lab: NetLab, domain: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "xtc.cli", "train", "collect", "--backend", "libvirt", "--domain", domain,
            "--uri", lab.uri, "--offered-pps", str(OFFERED_PPS), "--quiet", "--out", str(out), *extra]


def setting(lab: NetLab, vr) -> tuple[int, int]:  # noqa: ANN001
    p = lab.domain(vr).schedulerParameters()
    return int(p["vcpu_period"]), int(p["vcpu_quota"])


@pytest.fixture
def lab_vr(vr_lab):  # noqa: ANN001, ANN201
    lab: NetLab = vr_lab(n_vrs=0)
    vr = lab.add_vr(vcpu_period_us=PERIOD_US, vcpu_quota_us=QUOTA_US)
    assert setting(lab, vr) == (PERIOD_US, QUOTA_US)
    return lab, vr


def test_collect_sweeps_a_real_vr_and_gives_back_its_exact_setting(lab_vr, tmp_path: Path) -> None:
    lab, vr = lab_vr
    out = tmp_path / "sweep.csv"
    # The stream outlasts the sweep's time limit and its repeats: a sweep slowed by a busy host (its
    # process start, its samples) must not run past the end of the stream.
    with start_udp_stream(lab, vr, OFFERED_PPS, duration_s=110):
        time.sleep(1.0)
        r = subprocess.run(collect(lab, vr.name, out, "--caps", "5,10,30,100", "--samples", "2", "--settle", "1"),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert setting(lab, vr) == (PERIOD_US, QUOTA_US)

        sweep = read_sweep_csv(out)  # validates the file
        assert len(sweep) == 4 * 3
        md = sweep.metadata
        assert md["backend"] == "libvirt" and md["domain"] == vr.name and md["cap_kind"] == "lxc"
        assert md["interfaces"].split(",") == list(vr.vifs)  # found in the live domain XML
        assert md["setting_before"] == f"vcpu_period={PERIOD_US} vcpu_quota={QUOTA_US}"
        assert md["offered_pps_source"].startswith("external")
        arr = sweep.arrays()
        offered = arr["measured_offered_pps"]
        print(f"\nmeasured offered pps per sample: {[round(x) for x in offered]}; forwarded {[round(x) for x in arr['forwarded_pps']]}")
        # The stream reached the VR all along: no sample where it stalled, relative to what the
        # generator pushes through this host at the time (a busy host pushes less than the 100 kp/s
        # asked, and the sweep's caps and rates are compared among themselves, at that offered rate).
        assert offered.min() > 0.5 * np.median(offered), offered
        levels = cap_levels(sweep, OFFERED_PPS)
        # The caps recorded are the ones read back from libvirt on the VR's own 50 ms period.
        assert [lv.cap_percent for lv in levels] == [5.0, 10.0, 30.0, 100.0]
        kpps = [lv.mean_kpps for lv in levels]
        assert kpps[0] > 1.0, kpps  # capped, but forwarding
        assert kpps[1] > 1.4 * kpps[0] and kpps[2] > 1.8 * kpps[1], kpps  # ~2x and ~3x on this plant
        # 100% of a CPU forwards more than 30%, when the host has the CPU to give: on a busy host
        # the uncapped VR gets little more than 30% of a core (seen: 65 kp/s against 57), so the pair
        # is measured again, up to twice, and one of the measurements must show it.
        pairs = [(kpps[2], kpps[3])]
        for attempt in range(2):
            if pairs[-1][1] > 1.2 * pairs[-1][0]:
                break
            again = tmp_path / f"again{attempt}.csv"
            r = subprocess.run(collect(lab, vr.name, again, "--caps", "30,100", "--samples", "2", "--settle", "1"),
                               capture_output=True, text=True, timeout=40)
            assert r.returncode == 0, r.stderr
            assert setting(lab, vr) == (PERIOD_US, QUOTA_US)
            pairs.append(tuple(lv.mean_kpps for lv in cap_levels(read_sweep_csv(again), OFFERED_PPS)))
    assert pairs[-1][1] > 1.2 * pairs[-1][0], pairs


def test_collect_without_traffic_stops_at_once_and_restores(lab_vr, tmp_path: Path) -> None:
    lab, vr = lab_vr
    out = tmp_path / "sweep.csv"
    t0 = time.monotonic()
    r = subprocess.run(collect(lab, vr.name, out, "--caps", "5,10,30", "--samples", "5"),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "is the traffic running" in r.stderr and vr.name in r.stderr
    assert time.monotonic() - t0 < 10  # after the first sample, not after the whole sweep
    assert not out.exists()
    assert setting(lab, vr) == (PERIOD_US, QUOTA_US)


def test_sigterm_during_the_sweep_restores_the_exact_setting(lab_vr, tmp_path: Path) -> None:
    lab, vr = lab_vr
    out = tmp_path / "sweep.csv"
    with start_udp_stream(lab, vr, OFFERED_PPS, duration_s=30):
        time.sleep(0.5)
        p = subprocess.Popen(collect(lab, vr.name, out, "--caps", "5,10", "--samples", "20"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            def capped() -> bool:  # the sweep's first cap
                if setting(lab, vr) != (PERIOD_US, QUOTA_US):
                    return True
                assert p.poll() is None, p.communicate()[1]  # the sweep still runs
                return False

            wait_for(capped, 15, "the sweep to set a cap")
            assert setting(lab, vr) == (PERIOD_US, 2_500)  # 5% of the VR's 50 ms period
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=15)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert p.returncode == 128 + signal.SIGTERM, err
    assert not out.exists()
    assert setting(lab, vr) == (PERIOD_US, QUOTA_US)


def test_unknown_domain_fails_cleanly_with_no_csv(lab_vr, tmp_path: Path) -> None:
    lab, vr = lab_vr
    out = tmp_path / "sweep.csv"
    missing = f"{lab.prefix}-nosuch"
    r = subprocess.run(collect(lab, missing, out, "--caps", "5,10"), capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert r.stderr.startswith("error:") and missing in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() and not list(tmp_path.iterdir())
    assert setting(lab, vr) == (PERIOD_US, QUOTA_US)  # the lab's VR was not touched
